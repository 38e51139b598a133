/*
 * rht.c — the random Hadamard transform of the FP4 training recipes
 * (emu_rht, emu_rht_signs: emu/scaled.h has the definition).
 *
 * The transform is a fast Walsh-Hadamard transform in binary32: every
 * output is pinned down by the order of its additions, not merely "about
 * H x", so that a hardware model or another emulator can match it bit for
 * bit, and tests/test_rht.c holds it to the same sequence of correctly
 * rounded MPFR operations.  The host guard makes the float arithmetic the
 * IEEE 754 default (nearest-even, subnormals kept) inside any caller.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/scaled.h"

#include <string.h>

#include "emu/rng.h"
#include "internal.h"

enum { RHT_MAX_BLOCK = 256 };

/* log2 of a supported block size, or -1. */
static int block_log2(unsigned b)
{
    switch (b) {
    case 4: return 2;
    case 16: return 4;
    case 64: return 6;
    case 256: return 8;
    default: return -1;
    }
}

static int check_block(unsigned block, emu_error *err)
{
    if (block_log2(block) < 0)
        return emu_fail(err, EMU_EINVAL, "emu_rht", "block",
                        "%u: expected 4, 16, 64 or 256 (a power of four, so "
                        "that 1/sqrt(block) is a power of two)", block);
    return 0;
}

int emu_rht_signs(float *signs, unsigned block, uint64_t seed, emu_error *err)
{
    if (check_block(block, err))
        return -1;
    if (!signs)
        return emu_fail(err, EMU_EINVAL, "emu_rht_signs", "signs", "NULL");
    for (unsigned j = 0; j < block; j += 64) {
        const uint64_t w = emu_random64(seed, EMU_RHT_STREAM, j / 64);
        for (unsigned i = 0; i < 64 && j + i < block; i++)
            signs[j + i] = (w >> i & 1) ? -1.0f : 1.0f;
    }
    return 0;
}

/* The unnormalised Walsh-Hadamard transform of v[0..b) in place: stage h
 * (h = 1, 2, 4, ...) replaces each pair (v[i], v[i + h]), i in a block
 * of 2h with i's bit h clear, by (v[i] + v[i + h], v[i] - v[i + h]). */
static void fwht(float *v, unsigned b)
{
    for (unsigned h = 1; h < b; h *= 2)
        for (unsigned i0 = 0; i0 < b; i0 += 2 * h)
            for (unsigned i = i0; i < i0 + h; i++) {
                const float u = v[i], w = v[i + h];
                v[i] = u + w;
                v[i + h] = u - w;
            }
}

int emu_rht(float *out, const float *in, size_t outer, size_t len,
            size_t inner, unsigned block, uint64_t seed, bool inverse,
            emu_error *err)
{
    EMU_HOSTFP_GUARD;
    if (check_block(block, err))
        return -1;
    size_t n;
    if (__builtin_mul_overflow(outer, len, &n) ||
        __builtin_mul_overflow(n, inner, &n))
        return emu_fail(err, EMU_EINVAL, "emu_rht", "shape",
                        "%zu x %zu x %zu elements overflow a size_t", outer,
                        len, inner);
    if (n == 0)
        return 0;
    if (!out || !in)
        return emu_fail(err, EMU_EINVAL, "emu_rht", out ? "in" : "out",
                        "NULL with %zu elements", n);
    float signs[RHT_MAX_BLOCK], v[RHT_MAX_BLOCK];
    emu_rht_signs(signs, block, seed, NULL);
    /* 1/sqrt(b) = 2^(-log2(b)/2), a power of two. */
    const float scale = 1.0f / (float)(1u << (block_log2(block) / 2));
    const size_t full = len - len % block;
    for (size_t o = 0; o < outer; o++) {
        const float *src = in + o * len * inner;
        float *dst = out + o * len * inner;
        for (size_t c = 0; c < inner; c++)
            for (size_t k0 = 0; k0 < full; k0 += block) {
                for (unsigned j = 0; j < block; j++)
                    v[j] = src[(k0 + j) * inner + c];
                if (!inverse)
                    for (unsigned j = 0; j < block; j++)
                        v[j] *= signs[j]; /* exact */
                fwht(v, block);
                for (unsigned j = 0; j < block; j++)
                    v[j] *= scale; /* exact unless subnormal */
                if (inverse)
                    for (unsigned j = 0; j < block; j++)
                        v[j] *= signs[j];
                for (unsigned j = 0; j < block; j++)
                    dst[(k0 + j) * inner + c] = v[j];
            }
        if (dst != src && full < len)
            for (size_t k = full; k < len; k++)
                memcpy(dst + k * inner, src + k * inner, inner * sizeof *dst);
    }
    return 0;
}
