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

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <emu/ref.h>

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

bool ref_sr_away(mpfr_srcptr F, const emu_rounding *r, uint64_t word)
{
    /* fq = floor(F 2^64), as two 32-bit halves (exact scalings). */
    mpfr_t t;
    mpfr_init2(t, mpfr_get_prec(F) + 64);
    mpfr_mul_2ui(t, F, 32, MPFR_RNDN);
    uint64_t top = mpfr_get_ui(t, MPFR_RNDZ);
    mpfr_sub_ui(t, t, (unsigned long)top, MPFR_RNDN);
    mpfr_mul_2ui(t, t, 32, MPFR_RNDN);
    uint64_t fq = top << 32 | mpfr_get_ui(t, MPFR_RNDZ);
    mpfr_clear(t);
    unsigned n = r->mode == EMU_RS || r->sr_bits == 0 || r->sr_bits > 64
               ? 64 : r->sr_bits;
    if (n == 64)
        return word >= ~(uint64_t)0 - fq + 1 && fq != 0;
    uint64_t fn = fq >> (64 - n), wn = word >> (64 - n);
    return fn + wn >= (uint64_t)1 << n;
}

/* Quantum exponent at |z| (z a nonzero value of f): the spacing of f's
 * grid just above |z|, from MPFR's exponent. */
static long quantum_at(const emu_format *f, mpfr_srcptr z)
{
    long e = (long)mpfr_get_exp(z) - 1; /* 2^e <= |z| < 2^(e+1) */
    if (e >= f->emin)
        return e - f->p + 1;
    return f->subnormals ? f->emin - f->p + 1 : f->emin;
}

double ref_sr_round(const emu_format *f, mpfr_srcptr x, const emu_rounding *r,
                    uint64_t word, emu_status *st)
{
    emu_rounding d = *r;
    d.mode = EMU_RZ;
    double z = emu_ref_round(f, x, &d, st);
    if (st->ternary == 0 || !isfinite(z))
        return z; /* exact, NaN, or no neighbours to choose between */
    /* The away neighbour on the grid with an unbounded exponent; below
     * 2^emin the grid is the subnormal one, or {0, 2^emin} without. */
    mpfr_t zm, gap, F;
    mpfr_inits2(64, zm, gap, (mpfr_ptr)0);
    mpfr_set_d(zm, z, MPFR_RNDN);
    long q = z != 0.0 ? quantum_at(f, zm)
           : f->subnormals ? f->emin - f->p + 1 : f->emin;
    /* Enough bits for x - z exactly: from x's top bit down to the lower
     * of the quantum and x's last bit. */
    long ex = (long)mpfr_get_exp(x), low = ex - (long)mpfr_get_prec(x);
    mpfr_init2(F, (mpfr_prec_t)(ex - (low < q ? low : q) + 2));
    mpfr_set_ui_2exp(gap, 1, q, MPFR_RNDN);
    mpfr_sub(F, x, zm, MPFR_RNDN);  /* exact at 4096 bits */
    mpfr_abs(F, F, MPFR_RNDN);
    mpfr_div(F, F, gap, MPFR_RNDN); /* exact: a power of two */
    bool away;
    if (mpfr_cmp_ui(F, 1) >= 0) {
        /* Beyond the neighbour: only past max, where every word overflows. */
        away = true;
    } else {
        away = ref_sr_away(F, r, word);
    }
    mpfr_clears(zm, gap, F, (mpfr_ptr)0);
    if (!away)
        return z;
    d.mode = mpfr_signbit(x) ? EMU_RD : EMU_RU;
    return emu_ref_round(f, x, &d, st);
}
