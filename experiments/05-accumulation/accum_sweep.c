/*
 * accum_sweep.c — experiment 5: how much error a dot-product unit's
 * accumulator adds as the reduction length K grows.
 *
 * For each K (64 ... 16384), each input distribution and each accumulator
 * model, forms `dots` dot products of random vectors whose elements are
 * already in the input format (binary16 by default; e4m3 for the FP8
 * case of DeepSeek-V3), with the library's reference models
 * (emu_accum_dot), and compares each result with the exact dot product
 * computed by MPFR.  The models' results are the accumulator's final
 * value before any output rounding, so the error measured is the
 * accumulator's alone.  Swamping (addends that changed nothing, bits lost
 * below the accumulator's ulp) comes from the models' own counters.
 *
 * Called by experiments/05-accumulation/run.sh; writes one CSV (long
 * form: one row per distribution, K and model) to stdout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "emu/accum.h"
#include "emu/format.h"
#include "emu/rng.h"
#include "emu/round.h"

#include "accum_models.h"

/* ---- inputs ----------------------------------------------------------- */

/* A uniform double in [0, 1) from the top 53 bits of a word. */
static double unit(uint64_t w)
{
    return (double)(w >> 11) * 0x1p-53;
}

/* One element: "uniform" in [0, 1) (all products positive: the worst case
 * for swamping, as in a sum of squares or of probabilities) or "normal"
 * N(0, 1) (signed: partial sums wander like sqrt(K)).  Rounded to nearest
 * into the input format. */
static double element(const char *dist, const emu_format *in, uint64_t seed,
                      uint64_t stream, uint64_t i)
{
    double v;
    if (!strcmp(dist, "uniform")) {
        v = unit(emu_random64(seed, stream, 2 * i));
    } else {
        /* Box-Muller on two words. */
        double u1 = unit(emu_random64(seed, stream, 2 * i)) + 0x1p-54;
        double u2 = unit(emu_random64(seed, stream, 2 * i + 1));
        v = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    }
    emu_rounding rne;
    memset(&rne, 0, sizeof rne);
    return emu_round(in, v, &rne, NULL);
}

/* ---- one (distribution, K) cell --------------------------------------- */

typedef struct cell {
    double rel_sum, rel_max;     /* |got - exact| / |exact|                  */
    double nrel_sum, nrel_max;   /* |got - exact| / sum |x_i y_i|           */
    double bits_sum;             /* mean of -log2(rel) (correct bits)        */
    size_t dots;
    emu_accum_counts counts;
} cell;

static double lost_bits_mean(const emu_accum_counts *c)
{
    /* Bins 1..64: that many bits lost; the last bin: absorbed entirely
     * (counted separately), bin 0: nothing lost. */
    double s = 0.0;
    uint64_t n = 0;
    for (int b = 0; b < EMU_LOST_BINS - 1; b++) {
        s += (double)b * (double)c->lost_bits[b];
        n += c->lost_bits[b];
    }
    return n ? s / (double)n : 0.0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: accum_sweep [--input FORMAT] [--dots N] [--kmax K] "
            "[--seed S]\n"
            "  writes CSV to stdout: one row per distribution, K and model\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *input = "binary16";
    size_t dots = 200;
    size_t kmax = 16384;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "--input"))
            input = argv[++i];
        else if (!strcmp(argv[i], "--dots"))
            dots = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--kmax"))
            kmax = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[++i], NULL, 10);
        else
            usage();
    }
    emu_format in;
    emu_error err;
    if (!dots || kmax < 64 || emu_format_resolve(&in, input, &err)) {
        fprintf(stderr, "accum_sweep: bad --input, --dots or --kmax\n");
        return 2;
    }
    emu_accum acc[NMODELS];
    for (int m = 0; m < NMODELS; m++)
        if (emu_accum_parse(&acc[m], MODELS[m].spec, &err) ||
            emu_accum_validate(&acc[m], &err)) {
            char msg[600];
            emu_error_format(&err, msg, sizeof msg);
            fprintf(stderr, "accum_sweep: %s: %s\n", MODELS[m].spec, msg);
            return 1;
        }

    float *x = malloc(kmax * sizeof *x), *y = malloc(kmax * sizeof *y);
    if (!x || !y)
        return 1;
    /* Products of two p <= 11 bit numbers have <= 22 bits and exponents
     * within [-48, 32] for binary16 (wider for e4m3 only at the top): a
     * 256-bit MPFR sum of up to 2^14 of them is exact. */
    mpfr_t exact, t, d;
    mpfr_inits2(256, exact, t, d, (mpfr_ptr)0);

    printf("input,dist,K,model,dots,rel_mean,rel_max,nrel_mean,nrel_max,"
           "bits_mean,adds,absorbed,absorbed_rate,lost_bits_mean\n");
    static const char *const dists[] = { "uniform", "normal" };
    for (int di = 0; di < 2; di++) {
        for (size_t K = 64; K <= kmax; K *= 2) {
            cell c[NMODELS];
            memset(c, 0, sizeof c);
            for (size_t k = 0; k < dots; k++) {
                /* Streams: distinct per distribution, K and dot, so a cell
                 * never depends on which other cells were run. */
                uint64_t stream = ((uint64_t)di << 40) | ((uint64_t)K << 20) | k;
                mpfr_set_zero(exact, 1);
                double absdot = 0.0;
                for (size_t i = 0; i < K; i++) {
                    x[i] = (float)element(dists[di], &in, seed, stream, 2 * i);
                    y[i] = (float)element(dists[di], &in, seed, stream, 2 * i + 1);
                    double p = (double)x[i] * (double)y[i]; /* exact */
                    mpfr_set_d(t, p, MPFR_RNDN);
                    mpfr_add(exact, exact, t, MPFR_RNDN);  /* exact */
                    absdot += fabs(p);
                }
                double ex = mpfr_get_d(exact, MPFR_RNDN);
                for (int m = 0; m < NMODELS; m++) {
                    double lo = 0.0, got;
                    if (MODELS[m].promote)
                        got = promoted_dot(&acc[m], MODELS[m].promote, x, y, K,
                                           &c[m].counts);
                    else
                        got = emu_accum_dot(&lo, &c[m].counts, &acc[m], x, 1,
                                            y, 1, K, NULL);
                    /* got + lo - exact, exactly enough in 256 bits. */
                    mpfr_set_d(d, got, MPFR_RNDN);
                    mpfr_add_d(d, d, lo, MPFR_RNDN);
                    mpfr_sub(d, d, exact, MPFR_RNDN);
                    double e = fabs(mpfr_get_d(d, MPFR_RNDN));
                    double rel = ex != 0.0 ? e / fabs(ex) : (e != 0.0 ? INFINITY : 0.0);
                    double nrel = absdot > 0.0 ? e / absdot : 0.0;
                    c[m].rel_sum += rel;
                    c[m].rel_max = fmax(c[m].rel_max, rel);
                    c[m].nrel_sum += nrel;
                    c[m].nrel_max = fmax(c[m].nrel_max, nrel);
                    /* Correct bits, capped at binary32's 24 + 1 for exact. */
                    c[m].bits_sum += rel > 0x1p-25 ? -log2(rel) : 25.0;
                    c[m].dots++;
                }
            }
            for (int m = 0; m < NMODELS; m++) {
                const emu_accum_counts *q = &c[m].counts;
                printf("%s,%s,%zu,%s,%zu,%.6g,%.6g,%.6g,%.6g,%.4f,%llu,%llu,%.6g,"
                       "%.4f\n",
                       in.name, dists[di], K, MODELS[m].name, c[m].dots,
                       c[m].rel_sum / (double)c[m].dots, c[m].rel_max,
                       c[m].nrel_sum / (double)c[m].dots, c[m].nrel_max,
                       c[m].bits_sum / (double)c[m].dots,
                       (unsigned long long)q->adds,
                       (unsigned long long)q->absorbed,
                       q->adds ? (double)q->absorbed / (double)q->adds : 0.0,
                       lost_bits_mean(q));
            }
            fflush(stdout);
        }
    }
    mpfr_clears(exact, t, d, (mpfr_ptr)0);
    free(x);
    free(y);
    return 0;
}
