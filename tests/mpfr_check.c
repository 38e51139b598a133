/* mpfr_check.c — see mpfr_check.h. */
/* The oracle's own double arithmetic must not be contracted into fma
 * either (GCC ignores the standard pragma and warns about it; in ISO mode,
 * as CMake builds, its default is already off). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#else
#pragma STDC FP_CONTRACT OFF
#endif
#include "mpfr_check.h"

#include <stdio.h>
#include <string.h>

#include "testutil.h"

unsigned long long n_checked, n_mismatch;

static int sgn(int t)
{
    return (t > 0) - (t < 0);
}

static void print_operand(const emu_format *in, uint64_t bits, double v)
{
    if (in) {
        fprintf(stderr, " 0x%0*llx (%a)", (in->bits + 3) / 4,
                (unsigned long long)bits, v);
    } else {
        uint64_t u;
        memcpy(&u, &v, sizeof u);
        fprintf(stderr, " 0x%016llx (%a)", (unsigned long long)u, v);
    }
}

static void print_result(const char *who, double v, emu_status s)
{
    char fl[128];
    emu_flags_string(s.flags, fl, sizeof fl);
    fprintf(stderr, "    %s %a  ternary %+d  flags 0x%02x (%s)\n", who, v,
            s.ternary, s.flags, fl);
}

/* One result of the emulator (got) against the oracle's (want).  `in` is
 * the operands' format (NULL: plain doubles, printed as binary64). */
bool check_one(const char *op, const emu_format *in,
                      const emu_format *out, const emu_rounding *r, int n,
                      const uint64_t *bits, const double *v, double want,
                      emu_status ws, double got, emu_status gs)
{
    n_checked++;
    if (test_same(want, got) && sgn(ws.ternary) == sgn(gs.ternary) &&
        ws.flags == gs.flags)
        return true;
    if (n_mismatch++ < PRINT_LIMIT) {
        fprintf(stderr, "MISMATCH %s: %s -> %s, mode %s, tininess %s, "
                "saturate %s\n  operands:", op, in ? in->name : "binary64",
                out->name, emu_rnd_name(r->mode),
                r->tininess == EMU_TINY_BEFORE ? "before" : "after",
                r->saturate ? "on" : "off");
        for (int i = 0; i < n; i++)
            print_operand(in, bits ? bits[i] : 0, v[i]);
        fprintf(stderr, "\n");
        print_result("expected (MPFR)", want, ws);
        print_result("got (emu)      ", got, gs);
        if (n_mismatch == PRINT_LIMIT)
            fprintf(stderr, "(further mismatches are counted, not printed)\n");
    }
    return false;
}
