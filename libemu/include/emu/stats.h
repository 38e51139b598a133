/*
 * emu/stats.h — what the choke point measures, per op site and role.
 *
 * A site is a place in a program where an op runs ("fc1.matmul",
 * "conv2.dweight"); its statistics are kept per role of the output tensor,
 * over the whole run (total) and over the current step (step).  Every
 * field is a plain count or a sum, so two threads' partial statistics
 * merge exactly and in a fixed order.
 *
 * Exports are written atomically ("<path>.tmp-PID-N", synced, renamed)
 * and are meant to be read by pandas with no options: one header line,
 * comma separated, no index column, numbers in C locale.
 */
#ifndef EMU_STATS_H
#define EMU_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "emu/format.h"
#include "emu/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* log2-magnitude histogram: one bin per binade of binary32's range
 * (2^-149 .. 2^127), plus zero, below-range (exact values of ops can be
 * smaller than any binary32), above-range finite, inf and NaN. */
enum {
    EMU_HIST_ZERO = 0,
    EMU_HIST_BELOW = 1,       /* 0 < |x| < 2^-149                          */
    EMU_HIST_FIRST = 2,       /* bin of the binade [2^-149, 2^-148)         */
    EMU_HIST_EMIN = -149,
    EMU_HIST_EMAX = 127,
    EMU_HIST_ABOVE = EMU_HIST_FIRST + (EMU_HIST_EMAX - EMU_HIST_EMIN) + 1,
    EMU_HIST_INF,
    EMU_HIST_NAN,
    EMU_HIST_BINS
};

/* The bin of x; for binade bins the exponent is bin - EMU_HIST_FIRST + EMU_HIST_EMIN. */
int emu_hist_bin(double x);
/* A label for bin b: "zero", "below", "-149" ... "127", "above", "inf", "nan". */
const char *emu_hist_label(int b, char *buf, size_t size);

/* Error bins.  ulp errors: [0] exact, [1] (0, 1/2], [2] (1/2, 1], [3] (1, 2],
 * [k] (2^(k-3), 2^(k-2)] ..., last bin everything above.  Relative errors:
 * [0] exact, [k] in [2^-k, 2^-(k-1)) for k = 1..62, [63] >= 2^-1 ... see
 * emu_relerr_bin. */
enum { EMU_ULPERR_BINS = 24, EMU_RELERR_BINS = 64, EMU_LOST_BINS = 66 };
int emu_ulperr_bin(double ulps);
int emu_relerr_bin(double rel);

typedef struct emu_site_stats {
    /* every op */
    uint64_t results;     /* outputs produced                              */
    uint64_t inexact;     /* output differs from its exact value            */
    uint64_t underflow;   /* tiny and inexact (IEEE)                        */
    uint64_t to_zero;     /* exact value non-zero, output zero             */
    uint64_t subnormal;   /* non-zero output below the format's 2^emin      */
    uint64_t overflow;    /* to inf, to NaN or saturated                    */
    uint64_t nan;         /* NaN outputs                                    */
    uint64_t nan_produced;/* NaN outputs whose op inputs had no NaN         */
    /* accumulations (matmul, conv, reductions, optimizer updates) */
    uint64_t adds;        /* additions into an accumulator                 */
    uint64_t absorbed;    /* non-zero addend that changed nothing           */
    uint64_t lost_bits[EMU_LOST_BINS]; /* addend bits below the result's ulp;
                                          [65] = fully absorbed          */
    /* magnitudes */
    uint64_t hist_exact[EMU_HIST_BINS];   /* value before output rounding */
    uint64_t hist_rounded[EMU_HIST_BINS]; /* value written                */
    uint64_t hist_scale[EMU_HIST_BINS];   /* quantize sites: each block's
                                             scale times the tensor scale */
    /* error against MPFR, on sampled outputs */
    uint64_t ref_samples;
    double ulp_sum, ulp_max;   /* |out - exact| in ulps of the output format */
    double rel_sum, rel_max;   /* |out - exact| / |exact| (exact != 0)       */
    uint64_t ulp_hist[EMU_ULPERR_BINS];
    uint64_t rel_hist[EMU_RELERR_BINS];
    /* dot products: the sampled error split into its causes, each relative
     * to |exact dot product of the unquantized sources| */
    uint64_t dot_samples;
    double quant_sum, quant_max;   /* sources -> op inputs                  */
    double accum_sum, accum_max;   /* exact dot of inputs -> accumulator    */
    double round_sum, round_max;   /* accumulator -> output format           */
} emu_site_stats;

void emu_site_stats_merge(emu_site_stats *into, const emu_site_stats *from);

typedef struct emu_site {
    char name[EMU_TENSOR_NAME_MAX];
    char kind[24];          /* "matmul", "add", ...                        */
    emu_role role;          /* of the output tensor                        */
    char format[EMU_NAME_MAX]; /* output format's name                     */
    emu_site_stats total;
    emu_site_stats step;
    bool active;            /* ran during the current step                  */
} emu_site;

typedef struct emu_stats {
    emu_site *sites;
    size_t count, cap;
    int64_t step;           /* the step being measured                     */
    /* NULL, or a NULL-terminated list of site names whose log2 histograms
     * are measured even when ctx->measure leaves EMU_MEASURE_HIST out
     * (emu train: its parameter layers' "<layer>.dinput", whose zeros
     * layers_steps.csv reads at every step).  Not owned: emu_stats_init
     * and emu_stats_free set it to NULL. */
    const char *const *hist_always;
} emu_stats;

void emu_stats_init(emu_stats *s);
void emu_stats_free(emu_stats *s);

/* The site (name, role), created on first use.  NULL only if out of
 * memory (EMU_ENOMEM is its one failure, so it takes no err). */
emu_site *emu_stats_site(emu_stats *s, const char *name, const char *kind,
                         emu_role role, const emu_format *fmt);

/* Starts measuring step `step`: clears every site's step statistics. */
void emu_stats_begin_step(emu_stats *s, int64_t step);

/* Appends one CSV row per site active in the current step to fp (with the
 * header first if `header`).  Returns 0, or -1 with err (EMU_EIO) if fp
 * reports a write error. */
int emu_stats_write_step_rows(const emu_stats *s, FILE *fp, bool header,
                              emu_error *err);

/* Whole-run exports, each written atomically to `path`:
 *   sites CSV: one row per (site, role) with every counter and derived rates;
 *   histogram CSV (long form): site, role, which (exact|rounded|scale), bin label,
 *     log2 lower edge (empty for special bins), count — only non-zero bins;
 *   JSON: the same as one document.
 * Return 0 or -1 with err naming the path and the system error. */
int emu_stats_write_csv(const emu_stats *s, const char *path, emu_error *err);
int emu_stats_write_hist_csv(const emu_stats *s, const char *path,
                             emu_error *err);
int emu_stats_write_json(const emu_stats *s, const char *path, emu_error *err);

/* A human-readable table of the totals. */
void emu_stats_print_summary(const emu_stats *s, FILE *fp);

/* ---- reading statistics ----------------------------------------------------
 * For programs (and the Python binding) that read measurements without
 * walking the arrays above.  Every function here is a look-up
 * (emu/error.h): NULL or -1 for a site, counter or histogram that does
 * not exist, and nothing else can fail. */

/* Sites in the order they were first used (the order of the exports). */
size_t emu_stats_site_count(const emu_stats *s);
const emu_site *emu_stats_site_at(const emu_stats *s, size_t i);

/* The site (name, role).  A name longer than the stored field matches the
 * site it was truncated into, as emu_stats_site does. */
const emu_site *emu_stats_find(const emu_stats *s, const char *name,
                               emu_role role);
/* The first site of that name, whatever its role (a site usually writes
 * tensors of one role; a program that shares a site name between roles
 * asks emu_stats_find). */
const emu_site *emu_stats_find_name(const emu_stats *s, const char *name);

/* Which statistics of a site: the whole run, or the current step (since
 * emu_stats_begin_step). */
typedef enum emu_stats_span {
    EMU_SPAN_TOTAL,
    EMU_SPAN_STEP,
    EMU_SPAN_COUNT
} emu_stats_span;

/* Counters, by the column names of the CSV exports ("results", "inexact",
 * "underflow", "to_zero", ..., "ulp_mean", "ulp_max", ..., "inexact_rate",
 * ...): the exports and these functions read one table, so a name here
 * is a column there, in the same order.  Counts are exact in a double
 * below 2^53; means and rates are 0 without samples, as exported. */
size_t emu_stats_counter_count(void);
const char *emu_stats_counter_name(size_t i);   /* NULL past the count */
int emu_stats_counter(const emu_site *site, emu_stats_span span,
                      const char *name, double *value);

/* Copies the EMU_HIST_BINS counts of a histogram into out; `which` is
 * "exact", "rounded" or "scale", as in the histogram CSV's which column. */
int emu_stats_hist(const emu_site *site, emu_stats_span span,
                   const char *which, uint64_t out[EMU_HIST_BINS]);

#ifdef __cplusplus
}
#endif
#endif
