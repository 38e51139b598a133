/*
 * emu/extend.h — for writers of new ops: the choke point's own interface.
 *
 * A program that only runs ops needs emu/ops.h (in emu/emu.h).  A new op
 * includes this header too: it computes its pre-rounding values, hands
 * them to emu_commit() with an MPFR reference function, and gets every
 * measurement of emu/ops.h's list.  The reference function computes with
 * MPFR, so this header (unlike emu/emu.h) includes <mpfr.h>, and a program
 * that uses it builds and links with MPFR itself (`pkg-config --cflags
 * --libs libemu mpfr`; the CMake package's targets carry MPFR already).
 */
#ifndef EMU_EXTEND_H
#define EMU_EXTEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* mpfr.h wants FILE for its stream functions */

#include <mpfr.h>

#include "emu/accum.h"
#include "emu/ops.h"
#include "emu/round.h"
#include "emu/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the choke point ------------------------------------------------- */

/* What an op hands to the choke point.
 *
 * ref (may be NULL: the op is not sampled) recomputes output i exactly: it
 * sets `exact` to the exact value of output i from the op's own inputs
 * (the choke point gives it 600 bits, REF_PREC in ops_core.c; use MPFR's
 * exact operations, or a correctly rounded function or mpfr_dot at that
 * precision).  A dot
 * product also sets `exact_src` to the exact value from the unquantized
 * sources (or from its inputs if it has none) and returns 1; other ops
 * return 0 and leave exact_src alone; -1 means "cannot" (not counted).
 *
 * inputs_had_nan (may be NULL) answers, for a NaN output whose hi is NaN,
 * whether its inputs held a NaN; NULL means they did.  Ops that make NaN
 * from numbers (inf - inf, 0 * inf) provide it, so that the statistics
 * tell produced NaNs from propagated ones.
 *
 * rnd (required: NULL is an error) is the rounding of out: usually the
 * rounding the op was called with, or the op's own variant of it (a
 * quantizer that always saturates, an optimizer state's rounding).
 *
 * An accumulation out = acc_old + addend (an optimizer's weight update)
 * gives acc_old and addend (out->n each, or NULL): the choke point counts
 * its swamping from the values it rounds, with emu_accum_count_add in
 * out's format, over the outputs whose addend is non-zero and finite and
 * whose acc_old is finite; swamp, if also given, is added (read after
 * the producer's last chunk: a producer may add its chunks' swamping to
 * it as it forms them).
 *
 * Scaled outputs (block-scaled formats, emu/scaled.h): scale (or NULL)
 * holds out->n binary32 factors and scale_g one more, and output i is an
 * element standing for the value out[i] * scale[i] * scale_g, hi[i] +
 * lo[i] being the quotient src[i] / (scale[i] * scale_g) of the op's
 * binary32 source values src.  Counts and errors are the elements' (ulps
 * of out's format, relative errors: the same as the values', the scale
 * being exact); NaN counts values (a NaN scale makes the value NaN,
 * produced unless inputs_had_nan says the inputs held one); the
 * histograms bin values: src[i] before rounding, the element times its
 * scales after; hist_scale (or NULL) is added to the site's.
 *
 * hi NULL (and no producer, below) means the op wrote out->data itself,
 * with a fast path tested
 * bit-identical to this rounding of its values, because nothing is to be
 * measured: allowed only when emu_commit_measures(ctx) is false; the
 * choke point then only advances the op index. */
typedef struct emu_op_out {
    const char *site;
    const char *kind;
    emu_tensor *out;
    const double *hi;                  /* out->n values before rounding    */
    const double *lo;                  /* NULL or out->n low parts         */
    const emu_accum_counts *swamp;     /* the op's accumulations, or NULL  */
    const void *op;                    /* passed to the callbacks          */
    int (*ref)(const void *op, size_t i, mpfr_ptr exact, mpfr_ptr exact_src);
    bool (*inputs_had_nan)(const void *op, size_t i);
    const emu_rounding *rnd;           /* rounding of out (required)       */
    const float *acc_old;              /* accumulation: old values, or NULL */
    const double *addend;              /* and what was added to them        */
    const float *scale;                /* scaled outputs (see above)        */
    double scale_g;
    const float *src;
    const uint64_t *hist_scale;        /* EMU_HIST_BINS counts, or NULL     */
    /* ---- one pass per op: chunked producers -------------------------------
     * Instead of whole hi/lo arrays, an op may hand over a producer that the
     * choke point calls for outputs i0 .. i0+m-1, m <= EMU_COMMIT_CHUNK, in
     * increasing order of i0, each output once; each chunk is then rounded,
     * counted, binned, sampled and stored while it is in cache, and no
     * out->n-sized array of doubles exists.  Set at most one of hi, fill,
     * fill32 and fill_add.
     *   fill writes the values before rounding to hi[0..m) and returns 1 if
     *     it also wrote low parts to lo[0..m), 0 if they are all zero (lo is
     *     then left alone).
     *   fill_add, for an accumulation (acc_old given, addend NULL), is fill
     *     that also writes the chunk's addends to addend[0..m): the swamping
     *     count reads them there, so that they need no out->n-sized array.
     *   fill32 writes values that are binary32 values already (selections,
     *     casts, exact products that fit): into a binary32 output under a
     *     rounding that maps binary32 to itself they are only copied.
     * With an observer installed (which sees whole arrays) the choke point
     * first calls the producer into arrays of out->n doubles, then proceeds
     * as with hi/lo.
     * store_early: the op's callbacks (fill, fill32, fill_add, ref,
     * inputs_had_nan) for output i read out's storage only at positions
     * >= i (elementwise ops and in-place updates), or not at all: each
     * chunk may then be stored as soon as it is measured.  Otherwise the
     * results are kept aside until every callback has run (a copy of
     * out->n floats). */
    int (*fill)(const void *op, size_t i0, size_t m, double *hi, double *lo);
    void (*fill32)(const void *op, size_t i0, size_t m, float *v);
    bool store_early;
    /* parallel: fill, fill32, fill_add and inputs_had_nan may be called
     * from several threads at once for different chunks (ctx->threads > 1;
     * ref never is: with MPFR sampling on, the chunks run on one thread):
     * they change nothing but what they write for their own outputs (an op
     * counting into `swamp` while it produces keeps this false), and with
     * store_early read out's storage, if at all, only at their own
     * outputs' positions.  Results and statistics are the same either
     * way; false (the default) keeps the callbacks on one thread. */
    bool parallel;
    /* after the others, so that initialisers by position stay valid */
    int (*fill_add)(const void *op, size_t i0, size_t m, double *hi,
                    double *lo, double *addend);
} emu_op_out;

/* The most outputs a producer is asked for at once. */
enum { EMU_COMMIT_CHUNK = 1024 };

/* Rounds, measures and writes o->out.  Advances ctx->op_index.  The
 * callbacks (ref, inputs_had_nan) run before o->out is written, so an op
 * whose output is one of its inputs needs no copy of it. */
int emu_commit(emu_ctx *ctx, const emu_op_out *o);

/* Whether emu_commit measures or shows anything (statistics or an
 * observer): if not, an op may round with its own fast path and commit
 * with hi NULL. */
bool emu_commit_measures(const emu_ctx *ctx);

/* The RNG stream of the op about to commit (for accumulators that round
 * stochastically before the choke point). */
uint64_t emu_ctx_stream(const emu_ctx *ctx);

/* Sets ctx->err ("site: message") and returns -1: for ops' checks. */
int emu_ctx_fail(emu_ctx *ctx, const char *site, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
