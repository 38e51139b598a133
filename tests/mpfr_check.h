/*
 * mpfr_check.h — the comparison every test_mpfr_* suite makes: one result
 * of the emulator against the oracle's, value (the sign of zero counts),
 * ternary sign and all seven flags, and a report of a mismatch that
 * carries everything needed to replay it.
 */
#ifndef EMU_MPFR_CHECK_H
#define EMU_MPFR_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include <stdio.h> /* mpfr.h wants FILE */

#include <mpfr.h>

#include <emu/emu.h>

/* Mismatches printed before the rest are only counted. */
enum { PRINT_LIMIT = 20 };

/* Results compared and mismatches found, over the whole suite. */
extern unsigned long long n_checked, n_mismatch;

/* One result of the emulator (got) against the oracle's (want).  `in` is
 * the operands' format (NULL: plain doubles, printed as binary64); n
 * operands, as patterns (bits, may be NULL) and values (v). */
bool check_one(const char *op, const emu_format *in, const emu_format *out,
               const emu_rounding *r, int n, const uint64_t *bits,
               const double *v, double want, emu_status ws, double got,
               emu_status gs);

/* ---- stochastic rounding by its definition (README's table of modes) --
 *
 * The oracle of libemu/ref.c covers the deterministic modes; these build
 * the stochastic ones from it and from the random word.  With F in [0, 1)
 * the exact value's distance from its toward-zero neighbour in units of the
 * gap to the away neighbour, `sr` rounds away iff floor(F 2^64) + word
 * carries out of 64 bits, and `srN` iff floor(F 2^N) + the word's top N
 * bits carry out of N bits. */

/* The decision for F (exact, 0 <= F < 1). */
bool ref_sr_away(mpfr_srcptr F, const emu_rounding *r, uint64_t word);

/* x rounded into f by r (EMU_RS or EMU_RS_BITS) with the given word:
 * the toward-zero result of emu_ref_round, or, when the word says so, the
 * result of the directed mode away from zero (the same value, flags and
 * ternary as that mode, overflow included).  For a signed format with a
 * zero. */
double ref_sr_round(const emu_format *f, mpfr_srcptr x, const emu_rounding *r,
                    uint64_t word, emu_status *st);

#endif
