/*
 * read_stats — reading what the choke point measured: iterate the sites,
 * read counters by name and a histogram, per run and per step, and write
 * the CSV exports.
 *
 * A small bfloat16 layer (load, matmul, relu, a row sum) and a gradient
 * cast into e5m2 run for two steps.  The program then reads every site
 * through emu/stats.h — never the raw arrays — and checks what it can:
 * each histogram adds up to the site's results, the step statistics are
 * one step's share of the totals, unknown names are refused, and the CSV
 * export holds one row per site with the counter values the API gave.
 *
 * One of the README's "Using the library" examples, built and run as a
 * CTest (example_read_stats); exits non-zero if any check fails.  Writes
 * PREFIX_sites.csv and PREFIX_hist.csv (PREFIX: argv[1], default
 * "read_stats") in the current directory.
 * Build against an installed libemu:
 *     cc -std=c11 read_stats.c $(pkg-config --cflags --libs libemu) -lm
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/emu.h>

enum { B = 16, IN = 64, OUT = 32 };

static int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL: %s\n", what);
        failures++;
    }
}

static int die(const emu_error *err)
{
    char msg[600];
    emu_error_format(err, msg, sizeof msg);
    fprintf(stderr, "FAIL: %s\n", msg);
    return 1;
}

/* n values of magnitude about 2^e (both signs), from Philox words. */
static void fill(float *v, size_t n, int e, uint64_t stream)
{
    for (size_t i = 0; i < n; i++) {
        double u = (double)(emu_random64(9, stream, i) >> 11) * 0x1p-53;
        v[i] = (float)ldexp(2 * u - 1, e);
    }
}

/* One step of the program whose statistics we read. */
static int run_step(emu_ctx *ctx, int64_t step)
{
    emu_error err;
    const emu_format *bf16 = emu_format_find("bfloat16");
    const emu_format *b32 = emu_format_find("binary32");
    const emu_format *e5m2 = emu_format_find("e5m2");
    emu_tensor x, w, y, h, s, g, g8;
    if (emu_tensor_alloc4(&x, "x", EMU_ROLE_ACTIVATION, bf16, B, IN, 0, 0, &err) ||
        emu_tensor_alloc4(&w, "w", EMU_ROLE_WEIGHT, bf16, OUT, IN, 0, 0, &err) ||
        emu_tensor_alloc4(&y, "y", EMU_ROLE_ACTIVATION, bf16, B, OUT, 0, 0, &err) ||
        emu_tensor_alloc4(&h, "h", EMU_ROLE_ACTIVATION, bf16, B, OUT, 0, 0, &err) ||
        emu_tensor_alloc4(&s, "s", EMU_ROLE_ACTIVATION, b32, B, 0, 0, 0, &err) ||
        emu_tensor_alloc4(&g, "g", EMU_ROLE_ACTIVATION, b32, B, OUT, 0, 0, &err) ||
        emu_tensor_alloc4(&g8, "g8", EMU_ROLE_ACT_GRAD, e5m2, B, OUT, 0, 0, &err))
        return die(&err);

    static float src[B * IN > OUT * IN ? B * IN : OUT * IN];
    const emu_rounding rne = { .mode = EMU_RNE };
    emu_accum acc;
    emu_accum_default(&acc);      /* sequential, binary32 accumulator */
    emu_matmul_opts mm = { .accum = &acc, .trans_b = true };   /* x w^T */

    /* Statistics of this step only, besides the run's totals. */
    emu_stats_begin_step(ctx->stats, step);
    int rc = 0;
    fill(src, B * IN, 0, 2 * (uint64_t)step);
    rc |= emu_t_load(ctx, "x.load", &x, src, B * IN, &rne);
    fill(src, OUT * IN, -3, 2 * (uint64_t)step + 1);
    rc |= emu_t_load(ctx, "w.load", &w, src, OUT * IN, &rne);
    rc |= emu_t_matmul(ctx, "fc.matmul", &y, &x, &w, &mm, &rne);
    rc |= emu_t_unary(ctx, "fc.relu", &h, &y, EMU_UNARY_RELU, 0, 0, &rne);
    rc |= emu_t_reduce(ctx, "head.sum", &s, &h, EMU_REDUCE_SUM, 1, &acc, &rne);
    /* Gradients of magnitude 2^-14: many lie below e5m2's smallest
     * subnormal (2^-16) and underflow. */
    fill(src, B * OUT, -14, 100 + (uint64_t)step);
    rc |= emu_t_load(ctx, "g.load", &g, src, B * OUT, &rne);
    rc |= emu_t_cast(ctx, "grad.cast", &g8, &g, &rne);
    if (rc)
        die(&ctx->err);

    emu_tensor_free(&x), emu_tensor_free(&w), emu_tensor_free(&y);
    emu_tensor_free(&h), emu_tensor_free(&s), emu_tensor_free(&g);
    emu_tensor_free(&g8);
    return rc != 0;
}

/* Sum of a histogram's bins. */
static uint64_t hist_total(const uint64_t bins[EMU_HIST_BINS])
{
    uint64_t t = 0;
    for (int b = 0; b < EMU_HIST_BINS; b++)
        t += bins[b];
    return t;
}

/* The value in column `col` of the row of `site` in the sites CSV, or
 * NAN if not found.  Text fields are quoted ("fc.matmul"); the site
 * names here hold no commas or quotes. */
static double csv_value(const char *path, const char *site, const char *col)
{
    FILE *fp = fopen(path, "r");
    char line[8192];
    double v = NAN;
    int k = -1;
    if (!fp)
        return NAN;
    if (fgets(line, sizeof line, fp)) {           /* header: find col */
        int i = 0;
        for (char *t = strtok(line, ",\n"); t; t = strtok(NULL, ",\n"), i++)
            if (strcmp(t, col) == 0)
                k = i;
    }
    while (k >= 0 && fgets(line, sizeof line, fp)) {
        char *t = strtok(line, ",\n");
        size_t len = t ? strlen(t) : 0;
        if (len < 2 || strncmp(t + 1, site, len - 2) != 0 ||
            site[len - 2] != '\0')
            continue;
        for (int i = 1; i <= k && t; i++)
            t = strtok(NULL, ",\n");
        if (t)
            v = strtod(t, NULL);
        break;
    }
    fclose(fp);
    return v;
}

int main(int argc, char **argv)
{
    const char *prefix = argc > 1 ? argv[1] : "read_stats";
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ctx.stats = &stats;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 1.0 / 16;                  /* MPFR checks 1 output in 16 */
    for (int64_t step = 0; step < 2; step++)
        if (run_step(&ctx, step))
            return 1;

    /* Every site, in the order first used: its identity, then counters
     * by their CSV column names, over the whole run and the last step. */
    printf("%-10s %-7s %-10s %-9s %7s %7s %9s %9s %8s\n", "site", "kind",
           "role", "format", "results", "step", "inexact%", "underflow",
           "absorbed");
    for (size_t i = 0; i < emu_stats_site_count(&stats); i++) {
        const emu_site *site = emu_stats_site_at(&stats, i);
        double results, step_results, inexact_rate, underflow, absorbed;
        if (emu_stats_counter(site, EMU_SPAN_TOTAL, "results", &results) ||
            emu_stats_counter(site, EMU_SPAN_STEP, "results", &step_results) ||
            emu_stats_counter(site, EMU_SPAN_TOTAL, "inexact_rate", &inexact_rate) ||
            emu_stats_counter(site, EMU_SPAN_TOTAL, "underflow", &underflow) ||
            emu_stats_counter(site, EMU_SPAN_TOTAL, "absorbed", &absorbed)) {
            fprintf(stderr, "FAIL: a counter is missing\n");
            return 1;
        }
        printf("%-10s %-7s %-10s %-9s %7.0f %7.0f %9.2f %9.0f %8.0f\n",
               site->name, site->kind, emu_role_name(site->role),
               site->format, results, step_results, 100 * inexact_rate,
               underflow, absorbed);

        /* Checks: both histograms count every result; the current step
         * is one of two identical-shaped steps; look-ups by name agree. */
        uint64_t exact[EMU_HIST_BINS], rounded[EMU_HIST_BINS];
        check(emu_stats_hist(site, EMU_SPAN_TOTAL, "exact", exact) == 0 &&
              emu_stats_hist(site, EMU_SPAN_TOTAL, "rounded", rounded) == 0,
              "histograms exist");
        check(hist_total(exact) == results && hist_total(rounded) == results,
              "histograms add up to the results");
        check(2 * step_results == results, "a step is half the run");
        check(emu_stats_find_name(&stats, site->name) == site &&
              emu_stats_find(&stats, site->name, site->role) == site,
              "sites are found by name");
    }

    /* A histogram: the gradients before and after rounding into e5m2.
     * Bins are binades (2^e <= |x| < 2^(e+1)); what fell below e5m2's
     * range moved into "zero". */
    const emu_site *gc = emu_stats_find(&stats, "grad.cast",
                                        EMU_ROLE_ACT_GRAD);
    uint64_t hx[EMU_HIST_BINS], hr[EMU_HIST_BINS];
    if (!gc || emu_stats_hist(gc, EMU_SPAN_TOTAL, "exact", hx) ||
        emu_stats_hist(gc, EMU_SPAN_TOTAL, "rounded", hr)) {
        fprintf(stderr, "FAIL: no grad.cast histograms\n");
        return 1;
    }
    printf("grad.cast  bin    exact  rounded\n");
    for (int b = 0; b < EMU_HIST_BINS; b++)
        if (hx[b] || hr[b]) {
            char label[16];
            printf("          %5s  %6llu  %6llu\n",
                   emu_hist_label(b, label, sizeof label),
                   (unsigned long long)hx[b], (unsigned long long)hr[b]);
        }
    double to_zero;
    emu_stats_counter(gc, EMU_SPAN_TOTAL, "to_zero", &to_zero);
    check(to_zero > 0 && hr[EMU_HIST_ZERO] == hx[EMU_HIST_ZERO] + to_zero,
          "values flushed to zero land in the zero bin");

    /* Look-ups fail for names that do not exist (emu/error.h). */
    double v;
    check(emu_stats_find_name(&stats, "no.such.site") == NULL &&
          emu_stats_counter(gc, EMU_SPAN_TOTAL, "no_such_counter", &v) == -1,
          "unknown names are refused");

    /* The exports, written atomically: one row per (site, role) with every
     * counter; the histograms in long form.  pandas reads both as is. */
    char sites_csv[512], hist_csv[512];
    snprintf(sites_csv, sizeof sites_csv, "%s_sites.csv", prefix);
    snprintf(hist_csv, sizeof hist_csv, "%s_hist.csv", prefix);
    emu_error err;
    if (emu_stats_write_csv(&stats, sites_csv, &err) != 0 ||
        emu_stats_write_hist_csv(&stats, hist_csv, &err) != 0)
        return die(&err);
    printf("wrote %s and %s\n", sites_csv, hist_csv);

    /* The CSV's columns are the counter names: each reads back. */
    int csv_ok = 1;
    for (size_t i = 0; i < emu_stats_site_count(&stats); i++) {
        const emu_site *site = emu_stats_site_at(&stats, i);
        for (size_t c = 0; c < emu_stats_counter_count(); c++) {
            const char *name = emu_stats_counter_name(c);
            double api, csv = csv_value(sites_csv, site->name, name);
            emu_stats_counter(site, EMU_SPAN_TOTAL, name, &api);
            /* The CSV prints 9 significant digits (counts below 10^9
             * exactly). */
            csv_ok &= fabs(csv - api) <= 1e-8 * fabs(api);
        }
    }
    check(csv_ok, "the CSV holds the values the API reads");

    emu_stats_print_summary(&stats, stdout);
    emu_stats_free(&stats);
    if (failures) {
        fprintf(stderr, "read_stats: %d check(s) failed\n", failures);
        return 1;
    }
    printf("read_stats: all checks passed\n");
    return 0;
}
