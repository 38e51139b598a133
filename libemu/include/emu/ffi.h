/*
 * emu/ffi.h — a small, stable C ABI for foreign-function interfaces
 * (the Python package `emu` binds it through ctypes).
 *
 * Only scalars, pointers to plain arrays, NUL-terminated strings and
 * opaque handles cross this interface: no struct of the library is laid
 * out on the other side, so a binding cannot drift from the C structs
 * when they grow.  Fields are read by name (emu_ffi_format_get_int(f,
 * "bits", &v)), counts come back as arrays whose column names the
 * library lists (emu_ffi_counts_name), and settings go in as strings the
 * library parses (mode "sr13", profile "ocp", accumulator "seq,acc=...").
 *
 * Errors: every function that can fail returns 0 on success and -1 on
 * failure, and then the calling thread's last error (emu/error.h: code,
 * where, key, message, the library's text unchanged) is readable through
 * emu_ffi_error_*() until the thread's next failing call.  Functions
 * that cannot fail say so.  Handles are freed by their _free function
 * (NULL is accepted); a handle may be used from one thread at a time.
 *
 * Arrays are contiguous, row-major, in the caller's memory; the library
 * never keeps a pointer to them past the call.  Everything here is
 * implemented with the library's public functions (libemu/ffi.c): no
 * rounding, quantization or GEMM of its own.
 */
#ifndef EMU_FFI_H
#define EMU_FFI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors (per thread) ------------------------------------------------ */

/* The last failure of this thread: its emu_errcode (0: none yet), its
 * code's name ("EMU_ESPEC"), where, key ("" if none) and message. */
int emu_ffi_error_code(void);
const char *emu_ffi_error_code_name(void);
const char *emu_ffi_error_where(void);
const char *emu_ffi_error_key(void);
const char *emu_ffi_error_message(void);

/* The library's release version string ("0.1.0"); emu_api_version()
 * (emu/version.h) gives the API version. */
const char *emu_ffi_version_string(void);

/* ---- formats ------------------------------------------------------------- */

typedef struct emu_ffi_format emu_ffi_format;

/* Registered formats (embedded and loaded): the count and the i-th name
 * (NULL past the count).  Cannot fail. */
size_t emu_ffi_format_count(void);
const char *emu_ffi_format_name(size_t i);

/* A format from a name, an inline spec or a .fmt file (emu_format_resolve). */
int emu_ffi_format_new(const char *spec, emu_ffi_format **out);
void emu_ffi_format_free(emu_ffi_format *f);

/* The readable fields, by name: the i-th key (NULL past the end) and its
 * type: 'i' integer, 'b' boolean (read with get_int), 'u' unsigned 64-bit
 * (get_uint), 'd' real, 's' string.  Keys: name, spec (canonical inline spec), aliases,
 * description, bits, exp_bits, man_bits, bias, precision, emin, emax,
 * qmin, is_signed, subnormals, has_zero, specials, overflow, max,
 * min_normal, min_subnormal, min_value, epsilon, unit_roundoff,
 * finite_count, has_inf, has_nan, fits_carrier, fits_double. */
const char *emu_ffi_format_key(size_t i);
int emu_ffi_format_key_type(size_t i);
int emu_ffi_format_get_int(const emu_ffi_format *f, const char *key,
                           int64_t *out);
int emu_ffi_format_get_uint(const emu_ffi_format *f, const char *key,
                            uint64_t *out);
int emu_ffi_format_get_real(const emu_ffi_format *f, const char *key,
                            double *out);
int emu_ffi_format_get_str(const emu_ffi_format *f, const char *key,
                           char *buf, size_t size);

/* ---- rounding ------------------------------------------------------------ */

typedef struct emu_ffi_rounding emu_ffi_rounding;

/* How to round: mode as the CLI spells it (rne rna rz ru rd ro sr srN);
 * saturate -1: the format's own overflow rule, 1: overflow and ±inf give
 * ±max (OCP saturation), 0: never saturate (a saturating format then
 * overflows to inf, or NaN where it has no inf; refused for a format with
 * neither); tininess "after" (NULL or "": after) or "before"; profile
 * "ieee" (NULL or ""), "ocp", "riscv". */
int emu_ffi_rounding_new(const char *mode, int saturate, const char *tininess,
                         const char *profile, emu_ffi_rounding **out);
void emu_ffi_rounding_free(emu_ffi_rounding *r);

/* The counts of an array rounding (emu_round_counts), as an array of
 * uint64: the count of columns and their names (n, inexact, underflow,
 * to_zero, subnormal, overflow, nan, invalid, flags).  Cannot fail. */
size_t emu_ffi_counts_count(void);
const char *emu_ffi_counts_name(size_t i);

/* out[i] = in[i] rounded into f (out may equal in), element i of a
 * stochastic mode taking word emu_random64(seed, stream, first_index + i)
 * (emu_round_array_f32 / _f64).  counts: NULL, or emu_ffi_counts_count()
 * uint64 that this call's counts are ADDED to. */
int emu_ffi_round_f32(const emu_ffi_format *f, const emu_ffi_rounding *r,
                      uint64_t seed, uint64_t stream, uint64_t first_index,
                      float *out, const float *in, size_t n, uint64_t *counts);
int emu_ffi_round_f64(const emu_ffi_format *f, const emu_ffi_rounding *r,
                      uint64_t seed, uint64_t stream, uint64_t first_index,
                      double *out, const double *in, size_t n,
                      uint64_t *counts);

/* in[i] (binary64) rounded into f, a format binary32 holds, stored as
 * binary32 (exactly): narrowing a float64 array without a second
 * rounding, whatever the caller's floating-point state. */
int emu_ffi_round_f64_to_f32(const emu_ffi_format *f,
                             const emu_ffi_rounding *r, uint64_t seed,
                             uint64_t stream, uint64_t first_index,
                             float *out, const double *in, size_t n,
                             uint64_t *counts);

/* The same roundings, writing the results' bit patterns (emu/bits.h,
 * under the rounding's profile) as little-endian integers of `width`
 * bytes each (1, 2, 4 or 8, at least the format's width: uint8 for FP8,
 * uint16 for binary16).  NaN results give their NaN's pattern; a NaN
 * result in a format without NaN (NaN input, invalid) has none and fails
 * (EMU_ERANGE, naming the element). */
int emu_ffi_round_f32_bits(const emu_ffi_format *f, const emu_ffi_rounding *r,
                           uint64_t seed, uint64_t stream,
                           uint64_t first_index, void *bits, size_t width,
                           const float *in, size_t n, uint64_t *counts);
int emu_ffi_round_f64_bits(const emu_ffi_format *f, const emu_ffi_rounding *r,
                           uint64_t seed, uint64_t stream,
                           uint64_t first_index, void *bits, size_t width,
                           const double *in, size_t n, uint64_t *counts);

/* The scalar choke point (emu_round2, or emu_round2_word with
 * emu_random64(seed, stream, index) for stochastic modes) on hi + lo:
 * the reference the array forms are tested against.  ternary and flags
 * may be NULL. */
int emu_ffi_round_scalar(const emu_ffi_format *f, const emu_ffi_rounding *r,
                         double hi, double lo, uint64_t seed, uint64_t stream,
                         uint64_t index, double *out, int *ternary,
                         unsigned *flags);

/* The value of a bit pattern (emu_decode), and the pattern of a value
 * of f (emu_encode_in under r's profile; r may be NULL: IEEE); encode
 * fails (EMU_EDATA) for a value f does not hold. */
int emu_ffi_decode(const emu_ffi_format *f, uint64_t bits, double *out);
int emu_ffi_encode(const emu_ffi_format *f, const emu_ffi_rounding *r,
                   double x, uint64_t *bits);

/* ---- accumulator models ---------------------------------------------------- */

typedef struct emu_ffi_accum emu_ffi_accum;

/* A model from an emu_accum_parse spec ("seq,acc=binary16", "exact", ...). */
int emu_ffi_accum_new(const char *spec, emu_ffi_accum **out);
void emu_ffi_accum_free(emu_ffi_accum *a);
/* Its canonical spec (emu_accum_string). */
int emu_ffi_accum_string(const emu_ffi_accum *a, char *buf, size_t size);

/* ---- sessions: an emu_ctx with statistics ----------------------------------- */

typedef struct emu_ffi_session emu_ffi_session;

/* A context (seed, MPFR sample rate 0..1, worker threads >= 1) measuring
 * everything into its own emu_stats. */
int emu_ffi_session_new(uint64_t seed, double ref_rate, int threads,
                        emu_ffi_session **out);
void emu_ffi_session_free(emu_ffi_session *s);

/* What the session measures: measure is a sum of 1 (counters per site),
 * 2 (log2 histograms), 4 (swamping inside accumulators) and 8 (MPFR error
 * on a ref_rate sample of the outputs), emu_ctx's EMU_MEASURE_* bits; a
 * new session measures everything (15) at its ref_rate.  With 0 nothing
 * is counted and ops take their fast paths; the results are the same
 * whatever is measured. */
int emu_ffi_session_measure(emu_ffi_session *s, unsigned measure,
                            double ref_rate);

/* out = in rounded into f under r through the choke point (emu_t_load's
 * op, with the op kind `kind` in the statistics: NULL or "" is "load";
 * at most 23 characters), counted at `site` for `role` (emu_role_parse:
 * weight, activation, act_grad, weight_grad, master, opt_state, other).
 * out may be in itself (rounding in place) but must not overlap it
 * otherwise.  Stochastic words come from the session's seed and op
 * index. */
int emu_ffi_session_round(emu_ffi_session *s, const char *site,
                          const char *kind, const char *role,
                          const emu_ffi_format *f, const emu_ffi_rounding *r,
                          float *out, const float *in, size_t n);

/* out (M, N) = alpha op(A) op(B) in out_fmt (emu_t_matmul under accum,
 * the output rounded under r), counted at `site` for `role`.  A is stored
 * (M, K), or (K, M) if trans_a; B (K, N), or (N, K) if trans_b; binary32
 * values.  accumulate: out = out + alpha op(A) op(B), each dot product's
 * accumulator starting at out / alpha (alpha then a power of two): a bias
 * added inside the accumulation, as a convolution's is.  a_src, b_src:
 * NULL, or the unquantized sources of A and B (same layouts) for the MPFR
 * error split.  out must not overlap the inputs. */
int emu_ffi_session_matmul(emu_ffi_session *s, const char *site,
                           const char *role, const emu_ffi_accum *accum,
                           const emu_ffi_format *out_fmt,
                           const emu_ffi_rounding *r, float *out,
                           const float *a, const float *b, size_t m,
                           size_t k, size_t n, int trans_a, int trans_b,
                           double alpha, int accumulate, const float *a_src,
                           const float *b_src);

/* The matrices of a 2-d convolution's GEMMs (emu.torch.emulate), pure
 * data movement (every value out is a value in, or +0).
 *
 * im2col: x is (n, c, h, w), read through channels c0 .. c0+cg-1 of a
 * virtual input: x upsampled by (uh, uw) (uh-1 zero rows between its
 * rows: an input gradient's stride-dilated output gradient), zero
 * outside, padded by (ph, pw) at the top and left (negative: cropped).
 * out is (n*ho*wo, cg*kh*kw): row (i, oh, ow), column (ci, a, b) (unfold's
 * order) holds the virtual input at channel c0+ci, row oh*sh + a*dh - ph,
 * column ow*sw + b*dw - pw; or, if trans, out is that matrix transposed
 * (cg*kh*kw, n*ho*wo).  geom: {sh, sw, ph, pw, dh, dw, uh, uw, trans};
 * the strides, dilations and upsampling factors must be >= 1. */
int emu_ffi_im2col(float *out, const float *x, size_t n, size_t c,
                   size_t h, size_t w, size_t c0, size_t cg, size_t kh,
                   size_t kw, size_t ho, size_t wo, const long *geom);
/* The weight of an input gradient's convolution: wt is (co, cg, kh, kw)
 * in `groups` groups of co/groups output channels; out (groups*cg,
 * co/groups, kh, kw) holds out[g*cg + ci][j][a][b] = wt[g*co/groups +
 * j][ci][kh-1-a][kw-1-b] (each group transposed, its kernels flipped). */
int emu_ffi_conv_weight_flip(float *out, const float *wt, size_t co,
                             size_t cg, size_t kh, size_t kw, size_t groups);

/* Starts step `step` (emu_stats_begin_step); the rows of the step that
 * ends are kept for ops_steps.csv. */
int emu_ffi_session_begin_step(emu_ffi_session *s, int64_t step);

/* Writes dir/ops.csv, dir/hist.csv, dir/ops.json (the emu_stats writers
 * emu train uses) and, if steps were begun, dir/ops_steps.csv, each
 * atomically; creates dir (one level) if missing. */
int emu_ffi_session_write(const emu_ffi_session *s, const char *dir);

/* Sites in first-use order.  site_str keys: name, kind, role, format. */
size_t emu_ffi_session_site_count(const emu_ffi_session *s);
int emu_ffi_session_site_str(const emu_ffi_session *s, size_t i,
                             const char *key, char *buf, size_t size);
/* Every counter of site i (the columns of ops.csv after format, in the
 * order emu_stats_counter_name lists them), span 0: the run, 1: the
 * current step; n must be emu_stats_counter_count(). */
int emu_ffi_session_counters(const emu_ffi_session *s, size_t i, int span,
                             double *out, size_t n);
/* A histogram of site i ("exact", "rounded", "scale"); n = EMU_HIST_BINS
 * (emu_ffi_hist_bins()). */
int emu_ffi_session_hist(const emu_ffi_session *s, size_t i, int span,
                         const char *which, uint64_t *out, size_t n);
size_t emu_ffi_hist_bins(void);

/* ---- block-scaled quantization ---------------------------------------------- */

typedef struct emu_ffi_quant emu_ffi_quant;

/* A scaled tensor of a format (emu_scaled_format_parse spec: "mxfp8",
 * "nvfp4", "elem=e4m3,scale=none,tensor=yes", ...) and shape (ndim 1..4),
 * blocked along axis (negative: from the end). */
int emu_ffi_quant_new(const char *spec, int ndim, const size_t *shape,
                      int axis, emu_ffi_quant **out);
void emu_ffi_quant_free(emu_ffi_quant *q);
/* Its canonical format spec; blocks; storage bits per element. */
int emu_ffi_quant_spec(const emu_ffi_quant *q, char *buf, size_t size);
size_t emu_ffi_quant_nblocks(const emu_ffi_quant *q);
double emu_ffi_quant_bits_per_element(const emu_ffi_quant *q);

/* Totals (emu_quant_counts) and per-block statistics (emu_block_stats)
 * as arrays of doubles: their column names. */
size_t emu_ffi_quant_counts_count(void);
const char *emu_ffi_quant_counts_name(size_t i);
size_t emu_ffi_quant_block_count(void);
const char *emu_ffi_quant_block_name(size_t i);

/* Quantizes the tensor's n binary32 values x (emu_scaled_quantize):
 * elements rounded under mode, stochastic element i taking word
 * emu_random64(seed, stream, i); tensor_scale 0: current scaling, else
 * the given g.  counts: NULL or emu_ffi_quant_counts_count() doubles
 * (overwritten); blocks: NULL or nblocks x emu_ffi_quant_block_count()
 * doubles, row per block. */
int emu_ffi_quant_run(emu_ffi_quant *q, const float *x, const char *mode,
                      uint64_t seed, uint64_t stream, double tensor_scale,
                      double *counts, double *blocks);

/* The same quantization as an op of session s (emu_t_quantize_scaled):
 * counted at `site` for `role` (kind "quantize", the scaled format's name
 * in the format column; the elements' counters, the histograms of x and
 * of the values, the block scales' histogram, MPFR samples at the
 * session's ref_rate), the elements rounded under r's mode (stochastic
 * words from the session's seed and op index, as every session op),
 * always saturating; tensor_scale 0: current scaling, else the given g.
 * Read the result with the functions below.  counts: NULL or
 * emu_ffi_quant_counts_count() doubles (overwritten). */
int emu_ffi_session_quantize(emu_ffi_session *s, const char *site,
                             const char *role, emu_ffi_quant *q,
                             const float *x, const emu_ffi_rounding *r,
                             double tensor_scale, double *counts);

/* The quantized tensor: values e_i s_b(i) g (as binary64: exact; as
 * binary32: those rounded to nearest-even binary32, exact unless a tensor
 * scale gives a value more bits than binary32 has), the element
 * values e_i, the block scales s_b, the tensor scale g, and the packed
 * bytes (emu_scaled_pack's layout). */
int emu_ffi_quant_values_f32(const emu_ffi_quant *q, float *out, size_t n);
int emu_ffi_quant_values_f64(const emu_ffi_quant *q, double *out, size_t n);
int emu_ffi_quant_elements(const emu_ffi_quant *q, float *out, size_t n);
int emu_ffi_quant_scales(const emu_ffi_quant *q, float *out, size_t n);
double emu_ffi_quant_tensor_scale(const emu_ffi_quant *q);
size_t emu_ffi_quant_packed_size(const emu_ffi_quant *q);
int emu_ffi_quant_pack(const emu_ffi_quant *q, uint8_t *buf, size_t size);

/* ---- precision policies ------------------------------------------------------ */

/* The policy preset `name`, with `assignments` (NULL, or emu_policy_set
 * "key=value" items separated by newlines) applied and validated, as the
 * JSON emu_policy_write_json writes.  *needed receives the JSON's length
 * (without the NUL); if size <= *needed nothing is written and the call
 * still returns 0: call again with a larger buffer. */
int emu_ffi_policy_json(const char *name, const char *assignments,
                        char *buf, size_t size, size_t *needed);

#ifdef __cplusplus
}
#endif
#endif
