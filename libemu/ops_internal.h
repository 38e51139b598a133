/*
 * ops_internal.h — what the op files share (library-private).
 *
 * Every op file follows one pattern: check its arguments (emu_ctx_fail on
 * any problem, before touching an output), describe how to produce the
 * pre-rounding value of each output (exactly where it can: TwoSum pairs,
 * exact products, accumulator models) — a producer the choke point calls
 * a chunk at a time, or a scratch array — and how MPFR recomputes an
 * output, and call emu_commit().
 */
#ifndef EMU_OPS_INTERNAL_H
#define EMU_OPS_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "emu/accum.h"
#include "emu/extend.h"
#include "emu/scaled.h"
#include "internal.h"

/* Checks that t is a usable tensor (allocated, carrier format): on
 * failure sets ctx->err naming the site and `what` ("out", "a", ...). */
int emu_check_tensor(emu_ctx *ctx, const char *site, const char *what,
                     const emu_tensor *t);

/* Checks that an op was given its rounding (rnd not NULL, a known mode):
 * ops check it first, before anything reads rnd. */
int emu_check_rounding(emu_ctx *ctx, const char *site,
                       const emu_rounding *rnd);

/* Checks that an accumulating op was given a valid accumulator model. */
int emu_check_accum(emu_ctx *ctx, const char *site, const emu_accum *accum);

/* Checks that a and b have the same shape. */
int emu_check_same_shape(emu_ctx *ctx, const char *site, const char *what_a,
                         const emu_tensor *a, const char *what_b,
                         const emu_tensor *b);

/* Whether two tensors' storage overlaps (NULL overlaps nothing).  The
 * addresses are compared as integers: they may belong to different
 * objects, where comparing pointers would be undefined. */
bool emu_tensors_overlap(const emu_tensor *a, const emu_tensor *b);

/* emu_ctx_fail with a code other than EMU_EINVAL (emu/error.h):
 * EMU_ENOMEM for scratch memory, or the code of an error forwarded from a
 * parser or quantizer. */
int emu_ctx_failc(emu_ctx *ctx, emu_errcode code, const char *site,
                  const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Whether an op that reads input element i (of the n at in) for output i
 * alone may let the choke point store each chunk early (emu_op_out's
 * store_early): in is out's own storage, or shares none of it. */
bool emu_store_early_ok(const emu_tensor *out, const float *in, size_t n);

/* ---- a scaled operand's storage kept from call to call ----------------
 * A caller that quantizes one operand after another at every training
 * step (the layers' GEMM operands, nn_model.c) keeps one scaled tensor and
 * the element scales the choke point reads instead of allocating them for
 * each quantization: q's buffers hold elem_cap elements and scale_cap
 * scales, sc sc_cap floats, each grown as a larger operand needs. */
typedef struct emu_quant_keep {
    emu_scaled_tensor q;
    size_t elem_cap, scale_cap;
    float *sc;
    size_t sc_cap;
} emu_quant_keep;

/* Makes k->q a scaled tensor of the given shape as emu_scaled_alloc does
 * (the same header, every scale 1), in k's buffers, grown if they are too
 * small; the elements hold whatever they held (every quantization writes
 * all of them).  On -1 k keeps its buffers. */
int emu_quant_keep_shape(emu_quant_keep *k, const emu_scaled_format *sf,
                         int ndim, const size_t *shape, int axis,
                         emu_error *err);
void emu_quant_keep_free(emu_quant_keep *k);
/* *buf holding at least n floats: kept if *cap >= n, else replaced by a
 * new buffer (the old contents dropped) and *cap set.  0, or -1 out of
 * memory with *buf and *cap as they were. */
int emu_quant_keep_grow(float **buf, size_t *cap, size_t n);

/* emu_t_quantize_scaled with the element scales' buffer in keep (NULL:
 * allocated for the call); q need not be keep->q. */
int emu_t_quantize_scaled_kept(emu_ctx *ctx, const char *site,
                               emu_scaled_tensor *q, const emu_tensor *x,
                               const emu_quant_opts *o,
                               emu_quant_counts *counts,
                               const emu_rounding *rnd, emu_quant_keep *keep);

/* "site: WHAT 'name' is (shape), expected WANT" in ctx->err; -1. */
int emu_shape_fail(emu_ctx *ctx, const char *site, const char *what,
                   const emu_tensor *t, const char *want);

/* Any NaN among v[0..n) (binary32, binary64), every one of them finite. */
bool emu_any_nan(const float *v, size_t n);
bool emu_any_nan64(const double *v, size_t n);
bool emu_all_finite(const float *v, size_t n);

/* Multiplies the pre-rounding values hi[i] + lo[i] by alpha without error
 * (alpha positive finite, e.g. a product of two binary32 scales).  A power
 * of two scales both in place.  Otherwise lo must be an array: hi, lo
 * become TwoProduct's pair hi*alpha = p + e, with MPFR where the old lo[i]
 * was non-zero (the EXACT model), so lo keeps exact sign and zeroness.
 * lo_valid false means lo holds nothing yet (read as zeros). */
void emu_scale_pairs(double *hi, double *lo, bool lo_valid, size_t n,
                     double alpha);

/* malloc (not zeroed) of n doubles that fails cleanly (sets ctx->err) on overflow or
 * lack of memory. */
double *emu_scratch(emu_ctx *ctx, const char *site, size_t n);

/* The many-dot-products engine behind matmul and convolution:
 *   value[i*N + j] = model over k < K of A(i, k) * B(k, j)
 * with A(i, k) = a[i*a_rs + k*a_cs] and B(k, j) = b[k*b_rs + j*b_cs]
 * (strides in elements; transposes are just strides).  Results go to
 * hi[i*N + j] (and lo[...] for the EXACT model; lo may be NULL for other
 * models), swamping to counts (may be NULL).  Every value is bit-identical
 * to emu_accum_dot() of the same terms in the same order; dot product
 * number i*N + j takes its stochastic words from rng->dot = i*N + j.
 * `threads` workers split the rows; the results do not depend on it.
 * Returns 0, or -1 if out of memory. */
int emu_gemm_accum(const emu_accum *model, size_t M, size_t N, size_t K,
                   const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                   const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                   double *hi, double *lo, uint64_t seed, uint64_t stream,
                   emu_accum_counts *counts, int threads);

/* emu_gemm_accum with an initial accumulator value per output (c,
 * row-major M x N, or NULL: start from zero — what matmul's `accumulate`
 * uses; where it enters each model is defined with emu_matmul_opts) and
 * the number of the first dot product (dot product i*N + j takes its
 * stochastic words as number dot0 + i*N + j, so a batched op gives each
 * batch its own numbers). */
int emu_gemm_accum_ex(const emu_accum *model, size_t M, size_t N, size_t K,
                      const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                      const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                      const double *c, double *hi, double *lo, uint64_t seed,
                      uint64_t stream, uint64_t dot0,
                      emu_accum_counts *counts, int threads);

/* The fast model's products as binary32 values, out[i*N + j] (M x N,
 * row-major): what emu_gemm_accum_ex with EMU_ACCUM_FAST gives as doubles,
 * without the widening, for the producers below.  Returns 0, or -1 if out
 * of memory. */
int emu_gemm_fast_f32(size_t M, size_t N, size_t K,
                      const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                      const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                      const double *c, float *out);

/* The same on `threads` threads (the library's pool): rows split into
 * blocks of at least EMU_FAST_SPLIT_MACS multiply-adds (or
 * EMU_FAST_SPLIT_SMALL, below), one sgemm each, whose bits are those of
 * the one call (see accum_gemm.c); a GEMM too small for two such blocks
 * is the one call.  emu_fast_split_parts: how many blocks.  The threshold
 * is the first size past OpenBLAS's small-matrix kernels (10^6
 * multiply-adds and fewer). */
#define EMU_FAST_SPLIT_MACS 1000001.0
int emu_gemm_fast_f32_mt(size_t M, size_t N, size_t K,
                         const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                         const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                         const double *c, float *out, int threads);
/* The same, and *any_nan: whether an output is NaN (each block scanned
 * by the part that computed it, so the scan runs on the threads too). */
int emu_gemm_fast_f32_mt_nan(size_t M, size_t N, size_t K,
                             const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                             const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                             const double *c, float *out, int threads,
                             bool *any_nan);
int emu_fast_split_parts(size_t M, size_t N, size_t K, int threads);
/* Where OpenBLAS has no small-matrix kernels (found by trial once per
 * process: blocks of ~4 * 10^5 multiply-adds giving the one call's bits in
 * every layout), a block needs only EMU_FAST_SPLIT_SMALL multiply-adds,
 * what a pool job's few microseconds are worth: the MLP's 64x128x256
 * GEMMs then split too.  emu_fast_split_min: the block minimum in force
 * (EMU_FAST_SPLIT_MACS or EMU_FAST_SPLIT_SMALL). */
#define EMU_FAST_SPLIT_SMALL 262144
double emu_fast_split_min(void);
/* The rows the blocks start on are multiples of this (the width of
 * sgemm's row panels, found once per process by trial; 0: none found,
 * no GEMM is split). */
size_t emu_fast_row_granule(void);
/* probe() once per process, its answer kept in *cached (SIZE_MAX before
 * the first call); two threads probing at once find the same value. */
size_t emu_probe_once(atomic_size_t *cached, size_t (*probe)(void));
/* For callers running their own parts: OpenBLAS pinned to one thread
 * once (emu_gemm_fast_pin, before the parts start), then each part's
 * emu_gemm_fast_f32 without that global write (emu_gemm_fast_f32_part). */
void emu_gemm_fast_pin(void);
int emu_gemm_fast_f32_part(size_t M, size_t N, size_t K,
                           const float *a, ptrdiff_t a_rs, ptrdiff_t a_cs,
                           const float *b, ptrdiff_t b_rs, ptrdiff_t b_cs,
                           const double *c, float *out);

/* A GEMM's results handed to the choke point a chunk at a time (matmul,
 * convolution): the engine's values hi (and lo, or NULL), already scaled
 * by the op's alpha; or the fast model's binary32 values f, which the
 * producer scales by alpha (emu_scale_pairs on each chunk: the same
 * values, element by element).  tc > 0 reads a GEMM laid out as
 * (N*tp + p)*tc + c in NCHW order, output (n*tc + c)*tp + p. */
typedef struct emu_gemm_src {
    const float *f;
    const double *hi, *lo;
    double alpha;
    size_t tc, tp;
} emu_gemm_src;

/* emu_op_out.fill and fill32 over an emu_gemm_src: fill32 only for f with
 * alpha 1 (emu_gemm_src_f32 says when); fill for every source. */
bool emu_gemm_src_f32(const emu_gemm_src *s);
int emu_gemm_src_fill(const emu_gemm_src *s, size_t i0, size_t m, double *hi,
                      double *lo);
void emu_gemm_src_fill32(const emu_gemm_src *s, size_t i0, size_t m, float *v);

/* (hi + lo) / n as a pair that rounds like the exact quotient (the mean of
 * emu_t_reduce and of batch norm): s 1200 bits, q and r 106 bits, the
 * caller's MPFR temporaries (ops_reduce.c). */
void emu_mean_pair(double *hi, double *lo, size_t n, mpfr_ptr s, mpfr_ptr q,
                   mpfr_ptr r);

/* tanh, sigmoid, exp, log or gelu of x as emu_t_unary evaluates it for an
 * output in format f (ops_elementwise.c): a binary64 value that rounds to
 * f, in every deterministic mode, as the exact value does (fused ops that
 * apply an activation, such as the LSTM's gates). */
double emu_unary_eval(const emu_format *f, emu_unary fn, double x);
/* The same for the deterministic modes only, through the fast paths of
 * sigmoid and tanh (another binary64 value when it rounds alike in every
 * deterministic mode; stochastic rounding must use emu_unary_eval). */
double emu_unary_eval_det(const emu_format *f, emu_unary fn, double x);
/* gelu (dy NULL) or dy gelu'(x) of n values on gelu's table path
 * (deterministic modes): through the vector lanes of the active ISA level
 * (lanes true) or the scalar path alone, which the tests hold
 * bit-identical.  Returns false (out untouched) if the table is not
 * ready. */
bool emu_gelu_fast_n(const emu_format *f, const float *x, const float *dy,
                     size_t n, double *out, bool lanes);
/* Whether any of lo[0..m) is not a zero, as "lo[j] != 0.0" for some j
 * (a NaN counts): the bits past the sign ORed together.  The comparison's
 * unordered case kept GCC's loop scalar (most of ew_fill's time in a gpt
 * step); this one vectorises. */
static inline bool emu_any_nonzero(const double *lo, size_t m)
{
    uint64_t acc = 0;
    for (size_t j = 0; j < m; j++)
        acc |= d2u(lo[j]) << 1;
    return acc != 0;
}
/* emu_unary_eval_det of n binary32 values x into out, one call a run. */
void emu_unary_eval_det_n(const emu_format *f, emu_unary fn, const float *x,
                          size_t n, double *out);
/* out[k] = (float)exp((double)s[k] - m), k < n: the C library's exp
 * rounded to binary32 (softmax's e), bit for bit, mostly without calling
 * it; lanes false: the scalar path alone (the tests compare both with
 * exp).  f32 is the binary32 format. */
void emu_exp_f32_n(const emu_format *f32, const float *s, double m,
                   size_t n, float *out, bool lanes);

/* One accumulator rounding of hi + lo as the models do it: the inline fast
 * path where it applies (*fast = true), else the scalar choke point; the
 * two are tested bit-identical. */
double emu_accum_round_step(const emu_format *f, const emu_rounding *r,
                            double hi, double lo, uint64_t word, bool *fast);

/* How many threads emu_commit would run o's chunks on (tests). */
int emu_commit_parts_(const emu_ctx *ctx, const emu_op_out *o);

/* emu_commit, or, when nothing is measured (emu_commit_measures false)
 * and o->out is binary32 under nearest-even, o->fill's values rounded by
 * the host's conversion straight into o->out (bit-identical: binary32 is
 * the host's format) and a commit without values.  For ops with a fill
 * producer and store_early (others go to emu_commit). */
int emu_commit_direct(emu_ctx *ctx, const emu_op_out *o);

/* emu_t_cross_entropy with the loss value rounded under loss_rnd and the
 * gradient under rnd (the nn code's policy keeps them apart). */
int emu_cross_entropy_rnd2(emu_ctx *ctx, const char *site, emu_tensor *loss,
                           emu_tensor *dlogits, const emu_tensor *logits,
                           const int *labels, float scale,
                           const emu_rounding *loss_rnd,
                           const emu_rounding *rnd);

#endif
