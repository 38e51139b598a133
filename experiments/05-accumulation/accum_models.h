/*
 * accum_models.h — the accumulator models experiment 5 compares, shared by
 * accum_sweep.c (synthetic operands) and accum_real.c (a trained model's
 * operands), so that both measure exactly the same units.
 */
#ifndef EXP05_ACCUM_MODELS_H
#define EXP05_ACCUM_MODELS_H
#include <string.h>

#include "emu/accum.h"
#include "emu/format.h"
#include "emu/round.h"

typedef struct model {
    const char *name;      /* column value in the CSV                     */
    const char *spec;      /* emu_accum_parse spec                         */
    unsigned promote;      /* > 0: the model runs over chunks of this many
                              terms whose results are added in binary32
                              (DeepSeek-V3's fix, composed here because the
                              library's blocked model is sequential inside) */
} model;

static const model MODELS[] = {
    { "fp16-sequential", "sequential,acc=binary16", 0 },
    { "fp16-pairwise", "pairwise,acc=binary16", 0 },
    { "fp16-kahan", "kahan,acc=binary16", 0 },
    { "fp16-blocked128", "blocked,acc=binary16,wide=binary32,block=128", 0 },
    { "fp32-sequential", "sequential,acc=binary32", 0 },
    { "fused-k4-w14", "fused,acc=binary32,k=4,w=14", 0 },
    { "fused-k32-w14", "fused,acc=binary32,k=32,w=14", 0 },
    { "fused-k32-w14-promote128", "fused,acc=binary32,k=32,w=14", 128 },
    { "fused-k32-w24", "fused,acc=binary32,k=32,w=24", 0 },
};
enum { NMODELS = sizeof MODELS / sizeof MODELS[0] };

static inline void two_sum(double a, double b, double *s, double *e)
{
    *s = a + b;
    double bb = *s - a;
    *e = (a - (*s - bb)) + (b - bb);
}

/* The model over chunks of `promote` terms; each chunk's result (already
 * in binary32) is added into a binary32 accumulator, rounded to nearest. */
static inline double promoted_dot(const emu_accum *a, unsigned promote,
                                  const float *x, const float *y, size_t n,
                                  emu_accum_counts *counts)
{
    const emu_format *f32 = emu_format_find("binary32");
    emu_rounding rne;
    memset(&rne, 0, sizeof rne);
    double w = 0.0;
    for (size_t i0 = 0; i0 < n; i0 += promote) {
        size_t m = n - i0 < promote ? n - i0 : promote;
        double lo = 0.0;
        double s = emu_accum_dot(&lo, counts, a, x + i0, 1, y + i0, 1, m, NULL);
        double hi, err;
        two_sum(w, s, &hi, &err);
        double w_new = emu_round2(f32, hi, err, &rne, NULL);
        emu_accum_count_add(counts, f32, w, s, w_new);
        w = w_new;
    }
    return w;
}

#endif
