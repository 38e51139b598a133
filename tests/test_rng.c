/*
 * test_rng.c — the Philox4x32-10 generator behind stochastic rounding.
 *
 * Stochastic rounding is only reproducible, and only unbiased, if the word
 * source is (a) the published Philox block function, (b) a pure function
 * of (seed, stream, index) whatever bulk form asks for it, and (c) uniform.
 * This suite checks those three things; test_stochastic.c checks what the
 * rounding does with the words.
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h" /* emu_random_fill_hi32, the ISA levels */

/* Check's ck_assert records every passing check with a write to a file;
 * over loops of millions of cases that is most of the run time, so the
 * suites test first and call into Check only to fail. */
#define EXPECT(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

/* ---- (a) known answers ------------------------------------------------ */

/* The "philox4x32 10" lines of tests/kat_vectors in the Random123
 * distribution (D. E. Shaw Research, github.com/DEShawResearch/random123):
 * counter[4] key[2] -> result[4], all hex.  The same three lines are quoted
 * verbatim by several independent ports; the library's own output was not
 * consulted when writing them down. */
static const struct {
    uint32_t ctr[4], key[2], out[4];
} kat[] = {
    { { 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u },
      { 0x00000000u, 0x00000000u },
      { 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u } },
    { { 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu },
      { 0xffffffffu, 0xffffffffu },
      { 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu } },
    { { 0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u }, /* pi */
      { 0xa4093822u, 0x299f31d0u },
      { 0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u } },
};

START_TEST(test_philox_kat)
{
    const size_t i = (size_t)_i;
    uint32_t out[4];
    emu_philox4x32_10(kat[i].ctr, kat[i].key, out);
    for (int j = 0; j < 4; j++)
        EXPECT(out[j] == kat[i].out[j],
                      "philox4x32_10 ctr %08" PRIx32 " %08" PRIx32 " %08" PRIx32
                      " %08" PRIx32 " key %08" PRIx32 " %08" PRIx32
                      ": word %d expected %08" PRIx32 " got %08" PRIx32,
                      kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2],
                      kat[i].ctr[3], kat[i].key[0], kat[i].key[1], j,
                      kat[i].out[j], out[j]);
}
END_TEST

/* The layout of words in blocks, as rng.c documents it: key = seed, counter
 * = (index / 2, stream), block words (0,1) and (2,3) make the 64-bit words
 * 2k and 2k + 1, low half first.  Pinning it keeps every stochastic result
 * of a given seed identical across library versions. */
START_TEST(test_word_layout)
{
    test_rng g = test_rng_make(101);
    for (int n = 0; n < 2000; n++) {
        uint64_t seed = test_next(&g), stream = test_next(&g);
        uint64_t index = test_next(&g);
        if (n % 4 == 0)
            index &= 0xff; /* small indices too */
        uint64_t k = index >> 1;
        const uint32_t ctr[4] = { (uint32_t)k, (uint32_t)(k >> 32),
                                  (uint32_t)stream, (uint32_t)(stream >> 32) };
        const uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
        uint32_t o[4];
        emu_philox4x32_10(ctr, key, o);
        uint64_t want = (index & 1) ? (uint64_t)o[3] << 32 | o[2]
                                    : (uint64_t)o[1] << 32 | o[0];
        uint64_t got = emu_random64(seed, stream, index);
        EXPECT(got == want,
                      "emu_random64(seed %#" PRIx64 ", stream %#" PRIx64
                      ", index %#" PRIx64 "): expected %#018" PRIx64
                      " got %#018" PRIx64, seed, stream, index, want, got);
    }
}
END_TEST

/* ---- (b) one function, whatever the bulk form ------------------------- */

static void check_fill(uint64_t seed, uint64_t stream, uint64_t index,
                       size_t n)
{
    enum { MAXN = 700 };
    uint64_t out[MAXN + 2];
    /* Guard words catch a fill that writes past n. */
    out[n] = 0x5a5a5a5a5a5a5a5aull;
    out[n + 1] = 0xa5a5a5a5a5a5a5a5ull;
    emu_random_fill(seed, stream, index, out, n);
    for (size_t j = 0; j < n; j++) {
        uint64_t want = emu_random64(seed, stream, index + j);
        EXPECT(out[j] == want,
                      "emu_random_fill(seed %#" PRIx64 ", stream %#" PRIx64
                      ", index %#" PRIx64 ", n %zu)[%zu]: expected %#018" PRIx64
                      " got %#018" PRIx64, seed, stream, index, n, j, want,
                      out[j]);
    }
    EXPECT(out[n] == 0x5a5a5a5a5a5a5a5aull &&
                  out[n + 1] == 0xa5a5a5a5a5a5a5a5ull,
                  "emu_random_fill(index %#" PRIx64 ", n %zu) wrote past n",
                  index, n);
}

/* The high halves' fill, which stochastic rounding of binary32 reads. */
static void check_fill_hi32(uint64_t seed, uint64_t stream, uint64_t index,
                            size_t n)
{
    enum { MAXN = 700 };
    uint32_t out[MAXN + 2];
    out[n] = 0x5a5a5a5au;
    out[n + 1] = 0xa5a5a5a5u;
    emu_random_fill_hi32(seed, stream, index, out, n);
    for (size_t j = 0; j < n; j++) {
        uint32_t want = (uint32_t)(emu_random64(seed, stream, index + j) >> 32);
        EXPECT(out[j] == want,
               "emu_random_fill_hi32(seed %#" PRIx64 ", stream %#" PRIx64
               ", index %#" PRIx64 ", n %zu)[%zu]: expected %#010" PRIx32
               " got %#010" PRIx32 " (kernels %s)", seed, stream, index, n, j,
               want, out[j], emu_round_kernel_isa());
    }
    EXPECT(out[n] == 0x5a5a5a5au && out[n + 1] == 0xa5a5a5a5u,
           "emu_random_fill_hi32(index %#" PRIx64 ", n %zu) wrote past n",
           index, n);
}

static void check_x4(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t out[4];
    emu_random64x4(seed, stream, index, out);
    for (int j = 0; j < 4; j++) {
        uint64_t want = emu_random64(seed, stream, index + (uint64_t)j);
        EXPECT(out[j] == want,
                      "emu_random64x4(seed %#" PRIx64 ", stream %#" PRIx64
                      ", index %#" PRIx64 ")[%d]: expected %#018" PRIx64
                      " got %#018" PRIx64, seed, stream, index, j, want,
                      out[j]);
    }
}

START_TEST(test_bulk_forms)
{
    static const uint64_t seeds[] = { 0, 1, 0xdeadbeefcafef00dull, UINT64_MAX };
    static const uint64_t streams[] = { 0, 7, 0x8000000000000000ull };
    for (size_t s = 0; s < 4; s++)
        for (size_t t = 0; t < 3; t++) {
            /* Every start parity and every length up to 80 words, so that
             * each odd head / paired body / odd tail combination occurs. */
            for (uint64_t index = 0; index < 12; index++) {
                check_x4(seeds[s], streams[t], index);
                for (size_t n = 0; n <= 80; n++)
                    check_fill(seeds[s], streams[t], index, n);
            }
            static const uint64_t far[] = {
                0xfffffffeull, 0xffffffffull, 0x100000000ull,
                0x1ffffffffull, 0x123456789abcdefull, 0x123456789abcdeeull,
            };
            for (size_t f = 0; f < sizeof far / sizeof far[0]; f++) {
                check_x4(seeds[s], streams[t], far[f]);
                check_fill(seeds[s], streams[t], far[f], 37);
                check_fill(seeds[s], streams[t], far[f], 64);
            }
        }
}
END_TEST

/* The vectorised block function (LANES blocks = 128 words at a time, one
 * version per instruction-set level) against the scalar one: lengths
 * around whole and partial batches, both start parities, and block
 * counters whose low half carries into the high half within a batch. */
START_TEST(test_vector_blocks)
{
    static const uint64_t seeds[] = { 0, 0xdeadbeefcafef00dull, UINT64_MAX };
    static const uint64_t streams[] = { 0, 0x8000000000000001ull };
    static const size_t lens[] = { 127, 128, 129, 255, 256, 257, 383, 512,
                                   641, 700 };
    static const uint64_t starts[] = {
        0, 1, 2, 127, 128, 0x1ffffff80ull, 0x1ffffff81ull, /* carry at 2^32 */
        0xfffffffffffffff0ull, 0xfffffffffffffff1ull,     /* wrap at 2^64 */
        0x123456789abcdefull,
    };
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++)
        for (size_t t = 0; t < sizeof streams / sizeof streams[0]; t++)
            for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++)
                for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
                    check_fill(seeds[s], streams[t], starts[k], lens[l]);
                    check_fill_hi32(seeds[s], streams[t], starts[k], lens[l]);
                }
    for (size_t n = 0; n <= 80; n++)
        check_fill_hi32(7, 9, 3, n);
}
END_TEST

/* The contract is out[j] = emu_random64(index + j) in uint64_t arithmetic,
 * so the bulk forms must wrap at 2^64 exactly as the index does. */
START_TEST(test_bulk_forms_wrap)
{
    for (uint64_t back = 1; back <= 8; back++) {
        uint64_t index = UINT64_MAX - back + 1; /* 2^64 - back */
        check_fill(42, 3, index, 16);
        check_x4(42, 3, index);
    }
}
END_TEST

START_TEST(test_sequential_view)
{
    emu_rng r = emu_rng_make(0x1234, 99);
    for (uint64_t i = 0; i < 1000; i++) {
        uint64_t got = emu_rng_next(&r);
        uint64_t want = emu_random64(0x1234, 99, i);
        EXPECT(got == want,
                      "emu_rng_next draw %" PRIu64 ": expected %#018" PRIx64
                      " got %#018" PRIx64, i, want, got);
    }
    ck_assert_uint_eq(r.index, 1000);
}
END_TEST

/* ---- streams and seeds ------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Neighbouring seeds and streams (the likely ones: 0, 1, 2, ...) must give
 * unrelated words.  A 64-bit collision among 65536 words of an honest
 * generator has probability about 1e-10, so any repeat is a defect. */
START_TEST(test_streams_and_seeds_differ)
{
    enum { SEEDS = 16, STREAMS = 16, WORDS = 256 };
    const size_t n = (size_t)SEEDS * STREAMS * WORDS;
    uint64_t *all = malloc(n * sizeof *all);
    ck_assert_ptr_nonnull(all);
    size_t k = 0;
    for (uint64_t seed = 0; seed < SEEDS; seed++)
        for (uint64_t stream = 0; stream < STREAMS; stream++) {
            /* Both (seed a, stream b) and (seed b, stream a) occur. */
            emu_random_fill(seed, stream, 0, all + k, WORDS);
            k += WORDS;
        }
    qsort(all, n, sizeof *all, cmp_u64);
    for (size_t i = 1; i < n; i++)
        EXPECT(all[i] != all[i - 1],
                      "the word %#018" PRIx64 " occurs twice among the first "
                      "%d words of seeds 0..%d x streams 0..%d", all[i], WORDS,
                      SEEDS - 1, STREAMS - 1);
    free(all);

    /* Seed and stream are not interchangeable. */
    ck_assert(emu_random64(1, 2, 0) != emu_random64(2, 1, 0));
    ck_assert(emu_random64(1, 0, 0) != emu_random64(0, 1, 0));
    /* The high halves of seed and stream matter. */
    ck_assert(emu_random64(1ull << 40, 0, 0) != emu_random64(0, 0, 0));
    ck_assert(emu_random64(0, 1ull << 40, 0) != emu_random64(0, 0, 0));
    ck_assert(emu_random64(0, 0, 1ull << 40) != emu_random64(0, 0, 0));
}
END_TEST

/* ---- (c) uniformity --------------------------------------------------- */

/* Upper critical value of chi-square with 255 degrees of freedom at
 * p = 1e-6 (Wilson-Hilferty: 255 (1 - 2/2295 + 4.753 sqrt(2/2295))^3
 * = 377.2, rounded up).  The data are deterministic, so this is not a
 * flakiness budget: it says how surprising a failure is. */
#define CHI2_255_P1E6 378.0

static double chi2_256(const uint64_t counts[256], uint64_t n)
{
    double expect = (double)n / 256.0, chi2 = 0.0;
    for (int b = 0; b < 256; b++) {
        double d = (double)counts[b] - expect;
        chi2 += d * d / expect;
    }
    return chi2;
}

START_TEST(test_uniformity)
{
    const uint64_t n = test_scaled(1u << 21, 1u << 14);
    static uint64_t top[256], low[256], pair[256], bit_ones[64];
    memset(top, 0, sizeof top);
    memset(low, 0, sizeof low);
    memset(pair, 0, sizeof pair);
    memset(bit_ones, 0, sizeof bit_ones);

    enum { CHUNK = 1024 };
    uint64_t buf[CHUNK];
    uint64_t prev = 0;
    for (uint64_t base = 0; base < n; base += CHUNK) {
        size_t m = n - base < CHUNK ? (size_t)(n - base) : CHUNK;
        emu_random_fill(0x5eed, 1, base, buf, m);
        for (size_t j = 0; j < m; j++) {
            uint64_t w = buf[j];
            top[w >> 56]++;
            low[w & 0xff]++;
            /* Top nibbles of consecutive words: words 2k and 2k + 1 share
             * a Philox block, so this is where a layout mistake that
             * correlates them would show. */
            if (base + j > 0)
                pair[(prev >> 60) << 4 | (w >> 60)]++;
            prev = w;
            for (int b = 0; b < 64; b++)
                bit_ones[b] += (w >> b) & 1;
        }
    }
    double c_top = chi2_256(top, n), c_low = chi2_256(low, n),
           c_pair = chi2_256(pair, n - 1);
    EXPECT(c_top < CHI2_255_P1E6, "chi-square of the top byte over %"
                  PRIu64 " words: %.1f (limit %.0f)", n, c_top, CHI2_255_P1E6);
    EXPECT(c_low < CHI2_255_P1E6, "chi-square of the low byte over %"
                  PRIu64 " words: %.1f (limit %.0f)", n, c_low, CHI2_255_P1E6);
    EXPECT(c_pair < CHI2_255_P1E6, "chi-square of consecutive top "
                  "nibbles over %" PRIu64 " pairs: %.1f (limit %.0f)", n - 1,
                  c_pair, CHI2_255_P1E6);

    /* Each bit is 1 with probability 1/2: fail beyond 5.5 sigma
     * (two-sided p = 3.8e-8 per bit, 2.4e-6 for all 64). */
    double sigma = sqrt((double)n) / 2.0;
    for (int b = 0; b < 64; b++) {
        double dev = fabs((double)bit_ones[b] - (double)n / 2.0);
        EXPECT(dev <= 5.5 * sigma, "bit %d is 1 in %" PRIu64 " of %"
                      PRIu64 " words: %.1f sigma from n/2", b, bit_ones[b], n,
                      dev / sigma);
    }
}
END_TEST

/* A gross-defect check that needs no statistics: a generator that returned
 * a constant, or only even words, or repeated with a short period within a
 * stream, fails here before it reaches the chi-square. */
START_TEST(test_no_short_period)
{
    enum { N = 4096 };
    static uint64_t w[N];
    emu_random_fill(0, 0, 0, w, N);
    uint64_t or_all = 0, and_all = ~(uint64_t)0;
    for (size_t i = 0; i < N; i++) {
        or_all |= w[i];
        and_all &= w[i];
    }
    EXPECT(or_all == ~(uint64_t)0 && and_all == 0,
                  "some bit is constant over %d words (or %#" PRIx64
                  ", and %#" PRIx64 ")", N, or_all, and_all);
    qsort(w, N, sizeof w[0], cmp_u64);
    for (size_t i = 1; i < N; i++)
        EXPECT(w[i] != w[i - 1], "word %#018" PRIx64 " repeats within "
                      "the first %d words of seed 0 stream 0", w[i], N);
}
END_TEST

static Suite *rng_suite(void)
{
    Suite *s = suite_create("rng");
    TCase *tc = tcase_create("philox");
    tcase_add_loop_test(tc, test_philox_kat, 0,
                        (int)(sizeof kat / sizeof kat[0]));
    tcase_add_test(tc, test_word_layout);
    suite_add_tcase(s, tc);

    tc = tcase_create("bulk");
    tcase_add_test(tc, test_bulk_forms);
    tcase_add_test(tc, test_bulk_forms_wrap);
    tcase_add_test(tc, test_vector_blocks);
    tcase_add_test(tc, test_sequential_view);
    suite_add_tcase(s, tc);

    tc = tcase_create("quality");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_streams_and_seeds_differ);
    tcase_add_test(tc, test_uniformity);
    tcase_add_test(tc, test_no_short_period);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (test_isa_skip())
        return 77;
    SRunner *sr = srunner_create(rng_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
