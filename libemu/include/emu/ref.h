/*
 * emu/ref.h — the GNU MPFR oracle.
 *
 * An independent implementation of the same maps as emu/round.h and
 * emu/arith.h, built only from MPFR's own rounding machinery (precision p,
 * emin/emax, mpfr_check_range, mpfr_subnormalize).  It shares no rounding
 * code with the emulator: the tests hold one against the other.
 *
 * Deterministic modes only (stochastic rounding is checked statistically).
 */
#ifndef EMU_REF_H
#define EMU_REF_H

#include <stdio.h> /* mpfr.h wants FILE for its stream functions */

#include <mpfr.h>

#include "emu/format.h"
#include "emu/round.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Round the exact value x into fmt under r (mode, tininess, saturate).
 * Same contract as emu_round2: value returned as a double, status filled. */
double emu_ref_round(const emu_format *fmt, mpfr_srcptr x,
                     const emu_rounding *r, emu_status *st);

/* The scalar operations, computed exactly in MPFR, then emu_ref_round. */
double emu_ref_add(const emu_format *f, double a, double b, const emu_rounding *r, emu_status *st);
double emu_ref_sub(const emu_format *f, double a, double b, const emu_rounding *r, emu_status *st);
double emu_ref_mul(const emu_format *f, double a, double b, const emu_rounding *r, emu_status *st);
double emu_ref_div(const emu_format *f, double a, double b, const emu_rounding *r, emu_status *st);
double emu_ref_sqrt(const emu_format *f, double a, const emu_rounding *r, emu_status *st);
double emu_ref_fma(const emu_format *f, double a, double b, double c, const emu_rounding *r, emu_status *st);
double emu_ref_convert(const emu_format *f, double a, const emu_rounding *r, emu_status *st);

#ifdef __cplusplus
}
#endif
#endif
