/*
 * bench_dpi.c — the cost of the DPI-C golden model (emu/dpi.h): calls per
 * second of the functions a testbench calls once per checked case, from
 * C (a simulator adds its own DPI overhead on top; README gives both).
 *
 * Rows: mul on E4M3 (every pair of patterns, in turn), mul on binary16
 * and bfloat16 (random patterns), fma on binary16, the 4-term fused dot
 * product with an accumulator input (emu_dpi_dot4), 32-term ones
 * (emu_dpi_dot), and block-scaled ones of 32 (emu_dpi_dot_scaled).  Single-threaded, best of several repetitions.
 *
 * Usage: bench_dpi [--calls N] [--reps R]
 * A program, not a test: it is never registered with CTest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/dpi.h>
#include <emu/rng.h>

#include "bench_util.h"

typedef struct row {
    const char *name, *in, *settings, *accum; /* accum: a dot row */
    int k;              /* 0: mul; -1: fma; < -1: scaled dot of -k  */
    unsigned bits;
} row;

static const row rows[] = {
    { "mul e4m3", "e4m3", "rne", NULL, 0, 8 },
    { "mul e4m3 sat", "e4m3", "rne,sat", NULL, 0, 8 },
    { "mul binary16", "binary16", "rne", NULL, 0, 16 },
    { "mul bfloat16", "bfloat16", "rne", NULL, 0, 16 },
    { "fma binary16", "binary16", "rne", NULL, -1, 16 },
    { "dot4 e4m3 fused w=16", "e4m3", "rne", "fused,k=4,w=16,acc=binary32", 4, 8 },
    { "dot32 e4m3 fused k=32", "e4m3", "rne", "fused,k=32,w=24,acc=binary32", 32, 8 },
    { "dot32 e4m3 exact", "e4m3", "rne", "exact", 32, 8 },
    /* in: the scaled format; k = -32: a block-scaled dot of 32 */
    { "dot_scaled mxfp8 k=32", "mxfp8", "rne", "exact", -32, 8 },
    { "dot_scaled nvfp4 k=32", "nvfp4", "rne", "exact", -32, 4 },
};

/* Operand word i, bits wide. */
static emu_dpi_u64 word(uint64_t i, unsigned bits)
{
    return emu_random64(0xd91, 1, i) & ((1ull << bits) - 1);
}

/* Seconds for n calls of row r; *sink keeps the results alive. */
static double run(const row *r, int h, long n, emu_dpi_u64 *sink)
{
    emu_dpi_u64 a[EMU_DPI_MAX_K], b[EMU_DPI_MAX_K], res = 0;
    emu_dpi_u32 f;
    for (int j = 0; j < EMU_DPI_MAX_K; j++) {
        a[j] = word(2 * (uint64_t)j, r->bits);
        b[j] = word(2 * (uint64_t)j + 1, r->bits);
    }
    double t = bench_now();
    for (long i = 0; i < n; i++) {
        emu_dpi_u64 x = r->bits <= 8 ? (emu_dpi_u64)i & ((1u << r->bits) - 1)
                                     : word(2 * (uint64_t)i, r->bits);
        emu_dpi_u64 y = r->bits <= 8 ? (emu_dpi_u64)(i >> 8) & ((1u << r->bits) - 1)
                                     : word(2 * (uint64_t)i + 1, r->bits);
        int rc;
        if (r->k == 0)
            rc = emu_dpi_mul(h, x, y, &res, &f);
        else if (r->k == -1)
            rc = emu_dpi_fma(h, x, y, x ^ 1, &res, &f);
        else if (r->k < 0) {
            static const emu_dpi_u64 s[2] = { 0x38, 0x38 }; /* E8M0: 2^-71; E4M3: 1 */
            a[0] = x;
            b[0] = y;
            rc = emu_dpi_dot_scaled(h, -r->k, a, s, b, s, 0x3f800000u,
                                    0x3f800000u, &res, &f);
        }
        else if (r->k == 4)
            rc = emu_dpi_dot4(h, x, y, a[1], b[1], a[2], b[2], y, x,
                              0x3f800000u, &res, &f);
        else {
            a[0] = x;
            b[0] = y;
            rc = emu_dpi_dot(h, r->k, a, b, 0x3f800000u, &res, &f);
        }
        if (rc) {
            fprintf(stderr, "bench_dpi: %s: %s\n", r->name, emu_dpi_last_error());
            exit(1);
        }
        *sink += res;
    }
    return bench_now() - t;
}

int main(int argc, char **argv)
{
    long calls = 1000000;
    int reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--calls") && i + 1 < argc)
            calls = atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_dpi [--calls N] [--reps R]\n");
            return 2;
        }
    }
    emu_dpi_u64 sink = 0;
    printf("%-24s %14s %10s\n", "call", "calls/s", "ns/call");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row *r = &rows[i];
        int h = r->k < -1 ? emu_dpi_open_scaled(r->in, r->accum, "", r->settings)
              : r->accum ? emu_dpi_open_dot(r->in, r->accum, "", r->settings)
                         : emu_dpi_open(r->in, "", r->settings);
        if (h < 0) {
            fprintf(stderr, "bench_dpi: %s: %s\n", r->name, emu_dpi_last_error());
            return 1;
        }
        long n = r->k > 4 || r->k < -1 ? calls / 8 : calls;
        double best = 1e30;
        for (int k = 0; k < reps; k++) {
            double t = run(r, h, n, &sink);
            best = t < best ? t : best;
        }
        printf("%-24s %14.0f %10.1f\n", r->name, (double)n / best, 1e9 * best / (double)n);
    }
    return sink == 42 ? 3 : 0; /* never: keeps the calls from being elided */
}
