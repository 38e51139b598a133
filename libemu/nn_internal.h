/*
 * nn_internal.h — the library-private part of a layer (nn_model.c builds
 * and uses it, nn_train.c checkpoints it).
 *
 * emu_layer (emu/nn.h) is what a caller reads: parameters, activations,
 * gradients, scales.  The scaled GEMM operands' state and buffers are the
 * training loop's business: they live here, behind emu_layer.priv,
 * allocated with the model for every layer.
 */
#ifndef EMU_NN_INTERNAL_H
#define EMU_NN_INTERNAL_H

#include "emu/nn.h"
#include "emu/scaled.h"
#include "emu/tensor.h"
#include "ops_internal.h" /* emu_quant_keep */

/* The quantized operands of a layer's GEMMs (policy q_*): W, X and dY. */
enum { EMU_QT_W, EMU_QT_X, EMU_QT_DY, EMU_QT_COUNT };
/* The dequantized operand buffers, one per (GEMM, operand). */
enum { EMU_QB_FWD_X, EMU_QB_FWD_W, EMU_QB_DW_DY, EMU_QB_DW_X, EMU_QB_DX_DY,
       EMU_QB_DX_W, EMU_QB_COUNT };

struct emu_layer_priv {
    /* Indexed EMU_QT_*: the amax history and the tensor scale in use this
     * step of W, X and dY (checkpointed). */
    emu_amax_history amax_hist[EMU_QT_COUNT];
    double tscale[EMU_QT_COUNT];
    /* The operands' dequantized values (binary32, tensor scale left out)
     * as each GEMM reads them, EMU_QB_*. */
    emu_tensor qbuf[EMU_QB_COUNT];
    /* The storage of a quantization, kept across steps and shared by the
     * model's layers (each points to the first layer's qkeep_own): the
     * operands are quantized one at a time, each dequantized into its
     * qbuf before the next. */
    emu_quant_keep *qkeep;
    emu_quant_keep qkeep_own;
    emu_tensor qsum;          /* conv: dY summed over space, for dbias    */
    /* Batch norm: what the forward pass keeps for the backward one
     * (policy norm_stats: xc (B, C, H, W), the batch mean and variance
     * (C)). */
    emu_tensor bn_xc, bn_mean, bn_var;
    /* The graph (emu_model_backward): whether any layer up to this one,
     * through its sources, has parameters (else no gradient is needed
     * here); how many layers read this one's output; the gradient w.r.t.
     * this output during the backward pass, and the sum of several
     * (act_grad format, allocated if consumers > 1). */
    bool upstream;
    int consumers;
    const emu_tensor *gout;
    emu_tensor gsum;
    /* Sequence models.  Layer norm: the row means and reciprocal standard
     * deviations (policy norm_stats, B*T).  Attention: the softmax
     * probabilities (B, H, T, T; policy softmax).  A position embedding: its ids t of each row.  An
     * embedding read by a tied head: its weight gradient starts from the
     * head's (accumulate). */
    emu_tensor ln_mean, ln_rstd, att;
    /* An LSTM layer: the activated gates (B, T, 4H) and the cell states
     * (B, T, H) its backward pass reads. */
    emu_tensor lstm_gates, lstm_c;
    int32_t *pos;
    bool tied;
    /* LAYERWISE (emu_model_backward): the product of the per-layer factors
     * gout carries (the scale given to the loss times it is gout's total
     * scale), and a second sum buffer for a rescaled addend when gout is
     * already gsum (allocated if consumers > 2). */
    double gfactor;
    emu_tensor gtmp;
};

/* LAYERWISE loss scaling (nn_layerwise.c, Zhao et al.): the statistics
 * of a backward GEMM's operands dY and W (binary64 mean squares
 * sigma^2 + mu^2 and largest magnitudes, as stored) and the GEMM's
 * reduction length k; the factor for the GEMM's output (a power of two,
 * see nn_layerwise.c), given the target underflow rate, the per-layer cap
 * and the room the total cap leaves (total_max / carried scale); and its
 * underflow bound alone: the smallest power of two alpha >= 1 with
 * erf(u / (sqrt 2 alpha sigma)) <= target (1 if sigma is 0). */
typedef struct emu_layerwise_stats {
    double g_ms, w_ms, g_amax, w_amax, k;
} emu_layerwise_stats;
void emu_layerwise_operand_stats(emu_layerwise_stats *s, const emu_tensor *dy,
                                 const emu_tensor *w, double k);
double emu_layerwise_factor(const emu_layerwise_stats *s, const emu_format *f,
                            double target, double layer_max, double room);
double emu_layerwise_lower(double sigma, double u, double target);

/* The policy's op classes (policy.c): whether class r (&p->norm_stats,
 * &p->softmax or &p->loss) holds the value a record written before the
 * classes existed meant (emu/nn.h), whether all three do, and setting r
 * back to it. */
bool emu_policy_class_legacy(const emu_policy *p, const emu_role_prec *r);
bool emu_policy_classes_legacy(const emu_policy *p);
void emu_policy_class_reset(emu_policy *p, emu_role_prec *r);
/* Resets the classes a model of `arch` has no op of (normalisation
 * outside resnet and gpt, attention outside gpt) to their legacy values:
 * they change no number, and a run's record and checkpoint then name only
 * what the model uses (nn_model.c). */
void emu_policy_for_arch(emu_policy *p, const char *arch);

#endif
