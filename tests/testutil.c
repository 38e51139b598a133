/* testutil.c — see testutil.h. */
/* <check.h> first, as in every suite: testutil.h then redirects its
 * _mark_point (see test_mark_point). */
#include <check.h>

#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool test_isa_skip(void)
{
    const char *want = getenv("EMU_ISA");
    const char *got = emu_round_kernel_isa();
    if (want && *want && strcmp(want, got) != 0) {
        printf("EMU_ISA=%s: this CPU or build runs %s at most; skipped\n",
               want, got);
        return true;
    }
    printf("array kernels: %s\n", got);
    return false;
}

uint64_t test_scaled(uint64_t n, uint64_t floor)
{
    static double scale = -1.0;
    if (scale < 0.0) {
        const char *s = getenv("EMU_TEST_SCALE");
        const char *l = getenv("EMU_TEST_LEVEL_SCALE");
        scale = (s ? strtod(s, NULL) : 1.0) * (l ? strtod(l, NULL) : 1.0);
        if (!(scale >= 0.001))
            scale = 0.001;
        if (scale > 1000.0)
            scale = 1000.0;
    }
    double v = (double)n * scale;
    return v < (double)floor ? floor : (uint64_t)v;
}

/* (The parentheses call Check's own _mark_point, not the macro.) */
void test_mark_point(const char *file, int line)
{
    static int forked = -1;
    if (forked < 0) {
        const char *f = getenv("CK_FORK");
        forked = !(f && strcmp(f, "no") == 0);
    }
    if (forked)
        (_mark_point)(file, line);
}

bool test_exhaustive_pick(uint64_t i, unsigned s, unsigned n)
{
    return test_scaled(1000, 0) >= 1000 || i % n == s;
}

/* Stream 0x7e57 ("test") keeps test data apart from rounding streams. */
test_rng test_rng_make(uint64_t seed)
{
    test_rng g = { seed, 0 };
    return g;
}

uint64_t test_next(test_rng *g)
{
    return emu_random64(g->seed, 0x7e57, g->index++);
}

uint64_t test_below(test_rng *g, uint64_t n)
{
    /* The modulo bias (< n / 2^64) is far below anything a test sees. */
    return n ? test_next(g) % n : 0;
}

emu_bits test_random_bits(test_rng *g, const emu_format *fmt)
{
    uint64_t w = test_next(g);
    emu_bits b = { fmt->bits >= 64 ? w : w & ((1ull << fmt->bits) - 1) };
    return b;
}

bool test_same(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

const emu_format *test_format(const char *name)
{
    const emu_format *f = emu_format_find(name);
    if (!f) {
        fprintf(stderr, "test setup: format '%s' is not registered\n", name);
        abort();
    }
    return f;
}

const emu_rounding test_rne = { .mode = EMU_RNE, .sr_bits = 64 };

const emu_accum *test_default_accum(void)
{
    static emu_accum a;
    static bool ready;
    if (!ready) {
        emu_accum_default(&a);
        ready = true;
    }
    return &a;
}

/* EMU_TEST_HOST_ENV=upward|downward|towardzero, plus "+ftz", "+daz" on x86
 * (e.g. "upward+ftz+daz"): the whole suite runs with the main thread in
 * that floating-point state, as a hostile caller would leave it.  Only
 * suites whose expected values come from MPFR and whose inputs are bit
 * patterns are run this way (tests/CMakeLists.txt).  Set before main, so
 * that Check's forked children inherit it too. */
#include <fenv.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

__attribute__((constructor)) static void test_host_env_from_environment(void)
{
    const char *s = getenv("EMU_TEST_HOST_ENV");
    if (!s || !*s)
        return;
    int mode = strstr(s, "upward") ? FE_UPWARD
             : strstr(s, "downward") ? FE_DOWNWARD
             : strstr(s, "towardzero") ? FE_TOWARDZERO : FE_TONEAREST;
    unsigned bits = 0;
    if (strstr(s, "ftz"))
        bits |= 1u << 15;
    if (strstr(s, "daz"))
        bits |= 1u << 6;
#if defined(__x86_64__) || defined(__i386__)
    fesetround(mode);
    _mm_setcsr(_mm_getcsr() | bits);
#else
    if (bits) {
        fprintf(stderr, "EMU_TEST_HOST_ENV=%s: ftz/daz need x86\n", s);
        exit(2);
    }
    fesetround(mode);
#endif
    fprintf(stderr, "host floating-point state: %s\n", s);
}

test_fpstate test_oracle_enter(void)
{
    test_fpstate saved = { .round = fegetround() };
#if defined(__x86_64__) || defined(__i386__)
    saved.csr = _mm_getcsr();
    _mm_setcsr(saved.csr & ~((1u << 15) | (1u << 6)));
#endif
    fesetround(FE_TONEAREST);
    return saved;
}

void test_oracle_leave(test_fpstate saved)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(saved.csr);
#endif
    fesetround(saved.round);
}

const char *test_counts_diff(const emu_round_counts *a,
                             const emu_round_counts *b)
{
    if (a->n != b->n) return "n";
    if (a->inexact != b->inexact) return "inexact";
    if (a->underflow != b->underflow) return "underflow";
    if (a->to_zero != b->to_zero) return "to_zero";
    if (a->subnormal != b->subnormal) return "subnormal";
    if (a->overflow != b->overflow) return "overflow";
    if (a->nan != b->nan) return "nan";
    if (a->invalid != b->invalid) return "invalid";
    if (a->flags != b->flags) return "flags";
    return "";
}
