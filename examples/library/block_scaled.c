/*
 * block_scaled — quantizing a matrix into MXFP8 (OCP MX: E4M3 elements,
 * one E8M0 power-of-two scale per block of 32), with per-block counts,
 * then dequantizing it; and the same data in MXFP4 and NVFP4.
 *
 * Each row of the data has its own magnitude, and one block holds an
 * outlier: block scales follow the magnitudes (what a per-tensor scale
 * cannot), and the outlier's block flushes its small values to zero.
 * The program checks the OCP scale rule, every element against the
 * scalar rounding of its exact quotient, the per-block counts against a
 * recount, and that the blocks add up to the totals.
 *
 * One of the README's "Using the library" examples, built and run as a
 * CTest (example_block_scaled); exits non-zero if any check fails.
 * Build against an installed libemu:
 *     cc -std=c11 block_scaled.c $(pkg-config --cflags --libs libemu) -lm
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <emu/emu.h>

enum { ROWS = 4, COLS = 64, NX = ROWS * COLS };

static int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL: %s\n", what);
        failures++;
    }
}

static int die(const emu_error *err)
{
    char msg[600];
    emu_error_format(err, msg, sizeof msg);
    fprintf(stderr, "FAIL: %s\n", msg);
    return 1;
}

/* Row r holds values of magnitude about 2^(6r - 12), both signs; element
 * (2, 40) is an outlier 10^5 times its neighbours. */
static void make_data(float *x)
{
    for (size_t i = 0; i < NX; i++) {
        double u = (double)(emu_random64(5, 0, i) >> 11) * 0x1p-53;
        x[i] = (float)ldexp(2 * u - 1, 6 * (int)(i / COLS) - 12);
    }
    x[2 * COLS + 40] *= 1e5f;
}

/* Quantizes x into `spec`, checks that the blocks add up to the totals,
 * and returns the mean over blocks of their relative L2 error (or -1):
 * each block's error relative to its own size, as the rows differ in
 * magnitude by 2^18. */
static double quantize(const char *spec, const float *x, emu_scaled_tensor *q,
                       emu_quant_counts *counts, emu_block_stats *blocks)
{
    emu_error err;
    emu_scaled_format sf;
    const size_t shape[2] = { ROWS, COLS };
    /* Blocks run along the last axis (-1): the reduction axis of the
     * matmul this matrix would feed as its left operand. */
    if (emu_scaled_format_parse(&sf, spec, &err) != 0 ||
        emu_scaled_alloc(q, &sf, 2, shape, -1, &err) != 0) {
        die(&err);
        return -1;
    }
    emu_quant_opts opts = { .mode = EMU_RNE };  /* tensor_scale 0: current */
    *counts = (emu_quant_counts){ 0 };          /* calls add to it         */
    if (emu_scaled_quantize(q, x, &opts, counts, blocks, &err) != 0) {
        die(&err);
        return -1;
    }

    uint64_t clipped = 0, flushed = 0, inexact = 0;
    double rel = 0;
    for (size_t b = 0; b < q->nblocks; b++) {
        clipped += blocks[b].clipped;
        flushed += blocks[b].flushed;
        inexact += blocks[b].inexact;
        rel += sqrt(blocks[b].err_sq / blocks[b].ref_sq);
    }
    check(counts->n == NX && counts->blocks == q->nblocks &&
          clipped == counts->clipped && flushed == counts->flushed &&
          inexact == counts->inexact, "blocks add up to the totals");
    return rel / (double)q->nblocks;
}

int main(void)
{
    static float x[NX], v[NX];
    static emu_block_stats blocks[NX];   /* at most one block per element */
    make_data(x);

    emu_scaled_tensor q;
    emu_quant_counts counts;
    double rel = quantize("mxfp8", x, &q, &counts, blocks);
    if (rel < 0)
        return 1;

    /* What each block's scale did: its amax, the power of two chosen,
     * how many elements were clipped to +-448, flushed to zero, inexact. */
    printf("mxfp8: %zu blocks of %zu, %.2f bits per element\n", q.nblocks,
           q.sf.block[0], emu_scaled_bits_per_element(&q.sf));
    printf("block        amax        scale  clipped  flushed  inexact  rel_l2\n");
    for (size_t b = 0; b < q.nblocks; b++)
        printf("%5zu  %10.4g  %11.4g  %7u  %7u  %7u  %.2e\n", b,
               blocks[b].amax, q.scale[b], blocks[b].clipped,
               blocks[b].flushed, blocks[b].inexact,
               sqrt(blocks[b].err_sq / blocks[b].ref_sq));

    /* Back to binary32: v_i = e_i * s_b(i) (* g, for formats with a
     * tensor scale). */
    emu_error err;
    if (emu_scaled_dequantize(&q, v, true, &err) != 0)
        return die(&err);

    /* The OCP rule: s = 2^(floor(log2 amax) - emax_elem), E4M3's emax 8. */
    int rule_ok = 1;
    for (size_t b = 0; b < q.nblocks; b++) {
        int e;
        frexp(blocks[b].amax, &e);            /* amax = f 2^e, f in [0.5, 1) */
        rule_ok &= q.scale[b] == ldexp(1, e - 1 - q.sf.elem.emax);
    }
    check(rule_ok && counts.scale_clamped == 0, "scales follow the OCP rule");

    /* Each element is its exact quotient x / s (exact: s is a power of
     * two) rounded once into E4M3, saturating; recount the blocks. */
    const emu_rounding sat = { .mode = EMU_RNE, .saturate = true };
    int elems_ok = 1;
    static emu_block_stats re[NX];
    for (size_t i = 0; i < NX; i++) {
        size_t b = emu_scaled_block_of(&q, i);
        double quot = x[i] / (double)q.scale[b];
        double e = emu_round(&q.sf.elem, quot, &sat, NULL);
        elems_ok &= q.elem[i] == (float)e && v[i] == (float)(e * q.scale[b]) &&
                    v[i] == emu_scaled_value(&q, i);
        re[b].clipped += fabs(quot) > q.sf.elem.max;
        re[b].flushed += x[i] != 0 && e == 0;
        re[b].inexact += v[i] != x[i];
    }
    check(elems_ok, "elements are their quotients rounded once");
    int recount_ok = 1;
    for (size_t b = 0; b < q.nblocks; b++)
        recount_ok &= re[b].clipped == blocks[b].clipped &&
                      re[b].flushed == blocks[b].flushed &&
                      re[b].inexact == blocks[b].inexact;
    check(recount_ok, "per-block counts equal a recount");
    /* The outlier's block (row 2, second half) flushes what the others
     * keep. */
    check(blocks[5].flushed > 0 && blocks[4].flushed == 0,
          "the outlier's block flushes small values");
    printf("mxfp8: relative L2 error %.3e per block, %zu bytes packed\n", rel,
           emu_scaled_packed_size(&q));
    emu_scaled_free(&q);

    /* Four-bit formats on the same data: OCP MXFP4 (E2M1, power-of-two
     * scales) and NVFP4 (E2M1 in blocks of 16, E4M3 scales, and a binary32
     * tensor scale).  NVFP4's E4M3 scales span 2^17.8 below the tensor's
     * amax (448 / 2^-9): the blocks of rows 0 and 1, 2^28 and 2^22 below
     * the outlier, need smaller scales than E4M3 holds (scale_clamped)
     * and flush; E8M0's scales reach 2^-127. */
    const char *fp4[] = { "mxfp4", "nvfp4" };
    for (int k = 0; k < 2; k++) {
        double r = quantize(fp4[k], x, &q, &counts, blocks);
        if (r < 0)
            return 1;
        printf("%s: %.2f bits per element, tensor scale %g, relative L2 "
               "error %.3e per block, flushed %llu, scales clamped %llu\n",
               fp4[k], emu_scaled_bits_per_element(&q.sf), q.tensor_scale, r,
               (unsigned long long)counts.flushed,
               (unsigned long long)counts.scale_clamped);
        check(r > rel, "four bits lose more than eight");
        check((counts.scale_clamped > 0) == (k == 1),
              "only NVFP4's block scales run out of range");
        emu_scaled_free(&q);
    }

    if (failures) {
        fprintf(stderr, "block_scaled: %d check(s) failed\n", failures);
        return 1;
    }
    printf("block_scaled: all checks passed\n");
    return 0;
}
