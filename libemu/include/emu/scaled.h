/*
 * emu/scaled.h — block-scaled formats (OCP MX, NVFP4, user-defined) and
 * per-tensor scaling recipes.
 *
 * A scaled format stores a tensor as narrow elements plus scales: every
 * block of elements shares one scale in a scale format, and the tensor may
 * carry one binary32 scale besides.  The value of element i is
 *
 *     v_i = e_i * s_b(i) * g
 *
 * with e_i a value of the element format, s_b(i) its block's scale (1 when
 * the format has no block scales) and g the tensor scale (1 when it has
 * none).  Quantization picks the scales from the data (or, for the tensor
 * scale, from a recipe's history) and rounds each element once:
 *
 *     e_i = round_elem( x_i / (s_b(i) * g) )
 *
 * from the exact quotient (not from a rounded reciprocal), in any rounding
 * mode of the core, stochastic ones included, saturating at ±max of the
 * element format as the OCP MX spec does ("clamping normal numbers").
 *
 * Blocks run along one axis of the tensor, the reduction axis of the
 * matmul it will feed: 1-D blocks of b consecutive elements along that
 * axis (OCP MX: 32), or for matrices 2-D tiles of b0 along the axis by b1
 * across it (weights in 128 x 128 or 16 x 16 tiles).  A dimension that
 * the block does not divide ends in a partial block (the padding a
 * hardware tile would hold is zeros, which change no block's amax), unless
 * the format says `pad=no`, and then it is an error.
 *
 * What a non-finite input does: a block holding a NaN or an infinity gets
 * the scale format's NaN (E8M0 0xFF), and every element of that block then
 * decodes as NaN — the spec's rule for a NaN scale.  A scale format with no
 * NaN cannot mark such a block, so quantization refuses the data, naming
 * the element.  A format with no block scales rounds each value on its own:
 * inf stays inf where the element format has one and saturates to ±max
 * otherwise; NaN stays NaN, or is refused (naming the element) if the
 * element format has no NaN; current scaling takes g from the largest
 * finite |x|.
 */
#ifndef EMU_SCALED_H
#define EMU_SCALED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "emu/format.h"
#include "emu/ops.h"
#include "emu/round.h"
#include "emu/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a block's scale is chosen from amax, the largest |x| in the block
 * (divided by the tensor scale g, if any).  emax_elem is the exponent of
 * the element format's largest binade, max_elem its largest value. */
typedef enum emu_scale_rule {
    /* s = 2^(floor(log2 amax) - emax_elem): the OCP MX v1.0 rule.  Values
     * in the top binade above max_elem are clipped to it. */
    EMU_SCALE_RULE_FLOOR,
    /* s = 2^ceil(log2(amax / max_elem)): the smallest power of two that
     * clips nothing (the "round-up" variant of MXFP8 training recipes). */
    EMU_SCALE_RULE_CEIL,
    /* s = round_scale(amax / max_elem) in the scale format with the
     * format's scale_mode (NVFP4: nearest-even; ru clips nothing). */
    EMU_SCALE_RULE_AMAX,
    EMU_SCALE_RULE_COUNT
} emu_scale_rule;

/* A power-of-two rule's exponent is clamped into the scale format's range
 * (a block of zeros, or of values too small for any scale, gets the
 * smallest scale; its elements then flush).  An AMAX scale is rounded with
 * saturation, and an amax of 0 gives the smallest positive scale.  Clamped
 * blocks are counted (scale_clamped); with range=error, quantizing data
 * that needs a clamped scale fails instead, naming the block and its amax
 * (a block of zeros is never an error). */

typedef struct emu_scaled_format {
    char name[EMU_NAME_MAX];  /* "mxfp8", "nvfp4", or "custom"            */
    emu_format elem;          /* element format (fits the carrier)        */
    bool int_elem;            /* packed elements are two's complement
                                 integers (MXINT8): the element format is
                                 then e1m6-style sign-magnitude with the
                                 same values, -2^(bits-1) is unused, and
                                 quantization gives +0, never -0          */
    bool block_scaled;        /* false: a per-tensor format only          */
    emu_format scale;         /* block scale format (if block_scaled)     */
    size_t block[2];          /* [0] along the axis, [1] across it (1: a
                                 1-D block); [1] > 1 only for matrices    */
    emu_scale_rule rule;
    emu_rnd scale_mode;       /* AMAX rule: rounding of the scale         */
    bool tensor_scale;        /* a binary32 tensor scale g as well        */
    bool pad;                 /* partial blocks at the edges (else refuse) */
    bool strict_range;        /* range=error: refuse data whose block scale
                                 the scale format cannot hold, rather than
                                 clamp it (the spec's E8M0 behaviour)     */
} emu_scaled_format;

/* Parses a scaled-format spec:
 *   a preset   mxfp8 (E4M3), mxfp8-e5m2, mxfp6-e2m3, mxfp6-e3m2, mxfp4,
 *              mxint8 (OCP MX: blocks of 32, E8M0 scales, floor rule),
 *              nvfp4 (E2M1, blocks of 16, E4M3 scales by the AMAX rule with
 *              rne, binary32 tensor scale);
 *   or keys    elem=FMT, scale=FMT|none, block=N|NxM, rule=floor|ceil|amax,
 *              scale_mode=MODE, tensor=yes|no, pad=yes|no, range=clamp|error
 * a preset may be followed by keys that override it: "mxfp8,block=16x16".
 * FMT is a registered format name.  "elem=e4m3,scale=none,tensor=yes" is
 * FP8 with a per-tensor scale.  Returns 0 or -1 with err naming the key. */
int emu_scaled_format_parse(emu_scaled_format *sf, const char *spec,
                            emu_error *err);

/* Checks a format built by hand: a signed element format with a zero that
 * fits the carrier (integer elements: 8 bits, one exponent bit, no
 * specials); block scales, a tensor scale or both; a scale format that
 * fits the carrier and, for the power-of-two rules, holds 1; block sizes
 * >= 1; a deterministic scale_mode; element, scale and tensor-scale
 * significands of 53 bits at most together, so that every value is a
 * binary64.  (2-D blocks are checked against the shape when a tensor is
 * allocated.)  Returns 0 or -1 with err naming the key. */
int emu_scaled_format_validate(const emu_scaled_format *sf, emu_error *err);

/* The canonical spec (parses back to the same format). */
void emu_scaled_format_string(const emu_scaled_format *sf, char *buf,
                              size_t size);

/* Names of the presets, NULL-terminated. */
const char *const *emu_scaled_preset_names(void);

/* Bits of storage per element, scales included (MXFP8: 8.25). */
double emu_scaled_bits_per_element(const emu_scaled_format *sf);

/* ---- scaled tensors ------------------------------------------------------ */

#define EMU_SCALED_MAX_DIMS 4

typedef struct emu_scaled_tensor {
    emu_scaled_format sf;
    int ndim;
    size_t shape[EMU_SCALED_MAX_DIMS];
    size_t n;                 /* elements                                  */
    int axis;                 /* blocks run along this axis                */
    size_t nblocks;           /* 1 if the format has no block scales       */
    float *elem;              /* n element values (NaN only where the
                                 element format has NaN; 0 in NaN blocks) */
    float *scale;             /* nblocks block scales (1 without them; NaN
                                 marks a block holding inf or NaN)         */
    float tensor_scale;       /* g: a positive binary32 value, 1 if none   */
} emu_scaled_tensor;

/* Allocates a scaled tensor of the given shape, blocked along `axis`
 * (negative counts from the end: -1 is the last).  Refuses an axis out of
 * range, a 2-D block on a tensor that is not a matrix, a block that does
 * not divide its dimension when the format says pad=no, and sizes that
 * overflow.  On -1 *q is left empty (safe to free). */
int emu_scaled_alloc(emu_scaled_tensor *q, const emu_scaled_format *sf,
                     int ndim, const size_t *shape, int axis, emu_error *err);
void emu_scaled_free(emu_scaled_tensor *q);

/* The block of element i (flat, row-major). */
size_t emu_scaled_block_of(const emu_scaled_tensor *q, size_t i);

/* ---- quantization -------------------------------------------------------- */

typedef struct emu_quant_opts {
    emu_rnd mode;             /* element rounding (EMU_RNE when zeroed)    */
    unsigned sr_bits;         /* for EMU_RS_BITS                           */
    uint64_t seed, stream;    /* stochastic: element i takes the word
                                 emu_random64(seed, stream, i)            */
    /* The tensor scale g, for formats with one: 0 means "current scaling",
     * g = amax(x) / (max_elem * max_scale) rounded into binary32 (amax over
     * the finite values; max_scale = 1 without block scales: g = amax /
     * max_elem), or 1 if amax is 0; a positive finite value is used as
     * given (delayed scaling).  The rounding is the AMAX rule's scale_mode
     * (so that ru clips nothing), nearest-even for other formats. */
    double tensor_scale;
} emu_quant_opts;

/* What quantization did to one block. */
typedef struct emu_block_stats {
    float amax;               /* largest |x| in the block (NaN if any NaN,
                                 else inf if any inf)                     */
    uint32_t clipped;         /* elements whose exact x / (s g) lies beyond
                                 ±max_elem (saturated to it)              */
    uint32_t flushed;         /* non-zero x whose element is zero          */
    uint32_t inexact;
    double err_sq;            /* sum of (v_i - x_i)^2, the exact
                                 differences rounded once (finite blocks) */
    double ref_sq;            /* sum of x_i^2                              */
} emu_block_stats;

/* Totals over a quantization (calls add to it: zero it first). */
typedef struct emu_quant_counts {
    uint64_t n, blocks;
    uint64_t clipped, flushed, inexact;
    uint64_t nonfinite_blocks; /* blocks whose scale is NaN                */
    uint64_t scale_clamped;   /* blocks whose ideal scale lay outside the
                                 scale format (clamped or saturated)      */
    double err_sq, ref_sq;    /* over finite blocks                         */
    double err_max;           /* largest |v_i - x_i| / |x_i| (x_i != 0)     */
    uint64_t scale_hist[EMU_HIST_BINS]; /* log2 |s_b| of each block's scale */
} emu_quant_counts;

/* Quantizes the q->n binary32 values x (row-major, q's shape) into q.
 * counts and blocks (q->nblocks entries) may be NULL.  Fails, leaving q's
 * contents unspecified, on: a block whose scale the scale format cannot
 * hold when the format says range=error, a stochastic mode without sr_bits
 * in range, a tensor scale that is not a positive finite binary32 value,
 * non-finite data where the scale format has no NaN.  Returns 0 or -1
 * with err. */
int emu_scaled_quantize(emu_scaled_tensor *q, const float *x,
                        const emu_quant_opts *o, emu_quant_counts *counts,
                        emu_block_stats *blocks, emu_error *err);

/* Value of element i: e_i * s_b(i) * g, exact in binary64 (NaN in a NaN
 * block). */
double emu_scaled_value(const emu_scaled_tensor *q, size_t i);

/* Writes e_i * s_b(i) to out (the tensor scale left out when
 * with_tensor_scale is false, as a GEMM applies it after accumulating;
 * included otherwise).  Fails, naming the element, if a value is not a
 * binary32 number exactly (out of range, or too many bits with g).  */
int emu_scaled_dequantize(const emu_scaled_tensor *q, float *out,
                          bool with_tensor_scale, emu_error *err);

/* ---- packed storage ------------------------------------------------------ *
 * For exchange with hardware simulations: the element codes as
 * emu_tensor_pack lays them out (FP4 two per byte, FP6 four per three
 * bytes, little-endian bit stream; MXINT8 as two's complement bytes), then
 * the block scales' codes (one byte each for 8-bit scale formats; wider
 * ones as emu_tensor_pack would), then g as 4 little-endian bytes if the
 * format has a tensor scale.  Blocks are numbered as emu_scaled_block_of
 * numbers them: row-major over the block grid. */
size_t emu_scaled_packed_size(const emu_scaled_tensor *q);
int emu_scaled_pack(const emu_scaled_tensor *q, uint8_t *buf, size_t size,
                    emu_error *err);
/* Reads a packed tensor into q (its format, shape and axis).  Refuses a
 * short buffer, an element or scale code that is not a value (a format
 * without NaN has no NaN code to read), a non-positive scale and a tensor
 * scale that is not a positive finite binary32. */
int emu_scaled_unpack(emu_scaled_tensor *q, const uint8_t *buf, size_t size,
                      emu_error *err);

/* ---- per-tensor scaling recipes ----------------------------------------- */

#define EMU_AMAX_HISTORY_MAX 1024

typedef enum emu_tscale_kind {
    EMU_TSCALE_CURRENT,       /* g from this tensor's own amax             */
    EMU_TSCALE_DELAYED,       /* g from the amax of earlier steps          */
    EMU_TSCALE_COUNT
} emu_tscale_kind;

typedef enum emu_amax_algo {
    EMU_AMAX_MAX,             /* the largest amax in the history          */
    EMU_AMAX_RECENT,          /* the most recent one                       */
    EMU_AMAX_ALGO_COUNT
} emu_amax_algo;

typedef struct emu_tensor_scaling {
    emu_tscale_kind kind;
    int history;              /* DELAYED: amax values kept, 1..MAX (16)   */
    emu_amax_algo algo;
    int margin;               /* g is multiplied by 2^margin (headroom)   */
} emu_tensor_scaling;

/* A tensor's amax history (zero-initialised: empty). */
typedef struct emu_amax_history {
    float amax[EMU_AMAX_HISTORY_MAX];
    int len, pos;             /* values held; where the next goes          */
    uint64_t rejected;        /* non-finite amax values not recorded       */
} emu_amax_history;

/* The tensor scale for the next quantization of a tensor under recipe t:
 *   CURRENT: from amax_now;
 *   DELAYED: from the history (max or most recent); an empty history, or
 *            one holding only zeros, falls back to amax_now;
 * then g = a * 2^margin / (max_elem * max_scale) rounded into binary32
 * as emu_quant_opts says.  The
 * guards: an amax of 0, inf or NaN never makes a scale; if nothing usable
 * is left, g is `previous` (1 if that is not a positive finite value), so
 * g is always positive and finite.  Returns g. */
double emu_tensor_scaling_factor(const emu_tensor_scaling *t,
                                 const emu_amax_history *h, double amax_now,
                                 double previous, const emu_scaled_format *sf);

/* Records a step's amax (a non-finite one is counted and skipped). */
void emu_amax_record(emu_amax_history *h, int history, double amax);

/* The largest |x_i| (NaN if any x_i is NaN). */
double emu_amax(const float *x, size_t n);

/* Parses "current" or "delayed[,history=N][,algo=max|recent][,margin=M]".
 * Returns 0 or -1 with err. */
int emu_tensor_scaling_parse(emu_tensor_scaling *t, const char *spec,
                             emu_error *err);
void emu_tensor_scaling_string(const emu_tensor_scaling *t, char *buf,
                               size_t size);

/* ---- ops ------------------------------------------------------------------ */

/* Quantizes tensor x into q through the context: stochastic words from the
 * op's stream (seed ctx->seed, stream emu_ctx_stream(ctx)), the elements
 * rounded under rnd (required; its mode and sr_bits, as emu_quant_opts'
 * mode and sr_bits, which this op does not read), always saturating; o
 * may be NULL (current scaling) or give tensor_scale.  counts (may be
 * NULL) adds this call's.
 *
 * The op commits through emu_commit like any other (emu/ops.h): the
 * choke point rounds each exact quotient x_i / (s_b(i) g) into the
 * element format (the same map and words as emu_scaled_quantize's fast
 * paths, tested bit-identical), so site `site` (kind "quantize", x's role,
 * the scaled format's name in the format column) records what every op
 * records, for the elements: results, inexact, underflow, to_zero,
 * subnormal, overflow (IEEE's: the rounding with an unbounded exponent
 * lies beyond ±max_elem; a clipped element that rounds to max_elem within
 * its binade is not one — emu_quant_counts' clipped counts those too),
 * NaN and nan_produced of the values (every value of a block holding inf
 * or NaN is NaN; produced unless the block held a NaN), the histograms of
 * x and of the values e_i s_b(i) g, the scales (s_b g per block,
 * hist_scale), and on a sample of ctx->ref_rate the error of the element
 * against the exact quotient computed by MPFR from x_i, s_b(i) and g (in
 * ulps of the element format at the quotient, and relative: the same as
 * the value's error against x_i).  ctx->observer sees the elements, and
 * the quotients as hi + lo.  With neither statistics nor an observer the
 * fast paths alone run.  Advances ctx->op_index like any op. */
int emu_t_quantize_scaled(emu_ctx *ctx, const char *site,
                          emu_scaled_tensor *q, const emu_tensor *x,
                          const emu_quant_opts *o, emu_quant_counts *counts,
                          const emu_rounding *rnd);

/* out = alpha op(A) op(B) with scaled operands: (M, K) x (K, N) -> (M, N).
 * The terms of dot product (i, j) are the exact products
 * (e_a s_a)(e_b s_b) of the operands' values without their tensor scales,
 * summed under opts->accum in k order; the accumulator's result times
 * alpha g_a g_b is rounded once into out's format under rnd (alpha 0,
 * meaning 1, or a power of two, so that alpha g_a g_b is exact in
 * binary64; the final multiplication is error-free before the rounding).
 * So the fused model with k equal to the block size is an MX dot-product
 * unit with its exact inner sums.
 *
 * Operands with block scales must be blocked along K: A (M, K) along axis
 * 1 (axis 0 if trans_a: A stored (K, M)); B (K, N) along axis 0 (axis 1 if
 * trans_b), and when both have block scales their extents along K must
 * match, so that each block of A meets exactly one block of B.  opts is
 * required (its accumulator, as for emu_t_matmul); a_src/b_src (binary32
 * sources, the shapes of A and B, in their own scale: the reference from
 * them is multiplied by alpha alone) give the error decomposition;
 * accumulate is refused (its start value would be divided by
 * alpha g_a g_b, not exactly).  Every value of A and B must
 * dequantize to a binary32 exactly (emu_scaled_dequantize). */
int emu_t_matmul_scaled(emu_ctx *ctx, const char *site, emu_tensor *out,
                        const emu_scaled_tensor *a, const emu_scaled_tensor *b,
                        const emu_matmul_opts *opts, const emu_rounding *rnd);

/* ---- the random Hadamard transform --------------------------------------- *
 * The MXFP4 and NVFP4 training recipes (Tseng et al. 2025; NVIDIA 2025)
 * multiply a GEMM's two operands along its reduction axis by the same
 * random orthogonal matrix R = H_b D / sqrt(b), block-diagonal in blocks
 * of b consecutive indices (H_b: Sylvester's Hadamard matrix of +-1s, D:
 * random signs), so that (R A)^T (R B) = A^T B exactly while the outliers
 * of each block are spread over it before quantization.
 *
 * emu_rht transforms the binary32 tensor `in`, seen as (outer, len, inner)
 * row-major, along its middle axis: every complete block of b indices
 * (b = 4, 16, 64 or 256, so that 1/sqrt(b) is a power of two); the last
 * len mod b indices are copied, which keeps the map orthogonal.  The
 * arithmetic is defined as binary32 with round-to-nearest-even at every
 * step, whatever the host's floating-point state: the signs (exact),
 * log2(b) butterfly stages (u + v, u - v, in increasing index order), then
 * the product by 2^(-log2(b)/2) (exact unless the result is subnormal).
 * inverse applies R^T = D H_b / sqrt(b) instead (butterflies, scaling,
 * signs).  The signs are bit j of the Philox words of `seed` (stream
 * EMU_RHT_STREAM), the same for every block.  out may be in.
 * Returns 0, or -1 with err (a block size other than 4, 16, 64, 256; NULL
 * arrays with a non-zero size; a size that overflows). */
#define EMU_RHT_STREAM 0x5248540000000000ull /* "RHT" */
int emu_rht(float *out, const float *in, size_t outer, size_t len,
            size_t inner, unsigned block, uint64_t seed, bool inverse,
            emu_error *err);

/* The b signs of emu_rht's D for seed (+1.0f or -1.0f each). */
int emu_rht_signs(float *signs, unsigned block, uint64_t seed, emu_error *err);

/* Names as specs spell them. */
const char *emu_scale_rule_name(emu_scale_rule r);

#ifdef __cplusplus
}
#endif
#endif
