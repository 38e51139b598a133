/*
 * accum_step.c — one accumulator step as a function, and the swamping
 * bookkeeping every accumulator (and the optimizer updates) shares.
 *
 * emu_accum_round_step is accum_internal.h's fast step with the choke
 * point as its fallback, as one call (tests/test_accum.c holds the two
 * together); emu_accum_count_add counts what one addition lost
 * (emu/accum.h).
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/accum.h"

#include <math.h>
#include <stdint.h>

#include "accum_internal.h"

double emu_accum_round_step(const emu_format *f, const emu_rounding *r,
                            double hi, double lo, uint64_t word, bool *fast)
{
    fast_plan pl;
    plan_init(&pl, f, r);
    double out;
    if (pl.ok && (pl.sr ? fast_round_sr(&pl, hi, lo, word, &out)
                        : fast_round(&pl, hi, lo, &out))) {
        if (fast)
            *fast = true;
        return out;
    }
    if (fast)
        *fast = false;
    return emu_round2_word_unguarded(f, hi, lo, r, word, NULL);
}

/* ---- swamping ------------------------------------------------------------ */

void emu_accum_count_add_unguarded(emu_accum_counts *c, const emu_format *acc,
                                   double s, double t, double s_new)
{
    accum_count_add(c, acc, s, t, s_new);
}

void emu_accum_count_add(emu_accum_counts *c, const emu_format *acc, double s,
                         double t, double s_new)
{
    EMU_HOSTFP_GUARD;
    emu_accum_count_add_unguarded(c, acc, s, t, s_new);
}
