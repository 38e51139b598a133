/*
 * round_array — rounding a binary32 array into e4m3 and bfloat16, under
 * nearest-even and stochastic rounding, with the counts of what happened.
 *
 * The array functions (emu_round_array_f32) are the fast path for bulk
 * conversion: the same map as the scalar choke point emu_round2 applied
 * to each element, so this program checks every element against
 * emu_round / emu_round2_word, and the counts against a recount of the
 * scalar results.  It then shows why stochastic rounding exists: the mean
 * of many roundings of 0.1 is 0.1, where nearest-even is biased.
 *
 * One of the README's "Using the library" examples, built and run as a
 * CTest (example_round_array); exits non-zero if any check fails.
 * Build against an installed libemu:
 *     cc -std=c11 round_array.c $(pkg-config --cflags --libs libemu) -lm
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/emu.h>

static int failures;

/* A failed check: say which, and count it (main's exit status). */
static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL: %s\n", what);
        failures++;
    }
}

/* A failed call: print the library's message (emu/error.h), count it. */
static void fail(const emu_error *err)
{
    char msg[600];
    emu_error_format(err, msg, sizeof msg);
    fprintf(stderr, "FAIL: %s\n", msg);
    failures++;
}

/* Same value, NaN included: the array path and the scalar one must agree
 * bit for bit (a float holds every e4m3 and bfloat16 value exactly). */
static int same(float a, double b)
{
    float fb = (float)b;
    return memcmp(&a, &fb, sizeof a) == 0 || (isnan(a) && isnan(b));
}

/* Test data: gradient-like magnitudes spread over 2^-24 .. 2^10, both
 * signs, after a few values that exercise the edges. */
static void make_data(float *x, size_t n)
{
    const float edges[] = {
        0.1f, 1.0f / 3.0f, -2.75f,
        448.0f,   /* e4m3's largest value                                  */
        500.0f,   /* beyond it: e4m3 has no infinity, so NaN (or 448 with
                     .saturate)                                            */
        1e-9f,    /* below e4m3's smallest subnormal 2^-9: underflow to 0 */
        3.4e38f,  /* beyond bfloat16's largest: overflow to inf            */
        -0.0f,
    };
    size_t k = sizeof edges / sizeof edges[0];
    for (size_t i = 0; i < n; i++) {
        if (i < k) {
            x[i] = edges[i];
            continue;
        }
        uint64_t w = emu_random64(2024, 0, i);  /* any source would do */
        double frac = (double)(w >> 11) * 0x1p-53;   /* [0, 1)           */
        int e = (int)(w % 35) - 24;                  /* -24 .. 10        */
        x[i] = (float)ldexp((w & 1024) ? -(1 + frac) : 1 + frac, e);
    }
}

/* Round x into fmt under mode, print the counts, and check every element
 * and every count against the scalar choke point. */
static void round_and_check(const char *fmt_name, emu_rnd mode,
                            const float *x, float *y, size_t n)
{
    const emu_format *fmt = emu_format_find(fmt_name);
    check(fmt != NULL, "format is registered");
    if (!fmt)
        return;

    /* How to round: the mode, plus (for stochastic modes) where the
     * random words come from.  Element i takes the word
     * emu_random64(seed, stream, first_index + i), so the result never
     * depends on how the array is split into calls or threads. */
    emu_array_rounding ar = { .rnd = { .mode = mode },
                              .seed = 42, .stream = 7, .first_index = 0 };
    emu_round_counts counts = { 0 };   /* calls add to it: zero it first */
    emu_error err;
    if (emu_round_array_f32(fmt, y, x, n, &ar, &counts, &err) != 0) {
        fail(&err);
        return;
    }
    printf("%-9s %-4s n=%llu inexact=%llu underflow=%llu to_zero=%llu "
           "subnormal=%llu overflow=%llu nan=%llu\n",
           fmt->name, emu_rnd_name(mode), (unsigned long long)counts.n,
           (unsigned long long)counts.inexact,
           (unsigned long long)counts.underflow,
           (unsigned long long)counts.to_zero,
           (unsigned long long)counts.subnormal,
           (unsigned long long)counts.overflow,
           (unsigned long long)counts.nan);

    /* The same map, one element at a time through the scalar choke
     * point, and the counts rebuilt from its results. */
    emu_round_counts recount = { 0 };
    int all_same = 1, all_neighbours = 1;
    for (size_t i = 0; i < n; i++) {
        emu_status st;
        double r;
        if (emu_rnd_is_stochastic(mode)) {
            uint64_t word = emu_random64(ar.seed, ar.stream,
                                         ar.first_index + i);
            r = emu_round2_word(fmt, x[i], 0.0, &ar.rnd, word, &st);
            /* A stochastic result is one of the two directed ones. */
            const emu_rounding down = { .mode = EMU_RD };
            const emu_rounding up = { .mode = EMU_RU };
            all_neighbours &= same(y[i], emu_round(fmt, x[i], &down, NULL)) ||
                              same(y[i], emu_round(fmt, x[i], &up, NULL));
        } else {
            r = emu_round(fmt, x[i], &ar.rnd, &st);
        }
        all_same &= same(y[i], r);
        emu_round_counts_add(&recount, x[i], r, st.flags);
    }
    check(all_same, "every element equals the scalar rounding");
    check(all_neighbours, "stochastic results are neighbours of x");
    check(memcmp(&counts, &recount, sizeof counts) == 0,
          "array counts equal the scalar recount");
    check(counts.n == n && counts.inexact <= n &&
          counts.underflow <= counts.inexact && counts.to_zero <= n,
          "counts are consistent");
}

int main(void)
{
    enum { N = 4096, M = 10000 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    float *c = malloc(M * sizeof *c), *r = malloc(M * sizeof *r);
    if (!x || !y || !c || !r)
        return 1;
    make_data(x, N);

    const char *formats[] = { "e4m3", "bfloat16" };
    const emu_rnd modes[] = { EMU_RNE, EMU_RS };
    for (int f = 0; f < 2; f++)
        for (int m = 0; m < 2; m++)
            round_and_check(formats[f], modes[m], x, y, N);

    /* The edge values under nearest-even, where we know the answer. */
    const emu_format *e4m3 = emu_format_find("e4m3");
    const emu_array_rounding rne = { .rnd = { .mode = EMU_RNE } };
    emu_round_counts counts = { 0 };
    if (emu_round_array_f32(e4m3, y, x, 8, &rne, &counts, NULL) != 0)
        return 1;
    check(y[0] == 0.1015625f, "0.1 -> 0.1015625 in e4m3");
    check(y[3] == 448.0f && isnan(y[4]), "448 stays, 500 -> NaN in e4m3");
    check(y[5] == 0.0f && counts.to_zero == 1, "1e-9 underflows to 0");

    /* Stochastic rounding is unbiased: round M copies of 0.1 into e4m3.
     * Nearest-even gives 0.1015625 every time; stochastic rounding gives
     * 0.09375 or 0.1015625 with probabilities 0.2 and 0.8, mean 0.1. */
    for (size_t i = 0; i < M; i++)
        c[i] = 0.1f;
    const emu_array_rounding sr = { .rnd = { .mode = EMU_RS }, .seed = 1 };
    if (emu_round_array_f32(e4m3, r, c, M, &sr, NULL, NULL) != 0)
        return 1;
    double mean = 0;
    for (size_t i = 0; i < M; i++)
        mean += r[i];
    mean /= M;
    /* Standard deviation of the mean: ulp * sqrt(p (1 - p) / M). */
    double sd = 0.0078125 * sqrt(0.2 * 0.8 / M);
    printf("mean of %d roundings of 0.1f into e4m3: rne %.7f, sr %.7f "
           "(sd %.1e)\n", M, 0.1015625, mean, sd);
    check(fabs(mean - 0.1f) < 5 * sd, "stochastic rounding is unbiased");

    free(x), free(y), free(c), free(r);
    if (failures) {
        fprintf(stderr, "round_array: %d check(s) failed\n", failures);
        return 1;
    }
    printf("round_array: all checks passed\n");
    return 0;
}
