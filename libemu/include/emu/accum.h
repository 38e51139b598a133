/*
 * emu/accum.h — accumulator models: how a dot product or a sum is formed.
 *
 * A hardware dot-product unit, a GEMM library and a careful summation
 * differ in when they round.  Each model below is a precise definition
 * (the comment is the spec the tests check), and matmul, conv and the
 * reductions all take one.  The result of a model is the accumulator's
 * final value, not yet rounded to the op's output format; the choke point
 * rounds it once more, into the output tensor.
 */
#ifndef EMU_ACCUM_H
#define EMU_ACCUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "emu/format.h"
#include "emu/round.h"
#include "emu/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emu_accum_kind {
    /* s = 0; for i: s = round_acc(s + round_prod(x_i * y_i)).  Products
     * exact unless round_products. */
    EMU_ACCUM_SEQUENTIAL,
    /* Pairwise (tree) summation of the (optionally rounded) products, each
     * partial sum rounded into acc: halves of [0, n) recursively, the left
     * half taking the larger part for odd lengths ceil(n/2). */
    EMU_ACCUM_PAIRWISE,
    /* Sequential in acc over blocks of `block` terms; each block's partial
     * sum is then added into a wide accumulator (rounded into `wide`) and
     * the narrow one restarts at zero: the FP8 GEMM recipe that promotes
     * to binary32 every 128 products. */
    EMU_ACCUM_BLOCKED,
    /* Fused multi-term unit of width k: per group of k terms, the exact
     * products and the running sum s are aligned to the largest exponent
     * among them; each is truncated (toward zero) to `fused_w` bits below
     * that exponent's leading bit; the truncated terms are added exactly
     * and the sum is rounded into acc (mode rnd).  The published model of
     * tensor-core dot-product units. */
    EMU_ACCUM_FUSED,
    /* Kahan-compensated sequential summation, every operation rounded into
     * acc: y = p - c; t = s + y; c = (t - s) - y; s = t. */
    EMU_ACCUM_KAHAN,
    /* The exact sum, rounded once (only by the output rounding): the ideal. */
    EMU_ACCUM_EXACT,
    /* Host binary32 arithmetic on the (already rounded) inputs: BLAS sgemm
     * for matmul where available, a plain float loop otherwise.  No
     * per-step emulation and no swamping counts; for long training runs
     * where the accumulator is not the question.  The summation order is
     * the library's, so results depend on the BLAS build (not on threads
     * for a given build). */
    EMU_ACCUM_FAST,
    EMU_ACCUM_COUNT
} emu_accum_kind;

typedef struct emu_accum {
    emu_accum_kind kind;
    emu_format acc;          /* accumulator format                        */
    bool round_products;     /* products rounded into prod first          */
    emu_format prod;
    emu_format wide;         /* BLOCKED: the wide accumulator             */
    emu_rounding rnd;        /* rounding of accumulator steps (rng unused) */
    unsigned block;          /* BLOCKED: terms per narrow partial sum      */
    unsigned fused_k;        /* FUSED: terms per unit                      */
    unsigned fused_w;        /* FUSED: bits kept after alignment           */
} emu_accum;

const char *emu_accum_kind_name(emu_accum_kind k);

/* The default: sequential, exact products, binary32 accumulator, RNE. */
void emu_accum_default(emu_accum *a);

/* Parses "kind[,key=value...]": kinds sequential|seq, pairwise, blocked,
 * fused, kahan, exact, fast; keys acc=FORMAT, prod=FORMAT|exact,
 * wide=FORMAT, mode=MODE, block=N, k=N, w=N.  Formats as
 * emu_format_resolve takes them (names or inline specs, so a spec with
 * commas must be a registered name).  Returns 0 or -1 with err. */
int emu_accum_parse(emu_accum *a, const char *spec, emu_error *err);

/* Writes the canonical spec string of a (parses back to the same model). */
void emu_accum_string(const emu_accum *a, char *buf, size_t size);

/* Checks a model (formats fit the carrier, block/k/w in range). */
int emu_accum_validate(const emu_accum *a, emu_error *err);

/* Swamping, as counted by the accumulators. */
typedef struct emu_accum_counts {
    uint64_t adds;
    uint64_t absorbed;
    uint64_t lost_bits[EMU_LOST_BINS];
} emu_accum_counts;

/* Where stochastic accumulator roundings take their words: dot product
 * `dot` of the op with RNG stream `stream` uses indices from
 * dot * EMU_ACCUM_WORDS_PER_DOT on. */
#define EMU_ACCUM_WORDS_PER_DOT ((uint64_t)1 << 24)
typedef struct emu_accum_rng {
    uint64_t seed, stream, dot;
} emu_accum_rng;

/* The reference definition: the model applied to
 * sum_{i<n} x[i*incx] * y[i*incy] (y may be NULL: a plain sum of x).
 * Returns the accumulator's final value as hi + *lo.  lo is zero except
 * for EXACT, whose exact sum (formed without error in a long fixed-point
 * accumulator) comes back as hi = RN(sum), lo = RN(sum - hi): the sign and
 * zeroness of lo are exact, which is all a deterministic output rounding
 * into a p <= 24 format needs.  counts may be NULL. */
double emu_accum_dot(const emu_accum *a, const float *x, ptrdiff_t incx,
                     const float *y, ptrdiff_t incy, size_t n,
                     const emu_accum_rng *rng, emu_accum_counts *counts,
                     double *lo);

/* Swamping bookkeeping for one addition s_new = round(s + t), shared by
 * every accumulator (and the optimizer updates): t != 0 and s_new == s is
 * an absorbed addend; otherwise the bits of t below ulp(s_new) in acc are
 * lost (0 if t lies entirely on acc's grid at s_new). */
void emu_accum_count_add(emu_accum_counts *c, const emu_format *acc, double s,
                         double t, double s_new);

#ifdef __cplusplus
}
#endif
#endif
