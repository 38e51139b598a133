/*
 * emu/nn.h — training in any format: precision policies, layers, models,
 * loss scaling, optimizers and the training loop.
 *
 * llm.c's shape: each layer is a forward/backward pair over emu tensors,
 * every computation an op through the choke point, so a training step is
 * measured op by op and tensor by tensor.  A precision policy says, for
 * each tensor role, which format and rounding it lives in; presets name
 * the recipes of the mixed-precision papers.
 *
 * Shapes: B batch, C channels, H x W image, F features, K classes; for
 * language models T tokens per window, V ids, D width (B*T rows).
 */
#ifndef EMU_NN_H
#define EMU_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "emu/accum.h"
#include "emu/data.h"
#include "emu/format.h"
#include "emu/ops.h"
#include "emu/round.h"
#include "emu/scaled.h"
#include "emu/stats.h"
#include "emu/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- precision policy --------------------------------------------------- */

typedef struct emu_role_prec {
    emu_format fmt;
    emu_rounding rnd;        /* rnd.rng unused: streams come from the ctx */
} emu_role_prec;

typedef enum emu_update_rule {
    EMU_UPDATE_PLAIN,        /* w = round(w - lr * step) in w's format, rnd  */
    EMU_UPDATE_SR,           /* the same rounded stochastically               */
    EMU_UPDATE_KAHAN,        /* compensated: a buffer c in w's format keeps
                                what each rounding lost (Zamirai et al.);
                                SGD or Adam, no master copy                */
    EMU_UPDATE_COUNT
} emu_update_rule;

typedef enum emu_scaling {
    EMU_SCALE_NONE,
    EMU_SCALE_STATIC,        /* loss * S, gradients / S                      */
    EMU_SCALE_DYNAMIC,       /* GradScaler: grow x growth after `interval`
                                clean steps; on inf/NaN x backoff, skip     */
    EMU_SCALE_ENHANCED,      /* dynamic with a floor that rises on a
                                schedule (Mellempudi et al., FP8)          */
    EMU_SCALE_ADAPTIVE,      /* per-layer, a variant of Zhao et al.'s rule:
                                factors from the previous step's output-
                                gradient statistics with a feedback factor */
    EMU_SCALE_LAYERWISE,     /* Zhao et al.'s rule: every step, each GEMM
                                layer's factor from the statistics of its
                                backward GEMM's operands (dY, W), no
                                feedback, capped per layer and in total
                                (layer_max, total_max)                    */
    EMU_SCALE_COUNT
} emu_scaling;

typedef struct emu_loss_scaling {
    emu_scaling kind;
    double init;             /* initial (or static) scale, a power of two   */
    double growth;           /* 2                                            */
    double backoff;          /* 0.5                                          */
    int interval;            /* 2000 overflow-free steps before growing     */
    double floor;            /* ENHANCED: the scale never drops below it    */
    double floor_growth;     /* ENHANCED: floor *= this every floor_every   */
    int floor_every;         /*   steps (0: fixed floor)                     */
    double target;           /* ADAPTIVE, LAYERWISE: target underflow rate
                                (1e-3)                                     */
    double max;              /* cap on any scale (2^24)                      */
} emu_loss_scaling;

/* A GEMM operand in a scaled format: quantized right before each matmul or
 * convolution that reads it, block formats along that op's reduction axis
 * (so a weight is quantized along its input features for the forward
 * product and along its output features for the input gradient), from the
 * tensor as the other roles left it. */
typedef struct emu_operand_quant {
    bool on;
    emu_scaled_format fmt;
    emu_rnd mode;            /* element rounding (EMU_RS: gradients, SR)   */
    unsigned sr_bits;
} emu_operand_quant;

/* Which layers keep the exempt precision (FP8 recipe: first and last). */
enum { EMU_EXEMPT_FIRST = 1u << 0, EMU_EXEMPT_LAST = 1u << 1 };

/* Where the policy applies the random Hadamard transform (emu_policy.rht). */
typedef enum emu_rht_apply {
    EMU_RHT_NONE,
    EMU_RHT_WGRAD,    /* the weight gradient's GEMM: dY and x          */
    EMU_RHT_BACKWARD, /* both backward GEMMs: also dY and W of dX      */
    EMU_RHT_COUNT
} emu_rht_apply;

typedef struct emu_policy {
    char name[32];
    char paper[160];         /* the recipe it follows, for the run record   */
    emu_role_prec weight;       /* compute copy of the weights              */
    emu_role_prec master;       /* master copy (if use_master)              */
    emu_role_prec activation;
    emu_role_prec act_grad;     /* errors                                   */
    emu_role_prec weight_grad;
    emu_role_prec opt_state;    /* momentum / Adam moments                  */
    bool use_master;
    emu_accum accum;            /* matmul and conv                          */
    unsigned exempt;            /* EMU_EXEMPT_* */
    emu_role_prec exempt_prec;  /* every role of an exempt layer            */
    emu_update_rule update;
    emu_loss_scaling scaling;
    /* Scaled GEMM operands (off in the plain-format presets), and the
     * recipe for formats with a tensor scale. */
    emu_operand_quant q_weight, q_activation, q_act_grad;
    emu_tensor_scaling tscale;
    /* Op classes the recipes keep wider than the roles (appended: a record
     * written before they existed means the values noted "legacy").
     * norm_stats: batch and layer norm's statistics (mean, var, rstd, and
     * batch norm's centred xc); legacy binary32 RNE.  softmax: attention's
     * scores and probabilities and their gradients (datt, dscores); a
     * format with ebits 0 (softmax=activation) means the activation
     * format under the forward's and the backward's roundings, the
     * legacy.  loss: the loss value (the fused cross-entropy forms it in
     * binary64, then rounds it once into this); legacy binary32 RNE. */
    emu_role_prec norm_stats, softmax, loss;
    /* LAYERWISE loss scaling's caps (appended, as above; unused by the
     * other kinds, and recorded only for LAYERWISE): no layer's factor
     * above layer_max (16), and the loss scale times the factors a
     * gradient carries never above total_max (1024).  Powers of two. */
    double layer_max, total_max;
    /* Whether the scaled GEMM operands (q_*) include attention's batched
     * products (Q K^T, att V and their backward products) as well as the
     * linear layers' (appended; absent from a record: no).  The presets
     * follow their recipes: mxfp8 yes (Rouhani et al. quantize every
     * matmul, attention's included), fp8-delayed, fp8-current no
     * (Transformer Engine keeps attention in higher precision unless its
     * FP8 attention is enabled), mxfp4 and nvfp4 no (their recipes
     * quantize the linear layers only). */
    bool attn_quant;
    /* The random Hadamard transform of the FP4 recipes (emu_rht, appended;
     * absent from a record: none): applied to both operands of the weight
     * gradient's GEMM (EMU_RHT_WGRAD: NVIDIA's NVFP4 recipe) or of both
     * backward GEMMs (EMU_RHT_BACKWARD: Tseng et al.'s MXFP4 recipe), along
     * their reduction axis, in blocks of rht_block (4, 16, 64 or 256), with
     * the signs of rht_seed, before they are quantized.  Needs the
     * operands it transforms quantized (q.act_grad, and q.activation or
     * q.weight). */
    emu_rht_apply rht;
    unsigned rht_block;
    uint64_t rht_seed;
} emu_policy;

/* The presets, by name: fp32, fp16-mpt, fp16-no-master, fp16-no-scaling,
 * bf16-nearest, bf16-sr, bf16-kahan, bf16-fp32w, fp8-e5m2, fp8-hybrid,
 * adaptive, layerwise, and the scaled-format recipes fp8-delayed, fp8-current, mxfp8,
 * mxfp4, nvfp4.  Returns 0, or -1 with err listing the known names. */
int emu_policy_preset(emu_policy *p, const char *name, emu_error *err);
/* Names of the presets, NULL-terminated. */
const char *const *emu_policy_preset_names(void);

/* Sets one field from "key=value": weight=FMT, master=FMT|none,
 * activation=FMT, act_grad=FMT, weight_grad=FMT, opt_state=FMT,
 * <role>.mode=MODE (or weight_mode=...), accum=SPEC (emu_accum_parse),
 * exempt=none|first|last|first+last, exempt_format=FMT, update=plain|sr|kahan,
 * scaling=none|static|dynamic|enhanced|adaptive|layerwise, scale=S, growth=,
 * backoff=, interval=, floor=, floor_growth=, floor_every=, target=,
 * max_scale=, layer_max=, total_max= (layerwise's caps),
 * q.weight=SPEC|none, q.activation=, q.act_grad=, q.all= (scaled formats,
 * emu_scaled_format_parse), q.<operand>.mode=MODE, tensor_scaling=SPEC
 * (emu_tensor_scaling_parse), and the op classes: norm_stats=FMT (batch
 * and layer norm's mean, var, rstd), softmax=FMT|activation (attention's
 * scores, probabilities and their gradients; activation: the activation
 * format under the roles' roundings), loss=FMT (the loss value), each
 * with <class>.mode=MODE, attn_quant=yes|no (emu_policy.attn_quant), and
 * rht=none|wgrad|backward, rht_block=4|16|64|256, rht_seed=N (the random
 * Hadamard transform, emu_policy.rht).
 * Preset defaults: norm_stats and loss binary32
 * RNE everywhere; softmax binary16 RNE in the fp16 presets (Micikevicius
 * et al. store the softmax's output in FP16, computing it in FP32),
 * binary32 RNE in all others (production BF16 and FP8 recipes).
 * Returns 0 or -1 with err naming the key. */
int emu_policy_set(emu_policy *p, const char *assignment, emu_error *err);

/* Refuses contradictions: a master narrower than the compute copy, loss
 * scale <= 0 or not finite, growth <= 1, backoff outside (0, 1), formats
 * the carrier cannot hold, SR update with a non-SR weight rounding... */
int emu_policy_validate(const emu_policy *p, emu_error *err);

/* The policy as JSON (for the run record and for checking a resume).  The
 * op classes (norm_stats, softmax, loss) are written when one of them
 * differs from its legacy value, so that a record written before the
 * classes existed stays as it was (absent: all three legacy); emu_train
 * first resets the classes its model has no op of. */
void emu_policy_write_json(const emu_policy *p, FILE *fp, int indent);

/* ---- layers and models -------------------------------------------------- */

typedef enum emu_layer_kind {
    EMU_LAYER_LINEAR,   /* y (B, Fo) = x (B, Fi) W^T + b; W (Fo, Fi)       */
    EMU_LAYER_CONV,     /* y (B, Co, Ho, Wo) = conv(x, W (Co, Ci, k, k)) + b */
    EMU_LAYER_MAXPOOL,  /* k x k, stride k                                  */
    EMU_LAYER_RELU,
    EMU_LAYER_GELU,
    EMU_LAYER_FLATTEN,  /* (B, C, H, W) -> (B, C*H*W): a view, no rounding  */
    EMU_LAYER_ADD,      /* y = a + b: a from src, b from src2 (a residual)  */
    EMU_LAYER_GAP,      /* global average pool (B, C, H, W) -> (B, C)       */
    EMU_LAYER_BATCHNORM,/* 2-d batch norm: gamma in weight, beta in bias,
                           running statistics in running_mean/running_var */
    /* Sequence models (emu_model_build_lm): a layer's rows are the B*T
     * positions of the batch, so linear, GELU and ADD act on (B*T, F). */
    EMU_LAYER_EMBEDDING,/* y (B*T, D) = weight (rows, D) row per id: the
                           token ids (m->tokens) or, with positions, t     */
    EMU_LAYER_LAYERNORM,/* over the features: gamma in weight, beta in bias */
    EMU_LAYER_ATTENTION,/* causal self-attention of `heads` heads: the
                           packed qkv (B*T, 3D) -> (B*T, D); no parameters */
    EMU_LAYER_TIED,     /* y (B*T, V) = x W^T with W the weight of layer
                           `tie` (an embedding): GPT's head; its weight
                           gradient accumulates into that layer's        */
    EMU_LAYER_LSTM,     /* one nn.LSTM layer over the window: (B*T, I) ->
                           (B*T, H); w_ih, b_ih in weight, bias; w_hh,
                           b_hh in those of layer `tie`, an LSTM_HH      */
    EMU_LAYER_LSTM_HH,  /* holds an LSTM layer's w_hh and b_hh (so that
                           every layer has one weight and one bias); no
                           computation of its own                       */
    EMU_LAYER_COUNT
} emu_layer_kind;

/* A parameter with everything the optimizer needs, in one place. */
typedef struct emu_param {
    emu_tensor w;        /* compute copy (EMU_ROLE_WEIGHT)                  */
    emu_tensor master;   /* EMU_ROLE_MASTER, allocated if use_master        */
    emu_tensor g;        /* EMU_ROLE_WEIGHT_GRAD                            */
    emu_tensor gm;       /* the gradient cast to the master format, unscaled
                            there (allocated with the master); the Kahan
                            update's copy of the old weights               */
    emu_tensor m, v;     /* EMU_ROLE_OPT_STATE: momentum / Adam moments      */
    emu_tensor c;        /* Kahan compensation, in w's format               */
} emu_param;

/* A model is a list of layers in an order where each layer comes after
 * the layers it reads (so the forward pass runs the list in order and the
 * backward pass in reverse); a layer reads the output of layer `src` (-1:
 * the model's input), an ADD layer also that of `src2`.  An output read
 * by several layers receives the sum of their input gradients (site
 * "<prefix>.grad_add", see emu_model_backward). */
typedef struct emu_layer {
    emu_layer_kind kind;
    char name[40];            /* "conv1", "fc2", "layer2.0.downsample.1"    */
    int src, src2;            /* layers read (-1: the model's input)        */
    int in_dims[4], out_dims[4]; /* per example: (C, H, W) or (F)          */
    int in_ndim, out_ndim;
    int ksize, stride, pad;   /* conv and pool                              */
    bool exempt;              /* kept in the policy's exempt precision       */
    bool has_params;          /* weight (and bias, if has_bias)             */
    bool has_bias;            /* false: a convolution without bias          */
    emu_param weight, bias;
    /* Batch norm's buffers (C), binary32, role other: what evaluation
     * mode normalises with; checkpointed with the parameters. */
    emu_tensor running_mean, running_var;
    const emu_tensor *in;     /* the input the forward pass used            */
    bool has_xq;              /* input cast into this layer's format first  */
    emu_tensor xq;            /* that cast input (B, ...)                   */
    emu_tensor y;             /* output activations (B, ...)                */
    emu_tensor dx;            /* gradient w.r.t. the input (B, ...)          */
    size_t *argmax;           /* max pool: chosen inputs                     */
    double scale;             /* ADAPTIVE, LAYERWISE: the factor (a power of
                                 two) this layer's input gradient is scaled
                                 by where it is produced; 1 otherwise
                                 (LAYERWISE: set by emu_model_backward)    */
    double grad_scale;        /* the total scale its weight gradient carries
                                 (loss scale times the factors above it;
                                 LAYERWISE: set by emu_model_backward, the
                                 scale it was given times those factors)  */
    /* Library-private, owned by the model: the scaled GEMM operands'
     * state (amax histories, tensor scales) and scratch buffers. */
    struct emu_layer_priv *priv;
    /* Added after 1.0, last so that the layout before them stays. */
    int heads;                /* attention: H                               */
    int tie;                  /* tied head: the embedding layer whose weight
                                 it reads (-1: none)                        */
    bool positions;           /* embedding: indexed by position t, not id   */
} emu_layer;

typedef struct emu_model {
    char arch[128];           /* the spec it was built from                 */
    emu_layer *layers;
    int n_layers;
    int batch;
    int in_dims[3];           /* (C, H, W) of one example                   */
    int classes;
    bool eval;                /* batch norm in evaluation mode (running
                                 statistics, not updated); false: training */
    emu_tensor x;             /* input batch, activation format             */
    emu_tensor loss;          /* 1 element                                  */
    emu_tensor dlogits;       /* (B, K), act_grad format; (B*T, V) for a
                                 language model                            */
    /* Added after 1.0, last so that the layout before them stays. */
    int seq_len;              /* T: a language model (tokens in, (B*T, V)
                                 logits out); 0 for image models           */
    int vocab;                /* V (also in classes); 0 for image models   */
    int32_t *tokens;          /* (batch, seq_len) input ids, in [0, V): the
                                 caller fills them before emu_model_forward */
} emu_model;

/* Builds a model from an architecture spec:
 *   "mlp:784-256-128-10"          linear layers with ReLU between
 *   "mlp:784-128x8-10"            a deep plain MLP (8 hidden layers of 128)
 *   "cnn" or "cnn:6-16-120-84"    LeNet-style: conv5(6)+pool, conv5(16)+pool,
 *                                 fc 120, fc 84, fc K
 *   "resnet:N" (N 1..9)           He et al.'s CIFAR ResNet for square
 *                                 images: conv3(16) bn relu, three stages
 *                                 of N basic blocks (16, 32, 64 channels,
 *                                 stride 2 entering stages 2 and 3), global
 *                                 average pool, fc K; torchvision's layer
 *                                 names (conv1, bn1, layer1.0.conv1, ...,
 *                                 layer2.0.downsample.0, fc).  resnet:1 is
 *                                 ResNet-8, resnet:3 ResNet-20.
 * (gelu can replace relu: "mlp-gelu:...").  Parameters are initialised
 * deterministically from seed (He-uniform; batch norm gamma 1, beta 0,
 * running mean 0, running variance 1), rounded into their formats.
 * resnet refuses the adaptive (per-layer) loss scaling: its residual
 * branches would add gradients that carry different scales; the
 * layerwise scaling aligns them where they add (emu_model_backward); the
 * language models (emu_model_build_lm) refuse layerwise scaling: a tied
 * head and an LSTM gather one weight gradient from two points of the
 * backward pass, which would carry different factors. */
int emu_model_build(emu_model *m, const char *arch, const emu_policy *p,
                    int batch, int in_c, int in_h, int in_w, int classes,
                    uint64_t seed, emu_ctx *ctx, emu_error *err);
void emu_model_free(emu_model *m);

/* Builds a character (token) language model over a vocabulary of V ids:
 *   "gpt:L-D-H-T" (default "gpt" = gpt:4-128-4-64)  GPT-2's shape: token
 *       embedding wte (V, D) and learned position embedding wpe (T, D),
 *       summed; L pre-norm blocks hN of width D with H heads (D divisible
 *       by H): hN.ln1, hN.attn.qkv (linear D -> 3D), hN.attn (causal
 *       attention), hN.attn.proj (D -> D), hN.add1 (residual), hN.ln2,
 *       hN.mlp.fc (D -> 4D), hN.mlp.gelu, hN.mlp.proj (4D -> D), hN.add2;
 *       the final layer norm ln_f and the head lm_head, tied to wte (its
 *       weight gradient accumulates into wte's).  Initialised as GPT-2:
 *       weights normal(0, 0.02), the residual projections (attn.proj,
 *       mlp.proj) normal(0, 0.02 / sqrt(2L)), biases 0, layer norms
 *       gamma 1, beta 0.
 *   "lstm:L-H" (default "lstm" = lstm:2-256)  PyTorch's word language
 *       model: the embedding encoder (V, H), an nn.LSTM of L layers of
 *       width H (batch_first, from zero state in every window: truncated
 *       BPTT over the window; emu_t_lstm), the linear head decoder
 *       (H -> V, with bias).  Layers encoder, lstm.l0 (with lstm.l0.hh
 *       holding its w_hh, b_hh), ..., decoder; state-dict names
 *       encoder.weight, lstm.weight_ih_l0, lstm.weight_hh_l0,
 *       lstm.bias_ih_l0, lstm.bias_hh_l0, ..., decoder.weight,
 *       decoder.bias.  Initialised as PyTorch: the LSTM's weights and
 *       biases U(-1/sqrt(H), 1/sqrt(H)), the encoder normal(0, 0.1), the
 *       decoder He-uniform with bias 0.  The gates and cell states are
 *       kept in the activation format.
 * seq_len is the window T the model runs on (gpt: at most the T of its
 * spec, the position table's size).  emu_model_forward reads m->tokens
 * (batch x seq_len ids) and leaves the (B*T, V) logits in the last
 * layer's y; emu_model_backward takes the B*T next-token targets and the
 * loss is their mean cross-entropy.  Named tensors, weights files and
 * checkpoints work as for the other models (names: wte.weight,
 * wpe.weight, h0.ln1.weight, h0.attn.qkv.weight, ..., ln_f.bias).
 * m->classes is V, m->in_dims (seq_len, 1, 1), and m->x is not allocated
 * (the embeddings read m->tokens).
 * Refuses, naming the value: a spec that does not parse, sizes < 1 or
 * absurd (L <= 64, D <= 8192, T <= 8192, at most 2^31 parameters), D not
 * divisible by H,
 * seq_len outside 1..T (lstm: below 1), vocab outside 2..2^20.  Returns 0
 * or -1 with err. */
int emu_model_build_lm(emu_model *m, const char *arch, const emu_policy *p,
                       int batch, int seq_len, int vocab, uint64_t seed,
                       emu_ctx *ctx, emu_error *err);
/* Whether arch names a language model ("gpt", "gpt:...", "lstm", "lstm:..."). */
bool emu_arch_is_lm(const char *arch);

/* Parameters in all: the sum of weight and bias element counts. */
size_t emu_model_param_count(const emu_model *m);

/* ---- tensors by name, weights files ---------------------------------------
 * A model's named tensors are PyTorch's state_dict entries of the same
 * model, in its order: for each layer with parameters "<layer>.weight"
 * then "<layer>.bias" (layers are named fc1, conv1, ...), a layer's
 * buffers after its parameters.  Each is a parameter (its master copy,
 * if any, holds the values the optimizer updates) or a buffer. */
int emu_model_named_count(const emu_model *m);
/* The i-th name (0 <= i < emu_model_named_count), and in *param or
 * *buffer (either may be NULL) its tensor, the other set NULL; NULL if i
 * is out of range.  The name lives in a per-thread buffer, valid until
 * the next call in the same thread. */
const char *emu_model_named_at(emu_model *m, int i, emu_param **param,
                               emu_tensor **buffer);

/* Writes every named tensor as F32 (emu/tensorfile.h) to path, atomically:
 * each parameter's master copy where the policy keeps one, else its
 * compute copy.  Metadata: format "libemu-weights", libemu_version, arch,
 * copy ("master" or "compute"); _meta adds the caller's key/value pairs
 * (NULL-terminated; emu_train adds policy, step and seed).  Returns 0 or
 * -1 with err. */
int emu_model_save_weights(const emu_model *m, const char *path, emu_error *err);
int emu_model_save_weights_meta(const emu_model *m, const char *path,
                                const char *const *meta, emu_error *err);
/* Reads a tensor file into the model's parameters and buffers.  Its names
 * and shapes must be the model's exactly, and its values binary32 values
 * (F32, F16, BF16; F64 holding binary32 values) and finite: otherwise it
 * fails with EMU_EDATA naming every missing, extra or mis-shaped tensor
 * that fits the message, and the model is unchanged.  The values are
 * rounded nearest-even into the master copy (exact when it is binary32),
 * and that into the compute copy, through the choke point (sites
 * "<name>.load" and "<name>.load.cast"; ctx->op_index advances), as the
 * random initialisation does; p is the policy the model was built with.
 * Meant for a model just built: optimizer state is left as it is.
 * Returns 0 or -1 with err. */
int emu_model_load_weights(emu_model *m, emu_ctx *ctx, const emu_policy *p,
                           const char *path, emu_error *err);

/* Forward pass over the batch in m->x; logits in the last layer's y.
 * Like the ops, it and emu_model_backward return 0 or -1 with ctx->err. */
int emu_model_forward(emu_model *m, emu_ctx *ctx, const emu_policy *p);
/* Loss (times scale into dlogits) and backward pass: weight gradients in
 * each param's g.  labels has m->batch entries.  The layers run in
 * reverse order; where a layer's output feeds several layers, their input
 * gradients arrive in that order (the consumer latest in the list first)
 * and each one after the first is added to the sum so far, one rounding
 * into the act_grad format of the layer whose output it is, at site
 * "<prefix>.grad_add", prefix = the arriving consumer's name up to its
 * last '.' ("layer1.0.conv1" -> "layer1.0.grad_add"). */
int emu_model_backward(emu_model *m, emu_ctx *ctx, const emu_policy *p,
                       const int *labels, float scale);

/* Global gradient-norm clipping, torch.nn.utils.clip_grad_norm_'s rule,
 * over the gradients an update reads once unscaled: each parameter's gm
 * under a master policy (p->use_master), its g otherwise.  The norm goes
 * through the choke point, since in 16-bit formats it is itself an
 * overflow site: per tensor the sum of squares under p->accum
 * (site "clip.sumsq"), their sum ("clip.sum"), its square root
 * ("clip.norm"), each rounded into the format of those gradients (master,
 * where PyTorch's AMP clips the unscaled fp32 gradients, or weight_grad)
 * under its rounding, role weight_grad.  *norm is the rounded norm.  Then,
 * unless clip is 0 (the norm only) or the norm is not finite and
 * skip_nonfinite is set (dynamic loss scaling skips such a step),
 * coef = clip / (norm + 1e-6) in binary32 as PyTorch computes it, and if
 * coef < 1 every gradient is scaled by it (emu_t_scale, sites
 * "<layer>.w.clip" and "<layer>.b.clip", under the gradient's own
 * rounding).  An infinite norm gives coef 0 (gradients zeroed, as in
 * PyTorch); a NaN norm leaves them unchanged.  Returns 0 or -1 (ctx->err). */
int emu_model_clip_grad_norm(emu_model *m, emu_ctx *ctx, const emu_policy *p,
                             double clip, bool skip_nonfinite, double *norm);

/* ---- the training loop -------------------------------------------------- */

typedef enum emu_optimizer { EMU_OPT_SGD, EMU_OPT_ADAM, EMU_OPT_COUNT } emu_optimizer;
typedef enum emu_schedule { EMU_LR_CONSTANT, EMU_LR_STEP, EMU_LR_COSINE, EMU_LR_COUNT } emu_schedule;

typedef struct emu_train_config {
    char preset[32];
    char arch[128];
    char data[16];            /* "synthetic" or "fashion-mnist"; for language
                                 models "text" or "fortunes"              */
    char data_dir[256];       /* for fashion-mnist ("" = Debian's location);
                                 fortunes: a text file or folder ("": the
                                 default set, emu_text_fortunes)          */
    size_t train_examples;    /* 0: all; otherwise the first n (text: the
                                 characters generated, default 10^6;
                                 fortunes: the first n characters)         */
    size_t test_examples;     /* the same for the test / validation set
                                 (text: default 10^5)                      */
    int epochs;
    int64_t max_steps;        /* 0: epochs decide                          */
    int batch;
    emu_optimizer opt;
    double lr, momentum, weight_decay, beta1, beta2, eps;
    emu_schedule schedule;
    double lr_final;          /* cosine: final lr; step: factor per step  */
    int64_t lr_step;          /* step schedule: every lr_step steps       */
    double loss_mult;         /* the loss is multiplied by this (shifted
                                 experiments: 2^-12 mimics SSD's tiny grads) */
    uint64_t seed;
    double ref_rate;          /* MPFR sampling rate of the choke point     */
    int stats_every;          /* write per-op rows every n steps (0: never) */
    int checkpoint_every;     /* steps (0: only at the end)                */
    int threads;
    char out_dir[512];
    bool force, resume, quiet;
    /* A weights file (emu_model_load_weights) to start from instead of
     * the random initialisation ("": none).  Read when a run starts, not
     * on resume (the checkpoint holds the weights); recorded in
     * meta.json with its checksum. */
    char init_from[512];
    /* Added after 1.0, last so that the layout before them stays. */
    /* Linear warm-up: steps 0 .. warmup-1 take lr (s + 1) / warmup (0:
     * none), then the schedule runs over the remaining steps as if they
     * were the whole run (cosine reaches lr_final at the last step).  At
     * most the run's step count. */
    int64_t warmup;
    /* Global gradient-norm clipping (0: off), clip_grad_norm_'s rule: the
     * L2 norm of all unscaled weight gradients, computed through the choke
     * point (sites clip.sumsq, clip.sum, clip.norm), and if
     * clip_norm / (norm + 1e-6) < 1 every gradient scaled by that factor
     * (sites "<layer>.w.clip", "<layer>.b.clip").  steps.csv gains a
     * grad_norm column. */
    double clip_norm;
    /* Language models (data "text" or "fortunes", arch emu_arch_is_lm):
     * the window length T of a training example (0: a gpt's own T, 64 for
     * an lstm), and how many validation windows of T each evaluation
     * scores (0: 256; fewer if the set is shorter), spread evenly over the
     * validation text (emu_text_eval_batch). */
    int seq_len;
    size_t eval_windows;
    /* --data fortunes: the most bytes of text read, all files together
     * (0: EMU_TEXT_MAX_BYTES, 256 MiB; emu_text_fortunes_max).  It
     * changes no number, only what is refused. */
    size_t data_max_bytes;
    /* The steps whose log2 histograms are measured (hist.csv, the
     * per-step rows): step s when s % hist_every == 0 (1: every step);
     * 0: every stats_every steps, the steps of ops_steps.csv's rows (no
     * step when stats_every is 0 too).  Each parameter layer's input
     * gradient ("<layer>.dinput") is histogrammed every step whatever
     * this says (layers_steps.csv's dinput_zero columns are its), and so
     * is everything the model loads before step 0.  The counters are
     * measured every step. */
    int hist_every;
} emu_train_config;

void emu_train_config_default(emu_train_config *c);

/* Runs (or resumes) a training run and writes its results folder:
 *   meta.json        configuration, policy in full, formats, seed, library
 *                    version, data set, model; "completed" when done
 *   steps.csv        one row per step: loss, accuracy, loss scale, skipped,
 *                    underflow/overflow/absorbed rates, lr, time
 *   ops_steps.csv    per-op rows every stats_every steps
 *   ops.csv, hist.csv, ops.json   per-op totals, and the histograms of
 *                    the histogram steps (hist_every)
 *   layers_steps.csv per layer and step: gradient underflow rates and scales
 *   eval.csv         test accuracy and loss per epoch
 *   checkpoint.bin   the state to resume from
 *   weights.safetensors  the final weights (emu_model_save_weights), when
 *                    the run completes
 * Every file is written atomically, the checkpoint first at step 0.
 * out_dir must be new, empty, or hold a run (replaced only with force;
 * a folder that holds other files is refused: EMU_ESTATE).  Progress goes
 * to `log` (a compact updating line on a terminal, plain lines otherwise).
 * Returns 0, EMU_TRAIN_STOPPED (err filled, code EMU_ESTOPPED), or -1
 * with err. */
int emu_train(const emu_train_config *cfg, const emu_policy *p, FILE *log,
              emu_error *err);

/* emu_train's (and emu_train_resume's) value when emu_train_stop asked it
 * to stop: the step under way was finished and checkpointed, and err says
 * where the run stands and how to resume it. */
enum { EMU_TRAIN_STOPPED = 1 };

/* Asks the running (or the next) emu_train to stop after its current step
 * with a checkpoint; sig names the cause (SIGINT, SIGTERM) in the message.
 * Async-signal-safe: meant to be called from a signal handler. */
void emu_train_stop(int sig);

/* Continues the run in `dir` from its checkpoint, with the configuration
 * and policy saved there (threads > 0 and quiet may differ: they do not
 * change the numbers).  The finished run equals an uninterrupted one. */
int emu_train_resume(const char *dir, int threads, bool quiet, FILE *log,
                     emu_error *err);

/* Checks a checkpoint image (the bytes of a checkpoint.bin): its frame,
 * every checksum, and every section decoded (the configuration and policy
 * into cfg and p).  Returns 0, or -1 with err naming the offset that is
 * wrong (EMU_EDATA; EMU_EUNSUPPORTED for another layout version).  The layout is documented in README.md ("Checkpoints"). */
int emu_checkpoint_check(const void *data, size_t size, emu_train_config *cfg,
                         emu_policy *p, emu_error *err);

#ifdef __cplusplus
}
#endif
#endif
