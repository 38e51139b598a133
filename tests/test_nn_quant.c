/*
 * test_nn_quant.c — the scaled presets inside the language models' composite
 * ops: the LSTM's gate GEMMs and (policy attn_quant) attention's batched
 * products quantize their operands through the ops' operand hooks
 * (emu_operand_hook).
 *
 * Sites: each quantized operand is a "quantize" site of the right role
 * and scaled format, named as nn_model.c documents.  Values: the layer's
 * outputs and gradients equal, bit for bit, the op run again on the same
 * inputs with a hook written here from the library's block quantizer
 * (emu_scaled_quantize along the product's reduction axis, then the
 * dequantized values with their tensor scale, rounded once into
 * binary32).  The presets' stochastic gradient rounding is set to
 * nearest-even there, so that the reference needs no random words; every
 * tensor scale of these presets is a current one (the operand's own amax),
 * so the reference chooses it the same way whichever use comes first.
 * An identity hook leaves both ops' results unchanged (the hook's
 * plumbing reads what it replaced, nothing else).
 */
#define _POSIX_C_SOURCE 200809L /* open_memstream */

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/scaled.h"
#include "nn_internal.h"
#include "testutil.h"

/* ---- fixtures ------------------------------------------------------------ */

typedef struct fixture {
    emu_policy p;
    emu_ctx ctx;
    emu_model m;
    emu_stats st;
    int *targets;
} fixture;

/* arch on B windows of S tokens of a vocabulary of V, under preset and
 * the assignments sets (NULL-terminated, may be NULL); one step run. */
static void fx_run(fixture *f, const char *arch, const char *preset,
                   const char *const *sets, int B, int S, int V, uint64_t seed)
{
    emu_error err;
    memset(f, 0, sizeof *f);
    if (emu_policy_preset(&f->p, preset, &err))
        ck_abort_msg("preset %s: %s", preset, err.message);
    for (int i = 0; sets && sets[i]; i++)
        if (emu_policy_set(&f->p, sets[i], &err))
            ck_abort_msg("%s: %s", sets[i], err.message);
    if (emu_policy_validate(&f->p, &err))
        ck_abort_msg("policy: %s", err.message);
    emu_ctx_init(&f->ctx, seed);
    emu_stats_init(&f->st);
    f->ctx.stats = &f->st;
    if (emu_model_build_lm(&f->m, arch, &f->p, B, S, V, seed, &f->ctx, &err))
        ck_abort_msg("build %s: %s: %s", arch, err.key, err.message);
    test_rng g = test_rng_make(seed);
    f->targets = malloc((size_t)(B * S) * sizeof *f->targets);
    ck_assert_ptr_nonnull(f->targets);
    for (int i = 0; i < B * S; i++) {
        f->m.tokens[i] = (int32_t)test_below(&g, (uint64_t)V);
        f->targets[i] = (int)test_below(&g, (uint64_t)V);
    }
    /* nonzero biases: the gate's bias terms must stay unquantized */
    for (int i = 0; i < f->m.n_layers; i++) {
        emu_layer *l = &f->m.layers[i];
        if (l->has_params && l->has_bias)
            for (size_t j = 0; j < l->bias.w.n; j++)
                l->bias.w.data[j] =
                    (float)ldexp((double)(test_next(&g) >> 44) - 524288.0, -21);
    }
    if (emu_model_forward(&f->m, &f->ctx, &f->p) ||
        emu_model_backward(&f->m, &f->ctx, &f->p, f->targets, 1.0f))
        ck_abort_msg("step: %s: %s", f->ctx.err.key, f->ctx.err.message);
}

static void fx_free(fixture *f)
{
    f->ctx.stats = NULL;
    emu_stats_free(&f->st);
    emu_model_free(&f->m);
    free(f->targets);
}

static emu_layer *layer(fixture *f, const char *name)
{
    for (int i = 0; i < f->m.n_layers; i++)
        if (!strcmp(f->m.layers[i].name, name))
            return &f->m.layers[i];
    ck_abort_msg("no layer %s", name);
    return NULL;
}

/* Site layer.tag is a quantize site of role and the policy's format for
 * that operand kind. */
static void want_site(const fixture *f, const char *lname, const char *tag,
                      emu_role role, const emu_operand_quant *q)
{
    char name[96];
    snprintf(name, sizeof name, "%s.%s", lname, tag);
    const emu_site *s = emu_stats_find(&f->st, name, role);
    ck_assert_msg(s != NULL, "%s: no site %s (role %d)", f->p.name, name,
                  (int)role);
    ck_assert_str_eq(s->kind, "quantize");
    ck_assert_str_eq(s->format, q->fmt.name);
    ck_assert_msg(s->total.results > 0, "%s: empty", name);
}

/* ---- sites --------------------------------------------------------------- */

static const char *const gemm_tags[6] = { "q.x", "q.w", "q.dy", "q.w.dx",
                                          "q.dy.dw", "q.x.dw" };

static const emu_operand_quant *tag_quant(const emu_policy *p, int k,
                                          emu_role *role)
{
    static const emu_role roles[6] = { EMU_ROLE_ACTIVATION, EMU_ROLE_WEIGHT,
                                       EMU_ROLE_ACT_GRAD, EMU_ROLE_WEIGHT,
                                       EMU_ROLE_ACT_GRAD, EMU_ROLE_ACTIVATION };
    *role = roles[k];
    return roles[k] == EMU_ROLE_WEIGHT ? &p->q_weight
         : roles[k] == EMU_ROLE_ACTIVATION ? &p->q_activation
                                           : &p->q_act_grad;
}

START_TEST(lstm_sites)
{
    const char *presets[] = { "mxfp8", "nvfp4", "fp8-delayed", "fp32", "bf16-sr" };
    for (int k = 0; k < 5; k++) {
        fixture f;
        fx_run(&f, "lstm:2-32", presets[k], NULL, 2, 6, 13, 41);
        const bool q = f.p.q_weight.on;
        ck_assert(isfinite(f.m.loss.data[0]));
        const char *layers[] = { "lstm.l0", "lstm.l0.hh", "lstm.l1",
                                 "lstm.l1.hh", "decoder" };
        for (int l = 0; l < 5; l++)
            for (int t = 0; t < 6; t++) {
                emu_role role;
                const emu_operand_quant *oq = tag_quant(&f.p, t, &role);
                /* D is quantized once for both weight gradients, at the
                 * LSTM layer's site */
                const bool shared = t == 4 && strstr(layers[l], ".hh");
                if (q && !shared) {
                    want_site(&f, layers[l], gemm_tags[t], role, oq);
                } else {
                    char name[96];
                    snprintf(name, sizeof name, "%s.%s", layers[l], gemm_tags[t]);
                    ck_assert_msg(!emu_stats_find_name(&f.st, name), "%s: %s",
                                  presets[k], name);
                }
            }
        fx_free(&f);
    }
}
END_TEST

static const char *const attn_tags[EMU_ATTN_OPERAND_COUNT] = {
    "q.scores.q", "q.scores.k", "q.out.att", "q.out.v", "q.dv.att",
    "q.dv.dout", "q.datt.dout", "q.datt.v", "q.dq.dscores", "q.dq.k",
    "q.dk.dscores", "q.dk.q"
};

static bool attn_grad(int which)
{
    return which == EMU_ATTN_DOUT_DV || which == EMU_ATTN_DOUT_DATT ||
           which == EMU_ATTN_DS_DQ || which == EMU_ATTN_DS_DK;
}

START_TEST(gpt_sites)
{
    /* mxfp8 quantizes attention by default, nvfp4 and the FP8 recipe only
     * when asked; the linear layers always. */
    static const char *const yes[] = { "attn_quant=yes", NULL };
    static const char *const no[] = { "attn_quant=no", NULL };
    struct {
        const char *preset;
        const char *const *sets;
        bool attn;
    } cases[] = {
        { "mxfp8", NULL, true }, { "mxfp8", no, false },
        { "nvfp4", NULL, false }, { "nvfp4", yes, true },
        { "fp8-delayed", NULL, false }, { "fp8-current", yes, true },
        { "bf16-sr", yes, false }, /* nothing to quantize with */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        fixture f;
        fx_run(&f, "gpt:1-32-2-8", cases[c].preset, cases[c].sets, 2, 8, 11, 43);
        ck_assert(isfinite(f.m.loss.data[0]));
        for (int t = 0; t < 6; t++) {
            emu_role role;
            const emu_operand_quant *oq = tag_quant(&f.p, t, &role);
            if (oq->on)
                want_site(&f, "h0.attn.qkv", gemm_tags[t], role, oq);
        }
        for (int w = 0; w < EMU_ATTN_OPERAND_COUNT; w++) {
            char name[96];
            snprintf(name, sizeof name, "h0.attn.%s", attn_tags[w]);
            if (cases[c].attn)
                want_site(&f, "h0.attn", attn_tags[w],
                          attn_grad(w) ? EMU_ROLE_ACT_GRAD : EMU_ROLE_ACTIVATION,
                          attn_grad(w) ? &f.p.q_act_grad : &f.p.q_activation);
            else
                ck_assert_msg(!emu_stats_find_name(&f.st, name), "%s: %s",
                              cases[c].preset, name);
        }
        fx_free(&f);
    }
}
END_TEST

/* ---- the reference: the library's block quantizer, then the product ------- */

typedef struct ref_hook {
    const emu_policy *p;
    bool lstm;
    int calls[16];
} ref_hook;

/* The policy's operand quantization of operand `which` of op kind u->lstm. */
static const emu_operand_quant *ref_quant(const ref_hook *u, int which)
{
    if (u->lstm) {
        switch (which) {
        case EMU_LSTM_W_IH: case EMU_LSTM_W_HH: case EMU_LSTM_W_HH_DH:
        case EMU_LSTM_W_IH_DX:
            return &u->p->q_weight;
        case EMU_LSTM_X: case EMU_LSTM_H: case EMU_LSTM_X_DW: case EMU_LSTM_H_DW:
            return &u->p->q_activation;
        default:
            return &u->p->q_act_grad;
        }
    }
    return attn_grad(which) ? &u->p->q_act_grad : &u->p->q_activation;
}

static int ref_fn(void *user, emu_ctx *ctx, int which, const emu_tensor *t,
                  int axis, float *out)
{
    (void)ctx;
    ref_hook *u = user;
    u->calls[which]++;
    const emu_operand_quant *oq = ref_quant(u, which);
    emu_scaled_tensor q;
    emu_error err;
    if (emu_scaled_alloc(&q, &oq->fmt, t->ndim, t->shape, axis, &err))
        ck_abort_msg("alloc: %s", err.message);
    emu_quant_opts qo;
    memset(&qo, 0, sizeof qo);
    qo.mode = oq->mode; /* tensor_scale 0: current scaling */
    if (emu_scaled_quantize(&q, t->data, &qo, NULL, NULL, &err) ||
        emu_scaled_dequantize(&q, out, false, &err))
        ck_abort_msg("quantize: %s", err.message);
    for (size_t i = 0; i < t->n; i++)
        out[i] = (float)((double)out[i] * q.tensor_scale);
    emu_scaled_free(&q);
    return 0;
}

static int copy_fn(void *user, emu_ctx *ctx, int which, const emu_tensor *t,
                   int axis, float *out)
{
    (void)user, (void)ctx, (void)which, (void)axis;
    memcpy(out, t->data, t->n * sizeof *out);
    return 0;
}

static void same_bits(const float *a, const float *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(!memcmp(&a[i], &b[i], sizeof *a), "%s[%zu]: %a vs %a", what,
                      i, (double)a[i], (double)b[i]);
}

/* A (d0, d1, d2) view of t's data. */
static emu_tensor view3(const emu_tensor *t, size_t d0, size_t d1, size_t d2)
{
    emu_tensor v = *t;
    v.owns_data = false;
    v.ndim = 3;
    memset(v.shape, 0, sizeof v.shape);
    v.shape[0] = d0, v.shape[1] = d1, v.shape[2] = d2;
    return v;
}

static void alloc_like(emu_tensor *t, const emu_tensor *like, int nd,
                       const size_t *shape)
{
    emu_error err;
    if (emu_tensor_alloc(t, like->name, like->role, &like->fmt, nd, shape, &err))
        ck_abort_msg("alloc: %s", err.message);
}

/* The model's lstm.l0 against emu_t_lstm and its backward under the
 * reference hook (and under an identity hook against no hook at all). */
static void lstm_check(const char *preset, const char *accum)
{
    const char *sets[] = { "q.act_grad.mode=rne", accum, NULL };
    const int B = 2, S = 5, H = 32;
    fixture f;
    fx_run(&f, "lstm:1-32", preset, sets, B, S, 13, 47);
    emu_layer *l = layer(&f, "lstm.l0"), *hh = layer(&f, "lstm.l0.hh");
    const emu_policy *p = &f.p;
    const emu_rounding *rnd = &p->activation.rnd, *grnd = &p->act_grad.rnd;
    emu_tensor xs = view3(l->in, B, S, H);
    emu_tensor dys = view3(l->priv->gout, B, S, H);
    emu_lstm_weights w = { &l->weight.w, &hh->weight.w, &l->bias.w, &hh->bias.w };
    for (int pass = 0; pass < 3; pass++) {
        /* 0: the reference hook against the model; 1: an identity hook,
         * 2: no hook, against each other */
        ref_hook u = { p, true, { 0 } };
        const emu_operand_hook hk = { pass ? copy_fn : ref_fn, &u };
        emu_lstm_opts o = { .accum = &p->accum, .param_grad_rnd = &p->weight_grad.rnd,
                            .operands = pass == 2 ? NULL : &hk };
        size_t s3[3] = { (size_t)B, (size_t)S, (size_t)H };
        size_t g3[3] = { (size_t)B, (size_t)S, 4 * (size_t)H };
        emu_tensor y, gates, c, dx, dwi, dwh, dbi, dbh;
        alloc_like(&y, &l->y, 3, s3);
        alloc_like(&gates, &l->priv->lstm_gates, 3, g3);
        alloc_like(&c, &l->priv->lstm_c, 3, s3);
        alloc_like(&dx, &l->dx, 3, s3);
        alloc_like(&dwi, &l->weight.g, l->weight.g.ndim, l->weight.g.shape);
        alloc_like(&dwh, &hh->weight.g, hh->weight.g.ndim, hh->weight.g.shape);
        alloc_like(&dbi, &l->bias.g, 1, l->bias.g.shape);
        alloc_like(&dbh, &hh->bias.g, 1, hh->bias.g.shape);
        emu_lstm_grads gr = { &dwi, &dwh, &dbi, &dbh };
        if (emu_t_lstm(&f.ctx, "ref", &y, &gates, &c, NULL, NULL, &xs, NULL, NULL,
                       &w, &o, rnd) ||
            emu_t_lstm_backward(&f.ctx, "ref", &dx, &gr, &dys, &xs, &y, &gates, &c,
                                NULL, NULL, &w, &o, grnd))
            ck_abort_msg("ref: %s", f.ctx.err.message);
        if (pass == 0) {
            same_bits(y.data, l->y.data, y.n, "y");
            same_bits(gates.data, l->priv->lstm_gates.data, gates.n, "gates");
            same_bits(c.data, l->priv->lstm_c.data, c.n, "c");
            same_bits(dx.data, l->dx.data, dx.n, "dx");
            same_bits(dwi.data, l->weight.g.data, dwi.n, "dw_ih");
            same_bits(dwh.data, hh->weight.g.data, dwh.n, "dw_hh");
            same_bits(dbi.data, l->bias.g.data, dbi.n, "db_ih");
            same_bits(dbh.data, hh->bias.g.data, dbh.n, "db_hh");
            /* each operand asked for: h_{t-1} at steps 1..S-1, dgates at
             * S-1 steps, the window's once */
            ck_assert_int_eq(u.calls[EMU_LSTM_H], S - 1);
            ck_assert_int_eq(u.calls[EMU_LSTM_DG_DH], S - 1);
            for (int k = 0; k < EMU_LSTM_OPERAND_COUNT; k++)
                if (k != EMU_LSTM_H && k != EMU_LSTM_DG_DH)
                    ck_assert_int_eq(u.calls[k], 1);
            /* and it changed something: the quantized gates differ from
             * the unquantized op's */
        } else {
            static float *keep[4];
            static size_t kn[4];
            const emu_tensor *r[4] = { &y, &dx, &dwi, &dwh };
            for (int k = 0; k < 4; k++) {
                if (pass == 1) {
                    keep[k] = malloc(r[k]->n * sizeof(float));
                    memcpy(keep[k], r[k]->data, r[k]->n * sizeof(float));
                    kn[k] = r[k]->n;
                } else {
                    same_bits(keep[k], r[k]->data, kn[k], "identity hook");
                    if (k == 0) {
                        bool differs = false;
                        for (size_t i = 0; i < l->y.n; i++)
                            differs |= keep[0][i] != l->y.data[i];
                        ck_assert_msg(differs, "%s: quantization changed nothing",
                                      preset);
                    }
                    free(keep[k]);
                }
            }
        }
        emu_tensor *all[] = { &y, &gates, &c, &dx, &dwi, &dwh, &dbi, &dbh };
        for (int k = 0; k < 8; k++)
            emu_tensor_free(all[k]);
    }
    fx_free(&f);
}

START_TEST(lstm_reference)
{
    lstm_check("mxfp8", "accum=fast");
    lstm_check("mxfp8", "accum=sequential");
    lstm_check("nvfp4", "accum=fast");
    lstm_check("nvfp4", "accum=pairwise");
    lstm_check("mxfp4", "accum=fast");
}
END_TEST

/* The model's h0.attn against emu_t_attention and its backward. */
static void attn_check(const char *preset, const char *accum)
{
    const char *sets[] = { "q.act_grad.mode=rne", "attn_quant=yes", accum, NULL };
    const int B = 2, S = 8, D = 32, Hh = 2;
    fixture f;
    fx_run(&f, "gpt:1-32-2-8", preset, sets, B, S, 11, 53);
    emu_layer *l = layer(&f, "h0.attn");
    const emu_policy *p = &f.p;
    emu_tensor qkv = view3(l->in, B, S, 3 * D);
    emu_tensor dout = view3(l->priv->gout, B, S, D);
    for (int pass = 0; pass < 3; pass++) {
        ref_hook u = { p, false, { 0 } };
        const emu_operand_hook hk = { pass ? copy_fn : ref_fn, &u };
        emu_attention_opts o = { .accum = &p->accum, .heads = Hh,
                                 .stat_rnd = p->softmax.fmt.ebits ? &p->softmax.rnd
                                                                  : NULL,
                                 .operands = pass == 2 ? NULL : &hk };
        size_t s3[3] = { (size_t)B, (size_t)S, (size_t)D };
        size_t q3[3] = { (size_t)B, (size_t)S, 3 * (size_t)D };
        size_t a4[4] = { (size_t)B, (size_t)Hh, (size_t)S, (size_t)S };
        emu_tensor out, att, dqkv;
        alloc_like(&out, &l->y, 3, s3);
        alloc_like(&att, &l->priv->att, 4, a4);
        alloc_like(&dqkv, &l->dx, 3, q3);
        if (emu_t_attention(&f.ctx, "ref", &out, &att, &qkv, &o, &p->activation.rnd) ||
            emu_t_attention_backward(&f.ctx, "ref", &dqkv, &dout, &qkv, &att, &o,
                                     &p->act_grad.rnd))
            ck_abort_msg("ref: %s", f.ctx.err.message);
        static float *keep[2];
        if (pass == 0) {
            same_bits(out.data, l->y.data, out.n, "out");
            same_bits(att.data, l->priv->att.data, att.n, "att");
            same_bits(dqkv.data, l->dx.data, dqkv.n, "dqkv");
            for (int k = 0; k < EMU_ATTN_OPERAND_COUNT; k++)
                ck_assert_int_eq(u.calls[k], 1);
        } else if (pass == 1) {
            keep[0] = malloc(out.n * sizeof(float));
            keep[1] = malloc(dqkv.n * sizeof(float));
            memcpy(keep[0], out.data, out.n * sizeof(float));
            memcpy(keep[1], dqkv.data, dqkv.n * sizeof(float));
        } else {
            same_bits(keep[0], out.data, out.n, "identity hook: out");
            same_bits(keep[1], dqkv.data, dqkv.n, "identity hook: dqkv");
            bool differs = false;
            for (size_t i = 0; i < out.n; i++)
                differs |= keep[0][i] != l->y.data[i];
            ck_assert_msg(differs, "%s: quantization changed nothing", preset);
            free(keep[0]);
            free(keep[1]);
        }
        emu_tensor_free(&out);
        emu_tensor_free(&att);
        emu_tensor_free(&dqkv);
    }
    fx_free(&f);
}

START_TEST(attention_reference)
{
    attn_check("mxfp8", "accum=fast");
    attn_check("mxfp8", "accum=sequential");
    attn_check("nvfp4", "accum=fast");
    attn_check("fp8-current", "accum=exact");
}
END_TEST

/* ---- the policy key ------------------------------------------------------- */

START_TEST(attn_quant_key)
{
    emu_policy p;
    emu_error err;
    const char *presets[] = { "mxfp8", "mxfp4", "nvfp4", "fp8-delayed",
                              "fp8-current", "fp32" };
    const bool want[] = { true, false, false, false, false, false };
    for (int k = 0; k < 6; k++) {
        ck_assert_int_eq(emu_policy_preset(&p, presets[k], &err), 0);
        ck_assert_msg(p.attn_quant == want[k], "%s", presets[k]);
    }
    ck_assert_int_eq(emu_policy_set(&p, "attn_quant=yes", &err), 0);
    ck_assert(p.attn_quant);
    ck_assert_int_eq(emu_policy_set(&p, "attn_quant=no", &err), 0);
    ck_assert(!p.attn_quant);
    ck_assert_int_eq(emu_policy_set(&p, "attn_quant=1", &err), -1);
    ck_assert_str_eq(err.key, "attn_quant");
    ck_assert_msg(strstr(err.message, "'1'"), "%s", err.message);
    /* the record says so only when set; image models have no attention */
    char *buf = NULL;
    size_t len = 0;
    emu_policy_preset(&p, "mxfp8", &err);
    FILE *fp = open_memstream(&buf, &len);
    emu_policy_write_json(&p, fp, 0);
    fclose(fp);
    ck_assert_msg(strstr(buf, "\"attention\": \"yes\""), "%s", buf);
    free(buf);
    emu_policy_for_arch(&p, "mlp:784-10");
    ck_assert(!p.attn_quant);
    emu_policy_preset(&p, "mxfp8", &err);
    emu_policy_for_arch(&p, "gpt:1-32-2-8");
    ck_assert(p.attn_quant);
}
END_TEST

/* The checkpoint carries attn_quant when it is set (a resumed run keeps
 * quantizing attention), and the run record says so. */
START_TEST(attn_quant_checkpoint)
{
    char dir[] = "/tmp/emu-nnq-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const struct {
        const char *preset, *set;
        bool want;
    } cases[] = { { "mxfp8", NULL, true }, { "nvfp4", NULL, false },
                  { "nvfp4", "attn_quant=yes", true }, { "mxfp8", "attn_quant=no", false } };
    for (int k = 0; k < 4; k++) {
        emu_train_config c;
        emu_train_config_default(&c);
        snprintf(c.arch, sizeof c.arch, "gpt:1-32-2-4");
        snprintf(c.data, sizeof c.data, "text");
        snprintf(c.preset, sizeof c.preset, "%s", cases[k].preset);
        snprintf(c.out_dir, sizeof c.out_dir, "%s/run%d", dir, k);
        c.train_examples = 400;
        c.test_examples = 100;
        c.batch = 2;
        c.eval_windows = 2;
        c.max_steps = 1;
        c.quiet = true;
        emu_policy p, p2;
        emu_error err;
        if (emu_policy_preset(&p, cases[k].preset, &err) ||
            (cases[k].set && emu_policy_set(&p, cases[k].set, &err)) ||
            emu_train(&c, &p, NULL, &err))
            ck_abort_msg("%s: %s: %s", cases[k].preset, err.where, err.message);
        char path[sizeof c.out_dir + 32];
        snprintf(path, sizeof path, "%s/checkpoint.bin", c.out_dir);
        FILE *fp = fopen(path, "rb");
        ck_assert_ptr_nonnull(fp);
        static unsigned char img[1 << 22];
        size_t n = fread(img, 1, sizeof img, fp);
        fclose(fp);
        ck_assert(n > 0 && n < sizeof img);
        emu_train_config c2;
        if (emu_checkpoint_check(img, n, &c2, &p2, &err))
            ck_abort_msg("checkpoint: %s", err.message);
        ck_assert_msg(p2.attn_quant == cases[k].want, "%s %s", cases[k].preset,
                      cases[k].set ? cases[k].set : "");
        snprintf(path, sizeof path, "%s/meta.json", c.out_dir);
        fp = fopen(path, "rb");
        ck_assert_ptr_nonnull(fp);
        n = fread(img, 1, sizeof img - 1, fp);
        img[n] = 0;
        fclose(fp);
        ck_assert(!strstr((char *)img, "\"attention\": \"yes\"") == !cases[k].want);
        snprintf(path, sizeof path, "rm -rf '%s'", c.out_dir);
        ck_assert_int_eq(system(path), 0);
    }
    rmdir(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("nn_quant");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, lstm_sites);
    tcase_add_test(tc, gpt_sites);
    tcase_add_test(tc, lstm_reference);
    tcase_add_test(tc, attention_reference);
    tcase_add_test(tc, attn_quant_key);
    tcase_add_test(tc, attn_quant_checkpoint);
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
