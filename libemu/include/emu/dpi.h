/*
 * emu/dpi.h — libemu as a golden model for SystemVerilog testbenches.
 *
 * A testbench that checks RTL op by op imports these functions with
 * `import "DPI-C"` (share/emu/emu_dpi.svh declares them all) and compares
 * the unit's outputs with libemu's.  Everything crossing the boundary is a
 * plain integer or string: bit patterns in, the result pattern and its
 * flags out, a return code.
 *
 * Usage: open a handle once with the settings of the unit (formats by
 * name or inline spec, rounding mode, saturation, accumulator model), then
 * call the operations with it:
 *
 *     int h = emu_dpi_open("e4m3", "", "rne,sat");
 *     emu_dpi_mul(h, a, b, &r, &flags);
 *
 * Flags are TestFloat's (inexact 1, underflow 2, overflow 4, infinite 8,
 * invalid 16).  Every function returns 0, or -1 with a message that
 * emu_dpi_last_error() gives (per thread).
 *
 * Threads: handles are immutable once opened and may be used from any
 * thread; opening is serialised internally, and opening the same settings
 * twice gives the same handle (so a testbench may open in a loop).  The
 * functions read no host floating-point state that could change a result
 * (they call only libemu's public entry points, which own it).
 *
 * The integer types are those the DPI standard maps `longint unsigned`
 * and `int unsigned` to, so that a C++ harness may include this header
 * beside a simulator's generated DPI header.
 */
#ifndef EMU_DPI_H
#define EMU_DPI_H

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned long long emu_dpi_u64; /* SystemVerilog longint unsigned */
typedef unsigned int emu_dpi_u32;       /* SystemVerilog int unsigned     */

/* Handles and dot-product lengths this interface holds at most. */
#define EMU_DPI_MAX_HANDLES 256
#define EMU_DPI_MAX_K 256

/* The message of the calling thread's last error ("" if none). */
const char *emu_dpi_last_error(void);

/* A scalar unit: operands in format `in`, results in `out` ("" or NULL:
 * the same as in).  `settings` (may be "" or NULL) is a comma-separated
 * list of:
 *   MODE or mode=MODE    rne (default), rna, rz, ru, rd, ro
 *   sat | saturate       overflow gives ±max, whatever the format says
 *   tiny=after|before    tininess detection (default after)
 *   profile=NAME         special-value conventions: ieee (default),
 *                        ocp or riscv (README: special-value profiles)
 *   sr | srN             stochastic: scalar ops then take the random
 *                        word (emu_dpi_op_word); dot units refuse them
 * Returns a handle >= 0, or -1. */
int emu_dpi_open(const char *in, const char *out, const char *settings);

/* A dot-product unit: D = C + sum_{i<k} A_i B_i under the accumulator
 * model `accum` (emu/accum.h syntax, e.g. "fused,k=4,w=14,acc=binary32"),
 * A_i and B_i in format `in`, C in the accumulator's format, D rounded
 * once more into `out` ("" or NULL: the accumulator's format, where that
 * rounding changes nothing) by the mode in `settings` (keys as for
 * emu_dpi_open).  The accumulator starts at C, so the fused model aligns
 * C with the first k products, as a dot-product-accumulate unit does.
 * Returns a handle >= 0, or -1. */
int emu_dpi_open_dot(const char *in, const char *accum, const char *out,
                     const char *settings);

/* A block-scaled dot-product unit (OCP MX, NVFP4): operands are element
 * codes with one block-scale code per block of the scaled format `scaled`
 * (emu/scaled.h: mxfp8, mxfp8-e5m2, mxfp6-e2m3, mxfp6-e3m2, mxfp4, nvfp4,
 * or keys; 1-D blocks, no integer elements), and the binary32 tensor
 * scales of formats that have them.  The value is emu_t_matmul_scaled's:
 * the terms (e_a s_a)(e_b s_b) are exact, summed by `accum` ("" or NULL:
 * exact) in index order, and the sum times g_a g_b is rounded once into
 * `out` ("" or NULL: binary32) by the settings' mode.  A NaN scale (E8M0
 * 0xFF) makes its block's elements NaN.  Returns a handle >= 0, or -1. */
int emu_dpi_open_scaled(const char *scaled, const char *accum,
                        const char *out, const char *settings);

/* Scalar operations on a handle from emu_dpi_open.  NaN results are the
 * output format's canonical NaN; a signalling NaN operand (IEEE formats)
 * raises invalid.  Comparisons give *r = 0 or 1 (out is not used). */
int emu_dpi_add(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
                emu_dpi_u32 *flags);
int emu_dpi_sub(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
                emu_dpi_u32 *flags);
int emu_dpi_mul(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
                emu_dpi_u32 *flags);
int emu_dpi_div(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
                emu_dpi_u32 *flags);
int emu_dpi_sqrt(int h, emu_dpi_u64 a, emu_dpi_u64 *r, emu_dpi_u32 *flags);
/* a * b + c, one rounding. */
int emu_dpi_fma(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 c,
                emu_dpi_u64 *r, emu_dpi_u32 *flags);
/* From in to out. */
int emu_dpi_convert(int h, emu_dpi_u64 a, emu_dpi_u64 *r, emu_dpi_u32 *flags);
int emu_dpi_eq(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
               emu_dpi_u32 *flags);
int emu_dpi_lt(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
               emu_dpi_u32 *flags);
int emu_dpi_le(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
               emu_dpi_u32 *flags);
/* Any of the above by name ("add", "sqrt", "fma", "convert", "lt", ...);
 * operands an op does not take are ignored. */
int emu_dpi_op(int h, const char *op, emu_dpi_u64 a, emu_dpi_u64 b,
               emu_dpi_u64 c, emu_dpi_u64 *r, emu_dpi_u32 *flags);
/* The same with the random word of a stochastic rounding given: for a
 * handle opened with "sr" the op rounds up iff floor(F * 2^64) + word
 * carries out of 64 bits (F the fraction of an ulp); with "srN" only the
 * word's top N bits are used (word >> (64 - N)).  The word-less calls
 * fail on a stochastic handle; a deterministic handle ignores the word. */
int emu_dpi_op_word(int h, const char *op, emu_dpi_u64 a, emu_dpi_u64 b,
                    emu_dpi_u64 c, emu_dpi_u64 word, emu_dpi_u64 *r,
                    emu_dpi_u32 *flags);

/* One case of a dot-product unit (handle from emu_dpi_open_dot): k terms,
 * 0 <= k <= EMU_DPI_MAX_K, a[i] and b[i] patterns of `in`, c a pattern of
 * the accumulator format.  *flags are those of the final rounding into
 * out (the accumulator model's own roundings report none). */
int emu_dpi_dot(int h, int k, const emu_dpi_u64 *a, const emu_dpi_u64 *b,
                emu_dpi_u64 c, emu_dpi_u64 *r, emu_dpi_u32 *flags);
/* One case of a block-scaled unit (handle from emu_dpi_open_scaled): k
 * element codes a[i], b[i], and ceil(k / block) scale codes sa[j], sb[j];
 * ga, gb binary32 patterns (ignored by formats without tensor scales).
 * An element times its scale must be a binary32 (else -1). */
int emu_dpi_dot_scaled(int h, int k, const emu_dpi_u64 *a,
                       const emu_dpi_u64 *sa, const emu_dpi_u64 *b,
                       const emu_dpi_u64 *sb, emu_dpi_u64 ga, emu_dpi_u64 gb,
                       emu_dpi_u64 *r, emu_dpi_u32 *flags);
/* The same for k = 4 with scalar arguments (no arrays to declare). */
int emu_dpi_dot4(int h, emu_dpi_u64 a0, emu_dpi_u64 b0, emu_dpi_u64 a1,
                 emu_dpi_u64 b1, emu_dpi_u64 a2, emu_dpi_u64 b2,
                 emu_dpi_u64 a3, emu_dpi_u64 b3, emu_dpi_u64 c,
                 emu_dpi_u64 *r, emu_dpi_u32 *flags);

#ifdef __cplusplus
}
#endif
#endif
