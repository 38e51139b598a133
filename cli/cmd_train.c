/*
 * cmd_train.c — `emu train`: a training run in any precision policy, with
 * every op measured, written to a results folder.
 */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void help(void)
{
    printf(
        "Usage: emu train [--preset NAME] [options]\n"
        "       emu train --resume DIR [--threads N] [--quiet]\n"
        "\n"
        "Trains a model with every tensor op emulated in the formats of a\n"
        "precision policy, measuring each op (underflow, overflow, swamping,\n"
        "histograms, error against MPFR), and writes a results folder.\n"
        "\n"
        "Policy:\n"
        "  --preset NAME        fp32 fp16-mpt fp16-no-master fp16-no-scaling\n"
        "                       bf16-nearest bf16-sr bf16-kahan bf16-fp32w\n"
        "                       fp8-e5m2 fp8-hybrid adaptive layerwise\n"
        "                       fp8-delayed fp8-current mxfp8 mxfp4 nvfp4\n"
        "                       (default fp16-mpt)\n"
        "  --set KEY=VALUE      override a policy field (repeatable), e.g.\n"
        "                       weight=e4m3  act_grad.mode=sr  master=none\n"
        "                       accum=sequential,acc=binary16  scaling=static\n"
        "                       scale=1024  exempt=first+last  update=kahan\n"
        "                       scaling=layerwise target=1e-3 layer_max=16\n"
        "                       total_max=1024 (Zhao et al.'s per-layer rule)\n"
        "                       q.all=mxfp6-e3m2  q.act_grad.mode=sr\n"
        "                       tensor_scaling=delayed,history=64,margin=1\n"
        "                       norm_stats=binary32  softmax=bfloat16|activation\n"
        "                       loss=binary32  softmax.mode=sr (op classes)\n"
        "                       attn_quant=yes|no (scaled operands in attention)\n"
        "                       rht=wgrad|backward rht_block=16 rht_seed=0\n"
        "                       (random Hadamard transform of FP4 recipes)\n"
        "  --config FILE        'key = value' lines, each key once: any option\n"
        "                       below (without --) or policy key; command-line\n"
        "                       options win\n"
        "Model and data:\n"
        "  --model ARCH         mlp:784-256-128-10 (default), mlp:784-128x8-10,\n"
        "                       cnn (LeNet-style), cnn:6-16-120-84, mlp-gelu:...,\n"
        "                       resnet:N (N 1..9 blocks per stage; resnet:1 is\n"
        "                       ResNet-8, resnet:3 ResNet-20); language models:\n"
        "                       gpt (gpt:4-128-4-64), gpt:L-D-H-T, lstm:L-H\n"
        "  --data NAME          synthetic (default, generated in code) or\n"
        "                       fashion-mnist (Debian's dataset-fashion-mnist);\n"
        "                       for language models text (stories generated in\n"
        "                       code) or fortunes (Debian's package fortunes)\n"
        "  --data-dir DIR       where the Fashion-MNIST .gz files are; fortunes:\n"
        "                       a text file or folder instead of the default set\n"
        "  --data-max-bytes N   fortunes: the most text read, all files together\n"
        "                       (default 268435456 = 256 MiB); more is refused\n"
        "  --train-examples N   use the first N training examples (synthetic:\n"
        "  --test-examples N    generate N; defaults 6000 and 1000); text: N\n"
        "                       characters (defaults 1000000 and 100000)\n"
        "  --seq-len T          language models: window length (gpt: its T;\n"
        "                       lstm: 64)\n"
        "  --eval-windows N     language models: validation windows scored at\n"
        "                       each evaluation (256)\n"
        "Optimisation:\n"
        "  --epochs N (1)  --steps N (stop early)  --batch N (64)\n"
        "  --optimizer sgd|adam  --lr X (0.02)  --momentum X (0.9)\n"
        "  --weight-decay X (0)  --schedule constant|step|cosine\n"
        "  --lr-final X (cosine: final lr; step: factor)  --lr-step N\n"
        "  --lr-schedule, --lr-min  the same as --schedule, --lr-final\n"
        "  --warmup N (0)       lr rises linearly to --lr over the first N\n"
        "                       steps, then the schedule runs over the rest\n"
        "  --clip-norm C (0: off)  scale the gradients to global L2 norm C\n"
        "                       when it is larger (clip_grad_norm_); the norm\n"
        "                       goes to steps.csv's grad_norm column\n"
        "  --loss-mult X        multiply the loss by X, a power of two (2^-12\n"
        "                       mimics the tiny gradients of SSD); divided out\n"
        "                       with the loss scale before the update\n"
    );
    printf(
        "Measurement and output:\n"
        "  --seed N (1)  --ref-rate X (fraction of outputs checked with MPFR, 0)\n"
        "  --stats-every N (50)  --checkpoint-every N (500)\n"
        "  --hist-every N       measure the log2 histograms (hist.csv) every\n"
        "                       N steps (default: --stats-every's; 1: every\n"
        "                       step); the counters are measured every step\n"
        "  --threads N (1)      threads for the binary32 GEMMs' row blocks and\n"
        "                       the choke point's passes; the same results\n"
        "  --out DIR (runs/latest): a new or empty folder, or a run's\n"
        "  --force              replace the run in --out (never other files)\n"
        "  --resume DIR         continue a run from its checkpoint (written\n"
        "                       at the start, every --checkpoint-every steps\n"
        "                       and on Ctrl-C or SIGTERM, exit 130 or 143)\n"
        "  --quiet              no progress output\n"
        "Weights (safetensors files, see 'emu weights'):\n"
        "  --init-from FILE     start from these weights instead of the random\n"
        "                       initialisation (names and shapes must be the\n"
        "                       model's); a resumed run takes its weights from\n"
        "                       the checkpoint and does not read FILE again\n"
        "  --export FILE        copy the final weights to FILE as well (every\n"
        "                       completed run writes DIR/weights.safetensors);\n"
        "                       may be given with --resume\n"
        "\n"
        "Examples: emu train --preset bf16-sr --model cnn --epochs 2 --out runs/sr\n"
        "          emu train --preset bf16-sr --model gpt --data text --steps 500\n"
        "                    --optimizer adam --lr 1e-3 --batch 16 --out runs/gpt\n");
}

static const cli_opt opts[] = {
    { "preset", 0, true },        { "set", 0, true },
    { "config", 0, true },        { "model", 0, true },
    { "data", 0, true },          { "data-dir", 0, true },
    { "train-examples", 0, true }, { "test-examples", 0, true },
    { "epochs", 0, true },        { "steps", 0, true },
    { "batch", 0, true },         { "optimizer", 0, true },
    { "lr", 0, true },            { "momentum", 0, true },
    { "weight-decay", 0, true },  { "schedule", 0, true },
    { "lr-final", 0, true },      { "lr-step", 0, true },
    { "loss-mult", 0, true },     { "seed", 0, true },
    { "ref-rate", 0, true },      { "stats-every", 0, true },
    { "checkpoint-every", 0, true }, { "threads", 0, true },
    { "out", 0, true },           { "force", 0, false },
    { "resume", 0, true },        { "quiet", 0, false },
    { "help", 'h', false },       { "init-from", 0, true },
    { "export", 0, true },        { "lr-schedule", 0, true },
    { "lr-min", 0, true },        { "warmup", 0, true },
    { "clip-norm", 0, true },     { "seq-len", 0, true },
    { "eval-windows", 0, true },  { "data-max-bytes", 0, true },
    { "hist-every", 0, true },
    { NULL, 0, false },
};
enum {
    O_PRESET, O_SET, O_CONFIG, O_MODEL, O_DATA, O_DATA_DIR, O_TRAIN_N, O_TEST_N,
    O_EPOCHS, O_STEPS, O_BATCH, O_OPT, O_LR, O_MOMENTUM, O_WD, O_SCHEDULE,
    O_LR_FINAL, O_LR_STEP, O_LOSS_MULT, O_SEED, O_REF_RATE, O_STATS_EVERY,
    O_CKPT_EVERY, O_THREADS, O_OUT, O_FORCE, O_RESUME, O_QUIET, O_HELP,
    O_INIT_FROM, O_EXPORT, O_LR_SCHEDULE, O_LR_MIN, O_WARMUP, O_CLIP_NORM,
    O_SEQ_LEN, O_EVAL_WINDOWS, O_DATA_MAX_BYTES, O_HIST_EVERY
};

/* What a real option must satisfy. */
typedef enum real_rule { R_POSITIVE, R_NONNEG, R_UNIT, R_BELOW_ONE } real_rule;

/* `where` names the value for messages: "--lr" on the command line,
 * "run.cfg:3: lr" in a config file. */
static double parse_real(const char *where, const char *s, real_rule rule)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || isnan(v))
        cli_usage_error("train", "%s: '%s' is not a number", where, s);
    if (isinf(v) || (errno == ERANGE && fabs(v) > 1.0))
        cli_usage_error("train", "%s: '%s' is not finite", where, s);
    if (errno == ERANGE)
        cli_usage_error("train", "%s: '%s' underflows binary64", where, s);
    static const char *const rules[] = {
        [R_POSITIVE] = "must be > 0", [R_NONNEG] = "must be >= 0",
        [R_UNIT] = "must lie in [0, 1]", [R_BELOW_ONE] = "must lie in [0, 1)",
    };
    bool ok = rule == R_POSITIVE ? v > 0.0
              : rule == R_NONNEG ? v >= 0.0
              : rule == R_UNIT   ? v >= 0.0 && v <= 1.0
                                 : v >= 0.0 && v < 1.0;
    if (!ok)
        cli_usage_error("train", "%s: '%s' %s", where, s, rules[rule]);
    return v;
}

static long parse_count(const char *where, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        cli_usage_error("train", "%s: '%s' is not a whole number in %ld..%ld",
                        where, s, lo, hi);
    return v;
}

enum { MAX_SETTINGS = 64 };

typedef struct settings {
    emu_train_config cfg;
    const char *sets[MAX_SETTINGS];    /* policy overrides, in order          */
    const char *set_where[MAX_SETTINGS]; /* "--set" or "run.cfg:3"          */
    char *owned[3 * MAX_SETTINGS];     /* copies of config-file text          */
    int nsets, nowned;
    bool have_preset;
    const char *export_to;             /* --export FILE, or NULL             */
} settings;

static char *own(settings *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static char *own(settings *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!p || s->nowned == 3 * MAX_SETTINGS)
        cli_usage_error("train", "out of memory");
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s->owned[s->nowned++] = p;
}

/* Applies one option (by index) to s; where names it for messages. */
static void apply(settings *s, int o, const char *val, const char *where)
{
    emu_train_config *c = &s->cfg;
    switch (o) {
    case O_PRESET:
        snprintf(c->preset, sizeof c->preset, "%s", val);
        s->have_preset = true;
        break;
    case O_SET:
        if (s->nsets == MAX_SETTINGS)
            cli_usage_error("train", "%s: more than %d policy settings", where,
                            MAX_SETTINGS);
        s->set_where[s->nsets] = where;
        s->sets[s->nsets++] = val;
        break;
    case O_MODEL: snprintf(c->arch, sizeof c->arch, "%s", val); break;
    case O_DATA:
        if (strcmp(val, "synthetic") && strcmp(val, "fashion-mnist") &&
            strcmp(val, "text") && strcmp(val, "fortunes"))
            cli_usage_error("train", "%s: '%s' is not synthetic, "
                            "fashion-mnist, text or fortunes", where, val);
        snprintf(c->data, sizeof c->data, "%s", val);
        break;
    case O_DATA_DIR: snprintf(c->data_dir, sizeof c->data_dir, "%s", val); break;
    case O_TRAIN_N: c->train_examples = (size_t)parse_count(where, val, 1, 10000000); break;
    case O_TEST_N: c->test_examples = (size_t)parse_count(where, val, 1, 10000000); break;
    case O_EPOCHS: c->epochs = (int)parse_count(where, val, 1, 100000); break;
    case O_STEPS: c->max_steps = parse_count(where, val, 1, 1L << 40); break;
    case O_BATCH: c->batch = (int)parse_count(where, val, 1, 65536); break;
    case O_OPT:
        if (!strcmp(val, "sgd")) c->opt = EMU_OPT_SGD;
        else if (!strcmp(val, "adam")) c->opt = EMU_OPT_ADAM;
        else cli_usage_error("train", "%s: '%s' is not sgd or adam", where, val);
        break;
    case O_LR: c->lr = parse_real(where, val, R_POSITIVE); break;
    case O_MOMENTUM: c->momentum = parse_real(where, val, R_BELOW_ONE); break;
    case O_WD: c->weight_decay = parse_real(where, val, R_NONNEG); break;
    case O_SCHEDULE:
    case O_LR_SCHEDULE:
        if (!strcmp(val, "constant")) c->schedule = EMU_LR_CONSTANT;
        else if (!strcmp(val, "step")) c->schedule = EMU_LR_STEP;
        else if (!strcmp(val, "cosine")) c->schedule = EMU_LR_COSINE;
        else cli_usage_error("train", "%s: '%s' is not constant, step or "
                             "cosine", where, val);
        break;
    case O_WARMUP: c->warmup = parse_count(where, val, 0, 1L << 40); break;
    case O_CLIP_NORM: c->clip_norm = parse_real(where, val, R_NONNEG); break;
    case O_SEQ_LEN: c->seq_len = (int)parse_count(where, val, 1, 65536); break;
    case O_EVAL_WINDOWS:
        c->eval_windows = (size_t)parse_count(where, val, 1, 10000000);
        break;
    case O_DATA_MAX_BYTES:
        c->data_max_bytes = (size_t)parse_count(where, val, 1, 1L << 40);
        break;
    case O_LR_MIN:
    case O_LR_FINAL: c->lr_final = parse_real(where, val, R_NONNEG); break;
    case O_LR_STEP: c->lr_step = parse_count(where, val, 1, 1L << 40); break;
    case O_LOSS_MULT: c->loss_mult = parse_real(where, val, R_POSITIVE); break;
    case O_SEED: c->seed = cli_parse_u64("train", where, val); break;
    case O_REF_RATE: c->ref_rate = parse_real(where, val, R_UNIT); break;
    case O_STATS_EVERY: c->stats_every = (int)parse_count(where, val, 0, 1 << 30); break;
    case O_HIST_EVERY: c->hist_every = (int)parse_count(where, val, 1, 1 << 30); break;
    case O_CKPT_EVERY: c->checkpoint_every = (int)parse_count(where, val, 0, 1 << 30); break;
    case O_THREADS: c->threads = (int)parse_count(where, val, 1, 256); break;
    case O_OUT: snprintf(c->out_dir, sizeof c->out_dir, "%s", val); break;
    case O_INIT_FROM:
        if (!*val || strlen(val) >= sizeof c->init_from)
            cli_usage_error("train", "%s: '%.60s' is empty or longer than %zu "
                            "bytes", where, val, sizeof c->init_from - 1);
        snprintf(c->init_from, sizeof c->init_from, "%s", val);
        break;
    case O_EXPORT:
        if (!*val)
            cli_usage_error("train", "%s: an empty file name", where);
        s->export_to = val;
        break;
    case O_FORCE: c->force = true; break;
    case O_QUIET: c->quiet = true; break;
    default: break;
    }
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && strchr(" \t\r\n", s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* A config file: "key = value" lines, '#' comments.  Keys are the long
 * options (without --) or policy keys (as --set takes them), each at most
 * once; messages name the file and line. */
static void read_config(settings *s, const char *path)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        cli_usage_error("train", "--config %s: %s", path, strerror(errno));
    char line[1024];
    int lineno = 0, nkeys = 0;
    struct { char *key; int line; } seen[MAX_SETTINGS];
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(fp))
            cli_usage_error("train", "%s:%d: line too long", path, lineno);
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *t = trim(line);
        if (!*t)
            continue;
        char *eq = strchr(t, '=');
        if (!eq)
            cli_usage_error("train", "%s:%d: expected 'key = value'", path, lineno);
        *eq = '\0';
        char *key = trim(t), *val = trim(eq + 1);
        int o = -1;
        for (int i = 0; opts[i].name; i++)
            if (!strcmp(opts[i].name, key))
                o = i;
        if (o == O_CONFIG || o == O_RESUME || o == O_HELP)
            cli_usage_error("train", "%s:%d: '%s' cannot be set in a config file",
                            path, lineno, key);
        for (int i = 0; i < nkeys; i++)
            if (!strcmp(seen[i].key, key))
                cli_usage_error("train", "%s:%d: '%s' is set again (first at "
                                "%s:%d)", path, lineno, key, path, seen[i].line);
        if (nkeys == MAX_SETTINGS)
            cli_usage_error("train", "%s:%d: more than %d settings", path,
                            lineno, MAX_SETTINGS);
        seen[nkeys].key = own(s, "%s", key);
        seen[nkeys++].line = lineno;
        if (o >= 0) {
            if (!opts[o].takes_value && strcmp(val, "yes") && strcmp(val, "true"))
                continue; /* "force = no" */
            apply(s, o, own(s, "%s", val), own(s, "%s:%d: %s", path, lineno, key));
        } else {
            /* A policy key: checked when the policy is built. */
            apply(s, O_SET, own(s, "%s=%s", key, val),
                  own(s, "%s:%d:", path, lineno));
        }
    }
    /* fgets fails on a folder (EISDIR), which would otherwise read as an
     * empty file. */
    if (ferror(fp))
        cli_usage_error("train", "--config %s: cannot read: %s", path,
                        strerror(errno));
    fclose(fp);
}

/* The first SIGINT or SIGTERM asks the run to stop after its step, with a
 * checkpoint; a second one (the handler is reset) ends the process at
 * once, as the user asked twice. */
static volatile sig_atomic_t caught;

static void on_signal(int sig)
{
    caught = sig;
    emu_train_stop(sig);
}

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* --export FILE: a copy of the run's weights.safetensors, written as
 * every output file is (atomically; a device or FIFO in place). */
static int export_weights(const char *dir, const char *to)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    FILE *in = fopen(path, "rb");
    if (!in) {
        cli_error("train", "--export %s: cannot read %s: %s", to, path,
                  strerror(errno));
        return -1;
    }
    cli_output out;
    if (cli_output_open(&out, "train", to)) {
        fclose(in);
        return -1;
    }
    char buf[65536];
    size_t got;
    bool bad = false;
    while ((got = fread(buf, 1, sizeof buf, in)) > 0)
        bad |= fwrite(buf, 1, got, out.fp) != got;
    bad |= ferror(in) != 0;
    fclose(in);
    if (bad) {
        cli_error("train", "--export %s: cannot copy %s", to, path);
        cli_output_abort(&out);
        return -1;
    }
    return cli_output_commit(&out, "train");
}

int cmd_train(int argc, char **argv)
{
    settings s;
    memset(&s, 0, sizeof s);
    emu_train_config_default(&s.cfg);
    const char *resume = NULL, *config = NULL, *val;
    int threads = 0;
    bool quiet = false, others = false;

    /* Two passes: the config file first, then the command line over it. */
    cli_parser p;
    cli_parser_init(&p, "train", argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        if (o == O_HELP) {
            help();
            return CLI_EXIT_OK;
        }
        if (o == CLI_ARG_POSITIONAL)
            cli_usage_error("train", "unexpected argument '%s'", val);
        if (o == O_CONFIG)
            config = val;
    }
    if (config)
        read_config(&s, config);
    cli_parser_init(&p, "train", argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        if (o == O_CONFIG)
            continue;
        if (o == O_RESUME) {
            resume = val;
            continue;
        }
        char where[64];
        snprintf(where, sizeof where, "--%s", opts[o].name);
        if (o == O_THREADS)
            threads = (int)parse_count(where, val, 1, 256);
        else if (o == O_QUIET)
            quiet = true;
        else if (o != O_EXPORT)
            others = true;
        apply(&s, o, val, o == O_SET ? "--set" : where);
    }

    emu_error err;
    char msg[700];
    int rc;
    catch_signals();
    if (resume) {
        if (others || config)
            cli_usage_error("train", "--resume takes the run's settings from its "
                            "checkpoint; only --threads, --quiet and --export "
                            "may be given");
        rc = emu_train_resume(resume, threads, quiet, stderr, &err);
    } else {
        emu_policy policy;
        if (emu_policy_preset(&policy, s.cfg.preset, &err)) {
            emu_error_format(&err, msg, sizeof msg);
            cli_usage_error("train", "%s", msg);
        }
        for (int i = 0; i < s.nsets; i++)
            if (emu_policy_set(&policy, s.sets[i], &err)) {
                emu_error_format(&err, msg, sizeof msg);
                cli_usage_error("train", "%s %s: %s", s.set_where[i],
                                s.sets[i], msg);
            }
        if (emu_policy_validate(&policy, &err)) {
            emu_error_format(&err, msg, sizeof msg);
            cli_usage_error("train", "%s", msg);
        }
        rc = emu_train(&s.cfg, &policy, stderr, &err);
    }
    for (int i = 0; i < s.nowned; i++)
        free(s.owned[i]);
    if (rc == EMU_TRAIN_STOPPED) {
        /* The shell's convention for a death by signal, 128 + its number
         * (the test hook EMU_TRAIN_STOP_AFTER acts as SIGTERM). */
        emu_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "emu train: %s\n", msg);
        return 128 + (caught ? (int)caught : SIGTERM);
    }
    if (rc) {
        emu_error_format(&err, msg, sizeof msg);
        /* A weights file's own message names the file; say which option
         * brought it. */
        if (!resume && s.cfg.init_from[0] && !strcmp(err.where, s.cfg.init_from))
            cli_error("train", "--init-from %s", msg);
        else
            cli_error("train", "%s", msg);
        return CLI_EXIT_USAGE;
    }
    if (s.export_to &&
        export_weights(resume ? resume : s.cfg.out_dir, s.export_to))
        return CLI_EXIT_USAGE;
    return CLI_EXIT_OK;
}
