/*
 * bench_lstm.c — one LSTM layer's forward + backward (emu_t_lstm,
 * emu_t_lstm_backward) per training step, against PyTorch's nn.LSTM on the
 * same sizes (bench/lstm_torch.py prints its figure).
 *
 *   ./build/bench/bench_lstm [B T I H [reps [accum [measure]]]]
 * accum: fast (default), sequential, exact; measure: none, counts (what a
 * training run measures by default: counts and histograms), all.
 * Single-threaded (OPENBLAS_NUM_THREADS=1 for a fair comparison).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/emu.h>

#include "bench_util.h"

static void alloc(emu_tensor *t, const char *name, emu_role role,
                  const emu_format *f, size_t a, size_t b, size_t c)
{
    emu_error e;
    if (emu_tensor_alloc4(t, name, role, f, a, b, c, 0, &e)) {
        fprintf(stderr, "%s\n", e.message);
        exit(1);
    }
}

static void fill(emu_tensor *t, double scale, uint64_t stream)
{
    for (size_t i = 0; i < t->n; i++)
        t->data[i] = (float)(scale * (2.0 * bench_uniform(7, stream, i) - 1.0));
}

int main(int argc, char **argv)
{
    size_t B = 32, T = 64, I = 256, H = 256;
    int reps = 5;
    const char *acc_name = "fast", *meas = "counts";
    if (argc >= 5) {
        B = strtoul(argv[1], NULL, 10), T = strtoul(argv[2], NULL, 10);
        I = strtoul(argv[3], NULL, 10), H = strtoul(argv[4], NULL, 10);
    }
    if (argc >= 6)
        reps = atoi(argv[5]);
    if (argc >= 7)
        acc_name = argv[6];
    if (argc >= 8)
        meas = argv[7];
    const emu_format *f32 = emu_format_find("binary32");
    const size_t G = 4 * H;
    emu_tensor x, y, gates, c, dy, dx, wih, whh, bih, bhh, dwih, dwhh, dbih, dbhh;
    alloc(&x, "x", EMU_ROLE_ACTIVATION, f32, B, T, I);
    alloc(&y, "y", EMU_ROLE_ACTIVATION, f32, B, T, H);
    alloc(&gates, "gates", EMU_ROLE_ACTIVATION, f32, B, T, G);
    alloc(&c, "c", EMU_ROLE_ACTIVATION, f32, B, T, H);
    alloc(&dy, "dy", EMU_ROLE_ACT_GRAD, f32, B, T, H);
    alloc(&dx, "dx", EMU_ROLE_ACT_GRAD, f32, B, T, I);
    alloc(&wih, "w_ih", EMU_ROLE_WEIGHT, f32, G, I, 0);
    alloc(&whh, "w_hh", EMU_ROLE_WEIGHT, f32, G, H, 0);
    alloc(&bih, "b_ih", EMU_ROLE_WEIGHT, f32, G, 0, 0);
    alloc(&bhh, "b_hh", EMU_ROLE_WEIGHT, f32, G, 0, 0);
    alloc(&dwih, "dw_ih", EMU_ROLE_WEIGHT_GRAD, f32, G, I, 0);
    alloc(&dwhh, "dw_hh", EMU_ROLE_WEIGHT_GRAD, f32, G, H, 0);
    alloc(&dbih, "db_ih", EMU_ROLE_WEIGHT_GRAD, f32, G, 0, 0);
    alloc(&dbhh, "db_hh", EMU_ROLE_WEIGHT_GRAD, f32, G, 0, 0);
    const double k = 1.0 / sqrt((double)H);
    fill(&x, 1.0, 1), fill(&dy, 1e-3, 2), fill(&wih, k, 3), fill(&whh, k, 4);
    fill(&bih, k, 5), fill(&bhh, k, 6);

    emu_accum acc;
    emu_accum_default(&acc);
    acc.kind = !strcmp(acc_name, "exact") ? EMU_ACCUM_EXACT
             : !strcmp(acc_name, "sequential") ? EMU_ACCUM_SEQUENTIAL
                                               : EMU_ACCUM_FAST;
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    emu_stats st;
    emu_stats_init(&st);
    ctx.stats = &st;
    ctx.measure = !strcmp(meas, "none") ? 0
                : !strcmp(meas, "all") ? EMU_MEASURE_ALL
                                       : EMU_MEASURE_COUNTS | EMU_MEASURE_HIST;
    const emu_rounding rne = { .mode = EMU_RNE };
    emu_lstm_weights w = { &wih, &whh, &bih, &bhh };
    emu_lstm_grads g = { &dwih, &dwhh, &dbih, &dbhh };
    emu_lstm_opts o = { .accum = &acc };
    /* CPU time (one thread), which the other processes of a loaded
     * machine disturb less than wall time. */
    double best_f = 1e30, best_b = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = (double)clock() / CLOCKS_PER_SEC;
        if (emu_t_lstm(&ctx, "lstm", &y, &gates, &c, NULL, NULL, &x, NULL, NULL,
                       &w, &o, &rne))
            return fprintf(stderr, "%s\n", ctx.err.message), 1;
        double t1 = (double)clock() / CLOCKS_PER_SEC;
        if (emu_t_lstm_backward(&ctx, "lstm", &dx, &g, &dy, &x, &y, &gates, &c,
                                NULL, NULL, &w, &o, &rne))
            return fprintf(stderr, "%s\n", ctx.err.message), 1;
        double t2 = (double)clock() / CLOCKS_PER_SEC;
        if (t1 - t0 < best_f)
            best_f = t1 - t0;
        if (t2 - t1 < best_b)
            best_b = t2 - t1;
    }
    printf("lstm B=%zu T=%zu I=%zu H=%zu accum=%s measure=%s: forward %.2f ms, "
           "backward %.2f ms, step %.2f ms (CPU time, best of %d)\n", B, T, I, H, acc_name,
           meas, 1e3 * best_f, 1e3 * best_b, 1e3 * (best_f + best_b), reps);
    emu_stats_free(&st);
    emu_tensor *ts[] = { &x, &y, &gates, &c, &dy, &dx, &wih, &whh, &bih, &bhh,
                         &dwih, &dwhh, &dbih, &dbhh };
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        emu_tensor_free(ts[i]);
    return 0;
}
