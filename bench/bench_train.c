/*
 * bench_train.c — what a training step costs under each precision policy:
 * time per step of the CNN for fp32, fp16-mpt, bf16-sr and the scaled
 * presets (fp8-delayed, mxfp8, nvfp4: every GEMM operand quantized) with
 * the fast accumulator and for fp16-mpt with the emulated sequential
 * binary32 accumulator, as ratios to fp32 in the same run; peak resident
 * memory per model and policy; the time of one epoch of the CNN on
 * Fashion-MNIST under fp16-mpt (fast), extrapolated or measured.
 *
 *   cmake --build build --target bench_train
 *   OPENBLAS_NUM_THREADS=1 ./build/bench/bench_train [options]
 *
 * Options:
 *   --steps N          steps of the long run of each configuration (24)
 *   --rounds R         repeat every measurement R times, keep the best (3)
 *   --threads T        ctx->threads of the step timings (1)
 *   --quick            8 steps, one round, CNN rows only, no epoch estimate
 *   --data-dir DIR     Fashion-MNIST (default Debian's location)
 *   --full-epoch       run the whole Fashion-MNIST epoch instead of
 *                      extrapolating it (a few minutes)
 *
 * Method.  Each configuration runs emu_train (the real loop: every op
 * through the choke point with counters and histograms, per-step records,
 * quiet, a temporary folder) in a child process, twice: a short run of
 * N0 = 4 steps and a long run of N steps, on the embedded data set
 * (2048 training, 64 test examples, batch 64).  Both pay the same set-up,
 * data generation, evaluation and file writing, so the time per step is
 * (t(N) - t(N0)) / (N - N0), in CPU time of the child (a loaded machine
 * skews it less than wall time; with T > 1 threads the wall time is the
 * figure, also printed).  The peak resident size is the long run child's
 * ru_maxrss.  The configurations take turns, R rounds, and each keeps its
 * best figures (the least disturbed by other processes).  The "median"
 * column is the median of the long run's per-step wall times (steps.csv).  The epoch estimate is steps_per_epoch times the
 * time per step (CPU with one thread, the median wall time with two) plus
 * the fixed part of the short run in CPU time (loading the 70000 images
 * and evaluating the 10000 test images, single-threaded).
 *
 * Targets: fast-mode presets at most 2x fp32; one epoch of the
 * CNN on Fashion-MNIST under fp16-mpt (fast) in a few minutes on 2 cores.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <emu/emu.h>

typedef struct config {
    const char *label;
    const char *arch;
    const char *preset;
    const char *set;          /* one policy override, or NULL */
    bool cnn_row;             /* part of the --quick set      */
} config;

static const config configs[] = {
    { "cnn fp32", "cnn", "fp32", NULL, true },
    { "cnn fp16-mpt", "cnn", "fp16-mpt", NULL, true },
    { "cnn bf16-sr", "cnn", "bf16-sr", NULL, true },
    { "cnn fp16-mpt seq-b32", "cnn", "fp16-mpt", "accum=sequential,acc=binary32", true },
    { "cnn fp8-delayed", "cnn", "fp8-delayed", NULL, true },
    { "cnn mxfp8", "cnn", "mxfp8", NULL, true },
    { "cnn nvfp4", "cnn", "nvfp4", NULL, true },
    { "mlp fp32", "mlp:784-256-128-10", "fp32", NULL, false },
    { "mlp fp16-mpt", "mlp:784-256-128-10", "fp16-mpt", NULL, false },
    { "deep-mlp adaptive", "mlp:784-128x8-10", "adaptive", NULL, false },
};
enum { NCONFIGS = sizeof configs / sizeof configs[0] };

/* What a child reports. */
typedef struct result {
    int ok;
    double cpu, wall;         /* whole emu_train call                  */
    double step_median;       /* median of steps.csv's seconds column  */
    long maxrss_kb;
    int64_t steps_per_epoch;
    char error[300];
} result;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of steps.csv's last column (per-step wall seconds). */
static double steps_median(const char *dir, int64_t *rows)
{
    char path[700];
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    FILE *fp = fopen(path, "r");
    *rows = 0;
    if (!fp)
        return NAN;
    size_t n = 0, cap = 1024;
    double *v = malloc(cap * sizeof *v);
    char line[1024];
    if (v && fgets(line, sizeof line, fp)) /* header */
        while (fgets(line, sizeof line, fp)) {
            if (n == cap) {
                double *w = realloc(v, 2 * cap * sizeof *v);
                if (!w)
                    break;
                v = w;
                cap *= 2;
            }
            char *comma = strrchr(line, ',');
            if (comma)
                v[n++] = strtod(comma + 1, NULL);
        }
    fclose(fp);
    *rows = (int64_t)n;
    double m = NAN;
    if (n) {
        qsort(v, n, sizeof v[0], cmp_double);
        m = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    }
    free(v);
    return m;
}

static void remove_run(const char *dir)
{
    static const char *const files[] = {
        "meta.json", "steps.csv", "ops_steps.csv", "layers_steps.csv",
        "eval.csv", "ops.csv", "hist.csv", "ops.json", "summary.txt",
        "checkpoint.bin",
    };
    char path[700];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
    rmdir(dir);
}

/* Runs one training run in this (child) process. */
static result run_here(const config *c, int64_t steps, int threads,
                       const char *data, const char *data_dir, int epochs)
{
    result r;
    memset(&r, 0, sizeof r);
    char dir[] = "/tmp/bench_train.XXXXXX";
    if (!mkdtemp(dir)) {
        snprintf(r.error, sizeof r.error, "mkdtemp: %s", strerror(errno));
        return r;
    }
    char out[64];
    snprintf(out, sizeof out, "%s/run", dir);

    emu_train_config cfg;
    emu_train_config_default(&cfg);
    snprintf(cfg.preset, sizeof cfg.preset, "%s", c->preset);
    snprintf(cfg.arch, sizeof cfg.arch, "%s", c->arch);
    snprintf(cfg.data, sizeof cfg.data, "%s", data);
    if (data_dir)
        snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", data_dir);
    if (!strcmp(data, "synthetic")) {
        cfg.train_examples = 2048;
        cfg.test_examples = 64;
    }
    cfg.epochs = epochs;
    cfg.max_steps = steps;
    cfg.threads = threads;
    cfg.quiet = true;
    snprintf(cfg.out_dir, sizeof cfg.out_dir, "%s", out);

    emu_policy p;
    emu_error err;
    if (emu_policy_preset(&p, c->preset, &err) ||
        (c->set && emu_policy_set(&p, c->set, &err)) ||
        emu_policy_validate(&p, &err)) {
        snprintf(r.error, sizeof r.error, "policy: %.250s", err.message);
        rmdir(dir);
        return r;
    }
    double w0 = now(), c0 = cpu_seconds();
    int rc = emu_train(&cfg, &p, NULL, &err);
    r.cpu = cpu_seconds() - c0;
    r.wall = now() - w0;
    if (rc) {
        snprintf(r.error, sizeof r.error, "%.120s: %.160s", err.where, err.message);
    } else {
        int64_t rows;
        r.step_median = steps_median(out, &rows);
        r.ok = rows == steps || steps == 0;
        if (!r.ok)
            snprintf(r.error, sizeof r.error, "%lld steps run, %lld asked",
                     (long long)rows, (long long)steps);
        /* Training examples over the batch: Fashion-MNIST 60000 / 64. */
        r.steps_per_epoch = !strcmp(data, "synthetic") ? 2048 / cfg.batch
                                                       : 60000 / cfg.batch;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r.maxrss_kb = ru.ru_maxrss;
    remove_run(out);
    rmdir(dir);
    return r;
}

/* The same in a child process, so that each run's peak memory is its own. */
static result run_child(const config *c, int64_t steps, int threads,
                        const char *data, const char *data_dir, int epochs)
{
    result r;
    memset(&r, 0, sizeof r);
    int fd[2];
    if (pipe(fd)) {
        snprintf(r.error, sizeof r.error, "pipe: %s", strerror(errno));
        return r;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(r.error, sizeof r.error, "fork: %s", strerror(errno));
        return r;
    }
    if (pid == 0) {
        close(fd[0]);
        result mine = run_here(c, steps, threads, data, data_dir, epochs);
        ssize_t w = write(fd[1], &mine, sizeof mine);
        _exit(w == (ssize_t)sizeof mine ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], &r, sizeof r);
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    if (got != (ssize_t)sizeof r) {
        memset(&r, 0, sizeof r);
        snprintf(r.error, sizeof r.error, "the child died (status %d)", status);
    }
    return r;
}

typedef struct timing {
    int ok;
    double cpu_step, wall_step, median_step, fixed_wall;
    long maxrss_kb;
    int64_t steps_per_epoch;
} timing;

/* Time per step by the difference of a short and a long run. */
static timing time_config(const config *c, int64_t n0, int64_t n, int threads,
                          const char *data, const char *data_dir)
{
    timing t;
    memset(&t, 0, sizeof t);
    result a = run_child(c, n0, threads, data, data_dir, 1);
    result b = a.ok ? run_child(c, n, threads, data, data_dir, 1) : a;
    if (!a.ok || !b.ok) {
        fprintf(stderr, "bench_train: %s: %s\n", c->label, a.ok ? b.error : a.error);
        return t;
    }
    t.ok = 1;
    t.cpu_step = (b.cpu - a.cpu) / (double)(n - n0);
    t.wall_step = (b.wall - a.wall) / (double)(n - n0);
    t.median_step = b.step_median;
    /* The fixed part (data, evaluation, files) runs on one thread: its
     * CPU time is its duration on an idle machine. */
    t.fixed_wall = a.cpu - (double)n0 * t.cpu_step;
    t.maxrss_kb = b.maxrss_kb;
    t.steps_per_epoch = b.steps_per_epoch;
    return t;
}

int main(int argc, char **argv)
{
    int64_t n = 24, n0 = 4;
    int threads = 1, rounds = 3;
    bool quick = false, full_epoch = false;
    const char *data_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            n = strtoll(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = true, n = 8, n0 = 2, rounds = 1;
        else if (!strcmp(argv[i], "--data-dir") && i + 1 < argc)
            data_dir = argv[++i];
        else if (!strcmp(argv[i], "--full-epoch"))
            full_epoch = true;
        else {
            fprintf(stderr, "usage: bench_train [--steps N] [--rounds R] "
                    "[--threads T] [--quick] [--data-dir DIR] [--full-epoch]\n");
            return 2;
        }
    }
    if (n <= n0 || threads < 1 || rounds < 1) {
        fprintf(stderr, "bench_train: --steps must exceed %lld, --threads and "
                "--rounds >= 1\n", (long long)n0);
        return 2;
    }

    printf("libemu %s: one training step (batch 64, synthetic 28x28), "
           "%lld - %lld steps, %d thread%s, best of %d\n", EMU_VERSION_STRING,
           (long long)n, (long long)n0, threads, threads > 1 ? "s" : "", rounds);
    timing ts[NCONFIGS];
    memset(ts, 0, sizeof ts);
    for (int round = 0; round < rounds; round++)
        for (int i = 0; i < NCONFIGS; i++) {
            if (quick && !configs[i].cnn_row)
                continue;
            timing t = time_config(&configs[i], n0, n, threads, "synthetic", NULL);
            if (!t.ok)
                continue;
            if (!ts[i].ok) {
                ts[i] = t;
                continue;
            }
            ts[i].cpu_step = fmin(ts[i].cpu_step, t.cpu_step);
            ts[i].wall_step = fmin(ts[i].wall_step, t.wall_step);
            ts[i].median_step = fmin(ts[i].median_step, t.median_step);
            if (t.maxrss_kb > ts[i].maxrss_kb)
                ts[i].maxrss_kb = t.maxrss_kb;
        }
    printf("%-22s %10s %10s %10s %9s %9s\n", "configuration", "cpu ms", "wall ms",
           "median ms", "cpu/fp32", "peak MB");
    const double base = ts[0].ok ? ts[0].cpu_step : NAN;
    for (int i = 0; i < NCONFIGS; i++)
        if (ts[i].ok)
            printf("%-22s %10.1f %10.1f %10.1f %9.2f %9.1f\n", configs[i].label,
                   1e3 * ts[i].cpu_step, 1e3 * ts[i].wall_step,
                   1e3 * ts[i].median_step, ts[i].cpu_step / base,
                   (double)ts[i].maxrss_kb / 1024.0);
    printf("target: the fast-mode presets (fp16-mpt, bf16-sr) at most 2x fp32\n");
    for (int i = 1; i < 3; i++)
        if (ts[i].ok)
            printf("  %-20s %.2fx %s\n", configs[i].label, ts[i].cpu_step / base,
                   ts[i].cpu_step <= 2.0 * base ? "(met)" : "(NOT met)");
    if (quick)
        return 0;

    /* One epoch of the CNN on Fashion-MNIST, fp16-mpt, fast accumulator. */
    const char *dir = data_dir ? data_dir : EMU_FASHION_MNIST_DIR;
    char probe[600];
    struct stat st;
    snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", dir);
    if (stat(probe, &st)) {
        printf("Fashion-MNIST not found in %s: no epoch figure\n", dir);
        return 0;
    }
    const config *c = &configs[1];
    printf("\none epoch of the CNN on Fashion-MNIST (60000 images, batch 64), "
           "fp16-mpt, fast accumulator:\n");
    for (int t = 1; t <= 2; t++) {
        if (full_epoch) {
            result r = run_child(c, 0, t, "fashion-mnist", data_dir, 1);
            if (!r.ok) {
                fprintf(stderr, "bench_train: epoch: %s\n", r.error);
                continue;
            }
            printf("  %d thread%s: %.1f s wall (%.1f s cpu), measured, peak %.1f MB\n",
                   t, t > 1 ? "s" : " ", r.wall, r.cpu, (double)r.maxrss_kb / 1024.0);
        } else {
            timing e = time_config(c, n0, n, t, "fashion-mnist", data_dir);
            for (int round = 1; round < rounds && e.ok; round++) {
                timing f = time_config(c, n0, n, t, "fashion-mnist", data_dir);
                if (f.ok) {
                    e.cpu_step = fmin(e.cpu_step, f.cpu_step);
                    e.median_step = fmin(e.median_step, f.median_step);
                    e.fixed_wall = fmin(e.fixed_wall, f.fixed_wall);
                }
            }
            if (!e.ok)
                continue;
            /* One thread: CPU time per step.  More: the median of the
             * steps' wall times (a difference of two wall times is at the
             * mercy of the machine's load). */
            double step = t > 1 ? e.median_step : e.cpu_step;
            double epoch = (double)e.steps_per_epoch * step + e.fixed_wall;
            printf("  %d thread%s: %.1f ms/step, %lld steps + %.1f s load and "
                   "test = %.0f s (%.1f min), extrapolated; peak %.1f MB\n", t,
                   t > 1 ? "s" : " ", 1e3 * step, (long long)e.steps_per_epoch,
                   e.fixed_wall, epoch, epoch / 60.0, (double)e.maxrss_kb / 1024.0);
        }
        fflush(stdout);
    }
    printf("target: a few minutes on 2 cores\n");
    return 0;
}
