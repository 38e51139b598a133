/*
 * matmul_accum — a matmul of two binary16 tensors under three accumulator
 * models, with statistics on and MPFR sampling, read back through the
 * statistics API.
 *
 * The same product Y = A B (binary16 inputs rounded from binary32 data,
 * binary16 output) is formed by
 *   - sequential binary16 accumulation (a naive half-precision GEMM),
 *   - a fused multi-term unit (16 exact products aligned and summed in
 *     25 bits, rounded into binary32: the published model of tensor-core
 *     dot-product units),
 *   - the exact sum, rounded once (the ideal).
 * For each, the choke point counts swamping (addends absorbed by a large
 * running sum) and, on a sample of outputs (ctx.ref_rate), recomputes the
 * exact result with MPFR and splits the error into input quantization,
 * accumulation and output rounding.  The program checks every output
 * against the model's reference definition (emu_accum_dot) and the
 * swamping counts against that definition's own counts.
 *
 * One of the README's "Using the library" examples, built and run as a
 * CTest (example_matmul_accum); exits non-zero if any check fails.
 * It needs no MPFR headers: the sampling happens inside the library.
 * Build against an installed libemu:
 *     cc -std=c11 matmul_accum.c $(pkg-config --cflags --libs libemu)
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <emu/emu.h>

enum { M = 8, K = 512, N = 8 };

static int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL: %s\n", what);
        failures++;
    }
}

/* Stops the program with the library's message (emu/error.h). */
static int die(const emu_error *err)
{
    char msg[600];
    emu_error_format(err, msg, sizeof msg);
    fprintf(stderr, "FAIL: %s\n", msg);
    return 1;
}

/* A counter of a site by its CSV column name. */
static double counter(const emu_site *site, const char *name)
{
    double v = -1;
    if (emu_stats_counter(site, EMU_SPAN_TOTAL, name, &v) != 0) {
        fprintf(stderr, "FAIL: no counter '%s'\n", name);
        failures++;
    }
    return v;
}

/* Checks Y against the model's reference definition, one dot product at
 * a time: emu_accum_dot (row i of A, column j of B: stride N), rounded
 * once into Y's format; and the matmul's swamping counts against the
 * sum of the reference's. */
static void check_against_reference(const emu_tensor *y, const emu_tensor *a,
                                    const emu_tensor *b, const emu_accum *acc,
                                    const emu_rounding *rnd,
                                    const emu_site *site)
{
    emu_accum_counts sw = { 0 };
    int all_same = 1;
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double lo;
            double hi = emu_accum_dot(&lo, &sw, acc, a->data + i * K, 1,
                                      b->data + j, N, K, NULL);
            double want = emu_round2(&y->fmt, hi, lo, rnd, NULL);
            all_same &= y->data[i * N + j] == (float)want;
        }
    check(all_same, "every output equals the reference dot product");
    check(counter(site, "adds") == (double)sw.adds &&
          counter(site, "absorbed") == (double)sw.absorbed,
          "swamping counts equal the reference's");
}

int main(void)
{
    emu_error err;
    const emu_format *f16 = emu_format_find("binary16");
    const emu_format *f32 = emu_format_find("binary32");

    /* Statistics go to `stats`; measure everything, and check a quarter
     * of the outputs against MPFR. */
    emu_stats stats;
    emu_stats_init(&stats);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 42);            /* the seed of stochastic choices */
    ctx.stats = &stats;
    ctx.measure = EMU_MEASURE_ALL;
    ctx.ref_rate = 0.25;

    /* Tensors: binary32 sources, their binary16 roundings, the output. */
    emu_tensor a_src, b_src, a, b, y;
    if (emu_tensor_alloc4(&a_src, "a_src", EMU_ROLE_ACTIVATION, f32, M, K, 0, 0, &err) ||
        emu_tensor_alloc4(&b_src, "b_src", EMU_ROLE_WEIGHT, f32, K, N, 0, 0, &err) ||
        emu_tensor_alloc4(&a, "a", EMU_ROLE_ACTIVATION, f16, M, K, 0, 0, &err) ||
        emu_tensor_alloc4(&b, "b", EMU_ROLE_WEIGHT, f16, K, N, 0, 0, &err) ||
        emu_tensor_alloc4(&y, "y", EMU_ROLE_ACTIVATION, f16, M, N, 0, 0, &err))
        return die(&err);

    /* Positive data in [0, 1): no cancellation, so the sums grow and
     * binary16's ulp grows with them (0.125 at 128). */
    static float data_a[M * K], data_b[K * N];
    for (size_t i = 0; i < M * K; i++)
        data_a[i] = (float)((emu_random64(1, 0, i) >> 40) * 0x1p-24);
    for (size_t i = 0; i < K * N; i++)
        data_b[i] = (float)((emu_random64(1, 1, i) >> 40) * 0x1p-24);

    /* Every op takes its rounding last; zero-initialised is nearest-even. */
    const emu_rounding rne = { .mode = EMU_RNE };
    if (emu_t_load(&ctx, "a_src.load", &a_src, data_a, M * K, &rne) ||
        emu_t_load(&ctx, "b_src.load", &b_src, data_b, K * N, &rne) ||
        emu_t_load(&ctx, "a.load", &a, data_a, M * K, &rne) ||
        emu_t_load(&ctx, "b.load", &b, data_b, K * N, &rne))
        return die(&ctx.err);

    const char *models[] = { "sequential,acc=binary16",
                             "fused,acc=binary32,k=16,w=25", "exact" };
    const char *sites[] = { "y.sequential", "y.fused", "y.exact" };
    double accum_mean[3];
    printf("%-36s %9s %8s %11s %11s %11s\n", "model", "absorbed", "samples",
           "quant_mean", "accum_mean", "round_mean");
    for (int m = 0; m < 3; m++) {
        /* The accumulator model is named in the call, via the options;
         * the binary32 sources let MPFR tell the inputs' quantization
         * error from the accumulator's. */
        emu_accum acc;
        if (emu_accum_parse(&acc, models[m], &err) != 0)
            return die(&err);
        emu_matmul_opts opts = { .accum = &acc,
                                 .a_src = &a_src, .b_src = &b_src };
        if (emu_t_matmul(&ctx, sites[m], &y, &a, &b, &opts, &rne) != 0)
            return die(&ctx.err);

        /* Read what the choke point measured at this site. */
        const emu_site *site = emu_stats_find(&stats, sites[m],
                                              EMU_ROLE_ACTIVATION);
        check(site != NULL, "the matmul's site exists");
        if (!site)
            break;
        accum_mean[m] = counter(site, "accum_mean");
        printf("%-36s %9.0f %8.0f %11.3e %11.3e %11.3e\n", models[m],
               counter(site, "absorbed"), counter(site, "dot_samples"),
               counter(site, "quant_mean"), accum_mean[m],
               counter(site, "round_mean"));

        check(counter(site, "results") == M * N, "one result per output");
        check(counter(site, "ref_samples") > 0 &&
              counter(site, "dot_samples") == counter(site, "ref_samples"),
              "sampled outputs carry the error split");
        check(counter(site, "quant_mean") > 0,
              "binary16 inputs have quantization error");
        check_against_reference(&y, &a, &b, &acc, &rne, site);
    }
    /* The exact model loses nothing; binary16 accumulation loses most. */
    check(accum_mean[2] == 0, "exact: no accumulation error");
    check(accum_mean[0] > accum_mean[1] && accum_mean[1] >= accum_mean[2],
          "accumulation error: sequential binary16 > fused > exact");

    /* Errors are reported through ctx.err: a matmul without an
     * accumulator model is refused (there is no default). */
    emu_matmul_opts none = { 0 };
    int rc = emu_t_matmul(&ctx, "y.bad", &y, &a, &b, &none, &rne);
    char msg[600];
    emu_error_format(&ctx.err, msg, sizeof msg);
    printf("without a model: %d, %s: %s\n", rc,
           emu_error_code_name(ctx.err.code), msg);
    check(rc == -1 && ctx.err.code == EMU_EINVAL, "a missing model is an error");

    emu_tensor_free(&a_src), emu_tensor_free(&b_src);
    emu_tensor_free(&a), emu_tensor_free(&b), emu_tensor_free(&y);
    emu_stats_free(&stats);
    if (failures) {
        fprintf(stderr, "matmul_accum: %d check(s) failed\n", failures);
        return 1;
    }
    printf("matmul_accum: all checks passed\n");
    return 0;
}
