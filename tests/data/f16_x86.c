/*
 * f16_x86.c — an independent oracle for binary16 test vectors: the x86
 * processor itself (SSE arithmetic plus the F16C conversion instructions),
 * with its rounding mode set in MXCSR and its flags read back from it.
 * Not part of the build; tests/cli/hw_f16.sh compiles it when the machine
 * has F16C, and it produced the tests/data/x86_f16_*.tv files.
 *
 *   cc -O1 -mf16c -fno-math-errno -frounding-math -o f16_x86 f16_x86.c -lm
 *   emu gen --op mul --format binary16 --mode rz | ./f16_x86 mul rz
 *
 * It reads TestFloat-format lines (emu gen's output or anyone's), keeps
 * the operands, and writes each line again with the result and flags the
 * hardware computes.  Ops: add sub mul div sqrt eq lt le on binary16, and
 * convert from binary32 to binary16.  Modes: rne rz ru rd.
 *
 * Why this is exact: binary16 operands are binary32 values; the binary32
 * result of + - * / sqrt, rounded once more to binary16 in the same
 * direction, is the correctly rounded binary16 result (24 >= 2*11 + 2 for
 * nearest; directed roundings compose).  The one flag the second rounding
 * cannot see is underflow when the binary32 step was inexact and landed
 * exactly on a tiny binary16 value: added below.  x86 detects tininess
 * after rounding.  NaN results are whatever x86 gives (its default NaN is
 * FE00); compare them with `emu verify` without --exact-nan.  fma is not
 * offered: binary32 fma then binary16 is a true double rounding.
 */
#include <fenv.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


enum { INEXACT = 1, UNDERFLOW = 2, OVERFLOW = 4, INFINITE = 8, INVALID = 16 };

static unsigned read_flags(void)
{
    unsigned f = 0;
    f |= fetestexcept(FE_INEXACT) ? INEXACT : 0;
    f |= fetestexcept(FE_UNDERFLOW) ? UNDERFLOW : 0;
    f |= fetestexcept(FE_OVERFLOW) ? OVERFLOW : 0;
    f |= fetestexcept(FE_DIVBYZERO) ? INFINITE : 0;
    f |= fetestexcept(FE_INVALID) ? INVALID : 0;
    return f;
}

static float from_half(uint16_t h)
{
    /* vcvtph2ps: exact; raises invalid for a signaling NaN. */
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

static uint16_t to_half(float x)
{
    /* vcvtps2ph with the rounding mode taken from MXCSR. */
    return (uint16_t)_mm_extract_epi16(
        _mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_CUR_DIRECTION), 0);
}

static int parse_mode(const char *s)
{
    if (!strcmp(s, "rne")) return FE_TONEAREST;
    if (!strcmp(s, "rz")) return FE_TOWARDZERO;
    if (!strcmp(s, "ru")) return FE_UPWARD;
    if (!strcmp(s, "rd")) return FE_DOWNWARD;
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 3 || parse_mode(argv[2]) < 0) {
        fprintf(stderr, "usage: f16_x86 add|sub|mul|div|sqrt|eq|lt|le|convert "
                        "rne|rz|ru|rd < vectors\n");
        return 2;
    }
    const char *op = argv[1];
    int arity = !strcmp(op, "sqrt") || !strcmp(op, "convert") ? 1 : 2;
    int compare = !strcmp(op, "eq") || !strcmp(op, "lt") || !strcmp(op, "le");
    fesetround(parse_mode(argv[2]));
    printf("# binary16 %s, mode %s: results and flags computed by this x86 "
           "processor (SSE + F16C) with tests/data/f16_x86.c\n", op, argv[2]);

    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        unsigned long a = 0, b = 0;
        char *p = line, *end;
        a = strtoul(p, &end, 16);
        if (arity == 2)
            b = strtoul(end, &end, 16);

        feclearexcept(FE_ALL_EXCEPT);
        volatile float x, y, z;
        unsigned long r;
        if (!strcmp(op, "convert")) {
            uint32_t u = (uint32_t)a;
            float f;
            memcpy(&f, &u, sizeof f);
            r = to_half(f);
        } else {
            x = from_half((uint16_t)a);
            y = from_half((uint16_t)b);
            if (compare) {
                /* == compiles to the quiet ucomiss, < and <= to the
                 * signaling comiss (checked: lt on a quiet NaN must raise
                 * invalid in the output). */
                r = !strcmp(op, "eq") ? x == y : !strcmp(op, "lt") ? x < y
                                                                   : x <= y;
            } else {
                if (!strcmp(op, "add")) z = x + y;
                else if (!strcmp(op, "sub")) z = x - y;
                else if (!strcmp(op, "mul")) z = x * y;
                else if (!strcmp(op, "div")) z = x / y;
                else z = sqrtf(x);
                unsigned step = read_flags();
                r = to_half(z);
                float back = from_half((uint16_t)r);
                if ((step & INEXACT) && fabsf(back) < 0x1p-14f && back != 0.0f)
                    feraiseexcept(FE_UNDERFLOW);
            }
        }
        unsigned flags = read_flags();
        if (arity == 2)
            printf(compare ? "%04lX %04lX %lu %02X\n" : "%04lX %04lX %04lX %02X\n",
                   a, b, r, flags);
        else
            printf(!strcmp(op, "convert") ? "%08lX %04lX %02X\n"
                                          : "%04lX %04lX %02X\n", a, r, flags);
    }
    return 0;
}
