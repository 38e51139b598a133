/*
 * test_transcendental.c — exp, log, tanh, sigmoid and gelu of emu_t_unary
 * are correctly rounded: an exhaustive proof for every binary16, bfloat16
 * and small-format input, against GNU MPFR.
 *
 * For every input pattern x of a 16-bit format (and of every shipped
 * format of 8 bits or fewer), the reference is f(x) rounded to odd at
 * P = 80 bits, which rounds into any format of p <= 78 bits, in every
 * deterministic mode and with both tininess rules, exactly as f(x) does
 * (Boldo & Melquiond).  It is computed here independently of the op's own
 * MPFR fallback: exp, log and tanh are MPFR's correctly rounded functions;
 * sigmoid and gelu use other formulas (tanh for sigmoid x >= 0, erf for
 * gelu x >= 0) inside Ziv's loop with their own error bounds, and
 * mathematical facts for the far asymptotes.  emu_ref_round then gives
 * the expected value, ternary sign and flags in each mode; the op's output
 * must match the value, and the choke point's rounding of the op's
 * pre-rounding value (seen by an observer) must match ternary and flags.
 *
 * Output formats: the input's own, plus binary16/bfloat16 across and e4m3,
 * e5m2.  Stochastic rounding: the result is one of the two neighbours and
 * is emu_round2_word of the pre-rounding value with word i of the op's
 * stream.  Random binary32 inputs add a sample for binary32 outputs.
 * The C library's own errors are measured and bounded (the op's fast path
 * assumes them).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <emu/ops.h>
#include <emu/ref.h>

#include "testutil.h"
#include "internal.h"     /* emu_isa_active, emu_isa_name */
#include "ops_internal.h" /* emu_unary_eval_det(_n): the fast paths */

enum { F_EXP, F_LOG, F_TANH, F_SIGMOID, F_GELU, F_COUNT };
static const emu_unary unary_of[F_COUNT] = {
    EMU_UNARY_EXP, EMU_UNARY_LOG, EMU_UNARY_TANH, EMU_UNARY_SIGMOID,
    EMU_UNARY_GELU,
};

enum { P = 80, PRINT_LIMIT = 40 };

/* ---- the reference: RO_P(f(x)) ------------------------------------------- */

/* r (precision P) made odd if it is an inexact rounding toward zero. */
static void make_odd(mpfr_ptr r, int inexact)
{
    if (!inexact || !mpfr_regular_p(r))
        return;
    MPFR_DECL_INIT(h, P);
    mpfr_mul_2si(h, r, -(mpfr_get_exp(r) - P) - 1, MPFR_RNDN); /* exact */
    if (!mpfr_integer_p(h))
        return; /* last bit already 1 */
    if (mpfr_signbit(r))
        mpfr_nextbelow(r);
    else
        mpfr_nextabove(r);
}

/* A value below every carrier format's tie point, of sign s: all of them
 * round alike, as does f(x) when it is that small. */
static void tiny(mpfr_ptr r, int s)
{
    mpfr_set_si_2exp(r, s, -100000, MPFR_RNDN);
}

/* Working variables of the Ziv loops (their precision changes). */
static mpfr_t zt, zu, zz;

static void ziv_init(void)
{
    static bool done;
    if (!done)
        mpfr_inits2(64, zt, zu, zz, (mpfr_ptr)0);
    done = true;
}

/* t ~ sigmoid x at precision w; returns err with |error| <= 2^(EXP(t)-err). */
static long sigmoid_approx(mpfr_ptr t, double x, mpfr_prec_t w)
{
    mpfr_ptr u = zu;
    mpfr_set_prec(u, w);
    mpfr_set_prec(t, w);
    if (x >= 0.0) {
        /* (1 + tanh(x/2)) / 2: tanh's rounding and the addition's, each
         * relative to the positive sum. */
        mpfr_set_d(u, x / 2.0, MPFR_RNDN); /* exact */
        mpfr_tanh(u, u, MPFR_RNDN);
        mpfr_add_ui(t, u, 1, MPFR_RNDN);
        mpfr_div_2ui(t, t, 1, MPFR_RNDN);
        return (long)w - 2;
    }
    /* 1 / (1 + e^-x), e^-x > 1 */
    mpfr_set_d(u, -x, MPFR_RNDN);
    mpfr_exp(u, u, MPFR_RNDN);
    mpfr_add_ui(u, u, 1, MPFR_RNDN);
    mpfr_ui_div(t, 1, u, MPFR_RNDN);
    return (long)w - 2;
}

/* t ~ gelu x = x/2 (1 + erf(x/sqrt2)) (x >= 0) or x/2 erfc(|x|/sqrt2). */
static long gelu_approx(mpfr_ptr t, double x, mpfr_prec_t w)
{
    mpfr_ptr u = zu, z = zz;
    mpfr_set_prec(u, w);
    mpfr_set_prec(z, w);
    mpfr_set_prec(t, w);
    mpfr_sqrt_ui(u, 2, MPFR_RNDN);
    mpfr_set_d(z, fabs(x), MPFR_RNDN);
    mpfr_div(z, z, u, MPFR_RNDN); /* |x|/sqrt 2, relative error < 2.01 2^-w */
    if (x >= 0.0) {
        /* erf's relative condition z erf'(z)/erf(z) is <= 1 for z >= 0;
         * 1 + erf adds positive terms. */
        mpfr_erf(u, z, MPFR_RNDN);
        mpfr_add_ui(u, u, 1, MPFR_RNDN);
        mpfr_mul_d(t, u, x, MPFR_RNDN);
        mpfr_div_2ui(t, t, 1, MPFR_RNDN);
        return (long)w - 3;
    }
    /* erfc's relative condition < (2z + 2) z for z > 0 (Mills ratio). */
    double az = fabs(x) * 0.7072;
    double rel = 4.0 + 2.01 * (2.0 * az + 2.0) * az;
    mpfr_erfc(u, z, MPFR_RNDN);
    mpfr_mul_d(t, u, x, MPFR_RNDN);
    mpfr_div_2ui(t, t, 1, MPFR_RNDN);
    return (long)w - (long)ceil(log2(rel)) - 1;
}

/* RO_P(f(x)) in r (precision P), or a stand-in that every carrier
 * rounding treats the same way. */
static void reference(int fn, double x, mpfr_ptr r)
{
    MPFR_DECL_INIT(xv, 64);
    mpfr_set_d(xv, x, MPFR_RNDN);
    int inex;
    switch (fn) {
    case F_EXP:
        inex = mpfr_exp(r, xv, MPFR_RNDZ);
        if (mpfr_zero_p(r) && inex)
            tiny(r, 1); /* MPFR's own underflow */
        make_odd(r, inex);
        return;
    case F_LOG:
        make_odd(r, mpfr_log(r, xv, MPFR_RNDZ));
        return;
    case F_TANH:
        make_odd(r, mpfr_tanh(r, xv, MPFR_RNDZ));
        return;
    default:
        break;
    }
    if (isnan(x)) {
        mpfr_set_nan(r);
        return;
    }
    if (fn == F_SIGMOID) {
        if (x == 0.0 || isinf(x)) {
            mpfr_set_d(r, x == 0.0 ? 0.5 : x > 0.0 ? 1.0 : 0.0, MPFR_RNDN);
            return;
        }
        if (x > 64.0) {
            /* 1 - sigmoid x = sigmoid(-x) < e^-x < 2^-(P+10) */
            mpfr_set_ui(r, 1, MPFR_RNDN);
            mpfr_nextbelow(r);
            return;
        }
        if (x < -0x1p20) {
            tiny(r, 1); /* sigmoid x < e^x */
            return;
        }
    } else {
        if (x == 0.0 || x == INFINITY) {
            mpfr_set_d(r, x, MPFR_RNDN);
            return;
        }
        if (x == -INFINITY) {
            mpfr_set_zero(r, -1); /* the op's convention: the limit, -0 */
            return;
        }
        if (x > 12.0) {
            /* x - gelu x = x Q(x) < phi(x) < 2^-(P+10) x */
            mpfr_set_d(r, x, MPFR_RNDN);
            mpfr_nextbelow(r);
            return;
        }
        if (x < -0x1p20) {
            tiny(r, -1);
            return;
        }
    }
    ziv_init();
    mpfr_ptr t = zt;
    for (mpfr_prec_t w = 128;; w *= 2) {
        long err = fn == F_SIGMOID ? sigmoid_approx(t, x, w)
                                   : gelu_approx(t, x, w);
        if (mpfr_can_round(t, err, MPFR_RNDN, MPFR_RNDZ, P))
            break;
        if (w >= 4096)
            ck_abort_msg("reference: no decision for %s(%a)",
                         emu_unary_name(unary_of[fn]), x);
    }
    mpfr_set(r, t, MPFR_RNDZ);
    make_odd(r, 1); /* f(x) is transcendental: never a P-bit number */
}

/* ---- running the op and comparing ---------------------------------------- */

/* What the observer saw of the last op (ev->hi lives only during the
 * call, so it is copied). */
typedef struct seen {
    double *hi;
    size_t n;
    uint64_t op_index;
} seen;

static void observe(void *user, const emu_op_event *ev)
{
    seen *s = user;
    if (s->n < ev->out->n) {
        free(s->hi);
        s->hi = malloc(ev->out->n * sizeof *s->hi);
        ck_assert_ptr_nonnull(s->hi);
        s->n = ev->out->n;
    }
    memcpy(s->hi, ev->hi, ev->out->n * sizeof *s->hi);
    s->op_index = ev->op_index;
}

static int sgn(int t)
{
    return (t > 0) - (t < 0);
}

static unsigned long long n_checked, n_failed;

static void report(const char *what, int fn, const emu_format *in,
                   const emu_format *out, const emu_rounding *r,
                   uint64_t bits, double x, double want, emu_status ws,
                   double got, emu_status gs, double hi)
{
    n_failed++;
    if (n_failed > PRINT_LIMIT)
        return;
    fprintf(stderr,
            "FAIL %s: %s(0x%0*llx = %a) %s -> %s, mode %s, tininess %s, "
            "saturate %d\n    want %a ternary %+d flags 0x%02x\n"
            "    got  %a ternary %+d flags 0x%02x (pre-rounding %a)\n",
            what, emu_unary_name(unary_of[fn]), (in->bits + 3) / 4,
            (unsigned long long)bits, x, in->name, out->name,
            emu_rnd_name(r->mode),
            r->tininess == EMU_TINY_BEFORE ? "before" : "after", r->saturate,
            want, sgn(ws.ternary), ws.flags, got, sgn(gs.ternary), gs.flags,
            hi);
}

/* The op on x (n values of in) into fmt out under every deterministic
 * mode (and saturating RNE), checked against refs; then SR. */
static void check_all_modes(int fn, const emu_format *in,
                            const emu_format *out, const emu_tensor *x,
                            const uint64_t *bits, mpfr_t *refs,
                            unsigned long long *per_mode)
{
    emu_error err;
    emu_tensor y;
    ck_assert_int_eq(emu_tensor_alloc(&y, "y", EMU_ROLE_ACTIVATION, out,
                                      1, &x->n, &err), 0);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 0x5eed);
    seen s = { 0 };
    ctx.observer = observe;
    ctx.observer_user = &s;
    for (int m = 0; m <= TEST_DET_MODES; m++) {
        /* m == TEST_DET_MODES: RNE with saturation */
        emu_rounding r = { .mode = m < TEST_DET_MODES ? (emu_rnd)m : EMU_RNE,
                           .saturate = m == TEST_DET_MODES };
        ck_assert_int_eq(emu_t_unary(&ctx, "t", &y, x, unary_of[fn], 0, 0, &r),
                         0);
        for (size_t i = 0; i < x->n; i++) {
            for (int tb = 0; tb < 2; tb++) {
                r.tininess = tb ? EMU_TINY_BEFORE : EMU_TINY_AFTER;
                emu_status ws, gs;
                double want = emu_ref_round(out, refs[i], &r, &ws);
                double got = y.data[i];
                emu_round2_word(out, s.hi[i], 0.0, &r, 0, &gs);
                n_checked++;
                bool ternary_ok = sgn(ws.ternary) == sgn(gs.ternary);
                if (!test_same(want, got) || !ternary_ok ||
                    ws.flags != gs.flags)
                    report("mode", fn, in, out, &r, bits[i], x->data[i],
                           want, ws, got, gs, s.hi[i]);
            }
        }
        if (m < TEST_DET_MODES)
            per_mode[m] += x->n;
    }

    /* Stochastic rounding: a neighbour, and the choke point's word. */
    emu_rounding sr = { .mode = EMU_RS, .sr_bits = 64 };
    ck_assert_int_eq(emu_t_unary(&ctx, "t", &y, x, unary_of[fn], 0, 0, &sr), 0);
    for (size_t i = 0; i < x->n; i++) {
        emu_rounding rd = { .mode = EMU_RD }, ru = { .mode = EMU_RU };
        double lo = emu_ref_round(out, refs[i], &rd, NULL);
        double up = emu_ref_round(out, refs[i], &ru, NULL);
        double got = y.data[i];
        emu_status gs;
        double word_result = emu_round2_word(
            out, s.hi[i], 0.0, &sr,
            emu_random64(ctx.seed, s.op_index, i), &gs);
        n_checked++;
        bool neighbour = test_same(got, lo) || test_same(got, up) ||
                         (isnan(got) && (isnan(lo) || isnan(up)));
        if (!neighbour || !test_same(got, word_result)) {
            emu_status ws = { 0, 0 };
            report("sr", fn, in, out, &sr, bits[i], x->data[i], lo, ws, got,
                   gs, s.hi[i]);
        }
    }
    emu_tensor_free(&y);
    free(s.hi);
}

/* A tensor of every pattern of fmt (NaN patterns as NaN). */
static void all_patterns(const emu_format *fmt, emu_tensor *x,
                         uint64_t **bits)
{
    emu_error err;
    size_t n = (size_t)1 << fmt->bits;
    ck_assert_int_eq(emu_tensor_alloc(x, "x", EMU_ROLE_ACTIVATION, fmt, 1,
                                      &n, &err), 0);
    *bits = malloc(n * sizeof **bits);
    ck_assert_ptr_nonnull(*bits);
    for (size_t i = 0; i < n; i++) {
        emu_bits b = { i };
        x->data[i] = (float)emu_decode(fmt, b);
        (*bits)[i] = i;
    }
}

static mpfr_t *refs_for(int fn, const emu_tensor *x)
{
    mpfr_t *refs = malloc(x->n * sizeof *refs);
    ck_assert_ptr_nonnull(refs);
    for (size_t i = 0; i < x->n; i++) {
        mpfr_init2(refs[i], P);
        reference(fn, x->data[i], refs[i]);
    }
    return refs;
}

static void refs_free(mpfr_t *refs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        mpfr_clear(refs[i]);
    free(refs);
}

/* Checks fn on binary32 arguments x (their bit patterns in bits, their
 * exact values in refs) into binary32, binary16 and bfloat16 under every
 * deterministic mode; returns how many checks failed (each is listed). */
static unsigned long long check_binary32_outputs(int fn, const emu_tensor *x,
                                                 const uint64_t *bits,
                                                 mpfr_t *refs)
{
    static const char *const outs[] = { "binary32", "binary16", "bfloat16" };
    unsigned long long before = n_failed;
    for (int o = 0; o < 3; o++) {
        unsigned long long per_mode[TEST_DET_MODES] = { 0 };
        check_all_modes(fn, test_format("binary32"), test_format(outs[o]), x,
                        bits, refs, per_mode);
    }
    return n_failed - before;
}

/* ---- the exhaustive proofs --------------------------------------------- */

static const char *const wide_inputs[] = { "binary16", "bfloat16" };

START_TEST(test_exhaustive16)
{
    const int fi = _i / F_COUNT, fn = _i % F_COUNT;
    const emu_format *in = test_format(wide_inputs[fi]);
    const emu_format *outs[] = { in, test_format(wide_inputs[!fi]),
                                 test_format("e4m3"), test_format("e5m2") };
    emu_tensor x;
    uint64_t *bits;
    all_patterns(in, &x, &bits);
    clock_t c0 = clock();
    mpfr_t *refs = refs_for(fn, &x);
    clock_t c1 = clock();
    unsigned long long before = n_failed;
    for (size_t o = 0; o < sizeof outs / sizeof outs[0]; o++) {
        unsigned long long per_mode[TEST_DET_MODES] = { 0 };
        check_all_modes(fn, in, outs[o], &x, bits, refs, per_mode);
        printf("%-7s %-8s -> %-8s: %llu inputs in each of rne rna rz ru rd ro"
               " (+ rne saturating, both tininess rules, sr)\n",
               emu_unary_name(unary_of[fn]), in->name, outs[o]->name,
               per_mode[EMU_RNE]);
    }
    printf("%-7s %-8s: reference %.1f s, checks %.1f s, %llu failures\n",
           emu_unary_name(unary_of[fn]), in->name,
           (double)(c1 - c0) / CLOCKS_PER_SEC,
           (double)(clock() - c1) / CLOCKS_PER_SEC, n_failed - before);
    refs_free(refs, x.n);
    free(bits);
    emu_tensor_free(&x);
    ck_assert_msg(n_failed == before, "%llu failures (listed above)",
                  n_failed - before);
}
END_TEST

/* Every shipped carrier format of at most 8 bits, into itself. */
START_TEST(test_exhaustive_small)
{
    unsigned long long before = n_failed, formats = 0;
    for (size_t k = 0; k < emu_format_count(); k++) {
        const emu_format *f = emu_format_at(k);
        if (f->bits > 8 || !f->fits_carrier || !f->has_zero)
            continue;
        formats++;
        emu_tensor x;
        uint64_t *bits;
        all_patterns(f, &x, &bits);
        for (int fn = 0; fn < F_COUNT; fn++) {
            mpfr_t *refs = refs_for(fn, &x);
            unsigned long long per_mode[TEST_DET_MODES] = { 0 };
            check_all_modes(fn, f, f, &x, bits, refs, per_mode);
            refs_free(refs, x.n);
        }
        free(bits);
        emu_tensor_free(&x);
    }
    printf("small formats: %llu formats, every pattern, 5 functions, "
           "%llu failures\n", formats, n_failed - before);
    ck_assert_uint_ge(formats, 6);
    ck_assert_msg(n_failed == before, "%llu failures (listed above)",
                  n_failed - before);
}
END_TEST

/* Random binary32 inputs (biased to small and moderate magnitudes, where
 * the functions are not flat) into binary32, binary16 and bfloat16. */
START_TEST(test_random_binary32)
{
    const int fn = _i;
    const emu_format *b32 = test_format("binary32");
    const size_t n = test_scaled(1 << 14, 256);
    emu_tensor x;
    emu_error err;
    ck_assert_int_eq(emu_tensor_alloc(&x, "x", EMU_ROLE_ACTIVATION, b32, 1,
                                      &n, &err), 0);
    uint64_t *bits = malloc(n * sizeof *bits);
    ck_assert_ptr_nonnull(bits);
    test_rng g = test_rng_make(0xb32 + (uint64_t)fn);
    for (size_t i = 0; i < n; i++) {
        uint64_t w = test_next(&g);
        /* exponent in [-40, 8) mostly; any pattern one time in eight */
        uint32_t u = (uint32_t)w;
        if (w >> 61) {
            int e = (int)((w >> 32) % 48) - 40;
            u = (u & 0x807fffffu) | ((uint32_t)(e + 127) << 23);
        }
        float v;
        memcpy(&v, &u, sizeof v);
        x.data[i] = v;
        bits[i] = u;
    }
    mpfr_t *refs = refs_for(fn, &x);
    unsigned long long failed = check_binary32_outputs(fn, &x, bits, refs);
    refs_free(refs, n);
    free(bits);
    emu_tensor_free(&x);
    ck_assert_msg(failed == 0, "%llu failures (listed above)", failed);
}
END_TEST

/* The fast paths of gelu, sigmoid and tanh (ops_elementwise.c: a table
 * of Taylor polynomials, an exp of known error) over their ranges: 2^16
 * binary32 arguments of magnitude 2^-30 .. 2^7 and the edges of each
 * range (+-0, subnormals, 1/16, 8, 10, 80 and their neighbours, huge
 * values, infinities, NaN), into binary32, binary16 and bfloat16. */
START_TEST(test_fast_ranges)
{
    static const int fns[] = { F_GELU, F_SIGMOID, F_TANH };
    const int fn = fns[_i];
    const emu_format *b32 = test_format("binary32");
    static const float edges[] = {
        0.0f, -0.0f, 0x1p-149f, -0x1p-149f, 0x1p-126f, -0x1p-126f,
        0x1p-4f, -0x1p-4f, 0x1.fffffep-5f, -0x1.fffffep-5f, 0x1.000002p-4f,
        8.0f, -8.0f, 0x1.fffffep2f, -0x1.fffffep2f, 0x1.000002p3f,
        -0x1.000002p3f, 10.0f, -10.0f, 0x1.000002p3f, 80.0f, -80.0f,
        0x1.000002p6f, -0x1.000002p6f, 0x1.3ffffep6f, -0x1.3ffffep6f,
        1e30f, -1e30f, 0x1.fffffep127f, -0x1.fffffep127f, INFINITY,
        -INFINITY, NAN, 1.0f / 32, -1.0f / 64, 0.5f, -0.5f,
    };
    const size_t ne = sizeof edges / sizeof edges[0];
    const size_t n = ne + test_scaled(1 << 16, 1024);
    emu_tensor x;
    emu_error err;
    ck_assert_int_eq(emu_tensor_alloc(&x, "x", EMU_ROLE_ACTIVATION, b32, 1,
                                      &n, &err), 0);
    uint64_t *bits = malloc(n * sizeof *bits);
    ck_assert_ptr_nonnull(bits);
    test_rng g = test_rng_make(0xfa57 + (uint64_t)fn);
    for (size_t i = 0; i < n; i++) {
        float v;
        if (i < ne) {
            v = edges[i];
        } else {
            uint64_t w = test_next(&g);
            int e = (int)((w >> 32) % 37) - 30; /* 2^-30 .. 2^7 */
            uint32_t u = ((uint32_t)w & 0x807fffffu) |
                         ((uint32_t)(e + 127) << 23);
            memcpy(&v, &u, sizeof v);
        }
        x.data[i] = v;
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        bits[i] = u;
    }
    mpfr_t *refs = refs_for(fn, &x);
    unsigned long long failed = check_binary32_outputs(fn, &x, bits, refs);
    refs_free(refs, n);
    free(bits);
    emu_tensor_free(&x);
    ck_assert_msg(failed == 0, "%llu failures (listed above)", failed);
}
END_TEST

/* The vector lanes of sigmoid, tanh (eight under AVX-512, four under
 * AVX2), gelu and gelu' (four, AVX2) of ops_elementwise.c against their
 * scalar fast paths (CTest runs this suite at each level), bit for bit on
 * the binary64 values the choke point rounds, so that every rounding and
 * every statistic agrees too (the MPFR checks above cannot see an error
 * in a value's last bits, e.g. a wrong high-order Taylor coefficient):
 * every binary16 value, 2^16 binary32 values of magnitude 2^-30 .. 2^7,
 * the edges of the ranges, into binary32, binary16, bfloat16 and e4m3 (a
 * format whose narrow range takes other branches of the boundary test),
 * in arrays of odd length, so that the scalar tail runs as well. */
START_TEST(test_vector_lanes)
{
    static const emu_unary fns[] = { EMU_UNARY_SIGMOID, EMU_UNARY_TANH };
    static const char *const outs[] = { "binary32", "binary16", "bfloat16",
                                        "e4m3" };
    static const float edges[] = {
        0.0f, -0.0f, 0x1p-149f, -0x1p-149f, 0x1p-126f, 0x1p-4f, -0x1p-4f,
        0x1.fffffep-5f, -0x1.fffffep-5f, 0x1.000002p-4f, 10.0f, -10.0f,
        0x1.000002p3f, 0x1.4p3f, 0x1.400002p3f, -0x1.400002p3f, 80.0f,
        -80.0f, 0x1.400002p6f, -0x1.400002p6f, 1e30f, -1e30f, INFINITY,
        -INFINITY, NAN, -NAN, 0.5f, -0.5f,
    };
    const size_t ne = sizeof edges / sizeof edges[0];
    const size_t nr = (size_t)test_scaled(1 << 16, 1024);
    const size_t n = (ne + 65536 + nr) | 1; /* odd: a scalar tail */
    float *x = malloc(n * sizeof *x);
    double *vec = malloc(n * sizeof *vec);
    ck_assert(x && vec);
    test_rng g = test_rng_make(0x1a7e5);
    for (size_t i = 0; i < n; i++) {
        if (i < ne) {
            x[i] = edges[i];
        } else if (i < ne + 65536) {
            const emu_bits b = { i - ne };
            x[i] = (float)emu_decode(test_format("binary16"), b);
        } else {
            const uint64_t w = test_next(&g);
            const int e = (int)((w >> 32) % 37) - 30; /* 2^-30 .. 2^7 */
            const uint32_t u = ((uint32_t)w & 0x807fffffu) |
                               ((uint32_t)(e + 127) << 23);
            memcpy(&x[i], &u, sizeof u);
        }
    }
    unsigned long long bad = 0;
    /* Internal functions: they run under the default environment that
     * the public entry points' guard sets (a hostile run's state aside). */
    const test_fpstate fs = test_oracle_enter();
    for (size_t q = 0; q < 2; q++)
        for (size_t o = 0; o < sizeof outs / sizeof outs[0]; o++) {
            const emu_format *f = test_format(outs[o]);
            emu_unary_eval_det_n(f, fns[q], x, n, vec);
            for (size_t i = 0; i < n; i++) {
                const double s = emu_unary_eval_det(f, fns[q], x[i]);
                if (memcmp(&s, &vec[i], sizeof s) != 0 && bad++ < 10)
                    printf("%s %a -> %s: lanes %a, scalar %a\n",
                           emu_unary_name(fns[q]), (double)x[i], outs[o],
                           vec[i], s);
            }
        }
    /* gelu and its gradient on their table path, likewise (dy from the
     * inputs reversed: every sign and magnitude meets every x) */
    float *dy = malloc(n * sizeof *dy);
    double *sca = malloc(n * sizeof *sca);
    ck_assert(dy && sca);
    for (size_t i = 0; i < n; i++)
        dy[i] = x[n - 1 - i];
    for (int q = 0; q < 2; q++)
        for (size_t o = 0; o < sizeof outs / sizeof outs[0]; o++) {
            const emu_format *f = test_format(outs[o]);
            ck_assert(emu_gelu_fast_n(f, x, q ? dy : NULL, n, vec, true));
            ck_assert(emu_gelu_fast_n(f, x, q ? dy : NULL, n, sca, false));
            for (size_t i = 0; i < n; i++)
                if (memcmp(&sca[i], &vec[i], sizeof sca[i]) != 0 && bad++ < 10)
                    printf("gelu%s %a (dy %a) -> %s: lanes %a, scalar %a\n",
                           q ? "'" : "", (double)x[i], (double)dy[i], outs[o],
                           vec[i], sca[i]);
        }
    free(dy);
    free(sca);
    test_oracle_leave(fs);
    printf("sigmoid, tanh, gelu, gelu': %zu inputs into 4 formats, lanes of "
           "level %s\n",
           n, emu_isa_name(emu_isa_active()));
    free(x);
    free(vec);
    ck_assert_msg(bad == 0, "%llu lanes differ from the scalar path", bad);
}
END_TEST


/* Softmax's exponentials (emu_exp_f32_n, ops_attn.c): (float)exp(s - m)
 * bit for bit, in the vector lanes of the level CTest runs this suite at
 * and on the scalar path, against the C library's exp itself: scores s of
 * magnitude 2^-30 .. 2^9 and the edges, against maxima m of a row (small,
 * large enough for every underflow of binary32, NaN, infinities), in
 * arrays of odd length. */
START_TEST(test_softmax_exp)
{
    static const float edges[] = {
        0.0f, -0.0f, 0x1p-149f, -0x1p-149f, 1.0f, -1.0f, -87.0f, -88.0f,
        -103.0f, -104.0f, -110.0f, 350.0f, -350.0f, 700.0f, -700.0f,
        0x1.5e8p9f, -0x1.5e8p9f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN,
    };
    static const double maxima[] = { 0.0, 1.0, 17.5, -3.25, 512.0, 600.0,
                                     NAN, -INFINITY, INFINITY };
    const size_t ne = sizeof edges / sizeof edges[0];
    const size_t n = (ne + (size_t)test_scaled(1 << 17, 2048)) | 1;
    float *s = malloc(n * sizeof *s), *vec = malloc(n * sizeof *vec),
          *sca = malloc(n * sizeof *sca);
    ck_assert(s && vec && sca);
    test_rng g = test_rng_make(0x5e7f);
    for (size_t i = 0; i < n; i++) {
        if (i < ne) {
            s[i] = edges[i];
        } else {
            const uint64_t w = test_next(&g);
            const int e = (int)((w >> 32) % 40) - 30; /* 2^-30 .. 2^9 */
            const uint32_t u = ((uint32_t)w & 0x807fffffu) |
                               ((uint32_t)(e + 127) << 23);
            memcpy(&s[i], &u, sizeof u);
        }
    }
    const emu_format *b32 = test_format("binary32");
    unsigned long long bad = 0;
    const test_fpstate fs = test_oracle_enter();
    for (size_t q = 0; q < sizeof maxima / sizeof maxima[0]; q++) {
        const double m = maxima[q];
        emu_exp_f32_n(b32, s, m, n, vec, true);
        emu_exp_f32_n(b32, s, m, n, sca, false);
        for (size_t i = 0; i < n; i++) {
            const float want = (float)exp((double)s[i] - m);
            if ((memcmp(&want, &vec[i], sizeof want) != 0 ||
                 memcmp(&want, &sca[i], sizeof want) != 0) &&
                bad++ < 10)
                printf("exp(%a - %a): exp %a, lanes %a, scalar %a\n",
                       (double)s[i], m, (double)want, (double)vec[i],
                       (double)sca[i]);
        }
    }
    test_oracle_leave(fs);
    printf("softmax exp: %zu scores, lanes of level %s\n", n,
           emu_isa_name(emu_isa_active()));
    free(s);
    free(vec);
    free(sca);
    ck_assert_msg(bad == 0, "%llu exponentials differ from exp", bad);
}
END_TEST

/* The attention's and the losses' finiteness check (emu_all_finite,
 * ops_util.c; runs of 64 on the bits) against isfinite element by
 * element: one special value (or a largest finite one, which must pass)
 * at every position of arrays of every length up to three runs and a
 * tail, and none. */
START_TEST(test_all_finite)
{
    /* emu_all_finite, emu_any_nan and emu_any_nan64 (runs of 64 on the
     * bits) against isfinite and isnan, a special value at every place of
     * every length, whole runs and tails; NaNs with the smallest and the
     * largest payloads, quiet and signalling, either sign. */
    static const uint32_t specials[] = { 0x7f800000, 0xff800000, 0x7fc00000,
                                         0xffc00000, 0x7f800001, 0xffffffff,
                                         0x7f7fffff, 0xff7fffff };
    static const uint64_t specials64[] = { 0x7ff0000000000001,
                                           0xfff8000000000000 };
    enum { N = 3 * 64 + 7, NS = sizeof specials / sizeof specials[0],
           NS64 = sizeof specials64 / sizeof specials64[0] };
    float v[N];
    double d[N];
    unsigned long long bad = 0, checked = 0;
    for (size_t n = 0; n <= N; n++)
        for (size_t sp = 0; sp < NS + NS64; sp++)
            for (size_t at = 0; at <= n; at++) { /* at == n: none */
                for (size_t i = 0; i < n; i++)
                    d[i] = v[i] = (float)i - 100.0f;
                if (at < n && sp < NS) {
                    memcpy(&v[at], &specials[sp], sizeof v[at]);
                    d[at] = v[at];
                } else if (at < n) {
                    memcpy(&d[at], &specials64[sp - NS], sizeof d[at]);
                }
                bool finite = true, nan = false, nan64 = false;
                for (size_t i = 0; i < n; i++) {
                    finite = finite && isfinite(v[i]);
                    nan = nan || isnan(v[i]);
                    nan64 = nan64 || isnan(d[i]);
                }
                checked++;
                if ((emu_all_finite(v, n) != finite ||
                     emu_any_nan(v, n) != nan ||
                     emu_any_nan64(d, n) != nan64) && bad++ < 10)
                    printf("n %zu, special %zu at %zu: all_finite %d "
                           "any_nan %d any_nan64 %d, want %d %d %d\n", n, sp,
                           at, emu_all_finite(v, n), emu_any_nan(v, n),
                           emu_any_nan64(d, n), finite, nan, nan64);
            }
    printf("all_finite, any_nan, any_nan64: %llu arrays\n", checked);
    ck_assert_msg(bad == 0, "%llu arrays judged wrong", bad);
}
END_TEST

/* Hard cases: binary32 arguments whose binary64 evaluation lands within
 * the op's error bound of a binary32 rounding boundary, so that the op
 * must take its MPFR path (none of the 16-bit inputs does).  Found by a
 * search over binary32 patterns; the test checks that each is hard. */
static const uint32_t hard[F_COUNT][9] = {
    [F_EXP] = { 0x3f5bc24c, 0x3ffe02ee, 0x4001ace0, 0x40af3931, 0x40bbae83,
                0xc0382e72, 0xc0781533, 0xc0c7700c },
    [F_LOG] = { 0x3f2861cc, 0x3fc55379, 0x4546f2d1, 0x47ee8989, 0x480b2128,
                0x48d2e0ec },
    [F_TANH] = { 0x3cc854ca, 0x3cd46456, 0x3d1e862f, 0x3eecff89, 0x4011c7e6,
                 0x4013cd84, 0xbcc854ca, 0xbcd46456, 0xbd1e862f },
    [F_SIGMOID] = { 0x3c0dcb3a, 0x3de673dc, 0x3e11c52c, 0x3e1420e5,
                    0x3e9acb44, 0x3f66dfd9, 0xbc0dcb3a, 0xbc63022e,
                    0xbc84e51f },
    [F_GELU] = { 0x3cbdc3a5, 0x3e60b687, 0x3eada244, 0x4058b69c, 0x406b7626,
                 0x4077fb00, 0xbcbdc3a5, 0xbe60b687, 0xbe9f431c },
};

START_TEST(test_hard_cases)
{
    const int fn = _i;
    const emu_format *b32 = test_format("binary32");
    size_t n = 0;
    while (n < 9 && hard[fn][n])
        n++;
    emu_tensor x;
    emu_error err;
    ck_assert_int_eq(emu_tensor_alloc(&x, "x", EMU_ROLE_ACTIVATION, b32, 1,
                                      &n, &err), 0);
    uint64_t bits[9];
    for (size_t i = 0; i < n; i++) {
        memcpy(&x.data[i], &hard[fn][i], sizeof x.data[i]);
        bits[i] = hard[fn][i];
    }
    mpfr_t *refs = refs_for(fn, &x);
    /* Hard: f(x) within 2^-44 |f(x)| of a multiple of half a binary32 ulp. */
    MPFR_DECL_INIT(q, P);
    for (size_t i = 0; i < n; i++) {
        long k = mpfr_get_exp(refs[i]) - 25; /* half an ulp, normal range */
        mpfr_mul_2si(q, refs[i], -k, MPFR_RNDN);
        MPFR_DECL_INIT(rq, P);
        mpfr_rint(rq, q, MPFR_RNDN);
        mpfr_sub(q, q, rq, MPFR_RNDN);
        double dist = fabs(mpfr_get_d(q, MPFR_RNDN)); /* in half ulps */
        ck_assert_msg(dist < 0x1p-19, "%s(%a) is not a hard case (%g)",
                      emu_unary_name(unary_of[fn]), (double)x.data[i], dist);
    }
    unsigned long long failed = check_binary32_outputs(fn, &x, bits, refs);
    refs_free(refs, n);
    emu_tensor_free(&x);
    ck_assert_msg(failed == 0, "%llu failures (listed above)", failed);
}
END_TEST

/* ---- the C library's errors ----------------------------------------------
 * The op's fast path assumes relative errors below 2^-47 (exp, log),
 * 2^-46 (tanh) and (24 + ...) 2^-52 for erfc.  Measured here on every
 * argument the 16-bit inputs produce, in binary64 ulps. */

static double ulp_error(double got, mpfr_srcptr exact)
{
    if (mpfr_zero_p(exact) || !mpfr_number_p(exact))
        return got == mpfr_get_d(exact, MPFR_RNDN) ? 0.0 : INFINITY;
    MPFR_DECL_INIT(d, 128);
    mpfr_set_d(d, got, MPFR_RNDN);
    mpfr_sub(d, d, exact, MPFR_RNDN);
    long e = mpfr_get_exp(exact) - 53; /* ulp of the binade */
    if (e < -1074)
        e = -1074;
    mpfr_mul_2si(d, d, -e, MPFR_RNDN);
    return fabs(mpfr_get_d(d, MPFR_RNDN));
}

START_TEST(test_libm_errors)
{
    const char *names[] = { "exp", "log", "tanh", "erfc" };
    const double bound[] = { 8.0, 8.0, 16.0, 8.0 };
    double worst[4] = { 0 };
    double where[4] = { 0 };
    MPFR_DECL_INIT(e, 128);
    MPFR_DECL_INIT(a, 64);
    for (int fi = 0; fi < 2; fi++) {
        const emu_format *f = test_format(wide_inputs[fi]);
        for (uint64_t b = 0; b < 65536; b++) {
            double x = emu_decode(f, (emu_bits){ b });
            if (!isfinite(x))
                continue;
            double z = -x * 0x1.6a09e667f3bcdp-1; /* gelu's argument */
            double got[4] = { exp(x), x > 0.0 ? log(x) : 1.0, tanh(x),
                              erfc(z) };
            for (int k = 0; k < 4; k++) {
                if (k == 1 && !(x > 0.0))
                    continue;
                double arg = k == 3 ? z : x;
                mpfr_set_d(a, arg, MPFR_RNDN);
                if (k == 0)
                    mpfr_exp(e, a, MPFR_RNDN);
                else if (k == 1)
                    mpfr_log(e, a, MPFR_RNDN);
                else if (k == 2)
                    mpfr_tanh(e, a, MPFR_RNDN);
                else
                    mpfr_erfc(e, a, MPFR_RNDN);
                /* below binary64's normal range the op needs no accuracy */
                if (mpfr_zero_p(e) || mpfr_get_exp(e) < -1021 ||
                    !mpfr_number_p(e) || mpfr_get_exp(e) > 1024)
                    continue;
                double u = ulp_error(got[k], e);
                if (u > worst[k]) {
                    worst[k] = u;
                    where[k] = arg;
                }
            }
        }
    }
    for (int k = 0; k < 4; k++) {
        printf("libm %-4s: max error %.3f ulp (at %a) on the 16-bit inputs; "
               "the op allows %.0f\n", names[k], worst[k], where[k],
               bound[k]);
        ck_assert_msg(worst[k] <= bound[k], "libm %s error %.3f ulp at %a "
                      "exceeds the bound the op assumes", names[k], worst[k],
                      where[k]);
    }
}
END_TEST

/* The exact cases and the conventions at the edges, by name. */
START_TEST(test_exact_and_edges)
{
    const emu_format *f = test_format("binary16");
    emu_error err;
    emu_tensor x, y;
    const float in[] = { 0.0f, -0.0f, 1.0f, INFINITY, -INFINITY, NAN, -1.0f };
    const size_t n = sizeof in / sizeof in[0];
    ck_assert_int_eq(emu_tensor_alloc(&x, "x", EMU_ROLE_OTHER, f, 1, &n, &err),
                     0);
    ck_assert_int_eq(emu_tensor_alloc(&y, "y", EMU_ROLE_OTHER, f, 1, &n, &err),
                     0);
    memcpy(x.data, in, sizeof in);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    /* rows: exp log tanh sigmoid gelu of 0, -0, 1, inf, -inf, NaN, -1 */
    const double want[F_COUNT][7] = {
        { 1, 1, NAN /* inexact */, INFINITY, 0, NAN, NAN },
        { -INFINITY, -INFINITY, 0, INFINITY, NAN, NAN, NAN },
        { 0, -0.0, NAN, 1, -1, NAN, NAN },
        { 0.5, 0.5, NAN, 1, 0, NAN, NAN },
        { 0, -0.0, NAN, INFINITY, -0.0, NAN, NAN },
    };
    const bool check[7] = { true, true, false, true, true, true, false };
    for (int fn = 0; fn < F_COUNT; fn++) {
        ck_assert_int_eq(emu_t_unary(&ctx, "e", &y, &x, unary_of[fn], 0, 0, &test_rne), 0);
        for (size_t i = 0; i < n; i++) {
            bool nan_case = fn == F_LOG && (i == 4 || i == 6);
            if (!check[i] && !nan_case)
                continue;
            double w = nan_case ? NAN : want[fn][i];
            ck_assert_msg(test_same(y.data[i], w), "%s(%a): want %a got %a",
                          emu_unary_name(unary_of[fn]), (double)in[i], w,
                          (double)y.data[i]);
        }
    }
    emu_tensor_free(&x);
    emu_tensor_free(&y);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("transcendental");
    TCase *ex = tcase_create("exhaustive");
    tcase_set_timeout(ex, 0);
    tcase_add_test(ex, test_libm_errors);
    tcase_add_test(ex, test_exact_and_edges);
    tcase_add_loop_test(ex, test_exhaustive16, 0, 2 * F_COUNT);
    tcase_add_test(ex, test_exhaustive_small);
    tcase_add_loop_test(ex, test_random_binary32, 0, F_COUNT);
    tcase_add_loop_test(ex, test_hard_cases, 0, F_COUNT);
    tcase_add_loop_test(ex, test_fast_ranges, 0, 3);
    tcase_add_test(ex, test_vector_lanes);
    tcase_add_test(ex, test_softmax_exp);
    tcase_add_test(ex, test_all_finite);
    suite_add_tcase(s, ex);
    return s;
}

int main(void)
{
    /* The reference's far tails (erfc(2^19), e^-2^20) need MPFR's widest
     * exponent range. */
    mpfr_set_emin(mpfr_get_emin_min());
    mpfr_set_emax(mpfr_get_emax_max());
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    printf("transcendental: %llu results checked, %llu failures\n",
           n_checked, n_failed);
    return failed != 0;
}
