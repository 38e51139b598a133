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
#include "internal.h"

#if EMU_HAVE_ISA_CLONES
#include <immintrin.h>
#endif

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

/* Words 2 k0 .. 2 (k0 + LANES) - 1, whole (out) or their high halves
 * (hi, when out is NULL). */
static void blocks_base(uint64_t seed, uint64_t stream, uint64_t k0,
                        uint64_t *out, uint32_t *hi)
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
    if (out)
        for (int j = 0; j < LANES; j++) {
            out[2 * j] = (uint64_t)c1[j] << 32 | c0[j];
            out[2 * j + 1] = (uint64_t)c3[j] << 32 | c2[j];
        }
    else
        for (int j = 0; j < LANES; j++) {
            hi[2 * j] = c1[j];
            hi[2 * j + 1] = c3[j];
        }
}

#if EMU_HAVE_ISA_CLONES
/* With AVX2 and AVX-512 each 32-bit state word lives in the low half of a
 * 64-bit lane, so that a product is one vpmuludq on the lanes' low halves
 * (GCC's vectorisation of the loop above uses AVX-512's much slower 64 x
 * 64 vpmullq); the high halves carry junk that no multiply reads and the
 * output drops.  Sixteen blocks at a time, in registers. */
EMU_ISA_TARGET_AVX2
static void blocks_avx2(uint64_t seed, uint64_t stream, uint64_t k0,
                        uint64_t *out, uint32_t *hi)
{
    const __m256i m0 = _mm256_set1_epi64x(PHILOX_M0);
    const __m256i m1 = _mm256_set1_epi64x(PHILOX_M1);
    const __m256i ramp = _mm256_set_epi64x(3, 2, 1, 0);
    const __m256i ctr_mask = _mm256_set1_epi64x((long long)(UINT64_MAX >> 1));
    const __m256i s_lo = _mm256_set1_epi64x((long long)(uint32_t)stream);
    const __m256i s_hi = _mm256_set1_epi64x((long long)(stream >> 32));
    /* the rounds' keys, broadcast once rather than once per group */
    __m256i rk0[10], rk1[10];
    {
        uint32_t ks0 = (uint32_t)seed, ks1 = (uint32_t)(seed >> 32);
        for (int round = 0; round < 10; round++) {
            rk0[round] = _mm256_set1_epi64x(ks0);
            rk1[round] = _mm256_set1_epi64x(ks1);
            ks0 += PHILOX_W0;
            ks1 += PHILOX_W1;
        }
    }
    for (int g = 0; g < LANES; g += 8) {
        __m256i c0[2], c1[2], c2[2], c3[2];
        for (int v = 0; v < 2; v++) {
            __m256i k = _mm256_add_epi64(
                _mm256_set1_epi64x((long long)(k0 + (uint64_t)(g + 4 * v))),
                ramp);
            k = _mm256_and_si256(k, ctr_mask);
            c0[v] = k;
            c1[v] = _mm256_srli_epi64(k, 32);
            c2[v] = s_lo;
            c3[v] = s_hi;
        }
        for (int round = 0; round < 10; round++) {
            const __m256i key0 = rk0[round], key1 = rk1[round];
            for (int v = 0; v < 2; v++) {
                __m256i p0 = _mm256_mul_epu32(c0[v], m0);
                __m256i p1 = _mm256_mul_epu32(c2[v], m1);
                c0[v] = _mm256_xor_si256(_mm256_srli_epi64(p1, 32),
                                         _mm256_xor_si256(c1[v], key0));
                c2[v] = _mm256_xor_si256(_mm256_srli_epi64(p0, 32),
                                         _mm256_xor_si256(c3[v], key1));
                c1[v] = p1;
                c3[v] = p0;
            }
        }
        for (int v = 0; v < 2; v++) {
            const int j = g + 4 * v;
            if (out) {
                /* word 2j: c1:c0, word 2j + 1: c3:c2 */
                __m256i w0 = _mm256_blend_epi32(
                    c0[v], _mm256_slli_epi64(c1[v], 32), 0xaa);
                __m256i w1 = _mm256_blend_epi32(
                    c2[v], _mm256_slli_epi64(c3[v], 32), 0xaa);
                __m256i lo = _mm256_unpacklo_epi64(w0, w1);
                __m256i up = _mm256_unpackhi_epi64(w0, w1);
                _mm256_storeu_si256((__m256i *)(out + 2 * j),
                                    _mm256_permute2x128_si256(lo, up, 0x20));
                _mm256_storeu_si256((__m256i *)(out + 2 * j + 4),
                                    _mm256_permute2x128_si256(lo, up, 0x31));
            } else {
                /* hi[2j] = c1, hi[2j + 1] = c3: one 64-bit lane each */
                _mm256_storeu_si256((__m256i *)(hi + 2 * j),
                                    _mm256_blend_epi32(
                                        c1[v], _mm256_slli_epi64(c3[v], 32),
                                        0xaa));
            }
        }
    }
}

/* The same, eight lanes per register, the three-way XORs as one
 * vpternlogq, and four registers per state word: enough independent
 * products to hide the multiplies' latency. */
enum { V512 = 2 };
EMU_ISA_TARGET_AVX512
static void blocks_avx512(uint64_t seed, uint64_t stream, uint64_t k0,
                          uint64_t *out, uint32_t *hi)
{
    const __m512i m0 = _mm512_set1_epi64(PHILOX_M0);
    const __m512i m1 = _mm512_set1_epi64(PHILOX_M1);
    const __m512i ramp = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i ctr_mask = _mm512_set1_epi64((long long)(UINT64_MAX >> 1));
    const __m512i s_lo = _mm512_set1_epi64((long long)(uint32_t)stream);
    const __m512i s_hi = _mm512_set1_epi64((long long)(stream >> 32));
    const __m512i idx_lo = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
    const __m512i idx_hi = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
    __m512i rk0[10], rk1[10];
    {
        uint32_t ks0 = (uint32_t)seed, ks1 = (uint32_t)(seed >> 32);
        for (int round = 0; round < 10; round++) {
            rk0[round] = _mm512_set1_epi64(ks0);
            rk1[round] = _mm512_set1_epi64(ks1);
            ks0 += PHILOX_W0;
            ks1 += PHILOX_W1;
        }
    }
    for (int g = 0; g < LANES; g += 8 * V512) {
        __m512i c0[V512], c1[V512], c2[V512], c3[V512];
        for (int v = 0; v < V512; v++) {
            __m512i k = _mm512_add_epi64(
                _mm512_set1_epi64((long long)(k0 + (uint64_t)(g + 8 * v))),
                ramp);
            k = _mm512_and_si512(k, ctr_mask);
            c0[v] = k;
            c1[v] = _mm512_srli_epi64(k, 32);
            c2[v] = s_lo;
            c3[v] = s_hi;
        }
        for (int round = 0; round < 10; round++) {
            const __m512i key0 = rk0[round], key1 = rk1[round];
            for (int v = 0; v < V512; v++) {
                __m512i p0 = _mm512_mul_epu32(c0[v], m0);
                __m512i p1 = _mm512_mul_epu32(c2[v], m1);
                c0[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32),
                                                  c1[v], key0, 0x96);
                c2[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32),
                                                  c3[v], key1, 0x96);
                c1[v] = p1;
                c3[v] = p0;
            }
        }
        for (int v = 0; v < V512; v++) {
            const int j = g + 8 * v;
            if (out) {
                /* word 2j: c1:c0, word 2j + 1: c3:c2 */
                __m512i w0 = _mm512_mask_blend_epi32(
                    0xaaaa, c0[v], _mm512_slli_epi64(c1[v], 32));
                __m512i w1 = _mm512_mask_blend_epi32(
                    0xaaaa, c2[v], _mm512_slli_epi64(c3[v], 32));
                _mm512_storeu_si512(out + 2 * j,
                                    _mm512_permutex2var_epi64(w0, idx_lo, w1));
                _mm512_storeu_si512(out + 2 * j + 8,
                                    _mm512_permutex2var_epi64(w0, idx_hi, w1));
            } else {
                /* hi[2j] = c1, hi[2j + 1] = c3: one 64-bit lane each */
                _mm512_storeu_si512(hi + 2 * j, _mm512_mask_blend_epi32(
                    0xaaaa, c1[v], _mm512_slli_epi64(c3[v], 32)));
            }
        }
    }
}
#endif

typedef void (*blocks_fn)(uint64_t, uint64_t, uint64_t, uint64_t *,
                          uint32_t *);

static blocks_fn blocks_for(emu_isa isa)
{
#if EMU_HAVE_ISA_CLONES
    if (isa == EMU_ISA_AVX512)
        return blocks_avx512;
    if (isa == EMU_ISA_AVX2)
        return blocks_avx2;
#endif
    (void)isa;
    return blocks_base;
}

void emu_random_fill_hi32(uint64_t seed, uint64_t stream, uint64_t index,
                          uint32_t *out, size_t n)
{
    size_t i = 0;
    if (n && (index & 1))
        out[i++] = (uint32_t)(emu_random64(seed, stream, index++) >> 32);
    if (i + 2 * LANES <= n) {
        const blocks_fn blocks = blocks_for(emu_isa_active());
        for (; i + 2 * LANES <= n; i += 2 * LANES, index += 2 * LANES)
            blocks(seed, stream, index >> 1, NULL, out + i);
    }
    for (; i < n; i++, index++)
        out[i] = (uint32_t)(emu_random64(seed, stream, index) >> 32);
}

void emu_random_fill(uint64_t seed, uint64_t stream, uint64_t index,
                     uint64_t *out, size_t n)
{
    /* Indices wrap modulo 2^64 like the counter itself: word 2^64 - 1 is
     * followed by word 0. */
    size_t i = 0;
    if (n && (index & 1))
        out[i++] = emu_random64(seed, stream, index++);
    if (i + 2 * LANES <= n) {
        const blocks_fn blocks = blocks_for(emu_isa_active());
        for (; i + 2 * LANES <= n; i += 2 * LANES, index += 2 * LANES)
            blocks(seed, stream, index >> 1, out + i, NULL);
    }
    for (; i + 2 <= n; i += 2, index += 2)
        block(seed, stream, index >> 1, out + i);
    if (i < n)
        out[i] = emu_random64(seed, stream, index);
}
