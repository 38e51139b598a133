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

/* Common to the models: the terms are t_i = x_i * y_i, exact (a product of
 * two binary32 values fits a binary64), or round_prod(x_i * y_i) into
 * `prod` with mode rnd when round_products; with y NULL the terms are the
 * x_i themselves, never rounded.  Every rounding into acc (or wide) is one
 * correctly rounded addition of two exact values, mode rnd, with IEEE
 * 754's sign for an exact zero sum (+0, or -0 toward -inf; two zeros of
 * one sign keep it).  The running sum starts at +0. */
typedef enum emu_accum_kind {
    /* s = 0; for i: s = round_acc(s + t_i). */
    EMU_ACCUM_SEQUENTIAL,
    /* Pairwise (tree) summation of the terms, each partial sum rounded
     * into acc: halves of [0, n) recursively, the left half taking the
     * larger part for odd lengths ceil(n/2); the leaves are the terms
     * themselves (not rounded into acc).  n = 1: round_acc(0 + t_0);
     * n = 0: +0.  Swamping: at each node the addend is the operand of
     * smaller magnitude (the right one on a tie). */
    EMU_ACCUM_PAIRWISE,
    /* Sequential in acc over blocks of `block` terms (the last block may
     * be shorter); each block's partial sum is then added into a wide
     * accumulator (rounded into `wide`) and the narrow one restarts at +0:
     * the FP8 GEMM recipe that promotes to binary32 every 128 products.
     * Swamping counts both kinds of addition, each in its own format. */
    EMU_ACCUM_BLOCKED,
    /* Fused multi-term unit of width k: per group of k terms (the last may
     * be shorter), the terms and the running sum s are aligned to the
     * largest among them: with 2^E the leading bit of the largest
     * magnitude, each is truncated toward zero (on its magnitude) to a
     * multiple of 2^(E - fused_w + 1), i.e. fused_w bits counting that
     * leading bit; the truncated values are added exactly and the sum is
     * rounded into acc (mode rnd).  An exact zero sum is +0; a group with
     * an inf or NaN gives IEEE's sum of its values.  The published model
     * of tensor-core dot-product units.  Swamping, per term: absorbed if
     * the alignment truncated it to zero, else its bits below the coarser
     * of 2^(E - fused_w + 1) and ulp(s_new) in acc are lost. */
    EMU_ACCUM_FUSED,
    /* Kahan-compensated sequential summation, every operation rounded into
     * acc: y = t_i - c; t = s + y; c = (t - s) - y; s = t.  Swamping is
     * counted on t = s + y. */
    EMU_ACCUM_KAHAN,
    /* The exact sum, rounded once (only by the output rounding): the ideal.
     * Its zero is -0 only if every term is -0.  Swamping: every addition
     * counted, nothing lost. */
    EMU_ACCUM_EXACT,
    /* Host binary32 arithmetic on the (already rounded) inputs: BLAS sgemm
     * for matmul where available, a plain float loop otherwise
     * (s = s + x_i * y_i, product and sum each rounded to binary32, no
     * FMA).  No per-step emulation and no swamping counts; for long
     * training runs where the accumulator is not the question.  The
     * summation order is the library's, so results depend on the BLAS
     * build (not on threads for a given build). */
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
 * base = dot * EMU_ACCUM_WORDS_PER_DOT on: the rounding of product i takes
 * word base + i, and the r-th rounding into acc or wide (r from 0, in the
 * order the model's definition performs them: pairwise in post-order,
 * Kahan four per term, blocked's promotion after its block, fused one per
 * group) takes word base + n + r.  A dot product of n terms uses at most
 * 5n + 1 words (Kahan's four roundings per term after the n products).
 * Up to EMU_ACCUM_SHORT_DOT terms, those fit in EMU_ACCUM_WORDS_PER_DOT:
 * base = dot * EMU_ACCUM_WORDS_PER_DOT in `stream`.  A longer dot product
 * takes them from the stream of its size class c, the least c >= 25 with
 * 2^c >= 5n + 1: base = dot * 2^c in stream ^ EMU_ACCUM_LONG_STREAM(c).
 * So no two dot products of a stream share a word, whatever their
 * lengths, as long as the ranges stay below 2^64 (dot < 2^40 for short
 * ones, dot < 2^(64-c) for long ones: more outputs than memory holds).
 * Streams with bit 61 set are reserved for this; the library's own are op
 * indices.  rng NULL means seed 0, stream 0, dot 0. */
#define EMU_ACCUM_WORDS_PER_DOT ((uint64_t)1 << 24)
#define EMU_ACCUM_SHORT_DOT ((EMU_ACCUM_WORDS_PER_DOT - 1) / 5)
#define EMU_ACCUM_LONG_STREAM(c) (((uint64_t)1 << 61) | ((uint64_t)(c) << 54))
typedef struct emu_accum_rng {
    uint64_t seed, stream, dot;
} emu_accum_rng;

/* The reference definition: the model a applied to
 * sum_{i<n} x[i*incx] * y[i*incy] (y may be NULL: a plain sum of x).
 * Returns the accumulator's final value as hi + *lo.  lo is zero except
 * for EXACT, whose exact sum (formed without error in a long fixed-point
 * accumulator) comes back as hi = RN(sum), lo = RN(sum - hi): the sign and
 * zeroness of lo are exact, which is all a deterministic output rounding
 * into a p <= 24 format needs.  The swamping counts are added to *counts.
 * Outputs first (lo, counts: each may be NULL), then the model, the
 * inputs, and the random words last, as MPFR puts its rounding mode. */
double emu_accum_dot(double *lo, emu_accum_counts *counts, const emu_accum *a,
                     const float *x, ptrdiff_t incx, const float *y,
                     ptrdiff_t incy, size_t n, const emu_accum_rng *rng);

/* emu_accum_dot with the accumulator starting at init (a value of acc)
 * instead of +0, as a dot-product-accumulate unit D = C + sum x_i y_i
 * does: the fused model aligns init with the first group's terms. */
double emu_accum_dot_init(double *lo, emu_accum_counts *counts,
                          const emu_accum *a, double init, const float *x,
                          ptrdiff_t incx, const float *y, ptrdiff_t incy,
                          size_t n, const emu_accum_rng *rng);

/* Swamping bookkeeping for one addition s_new = round(s + t), shared by
 * every accumulator (and the optimizer updates): adds += 1, and
 *  - t != 0 and s_new == s: an absorbed addend (absorbed += 1, and
 *    lost_bits[EMU_LOST_BINS - 1]);
 *  - else t zero, inf or NaN, or s_new inf or NaN: lost_bits[0];
 *  - else lost_bits[n], n = the number of bit positions of t below
 *    ulp(s_new) = 2^q, q the quantum exponent of acc at |s_new|
 *    (as in round.c; a zero s_new counts as below 2^emin): from t's lowest
 *    set bit up to the lower of t's leading bit and 2^(q-1), 0 if t lies
 *    on acc's grid at s_new.
 * So the lost_bits bins always add up to adds. */
void emu_accum_count_add(emu_accum_counts *c, const emu_format *acc, double s,
                         double t, double s_new);

#ifdef __cplusplus
}
#endif
#endif
