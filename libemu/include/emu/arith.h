/*
 * emu/arith.h — correctly rounded scalar arithmetic in any carrier format.
 *
 * Operands are doubles holding binary32-representable values (every value
 * of a format with fits_carrier does).  Each operation forms the exact
 * result as an unevaluated pair hi + lo with an error-free transformation
 * and hands it to emu_round2() — one rounding, never two.
 *
 * Output first, rounding last, as in MPFR.  `st` may be NULL.
 *
 * The emu_bits_* layer underneath the CLI's test vectors works on bit
 * patterns and adds what values cannot carry: signaling NaNs (IEEE formats)
 * and the default NaN of each format.
 */
#ifndef EMU_ARITH_H
#define EMU_ARITH_H

#include <stdbool.h>
#include <stdint.h>

#include "emu/bits.h"
#include "emu/format.h"
#include "emu/round.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True if fmt can be the output of the scalar arithmetic (p <= 24 and its
 * values are binary32 values). */
bool emu_arith_supported(const emu_format *fmt);

double emu_add(const emu_format *f, double a, double b, const emu_rounding *r, emu_status *st);
double emu_sub(const emu_format *f, double a, double b, const emu_rounding *r, emu_status *st);
double emu_mul(const emu_format *f, double a, double b, const emu_rounding *r, emu_status *st);
double emu_div(const emu_format *f, double a, double b, const emu_rounding *r, emu_status *st);
double emu_sqrt(const emu_format *f, double a, const emu_rounding *r, emu_status *st);
/* a * b + c with one rounding. */
double emu_fma(const emu_format *f, double a, double b, double c, const emu_rounding *r, emu_status *st);
/* Conversion of any double into f (same as emu_round, NaN/inf handled). */
double emu_convert(const emu_format *f, double a, const emu_rounding *r, emu_status *st);

/* Integer conversions.  To an integer: rounded by r->mode (stochastic
 * modes included); NaN or out of range gives invalid and the saturated
 * value (NaN gives the most negative, as x86 does for signed, and the
 * largest for unsigned).  width is 8, 16, 32 or 64. */
int64_t emu_to_int(double a, int width, const emu_rounding *r, emu_status *st);
uint64_t emu_to_uint(double a, int width, const emu_rounding *r, emu_status *st);
double emu_from_int(const emu_format *f, int64_t i, const emu_rounding *r, emu_status *st);
double emu_from_uint(const emu_format *f, uint64_t u, const emu_rounding *r, emu_status *st);

/* Comparisons.  eq is quiet (invalid only for signaling NaNs at the bits
 * layer); lt and le signal invalid on any NaN, as IEEE 754 requires. */
bool emu_eq(double a, double b, emu_status *st);
bool emu_lt(double a, double b, emu_status *st);
bool emu_le(double a, double b, emu_status *st);
bool emu_unordered(double a, double b);
/* IEEE 754-2019 minimum/maximum: NaN if either is NaN, -0 < +0. */
double emu_min(double a, double b);
double emu_max(double a, double b);

/* ---- bit-pattern layer ---------------------------------------------- */

typedef enum emu_op {
    EMU_OP_ADD, EMU_OP_SUB, EMU_OP_MUL, EMU_OP_DIV, EMU_OP_SQRT, EMU_OP_FMA,
    EMU_OP_CONVERT, /* from the input format to the output format         */
    EMU_OP_EQ, EMU_OP_LT, EMU_OP_LE,
    EMU_OP_COUNT
} emu_op;

const char *emu_op_name(emu_op op);
/* A look-up: 0, or -1 if s names no op ("add", "fma", "convert", ...). */
int emu_op_parse(const char *s, emu_op *op);
int emu_op_arity(emu_op op);
bool emu_op_is_compare(emu_op op);

/* Applies op to patterns of `in` and writes the pattern of the result in
 * `out` (for comparisons *res is 0 or 1).  NaN operands: a signaling NaN
 * raises invalid (r->profile says which patterns signal); a NaN result is
 * the profile's default NaN of the output format, or carries the first
 * NaN operand's sign and payload where the profile keeps them.
 * Returns 0, or -1 with err: EMU_EINVAL for an unknown op or an operand
 * wider than `in`, EMU_EUNSUPPORTED for arithmetic on a format it does
 * not implement (emu_arith_supported). */
int emu_bits_op(emu_op op, const emu_format *in, const emu_format *out,
                const emu_bits *operands, const emu_rounding *r,
                emu_bits *res, emu_status *st, emu_error *err);

#ifdef __cplusplus
}
#endif
#endif
