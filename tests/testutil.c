/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

uint64_t test_scaled(uint64_t n, uint64_t floor)
{
    static double scale = -1.0;
    if (scale < 0.0) {
        const char *s = getenv("EMU_TEST_SCALE");
        scale = s ? strtod(s, NULL) : 1.0;
        if (!(scale >= 0.001))
            scale = 0.001;
        if (scale > 1000.0)
            scale = 1000.0;
    }
    double v = (double)n * scale;
    return v < (double)floor ? floor : (uint64_t)v;
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
