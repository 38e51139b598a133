/*
 * emu/ops.h — tensor ops, and the one choke point they all go through.
 *
 * An op computes, for each of its outputs, the value it would have before
 * the final rounding — exactly where the inputs allow (a sum as TwoSum's
 * hi + lo, a product in one double), or the accumulator model's result for
 * dot products, or a binary64 evaluation for exp/log/tanh — and hands
 * them to emu_commit(), as arrays or a chunk at a time (emu_op_out's fill,
 * emu/extend.h).
 * The choke point alone then, in one pass over the outputs,
 *   1. rounds every value into the output tensor's format under the op's
 *      rounding;
 *   2. counts results, inexact, underflow to zero, subnormal, overflow,
 *      NaN, and adds the op's swamping counts;
 *   3. records log2 histograms of the values before and after rounding;
 *   4. on a sample of outputs (ctx->ref_rate) asks the op's reference
 *      function for the exact value computed with MPFR from the op's own
 *      inputs, and records the error (and, for dot products, its split
 *      into input quantization, accumulation and output rounding);
 *   5. shows the result to ctx->observer.
 * A new op plugs in by producing pre-rounding values and a reference
 * function; it gets every measurement for free.  The choke point's own
 * interface (emu_commit, emu_op_out) is in emu/extend.h: it needs MPFR,
 * which a program that only runs ops does not.
 *
 * Conventions (llm.c's and MPFR's): outputs first, then inputs, then
 * parameters, and the rounding last.  `site` names the place in the
 * program ("fc1.matmul"); statistics are kept per site and per role of the
 * output tensor.  Every op returns 0, or -1 with ctx->err saying what was
 * wrong (emu/error.h: code EMU_EINVAL for a bad argument or shape
 * mismatch, EMU_ENOMEM, or the code of a failed accumulator or quantizer
 * check; where = the site) and leaves its outputs untouched.
 *
 * Rounding and accumulation are arguments, never context state: every op
 * takes `const emu_rounding *rnd` as its last parameter, the rounding of
 * its outputs into their formats (as emu/arith.h's scalar ops take theirs;
 * rnd->rng is unused: stochastic words come from the context's seed and
 * op index), and every op that accumulates names its accumulator model
 * (emu_matmul_opts.accum, emu_conv_opts.accum, emu_t_reduce's accum).
 * Neither has a default: a NULL rounding, or a NULL accumulator where one
 * is used, is an error (-1, ctx->err), so that what an op does can always
 * be read off its call.  A zero-initialised emu_rounding is nearest-even
 * (emu/round.h); emu_accum_default() fills the default model.
 * Shapes: matrices (rows, cols); images (N, C, H, W); conv weights
 * (C_out, C_in, KH, KW).
 */
#ifndef EMU_OPS_H
#define EMU_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "emu/accum.h"
#include "emu/format.h"
#include "emu/round.h"
#include "emu/stats.h"
#include "emu/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What to measure (ctx->measure). */
enum {
    EMU_MEASURE_COUNTS = 1u << 0, /* counters per site                      */
    EMU_MEASURE_HIST = 1u << 1,   /* log2 histograms                        */
    EMU_MEASURE_SWAMP = 1u << 2,  /* swamping inside accumulators           */
    EMU_MEASURE_REF = 1u << 3,    /* MPFR error on sampled outputs          */
    EMU_MEASURE_ALL = 0xfu
};

/* What an observer sees after each op.  The pointers are valid only during
 * the observer call (ops free their scratch arrays right after).  hi and lo
 * are whole arrays even for an op that produces its values a chunk at a
 * time: with an observer installed, the choke point gathers them first. */
typedef struct emu_op_event {
    const char *site;
    const char *kind;
    const emu_tensor *out;      /* rounded results                        */
    const double *hi;           /* values before rounding (out->n)         */
    const double *lo;           /* NULL, or low parts of those values      */
    const emu_round_counts *counts;
    uint64_t op_index;
} emu_op_event;

typedef void (*emu_observer)(void *user, const emu_op_event *ev);

/* What ops share: where randomness and measurements come from.  How an
 * op rounds and accumulates is not here: each call says it. */
typedef struct emu_ctx {
    uint64_t seed;         /* stochastic rounding and sampling            */
    uint64_t op_index;     /* ops run so far: op k's RNG stream is k      */
    unsigned measure;      /* EMU_MEASURE_* bits                           */
    double ref_rate;       /* fraction of outputs checked with MPFR, 0..1 */
    emu_stats *stats;      /* where measurements go; NULL: none            */
    emu_observer observer;
    void *observer_user;
    int threads;           /* worker threads for the big ops (>= 1)        */
    emu_error err;         /* why the last op failed                       */
} emu_ctx;

/* Everything but MPFR sampling measured (ref_rate 0), no stats sink, one
 * thread, op index 0. */
void emu_ctx_init(emu_ctx *ctx, uint64_t seed);

/* ---- elementwise ------------------------------------------------------ */

/* out = a op b, same shapes, rounded once under rnd. */
int emu_t_add(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *a, const emu_tensor *b, const emu_rounding *rnd);
int emu_t_sub(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *a, const emu_tensor *b, const emu_rounding *rnd);
int emu_t_mul(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *a, const emu_tensor *b, const emu_rounding *rnd);
int emu_t_div(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *a, const emu_tensor *b, const emu_rounding *rnd);
/* out = alpha * x (alpha a binary32 value; BLAS order, as axpy). */
int emu_t_scale(emu_ctx *ctx, const char *site, emu_tensor *out, float alpha, const emu_tensor *x, const emu_rounding *rnd);
/* out = alpha * x + y, one rounding. */
int emu_t_axpy(emu_ctx *ctx, const char *site, emu_tensor *out, float alpha, const emu_tensor *x, const emu_tensor *y, const emu_rounding *rnd);
/* out = x + bias broadcast along dimension `axis` of x (bias has
 * x->shape[axis] elements): rows of a matrix (axis 1), channels of an
 * image (axis 1 of NCHW). */
int emu_t_add_bias(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *x, const emu_tensor *bias, int axis, const emu_rounding *rnd);

typedef enum emu_unary {
    EMU_UNARY_NEG, EMU_UNARY_ABS, EMU_UNARY_RELU, EMU_UNARY_LEAKY_RELU,
    EMU_UNARY_GELU,   /* x * Phi(x), the erf form                      */
    EMU_UNARY_TANH, EMU_UNARY_SIGMOID, EMU_UNARY_EXP, EMU_UNARY_LOG,
    EMU_UNARY_SQRT, EMU_UNARY_SQUARE,
    EMU_UNARY_CLAMP,  /* to [param, param2]                             */
    EMU_UNARY_COUNT
} emu_unary;
const char *emu_unary_name(emu_unary f);

/* out = f(x); param is the leaky-relu slope or the clamp's lower bound,
 * param2 the clamp's upper bound. */
int emu_t_unary(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *x, emu_unary f, float param, float param2, const emu_rounding *rnd);

/* Backward of the activations: dx = dy * f'(.), the exact product rounded
 * once.  x_or_y is the forward input x for relu, leaky relu, abs, gelu, log
 * and square; the forward output y for tanh, sigmoid, exp (dx = dy y) and
 * sqrt (dx = dy / 2y); neg ignores it; clamp has no backward.
 * Conventions: relu(x <= 0) = +0 and relu'(0) = 0, abs'(0) = 0,
 * gelu(-inf) = -0 (the limit); IEEE otherwise (dy = inf where f' = 0 gives a
 * produced NaN). */
int emu_t_unary_backward(emu_ctx *ctx, const char *site, emu_tensor *dx, const emu_tensor *dy, const emu_tensor *x_or_y, emu_unary f, float param, const emu_rounding *rnd);

/* out = in rounded into out's format (a cast; also "quantize"). */
int emu_t_cast(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *in, const emu_rounding *rnd);

/* out = round(src): the first out->n of the n binary32 values of src
 * (n < out->n is an error). */
int emu_t_load(emu_ctx *ctx, const char *site, emu_tensor *out, const float *src, size_t n, const emu_rounding *rnd);

/* ---- linear algebra ---------------------------------------------------- */

/* out = op(A) op(B), op = transpose if trans_*: (M, K) x (K, N) -> (M, N),
 * each output one dot product under opts->accum, rounded once into out's
 * format under rnd.  A_src/B_src (may be NULL) are the unquantized sources
 * of A and B (same shapes, e.g. binary32 master weights) for the error
 * decomposition: the MPFR reference of a sampled output is mpfr_dot of the
 * inputs and of the sources.  opts is required, for its accumulator; its
 * other fields zero mean no transposes, no sources, no accumulation,
 * alpha 1.  out must not share storage with an input.
 *
 * accumulate: out = out + alpha op(A) op(B), where the old value of out is
 * where the accumulator starts, like the C operand of a hardware
 * D = A B + C unit: sequential, Kahan and fused start their running sum at
 * out / alpha (exact: alpha is a power of two; not rounded into acc first;
 * the fused unit aligns it with the first group's products); blocked
 * starts its wide sum there; pairwise takes it as the leftmost leaf of its
 * tree; exact adds it to the exact sum; fast starts its binary32 sum there
 * (sgemm's beta = 1).  The accumulator's final value times alpha is then
 * rounded once into out's format, as without accumulate. */
typedef struct emu_matmul_opts {
    const emu_accum *accum; /* the accumulator model (required)           */
    bool trans_a, trans_b;
    const emu_tensor *a_src, *b_src;
    bool accumulate;   /* out = out + alpha op(A) op(B): the accumulator starts at out / alpha */
    double alpha;      /* scales each dot product before the output rounding,
                          without error (0 means 1): per-layer loss scaling
                          lifts gradients out of underflow with a power of
                          two; scaled formats pass the product of their
                          tensor scales (any positive value, then the
                          product is formed exactly and rounded once).
                          With accumulate, a power of two only. */
    double src_alpha;  /* the scale of the sources' product in the reference
                          (0 means alpha): when the inputs are the sources
                          divided by tensor scales that alpha puts back, the
                          sources' own product needs only the rest of alpha
                          (scaled formats set it; see emu/scaled.h) */
} emu_matmul_opts;
int emu_t_matmul(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *a, const emu_tensor *b, const emu_matmul_opts *opts, const emu_rounding *rnd);
/* Batched: 3-d tensors (batch, M, K) x (batch, K, N). */
int emu_t_bmm(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *a, const emu_tensor *b, const emu_matmul_opts *opts, const emu_rounding *rnd);

/* ---- reductions -------------------------------------------------------- */

typedef enum emu_reduce {
    EMU_REDUCE_SUM, EMU_REDUCE_MEAN, EMU_REDUCE_MAX, EMU_REDUCE_SUMSQ,
    EMU_REDUCE_COUNT
} emu_reduce;
/* Reduce x along `axis` (out has that dimension removed; a 1-element
 * tensor for axis = -1, the full reduction): sums and sums of squares
 * under the accumulator model accum (required; MAX, which does not
 * accumulate, ignores it and accepts NULL), rounded once into out's format
 * under rnd. */
int emu_t_reduce(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *x, emu_reduce r, int axis, const emu_accum *accum, const emu_rounding *rnd);

/* ---- convolution and pooling (NCHW) ------------------------------------ */

typedef struct emu_conv_opts {
    const emu_accum *accum; /* the accumulator model (required)           */
    int stride, pad;   /* same in both spatial dimensions */
    double alpha;      /* as in emu_matmul_opts (0 means 1)               */
} emu_conv_opts;
/* y (N, Co, Ho, Wo) = conv(x (N, Ci, H, W), w (Co, Ci, KH, KW)) + bias (Co)
 * (bias may be NULL), Ho = (H + 2 pad - KH) / stride + 1.  o is required
 * (geometry and accumulator); outputs are rounded under rnd.
 * Each output of the three convolution ops is ONE dot product under
 * o->accum, whose terms, in this order, define it (accumulators round
 * at every step, so the order is part of the result):
 *   y[n,co,oh,ow]:   bias[co] * 1 first (the bias is a term of the same
 *                    accumulation, not a separate rounding), then
 *                    w[co,ci,kh,kw] * x[n,ci,oh*s-pad+kh, ow*s-pad+kw]
 *                    over (ci, kh, kw), kw fastest;
 *   dx[n,ci,ih,iw]:  w[co,ci,kh,kw] * dy[n,co,oh,ow] over (co, kh, kw), with
 *                    oh = (ih+pad-kh)/s (likewise ow) when that is an
 *                    integer inside dy;
 *   dw[co,ci,kh,kw]: dy[n,co,oh,ow] * x[n,ci,oh*s-pad+kh, ow*s-pad+kw] over
 *                    (n, oh, ow);  dbias[co]: plain sum of dy over (n, oh, ow).
 * Padding and positions no output reaches are kept as zero terms (w * 0),
 * so every output of an op has the same number of terms, as in an im2col
 * GEMM.  Stochastic accumulator words: dot product number
 * ((n*Ho+oh)*Wo+ow)*Co+co for y, ((n*H+ih)*W+iw)*Ci+ci for dx, the flat
 * index for dw, co for dbias (committed as the next op, site
 * "<site>.dbias").  alpha multiplies each accumulator result (exactly)
 * before the output rounding (0 means 1; any positive value, without error). */
int emu_t_conv2d(emu_ctx *ctx, const char *site, emu_tensor *y, const emu_tensor *x, const emu_tensor *w, const emu_tensor *bias, const emu_conv_opts *o, const emu_rounding *rnd);
/* dx = d loss / d x from dy. */
int emu_t_conv2d_backward_data(emu_ctx *ctx, const char *site, emu_tensor *dx, const emu_tensor *dy, const emu_tensor *w, const emu_conv_opts *o, const emu_rounding *rnd);
/* dw = d loss / d w from dy and x; dbias (may be NULL) = sum of dy over
 * N, H, W; both rounded under rnd. */
int emu_t_conv2d_backward_weights(emu_ctx *ctx, const char *site, emu_tensor *dw, emu_tensor *dbias, const emu_tensor *dy, const emu_tensor *x, const emu_conv_opts *o, const emu_rounding *rnd);

typedef struct emu_pool_opts {
    int size, stride;
} emu_pool_opts;
/* Pooling windows: size x size, no padding, Ho = (H - size) / stride + 1.
 * Max pool; argmax (may be NULL) receives, per output, the flat input
 * index chosen (first maximum), for the backward pass.  Selection in
 * window order (kh, kw) by IEEE maximum's order (-0 < +0); a NaN in the
 * window is selected (the first one), so NaN propagates.  The backward
 * pass routes dy to argmax and checks that each argmax lies in its
 * window.  What is rounded, once per output: max: the selected value;
 * max backward: the exact sum of the dy routed to an input; avg: the
 * exact window sum / size^2; avg backward: the exact sum of dy over the
 * windows covering an input / size^2 (= the exact sum of dy / size^2). */
int emu_t_maxpool2d(emu_ctx *ctx, const char *site, emu_tensor *y, size_t *argmax, const emu_tensor *x, const emu_pool_opts *o, const emu_rounding *rnd);
int emu_t_maxpool2d_backward(emu_ctx *ctx, const char *site, emu_tensor *dx, const emu_tensor *dy, const size_t *argmax, const emu_pool_opts *o, const emu_rounding *rnd);
int emu_t_avgpool2d(emu_ctx *ctx, const char *site, emu_tensor *y, const emu_tensor *x, const emu_pool_opts *o, const emu_rounding *rnd);
int emu_t_avgpool2d_backward(emu_ctx *ctx, const char *site, emu_tensor *dx, const emu_tensor *dy, const emu_pool_opts *o, const emu_rounding *rnd);

/* ---- batch normalisation (NCHW, per channel over N, H, W) --------------- */

typedef struct emu_batchnorm_opts {
    const emu_accum *accum;  /* the channel sums (required in training)    */
    bool training;           /* batch statistics; false: running ones      */
    double eps;              /* added to the variance (PyTorch: 1e-5), > 0 */
    double momentum;         /* running = (1 - m) running + m batch (0.1)  */
    const emu_rounding *stat_rnd; /* rounding of mean, var, xc and the
                                     running statistics; NULL: rnd         */
    const emu_rounding *param_grad_rnd; /* backward: of dgamma and dbeta;
                                           NULL: rnd                       */
} emu_batchnorm_opts;
/* Training mode: mean (C) = sum of x / M, xc (N, C, H, W) = x - mean,
 * var (C) = sum of xc^2 / M (biased), y = gamma xc / sqrt(var + eps) +
 * beta, and, if given, the running statistics updated as PyTorch does
 * (running_var from the unbiased variance var M / (M - 1)); M = N H W
 * must be at least 2.  Evaluation mode: y = gamma (x - running_mean) /
 * sqrt(running_var + eps) + beta (xc, mean, var unused, may be NULL).
 * gamma and beta (C) may be NULL (1 and 0).  The sums run under
 * o->accum; each quantity is rounded once into its tensor (sites
 * "<site>.mean", "<site>.xc", "<site>.var", "<site>", "<site>.running_mean",
 * "<site>.running_var"; the definitions in libemu/ops_norm.c). */
int emu_t_batchnorm2d(emu_ctx *ctx, const char *site, emu_tensor *y, emu_tensor *xc, emu_tensor *mean, emu_tensor *var, emu_tensor *running_mean, emu_tensor *running_var, const emu_tensor *x, const emu_tensor *gamma, const emu_tensor *beta, const emu_batchnorm_opts *o, const emu_rounding *rnd);
/* The backward pass of training mode from the forward's xc and var:
 * dbeta = sum of dy ("<site>.dbias"), dgamma = sum of dy xc / sqrt(var +
 * eps) ("<site>.dweight"), dx = gamma / sqrt(var + eps) (dy - dbeta / M -
 * xc dgamma / (M sqrt(var + eps))) ("<site>.dinput", from the two sums as
 * the accumulator left them), all rounded under rnd. */
int emu_t_batchnorm2d_backward(emu_ctx *ctx, const char *site, emu_tensor *dx, emu_tensor *dgamma, emu_tensor *dbeta, const emu_tensor *dy, const emu_tensor *xc, const emu_tensor *var, const emu_tensor *gamma, const emu_batchnorm_opts *o, const emu_rounding *rnd);

/* ---- softmax and losses (rows of a (B, C) matrix) ----------------------- */
/* Fused ops: each output is evaluated in binary64 from the inputs (the row
 * maximum subtracted before exp, row sums in column order, log of a sum
 * as log1p of all but the maximum's term) and rounded ONCE into the output
 * format; the binary64 error (a few 2^-53 relative) is the only departure
 * from correct rounding, and the MPFR reference measures it.  A NaN or
 * +inf in a row makes that row NaN.  Every output (loss and gradient
 * alike) is rounded under rnd. */

int emu_t_softmax(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *x, const emu_rounding *rnd);
int emu_t_log_softmax(emu_ctx *ctx, const char *site, emu_tensor *out, const emu_tensor *x, const emu_rounding *rnd);
/* loss (1 element) = mean over rows of -log softmax(logits)[label];
 * dlogits (may be NULL) = (softmax - onehot) * scale / B, the gradient of
 * scale * loss (scale: the loss scale, applied before rounding). */
int emu_t_cross_entropy(emu_ctx *ctx, const char *site, emu_tensor *loss, emu_tensor *dlogits, const emu_tensor *logits, const int *labels, float scale, const emu_rounding *rnd);
/* The labels must lie in [0, C): anything else is refused.  The label's
 * gradient is formed as -(sum of the other exponentials) / sum, so a
 * confident row keeps its relative accuracy.  Sites: "<site>" (loss),
 * "<site>.dlogits". */
/* loss = mean (pred - target)^2; dpred (may be NULL) = 2 (pred - target) * scale / n
 * (n = all elements); sites "<site>", "<site>.dpred". */
int emu_t_mse(emu_ctx *ctx, const char *site, emu_tensor *loss, emu_tensor *dpred, const emu_tensor *pred, const emu_tensor *target, float scale, const emu_rounding *rnd);

/* ---- optimizer updates (each output tensor rounded in its own format) -----
 * rnd rounds the weights; the state (v, m) is rounded under the options'
 * state_rnd, or rnd if that is NULL. */

typedef struct emu_sgd_opts {
    float lr, momentum, weight_decay;
    /* Rounding of the state (v, m) outputs; NULL: the op's rnd.  Lets a
     * weight update be stochastic while its momentum is rounded to
     * nearest. */
    const emu_rounding *state_rnd;
} emu_sgd_opts;
/* v = momentum * v + (g + weight_decay * w); w = w - lr * v
 * (momentum 0: w = w - lr * (g + wd * w)).  v may be NULL if momentum is 0.
 * The subtraction from w counts swamping: an update that leaves w
 * unchanged is an absorbed addend.
 * Each new v and w is the EXACT value of its formula (from the old w, v,
 * g, and the stored, rounded new v) rounded once: products of binary32
 * values are exact, sums are formed as error-free expansions.  A zero
 * coefficient omits its term (no 0 * inf).  Sites "<site>.v" (committed
 * first), "<site>".  Swamping of the w update: adds = non-zero updates,
 * absorbed = those that left w unchanged, lost bits per
 * emu_accum_count_add in w's format. */
int emu_t_sgd_update(emu_ctx *ctx, const char *site, emu_tensor *w, emu_tensor *v, const emu_tensor *g, const emu_sgd_opts *o, const emu_rounding *rnd);

typedef struct emu_adam_opts {
    float lr, beta1, beta2, eps, weight_decay; /* decoupled (AdamW) decay */
    int64_t t;                                 /* step, from 1           */
    const emu_rounding *state_rnd;             /* as in emu_sgd_opts     */
} emu_adam_opts;
/* m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2 (exact, rounded once;
 * 1 - b is exact for b >= 2^-29), then
 * w = w - lr (m_hat / (sqrt(v_hat) + eps) + wd w) with m_hat = m/(1 - b1^t),
 * v_hat = v/(1 - b2^t) from the stored m, v; the update is evaluated in
 * binary64, w minus it is exact, rounded once.  Sites "<site>.m",
 * "<site>.v", "<site>"; swamping as for SGD.  t >= 1, betas in [0, 1). */
int emu_t_adam_update(emu_ctx *ctx, const char *site, emu_tensor *w, emu_tensor *m, emu_tensor *v, const emu_tensor *g, const emu_adam_opts *o, const emu_rounding *rnd);


/* ---- sequence models (embedding, layer norm, causal attention) ---------
 * Activations of sequence models are (B, T, D) tensors, i.e. (B*T, D)
 * matrices; token ids are int32_t.  Every quantity below is rounded once
 * into its tensor's format; the sums run under the accumulator model of
 * the options (required), each output or statistic one dot product whose
 * terms, in the order given, define it.  The fast model sums in binary64
 * (embedding gradient, layer norm, the softmax's row sums) or, for the
 * products of attention, as emu_t_matmul's fast model does: one binary32
 * GEMM per example and head.  The exact definitions are in
 * libemu/ops_seq.c and libemu/ops_attn.c. */

/* out (N, D) (any shape of n*D elements whose last dimension is D): row i
 * = table (V, D) row idx[i], each value rounded (a cast) into out's format
 * under rnd; an index outside [0, V) is refused (EMU_EINVAL naming the
 * position and value).  Site "<site>". */
int emu_t_embedding(emu_ctx *ctx, const char *site, emu_tensor *out,
                    const emu_tensor *table, const int32_t *idx, size_t n,
                    const emu_rounding *rnd);

typedef struct emu_embedding_opts {
    const emu_accum *accum;  /* the scatter-add's sums (required)           */
    bool accumulate;         /* start each row's sum at dtable's value (a
                                tied head's gradient already there)       */
} emu_embedding_opts;
/* dtable (V, D): row v = sum, in ascending position order, of the rows
 * dout[i] (N, D) with idx[i] == v, under o->accum (dot product number
 * v*D + d for dtable[v, d]; accumulate: the accumulator starts at dtable's
 * old value, as emu_matmul_opts.accumulate), rounded once into dtable's
 * format; rows no index reaches are +0 (unchanged with accumulate).
 * Site "<site>". */
int emu_t_embedding_backward(emu_ctx *ctx, const char *site, emu_tensor *dtable,
                             const emu_tensor *dout, const int32_t *idx, size_t n,
                             const emu_embedding_opts *o, const emu_rounding *rnd);

typedef struct emu_layernorm_opts {
    const emu_accum *accum;          /* row sums (required)                 */
    double eps;                      /* PyTorch's 1e-5                      */
    const emu_rounding *stat_rnd;    /* mean, var, rstd (NULL: rnd)         */
    const emu_rounding *param_grad_rnd; /* dgamma, dbeta (NULL: rnd)        */
} emu_layernorm_opts;
/* Over the last dimension D of x (N, D) (any shape of N*D elements whose
 * last dimension is D; y, dy and dx likewise): mean (N) = sum of the row / D,
 * var = sum of (x - mean)^2 / D (the biased variance, of the stored mean;
 * rounded into rstd's format, not kept), rstd (N) = 1/sqrt(var + eps),
 * y = (x - mean) rstd gamma + beta; gamma, beta (D) may be NULL (1 and
 * 0).  mean and rstd are saved for the backward pass (binary32 tensors
 * keep them as the backward's inputs best).  Sites "<site>.mean",
 * "<site>.var", "<site>.rstd", "<site>" (y). */
int emu_t_layernorm(emu_ctx *ctx, const char *site, emu_tensor *y,
                    emu_tensor *mean, emu_tensor *rstd, const emu_tensor *x,
                    const emu_tensor *gamma, const emu_tensor *beta,
                    const emu_layernorm_opts *o, const emu_rounding *rnd);
/* dx (N, D); dgamma, dbeta (D) (may be NULL), sums over the N rows, under
 * param_grad_rnd; dx = rstd (dy gamma - S1 / D - xhat S2 / D), S1 and S2
 * the row sums of dy gamma and of dy gamma xhat, xhat = (x - mean) rstd.
 * Sites "<site>.dweight", "<site>.dbias", "<site>.dinput". */
int emu_t_layernorm_backward(emu_ctx *ctx, const char *site, emu_tensor *dx,
                             emu_tensor *dgamma, emu_tensor *dbeta,
                             const emu_tensor *dy, const emu_tensor *x,
                             const emu_tensor *mean, const emu_tensor *rstd,
                             const emu_tensor *gamma,
                             const emu_layernorm_opts *o, const emu_rounding *rnd);

/* ---- operand hooks ------------------------------------------------------ */
/* How a composite op (attention, LSTM) lets its caller replace the
 * operands of its products, e.g. by their scaled-format quantization
 * (the nn layers' scaled presets): right before a product reads operand
 * `which` (the op's numbering: emu_attn_operand, emu_lstm_operand), the op
 * calls fn with that operand as a tensor view t (its format and role;
 * shape as listed with the numbering) and `axis`, the axis of t along
 * which the product reduces; fn writes the t->n binary32 values the
 * product is to read instead into out (which does not overlap t) and
 * returns 0, or -1 with ctx's error set (the op then fails).  The product
 * then reads out exactly as it would have read t: same terms, order and
 * rounding; operands that are not products' (the biases, the softmax's
 * and the gates' elementwise parts) are never replaced.  The MPFR
 * references see the replaced values (the replacement's own error is the
 * hook's to measure).  A NULL hook (or fn) leaves every operand as it is. */
typedef struct emu_operand_hook {
    int (*fn)(void *user, emu_ctx *ctx, int which, const emu_tensor *t,
              int axis, float *out);
    void *user;
} emu_operand_hook;

/* Attention's operands, each a view of (hs = C / H):
 *   Q, K of the scores: qkv's q or k part as (B T H, hs), along hs (axis 1);
 *   ATT, V of out = att v: att (B, H, T, T) along t2 (axis 3); v as
 *     (B, T, C) along T (axis 1);
 * backward:
 *   ATT_DV, DOUT_DV of dv = att^T dout: att along t (axis 2), dout (B, T, C)
 *     along T (axis 1);
 *   DOUT_DATT, V_DATT of G = dout v^T: dout as (B T H, hs), v as
 *     (B T H, hs), along hs (axis 1);
 *   DS_DQ, K_DQ of dq = dS k: dS (B, H, T, T) along t2 (axis 3), k as
 *     (B, T, C) along T (axis 1);
 *   DS_DK, Q_DK of dk = dS^T q: dS along t (axis 2), q as (B, T, C) along T
 *     (axis 1).
 * Entries above the diagonal of att and dS are +0 in the views. */
typedef enum emu_attn_operand {
    EMU_ATTN_Q, EMU_ATTN_K, EMU_ATTN_ATT, EMU_ATTN_V,
    EMU_ATTN_ATT_DV, EMU_ATTN_DOUT_DV, EMU_ATTN_DOUT_DATT, EMU_ATTN_V_DATT,
    EMU_ATTN_DS_DQ, EMU_ATTN_K_DQ, EMU_ATTN_DS_DK, EMU_ATTN_Q_DK,
    EMU_ATTN_OPERAND_COUNT
} emu_attn_operand;

typedef struct emu_attention_opts {
    const emu_accum *accum;        /* the two products' dot products, the
                                      softmax's row sums (required)        */
    int heads;                     /* H, dividing C                          */
    const emu_rounding *stat_rnd;  /* scores and probabilities (NULL: rnd)   */
    const emu_operand_hook *operands; /* the products' operands (NULL: as
                                      they are; emu_attn_operand)          */
} emu_attention_opts;
/* Causal multi-head self-attention, GPT-2's layout: qkv (B, T, 3C) is the
 * packed output of the c_attn linear, [q | k | v], head h owning columns
 * h*C/H .. (h+1)*C/H - 1 of each.  att (B, H, T, T) keeps the softmax
 * probabilities for the backward pass (entries above the diagonal +0).
 * scores = q k^T / sqrt(C/H) (dot under accum, the scale applied before
 * the one rounding; site "<site>.scores", rounded into att's format under
 * stat_rnd, kept only for t2 <= t), att = softmax over t2 <= t
 * ("<site>.softmax", the row sum under accum), out (B, T, C) = att v
 * ("<site>", under accum). */
int emu_t_attention(emu_ctx *ctx, const char *site, emu_tensor *out,
                    emu_tensor *att, const emu_tensor *qkv,
                    const emu_attention_opts *o, const emu_rounding *rnd);
/* dqkv (B, T, 3C) from dout (B, T, C), the forward's qkv and att.  Sites
 * "<site>.dv", "<site>.datt", "<site>.dscores", "<site>.dq", "<site>.dk"
 * (datt and dscores, the gradients of att and of the scores, rounded into
 * att's format under stat_rnd; dq, dk, dv under rnd). */
int emu_t_attention_backward(emu_ctx *ctx, const char *site, emu_tensor *dqkv,
                             const emu_tensor *dout, const emu_tensor *qkv,
                             const emu_tensor *att,
                             const emu_attention_opts *o, const emu_rounding *rnd);

/* ---- LSTM -------------------------------------------------------------- */
/* One layer of PyTorch's nn.LSTM (batch_first=True) over a window of T
 * steps, gate order i, f, g, o; the exact definition of every quantity
 * (its terms, their order, where it is rounded) is in libemu/ops_lstm.c.
 * Shapes: x (B, T, I); y (B, T, H) = h_1 .. h_T; w_ih (4H, I), w_hh
 * (4H, H), b_ih, b_hh (4H); h0, c0, h_n, c_n (B, H).  Per step t:
 *   gates_t = b_ih + b_hh + x_t W_ih^T + h_{t-1} W_hh^T       (B, 4H)
 *             ONE dot product per gate under o->accum, of I + H + 2 terms
 *             (the biases are terms times 1; the fast model groups its
 *             binary32 sums as PyTorch: the window's x W_ih^T first),
 *             rounded once into gates' format under rnd: site
 *             "<site>.gates" (pre-activation);
 *   i, f, o = sigmoid, g = tanh of the rounded pre-activations, each
 *             rounded once into gates' format under rnd as emu_t_unary
 *             rounds them (correctly): site "<site>.act" (all four gates);
 *   c_t = f c_{t-1} + i g   exact, rounded once into c's format under
 *             o->cell_rnd: site "<site>.c";
 *   h_t = o tanh(c_t)       binary64, rounded once into y's format under
 *             rnd: site "<site>.h".
 * Each site aggregates its T steps.  h0 = c0 = 0 when NULL (each window
 * starts from zero state: truncated BPTT over the window). */
/* The LSTM's GEMM operands (emu_operand_hook), G = 4H:
 *   X, W_IH: x as (B T, I) and w_ih (G, I), along I (axis 1): read by
 *     every step's gates (the window's x once);
 *   W_HH: w_hh (G, H) along H (axis 1);
 *   H: h_{t-1} (B, H) along H (axis 1), at each step t >= 1 (h_{-1} = h0
 *     at t = 0 when given; zero state is not passed);
 * backward (D = dgates as (B T, G), rows (b, t)):
 *   DG_DH, W_HH_DH of dh_t += dgates_{t+1} w_hh: dgates_{t+1} (B, G) at
 *     each step, along G (axis 1); w_hh along G (axis 0);
 *   D_DX, W_IH_DX of dx = D w_ih: D along G (axis 1), w_ih along G (axis 0);
 *   D_DW of dw_ih = D^T x and dw_hh = D^T Hp: D along B T (axis 0), one
 *     replacement for both;
 *   X_DW: x as (B T, I) along B T (axis 0);  H_DW: Hp (B T, H), the rows
 *     h_{t-1}, along B T (axis 0).
 * The bias terms (times 1) and the bias gradients' sums read the values
 * as they are. */
typedef enum emu_lstm_operand {
    EMU_LSTM_X, EMU_LSTM_W_IH, EMU_LSTM_W_HH, EMU_LSTM_H,
    EMU_LSTM_DG_DH, EMU_LSTM_W_HH_DH, EMU_LSTM_D_DX, EMU_LSTM_W_IH_DX,
    EMU_LSTM_D_DW, EMU_LSTM_X_DW, EMU_LSTM_H_DW, EMU_LSTM_OPERAND_COUNT
} emu_lstm_operand;

typedef struct emu_lstm_weights {
    const emu_tensor *w_ih;   /* (4H, I), rows i | f | g | o (required)    */
    const emu_tensor *w_hh;   /* (4H, H) (required)                        */
    const emu_tensor *b_ih;   /* (4H), or NULL (zero)                      */
    const emu_tensor *b_hh;   /* (4H), or NULL (zero)                      */
} emu_lstm_weights;

/* The weight gradients of emu_t_lstm_backward; any may be NULL (not
 * computed).  Shapes as the weights'. */
typedef struct emu_lstm_grads {
    emu_tensor *dw_ih, *dw_hh, *db_ih, *db_hh;
} emu_lstm_grads;

typedef struct emu_lstm_opts {
    const emu_accum *accum;             /* every dot product and sum (required) */
    const emu_rounding *cell_rnd;       /* c_t, the cell-state gradients and
                                           c_n (NULL: rnd)                   */
    const emu_rounding *param_grad_rnd; /* dw_ih, dw_hh, db_ih, db_hh
                                           (NULL: rnd)                       */
    const emu_operand_hook *operands;   /* the GEMM operands (NULL: as they
                                           are; emu_lstm_operand)            */
} emu_lstm_opts;

/* Forward.  Saved for the backward pass: gates (B, T, 4H), the ACTIVATED
 * gates [i | f | g | o] of every step, and c (B, T, H), the cell states
 * c_1 .. c_T; with y, x, h0 and c0 they are all it reads.  gates' format
 * is the activations' (and the pre-activations') format, c's the cell
 * state's (binary32 keeps a wide cell state under a narrow activation
 * format).  h_n, c_n (may be NULL): the final state h_T, c_T, copies of
 * y[:, T-1] and c[:, T-1] rounded into their own formats (sites
 * "<site>.h_n" under rnd, "<site>.c_n" under o->cell_rnd).  No output may
 * share storage with an input. */
int emu_t_lstm(emu_ctx *ctx, const char *site, emu_tensor *y, emu_tensor *gates, emu_tensor *c, emu_tensor *h_n, emu_tensor *c_n, const emu_tensor *x, const emu_tensor *h0, const emu_tensor *c0, const emu_lstm_weights *w, const emu_lstm_opts *o, const emu_rounding *rnd);

/* Backward through the T steps of the window (the gradients of the final
 * state h_T, c_T are zero: the loss reads y only).  From dy (B, T, H) and
 * the forward's x, y, gates, c, h0, c0 (h0, c0 NULL: zero, as in the
 * forward) and weights:
 *   dh_t (B, H) = dy_t + dgates_{t+1} W_hh (one dot product under
 *             o->accum whose accumulator starts at dy_t; dy_{T-1} alone
 *             at t = T-1), rounded into dy's format under rnd ("<site>.dh");
 *   dc_t = dh_t o_t (1 - tanh(c_t)^2) + dc_{t+1} f_{t+1}, binary64,
 *             rounded into c's format under o->cell_rnd ("<site>.dc");
 *   dgates_t (B, 4H) = [dc_t g i (1 - i) | dc_t c_{t-1} f (1 - f) |
 *             dc_t i (1 - g^2) | dh_t tanh(c_t) o (1 - o)] from the saved
 *             activations, binary64, rounded into dy's format under rnd
 *             ("<site>.dgates");
 * then over the whole window, as GEMMs under o->accum of B T terms in
 * (b, t) order:
 *   dx (B, T, I) = dgates W_ih ("<site>.dinput", under rnd; may be NULL);
 *   dw_ih = sum over (b, t) of dgates^T x_t ("<site>.dweight_ih"),
 *   dw_hh = sum of dgates^T h_{t-1} ("<site>.dweight_hh"),
 *   db_ih, db_hh = sum of dgates ("<site>.dbias_ih", "<site>.dbias_hh"),
 *   under o->param_grad_rnd.  The gradients overwrite their tensors. */
int emu_t_lstm_backward(emu_ctx *ctx, const char *site, emu_tensor *dx, const emu_lstm_grads *g, const emu_tensor *dy, const emu_tensor *x, const emu_tensor *y, const emu_tensor *gates, const emu_tensor *c, const emu_tensor *h0, const emu_tensor *c0, const emu_lstm_weights *w, const emu_lstm_opts *o, const emu_rounding *rnd);

#ifdef __cplusplus
}
#endif
#endif
