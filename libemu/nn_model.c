/*
 * nn_model.c — models as lists of layers, each a forward/backward pair of
 * tensor ops (every one through the choke point).
 *
 * Precision: a layer takes the policy's format and rounding for each role,
 * or the policy's exempt precision if it is exempt (the FP8 recipe keeps
 * the first and the last layer with weights in higher precision).  Each op
 * is given the rounding of the role it writes and the policy's
 * accumulator model in its call; the context holds neither.  Layers
 * without parameters (ReLU, pooling, flatten) inherit the exemption of the
 * parameter layer before them.  A parameter layer whose input arrives in
 * another format casts it first (site "<layer>.xq"): that cast is where
 * an exempt boundary quantizes.
 *
 * Sites are named "<layer>.<what>": fc1.matmul, fc1.bias, fc1.dweight,
 * fc1.dbias, fc1.dinput, relu1, relu1.dinput, conv1.conv, pool1, loss.
 *
 * Scaled GEMM operands (policy q_weight, q_activation, q_act_grad): each
 * matmul or convolution quantizes the operands the policy names right
 * before it reads them, block formats along its own reduction axis, and
 * applies their tensor scales as its alpha (sites fc1.q.x, fc1.q.w,
 * fc1.q.dy.dw, fc1.q.x.dw, fc1.q.dy, fc1.q.w.dx).  Reduction axes:
 * linear forward K = input features (x axis 1, W axis 1), weight gradient
 * K = batch (dY and x axis 0), input gradient K = output features (dY axis
 * 1, W axis 0); convolutions block activations and gradients along
 * channels (axis 1; along the batch, axis 0, for the weight gradient) and
 * weights as the matrix (C_out, C_in k k), along its rows or columns as
 * the reduction runs.  A convolution whose operands carry tensor scales
 * adds its bias after the product (the scales must not multiply it), and
 * its bias gradient is then the sum of the unquantized dY.
 *
 * Sequence models (emu_model_build_lm) run every layer on the B*T rows of
 * the batch: a linear layer is the same product with R = B*T rows (its
 * weight gradient's reduction axis is then the rows), attention sees them
 * as (B, T, F).  Their exemptions go by group (the embeddings "first",
 * the head "last"), not by position.  The tied head (EMU_LAYER_TIED) is a
 * linear layer without bias whose W is its embedding's table: its GEMM
 * operands are quantized like a linear layer's (lm_head.q.*), its weight
 * gradient is written into the embedding's, in that layer's format and
 * rounding, and the embedding's scatter-add, later in the backward pass,
 * adds to it.  The LSTM's gate GEMMs and, under the policy's attn_quant,
 * attention's batched products quantize their operands through the ops'
 * operand hooks (below, "the composite ops' operands").
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/nn.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "emu/extend.h" /* emu_ctx_fail */
#include "emu/rng.h"
#include "emu/scaled.h" /* emu_rht */
#include "internal.h"
#include "nn_internal.h"
#include "ops_internal.h"

/* The precision of a role in layer l. */
static const emu_role_prec *prec_of(const emu_policy *p, const emu_layer *l,
                                    emu_role role)
{
    if (l->exempt)
        return &p->exempt_prec;
    switch (role) {
    case EMU_ROLE_WEIGHT: return &p->weight;
    case EMU_ROLE_MASTER: return &p->master;
    case EMU_ROLE_ACT_GRAD: return &p->act_grad;
    case EMU_ROLE_WEIGHT_GRAD: return &p->weight_grad;
    case EMU_ROLE_OPT_STATE: return &p->opt_state;
    default: return &p->activation;
    }
}

/* ---- scaled GEMM operands ------------------------------------------------------ */

static const emu_operand_quant *operand_quant(const emu_policy *p,
                                              const emu_layer *l, int which)
{
    if (l->exempt)
        return NULL;
    const emu_operand_quant *q = which == EMU_QT_W   ? &p->q_weight
                               : which == EMU_QT_X   ? &p->q_activation
                                                     : &p->q_act_grad;
    return q->on ? q : NULL;
}

/* How an operand's tensor scale is chosen: at its first use in the step
 * by the policy's recipe (the scale is kept in l->priv->tscale, and a
 * delayed recipe records the operand's amax), reused from that first use,
 * or from the operand's own amax (current scaling, the layer's state left
 * alone: the operands of the composite ops, new tensors at every time
 * step or product, which have no amax history of their own). */
typedef enum { TS_FRESH, TS_REUSE, TS_CURRENT } ts_choice;

/* Quantizes view (its shape, blocked along `axis`) under the policy's
 * operand quantization oq for operand kind `which` (EMU_QT_*) of layer l,
 * at `site`, and writes its dequantized values to out: without the tensor
 * scale (returned in *g, for the GEMM's alpha), or, with_g, with it, the
 * exact product rounded once into binary32 (nearest-even; the values
 * themselves without a tensor scale). */
static int quantize_operand(emu_ctx *ctx, const emu_policy *p, emu_layer *l,
                            const emu_operand_quant *oq, int which,
                            const char *site, const emu_tensor *view, int axis,
                            ts_choice ts, bool with_g, float *out, double *g)
{
    emu_error e;
    /* The scaled tensor and its element scales in the model's kept
     * storage, not allocated for each operand. */
    emu_quant_keep *k = l->priv->qkeep;
    if (emu_quant_keep_shape(k, &oq->fmt, view->ndim, view->shape, axis, &e))
        return emu_ctx_failc(ctx, e.code, site, "%s%s%s", e.key, e.key[0] ? ": " : "",
                            e.message);
    emu_quant_opts qo;
    memset(&qo, 0, sizeof qo);
    if (oq->fmt.tensor_scale && ts != TS_CURRENT) {
        if (ts == TS_FRESH) {
            double amax = emu_amax(view->data, view->n);
            struct emu_layer_priv *lp = l->priv;
            lp->tscale[which] = emu_tensor_scaling_factor(
                &p->tscale, &lp->amax_hist[which], amax, lp->tscale[which],
                &oq->fmt);
            if (p->tscale.kind == EMU_TSCALE_DELAYED)
                emu_amax_record(&lp->amax_hist[which], p->tscale.history, amax);
        }
        qo.tensor_scale = l->priv->tscale[which];
    }
    /* The element rounding the policy names for the operand, with the
     * rest of the rounding (tininess, profile) of the tensor's role. */
    emu_rounding rnd = prec_of(p, l, view->role)->rnd;
    rnd.mode = oq->mode;
    rnd.sr_bits = oq->sr_bits;
    int rc = emu_t_quantize_scaled_kept(ctx, site, &k->q, view, &qo, NULL,
                                        &rnd, k);
    if (!rc && emu_scaled_dequantize(&k->q, out, false, &e))
        rc = emu_ctx_failc(ctx, e.code, site, "%s", e.message);
    *g = k->q.tensor_scale;
    if (!rc && with_g && *g != 1.0)
        for (size_t i = 0; i < view->n; i++)
            out[i] = (float)((double)out[i] * *g); /* exact, then one rounding */
    return rc ? -1 : 0;
}

/* Operand t of one of layer l's GEMMs as that GEMM reads it: t itself, or,
 * if the policy quantizes it, its values without the tensor scale in
 * l->priv->qbuf[slot], blocked along `axis` (of t, or of t seen as the matrix
 * (shape[0], rest) if `matrix`).  *g receives the tensor scale (1 if
 * none).  ts says how its tensor scale is chosen: TS_FRESH at the first
 * use of t in the step (and a delayed recipe records t's amax), TS_REUSE
 * by the other GEMMs that read t, TS_CURRENT from the values quantized.
 * rht: the policy's random Hadamard transform first, along `axis` (0 or
 * 1 of the view). */
static int gemm_operand(emu_ctx *ctx, const emu_policy *p, emu_layer *l,
                        int which, int slot, const emu_tensor *t, int axis,
                        bool matrix, ts_choice ts, bool rht,
                        const emu_tensor **out, double *g)
{
    static const char *const tags[EMU_QB_COUNT] = { "q.x", "q.w", "q.dy.dw",
                                                    "q.x.dw", "q.dy", "q.w.dx" };
    *out = t;
    *g = 1.0;
    const emu_operand_quant *oq = operand_quant(p, l, which);
    if (!oq)
        return 0;
    char site[64];
    snprintf(site, sizeof site, "%s.%s", l->name, tags[slot]);
    emu_error e;
    emu_tensor *buf = &l->priv->qbuf[slot];
    if (!buf->data && emu_tensor_alloc(buf, site, t->role,
                                       emu_format_find("binary32"), t->ndim,
                                       t->shape, &e))
        return emu_ctx_failc(ctx, e.code, site, "%s", e.message);
    emu_tensor view = *t;
    view.owns_data = false;
    if (matrix) {
        view.ndim = 2;
        view.shape[1] = t->n / t->shape[0];
    }
    if (rht && view.n) {
        /* R t along the reduction axis, into the buffer the quantized
         * values will overwrite (the quantizer reads all of its input
         * before it writes). */
        const size_t outer = axis == 0 ? 1 : (size_t)view.shape[0];
        const size_t len = (size_t)view.shape[axis];
        if (emu_rht(buf->data, t->data, outer, len, view.n / (outer * len),
                    p->rht_block, p->rht_seed, false, &e))
            return emu_ctx_failc(ctx, e.code, site, "%s: %s", e.key, e.message);
        view.data = buf->data;
    }
    if (quantize_operand(ctx, p, l, oq, which, site, &view, axis, ts, false,
                         buf->data, g))
        return -1;
    *out = buf;
    return 0;
}

/* ---- the composite ops' operands (emu_operand_hook) ------------------------ *
 * An LSTM's gate GEMMs and (policy attn_quant) attention's batched
 * products quantize their operands like a linear layer's, blocked along
 * the product's reduction axis, but hand the product the values with
 * their tensor scale (q s g, rounded once into binary32: exact without a
 * tensor scale, as in mxfp8 and mxfp4), as fake-quantization emulators
 * hand an FP32 GEMM: a gate is ONE dot product of an input-to-hidden and
 * a hidden-to-hidden part whose scales differ, and attention applies its
 * 1/sqrt(hs) inside the product, so no single alpha can carry them.
 *
 * LSTM sites: the input-to-hidden GEMMs are the LSTM layer's
 * (lstm.lK.q.x, .q.w, .q.dy (D for dx), .q.w.dx, .q.dy.dw (D for both
 * weight gradients), .q.x.dw), the hidden-to-hidden ones its holder's
 * (lstm.lK.hh.q.x (h_{t-1}, every step), .q.w, .q.dy (dgates_{t+1}, every
 * step), .q.w.dx, .q.x.dw (the h_{t-1} rows of the window)).  x, w_ih,
 * w_hh and D take their tensor scale by the recipe, at their first use;
 * the per-step and window h and dgates_{t+1} from their own amax.
 * Attention sites: <layer>.q.<product>.<operand>, the products scores,
 * out, dv, datt, dq, dk (q.scores.q, q.scores.k, q.out.att, q.out.v,
 * q.dv.att, q.dv.dout, q.datt.dout, q.datt.v, q.dq.dscores, q.dq.k,
 * q.dk.dscores, q.dk.q): activations (q, k, v, att) under q_activation,
 * gradients (dout, dS) under q_act_grad, every scale from the operand's
 * own amax. */

/* Whether the policy quantizes any GEMM operand of layer l. */
static bool quantizes(const emu_policy *p, const emu_layer *l)
{
    return operand_quant(p, l, EMU_QT_W) || operand_quant(p, l, EMU_QT_X) ||
           operand_quant(p, l, EMU_QT_DY);
}

typedef struct lstm_hook {
    const emu_policy *p;
    emu_layer *ih, *hh;
    bool dy_chosen; /* D's tensor scale chosen (its first use) */
} lstm_hook;

static int lstm_operand(void *user, emu_ctx *ctx, int which,
                        const emu_tensor *t, int axis, float *out)
{
    lstm_hook *u = user;
    static const struct {
        bool hh;
        int qt;
        const char *tag;
        ts_choice ts;
    } map[EMU_LSTM_OPERAND_COUNT] = {
        [EMU_LSTM_X] = { false, EMU_QT_X, "q.x", TS_FRESH },
        [EMU_LSTM_W_IH] = { false, EMU_QT_W, "q.w", TS_FRESH },
        [EMU_LSTM_W_HH] = { true, EMU_QT_W, "q.w", TS_FRESH },
        [EMU_LSTM_H] = { true, EMU_QT_X, "q.x", TS_CURRENT },
        [EMU_LSTM_DG_DH] = { true, EMU_QT_DY, "q.dy", TS_CURRENT },
        [EMU_LSTM_W_HH_DH] = { true, EMU_QT_W, "q.w.dx", TS_REUSE },
        [EMU_LSTM_D_DX] = { false, EMU_QT_DY, "q.dy", TS_FRESH },
        [EMU_LSTM_W_IH_DX] = { false, EMU_QT_W, "q.w.dx", TS_REUSE },
        [EMU_LSTM_D_DW] = { false, EMU_QT_DY, "q.dy.dw", TS_FRESH },
        [EMU_LSTM_X_DW] = { false, EMU_QT_X, "q.x.dw", TS_REUSE },
        [EMU_LSTM_H_DW] = { true, EMU_QT_X, "q.x.dw", TS_CURRENT },
    };
    if (which < 0 || which >= EMU_LSTM_OPERAND_COUNT)
        return emu_ctx_fail(ctx, u->ih->name, "unknown LSTM operand %d", which);
    emu_layer *l = map[which].hh ? u->hh : u->ih;
    const emu_operand_quant *oq = operand_quant(u->p, l, map[which].qt);
    if (!oq) {
        memcpy(out, t->data, t->n * sizeof *out);
        return 0;
    }
    ts_choice ts = map[which].ts;
    if (map[which].qt == EMU_QT_DY && !map[which].hh) {
        ts = u->dy_chosen ? TS_REUSE : TS_FRESH;
        u->dy_chosen = true;
    }
    char site[64];
    snprintf(site, sizeof site, "%s.%s", l->name, map[which].tag);
    double g;
    return quantize_operand(ctx, u->p, l, oq, map[which].qt, site, t, axis, ts,
                            true, out, &g);
}

typedef struct attn_hook {
    const emu_policy *p;
    emu_layer *l;
} attn_hook;

static int attn_operand(void *user, emu_ctx *ctx, int which,
                        const emu_tensor *t, int axis, float *out)
{
    attn_hook *u = user;
    static const char *const tags[EMU_ATTN_OPERAND_COUNT] = {
        "q.scores.q", "q.scores.k", "q.out.att", "q.out.v", "q.dv.att",
        "q.dv.dout", "q.datt.dout", "q.datt.v", "q.dq.dscores", "q.dq.k",
        "q.dk.dscores", "q.dk.q"
    };
    if (which < 0 || which >= EMU_ATTN_OPERAND_COUNT)
        return emu_ctx_fail(ctx, u->l->name, "unknown attention operand %d",
                            which);
    const bool grad = which == EMU_ATTN_DOUT_DV || which == EMU_ATTN_DOUT_DATT ||
                      which == EMU_ATTN_DS_DQ || which == EMU_ATTN_DS_DK;
    const int qt = grad ? EMU_QT_DY : EMU_QT_X;
    const emu_operand_quant *oq = operand_quant(u->p, u->l, qt);
    if (!oq) {
        memcpy(out, t->data, t->n * sizeof *out);
        return 0;
    }
    char site[64];
    snprintf(site, sizeof site, "%s.%s", u->l->name, tags[which]);
    double g;
    return quantize_operand(ctx, u->p, u->l, oq, qt, site, t, axis, TS_CURRENT,
                            true, out, &g);
}

/* Whether the policy's random Hadamard transform applies to the
 * weight-gradient GEMM (dinput false) or the input-gradient GEMM of layer
 * l: only where both operands are quantized (validation makes sure of it
 * for the layers that are not exempt). */
static bool rht_on(const emu_policy *p, const emu_layer *l, bool dinput)
{
    if (p->rht == EMU_RHT_NONE || (dinput && p->rht != EMU_RHT_BACKWARD))
        return false;
    return operand_quant(p, l, EMU_QT_DY) &&
           operand_quant(p, l, dinput ? EMU_QT_W : EMU_QT_X);
}

/* The operand pairs of a layer's three products, with the product of
 * their tensor scales in *g: forward x . W (both along the input
 * features), weight gradient dY^T . x (both along the batch), input
 * gradient dY . W (both along the output features).  A convolution's
 * weight is blocked as the matrix (C_out, C_in k k).  dY's tensor scale
 * is chosen at its first use, the weight gradient (the input gradient
 * under the Hadamard transform: dweight_operands). */
static int forward_operands(emu_ctx *ctx, const emu_policy *p, emu_layer *l,
                            const emu_tensor *x, const emu_tensor *w,
                            const emu_tensor **xa, const emu_tensor **wa,
                            double *g)
{
    const bool conv = l->kind == EMU_LAYER_CONV;
    double gx, gw;
    if (gemm_operand(ctx, p, l, EMU_QT_X, EMU_QB_FWD_X, x, 1, false, TS_FRESH,
                     false, xa, &gx) ||
        gemm_operand(ctx, p, l, EMU_QT_W, EMU_QB_FWD_W, w, 1, conv, TS_FRESH,
                     false, wa, &gw))
        return -1;
    *g = gx * gw;
    return 0;
}

/* Under the Hadamard transform the weight gradient's operands are new
 * tensors, R dY and R x: their tensor scales come from their own amax
 * (Transformer Engine takes the transformed operand's amax too), and dY's
 * recipe scale is chosen at its next use, the input gradient. */
static int dweight_operands(emu_ctx *ctx, const emu_policy *p, emu_layer *l,
                            const emu_tensor *dy, const emu_tensor **dya,
                            const emu_tensor **xa, double *g)
{
    const bool rht = rht_on(p, l, false);
    double gdy, gx;
    if (gemm_operand(ctx, p, l, EMU_QT_DY, EMU_QB_DW_DY, dy, 0, false,
                     rht ? TS_CURRENT : TS_FRESH, rht, dya, &gdy) ||
        gemm_operand(ctx, p, l, EMU_QT_X, EMU_QB_DW_X, l->in, 0, false,
                     rht ? TS_CURRENT : TS_REUSE, rht, xa, &gx))
        return -1;
    *g = gdy * gx;
    return 0;
}

static int dinput_operands(emu_ctx *ctx, const emu_policy *p, emu_layer *l,
                           const emu_tensor *dy, const emu_tensor *w,
                           const emu_tensor **dya, const emu_tensor **wa,
                           double *g)
{
    const bool conv = l->kind == EMU_LAYER_CONV;
    const bool rht = rht_on(p, l, true);
    /* dY's recipe scale: chosen here if the weight gradient took its own. */
    const ts_choice dy_ts = rht ? TS_CURRENT
                          : rht_on(p, l, false) ? TS_FRESH : TS_REUSE;
    double gdy, gw;
    if (gemm_operand(ctx, p, l, EMU_QT_DY, EMU_QB_DX_DY, dy, 1, false, dy_ts,
                     rht, dya, &gdy) ||
        gemm_operand(ctx, p, l, EMU_QT_W, EMU_QB_DX_W, w, 0, conv,
                     rht ? TS_CURRENT : TS_REUSE, rht, wa, &gw))
        return -1;
    *g = gdy * gw;
    return 0;
}

/* ---- architecture specs ---------------------------------------------------- */

/* SRC_PREV: the layer before (the model's input for the first). */
enum { SRC_PREV = -2 };

typedef struct layer_spec {
    emu_layer_kind kind;
    int out;          /* features (linear) or channels (conv)           */
    int ksize, pad, stride;
    int src, src2;    /* the layers read: SRC_PREV, -1 (input) or index */
    bool no_bias;
    char name[40];    /* "": numbered by kind (fc1, conv2, relu3, ...)  */
    /* Sequence models: an embedding's table rows (ids or positions), an
     * attention's heads, a tied head's embedding layer; the standard
     * deviation of a normal initialisation of the weight (0: He-uniform);
     * the exemption group (EMU_EXEMPT_*: the layer is exempt when the
     * policy exempts its group; image models exempt by position). */
    int table, heads, tie;
    bool positions;
    double init_std;
    unsigned group;
} layer_spec;

/* MAX_LAYERS bounds the sequential specs (mlp, cnn); MAX_SPEC any model. */
enum { MAX_LAYERS = 64, MAX_SPEC = 256 };

static int push(layer_spec *v, int *n, emu_layer_kind kind, int out, int k,
                int pad)
{
    if (*n == MAX_LAYERS)
        return -1;
    v[(*n)++] = (layer_spec){ .kind = kind, .out = out, .ksize = k,
                              .pad = pad, .stride = 1, .src = SRC_PREV,
                              .src2 = SRC_PREV };
    return 0;
}

/* A named layer of a graph; returns its index. */
static int node(layer_spec *v, int *n, emu_layer_kind kind, int out, int k,
                int pad, int stride, int src, int src2, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 10, 11)))
#endif
    ;
static int node(layer_spec *v, int *n, emu_layer_kind kind, int out, int k,
                int pad, int stride, int src, int src2, const char *fmt, ...)
{
    layer_spec *l = &v[*n];
    *l = (layer_spec){ .kind = kind, .out = out, .ksize = k, .pad = pad,
                       .stride = stride, .src = src, .src2 = src2,
                       .no_bias = kind == EMU_LAYER_CONV ||
                                  kind == EMU_LAYER_EMBEDDING,
                       .tie = -1 };
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->name, sizeof l->name, fmt, ap);
    va_end(ap);
    return (*n)++;
}

/* He et al.'s CIFAR ResNet (section 4.2) on 28 x 28 grey images, with
 * torchvision's BasicBlock and layer names, so that a PyTorch model of the
 * same shape has the same parameter names:
 *   conv1 3x3/16, bn1, relu;
 *   layer1..3: N BasicBlocks of 16, 32, 64 channels, the first block of
 *     layer2 and layer3 with stride 2: conv1 3x3 (stride s), bn1, relu1,
 *     conv2 3x3, bn2, + shortcut, relu2; the shortcut is the block's input,
 *     or downsample.0 (1x1 conv, stride s) and downsample.1 (batch norm)
 *     where the shape changes;
 *   avgpool (global), fc (64 -> classes, with bias).
 * Convolutions have no bias (batch norm's beta takes its place). */
static int resnet_spec(const char *rest, int classes, layer_spec *v, int *n,
                       emu_error *err)
{
    char *end = NULL;
    long blocks = *rest >= '0' && *rest <= '9' ? strtol(rest, &end, 10) : -1;
    if (!*rest)
        blocks = 1;
    else if (blocks < 1 || blocks > 9 || *end)
        return emu_fail(err, EMU_ESPEC, "model", "arch", "resnet:%s: the blocks per "
                        "stage must be a number in 1..9 (resnet:1 is ResNet-8, "
                        "resnet:3 ResNet-20)", rest);
    *n = 0;
    node(v, n, EMU_LAYER_CONV, 16, 3, 1, 1, -1, -1, "conv1");
    node(v, n, EMU_LAYER_BATCHNORM, 0, 0, 0, 1, *n - 1, -1, "bn1");
    int x = node(v, n, EMU_LAYER_RELU, 0, 0, 0, 1, *n - 1, -1, "relu");
    int in_ch = 16;
    for (int s = 1; s <= 3; s++) {
        const int ch = 16 << (s - 1);
        for (int b = 0; b < blocks; b++) {
            const int stride = s > 1 && b == 0 ? 2 : 1;
            node(v, n, EMU_LAYER_CONV, ch, 3, 1, stride, x, -1,
                 "layer%d.%d.conv1", s, b);
            node(v, n, EMU_LAYER_BATCHNORM, 0, 0, 0, 1, *n - 1, -1,
                 "layer%d.%d.bn1", s, b);
            node(v, n, EMU_LAYER_RELU, 0, 0, 0, 1, *n - 1, -1,
                 "layer%d.%d.relu1", s, b);
            node(v, n, EMU_LAYER_CONV, ch, 3, 1, 1, *n - 1, -1,
                 "layer%d.%d.conv2", s, b);
            int main = node(v, n, EMU_LAYER_BATCHNORM, 0, 0, 0, 1, *n - 1, -1,
                            "layer%d.%d.bn2", s, b);
            int shortcut = x;
            if (stride != 1 || ch != in_ch) {
                node(v, n, EMU_LAYER_CONV, ch, 1, 0, stride, x, -1,
                     "layer%d.%d.downsample.0", s, b);
                shortcut = node(v, n, EMU_LAYER_BATCHNORM, 0, 0, 0, 1, *n - 1,
                                -1, "layer%d.%d.downsample.1", s, b);
            }
            node(v, n, EMU_LAYER_ADD, 0, 0, 0, 1, main, shortcut,
                 "layer%d.%d.add", s, b);
            x = node(v, n, EMU_LAYER_RELU, 0, 0, 0, 1, *n - 1, -1,
                     "layer%d.%d.relu2", s, b);
            in_ch = ch;
        }
    }
    node(v, n, EMU_LAYER_GAP, 0, 0, 0, 1, x, -1, "avgpool");
    int fc = node(v, n, EMU_LAYER_LINEAR, classes, 0, 0, 1, *n - 1, -1, "fc");
    v[fc].no_bias = false;
    return 0;
}

/* ---- language models --------------------------------------------------------- */

/* The limits of a gpt spec: beyond them a model is a typo, not a plan
 * (and its tensors would not fit in memory). */
enum { GPT_MAX_L = 64, GPT_MAX_D = 8192, GPT_MAX_T = 8192 };
#define GPT_MAX_PARAMS 2147483648.0 /* 2^31 */

/* The dimensions of "gpt:L-D-H-T" (or "gpt": 4-128-4-64). */
typedef struct gpt_dims {
    int L, D, H, T;
} gpt_dims;

static int gpt_parse(const char *arch, const char *rest, int vocab,
                     gpt_dims *g, emu_error *err)
{
    long v[4] = { 4, 128, 4, 64 };
    if (*rest) {
        const char *s = rest;
        for (int i = 0; i < 4; i++) {
            char *end;
            if (*s < '0' || *s > '9')
                return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': expected "
                                "gpt:L-D-H-T (layers, width, heads, context; "
                                "e.g. gpt:4-128-4-64)", arch);
            v[i] = strtol(s, &end, 10);
            if (*end != (i < 3 ? '-' : '\0'))
                return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': expected "
                                "gpt:L-D-H-T (layers, width, heads, context; "
                                "e.g. gpt:4-128-4-64)", arch);
            s = end + 1;
        }
    }
    static const char *const what[4] = { "layer count L", "width D", "head count H",
                                         "context T" };
    static const long max[4] = { GPT_MAX_L, GPT_MAX_D, GPT_MAX_D, GPT_MAX_T };
    for (int i = 0; i < 4; i++)
        if (v[i] < 1 || v[i] > max[i])
            return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': the %s is %ld, "
                            "not in 1..%ld", arch, what[i], v[i], max[i]);
    if (v[1] % v[2])
        return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': the width D = %ld is "
                        "not divisible by the heads H = %ld", arch, v[1], v[2]);
    /* wte, wpe, per block 12 D^2 + 13 D, ln_f. */
    double params = (double)vocab * v[1] + (double)v[3] * v[1] +
                    (double)v[0] * (12.0 * v[1] * v[1] + 13.0 * v[1]) +
                    2.0 * v[1];
    if (params > GPT_MAX_PARAMS)
        return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': %.3g parameters "
                        "(more than 2^31)", arch, params);
    *g = (gpt_dims){ (int)v[0], (int)v[1], (int)v[2], (int)v[3] };
    return 0;
}

/* GPT-2's shape, pre-norm, with the layer names of the issue (the
 * parameters' names are then PyTorch's for modules of those names):
 *   wte (V, D), wpe (T, D), emb = wte + wpe;
 *   per block hN: ln1, attn.qkv (D -> 3D), attn (causal, H heads),
 *     attn.proj (D -> D), add1 = x + proj, ln2, mlp.fc (D -> 4D),
 *     mlp.gelu, mlp.proj (4D -> D), add2;
 *   ln_f, lm_head (tied to wte).
 * Initialisation (GPT-2, nanoGPT): weights normal(0, 0.02), the two
 * residual projections 0.02 / sqrt(2L); biases 0; layer norms 1 and 0.
 * The embeddings are the FP8 recipe's "first" layers, the head its
 * "last". */
static int gpt_spec(const gpt_dims *g, int vocab, layer_spec *v, int *n)
{
    const int D = g->D;
    const double proj_std = 0.02 / sqrt(2.0 * g->L);
    *n = 0;
    int wte = node(v, n, EMU_LAYER_EMBEDDING, D, 0, 0, 1, -1, -1, "wte");
    v[wte].table = vocab;
    int wpe = node(v, n, EMU_LAYER_EMBEDDING, D, 0, 0, 1, -1, -1, "wpe");
    v[wpe].table = g->T;
    v[wpe].positions = true;
    int x = node(v, n, EMU_LAYER_ADD, 0, 0, 0, 1, wte, wpe, "emb");
    for (int i = wte; i <= x; i++)
        v[i].group = EMU_EXEMPT_FIRST;
    for (int b = 0; b < g->L; b++) {
        node(v, n, EMU_LAYER_LAYERNORM, D, 0, 0, 1, x, -1, "h%d.ln1", b);
        node(v, n, EMU_LAYER_LINEAR, 3 * D, 0, 0, 1, *n - 1, -1,
             "h%d.attn.qkv", b);
        int att = node(v, n, EMU_LAYER_ATTENTION, D, 0, 0, 1, *n - 1, -1,
                       "h%d.attn", b);
        v[att].heads = g->H;
        int proj = node(v, n, EMU_LAYER_LINEAR, D, 0, 0, 1, *n - 1, -1,
                        "h%d.attn.proj", b);
        v[proj].init_std = proj_std;
        x = node(v, n, EMU_LAYER_ADD, 0, 0, 0, 1, proj, x, "h%d.add1", b);
        node(v, n, EMU_LAYER_LAYERNORM, D, 0, 0, 1, x, -1, "h%d.ln2", b);
        node(v, n, EMU_LAYER_LINEAR, 4 * D, 0, 0, 1, *n - 1, -1,
             "h%d.mlp.fc", b);
        node(v, n, EMU_LAYER_GELU, 0, 0, 0, 1, *n - 1, -1, "h%d.mlp.gelu", b);
        proj = node(v, n, EMU_LAYER_LINEAR, D, 0, 0, 1, *n - 1, -1,
                    "h%d.mlp.proj", b);
        v[proj].init_std = proj_std;
        x = node(v, n, EMU_LAYER_ADD, 0, 0, 0, 1, proj, x, "h%d.add2", b);
    }
    node(v, n, EMU_LAYER_LAYERNORM, D, 0, 0, 1, x, -1, "ln_f");
    int head = node(v, n, EMU_LAYER_TIED, vocab, 0, 0, 1, *n - 1, -1,
                    "lm_head");
    v[head].tie = wte;
    v[head].group = EMU_EXEMPT_LAST;
    for (int i = 0; i < *n; i++)
        if ((v[i].kind == EMU_LAYER_LINEAR || v[i].kind == EMU_LAYER_EMBEDDING) &&
            v[i].init_std == 0.0)
            v[i].init_std = 0.02;
    return 0;
}

/* The limits of an lstm spec. */
enum { LSTM_MAX_L = 16, LSTM_MAX_H = 8192 };

/* "lstm:L-H" (or "lstm": 2-256): layers and width. */
static int lstm_parse(const char *arch, const char *rest, int vocab, int *L,
                      int *H, emu_error *err)
{
    long v[2] = { 2, 256 };
    if (*rest) {
        const char *s = rest;
        for (int i = 0; i < 2; i++) {
            char *end;
            if (*s < '0' || *s > '9')
                return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': expected "
                                "lstm:L-H (layers, width; e.g. lstm:2-256)", arch);
            v[i] = strtol(s, &end, 10);
            if (*end != (i < 1 ? '-' : '\0'))
                return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': expected "
                                "lstm:L-H (layers, width; e.g. lstm:2-256)", arch);
            s = end + 1;
        }
    }
    static const char *const what[2] = { "layer count L", "width H" };
    static const long max[2] = { LSTM_MAX_L, LSTM_MAX_H };
    for (int i = 0; i < 2; i++)
        if (v[i] < 1 || v[i] > max[i])
            return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': the %s is %ld, "
                            "not in 1..%ld", arch, what[i], v[i], max[i]);
    /* encoder, per layer 8 H^2 + 8 H, decoder */
    double params = 2.0 * vocab * v[1] + vocab +
                    (double)v[0] * (8.0 * v[1] * v[1] + 8.0 * v[1]);
    if (params > GPT_MAX_PARAMS)
        return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': %.3g parameters "
                        "(more than 2^31)", arch, params);
    *L = (int)v[0];
    *H = (int)v[1];
    return 0;
}

/* PyTorch's word language model (examples/word_language_model) with an
 * embedding as wide as the LSTM: encoder (V, H); per layer k an LSTM_HH
 * holder lstm.lK.hh (w_hh, b_hh) and the LSTM lstm.lK (w_ih, b_ih),
 * reading the layer below; decoder (H -> V).  Initialisation: the
 * LSTM's U(-1/sqrt(H), 1/sqrt(H)) (set where the parameters are made),
 * the encoder normal(0, 0.1), the decoder He-uniform, bias 0. */
static void lstm_spec(int L, int H, int vocab, layer_spec *v, int *n)
{
    *n = 0;
    int x = node(v, n, EMU_LAYER_EMBEDDING, H, 0, 0, 1, -1, -1, "encoder");
    v[x].table = vocab;
    v[x].init_std = 0.1;
    v[x].group = EMU_EXEMPT_FIRST;
    for (int k = 0; k < L; k++) {
        int hh = node(v, n, EMU_LAYER_LSTM_HH, H, 0, 0, 1, -1, -1,
                      "lstm.l%d.hh", k);
        x = node(v, n, EMU_LAYER_LSTM, H, 0, 0, 1, x, -1, "lstm.l%d", k);
        v[x].tie = hh;
    }
    int head = node(v, n, EMU_LAYER_LINEAR, vocab, 0, 0, 1, x, -1, "decoder");
    v[head].group = EMU_EXEMPT_LAST;
}

/* The kind of a spec: its text up to ':' (or all of it). */
static bool arch_kind_is(const char *arch, const char *kind)
{
    size_t k = strlen(kind);
    return !strncmp(arch, kind, k) && (arch[k] == '\0' || arch[k] == ':');
}

bool emu_arch_is_lm(const char *arch)
{
    return arch && (arch_kind_is(arch, "gpt") || arch_kind_is(arch, "lstm"));
}

void emu_policy_for_arch(emu_policy *p, const char *arch)
{
    const bool gpt = arch && arch_kind_is(arch, "gpt");
    if (!gpt && !(arch && arch_kind_is(arch, "resnet")))
        emu_policy_class_reset(p, &p->norm_stats);
    if (!gpt) {
        emu_policy_class_reset(p, &p->softmax);
        p->attn_quant = false; /* no attention */
    }
}

/* "784-256-128-10" or "784-128x8-10": sizes after the input size. */
static int parse_sizes(const char *s, int *sizes, int max, emu_error *err)
{
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20)
            return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': expected a layer "
                            "width", s);
        long reps = 1;
        if (*end == 'x') {
            s = end + 1;
            reps = strtol(s, &end, 10);
            if (end == s || reps < 1 || reps > MAX_LAYERS)
                return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': expected a repeat "
                                "count", s);
        }
        for (long r = 0; r < reps; r++) {
            if (n == max)
                return emu_fail(err, EMU_ESPEC, "model", "arch", "more than %d layers",
                                max);
            sizes[n++] = (int)v;
        }
        if (*end == '-')
            end++;
        else if (*end)
            return emu_fail(err, EMU_ESPEC, "model", "arch", "unexpected '%c'", *end);
        s = end;
    }
    return n;
}

static int parse_arch(const char *arch, int in_features, int classes,
                      layer_spec *v, int *n, emu_error *err)
{
    *n = 0;
    emu_layer_kind act = EMU_LAYER_RELU;
    const char *colon = strchr(arch, ':');
    size_t kl = colon ? (size_t)(colon - arch) : strlen(arch);
    char kind[32];
    if (kl >= sizeof kind)
        return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': unknown model", arch);
    memcpy(kind, arch, kl);
    kind[kl] = '\0';
    const char *rest = colon ? colon + 1 : "";
    char *g = strstr(kind, "-gelu");
    if (g) {
        *g = '\0';
        act = EMU_LAYER_GELU;
    }
    int sizes[MAX_LAYERS];
    if (emu_arch_is_lm(arch))
        return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s' is a language "
                        "model: it takes tokens, not images (build it with "
                        "emu_model_build_lm; train it on text data)", arch);
    if (!strcmp(kind, "mlp")) {
        int k = parse_sizes(*rest ? rest : "784-256-128-10", sizes, MAX_LAYERS,
                            err);
        if (k < 0)
            return -1;
        if (k < 2)
            return emu_fail(err, EMU_ESPEC, "model", "arch", "an MLP needs an input and "
                            "an output size");
        if (sizes[0] != in_features)
            return emu_fail(err, EMU_ESPEC, "model", "arch", "the MLP takes %d inputs but "
                            "an example has %d values", sizes[0], in_features);
        if (sizes[k - 1] != classes)
            return emu_fail(err, EMU_ESPEC, "model", "arch", "the MLP has %d outputs but "
                            "the data has %d classes", sizes[k - 1], classes);
        push(v, n, EMU_LAYER_FLATTEN, 0, 0, 0);
        for (int i = 1; i < k; i++) {
            if (push(v, n, EMU_LAYER_LINEAR, sizes[i], 0, 0) ||
                (i < k - 1 && push(v, n, act, 0, 0, 0)))
                return emu_fail(err, EMU_ESPEC, "model", "arch", "more than %d layers",
                                MAX_LAYERS);
        }
        return 0;
    }
    if (!strcmp(kind, "cnn")) {
        /* LeNet-style: conv5(c1, same padding) + pool2, conv5(c2) + pool2,
         * then the fully connected widths. */
        int k = parse_sizes(*rest ? rest : "6-16-120-84", sizes, MAX_LAYERS, err);
        if (k < 0)
            return -1;
        if (k < 2)
            return emu_fail(err, EMU_ESPEC, "model", "arch", "a CNN needs two conv "
                            "widths");
        push(v, n, EMU_LAYER_CONV, sizes[0], 5, 2);
        push(v, n, act, 0, 0, 0);
        push(v, n, EMU_LAYER_MAXPOOL, 0, 2, 0);
        push(v, n, EMU_LAYER_CONV, sizes[1], 5, 0);
        push(v, n, act, 0, 0, 0);
        push(v, n, EMU_LAYER_MAXPOOL, 0, 2, 0);
        push(v, n, EMU_LAYER_FLATTEN, 0, 0, 0);
        for (int i = 2; i < k; i++) {
            push(v, n, EMU_LAYER_LINEAR, sizes[i], 0, 0);
            push(v, n, act, 0, 0, 0);
        }
        if (push(v, n, EMU_LAYER_LINEAR, classes, 0, 0))
            return emu_fail(err, EMU_ESPEC, "model", "arch", "more than %d layers",
                            MAX_LAYERS);
        return 0;
    }
    if (!strcmp(kind, "resnet") && act == EMU_LAYER_RELU)
        return resnet_spec(colon && !*rest ? "(nothing)" : rest, classes, v, n,
                           err);
    return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': unknown model "
                    "(mlp:784-256-128-10, mlp:784-128x8-10, cnn, "
                    "cnn:6-16-120-84, mlp-gelu:..., resnet:1 .. resnet:9)", arch);
}

/* ---- building ---------------------------------------------------------------- */

static int alloc_act(emu_tensor *t, const char *layer, const char *what,
                     emu_role role, const emu_format *fmt, int batch,
                     const int *dims, int ndim, emu_error *err)
{
    size_t shape[4] = { (size_t)batch, 1, 1, 1 };
    for (int i = 0; i < ndim; i++)
        shape[i + 1] = (size_t)dims[i];
    char name[EMU_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "%s.%s", layer, what);
    return emu_tensor_alloc(t, name, role, fmt, ndim + 1, shape, err);
}

static int alloc_param(emu_param *prm, const char *layer, const char *what,
                       const emu_policy *p, const emu_layer *l, int ndim,
                       const size_t *shape, emu_error *err)
{
    char name[EMU_TENSOR_NAME_MAX];
    const char *suffix[] = { "", ".master", ".grad", ".m", ".v", ".c",
                             ".gradm" };
    emu_tensor *ts[] = { &prm->w, &prm->master, &prm->g, &prm->m, &prm->v,
                         &prm->c, &prm->gm };
    const emu_role roles[] = { EMU_ROLE_WEIGHT, EMU_ROLE_MASTER,
                               EMU_ROLE_WEIGHT_GRAD, EMU_ROLE_OPT_STATE,
                               EMU_ROLE_OPT_STATE, EMU_ROLE_OTHER,
                               EMU_ROLE_WEIGHT_GRAD };
    for (int i = 0; i < 7; i++) {
        if (i == 1 && !p->use_master)
            continue;
        /* gm: the gradient in the master format, or the Kahan update's copy
         * of the old weights (in the weight format). */
        if (i == 6 && !p->use_master && p->update != EMU_UPDATE_KAHAN)
            continue;
        if (i == 5 && p->update != EMU_UPDATE_KAHAN)
            continue;
        /* The Kahan buffer lives in the weight's format. */
        const emu_format *fmt = i == 5 ? &prec_of(p, l, EMU_ROLE_WEIGHT)->fmt
                              : i == 6 ? &prec_of(p, l, p->use_master
                                                            ? EMU_ROLE_MASTER
                                                            : EMU_ROLE_WEIGHT)->fmt
                                       : &prec_of(p, l, roles[i])->fmt;
        snprintf(name, sizeof name, "%s.%s%s", layer, what, suffix[i]);
        if (emu_tensor_alloc(ts[i], name, roles[i], fmt, ndim, shape, err))
            return -1;
    }
    return 0;
}

static void param_free(emu_param *prm)
{
    emu_tensor_free(&prm->w);
    emu_tensor_free(&prm->master);
    emu_tensor_free(&prm->g);
    emu_tensor_free(&prm->m);
    emu_tensor_free(&prm->v);
    emu_tensor_free(&prm->c);
    emu_tensor_free(&prm->gm);
}

/* How a parameter starts. */
typedef enum init_kind { INIT_HE, INIT_ZERO, INIT_ONE, INIT_NORMAL } init_kind;

/* He-uniform initial values U(-b, b), b = sqrt(6 / fan_in), or normal
 * ones N(0, std^2) (GPT-2's), from Philox stream `stream` (or constants:
 * biases 0, batch and layer norm's gamma 1), rounded into the master (or
 * compute) format through the choke point; the compute copy is then a
 * cast of the master.  A normal value is Box and Muller's from the words
 * 2i and 2i + 1 of the stream (the cosine branch): the host's log and cos
 * are not correctly rounded, but the binary32 rounding of the result
 * hides their last-bit differences except in the rarest ties. */
static int init_param(emu_param *prm, const char *site, int fan_in,
                      init_kind kind, double std, uint64_t seed,
                      uint64_t stream, emu_ctx *ctx, const emu_policy *p)
{
    size_t n = prm->w.n;
    float *v = malloc(n * sizeof *v);
    if (!v)
        return emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory");
    double b = sqrt(6.0 / fan_in);
    for (size_t i = 0; i < n; i++) {
        if (kind == INIT_NORMAL) {
            /* u1 in (0, 1], so the logarithm is finite. */
            double u1 = ldexp((double)((emu_random64(seed, stream, 2 * i) >> 11) +
                                       1), -53);
            double u2 = ldexp((double)(emu_random64(seed, stream, 2 * i + 1) >>
                                       11), -53);
            v[i] = (float)(std * sqrt(-2.0 * log(u1)) *
                           cos(6.283185307179586 * u2));
            continue;
        }
        double u = ldexp((double)(emu_random64(seed, stream, i) >> 11), -53);
        v[i] = kind == INIT_ZERO ? 0.0f
             : kind == INIT_ONE  ? 1.0f
                                 : (float)(b * (2.0 * u - 1.0));
    }
    /* Nearest-even whatever the policy: the initial values are data. */
    const emu_rounding rne = { .mode = EMU_RNE, .sr_bits = 64 };
    char s[EMU_TENSOR_NAME_MAX + 16];
    snprintf(s, sizeof s, "%s.init", site);
    int rc;
    if (p->use_master) {
        rc = emu_t_load(ctx, s, &prm->master, v, n, &rne);
        snprintf(s, sizeof s, "%s.cast", site);
        if (!rc)
            rc = emu_t_cast(ctx, s, &prm->w, &prm->master, &rne);
    } else {
        rc = emu_t_load(ctx, s, &prm->w, v, n, &rne);
    }
    free(v);
    return rc;
}

/* Batch norm's running statistics start at mean 0, variance 1. */
static int init_running(emu_layer *l, emu_ctx *ctx)
{
    const emu_rounding rne = { .mode = EMU_RNE, .sr_bits = 64 };
    size_t c = l->running_var.n;
    float *one = malloc(c * sizeof *one);
    if (!one)
        return emu_ctx_failc(ctx, EMU_ENOMEM, l->name, "out of memory");
    for (size_t i = 0; i < c; i++)
        one[i] = 1.0f;
    char s[EMU_TENSOR_NAME_MAX + 16];
    snprintf(s, sizeof s, "%s.running_var.init", l->name);
    int rc = emu_t_load(ctx, s, &l->running_var, one, c, &rne);
    free(one);
    return rc; /* running_mean: zero-filled by its allocation */
}

/* Fails a build: the message first (it may name a layer of m), then m is
 * freed. */
static int build_fail(emu_model *m, emu_error *err, emu_errcode code,
                      const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emu_vfail(err, code, "model", key, fmt, ap);
    va_end(ap);
    emu_model_free(m);
    return -1;
}

/* build_fail while the spec is held: the message (which may quote the
 * spec's names) is formatted before the spec is freed. */
static int spec_fail(layer_spec *spec, emu_model *m, emu_error *err,
                     emu_errcode code, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
static int spec_fail(layer_spec *spec, emu_model *m, emu_error *err,
                     emu_errcode code, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emu_vfail(err, code, "model", key, fmt, ap);
    va_end(ap);
    emu_model_free(m);
    free(spec);
    return -1;
}

void emu_model_free(emu_model *m)
{
    for (int i = 0; i < m->n_layers; i++) {
        emu_layer *l = &m->layers[i];
        param_free(&l->weight);
        param_free(&l->bias);
        emu_tensor_free(&l->xq);
        emu_tensor_free(&l->running_mean);
        emu_tensor_free(&l->running_var);
        if (l->priv) {
            for (int k = 0; k < EMU_QB_COUNT; k++)
                emu_tensor_free(&l->priv->qbuf[k]);
            emu_quant_keep_free(&l->priv->qkeep_own);
            emu_tensor_free(&l->priv->qsum);
            emu_tensor_free(&l->priv->bn_xc);
            emu_tensor_free(&l->priv->bn_mean);
            emu_tensor_free(&l->priv->bn_var);
            emu_tensor_free(&l->priv->gsum);
            emu_tensor_free(&l->priv->gtmp);
            emu_tensor_free(&l->priv->ln_mean);
            emu_tensor_free(&l->priv->ln_rstd);
            emu_tensor_free(&l->priv->att);
            emu_tensor_free(&l->priv->lstm_gates);
            emu_tensor_free(&l->priv->lstm_c);
            free(l->priv->pos);
            free(l->priv);
        }
        /* Views (flatten's tensors, an addition's dx) own nothing. */
        if (l->kind != EMU_LAYER_FLATTEN) {
            emu_tensor_free(&l->y);
            emu_tensor_free(&l->dx);
        }
        free(l->argmax);
    }
    free(m->layers);
    emu_tensor_free(&m->x);
    emu_tensor_free(&m->loss);
    emu_tensor_free(&m->dlogits);
    free(m->tokens);
    memset(m, 0, sizeof *m);
}

static size_t dims_count(const int *d, int n)
{
    size_t c = 1;
    for (int i = 0; i < n; i++)
        c *= (size_t)d[i];
    return c;
}

/* Whether m is more than a chain (a layer reads another than the one
 * before it). */
static bool is_graph(const emu_model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].src != i - 1 || m->layers[i].kind == EMU_LAYER_ADD)
            return true;
    return false;
}

/* Builds m from spec[0 .. n-1] (freed here): `batch` examples of `rows`
 * rows each at every layer (1 for image models, T for sequence models),
 * the model's input (layer -1) of per-example dims in_dims (ndim 3; an
 * embedding reads the tokens instead). */
static int build_spec(emu_model *m, const char *arch, layer_spec *spec, int n,
                      const emu_policy *p, int batch, int rows,
                      const int *in_dims, int classes, uint64_t seed,
                      emu_ctx *ctx, emu_error *err)
{
    m->layers = calloc((size_t)n, sizeof *m->layers);
    if (!m->layers) {
        free(spec);
        return emu_fail(err, EMU_ENOMEM, "model", "arch", "out of memory");
    }
    m->n_layers = n;
    for (int i = 0; i < n; i++) {
        if (!(m->layers[i].priv = calloc(1, sizeof *m->layers[i].priv))) {
            free(spec);
            return build_fail(m, err, EMU_ENOMEM, "arch", "out of memory");
        }
        m->layers[i].priv->qkeep = &m->layers[0].priv->qkeep_own;
    }
    m->batch = batch;
    memcpy(m->in_dims, in_dims, sizeof m->in_dims);
    m->classes = classes;
    snprintf(m->arch, sizeof m->arch, "%s", arch);
    /* Every activation tensor holds batch * rows rows of per-row dims. */
    const int R = batch * rows;
    bool lm = false;

    /* Sources, shapes and names. */
    int nconv = 0, nfc = 0, nact = 0, npool = 0, nflat = 0;
    int first_param = -1, last_param = -1;
    for (int i = 0; i < n; i++) {
        emu_layer *l = &m->layers[i];
        const layer_spec *sp = &spec[i];
        l->kind = sp->kind;
        l->src = sp->src == SRC_PREV ? i - 1 : sp->src;
        l->src2 = sp->src2 == SRC_PREV ? -1 : sp->src2;
        l->tie = -1;
        int dims[3] = { in_dims[0], in_dims[1], in_dims[2] }, ndim = 3;
        if (l->src >= 0) {
            memcpy(dims, m->layers[l->src].out_dims, sizeof dims);
            ndim = m->layers[l->src].out_ndim;
        }
        memcpy(l->in_dims, dims, sizeof dims);
        l->in_ndim = ndim;
        char auto_name[sizeof l->name];
        auto_name[0] = '\0';
        switch (l->kind) {
        case EMU_LAYER_LINEAR:
            if (ndim != 1)
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                              "a linear layer needs flat input");
            snprintf(auto_name, sizeof auto_name, "fc%d", ++nfc);
            dims[0] = sp->out;
            l->has_params = l->has_bias = true;
            break;
        case EMU_LAYER_CONV:
            if (ndim != 3)
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                              "a convolution needs image input");
            snprintf(auto_name, sizeof auto_name, "conv%d", ++nconv);
            l->ksize = sp->ksize;
            l->pad = sp->pad;
            l->stride = sp->stride;
            dims[0] = sp->out;
            for (int d = 1; d < 3; d++)
                dims[d] = dims[d] + 2 * l->pad < l->ksize
                              ? 0
                              : (dims[d] + 2 * l->pad - l->ksize) / l->stride + 1;
            if (dims[1] < 1 || dims[2] < 1)
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                              "%s: the image is smaller than the "
                                              "kernel", sp->name[0] ? sp->name
                                                                    : auto_name);
            l->has_params = true;
            l->has_bias = !sp->no_bias;
            break;
        case EMU_LAYER_MAXPOOL:
            snprintf(auto_name, sizeof auto_name, "pool%d", ++npool);
            l->ksize = l->stride = sp->ksize;
            dims[1] /= l->ksize;
            dims[2] /= l->ksize;
            if (dims[1] < 1 || dims[2] < 1)
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                              "%s: nothing left to pool",
                                              auto_name);
            break;
        case EMU_LAYER_FLATTEN:
            snprintf(auto_name, sizeof auto_name, "flat%d", ++nflat);
            dims[0] = (int)dims_count(dims, ndim);
            ndim = 1;
            break;
        case EMU_LAYER_BATCHNORM:
            if (ndim != 3)
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                              "%s: batch norm needs image input",
                                              sp->name);
            l->has_params = l->has_bias = true;
            break;
        case EMU_LAYER_GAP:
            /* The backward pass is an average pool's: square windows. */
            if (ndim != 3 || dims[1] != dims[2])
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                              "%s: global average pooling needs "
                                              "a square image (here %dx%d)",
                                              sp->name, dims[1], dims[2]);
            l->ksize = l->stride = dims[1];
            ndim = 1;
            break;
        case EMU_LAYER_ADD: {
            const int *d2 = l->src2 >= 0 ? m->layers[l->src2].out_dims : in_dims;
            int n2 = l->src2 >= 0 ? m->layers[l->src2].out_ndim : 3;
            if (n2 != ndim || memcmp(d2, dims, (size_t)ndim * sizeof *dims))
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                              "%s: the two addends differ in "
                                              "shape", sp->name);
            break;
        }
        case EMU_LAYER_EMBEDDING:
            /* Its input is an id (a one-hot row of `table` features). */
            l->in_dims[0] = sp->table;
            l->in_ndim = 1;
            l->positions = sp->positions;
            dims[0] = sp->out;
            ndim = 1;
            l->has_params = true;
            lm = true;
            break;
        case EMU_LAYER_LAYERNORM:
            if (ndim != 1)
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                 "%s: layer norm needs flat rows", sp->name);
            l->has_params = l->has_bias = true;
            break;
        case EMU_LAYER_ATTENTION:
            if (ndim != 1 || dims[0] % (3 * sp->heads))
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                 "%s: attention needs packed q, k, v rows of "
                                 "3 x %d heads (here %d features)", sp->name,
                                 sp->heads, dims[0]);
            l->heads = sp->heads;
            dims[0] /= 3;
            break;
        case EMU_LAYER_TIED: {
            const emu_layer *e = sp->tie >= 0 && sp->tie < i
                                     ? &m->layers[sp->tie] : NULL;
            if (!e || e->kind != EMU_LAYER_EMBEDDING || ndim != 1 ||
                dims[0] != e->out_dims[0])
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                 "%s: a tied head needs an earlier embedding "
                                 "of its input's width", sp->name);
            l->tie = sp->tie;
            e->priv->tied = true;
            dims[0] = e->in_dims[0];
            break;
        }
        case EMU_LAYER_LSTM_HH:
            /* w_hh (4H, H), b_hh: read by the LSTM layer after it. */
            l->in_dims[0] = sp->out;
            l->in_ndim = 1;
            dims[0] = sp->out;
            ndim = 1;
            l->has_params = l->has_bias = true;
            break;
        case EMU_LAYER_LSTM: {
            const emu_layer *hh = sp->tie >= 0 && sp->tie < i
                                      ? &m->layers[sp->tie] : NULL;
            if (ndim != 1 || !hh || hh->kind != EMU_LAYER_LSTM_HH ||
                hh->in_dims[0] != sp->out)
                return spec_fail(spec, m, err, EMU_ESPEC, "arch",
                                 "%s: an LSTM needs flat rows and an earlier "
                                 "LSTM_HH of its width", sp->name);
            l->tie = sp->tie;
            dims[0] = sp->out;
            l->has_params = l->has_bias = true;
            break;
        }
        default:
            snprintf(auto_name, sizeof auto_name, "%s%d",
                     l->kind == EMU_LAYER_GELU ? "gelu" : "relu", ++nact);
            break;
        }
        snprintf(l->name, sizeof l->name, "%s", sp->name[0] ? sp->name : auto_name);
        memcpy(l->out_dims, dims, sizeof dims);
        l->out_ndim = ndim;
        l->scale = 1.0;
        if (l->has_params) {
            if (first_param < 0)
                first_param = i;
            last_param = i;
        }
    }

    /* The graph: who needs a gradient, who reads each output. */
    for (int i = 0; i < n; i++) {
        emu_layer *l = &m->layers[i];
        struct emu_layer_priv *lp = l->priv;
        lp->upstream = l->has_params ||
                       (l->src >= 0 && m->layers[l->src].priv->upstream) ||
                       (l->kind == EMU_LAYER_ADD && l->src2 >= 0 &&
                        m->layers[l->src2].priv->upstream);
        if (l->src >= 0)
            m->layers[l->src].priv->consumers++;
        if (l->kind == EMU_LAYER_ADD && l->src2 >= 0)
            m->layers[l->src2].priv->consumers++;
    }
    for (int i = 0; i + 1 < n; i++)
        if (!m->layers[i].priv->consumers &&
            m->layers[i].kind != EMU_LAYER_LSTM_HH) /* read through `tie` */
            return spec_fail(spec, m, err, EMU_ESPEC, "arch", "%s: no layer "
                             "reads its output", m->layers[i].name);
    /* A tied head's weight gradient and its embedding's own, and an LSTM
     * layer's and its LSTM_HH's, go into one weight gradient from two
     * points of the backward pass: under per-layer factors they would
     * carry two scales. */
    if (p->scaling.kind == EMU_SCALE_LAYERWISE && lm)
        return spec_fail(spec, m, err, EMU_ESPEC, "arch", "'%s' with layerwise "
                         "(per-layer) loss scaling: a language model's tied "
                         "head and its embedding (or an LSTM's two weight "
                         "sets) gather one weight gradient from points that "
                         "would carry different factors; layerwise scaling "
                         "is for the image models (mlp, cnn, resnet)", arch);
    if (p->scaling.kind == EMU_SCALE_ADAPTIVE && is_graph(m))
        return spec_fail(spec, m, err, EMU_ESPEC, "arch", "'%s' with adaptive "
                         "(per-layer) loss scaling: its residual branches would "
                         "add input gradients that carry different per-layer "
                         "scales; use the layerwise rule, which aligns them "
                         "where they add (--set scaling=layerwise), or another "
                         "scaling",
                         arch);

    /* Exemptions: by group in a sequence model; otherwise parameter layers
     * by position, the others inherit. */
    bool ex = false;
    for (int i = 0; i < n; i++) {
        emu_layer *l = &m->layers[i];
        if (lm)
            ex = (spec[i].group & p->exempt) != 0;
        else if (l->has_params)
            ex = ((p->exempt & EMU_EXEMPT_FIRST) && i == first_param) ||
                 ((p->exempt & EMU_EXEMPT_LAST) && i == last_param);
        else if (i < first_param)
            ex = (p->exempt & EMU_EXEMPT_FIRST) != 0;
        l->exempt = ex;
    }

    /* Tensors. */
    if (!lm &&
        emu_tensor_alloc4(&m->x, "input", EMU_ROLE_ACTIVATION,
                          &prec_of(p, &m->layers[0], EMU_ROLE_ACTIVATION)->fmt,
                          (size_t)batch, (size_t)in_dims[0], (size_t)in_dims[1],
                          (size_t)in_dims[2], err))
        return free(spec), emu_model_free(m), -1;
    /* The format of each layer's output (a flatten passes its input's). */
    const emu_format **out_fmt = calloc((size_t)n, sizeof *out_fmt);
    if (!out_fmt) {
        free(spec);
        return build_fail(m, err, EMU_ENOMEM, "arch", "out of memory");
    }
    const emu_format *b32 = emu_format_find("binary32");
    const emu_format *nstat = &p->norm_stats.fmt; /* normalisation stats */
    for (int i = 0; i < n; i++) {
        emu_layer *l = &m->layers[i];
        struct emu_layer_priv *lp = l->priv;
        const emu_format *act = &prec_of(p, l, EMU_ROLE_ACTIVATION)->fmt;
        const emu_format *grad = &prec_of(p, l, EMU_ROLE_ACT_GRAD)->fmt;
        const emu_format *in_fmt = l->src >= 0 ? out_fmt[l->src] : &m->x.fmt;
        out_fmt[i] = l->kind == EMU_LAYER_FLATTEN ? in_fmt : act;
        if (lp->consumers > 1 &&
            alloc_act(&lp->gsum, l->name, "gsum", EMU_ROLE_ACT_GRAD, grad, R,
                      l->out_dims, l->out_ndim, err))
            goto fail;
        if (lp->consumers > 2 && p->scaling.kind == EMU_SCALE_LAYERWISE &&
            alloc_act(&lp->gtmp, l->name, "gtmp", EMU_ROLE_ACT_GRAD, grad, R,
                      l->out_dims, l->out_ndim, err))
            goto fail;
        if (l->kind == EMU_LAYER_FLATTEN)
            continue; /* views, made in forward and backward */
        /* An embedding reads ids, not a tensor to cast. */
        if ((l->has_params || l->kind == EMU_LAYER_TIED) &&
            l->kind != EMU_LAYER_EMBEDDING && l->kind != EMU_LAYER_LSTM_HH &&
            strcmp(in_fmt->name, act->name)) {
            l->has_xq = true;
            if (alloc_act(&l->xq, l->name, "xq", EMU_ROLE_ACTIVATION, act,
                          R, l->in_dims, l->in_ndim, err))
                goto fail;
        }
        if (l->kind != EMU_LAYER_LSTM_HH && /* parameters only */
            (alloc_act(&l->y, l->name, "y", EMU_ROLE_ACTIVATION, act, R,
                       l->out_dims, l->out_ndim, err) ||
            (l->kind != EMU_LAYER_ADD && /* an addition's dx is its dy */
             l->kind != EMU_LAYER_EMBEDDING && /* ids have no gradient */
             alloc_act(&l->dx, l->name, "dx", EMU_ROLE_ACT_GRAD, grad, R,
                       l->in_dims, l->in_ndim, err))))
            goto fail;
        if (l->kind == EMU_LAYER_LSTM) {
            /* What the backward pass reads, in the activation format. */
            char name[EMU_TENSOR_NAME_MAX];
            const size_t H = (size_t)l->out_dims[0];
            snprintf(name, sizeof name, "%s.gates", l->name);
            if (emu_tensor_alloc4(&lp->lstm_gates, name, EMU_ROLE_ACTIVATION,
                                  act, (size_t)batch, (size_t)rows, 4 * H, 0,
                                  err))
                goto fail;
            snprintf(name, sizeof name, "%s.c", l->name);
            if (emu_tensor_alloc4(&lp->lstm_c, name, EMU_ROLE_ACTIVATION, act,
                                  (size_t)batch, (size_t)rows, H, 0, err))
                goto fail;
        }
        if (l->kind == EMU_LAYER_MAXPOOL) {
            l->argmax = calloc(l->y.n, sizeof *l->argmax);
            if (!l->argmax) {
                emu_fail(err, EMU_ENOMEM, "model", "arch", "out of memory");
                goto fail;
            }
        }
        if (l->kind == EMU_LAYER_ATTENTION) {
            /* The probabilities in the policy's softmax format (or the
             * activation format): what the second product reads. */
            char name[EMU_TENSOR_NAME_MAX];
            snprintf(name, sizeof name, "%s.att", l->name);
            if (emu_tensor_alloc4(&lp->att, name, EMU_ROLE_ACTIVATION,
                                  p->softmax.fmt.ebits ? &p->softmax.fmt : act,
                                  (size_t)batch, (size_t)l->heads,
                                  (size_t)rows, (size_t)rows, err))
                goto fail;
        }
        if (l->kind == EMU_LAYER_EMBEDDING && l->positions) {
            lp->pos = malloc((size_t)R * sizeof *lp->pos);
            if (!lp->pos) {
                emu_fail(err, EMU_ENOMEM, "model", "arch", "out of memory");
                goto fail;
            }
            for (int r = 0; r < R; r++)
                lp->pos[r] = r % rows;
        }
        if (!l->has_params)
            continue;
        size_t wshape[4];
        int wdim, fan_in;
        init_kind wkind = INIT_HE, bkind = INIT_ZERO;
        if (l->kind == EMU_LAYER_LINEAR || l->kind == EMU_LAYER_EMBEDDING) {
            /* (Fo, Fi); an embedding's table (ids, D). */
            const bool emb = l->kind == EMU_LAYER_EMBEDDING;
            wshape[0] = (size_t)(emb ? l->in_dims[0] : l->out_dims[0]);
            wshape[1] = (size_t)(emb ? l->out_dims[0] : l->in_dims[0]);
            wdim = 2;
            fan_in = l->in_dims[0];
        } else if (l->kind == EMU_LAYER_LSTM || l->kind == EMU_LAYER_LSTM_HH) {
            /* w_ih (4H, I) or w_hh (4H, H); weights and biases
             * U(-1/sqrt(H), 1/sqrt(H)) as PyTorch: He-uniform's
             * sqrt(6 / fan_in) with fan_in = 6 H. */
            const int H = l->kind == EMU_LAYER_LSTM ? l->out_dims[0]
                                                    : l->in_dims[0];
            wshape[0] = 4 * (size_t)H;
            wshape[1] = (size_t)l->in_dims[0];
            wdim = 2;
            fan_in = 6 * H;
            bkind = INIT_HE;
        } else if (l->kind == EMU_LAYER_CONV) {
            wshape[0] = (size_t)l->out_dims[0];
            wshape[1] = (size_t)l->in_dims[0];
            wshape[2] = wshape[3] = (size_t)l->ksize;
            wdim = 4;
            fan_in = l->in_dims[0] * l->ksize * l->ksize;
        } else if (l->kind == EMU_LAYER_LAYERNORM) {
            /* gamma (D) = 1, beta (D) = 0; the row statistics. */
            wshape[0] = (size_t)l->in_dims[0];
            wdim = 1;
            fan_in = 1;
            wkind = INIT_ONE;
            char rname[EMU_TENSOR_NAME_MAX];
            snprintf(rname, sizeof rname, "%s.mean", l->name);
            if (emu_tensor_alloc4(&lp->ln_mean, rname, EMU_ROLE_OTHER, nstat,
                                  (size_t)R, 0, 0, 0, err))
                goto fail;
            snprintf(rname, sizeof rname, "%s.rstd", l->name);
            if (emu_tensor_alloc4(&lp->ln_rstd, rname, EMU_ROLE_OTHER, nstat,
                                  (size_t)R, 0, 0, 0, err))
                goto fail;
        } else { /* batch norm: gamma (C) = 1, beta (C) = 0 */
            wshape[0] = (size_t)l->in_dims[0];
            wdim = 1;
            fan_in = 1;
            wkind = INIT_ONE;
            char rname[EMU_TENSOR_NAME_MAX];
            if (alloc_act(&lp->bn_xc, l->name, "xc", EMU_ROLE_ACTIVATION, nstat,
                          batch, l->in_dims, l->in_ndim, err))
                goto fail;
            snprintf(rname, sizeof rname, "%s.mean", l->name);
            if (emu_tensor_alloc4(&lp->bn_mean, rname, EMU_ROLE_OTHER, nstat,
                                  wshape[0], 0, 0, 0, err))
                goto fail;
            snprintf(rname, sizeof rname, "%s.var", l->name);
            if (emu_tensor_alloc4(&lp->bn_var, rname, EMU_ROLE_OTHER, nstat,
                                  wshape[0], 0, 0, 0, err))
                goto fail;
            snprintf(rname, sizeof rname, "%s.running_mean", l->name);
            if (emu_tensor_alloc4(&l->running_mean, rname, EMU_ROLE_OTHER, b32,
                                  wshape[0], 0, 0, 0, err))
                goto fail;
            snprintf(rname, sizeof rname, "%s.running_var", l->name);
            if (emu_tensor_alloc4(&l->running_var, rname, EMU_ROLE_OTHER, b32,
                                  wshape[0], 0, 0, 0, err))
                goto fail;
            if (init_running(l, ctx)) {
                emu_fail(err, ctx->err.code, "model", "init", "%s",
                              ctx->err.message);
                goto fail;
            }
        }
        if (spec[i].init_std > 0.0)
            wkind = INIT_NORMAL;
        size_t bshape[1] = { wshape[0] };
        if (alloc_param(&l->weight, l->name, "w", p, l, wdim, wshape, err) ||
            (l->has_bias &&
             alloc_param(&l->bias, l->name, "b", p, l, 1, bshape, err)))
            goto fail;
        char site[EMU_TENSOR_NAME_MAX];
        snprintf(site, sizeof site, "%s.w", l->name);
        if (init_param(&l->weight, site, fan_in, wkind, spec[i].init_std, seed,
                       2 * (uint64_t)i, ctx, p)) {
            emu_fail(err, ctx->err.code, "model", "init", "%s",
                          ctx->err.message);
            goto fail;
        }
        snprintf(site, sizeof site, "%s.b", l->name);
        if (l->has_bias &&
            init_param(&l->bias, site, fan_in, bkind, 0.0, seed,
                       2 * (uint64_t)i + 1, ctx, p)) {
            emu_fail(err, ctx->err.code, "model", "init", "%s",
                          ctx->err.message);
            goto fail;
        }
    }
    free(out_fmt);
    free(spec);
    const emu_layer *last = &m->layers[n - 1];
    if ((last->kind != EMU_LAYER_LINEAR && last->kind != EMU_LAYER_TIED) ||
        last->out_dims[0] != classes)
        return build_fail(m, err, EMU_ESPEC, "arch", "the last layer must be a linear "
                          "layer with %d outputs", classes);
    /* The loss is reported, not trained on: in the policy's loss format. */
    if (emu_tensor_alloc4(&m->loss, "loss", EMU_ROLE_OTHER, &p->loss.fmt, 1,
                          0, 0, 0, err) ||
        emu_tensor_alloc4(&m->dlogits, "dlogits", EMU_ROLE_ACT_GRAD,
                          &prec_of(p, last, EMU_ROLE_ACT_GRAD)->fmt,
                          (size_t)R, (size_t)classes, 0, 0, err))
        return emu_model_free(m), -1;
    return 0;
fail:
    free(out_fmt);
    free(spec);
    emu_model_free(m);
    return -1;
}

int emu_model_build(emu_model *m, const char *arch, const emu_policy *p,
                    int batch, int in_c, int in_h, int in_w, int classes,
                    uint64_t seed, emu_ctx *ctx, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    memset(m, 0, sizeof *m);
    if (batch < 1 || batch > 1 << 16)
        return emu_fail(err, EMU_EINVAL, "model", "batch", "%d is not in 1..65536", batch);
    layer_spec *spec = malloc(MAX_SPEC * sizeof *spec);
    if (!spec)
        return emu_fail(err, EMU_ENOMEM, "model", "arch", "out of memory");
    int n;
    if (parse_arch(arch, in_c * in_h * in_w, classes, spec, &n, err)) {
        free(spec);
        return -1;
    }
    const int in_dims[3] = { in_c, in_h, in_w };
    return build_spec(m, arch, spec, n, p, batch, 1, in_dims, classes, seed,
                      ctx, err);
}

/* A language model from its spec (freed here): windows of seq_len
 * tokens, the token buffer. */
static int build_lm_spec(emu_model *m, const char *arch, layer_spec *spec,
                         int n, const emu_policy *p, int batch, int seq_len,
                         int vocab, uint64_t seed, emu_ctx *ctx,
                         emu_error *err)
{
    const int in_dims[3] = { seq_len, 1, 1 };
    if (build_spec(m, arch, spec, n, p, batch, seq_len, in_dims, vocab, seed,
                   ctx, err))
        return -1;
    m->seq_len = seq_len;
    m->vocab = vocab;
    m->tokens = calloc((size_t)batch * (size_t)seq_len, sizeof *m->tokens);
    if (!m->tokens)
        return build_fail(m, err, EMU_ENOMEM, "arch", "out of memory");
    return 0;
}

int emu_model_build_lm(emu_model *m, const char *arch, const emu_policy *p,
                       int batch, int seq_len, int vocab, uint64_t seed,
                       emu_ctx *ctx, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    memset(m, 0, sizeof *m);
    if (!arch)
        arch = "(null)";
    if (batch < 1 || batch > 1 << 16)
        return emu_fail(err, EMU_EINVAL, "model", "batch", "%d is not in "
                        "1..65536", batch);
    if (vocab < 2 || vocab > 1 << 20)
        return emu_fail(err, EMU_EINVAL, "model", "vocab", "%d is not in "
                        "2..1048576", vocab);
    const char *colon = strchr(arch, ':');
    const char *rest = colon ? colon + 1 : "";
    if (arch_kind_is(arch, "lstm")) {
        if (colon && !*rest)
            return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': expected "
                            "lstm:L-H after the colon", arch);
        int L = 0, H = 0;
        if (lstm_parse(arch, rest, vocab, &L, &H, err))
            return -1;
        if (seq_len < 1)
            return emu_fail(err, EMU_EINVAL, "model", "seq_len", "%d is not "
                            "positive", seq_len);
        if ((int64_t)batch * seq_len > INT32_MAX / 4)
            return emu_fail(err, EMU_EINVAL, "model", "batch", "%d windows of "
                            "%d tokens are too many rows", batch, seq_len);
        layer_spec *spec = malloc((size_t)(2 + 2 * L) * sizeof *spec);
        if (!spec)
            return emu_fail(err, EMU_ENOMEM, "model", "arch", "out of memory");
        int n;
        lstm_spec(L, H, vocab, spec, &n);
        return build_lm_spec(m, arch, spec, n, p, batch, seq_len, vocab, seed,
                             ctx, err);
    }
    if (!arch_kind_is(arch, "gpt"))
        return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': unknown language "
                        "model (gpt, gpt:L-D-H-T such as gpt:4-128-4-64)", arch);
    if (colon && !*rest)
        return emu_fail(err, EMU_ESPEC, "model", "arch", "'%s': expected "
                        "gpt:L-D-H-T after the colon", arch);
    gpt_dims g = { 0, 0, 0, 0 };
    if (gpt_parse(arch, rest, vocab, &g, err))
        return -1;
    if (seq_len < 1 || seq_len > g.T)
        return emu_fail(err, EMU_EINVAL, "model", "seq_len", "%d is not in 1..%d "
                        "(the context T of '%s')", seq_len, g.T, arch);
    if ((int64_t)batch * seq_len > INT32_MAX / 4)
        return emu_fail(err, EMU_EINVAL, "model", "batch", "%d windows of %d "
                        "tokens are too many rows", batch, seq_len);
    layer_spec *spec = malloc((size_t)(5 + 10 * g.L) * sizeof *spec);
    if (!spec)
        return emu_fail(err, EMU_ENOMEM, "model", "arch", "out of memory");
    int n;
    gpt_spec(&g, vocab, spec, &n);
    return build_lm_spec(m, arch, spec, n, p, batch, seq_len, vocab, seed, ctx,
                         err);
}

size_t emu_model_param_count(const emu_model *m)
{
    size_t c = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->layers[i].has_params)
            c += m->layers[i].weight.w.n + m->layers[i].bias.w.n;
    return c;
}

/* A flatten layer's tensors are views of its neighbours' with 2-d shape. */
static void view_as(emu_tensor *view, const emu_tensor *of, int batch,
                    const int *dims, int ndim, const char *name)
{
    *view = *of;
    view->owns_data = false;
    view->ndim = ndim + 1;
    view->shape[0] = (size_t)batch;
    for (int i = 0; i < ndim; i++)
        view->shape[i + 1] = (size_t)dims[i];
    snprintf(view->name, sizeof view->name, "%s", name);
}

static void site_of(char *buf, size_t size, const emu_layer *l, const char *what)
{
    if (what)
        snprintf(buf, size, "%s.%s", l->name, what);
    else
        snprintf(buf, size, "%s", l->name);
}

/* The output layer i reads (-1: the model's input). */
static const emu_tensor *output_of(const emu_model *m, int i)
{
    return i < 0 ? &m->x : &m->layers[i].y;
}

/* Batch norm's settings (PyTorch's defaults): the statistics under the
 * policy's norm_stats (binary32 nearest-even in every preset, as the
 * mixed-precision recipes keep them). */
static emu_batchnorm_opts bn_opts(const emu_model *m, const emu_policy *p)
{
    return (emu_batchnorm_opts){ .accum = &p->accum, .training = !m->eval,
                                 .eps = 1e-5, .momentum = 0.1,
                                 .stat_rnd = &p->norm_stats.rnd };
}

/* Layer norm's settings: PyTorch's eps, the row statistics under
 * norm_stats as for batch norm. */
static emu_layernorm_opts ln_opts(const emu_policy *p)
{
    return (emu_layernorm_opts){ .accum = &p->accum, .eps = 1e-5,
                                 .stat_rnd = &p->norm_stats.rnd };
}

/* Attention's settings: the scores, probabilities and their gradients
 * under the policy's softmax rounding, or (softmax=activation) under the
 * layer's forward and backward roundings. */
static emu_attention_opts attn_opts(const emu_policy *p, const emu_layer *l)
{
    return (emu_attention_opts){ .accum = &p->accum, .heads = l->heads,
                                 .stat_rnd = p->softmax.fmt.ebits
                                                 ? &p->softmax.rnd : NULL };
}

/* A sequence model's (B*T, F) rows seen as the (B, T, F) the attention
 * ops take. */
static emu_tensor seq_view(const emu_tensor *t, const emu_model *m)
{
    emu_tensor v = *t;
    v.owns_data = false;
    v.ndim = 3;
    v.shape[0] = (size_t)m->batch;
    v.shape[1] = (size_t)m->seq_len;
    v.shape[2] = t->n / ((size_t)m->batch * (size_t)m->seq_len);
    return v;
}

/* The ids an embedding reads: the tokens, or the positions. */
static const int32_t *embedding_ids(const emu_model *m, const emu_layer *l)
{
    return l->positions ? l->priv->pos : m->tokens;
}

int emu_model_forward(emu_model *m, emu_ctx *ctx, const emu_policy *p)
{
    EMU_HOSTFP_GUARD;
    char site[64];
    for (int i = 0; i < m->n_layers; i++) {
        emu_layer *l = &m->layers[i];
        const emu_tensor *in = output_of(m, l->src);
        const emu_rounding *rnd = &prec_of(p, l, EMU_ROLE_ACTIVATION)->rnd;
        const emu_tensor *x = in;
        if (l->has_xq) {
            site_of(site, sizeof site, l, "xq");
            if (emu_t_cast(ctx, site, &l->xq, in, rnd))
                return -1;
            x = &l->xq;
        }
        l->in = x;
        int rc = 0;
        switch (l->kind) {
        case EMU_LAYER_LINEAR: {
            const emu_tensor *xa, *wa;
            double g;
            if (forward_operands(ctx, p, l, x, &l->weight.w, &xa, &wa, &g))
                return -1;
            emu_matmul_opts o = {
                .accum = &p->accum, .trans_b = true,
                .a_src = l->has_xq ? in : xa != x ? x : NULL,
                .b_src = p->use_master ? &l->weight.master
                         : wa != &l->weight.w ? &l->weight.w : NULL,
                .alpha = g, .src_alpha = 1.0 };
            site_of(site, sizeof site, l, "matmul");
            rc = emu_t_matmul(ctx, site, &l->y, xa, wa, &o, rnd);
            site_of(site, sizeof site, l, "bias");
            if (!rc)
                rc = emu_t_add_bias(ctx, site, &l->y, &l->y, &l->bias.w, 1,
                                    rnd);
            break;
        }
        case EMU_LAYER_CONV: {
            const emu_tensor *xa, *wa;
            double g;
            if (forward_operands(ctx, p, l, x, &l->weight.w, &xa, &wa, &g))
                return -1;
            const bool apart = g != 1.0; /* the bias is not scaled */
            emu_conv_opts o = { .accum = &p->accum, .stride = l->stride,
                                .pad = l->pad, .alpha = g };
            site_of(site, sizeof site, l, "conv");
            rc = emu_t_conv2d(ctx, site, &l->y, xa, wa,
                              apart || !l->has_bias ? NULL : &l->bias.w, &o,
                              rnd);
            site_of(site, sizeof site, l, "bias");
            if (!rc && apart && l->has_bias)
                rc = emu_t_add_bias(ctx, site, &l->y, &l->y, &l->bias.w, 1,
                                    rnd);
            break;
        }
        case EMU_LAYER_MAXPOOL: {
            emu_pool_opts o = { .size = l->ksize, .stride = l->stride };
            site_of(site, sizeof site, l, NULL);
            rc = emu_t_maxpool2d(ctx, site, &l->y, l->argmax, x, &o, rnd);
            break;
        }
        case EMU_LAYER_RELU:
        case EMU_LAYER_GELU:
            site_of(site, sizeof site, l, NULL);
            rc = emu_t_unary(ctx, site, &l->y, x,
                             l->kind == EMU_LAYER_RELU ? EMU_UNARY_RELU
                                                       : EMU_UNARY_GELU,
                             0.0f, 0.0f, rnd);
            break;
        case EMU_LAYER_FLATTEN:
            view_as(&l->y, x, m->batch, l->out_dims, l->out_ndim, l->name);
            break;
        case EMU_LAYER_BATCHNORM: {
            struct emu_layer_priv *lp = l->priv;
            emu_batchnorm_opts o = bn_opts(m, p);
            rc = emu_t_batchnorm2d(ctx, l->name, &l->y, &lp->bn_xc,
                                   &lp->bn_mean, &lp->bn_var, &l->running_mean,
                                   &l->running_var, x, &l->weight.w,
                                   &l->bias.w, &o, rnd);
            break;
        }
        case EMU_LAYER_GAP: {
            /* The mean over the image, (B, C, H W) along axis 2. */
            emu_tensor v = *x;
            v.owns_data = false;
            v.ndim = 3;
            v.shape[2] = x->shape[2] * x->shape[3];
            rc = emu_t_reduce(ctx, l->name, &l->y, &v, EMU_REDUCE_MEAN, 2,
                              &p->accum, rnd);
            break;
        }
        case EMU_LAYER_ADD:
            rc = emu_t_add(ctx, l->name, &l->y, x, output_of(m, l->src2), rnd);
            break;
        case EMU_LAYER_EMBEDDING:
            rc = emu_t_embedding(ctx, l->name, &l->y, &l->weight.w,
                                 embedding_ids(m, l), l->y.shape[0], rnd);
            break;
        case EMU_LAYER_LAYERNORM: {
            emu_layernorm_opts o = ln_opts(p);
            rc = emu_t_layernorm(ctx, l->name, &l->y, &l->priv->ln_mean,
                                 &l->priv->ln_rstd, x, &l->weight.w,
                                 &l->bias.w, &o, rnd);
            break;
        }
        case EMU_LAYER_ATTENTION: {
            /* Both batched products in the activation format, under the
             * policy's accumulator (no scaled operands). */
            emu_tensor qkv = seq_view(x, m), out = seq_view(&l->y, m);
            emu_attention_opts o = attn_opts(p, l);
            attn_hook u = { p, l };
            const emu_operand_hook hk = { attn_operand, &u };
            if (p->attn_quant && quantizes(p, l))
                o.operands = &hk;
            rc = emu_t_attention(ctx, l->name, &out, &l->priv->att, &qkv, &o,
                                 rnd);
            break;
        }
        case EMU_LAYER_TIED: {
            /* The linear layer's product with the embedding's table as W. */
            const emu_param *w = &m->layers[l->tie].weight;
            const emu_tensor *xa, *wa;
            double g;
            if (forward_operands(ctx, p, l, x, &w->w, &xa, &wa, &g))
                return -1;
            emu_matmul_opts o = {
                .accum = &p->accum, .trans_b = true,
                .a_src = l->has_xq ? in : xa != x ? x : NULL,
                .b_src = p->use_master ? &w->master
                         : wa != &w->w ? &w->w : NULL,
                .alpha = g, .src_alpha = 1.0 };
            site_of(site, sizeof site, l, "matmul");
            rc = emu_t_matmul(ctx, site, &l->y, xa, wa, &o, rnd);
            break;
        }
        case EMU_LAYER_LSTM_HH:
            break; /* its parameters are the next LSTM layer's */
        case EMU_LAYER_LSTM: {
            const emu_layer *hh = &m->layers[l->tie];
            emu_lstm_weights w = { &l->weight.w, &hh->weight.w, &l->bias.w,
                                   &hh->bias.w };
            emu_lstm_opts o = { .accum = &p->accum };
            lstm_hook u = { p, l, &m->layers[l->tie], false };
            const emu_operand_hook hk = { lstm_operand, &u };
            if (quantizes(p, l) || quantizes(p, u.hh))
                o.operands = &hk;
            emu_tensor xs = seq_view(x, m), ys = seq_view(&l->y, m);
            rc = emu_t_lstm(ctx, l->name, &ys, &l->priv->lstm_gates,
                            &l->priv->lstm_c, NULL, NULL, &xs, NULL, NULL, &w,
                            &o, rnd);
            break;
        }
        default:
            rc = emu_ctx_fail(ctx, l->name, "unknown layer kind");
        }
        if (rc)
            return -1;
    }
    return 0;
}

/* dbias of a convolution = dY summed over the batch and the image, in two
 * reductions (over space into l->priv->qsum (B, C), then over the batch): the
 * path when the weight gradient's scales must not touch it. */
static int conv_bias_grad(emu_ctx *ctx, const emu_policy *p, emu_layer *l,
                          const emu_tensor *dy, const emu_rounding *rnd)
{
    char site[64];
    site_of(site, sizeof site, l, "dbias.space");
    emu_error e;
    emu_tensor *qsum = &l->priv->qsum;
    if (!qsum->data &&
        emu_tensor_alloc4(qsum, site, EMU_ROLE_WEIGHT_GRAD, &l->bias.g.fmt,
                          dy->shape[0], dy->shape[1], 0, 0, &e))
        return emu_ctx_failc(ctx, e.code, site, "%s", e.message);
    emu_tensor v = *dy;
    v.owns_data = false;
    v.ndim = 3;
    v.shape[2] = dy->shape[2] * dy->shape[3];
    if (emu_t_reduce(ctx, site, qsum, &v, EMU_REDUCE_SUM, 2, &p->accum, rnd))
        return -1;
    site_of(site, sizeof site, l, "dbias");
    return emu_t_reduce(ctx, site, &l->bias.g, qsum, EMU_REDUCE_SUM, 0,
                        &p->accum, rnd);
}

/* The largest magnitude in t (LAYERWISE's overflow checks). */
static double amax_of(const emu_tensor *t)
{
    double mx = 0.0;
    for (size_t i = 0; i < t->n; i++)
        mx = fmax(mx, fabs((double)t->data[i]));
    return mx;
}

/* Hands g, the gradient w.r.t. the output of layer j, from its consumer
 * `from`: the first to arrive is kept as it is, each later one added to
 * the sum so far (one rounding, into j's act_grad format and rounding), at
 * site "<from's name up to its last '.'>.grad_add".
 *
 * LAYERWISE: g carries the product gf of the per-layer factors met on its
 * way (the loss's scale apart).  Addends of different factors are brought
 * to one before they add: the larger, if the sum cannot overflow at it
 * (the addends' largest magnitudes, so rescaled, add up to at most the
 * format's largest value), else the smaller; the other addend is scaled
 * by the ratio (a power of two) at site "<prefix>.grad_rescale".  Scaling
 * up is exact, so a residual merge never costs the deeper branch its
 * factors while it is safe; the authors' code likewise rescales branches
 * to the largest scale that does not overflow. */
static int deliver(emu_model *m, emu_ctx *ctx, const emu_policy *p, int j,
                   const emu_layer *from, const emu_tensor *g, double gf)
{
    emu_layer *t = &m->layers[j];
    struct emu_layer_priv *tp = t->priv;
    if (!tp->gout) {
        tp->gout = g;
        tp->gfactor = gf;
        return 0;
    }
    const char *dot = strrchr(from->name, '.');
    int len = dot ? (int)(dot - from->name) : (int)strlen(from->name);
    char site[64];
    snprintf(site, sizeof site, "%.*s.grad_add", len, from->name);
    if (!tp->gsum.data)
        return emu_ctx_fail(ctx, site, "%s: more readers than counted", t->name);
    const emu_rounding *rnd = &prec_of(p, t, EMU_ROLE_ACT_GRAD)->rnd;
    const emu_tensor *a = tp->gout, *b = g;
    if (p->scaling.kind == EMU_SCALE_LAYERWISE && gf != tp->gfactor) {
        const double fa = tp->gfactor, fb = gf;
        double f = fmax(fa, fb);
        if (amax_of(a) * (f / fa) + amax_of(b) * (f / fb) > tp->gsum.fmt.max)
            f = fmin(fa, fb);
        char rs[64];
        snprintf(rs, sizeof rs, "%.*s.grad_rescale", len, from->name);
        if (f != fb) {
            /* b rescaled into a buffer a does not occupy */
            emu_tensor *dst = a == &tp->gsum ? &tp->gtmp : &tp->gsum;
            if (!dst->data)
                return emu_ctx_fail(ctx, rs, "%s: more readers than counted",
                                    t->name);
            if (emu_t_scale(ctx, rs, dst, (float)(f / fb), b, rnd))
                return -1;
            b = dst;
        } else {
            if (emu_t_scale(ctx, rs, &tp->gsum, (float)(f / fa), a, rnd))
                return -1;
            a = &tp->gsum;
        }
        tp->gfactor = f;
    }
    if (emu_t_add(ctx, site, &tp->gsum, a, b, rnd))
        return -1;
    tp->gout = &tp->gsum;
    return 0;
}

/* LAYERWISE: layer l's factor for its input-gradient GEMM dX = dY W, from
 * the operands (nn_layerwise.c); its reduction length k; gf the factors dY
 * carries. */
static double layerwise_factor(const emu_policy *p, const emu_layer *l,
                               const emu_tensor *dy, const emu_tensor *w,
                               double k, double gf)
{
    emu_layerwise_stats st;
    emu_layerwise_operand_stats(&st, dy, w, k);
    const double room = p->total_max / (p->scaling.init * gf);
    return emu_layerwise_factor(&st, &l->dx.fmt, p->scaling.target,
                                p->layer_max, room);
}

int emu_model_backward(emu_model *m, emu_ctx *ctx, const emu_policy *p,
                       const int *labels, float scale)
{
    EMU_HOSTFP_GUARD;
    const emu_layer *last = &m->layers[m->n_layers - 1];
    /* The loss value under the policy's loss rounding, its gradient under
     * the head's. */
    if (emu_cross_entropy_rnd2(ctx, "loss", &m->loss, &m->dlogits, &last->y,
                               labels, scale, &p->loss.rnd,
                               &prec_of(p, last, EMU_ROLE_ACT_GRAD)->rnd))
        return -1;
    char site[64];
    const bool lw = p->scaling.kind == EMU_SCALE_LAYERWISE;
    for (int i = 0; i < m->n_layers; i++) {
        m->layers[i].priv->gout = NULL;
        m->layers[i].priv->gfactor = 1.0;
        if (lw)
            m->layers[i].scale = 1.0;
    }
    m->layers[m->n_layers - 1].priv->gout = &m->dlogits;
    /* Gradients are needed where a parameter lies upstream; a layer's
     * input gradient goes to the layer(s) it read. */
    for (int i = m->n_layers - 1; i >= 0; i--) {
        emu_layer *l = &m->layers[i];
        if (!l->priv->upstream || l->kind == EMU_LAYER_LSTM_HH)
            continue; /* an LSTM_HH's gradients come from its LSTM layer */
        const emu_tensor *dy = l->priv->gout;
        if (!dy)
            return emu_ctx_fail(ctx, l->name, "no gradient reached the output");
        /* LAYERWISE: the factors dy carries; its weight gradient carries
         * them times the loss's scale. */
        const double gf = l->priv->gfactor;
        if (lw)
            l->grad_scale = (double)scale * gf;
        const bool need_dx = l->src >= 0 && m->layers[l->src].priv->upstream;
        const emu_rounding *grad_rnd = &prec_of(p, l, EMU_ROLE_ACT_GRAD)->rnd;
        const emu_rounding *wgrad_rnd =
            &prec_of(p, l, EMU_ROLE_WEIGHT_GRAD)->rnd;
        int rc = 0;
        switch (l->kind) {
        case EMU_LAYER_LINEAR: {
            const emu_tensor *dya, *xa, *wa;
            double g;
            if (dweight_operands(ctx, p, l, dy, &dya, &xa, &g))
                return -1;
            emu_matmul_opts o = { .accum = &p->accum, .trans_a = true,
                                  .alpha = g,
                                  .src_alpha = 1.0,
                                  .a_src = dya != dy ? dy : NULL,
                                  .b_src = xa != l->in ? l->in : NULL };
            site_of(site, sizeof site, l, "dweight");
            rc = emu_t_matmul(ctx, site, &l->weight.g, dya, xa, &o,
                              wgrad_rnd);
            site_of(site, sizeof site, l, "dbias");
            if (!rc)
                rc = emu_t_reduce(ctx, site, &l->bias.g, dy, EMU_REDUCE_SUM, 0,
                                  &p->accum, wgrad_rnd);
            if (!rc && need_dx) {
                if (lw)
                    l->scale = layerwise_factor(p, l, dy, &l->weight.w,
                                                dy->shape[1], gf);
                if (dinput_operands(ctx, p, l, dy, &l->weight.w, &dya, &wa, &g))
                    return -1;
                emu_matmul_opts d = { .accum = &p->accum,
                                      .alpha = l->scale * g,
                                      .src_alpha = l->scale,
                                      .a_src = dya != dy ? dy : NULL,
                                      .b_src = wa != &l->weight.w
                                                   ? &l->weight.w : NULL };
                site_of(site, sizeof site, l, "dinput");
                rc = emu_t_matmul(ctx, site, &l->dx, dya, wa, &d, grad_rnd);
            }
            break;
        }
        case EMU_LAYER_CONV: {
            const emu_tensor *dya, *xa, *wa;
            double g;
            if (dweight_operands(ctx, p, l, dy, &dya, &xa, &g))
                return -1;
            emu_conv_opts o = { .accum = &p->accum, .stride = l->stride,
                                .pad = l->pad };
            emu_conv_opts ow = o;
            ow.alpha = g;
            const bool apart = g != 1.0;
            site_of(site, sizeof site, l, "dweight");
            rc = emu_t_conv2d_backward_weights(ctx, site, &l->weight.g,
                                               apart || !l->has_bias
                                                   ? NULL : &l->bias.g,
                                               dya, xa, &ow, wgrad_rnd);
            if (!rc && apart && l->has_bias)
                rc = conv_bias_grad(ctx, p, l, dy, wgrad_rnd);
            if (!rc && need_dx) {
                if (lw) /* dX sums C_out k k products */
                    l->scale = layerwise_factor(
                        p, l, dy, &l->weight.w,
                        (double)l->weight.w.shape[0] * l->weight.w.shape[2] *
                            l->weight.w.shape[3], gf);
                if (dinput_operands(ctx, p, l, dy, &l->weight.w, &dya, &wa, &g))
                    return -1;
                emu_conv_opts d = o;
                d.alpha = l->scale * g;
                site_of(site, sizeof site, l, "dinput");
                rc = emu_t_conv2d_backward_data(ctx, site, &l->dx, dya, wa, &d,
                                                grad_rnd);
            }
            break;
        }
        case EMU_LAYER_MAXPOOL: {
            emu_pool_opts o = { .size = l->ksize, .stride = l->stride };
            site_of(site, sizeof site, l, "dinput");
            rc = emu_t_maxpool2d_backward(ctx, site, &l->dx, dy, l->argmax, &o,
                                          grad_rnd);
            break;
        }
        case EMU_LAYER_RELU:
        case EMU_LAYER_GELU:
            site_of(site, sizeof site, l, "dinput");
            rc = emu_t_unary_backward(ctx, site, &l->dx, dy, l->in,
                                      l->kind == EMU_LAYER_RELU ? EMU_UNARY_RELU
                                                                : EMU_UNARY_GELU,
                                      0.0f, grad_rnd);
            break;
        case EMU_LAYER_FLATTEN:
            view_as(&l->dx, dy, m->batch, l->in_dims, l->in_ndim, l->name);
            break;
        case EMU_LAYER_BATCHNORM: {
            /* (No per-layer factor: the builder refuses ADAPTIVE here, and
             * LAYERWISE passes dy's factors through: the backward pass is
             * linear in dy.) */
            struct emu_layer_priv *lp = l->priv;
            emu_batchnorm_opts o = bn_opts(m, p);
            o.param_grad_rnd = wgrad_rnd;
            rc = emu_t_batchnorm2d_backward(ctx, l->name, &l->dx, &l->weight.g,
                                            &l->bias.g, dy, &lp->bn_xc,
                                            &lp->bn_var, &l->weight.w, &o,
                                            grad_rnd);
            break;
        }
        case EMU_LAYER_GAP: {
            /* dx = dy / (H W) over the image: the average pool's backward
             * with one window. */
            emu_tensor v = *dy;
            v.owns_data = false;
            v.ndim = 4;
            v.shape[2] = v.shape[3] = 1;
            emu_pool_opts o = { .size = l->ksize, .stride = l->stride };
            site_of(site, sizeof site, l, "dinput");
            if (need_dx)
                rc = emu_t_avgpool2d_backward(ctx, site, &l->dx, &v, &o,
                                              grad_rnd);
            break;
        }
        case EMU_LAYER_ADD:
            /* Both addends' gradient is dy itself. */
            l->dx = *dy;
            l->dx.owns_data = false;
            break;
        case EMU_LAYER_EMBEDDING: {
            /* A table read by a tied head holds the head's gradient
             * already (the head comes later in the list): add to it. */
            emu_embedding_opts o = { .accum = &p->accum,
                                     .accumulate = l->priv->tied };
            site_of(site, sizeof site, l, "dweight");
            rc = emu_t_embedding_backward(ctx, site, &l->weight.g, dy,
                                          embedding_ids(m, l), dy->shape[0],
                                          &o, wgrad_rnd);
            break;
        }
        case EMU_LAYER_LAYERNORM: {
            emu_layernorm_opts o = ln_opts(p);
            o.param_grad_rnd = wgrad_rnd;
            rc = emu_t_layernorm_backward(ctx, l->name, &l->dx, &l->weight.g,
                                          &l->bias.g, dy, l->in,
                                          &l->priv->ln_mean, &l->priv->ln_rstd,
                                          &l->weight.w, &o, grad_rnd);
            break;
        }
        case EMU_LAYER_ATTENTION: {
            emu_tensor dqkv = seq_view(&l->dx, m), dout = seq_view(dy, m),
                       qkv = seq_view(l->in, m);
            emu_attention_opts o = attn_opts(p, l);
            attn_hook u = { p, l };
            const emu_operand_hook hk = { attn_operand, &u };
            if (p->attn_quant && quantizes(p, l))
                o.operands = &hk;
            rc = emu_t_attention_backward(ctx, l->name, &dqkv, &dout, &qkv,
                                          &l->priv->att, &o, grad_rnd);
            break;
        }
        case EMU_LAYER_TIED: {
            /* The weight gradient goes into the embedding's, in its
             * format and rounding; the embedding adds its own later. */
            emu_layer *e = &m->layers[l->tie];
            const emu_tensor *dya, *xa, *wa;
            double g;
            if (dweight_operands(ctx, p, l, dy, &dya, &xa, &g))
                return -1;
            emu_matmul_opts o = { .accum = &p->accum, .trans_a = true,
                                  .alpha = g, .src_alpha = 1.0,
                                  .a_src = dya != dy ? dy : NULL,
                                  .b_src = xa != l->in ? l->in : NULL };
            site_of(site, sizeof site, l, "dweight");
            rc = emu_t_matmul(ctx, site, &e->weight.g, dya, xa, &o,
                              &prec_of(p, e, EMU_ROLE_WEIGHT_GRAD)->rnd);
            if (!rc && need_dx) {
                /* (No layerwise factor: the language models refuse it.) */
                if (dinput_operands(ctx, p, l, dy, &e->weight.w, &dya, &wa, &g))
                    return -1;
                emu_matmul_opts d = { .accum = &p->accum,
                                      .alpha = l->scale * g,
                                      .src_alpha = l->scale,
                                      .a_src = dya != dy ? dy : NULL,
                                      .b_src = wa != &e->weight.w
                                                   ? &e->weight.w : NULL };
                site_of(site, sizeof site, l, "dinput");
                rc = emu_t_matmul(ctx, site, &l->dx, dya, wa, &d, grad_rnd);
            }
            break;
        }
        case EMU_LAYER_LSTM: {
            /* Its LSTM_HH's gradients too (that layer, earlier in the
             * list, has nothing left to do). */
            emu_layer *hh = &m->layers[l->tie];
            emu_lstm_weights w = { &l->weight.w, &hh->weight.w, &l->bias.w,
                                   &hh->bias.w };
            emu_lstm_grads gr = { &l->weight.g, &hh->weight.g, &l->bias.g,
                                  &hh->bias.g };
            emu_lstm_opts o = { .accum = &p->accum, .param_grad_rnd = wgrad_rnd };
            lstm_hook u = { p, l, hh, false };
            const emu_operand_hook hk = { lstm_operand, &u };
            if (quantizes(p, l) || quantizes(p, hh))
                o.operands = &hk;
            emu_tensor dxs = seq_view(&l->dx, m), dys = seq_view(dy, m),
                       xs = seq_view(l->in, m), ys = seq_view(&l->y, m);
            rc = emu_t_lstm_backward(ctx, l->name, need_dx ? &dxs : NULL, &gr,
                                     &dys, &xs, &ys, &l->priv->lstm_gates,
                                     &l->priv->lstm_c, NULL, NULL, &w, &o,
                                     grad_rnd);
            break;
        }
        default:
            rc = emu_ctx_fail(ctx, l->name, "unknown layer kind");
        }
        if (rc)
            return -1;
        /* The input gradient carries this layer's factor (1 but for a GEMM
         * layer under LAYERWISE) on top of dy's. */
        const double dxf = lw ? gf * l->scale : 1.0;
        if (need_dx && deliver(m, ctx, p, l->src, l, &l->dx, dxf))
            return -1;
        if (l->kind == EMU_LAYER_ADD && l->src2 >= 0 &&
            m->layers[l->src2].priv->upstream &&
            deliver(m, ctx, p, l->src2, l, &l->dx, dxf))
            return -1;
    }
    return 0;
}
