/*
 * rng.c — Philox4x32-10, the counter-based generator behind stochastic
 * rounding.
 *
 * One Philox block maps a 128-bit counter and a 64-bit key to 128 random
 * bits.  We use the key for the seed and the counter for (stream, index/2):
 * a block yields the two 64-bit words index = 2k and 2k + 1.  Nothing is
 * kept between calls, so word i of a stream is the same whichever thread
 * asks for it, in whatever order.
 *
 * Constants from Salmon, Moraes, Dror and Shaw, "Parallel random numbers:
 * as easy as 1, 2, 3" (SC'11); the known-answer test in tests/ checks this
 * file against their published vectors.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/rng.h"

static const uint32_t PHILOX_M0 = 0xD2511F53u;
static const uint32_t PHILOX_M1 = 0xCD9E8D57u;
static const uint32_t PHILOX_W0 = 0x9E3779B9u; /* golden ratio */
static const uint32_t PHILOX_W1 = 0xBB67AE85u; /* sqrt(3) - 1  */

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void emu_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                       uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c0, &hi0, &lo0);
        mulhilo(PHILOX_M1, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n1 = lo1;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        uint32_t n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The block holding words 2k and 2k + 1 of (seed, stream). */
static inline void block(uint64_t seed, uint64_t stream, uint64_t k,
                         uint64_t w[2])
{
    const uint32_t ctr[4] = { (uint32_t)k, (uint32_t)(k >> 32),
                              (uint32_t)stream, (uint32_t)(stream >> 32) };
    const uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    uint32_t o[4];
    emu_philox4x32_10(ctr, key, o);
    w[0] = (uint64_t)o[1] << 32 | o[0];
    w[1] = (uint64_t)o[3] << 32 | o[2];
}

uint64_t emu_random64(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t w[2];
    block(seed, stream, index >> 1, w);
    return w[index & 1];
}

void emu_random64x4(uint64_t seed, uint64_t stream, uint64_t index,
                    uint64_t out[4])
{
    emu_random_fill(seed, stream, index, out, 4);
}

/* Blocks are computed LANES at a time in structure-of-arrays form: the
 * same Philox rounds on independent counters, which the compiler turns
 * into SSE2 code (pmuludq does two 32 x 32 -> 64 products at once). */
enum { LANES = 64 };

/* Compiled also for AVX2 and AVX-512 and chosen at load time (x86-64 Linux
 * with GCC): four or eight 32 x 32 -> 64 products per instruction instead
 * of two.  The words are the same whichever version runs. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(EMU_NO_TARGET_CLONES)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void blocks(uint64_t seed, uint64_t stream, uint64_t k0, uint64_t *out)
{
    uint32_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
    for (int j = 0; j < LANES; j++) {
        /* Block counters live modulo 2^63 (index >> 1), so that the
         * words wrap like the index does. */
        uint64_t k = (k0 + (uint64_t)j) & (UINT64_MAX >> 1);
        c0[j] = (uint32_t)k;
        c1[j] = (uint32_t)(k >> 32);
        c2[j] = (uint32_t)stream;
        c3[j] = (uint32_t)(stream >> 32);
    }
    uint32_t k0s = (uint32_t)seed, k1s = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        for (int j = 0; j < LANES; j++) {
            uint64_t p0 = (uint64_t)PHILOX_M0 * c0[j];
            uint64_t p1 = (uint64_t)PHILOX_M1 * c2[j];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[j] ^ k0s;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[j] ^ k1s;
            c1[j] = (uint32_t)p1;
            c3[j] = (uint32_t)p0;
            c0[j] = n0;
            c2[j] = n2;
        }
        k0s += PHILOX_W0;
        k1s += PHILOX_W1;
    }
    for (int j = 0; j < LANES; j++) {
        out[2 * j] = (uint64_t)c1[j] << 32 | c0[j];
        out[2 * j + 1] = (uint64_t)c3[j] << 32 | c2[j];
    }
}

void emu_random_fill(uint64_t seed, uint64_t stream, uint64_t index,
                     uint64_t *out, size_t n)
{
    /* Indices wrap modulo 2^64 like the counter itself: word 2^64 - 1 is
     * followed by word 0. */
    size_t i = 0;
    if (n && (index & 1))
        out[i++] = emu_random64(seed, stream, index++);
    for (; i + 2 * LANES <= n; i += 2 * LANES, index += 2 * LANES)
        blocks(seed, stream, index >> 1, out + i);
    for (; i + 2 <= n; i += 2, index += 2)
        block(seed, stream, index >> 1, out + i);
    if (i < n)
        out[i] = emu_random64(seed, stream, index);
}
