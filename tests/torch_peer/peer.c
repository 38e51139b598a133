/*
 * peer.c — libemu's side of the PyTorch peer test (torch_peer.py), as
 * llm.c's test_gpt2 checks its C model against PyTorch's tensors.  Built
 * by tests/CMakeLists.txt, never installed.
 *
 *   peer init ARCH PRESET SEED OUT
 *       the weights a run `emu train --model ARCH --preset PRESET --seed
 *       SEED` starts from (the random initialisation), as a weights file
 *       (a language model: over the 97-character text vocabulary)
 *   peer grad ARCH WEIGHTS SEED NTRAIN NTEST BATCH STEPS OUT
 *       the fp32 preset's model with WEIGHTS loaded: one forward and
 *       backward pass on the first batch of `emu train --seed SEED
 *       --train-examples NTRAIN --test-examples NTEST --batch BATCH` on
 *       the embedded data; OUT holds "loss" (scalar), "logits" (B, K),
 *       "grad.<name>" for every parameter, "after.<name>" for every
 *       buffer (batch norm's running statistics after the pass), and the
 *       first STEPS batches emu train visits, "x.<k>" (B, C, H, W) and
 *       "y.<k>" (B, labels as floats), for the training comparison.
 *       Debugging: PEER_SET=ASSIGNMENT changes the fp32 policy (e.g.
 *       accum=exact); PEER_DUMP=1 adds "dump.y.<layer>" and
 *       "dump.dx.<layer>" (every layer's output and input gradient), to
 *       locate a disagreement layer by layer.
 *   peer lmgrad ARCH WEIGHTS SEED BATCH SEQ VOCAB OUT
 *       a language model (emu_model_build_lm, fp32 preset) with WEIGHTS
 *       loaded: one forward and backward pass on BATCH windows of SEQ
 *       token ids; id i of the inputs is emu_random64(SEED, 1, i) mod
 *       VOCAB and target i emu_random64(SEED, 2, i) mod VOCAB.  OUT holds
 *       "loss", "logits" (B*T, V), "grad.<name>" for every parameter,
 *       "x.0" (B, T) and "y.0" (B*T), ids as floats.  PEER_SET and
 *       PEER_DUMP as for grad.
 *   peer lmbatches SEED NTRAIN NVAL BATCH SEQ STEPS OUT
 *       the windows of the first STEPS steps of `emu train --data text
 *       --seed SEED --train-examples NTRAIN --test-examples NVAL --batch
 *       BATCH --seq-len SEQ` (emu_text_embedded, emu_text_batch):
 *       "x.<k>" (B, T) and "y.<k>" (B*T), ids as floats.
 *
 * Exit status 0, or 1 with a message on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emu/emu.h>

static int die(const char *what, const emu_error *err)
{
    char msg[700];
    emu_error_format(err, msg, sizeof msg);
    fprintf(stderr, "peer: %s: %s\n", what, msg);
    return 1;
}

static long arg_long(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1) {
        fprintf(stderr, "peer: '%s' is not a positive integer\n", s);
        exit(1);
    }
    return v;
}

static int init(const char *arch, const char *preset, uint64_t seed,
                const char *out)
{
    emu_policy p;
    emu_error err;
    emu_ctx ctx;
    emu_model m;
    if (emu_policy_preset(&p, preset, &err))
        return die("preset", &err);
    emu_ctx_init(&ctx, seed);
    /* The embedded data's shape: 1 x 28 x 28, 10 classes; a language
     * model's: the 97-character text vocabulary (its weights do not
     * depend on the window). */
    if (emu_arch_is_lm(arch)
            ? emu_model_build_lm(&m, arch, &p, 1, 1, 97, seed, &ctx, &err)
            : emu_model_build(&m, arch, &p, 1, 1, 28, 28, 10, seed, &ctx, &err))
        return die(arch, &err);
    int rc = emu_model_save_weights(&m, out, &err) ? die(out, &err) : 0;
    emu_model_free(&m);
    return rc;
}

/* Grows a list of tensors to write; names are owned. */
typedef struct outlist {
    emu_tf_out t[1024];
    char *names[1024];
    float *owned[1024];
    int n;
} outlist;

static void add(outlist *o, const char *name, const emu_tensor *t,
                const float *data)
{
    if (o->n == 1024) {
        fprintf(stderr, "peer: too many tensors\n");
        exit(1);
    }
    o->names[o->n] = malloc(strlen(name) + 1);
    strcpy(o->names[o->n], name);
    emu_tf_out *e = &o->t[o->n++];
    e->name = o->names[o->n - 1];
    e->ndim = t->ndim;
    for (int k = 0; k < t->ndim; k++)
        e->shape[k] = t->shape[k];
    e->data = data ? data : t->data;
}

static int grad(const char *arch, const char *weights, uint64_t seed,
                size_t ntrain, size_t ntest, int batch, int steps,
                const char *out)
{
    emu_policy p;
    emu_error err;
    emu_ctx ctx;
    emu_model m;
    emu_dataset train, test;
    if (emu_policy_preset(&p, "fp32", &err))
        return die("preset", &err);
    const char *set = getenv("PEER_SET"); /* debugging: a policy assignment */
    if (set && emu_policy_set(&p, set, &err))
        return die("PEER_SET", &err);
    if (emu_dataset_synthetic(&train, &test, seed, ntrain, ntest, &err))
        return die("data", &err);
    if ((size_t)batch * (size_t)steps > train.n) {
        fprintf(stderr, "peer: %d steps of %d need more than %zu examples\n",
                steps, batch, train.n);
        return 1;
    }
    emu_ctx_init(&ctx, seed);
    if (emu_model_build(&m, arch, &p, batch, train.channels, train.height,
                        train.width, train.classes, seed, &ctx, &err))
        return die(arch, &err);
    if (emu_model_load_weights(&m, &ctx, &p, weights, &err))
        return die(weights, &err);

    /* emu train's batches: consecutive runs of epoch 0's permutation. */
    const size_t es = (size_t)train.channels * (size_t)train.height *
                      (size_t)train.width;
    size_t *perm = malloc(train.n * sizeof *perm);
    float *xs = malloc((size_t)steps * (size_t)batch * es * sizeof *xs);
    float *ys = malloc((size_t)steps * (size_t)batch * sizeof *ys);
    int *labels = malloc((size_t)batch * sizeof *labels);
    outlist *o = calloc(1, sizeof *o);
    if (!perm || !xs || !ys || !labels || !o) {
        fprintf(stderr, "peer: out of memory\n");
        return 1;
    }
    emu_batch_permutation(perm, train.n, seed, 0);
    for (int k = 0; k < steps; k++)
        for (int i = 0; i < batch; i++) {
            size_t e = perm[(size_t)k * (size_t)batch + (size_t)i];
            memcpy(xs + ((size_t)k * (size_t)batch + (size_t)i) * es,
                   train.x + e * es, es * sizeof *xs);
            ys[(size_t)k * (size_t)batch + (size_t)i] = (float)train.y[e];
        }
    for (int i = 0; i < batch; i++)
        labels[i] = (int)ys[i];

    const emu_rounding rne = { .mode = EMU_RNE };
    if (emu_t_load(&ctx, "input", &m.x, xs, m.x.n, &rne) ||
        emu_model_forward(&m, &ctx, &p) ||
        emu_model_backward(&m, &ctx, &p, labels, 1.0f))
        return die("step", &ctx.err);

    add(o, "loss", &m.loss, NULL);
    o->t[o->n - 1].ndim = 0; /* a scalar, as PyTorch's loss */
    add(o, "logits", &m.layers[m.n_layers - 1].y, NULL);
    char name[EMU_TF_NAME_MAX + 16];
    for (int i = 0; i < emu_model_named_count(&m); i++) {
        emu_param *prm;
        emu_tensor *buf;
        const char *n = emu_model_named_at(&m, i, &prm, &buf);
        snprintf(name, sizeof name, "%s.%s", buf ? "after" : "grad", n);
        add(o, name, buf ? buf : &prm->g, NULL);
    }
    if (getenv("PEER_DUMP")) /* debugging: each layer's output and dx */
        for (int i = 0; i < m.n_layers; i++) {
            snprintf(name, sizeof name, "dump.y.%s", m.layers[i].name);
            add(o, name, &m.layers[i].y, NULL);
            if (m.layers[i].dx.data) {
                snprintf(name, sizeof name, "dump.dx.%s", m.layers[i].name);
                add(o, name, &m.layers[i].dx, NULL);
            }
        }
    emu_tensor shape_x = m.x, shape_y;
    memset(&shape_y, 0, sizeof shape_y);
    shape_y.ndim = 1;
    shape_y.shape[0] = (size_t)batch;
    for (int k = 0; k < steps; k++) {
        snprintf(name, sizeof name, "x.%d", k);
        add(o, name, &shape_x, xs + (size_t)k * (size_t)batch * es);
        snprintf(name, sizeof name, "y.%d", k);
        add(o, name, &shape_y, ys + (size_t)k * (size_t)batch);
    }
    const char *meta[] = { "arch", arch, "weights", weights, NULL };
    int rc = emu_tensorfile_write(out, o->t, o->n, meta, &err) ? die(out, &err) : 0;
    for (int i = 0; i < o->n; i++)
        free(o->names[i]);
    free(o);
    free(perm);
    free(xs);
    free(ys);
    free(labels);
    emu_model_free(&m);
    emu_dataset_free(&train);
    emu_dataset_free(&test);
    return rc;
}

static int lmgrad(const char *arch, const char *weights, uint64_t seed,
                  int batch, int seq, int vocab, const char *out)
{
    emu_policy p;
    emu_error err;
    emu_ctx ctx;
    emu_model m;
    if (emu_policy_preset(&p, "fp32", &err))
        return die("preset", &err);
    const char *set = getenv("PEER_SET");
    if (set && emu_policy_set(&p, set, &err))
        return die("PEER_SET", &err);
    emu_ctx_init(&ctx, seed);
    if (emu_model_build_lm(&m, arch, &p, batch, seq, vocab, seed, &ctx, &err))
        return die(arch, &err);
    if (emu_model_load_weights(&m, &ctx, &p, weights, &err))
        return die(weights, &err);
    const size_t R = (size_t)batch * (size_t)seq;
    int *targets = malloc(R * sizeof *targets);
    float *xs = malloc(R * sizeof *xs), *ys = malloc(R * sizeof *ys);
    outlist *o = calloc(1, sizeof *o);
    if (!targets || !xs || !ys || !o) {
        fprintf(stderr, "peer: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < R; i++) {
        m.tokens[i] = (int32_t)(emu_random64(seed, 1, i) % (uint64_t)vocab);
        targets[i] = (int)(emu_random64(seed, 2, i) % (uint64_t)vocab);
        xs[i] = (float)m.tokens[i];
        ys[i] = (float)targets[i];
    }
    if (emu_model_forward(&m, &ctx, &p) ||
        emu_model_backward(&m, &ctx, &p, targets, 1.0f))
        return die("step", &ctx.err);
    add(o, "loss", &m.loss, NULL);
    o->t[o->n - 1].ndim = 0;
    add(o, "logits", &m.layers[m.n_layers - 1].y, NULL);
    char name[EMU_TF_NAME_MAX + 16];
    for (int i = 0; i < emu_model_named_count(&m); i++) {
        emu_param *prm;
        const char *n = emu_model_named_at(&m, i, &prm, NULL);
        snprintf(name, sizeof name, "grad.%s", n);
        add(o, name, &prm->g, NULL);
    }
    if (getenv("PEER_DUMP"))
        for (int i = 0; i < m.n_layers; i++) {
            snprintf(name, sizeof name, "dump.y.%s", m.layers[i].name);
            add(o, name, &m.layers[i].y, NULL);
            if (m.layers[i].dx.data) {
                snprintf(name, sizeof name, "dump.dx.%s", m.layers[i].name);
                add(o, name, &m.layers[i].dx, NULL);
            }
        }
    emu_tensor shape_x, shape_y;
    memset(&shape_x, 0, sizeof shape_x);
    memset(&shape_y, 0, sizeof shape_y);
    shape_x.ndim = 2;
    shape_x.shape[0] = (size_t)batch;
    shape_x.shape[1] = (size_t)seq;
    shape_y.ndim = 1;
    shape_y.shape[0] = R;
    add(o, "x.0", &shape_x, xs);
    add(o, "y.0", &shape_y, ys);
    const char *meta[] = { "arch", arch, "weights", weights, NULL };
    int rc = emu_tensorfile_write(out, o->t, o->n, meta, &err) ? die(out, &err) : 0;
    for (int i = 0; i < o->n; i++)
        free(o->names[i]);
    free(o);
    free(targets);
    free(xs);
    free(ys);
    emu_model_free(&m);
    return rc;
}

static int lmbatches(uint64_t seed, size_t ntrain, size_t nval, int batch,
                     int seq, int steps, const char *out)
{
    emu_error err;
    emu_textset train, val;
    if (emu_text_embedded(&train, &val, seed, ntrain, nval, &err))
        return die("text", &err);
    if (emu_text_check_context(&train, seq, &err))
        return die("text", &err);
    const size_t R = (size_t)batch * (size_t)seq;
    int32_t *x = malloc(R * sizeof *x), *y = malloc(R * sizeof *y);
    float *fx = malloc((size_t)steps * R * sizeof *fx);
    float *fy = malloc((size_t)steps * R * sizeof *fy);
    outlist *o = calloc(1, sizeof *o);
    if (!x || !y || !fx || !fy || !o) {
        fprintf(stderr, "peer: out of memory\n");
        return 1;
    }
    emu_tensor shape_x, shape_y;
    memset(&shape_x, 0, sizeof shape_x);
    memset(&shape_y, 0, sizeof shape_y);
    shape_x.ndim = 2;
    shape_x.shape[0] = (size_t)batch;
    shape_x.shape[1] = (size_t)seq;
    shape_y.ndim = 1;
    shape_y.shape[0] = R;
    char name[32];
    for (int k = 0; k < steps; k++) {
        emu_text_batch(&train, batch, seq, seed, (uint64_t)k, x, y);
        for (size_t i = 0; i < R; i++) {
            fx[(size_t)k * R + i] = (float)x[i];
            fy[(size_t)k * R + i] = (float)y[i];
        }
        snprintf(name, sizeof name, "x.%d", k);
        add(o, name, &shape_x, fx + (size_t)k * R);
        snprintf(name, sizeof name, "y.%d", k);
        add(o, name, &shape_y, fy + (size_t)k * R);
    }
    const char *meta[] = { "data", "text", "source", train.source, NULL };
    int rc = emu_tensorfile_write(out, o->t, o->n, meta, &err) ? die(out, &err) : 0;
    for (int i = 0; i < o->n; i++)
        free(o->names[i]);
    free(o);
    free(x);
    free(y);
    free(fx);
    free(fy);
    emu_textset_free(&train);
    emu_textset_free(&val);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "init"))
        return init(argv[2], argv[3], (uint64_t)arg_long(argv[4]), argv[5]);
    if (argc == 10 && !strcmp(argv[1], "grad"))
        return grad(argv[2], argv[3], (uint64_t)arg_long(argv[4]),
                    (size_t)arg_long(argv[5]), (size_t)arg_long(argv[6]),
                    (int)arg_long(argv[7]), (int)arg_long(argv[8]), argv[9]);
    if (argc == 9 && !strcmp(argv[1], "lmgrad"))
        return lmgrad(argv[2], argv[3], (uint64_t)arg_long(argv[4]),
                      (int)arg_long(argv[5]), (int)arg_long(argv[6]),
                      (int)arg_long(argv[7]), argv[8]);
    if (argc == 9 && !strcmp(argv[1], "lmbatches"))
        return lmbatches((uint64_t)arg_long(argv[2]), (size_t)arg_long(argv[3]),
                         (size_t)arg_long(argv[4]), (int)arg_long(argv[5]),
                         (int)arg_long(argv[6]), (int)arg_long(argv[7]), argv[8]);
    fprintf(stderr, "usage: peer init ARCH PRESET SEED OUT\n"
                    "       peer grad ARCH WEIGHTS SEED NTRAIN NTEST BATCH STEPS OUT\n"
                    "       peer lmgrad ARCH WEIGHTS SEED BATCH SEQ VOCAB OUT\n"
                    "       peer lmbatches SEED NTRAIN NVAL BATCH SEQ STEPS OUT\n");
    return 1;
}
