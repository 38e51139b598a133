/*
 * policy.c — precision policies: the presets of the mixed-precision papers,
 * "key=value" overrides, validation and the JSON record of a run.
 *
 * Matmul and convolution default to the "fast" accumulator (binary32
 * arithmetic on the rounded inputs): all four papers accumulate in binary32,
 * and the per-step emulated models are there for when the accumulator is
 * the question (--set accum=sequential,acc=binary16, ...).
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/nn.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "nn_internal.h"

static emu_role_prec prec(const char *format, emu_rnd mode)
{
    emu_role_prec r;
    memset(&r, 0, sizeof r);
    r.fmt = *emu_format_find(format);
    r.rnd.mode = mode;
    r.rnd.sr_bits = 64;
    return r;
}

static void set_all(emu_policy *p, const char *format)
{
    p->weight = p->master = p->activation = p->act_grad = p->weight_grad =
        p->opt_state = prec(format, EMU_RNE);
}

static void base(emu_policy *p, const char *name, const char *paper)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->paper, sizeof p->paper, "%s", paper);
    set_all(p, "binary32");
    p->exempt_prec = prec("binary32", EMU_RNE);
    emu_accum_default(&p->accum);
    p->accum.kind = EMU_ACCUM_FAST;
    p->update = EMU_UPDATE_PLAIN;
    p->scaling.kind = EMU_SCALE_NONE;
    p->scaling.init = 1.0;
    p->scaling.growth = 2.0;
    p->scaling.backoff = 0.5;
    p->scaling.interval = 2000;
    p->scaling.floor = 1.0;
    p->scaling.floor_growth = 2.0;
    p->scaling.floor_every = 0;
    p->scaling.target = 1e-3;
    p->scaling.max = 16777216.0; /* 2^24 */
    /* LAYERWISE's caps: the authors' released code's defaults. */
    p->layer_max = 16.0;
    p->total_max = 1024.0;
    p->rht = EMU_RHT_NONE;
    p->rht_block = 16; /* NVIDIA's 16 x 16 */
    p->rht_seed = 0;
    p->tscale.kind = EMU_TSCALE_DELAYED;
    p->tscale.history = 16;
    p->tscale.algo = EMU_AMAX_MAX;
    /* The op classes the recipes keep in binary32 (the fp16 presets
     * narrow the softmax below). */
    p->norm_stats = p->softmax = p->loss = prec("binary32", EMU_RNE);
}

/* ---- op classes -------------------------------------------------------------- */

/* The values a record without the op classes meant: binary32 nearest-even
 * statistics and loss (the code fixed them so), and the activation format
 * for attention's softmax (no format: ebits 0). */
static bool is_b32_rne(const emu_role_prec *r)
{
    char a[256], b[256];
    emu_format_spec_string(&r->fmt, a, sizeof a);
    emu_format_spec_string(emu_format_find("binary32"), b, sizeof b);
    return r->fmt.ebits != 0 && !strcmp(a, b) && r->rnd.mode == EMU_RNE &&
           r->rnd.tininess == EMU_TINY_AFTER && !r->rnd.saturate;
}

bool emu_policy_class_legacy(const emu_policy *p, const emu_role_prec *r)
{
    if (r == &p->softmax)
        return r->fmt.ebits == 0;
    return is_b32_rne(r);
}

bool emu_policy_classes_legacy(const emu_policy *p)
{
    return emu_policy_class_legacy(p, &p->norm_stats) &&
           emu_policy_class_legacy(p, &p->softmax) &&
           emu_policy_class_legacy(p, &p->loss);
}

void emu_policy_class_reset(emu_policy *p, emu_role_prec *r)
{
    if (r == &p->softmax)
        memset(r, 0, sizeof *r);
    else
        *r = prec("binary32", EMU_RNE);
}

/* A preset's scaled operand.  Its spec is the library's own: a refusal is
 * a bug, reported (not an operand quietly left unquantized). */
static int quant(emu_operand_quant *q, const char *spec, emu_rnd mode,
                 emu_error *err)
{
    q->on = true;
    q->mode = mode;
    q->sr_bits = 64;
    return emu_scaled_format_parse(&q->fmt, spec, err);
}

static void dynamic(emu_policy *p)
{
    /* PyTorch GradScaler's defaults. */
    p->scaling.kind = EMU_SCALE_DYNAMIC;
    p->scaling.init = 65536.0;
    p->scaling.growth = 2.0;
    p->scaling.backoff = 0.5;
    p->scaling.interval = 2000;
}

static const char *const preset_names[] = {
    "fp32", "fp16-mpt", "fp16-no-master", "fp16-no-scaling", "bf16-nearest",
    "bf16-sr", "bf16-kahan", "bf16-fp32w", "fp8-e5m2", "fp8-hybrid",
    "adaptive", "layerwise", "fp8-delayed", "fp8-current", "mxfp8", "mxfp4",
    "nvfp4", NULL,
};

const char *const *emu_policy_preset_names(void)
{
    return preset_names;
}

static const char MPT[] = "Micikevicius et al., Mixed Precision Training, ICLR 2018";
static const char BF16[] = "Zamirai et al., Revisiting BFloat16 Training, 2020";
static const char FP8[] = "Mellempudi et al., Mixed Precision Training With 8-bit "
                          "Floating Point, 2019";

int emu_policy_preset(emu_policy *p, const char *name, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    if (!name)
        name = "";
    if (!strcmp(name, "fp32")) {
        base(p, name, "binary32 baseline");
    } else if (!strcmp(name, "fp16-mpt") || !strcmp(name, "fp16-no-master") ||
               !strcmp(name, "fp16-no-scaling") || !strcmp(name, "adaptive") ||
               !strcmp(name, "layerwise")) {
        /* FP16 storage and arithmetic inputs, FP32 master weights and
         * accumulation, dynamic loss scaling. */
        base(p, name, MPT);
        set_all(p, "binary16");
        p->master = prec("binary32", EMU_RNE);
        p->opt_state = prec("binary32", EMU_RNE);
        p->use_master = true;
        /* "Softmax ... layers ... still read and write FP16 tensors from
         * memory, performing the arithmetic in FP32": the op computes in
         * binary64 and stores binary16. */
        p->softmax = prec("binary16", EMU_RNE);
        dynamic(p);
        if (!strcmp(name, "fp16-no-master"))
            p->use_master = false; /* updates rounded straight into FP16 */
        if (!strcmp(name, "fp16-no-scaling"))
            p->scaling.kind = EMU_SCALE_NONE, p->scaling.init = 1.0;
        if (!strcmp(name, "adaptive")) {
            snprintf(p->paper, sizeof p->paper, "Zhao et al., Adaptive Loss "
                     "Scaling for Mixed Precision Training, 2019");
            p->scaling.kind = EMU_SCALE_ADAPTIVE;
            p->scaling.init = 1.0;
        }
        if (!strcmp(name, "layerwise")) {
            /* The paper's rule (nn_layerwise.c): loss scale 1, each GEMM
             * layer's factor from its backward operands every step. */
            snprintf(p->paper, sizeof p->paper, "Zhao et al., Adaptive Loss "
                     "Scaling for Mixed Precision Training, 2019 (the "
                     "paper's per-layer rule)");
            p->scaling.kind = EMU_SCALE_LAYERWISE;
            p->scaling.init = 1.0;
        }
    } else if (!strcmp(name, "bf16-nearest") || !strcmp(name, "bf16-sr") ||
               !strcmp(name, "bf16-kahan") || !strcmp(name, "bf16-fp32w")) {
        /* Everything 16-bit; only the weight update differs. */
        base(p, name, BF16);
        set_all(p, "bfloat16");
        p->update = !strcmp(name, "bf16-sr")      ? EMU_UPDATE_SR
                  : !strcmp(name, "bf16-kahan")   ? EMU_UPDATE_KAHAN
                                                  : EMU_UPDATE_PLAIN;
        if (!strcmp(name, "bf16-fp32w")) /* ablation: FP32 weights only */
            p->weight = p->master = prec("binary32", EMU_RNE);
    } else if (!strcmp(name, "fp8-e5m2") || !strcmp(name, "fp8-hybrid")) {
        /* E5M2 (or E4M3 forward) tensors, FP32 accumulation, FP16 master
         * weights updated with stochastic rounding, gradients rounded
         * stochastically, first and last layers in FP16, enhanced loss
         * scaling with a floor. */
        base(p, name, FP8);
        set_all(p, "e5m2");
        if (!strcmp(name, "fp8-hybrid")) {
            snprintf(p->paper, sizeof p->paper, "Sun et al., Hybrid 8-bit "
                     "Floating Point Training, NeurIPS 2019 (E4M3 forward, "
                     "E5M2 backward)");
            p->weight = prec("e4m3", EMU_RNE);
            p->activation = prec("e4m3", EMU_RNE);
        }
        p->act_grad.rnd.mode = EMU_RS;
        p->weight_grad.rnd.mode = EMU_RS;
        p->master = prec("binary16", EMU_RNE);
        p->opt_state = prec("binary16", EMU_RNE);
        p->use_master = true;
        p->update = EMU_UPDATE_SR;
        p->exempt = EMU_EXEMPT_FIRST | EMU_EXEMPT_LAST;
        p->exempt_prec = prec("binary16", EMU_RNE);
        dynamic(p);
        p->scaling.kind = EMU_SCALE_ENHANCED;
        p->scaling.floor = 256.0;
        p->scaling.floor_growth = 2.0;
        p->scaling.floor_every = 0;
    } else if (!strcmp(name, "fp8-delayed") || !strcmp(name, "fp8-current")) {
        /* Binary32 everywhere but the GEMM inputs, which are FP8 with one
         * binary32 scale per tensor: E4M3 forward, E5M2 backward.  Delayed:
         * the scale from the largest amax of the last 16 steps, as
         * production FP8 training does; current: from the tensor itself. */
        base(p, name, "Micikevicius et al., FP8 Formats for Deep Learning, "
             "2022; per-tensor delayed scaling as in NVIDIA Transformer Engine");
        if (quant(&p->q_weight, "elem=e4m3,scale=none,tensor=yes", EMU_RNE, err) ||
            quant(&p->q_activation, "elem=e4m3,scale=none,tensor=yes", EMU_RNE,
                  err) ||
            quant(&p->q_act_grad, "elem=e5m2,scale=none,tensor=yes", EMU_RNE, err))
            return -1;
        if (!strcmp(name, "fp8-current"))
            p->tscale.kind = EMU_TSCALE_CURRENT;
    } else if (!strcmp(name, "mxfp8") || !strcmp(name, "mxfp4") ||
               !strcmp(name, "nvfp4")) {
        /* Block-scaled GEMM inputs, binary32 elsewhere.  MXFP8: E4M3 for
         * every operand.  MXFP4 and NVFP4 round gradients stochastically
         * (their training recipes); NVFP4 scales weights in 16 x 16 tiles,
         * so that W and its transpose share one quantization.  Stochastic
         * rounding is unbiased only where nothing clips, and the OCP floor
         * rule clips FP4's top binade: MXFP4's gradients take the clip-free
         * ceil rule (Tseng et al. scale by 3/4 for the same reason). */
        const bool fp4 = strcmp(name, "mxfp8") != 0;
        base(p, name, !strcmp(name, "nvfp4")
                          ? "NVIDIA, Pretraining Large Language Models with "
                            "NVFP4, 2025 (no Hadamard transform here)"
                      : fp4 ? "Tseng et al., Training LLMs with MXFP4, 2025"
                            : "OCP Microscaling Formats (MX) v1.0; Rouhani et "
                              "al., Microscaling Data Formats for Deep "
                              "Learning, 2023");
        const char *spec = !strcmp(name, "nvfp4") ? "nvfp4" : name;
        if (quant(&p->q_weight,
                  !strcmp(name, "nvfp4") ? "nvfp4,block=16x16" : spec, EMU_RNE,
                  err) ||
            quant(&p->q_activation, spec, EMU_RNE, err) ||
            quant(&p->q_act_grad,
                  !strcmp(name, "mxfp4") ? "mxfp4,rule=ceil" : spec,
                  fp4 ? EMU_RS : EMU_RNE, err))
            return -1;
        p->tscale.kind = EMU_TSCALE_CURRENT;
        /* The MX paper quantizes attention's products too; the FP4 recipes
         * quantize the linear layers only (emu/nn.h). */
        p->attn_quant = !fp4;
    } else {
        char list[256] = "";
        for (int i = 0; preset_names[i]; i++) {
            strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
            strncat(list, preset_names[i], sizeof list - strlen(list) - 1);
        }
        return emu_fail(err, EMU_ESPEC, "policy", "preset", "unknown preset '%s' (known: "
                        "%s)", name, list);
    }
    return 0;
}

/* ---- overrides --------------------------------------------------------------- */

static emu_role_prec *role_field(emu_policy *p, const char *role)
{
    if (!strcmp(role, "weight")) return &p->weight;
    if (!strcmp(role, "master")) return &p->master;
    if (!strcmp(role, "activation")) return &p->activation;
    if (!strcmp(role, "act_grad")) return &p->act_grad;
    if (!strcmp(role, "weight_grad")) return &p->weight_grad;
    if (!strcmp(role, "opt_state")) return &p->opt_state;
    if (!strcmp(role, "exempt")) return &p->exempt_prec;
    if (!strcmp(role, "norm_stats")) return &p->norm_stats;
    if (!strcmp(role, "softmax")) return &p->softmax;
    if (!strcmp(role, "loss")) return &p->loss;
    return NULL;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* A spec value ("sequential,acc=binary16", "delayed,history=16",
 * "e3m4,bias=5") holds each key=value item once: its parsers would
 * silently take the first or the last.  Returns the repeated key's length
 * (its text at *dup), or 0. */
static size_t repeated_key(const char *val, const char **dup)
{
    for (const char *a = val; a; a = strchr(a, ',') ? strchr(a, ',') + 1 : NULL) {
        size_t la = strcspn(a, ",=");
        if (a[la] != '=')
            continue;
        for (const char *b = strchr(a, ','); b; b = strchr(b + 1, ',')) {
            const char *k = b + 1;
            if (strcspn(k, ",=") == la && k[la] == '=' && !strncmp(a, k, la)) {
                *dup = a;
                return la;
            }
        }
    }
    return 0;
}

int emu_policy_set(emu_policy *p, const char *assignment, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    char buf[256];
    if (!assignment || strlen(assignment) >= sizeof buf)
        return emu_fail(err, EMU_ESPEC, "policy", "", "assignment missing or too long");
    snprintf(buf, sizeof buf, "%s", assignment);
    char *eq = strchr(buf, '=');
    if (!eq)
        return emu_fail(err, EMU_ESPEC, "policy", buf, "expected key=value");
    *eq = '\0';
    const char *key = buf, *val = eq + 1;
    if (!*val)
        return emu_fail(err, EMU_ESPEC, "policy", key, "missing value");
    const char *dup;
    size_t dlen = repeated_key(val, &dup);
    if (dlen)
        return emu_fail(err, EMU_ESPEC, "policy", key, "'%.*s' is given twice in '%s'",
                        (int)dlen, dup, val);

    if (!strcmp(key, "exempt")) {
        unsigned e = 0;
        if (!strcmp(val, "none")) e = 0;
        else if (!strcmp(val, "first")) e = EMU_EXEMPT_FIRST;
        else if (!strcmp(val, "last")) e = EMU_EXEMPT_LAST;
        else if (!strcmp(val, "first+last")) e = EMU_EXEMPT_FIRST | EMU_EXEMPT_LAST;
        else
            return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not none, first, last "
                            "or first+last", val);
        p->exempt = e;
        return 0;
    }

    /* <role>=FORMAT, <role>.mode=MODE (exempt_format, exempt.mode for the
     * exempt layers); master=none turns the copy off. */
    char role[32];
    snprintf(role, sizeof role, "%.31s", key);
    char *dot = strchr(role, '.');
    if (dot)
        *dot = '\0';
    if (!strcmp(key, "exempt_format"))
        snprintf(role, sizeof role, "exempt");
    emu_role_prec *rp = role_field(p, role);
    if (rp && (!dot || !strcmp(dot + 1, "mode"))) {
        if (rp == &p->softmax && !dot && !strcmp(val, "activation")) {
            emu_policy_class_reset(p, rp);
            return 0;
        }
        if (rp == &p->softmax && dot && !rp->fmt.ebits)
            return emu_fail(err, EMU_ESPEC, "policy", key, "the softmax is in the "
                            "activation format, under the roles' roundings: "
                            "give it a format first (softmax=FMT)");
        if (dot) {
            if (emu_rnd_parse(val, &rp->rnd.mode, &rp->rnd.sr_bits))
                return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not a rounding "
                                "mode (rne rna rz ru rd ro sr srN)", val);
            return 0;
        }
        if (!strcmp(key, "master") && !strcmp(val, "none")) {
            p->use_master = false;
            return 0;
        }
        emu_error ferr;
        if (emu_format_resolve(&rp->fmt, val, &ferr)) {
            char msg[600];
            emu_error_format(&ferr, msg, sizeof msg);
            return emu_fail(err, EMU_ESPEC, "policy", key, "%s", msg);
        }
        if (!strcmp(key, "master"))
            p->use_master = true;
        return 0;
    }
    if (!strncmp(key, "q.", 2)) {
        /* q.<operand>=SPEC|none, q.<operand>.mode=MODE, q.all=... */
        char op[32];
        snprintf(op, sizeof op, "%.31s", key + 2);
        char *d2 = strchr(op, '.');
        if (d2)
            *d2 = '\0';
        emu_operand_quant *all[3] = { &p->q_weight, &p->q_activation,
                                      &p->q_act_grad };
        int lo = 0, hi = 3;
        if (!strcmp(op, "weight")) lo = 0, hi = 1;
        else if (!strcmp(op, "activation")) lo = 1, hi = 2;
        else if (!strcmp(op, "act_grad")) lo = 2, hi = 3;
        else if (strcmp(op, "all"))
            return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not a GEMM operand "
                            "(weight, activation, act_grad, all)", op);
        if (d2 && strcmp(d2 + 1, "mode"))
            return emu_fail(err, EMU_ESPEC, "policy", key, "expected q.%s or q.%s.mode",
                            op, op);
        for (int i = lo; i < hi; i++) {
            if (d2) {
                if (emu_rnd_parse(val, &all[i]->mode, &all[i]->sr_bits))
                    return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not a "
                                    "rounding mode (rne rna rz ru rd ro sr "
                                    "srN)", val);
                if (all[i]->mode == EMU_RS)
                    all[i]->sr_bits = 64;
            } else if (!strcmp(val, "none")) {
                all[i]->on = false;
            } else {
                emu_error ferr;
                if (emu_scaled_format_parse(&all[i]->fmt, val, &ferr)) {
                    char msg[600];
                    emu_error_format(&ferr, msg, sizeof msg);
                    return emu_fail(err, EMU_ESPEC, "policy", key, "%s", msg);
                }
                all[i]->on = true;
            }
        }
        return 0;
    }
    if (!strcmp(key, "attn_quant")) {
        if (strcmp(val, "yes") && strcmp(val, "no"))
            return emu_fail(err, EMU_ESPEC, "policy", key, "'%s': expected yes or "
                            "no", val);
        p->attn_quant = !strcmp(val, "yes");
        return 0;
    }
    if (!strcmp(key, "rht")) {
        static const char *const names[EMU_RHT_COUNT] = { "none", "wgrad", "backward" };
        for (int i = 0; i < EMU_RHT_COUNT; i++)
            if (!strcmp(val, names[i])) {
                p->rht = (emu_rht_apply)i;
                return 0;
            }
        return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not none, wgrad or "
                        "backward", val);
    }
    if (!strcmp(key, "rht_block")) {
        int b;
        if (parse_int(val, 1, 1 << 20, &b))
            return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not a block size",
                            val);
        p->rht_block = (unsigned)b;
        return 0;
    }
    if (!strcmp(key, "rht_seed")) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(val, &end, 0);
        if (!*val || *val == '-' || *end || errno)
            return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not a seed (an "
                            "integer from 0 to 2^64-1)", val);
        p->rht_seed = v;
        return 0;
    }
    if (!strcmp(key, "tensor_scaling")) {
        emu_error terr;
        if (emu_tensor_scaling_parse(&p->tscale, val, &terr)) {
            char msg[600];
            emu_error_format(&terr, msg, sizeof msg);
            return emu_fail(err, EMU_ESPEC, "policy", key, "%s", msg);
        }
        return 0;
    }
    if (!strcmp(key, "accum"))
        return emu_accum_parse(&p->accum, val, err);
    if (!strcmp(key, "update")) {
        if (!strcmp(val, "plain")) p->update = EMU_UPDATE_PLAIN;
        else if (!strcmp(val, "sr")) p->update = EMU_UPDATE_SR;
        else if (!strcmp(val, "kahan")) p->update = EMU_UPDATE_KAHAN;
        else
            return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not plain, sr or "
                            "kahan", val);
        return 0;
    }
    if (!strcmp(key, "scaling")) {
        static const char *const names[EMU_SCALE_COUNT] = {
            "none", "static", "dynamic", "enhanced", "adaptive", "layerwise"
        };
        for (int i = 0; i < EMU_SCALE_COUNT; i++)
            if (!strcmp(val, names[i])) {
                p->scaling.kind = (emu_scaling)i;
                return 0;
            }
        return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not none, static, "
                        "dynamic, enhanced, adaptive or layerwise", val);
    }
    emu_loss_scaling *s = &p->scaling;
    double *dfield = !strcmp(key, "scale") ? &s->init
                   : !strcmp(key, "growth") ? &s->growth
                   : !strcmp(key, "backoff") ? &s->backoff
                   : !strcmp(key, "floor") ? &s->floor
                   : !strcmp(key, "floor_growth") ? &s->floor_growth
                   : !strcmp(key, "target") ? &s->target
                   : !strcmp(key, "max_scale") ? &s->max
                   : !strcmp(key, "layer_max") ? &p->layer_max
                   : !strcmp(key, "total_max") ? &p->total_max : NULL;
    if (dfield) {
        if (parse_double(val, dfield))
            return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not a number", val);
        return 0;
    }
    if (!strcmp(key, "interval") || !strcmp(key, "floor_every")) {
        int *f = !strcmp(key, "interval") ? &s->interval : &s->floor_every;
        if (parse_int(val, 0, 1 << 30, f))
            return emu_fail(err, EMU_ESPEC, "policy", key, "'%s' is not a step count",
                            val);
        return 0;
    }
    return emu_fail(err, EMU_ESPEC, "policy", key, "unknown policy key (weight, master, "
                    "activation, act_grad, weight_grad, opt_state, "
                    "norm_stats, softmax, loss, <role>.mode, accum, exempt, exempt_format, update, "
                    "scaling, scale, growth, backoff, interval, floor, "
                    "floor_growth, floor_every, target, max_scale, "
                    "layer_max, total_max, "
                    "q.<operand>, q.<operand>.mode, tensor_scaling, attn_quant, "
                    "rht, rht_block, rht_seed)");
}

/* ---- validation ------------------------------------------------------------- */

static bool is_power_of_two(double x)
{
    return x > 0.0 && emu_is_pow2(x);
}

int emu_policy_validate(const emu_policy *p, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    static const char *const roles[] = { "weight", "master", "activation",
                                         "act_grad", "weight_grad", "opt_state",
                                         "exempt_format", "norm_stats",
                                         "loss", "softmax" };
    const emu_role_prec *rps[] = { &p->weight, &p->master, &p->activation,
                                   &p->act_grad, &p->weight_grad,
                                   &p->opt_state, &p->exempt_prec,
                                   &p->norm_stats, &p->loss, &p->softmax };
    /* The softmax may have no format (the activation's). */
    for (int i = 0; i < (p->softmax.fmt.ebits ? 10 : 9); i++) {
        if (!emu_format_is_validated(&rps[i]->fmt))
            return emu_fail(err, EMU_EINVAL, "policy", roles[i], "%s was not validated, "
                            "or was changed since: call emu_format_validate",
                            rps[i]->fmt.name);
        if (!rps[i]->fmt.fits_carrier)
            return emu_fail(err, EMU_EUNSUPPORTED, "policy", roles[i], "%s is not held by the "
                            "binary32 carrier", rps[i]->fmt.name);
        if (!rps[i]->fmt.has_zero)
            return emu_fail(err, EMU_EUNSUPPORTED, "policy", roles[i], "%s has no zero: it "
                            "cannot hold a tensor", rps[i]->fmt.name);
    }
    if (p->use_master) {
        const emu_format *w = &p->weight.fmt, *m = &p->master.fmt;
        if (m->p < w->p || m->emax < w->emax || m->min_value > w->min_value)
            return emu_fail(err, EMU_ESPEC, "policy", "master", "the master copy (%s) is "
                            "narrower than the compute copy (%s): it must hold "
                            "every weight value", m->name, w->name);
    }
    if (p->update == EMU_UPDATE_KAHAN && p->use_master)
        return emu_fail(err, EMU_ESPEC, "policy", "update", "Kahan-compensated updates "
                        "replace the master copy; set master=none");
    if (emu_accum_validate(&p->accum, err))
        return -1;
    const emu_loss_scaling *s = &p->scaling;
    if (!(s->init > 0.0) || !isfinite(s->init))
        return emu_fail(err, EMU_ESPEC, "policy", "scale", "the loss scale must be "
                        "positive and finite (got %g)", s->init);
    /* The scale multiplies a binary32 loss: 2^128 and above would be
     * infinite there, every gradient with it. */
    if (s->init >= 0x1p128)
        return emu_fail(err, EMU_ESPEC, "policy", "scale", "%g is 2^128 or more: the "
                        "scale multiplies the binary32 loss, whose largest "
                        "power of two is 2^127", s->init);
    if (s->kind != EMU_SCALE_NONE && s->kind != EMU_SCALE_ADAPTIVE &&
        !is_power_of_two(s->init))
        return emu_fail(err, EMU_ESPEC, "policy", "scale", "%g is not a power of two: "
                        "scaling would round every gradient", s->init);
    if (s->kind == EMU_SCALE_DYNAMIC || s->kind == EMU_SCALE_ENHANCED) {
        if (!is_power_of_two(s->growth) || s->growth <= 1.0)
            return emu_fail(err, EMU_ESPEC, "policy", "growth", "must be a power of two "
                            "above 1 (got %g)", s->growth);
        if (!is_power_of_two(s->backoff) || s->backoff >= 1.0)
            return emu_fail(err, EMU_ESPEC, "policy", "backoff", "must be a power of two "
                            "below 1 (got %g)", s->backoff);
        if (s->interval < 1)
            return emu_fail(err, EMU_ESPEC, "policy", "interval", "must be at least 1 "
                            "step");
    }
    if (s->kind == EMU_SCALE_ENHANCED) {
        if (!is_power_of_two(s->floor))
            return emu_fail(err, EMU_ESPEC, "policy", "floor", "must be a power of two "
                            "(got %g)", s->floor);
        if (s->floor_every && (!is_power_of_two(s->floor_growth) ||
                               s->floor_growth < 1.0))
            return emu_fail(err, EMU_ESPEC, "policy", "floor_growth", "must be a power of "
                            "two >= 1");
    }
    if ((s->kind == EMU_SCALE_ADAPTIVE || s->kind == EMU_SCALE_LAYERWISE) &&
        !(s->target > 0.0 && s->target < 1.0))
        return emu_fail(err, EMU_ESPEC, "policy", "target", "the target underflow rate "
                        "must lie in (0, 1) (got %g)", s->target);
    if (s->kind == EMU_SCALE_LAYERWISE) {
        /* Factors are powers of two, and so are their caps, so that every
         * product of them is exact; 2^127 bounds what the binary32 loss
         * and its gradients can carry. */
        if (!is_power_of_two(p->layer_max) || p->layer_max < 1.0 ||
            p->layer_max > 0x1p127)
            return emu_fail(err, EMU_ESPEC, "policy", "layer_max", "the per-layer "
                            "cap must be a power of two from 1 to 2^127 (got %g)",
                            p->layer_max);
        if (!is_power_of_two(p->total_max) || p->total_max < 1.0 ||
            p->total_max > 0x1p127)
            return emu_fail(err, EMU_ESPEC, "policy", "total_max", "the total cap "
                            "must be a power of two from 1 to 2^127 (got %g)",
                            p->total_max);
        if (s->init > p->total_max)
            return emu_fail(err, EMU_ESPEC, "policy", "scale", "the loss scale %g "
                            "exceeds the total cap total_max=%g: the total "
                            "bounds the loss scale times every factor",
                            s->init, p->total_max);
    }
    if (!is_power_of_two(s->max))
        return emu_fail(err, EMU_ESPEC, "policy", "max_scale", "must be a power of two "
                        "(got %g)", s->max);
    if (s->max >= 0x1p128)
        return emu_fail(err, EMU_ESPEC, "policy", "max_scale", "%g is 2^128 or more: the "
                        "scale multiplies the binary32 loss, whose largest "
                        "power of two is 2^127", s->max);
    const emu_operand_quant *qs[3] = { &p->q_weight, &p->q_activation,
                                       &p->q_act_grad };
    static const char *const qnames[3] = { "q.weight", "q.activation",
                                           "q.act_grad" };
    for (int i = 0; i < 3; i++) {
        if (!qs[i]->on)
            continue;
        if (emu_scaled_format_validate(&qs[i]->fmt, err)) {
            snprintf(err->key, sizeof err->key, "%s", qnames[i]);
            return -1;
        }
        if ((unsigned)qs[i]->mode >= EMU_RND_COUNT ||
            (qs[i]->mode == EMU_RS_BITS &&
             (qs[i]->sr_bits < 1 || qs[i]->sr_bits > 64)))
            return emu_fail(err, EMU_ESPEC, "policy", qnames[i], "bad rounding mode");
    }
    if ((unsigned)p->rht >= EMU_RHT_COUNT)
        return emu_fail(err, EMU_ESPEC, "policy", "rht", "unknown value %d", (int)p->rht);
    if (p->rht != EMU_RHT_NONE) {
        const unsigned b = p->rht_block;
        if (b != 4 && b != 16 && b != 64 && b != 256)
            return emu_fail(err, EMU_ESPEC, "policy", "rht_block", "%u: expected 4, "
                            "16, 64 or 256 (a power of four, so that 1/sqrt(block) "
                            "is a power of two)", b);
        /* The transform only spreads values before a quantization: on an
         * operand left in binary32 it would add rounding and nothing else. */
        const bool wgrad_q = p->q_act_grad.on && p->q_activation.on;
        if (!wgrad_q || (p->rht == EMU_RHT_BACKWARD && !p->q_weight.on))
            return emu_fail(err, EMU_ESPEC, "policy", "rht", "rht=%s transforms %s "
                            "before they are quantized, but q.%s is none",
                            p->rht == EMU_RHT_WGRAD ? "wgrad" : "backward",
                            p->rht == EMU_RHT_WGRAD
                                ? "the weight gradient's operands (dY and x)"
                                : "the backward GEMMs' operands (dY, x and W)",
                            !p->q_act_grad.on ? "act_grad"
                            : !p->q_activation.on ? "activation" : "weight");
    }
    if (p->tscale.history < 1 || p->tscale.history > EMU_AMAX_HISTORY_MAX)
        return emu_fail(err, EMU_ESPEC, "policy", "tensor_scaling", "history %d outside "
                        "1..%d", p->tscale.history, EMU_AMAX_HISTORY_MAX);
    return 0;
}

/* ---- JSON -------------------------------------------------------------------- */

/* "pad"name": {...}" followed by ",\n" (or "\n" if last, nothing if
 * last < 0). */
static void json_prec(FILE *fp, const char *name, const emu_role_prec *r,
                      const char *pad, int last)
{
    char spec[256];
    emu_format_spec_string(&r->fmt, spec, sizeof spec);
    const char *mode = emu_rnd_name(r->rnd.mode);
    char modebuf[16];
    if (r->rnd.mode == EMU_RS_BITS) {
        snprintf(modebuf, sizeof modebuf, "sr%u", r->rnd.sr_bits);
        mode = modebuf;
    }
    fprintf(fp, "%s\"%s\": {\"format\": \"%s\", \"spec\": \"%s\", \"mode\": "
            "\"%s\"}%s", pad, name, r->fmt.name, spec, mode,
            last < 0 ? "" : last ? "\n" : ",\n");
}

void emu_policy_write_json(const emu_policy *p, FILE *fp, int indent)
{
    EMU_HOSTFP_GUARD;
    char pad[32], pad2[36];
    snprintf(pad, sizeof pad, "%*s", indent, "");
    snprintf(pad2, sizeof pad2, "%*s", indent + 2, "");
    static const char *const updates[EMU_UPDATE_COUNT] = { "plain", "sr", "kahan" };
    static const char *const scalings[EMU_SCALE_COUNT] = {
        "none", "static", "dynamic", "enhanced", "adaptive", "layerwise"
    };
    char accum[256];
    emu_accum_string(&p->accum, accum, sizeof accum);
    fprintf(fp, "{\n");
    fprintf(fp, "%s\"name\": \"%s\",\n", pad2, p->name);
    fprintf(fp, "%s\"paper\": \"%s\",\n", pad2, p->paper);
    json_prec(fp, "weight", &p->weight, pad2, false);
    json_prec(fp, "master", &p->master, pad2, false);
    json_prec(fp, "activation", &p->activation, pad2, false);
    json_prec(fp, "act_grad", &p->act_grad, pad2, false);
    json_prec(fp, "weight_grad", &p->weight_grad, pad2, false);
    json_prec(fp, "opt_state", &p->opt_state, pad2, false);
    json_prec(fp, "exempt_precision", &p->exempt_prec, pad2, false);
    fprintf(fp, "%s\"use_master\": %s,\n", pad2, p->use_master ? "true" : "false");
    fprintf(fp, "%s\"accum\": \"%s\",\n", pad2, accum);
    fprintf(fp, "%s\"exempt\": \"%s\",\n", pad2,
            p->exempt == (EMU_EXEMPT_FIRST | EMU_EXEMPT_LAST) ? "first+last"
            : p->exempt == EMU_EXEMPT_FIRST ? "first"
            : p->exempt == EMU_EXEMPT_LAST ? "last" : "none");
    fprintf(fp, "%s\"update\": \"%s\",\n", pad2, updates[p->update]);
    const emu_loss_scaling *s = &p->scaling;
    fprintf(fp, "%s\"scaling\": {\"kind\": \"%s\", \"init\": %.17g, \"growth\": "
            "%.17g, \"backoff\": %.17g, \"interval\": %d, \"floor\": %.17g, "
            "\"floor_growth\": %.17g, \"floor_every\": %d, \"target\": %.17g, "
            "\"max\": %.17g", pad2, scalings[s->kind], s->init, s->growth,
            s->backoff, s->interval, s->floor, s->floor_growth, s->floor_every,
            s->target, s->max);
    /* The caps only where they act, so that every other record stays as
     * it was. */
    if (s->kind == EMU_SCALE_LAYERWISE)
        fprintf(fp, ", \"layer_max\": %.17g, \"total_max\": %.17g",
                p->layer_max, p->total_max);
    fprintf(fp, "}");
    const emu_operand_quant *qs[3] = { &p->q_weight, &p->q_activation,
                                       &p->q_act_grad };
    static const char *const qnames[3] = { "weight", "activation", "act_grad" };
    char ts[128];
    emu_tensor_scaling_string(&p->tscale, ts, sizeof ts);
    fprintf(fp, ",\n%s\"gemm_operands\": {", pad2);
    for (int i = 0; i < 3; i++) {
        char spec[256] = "none";
        if (qs[i]->on)
            emu_scaled_format_string(&qs[i]->fmt, spec, sizeof spec);
        const char *mode = emu_rnd_name(qs[i]->mode);
        char modebuf[16];
        if (qs[i]->mode == EMU_RS_BITS) {
            snprintf(modebuf, sizeof modebuf, "sr%u", qs[i]->sr_bits);
            mode = modebuf;
        }
        fprintf(fp, "%s\"%s\": {\"format\": \"%s\", \"mode\": \"%s\"}",
                i ? ", " : "", qnames[i], spec, mode);
    }
    fprintf(fp, ", \"tensor_scaling\": \"%s\"%s", ts,
            p->attn_quant ? ", \"attention\": \"yes\"" : "");
    /* The transform only where it acts: every other record stays as it was. */
    if (p->rht != EMU_RHT_NONE)
        fprintf(fp, ", \"rht\": {\"apply\": \"%s\", \"block\": %u, \"seed\": %llu}",
                p->rht == EMU_RHT_WGRAD ? "wgrad" : "backward", p->rht_block,
                (unsigned long long)p->rht_seed);
    fprintf(fp, "}");
    /* The op classes, all three when one differs from what a record
     * without them meant (emu/nn.h), so that an older run's record stays
     * byte for byte; the softmax as "activation" when it has no format. */
    if (!emu_policy_classes_legacy(p)) {
        fprintf(fp, ",\n");
        json_prec(fp, "norm_stats", &p->norm_stats, pad2, 0);
        if (p->softmax.fmt.ebits)
            json_prec(fp, "softmax", &p->softmax, pad2, 0);
        else
            fprintf(fp, "%s\"softmax\": {\"format\": \"activation\"},\n", pad2);
        json_prec(fp, "loss", &p->loss, pad2, -1);
    }
    fprintf(fp, "\n%s}", pad);
}
