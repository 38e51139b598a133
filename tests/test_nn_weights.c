/*
 * test_nn_weights.c — a model's tensors by name (PyTorch's state_dict
 * order) and weights files: what one model saves, another of the same
 * architecture loads bit for bit, after which both compute the same loss
 * and gradients bit for bit; a file that does not fit is refused naming
 * each tensor that is missing, extra or mis-shaped, and leaves the model
 * unchanged; the compute copy's rounding of loaded values is counted.
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp */

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

typedef struct net {
    emu_policy p;
    emu_ctx ctx;
    emu_stats stats;
    emu_model m;
} net;

static void net_make(net *n, const char *preset, const char *arch, uint64_t seed)
{
    emu_error err;
    memset(n, 0, sizeof *n);
    if (emu_policy_preset(&n->p, preset, &err))
        ck_abort_msg("policy: %s", err.message);
    emu_stats_init(&n->stats);
    emu_ctx_init(&n->ctx, 1); /* one stochastic stream for every net */
    n->ctx.stats = &n->stats;
    n->ctx.measure = EMU_MEASURE_ALL;
    if (emu_model_build(&n->m, arch, &n->p, 4, 1, 28, 28, 10, seed, &n->ctx, &err))
        ck_abort_msg("build %s: %s", arch, err.message);
}

static void net_free(net *n)
{
    emu_model_free(&n->m);
    emu_stats_free(&n->stats);
}

/* One forward and backward pass on a batch fixed by `seed`. */
static void net_step(net *n, uint64_t seed)
{
    test_rng g = test_rng_make(seed);
    float *x = malloc(n->m.x.n * sizeof *x);
    int labels[4];
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n->m.x.n; i++)
        x[i] = (float)ldexp((double)(test_next(&g) >> 40), -24);
    for (int i = 0; i < 4; i++)
        labels[i] = (int)test_below(&g, 10);
    const emu_rounding rne = { .mode = EMU_RNE };
    if (emu_t_load(&n->ctx, "input", &n->m.x, x, n->m.x.n, &rne) ||
        emu_model_forward(&n->m, &n->ctx, &n->p) ||
        emu_model_backward(&n->m, &n->ctx, &n->p, labels, 1.0f))
        ck_abort_msg("step: %s", n->ctx.err.message);
    free(x);
}

static void temp_path(char *path)
{
    strcpy(path, "/tmp/emu_w_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static bool same_tensor(const emu_tensor *a, const emu_tensor *b)
{
    return a->n == b->n && !memcmp(a->data, b->data, a->n * sizeof *a->data);
}

START_TEST(names_in_state_dict_order)
{
    net n;
    net_make(&n, "fp32", "cnn", 1);
    static const char *const want[] = {
        "conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
        "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
        "fc3.bias",
    };
    ck_assert_int_eq(emu_model_named_count(&n.m), 10);
    int layer = 0;
    for (int i = 0; i < 10; i++) {
        emu_param *p = NULL;
        emu_tensor *b = (emu_tensor *)1;
        const char *name = emu_model_named_at(&n.m, i, &p, &b);
        ck_assert_str_eq(name, want[i]);
        ck_assert_ptr_null(b);
        while (!n.m.layers[layer].has_params)
            layer++;
        ck_assert_ptr_eq(p, i % 2 ? &n.m.layers[layer].bias : &n.m.layers[layer].weight);
        if (i % 2)
            layer++;
    }
    ck_assert_ptr_null(emu_model_named_at(&n.m, 10, NULL, NULL));
    ck_assert_ptr_null(emu_model_named_at(&n.m, -1, NULL, NULL));
    net_free(&n);
}
END_TEST

/* Saved by a model of seed 1, loaded by one of seed 2: the same weights
 * in both copies, and the same loss and gradients on a batch, bit for
 * bit; the file's metadata says what it holds. */
static void round_trip(const char *preset, const char *arch)
{
    char path[32];
    temp_path(path);
    net a, b;
    net_make(&a, preset, arch, 1);
    net_make(&b, preset, arch, 2);
    emu_error err;
    const char *meta[] = { "policy", preset, NULL };
    ck_assert_msg(!emu_model_save_weights_meta(&a.m, path, meta, &err), "%s", err.message);
    ck_assert_msg(!emu_model_load_weights(&b.m, &b.ctx, &b.p, path, &err), "%s",
                  err.message);
    for (int i = 0; i < emu_model_named_count(&a.m); i++) {
        emu_param *pa, *pb;
        emu_model_named_at(&a.m, i, &pa, NULL);
        emu_model_named_at(&b.m, i, &pb, NULL);
        ck_assert(same_tensor(&pa->w, &pb->w));
        if (pa->master.data)
            ck_assert(same_tensor(&pa->master, &pb->master));
    }
    /* The load's ops advanced b's op counter: the stochastic streams of
     * the step must be a's (emu_train rewinds it so). */
    b.ctx.op_index = a.ctx.op_index;
    net_step(&a, 7);
    net_step(&b, 7);
    ck_assert(same_tensor(&a.m.loss, &b.m.loss));
    for (int i = 0; i < emu_model_named_count(&a.m); i++) {
        emu_param *pa, *pb;
        emu_model_named_at(&a.m, i, &pa, NULL);
        emu_model_named_at(&b.m, i, &pb, NULL);
        ck_assert_msg(same_tensor(&pa->g, &pb->g), "%s %s: gradient %d", preset,
                      arch, i);
    }
    emu_tensorfile tf;
    ck_assert_int_eq(emu_tensorfile_read(&tf, path, 0, &err), 0);
    ck_assert_str_eq(emu_tensorfile_meta(&tf, "arch"), arch);
    ck_assert_str_eq(emu_tensorfile_meta(&tf, "policy"), preset);
    ck_assert_str_eq(emu_tensorfile_meta(&tf, "format"), "libemu-weights");
    ck_assert_str_eq(emu_tensorfile_meta(&tf, "libemu_version"), EMU_VERSION_STRING);
    ck_assert_str_eq(emu_tensorfile_meta(&tf, "copy"),
                     a.p.use_master ? "master" : "compute");
    /* A master copy is saved, not its rounding. */
    const emu_tf_tensor *w = emu_tensorfile_find(&tf, "fc1.weight");
    emu_param *p1 = NULL;
    for (int i = 0; i < emu_model_named_count(&a.m); i++) {
        emu_param *pp;
        if (!strcmp(emu_model_named_at(&a.m, i, &pp, NULL), "fc1.weight"))
            p1 = pp;
    }
    const emu_tensor *src = a.p.use_master ? &p1->master : &p1->w;
    for (size_t i = 0; i < w->n; i++)
        ck_assert(w->values[i] == src->data[i]);
    emu_tensorfile_free(&tf);
    net_free(&a);
    net_free(&b);
    unlink(path);
}

START_TEST(round_trips)
{
    round_trip("fp32", "mlp:784-32-10");
    round_trip("fp16-mpt", "cnn:4-8-16-12");
    round_trip("bf16-nearest", "mlp-gelu:784-16x2-10"); /* no master copy */
    round_trip("fp8-e5m2", "mlp:784-16-16-10");        /* exempt layers */
}
END_TEST

/* Writes the model's tensors with `drop` left out, `extra` added and
 * `reshape` given another shape. */
static void write_altered(net *n, const char *path, const char *drop,
                          const char *extra, const char *reshape)
{
    emu_tf_out out[16];
    int k = 0;
    static const float one[1] = { 1.0f };
    for (int i = 0; i < emu_model_named_count(&n->m); i++) {
        emu_param *p;
        const char *name = emu_model_named_at(&n->m, i, &p, NULL);
        if (drop && !strcmp(name, drop))
            continue;
        static char names[16][64];
        snprintf(names[k], sizeof names[k], "%s", name);
        out[k] = (emu_tf_out){ .name = names[k], .ndim = p->w.ndim, .data = p->w.data };
        memcpy(out[k].shape, p->w.shape, sizeof p->w.shape);
        if (reshape && !strcmp(name, reshape)) {
            out[k].shape[0] = 1;
            out[k].shape[1] = p->w.n;
        }
        k++;
    }
    if (extra)
        out[k++] = (emu_tf_out){ .name = extra, .ndim = 1, .shape = { 1 }, .data = one };
    emu_error err;
    ck_assert_msg(!emu_tensorfile_write(path, out, k, NULL, &err), "%s", err.message);
}

START_TEST(misfits_refused)
{
    char path[32];
    temp_path(path);
    net n, other;
    net_make(&n, "fp16-mpt", "mlp:784-32-10", 1);
    net_make(&other, "fp16-mpt", "mlp:784-32-10", 2);
    emu_tensor before;
    emu_error err;
    memset(&before, 0, sizeof before);
    ck_assert_int_eq(emu_tensor_alloc(&before, "copy", EMU_ROLE_WEIGHT,
                                      &n.m.layers[1].weight.w.fmt, 2,
                                      n.m.layers[1].weight.w.shape, &err), 0);
    memcpy(before.data, n.m.layers[1].weight.w.data, before.n * sizeof(float));
    write_altered(&other, path, "fc2.bias", "fc3.weight", "fc1.weight");
    ck_assert_int_eq(emu_model_load_weights(&n.m, &n.ctx, &n.p, path, &err), -1);
    ck_assert_int_eq(err.code, EMU_EDATA);
    ck_assert_str_eq(err.where, path);
    ck_assert_str_eq(err.key, "weights");
    ck_assert_msg(strstr(err.message, "fc1.weight has shape [1, 25088], the model "
                         "[32, 784]") &&
                  strstr(err.message, "fc2.bias is missing") &&
                  strstr(err.message, "fc3.weight is not a tensor of the model"),
                  "%s", err.message);
    /* Nothing was loaded: fc1 (before the misfits) is as it was. */
    ck_assert(same_tensor(&n.m.layers[1].weight.w, &before));
    /* The architecture of another model. */
    net c;
    net_make(&c, "fp16-mpt", "mlp:784-16-10", 1);
    ck_assert_int_eq(emu_model_save_weights(&c.m, path, &err), 0);
    ck_assert_int_eq(emu_model_load_weights(&n.m, &n.ctx, &n.p, path, &err), -1);
    ck_assert_msg(strstr(err.message, "fc1.weight has shape [16, 784], the model [32, 784]"),
                  "%s", err.message);
    /* The policy the model was built with must be the one given. */
    emu_policy nomaster;
    emu_policy_preset(&nomaster, "fp16-no-master", &err);
    ck_assert_int_eq(emu_model_save_weights(&other.m, path, &err), 0);
    ck_assert_int_eq(emu_model_load_weights(&n.m, &n.ctx, &nomaster, path, &err), -1);
    ck_assert_msg(strstr(err.message, "built with a master copy"), "%s", err.message);
    emu_tensor_free(&before);
    net_free(&c);
    net_free(&n);
    net_free(&other);
    unlink(path);
}
END_TEST

/* F16 values are binary32 values; F64 ones must be. */
START_TEST(dtypes_and_rounding)
{
    char path[32];
    temp_path(path);
    net n;
    net_make(&n, "bf16-nearest", "mlp:784-1-10", 1);
    /* A file in F64 by hand: fc1.weight (1, 784) holding 0.1 (no
     * binary32) or 1e300 (beyond binary32) is refused; holding 1 + 2^-20
     * (a binary32, no bfloat16) loads, rounded into bfloat16 and counted. */
    FILE *fp;
    for (int pass = 0; pass < 3; pass++) {
        double v = pass == 2 ? 1.0 + 0x1p-20 : pass ? 1e300 : 0.1;
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"fc1.weight\":{\"dtype\":\"F64\",\"shape\":[1,784],\"data_offsets\":[0,6272]},"
                 "\"fc1.bias\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[6272,6274]},"
                 "\"fc2.weight\":{\"dtype\":\"BF16\",\"shape\":[10,1],\"data_offsets\":[6274,6294]},"
                 "\"fc2.bias\":{\"dtype\":\"F32\",\"shape\":[10],\"data_offsets\":[6294,6334]}}");
        fp = fopen(path, "wb");
        uint64_t hl = strlen(json);
        for (int i = 0; i < 8; i++)
            fputc((int)(hl >> 8 * i & 255), fp);
        fputs(json, fp);
        uint64_t u;
        memcpy(&u, &v, 8);
        for (int e = 0; e < 784; e++)
            for (int i = 0; i < 8; i++)
                fputc((int)(u >> 8 * i & 255), fp);
        fputc(0x00, fp), fputc(0x3c, fp); /* F16 1.0 */
        for (int e = 0; e < 10; e++)
            fputc(0x00, fp), fputc(0x40, fp); /* BF16 2.0 */
        for (int e = 0; e < 40; e++)
            fputc(0, fp);
        fclose(fp);
        emu_error err;
        int rc = emu_model_load_weights(&n.m, &n.ctx, &n.p, path, &err);
        if (pass < 2) {
            ck_assert_int_eq(rc, -1);
            ck_assert_msg(strstr(err.message, pass ? "fc1.weight: element 0, "
                                 "1.0000000000000001e+300, is not a binary32 value"
                                 : "fc1.weight: element 0, 0.10000000000000001, is "
                                 "not a binary32 value"),
                          "%s", err.message);
            continue;
        }
        ck_assert_msg(rc == 0, "%s", err.message);
    }
    const emu_layer *fc1 = &n.m.layers[1];
    ck_assert(fc1->weight.w.data[5] == 1.0f); /* 1 + 2^-20 to nearest bf16 */
    ck_assert(fc1->bias.w.data[0] == 1.0f);
    ck_assert(n.m.layers[3].weight.w.data[9] == 2.0f);
    const emu_site *s = emu_stats_find_name(&n.stats, "fc1.weight.load");
    ck_assert_ptr_nonnull(s);
    double inexact, results;
    ck_assert_int_eq(emu_stats_counter(s, EMU_SPAN_TOTAL, "inexact", &inexact), 0);
    ck_assert_int_eq(emu_stats_counter(s, EMU_SPAN_TOTAL, "results", &results), 0);
    ck_assert(inexact == 784 && results == 784);
    net_free(&n);
    unlink(path);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("nn_weights");
    TCase *tc = tcase_create("weights");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, names_in_state_dict_order);
    tcase_add_test(tc, round_trips);
    tcase_add_test(tc, misfits_refused);
    tcase_add_test(tc, dtypes_and_rounding);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
