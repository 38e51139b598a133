/*
 * ffi_conv.c — the operands of a convolution's GEMMs, laid out for
 * emu_ffi_session_matmul (emu/ffi.h): im2col matrices and the flipped,
 * transposed weight of the input gradient.
 *
 * The Python package's emu.torch.emulate computes a 2-d convolution, its
 * weight gradient and its input gradient as GEMMs through the session's
 * choke point; these functions build those GEMMs' matrices in one pass
 * each, in the layout the GEMM reads (a row per output pixel), where
 * PyTorch would need unfold, a transposing copy, padding and flips.  Pure
 * data movement: every value out is a value in or +0, so they need no
 * floating-point environment and take no part in any rounding.
 */
#include "hostfp.h" /* first, as everywhere (nothing here computes) */

#include "emu/ffi.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Where tap k of output coordinate o reads along one axis: the index into
 * x (of size `size`), or -1 for a zero (padding, or a zero inserted by
 * the upsampling `up`).  tab[o * taps + k]. */
static void axis_table(long *tab, size_t outs, size_t taps, size_t size,
                       long stride, long pad, long dil, long up)
{
    for (size_t o = 0; o < outs; o++)
        for (size_t k = 0; k < taps; k++) {
            const long v = (long)o * stride + (long)k * dil - pad;
            long at = -1;
            if (v >= 0 && v % up == 0 && v / up < (long)size)
                at = v / up;
            tab[o * taps + k] = at;
        }
}

int emu_ffi_im2col(float *out, const float *x, size_t n, size_t c,
                   size_t h, size_t w, size_t c0, size_t cg, size_t kh,
                   size_t kw, size_t ho, size_t wo, const long *geom)
{
    if (!out || !x || !geom)
        return emu_ffi_fail_(EMU_EINVAL, "im2col", "", "no output, input or geometry");
    const long sh = geom[0], sw = geom[1], ph = geom[2], pw = geom[3],
               dh = geom[4], dw = geom[5], uh = geom[6], uw = geom[7];
    const bool trans = geom[8] != 0;
    if (sh < 1 || sw < 1 || dh < 1 || dw < 1 || uh < 1 || uw < 1)
        return emu_ffi_fail_(EMU_EINVAL, "im2col", "geometry",
                             "strides, dilations and upsampling must be >= 1");
    if (!n || !cg || !kh || !kw || !ho || !wo || !h || !w || c0 + cg > c)
        return emu_ffi_fail_(EMU_EINVAL, "im2col", "shape",
                             "empty shape, or channels c0 + cg beyond c");
    long *yt = malloc(ho * kh * sizeof *yt);
    long *xt = malloc(wo * kw * sizeof *xt);
    if (!yt || !xt) {
        free(yt);
        free(xt);
        return emu_ffi_fail_(EMU_ENOMEM, "im2col", "", "out of memory");
    }
    axis_table(yt, ho, kh, h, sh, ph, dh, uh);
    axis_table(xt, wo, kw, w, sw, pw, dw, uw);
    /* Row (i, oh, ow), column (ci, a, b): element row*K + column, or
     * column*rows + row if trans.  x is read a kernel row (b = 0 .. kw-1)
     * at a time. */
    const size_t rows = n * ho * wo, K = cg * kh * kw;
    const size_t rs = trans ? 1 : K, cs = trans ? rows : 1;
    size_t row = 0;
    for (size_t i = 0; i < n; i++) {
        const float *xi = x + (i * c + c0) * h * w;
        for (size_t oh = 0; oh < ho; oh++) {
            const long *ya = yt + oh * kh;
            for (size_t ow = 0; ow < wo; ow++, row++) {
                const long *xb = xt + ow * kw;
                float *o = out + row * rs;
                if (!trans && dw == 1 && uw == 1 && xb[0] >= 0 &&
                    xb[kw - 1] >= 0) {
                    /* every tap of the row inside x: kw neighbours */
                    const float *x0 = xi + xb[0];
                    for (size_t ch = 0; ch < cg; ch++, x0 += h * w)
                        for (size_t a = 0; a < kh; a++, o += kw) {
                            if (ya[a] < 0) {
                                memset(o, 0, kw * sizeof *o); /* +0.0 */
                                continue;
                            }
                            const float *xr = x0 + (size_t)ya[a] * w;
                            if (kw == 3) {
                                o[0] = xr[0];
                                o[1] = xr[1];
                                o[2] = xr[2];
                            } else {
                                memcpy(o, xr, kw * sizeof *o);
                            }
                        }
                    continue;
                }
                for (size_t ch = 0; ch < cg; ch++) {
                    const float *xc = xi + ch * h * w;
                    for (size_t a = 0; a < kh; a++) {
                        if (ya[a] < 0) {
                            for (size_t b = 0; b < kw; b++)
                                o[b * cs] = 0.0f;
                        } else {
                            const float *xr = xc + (size_t)ya[a] * w;
                            for (size_t b = 0; b < kw; b++)
                                o[b * cs] = xb[b] < 0 ? 0.0f : xr[xb[b]];
                        }
                        o += kw * cs;
                    }
                }
            }
        }
    }
    free(yt);
    free(xt);
    return 0;
}

int emu_ffi_conv_weight_flip(float *out, const float *wt, size_t co,
                             size_t cg, size_t kh, size_t kw, size_t groups)
{
    if (!out || !wt)
        return emu_ffi_fail_(EMU_EINVAL, "conv weight flip", "", "no output or input");
    if (!co || !cg || !kh || !kw || !groups || co % groups)
        return emu_ffi_fail_(EMU_EINVAL, "conv weight flip", "shape",
                             "empty shape, or out channels not a multiple of groups");
    const size_t cog = co / groups, kk = kh * kw;
    /* out[g*cg + ci][j][a][b] = wt[g*cog + j][ci][kh-1-a][kw-1-b]: a
     * transpose, done CB input channels at a time so that each read of wt
     * is a contiguous run of CB kernels (a write stream per channel). */
    enum { CB = 16 };
    for (size_t g = 0; g < groups; g++)
        for (size_t c0 = 0; c0 < cg; c0 += CB) {
            const size_t cn = cg - c0 < CB ? cg - c0 : CB;
            for (size_t j = 0; j < cog; j++) {
                const float *src = wt + ((g * cog + j) * cg + c0) * kk;
                for (size_t ci = 0; ci < cn; ci++) {
                    float *o = out + ((g * cg + c0 + ci) * cog + j) * kk;
                    const float *s = src + ci * kk;
                    if (kk == 9) /* 3x3, most kernels: unrolled */
                        for (size_t t = 0; t < 9; t++)
                            o[t] = s[8 - t];
                    else
                        for (size_t t = 0; t < kk; t++)
                            o[t] = s[kk - 1 - t];
                }
            }
        }
    return 0;
}
