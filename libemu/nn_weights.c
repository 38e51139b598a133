/*
 * nn_weights.c — a model's tensors by name, in PyTorch's state_dict order,
 * and saving and loading them as a tensor file (emu/tensorfile.h).
 *
 * Names are PyTorch's: "<layer>.weight", "<layer>.bias" for each layer
 * with parameters, and a layer's buffers after its parameters (batch
 * norm: "<layer>.running_mean", "<layer>.running_var").  A model built in
 * PyTorch with modules of the same names (tests/torch_peer/) reads a file
 * written here with load_state_dict and the other way round.
 *
 * What is saved is each parameter's master copy when the policy keeps
 * one, else its compute copy: the values the optimizer updates.  Loading
 * checks the whole file against the model before it changes anything,
 * then rounds the values into the master copy and casts that into the
 * compute copy, both nearest-even through the choke point (sites
 * "<name>.load", "<name>.load.cast"), as the random initialisation does
 * (nn_model.c, init_param): where the master is binary32 the values are
 * stored exactly, and the compute copy's rounding is counted.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/nn.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/tensorfile.h"
#include "emu/version.h"
#include "internal.h"

/* ---- names ------------------------------------------------------------------ */

/* One named tensor of a layer: a parameter or a buffer. */
typedef struct named_slot {
    const char *suffix;
    emu_param *param;
    emu_tensor *buffer;
} named_slot;

enum { MAX_SLOTS = 4 };

/* Layer l's named tensors in state_dict order: its parameters (those
 * allocated: a convolution without bias has no "bias"), then its
 * buffers.  A new layer kind with buffers adds a case here. */
static int layer_slots(emu_layer *l, named_slot *s)
{
    int n = 0;
    if (l->has_params) {
        if (l->weight.w.data)
            s[n++] = (named_slot){ "weight", &l->weight, NULL };
        if (l->bias.w.data)
            s[n++] = (named_slot){ "bias", &l->bias, NULL };
    }
    switch (l->kind) {
    case EMU_LAYER_BATCHNORM:
        s[n++] = (named_slot){ "running_mean", NULL, &l->running_mean };
        s[n++] = (named_slot){ "running_var", NULL, &l->running_var };
        break;
    default:
        break;
    }
    return n;
}

int emu_model_named_count(const emu_model *m)
{
    int c = 0;
    named_slot s[MAX_SLOTS];
    for (int i = 0; i < m->n_layers; i++)
        c += layer_slots(&m->layers[i], s);
    return c;
}

const char *emu_model_named_at(emu_model *m, int i, emu_param **param,
                               emu_tensor **buffer)
{
    static _Thread_local char name[EMU_TF_NAME_MAX];
    named_slot s[MAX_SLOTS];
    if (i < 0)
        return NULL;
    for (int k = 0; k < m->n_layers; k++) {
        int n = layer_slots(&m->layers[k], s);
        if (i < n) {
            if (param)
                *param = s[i].param;
            if (buffer)
                *buffer = s[i].buffer;
            const emu_layer *l = &m->layers[k];
            if (l->kind == EMU_LAYER_LSTM || l->kind == EMU_LAYER_LSTM_HH) {
                /* nn.LSTM's names: layer "lstm.l0" (its w_hh, b_hh in
                 * "lstm.l0.hh") -> "lstm.weight_ih_l0", "lstm.bias_hh_l0" */
                char base[sizeof l->name];
                snprintf(base, sizeof base, "%s", l->name);
                if (l->kind == EMU_LAYER_LSTM_HH && strrchr(base, '.'))
                    *strrchr(base, '.') = '\0';
                char *dot = strrchr(base, '.');
                if (dot) {
                    *dot = '\0';
                    snprintf(name, sizeof name, "%s.%s_%s_%s", base,
                             s[i].suffix,
                             l->kind == EMU_LAYER_LSTM ? "ih" : "hh", dot + 1);
                    return name;
                }
            }
            snprintf(name, sizeof name, "%s.%s", m->layers[k].name, s[i].suffix);
            return name;
        }
        i -= n;
    }
    return NULL;
}

/* The tensor a named slot saves: the master copy if there is one. */
static const emu_tensor *saved_copy(const emu_param *p, const emu_tensor *b)
{
    if (b)
        return b;
    return p->master.data ? &p->master : &p->w;
}

/* ---- saving ------------------------------------------------------------------- */

int emu_model_save_weights_meta(const emu_model *m, const char *path,
                                const char *const *meta, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    /* The enumeration hands out writable pointers; saving only reads. */
    emu_model *mm = (emu_model *)m;
    const int n = emu_model_named_count(m);
    emu_tf_out *out = calloc((size_t)n + 1, sizeof *out);
    char (*names)[EMU_TF_NAME_MAX] = calloc((size_t)n + 1, sizeof *names);
    int nmeta = 0;
    while (meta && meta[nmeta])
        nmeta++;
    const char **all = calloc((size_t)nmeta + 9, sizeof *all);
    if (!out || !names || !all) {
        free(out);
        free(names);
        free(all);
        return emu_fail(err, EMU_ENOMEM, path, "", "out of memory");
    }
    bool master = false;
    for (int i = 0; i < n; i++) {
        emu_param *p;
        emu_tensor *b;
        snprintf(names[i], sizeof names[i], "%s", emu_model_named_at(mm, i, &p, &b));
        const emu_tensor *t = saved_copy(p, b);
        master |= !b && p->master.data;
        out[i].name = names[i];
        out[i].ndim = t->ndim;
        for (int k = 0; k < t->ndim; k++)
            out[i].shape[k] = t->shape[k];
        out[i].data = t->data;
    }
    int a = 0;
    all[a++] = "format";
    all[a++] = "libemu-weights";
    all[a++] = "libemu_version";
    all[a++] = EMU_VERSION_STRING;
    all[a++] = "arch";
    all[a++] = m->arch;
    all[a++] = "copy";
    all[a++] = master ? "master" : "compute";
    for (int i = 0; i < nmeta; i++)
        all[a++] = meta[i];
    all[a] = NULL;
    int rc = emu_tensorfile_write(path, out, n, all, err);
    free(out);
    free(names);
    free(all);
    return rc;
}

int emu_model_save_weights(const emu_model *m, const char *path, emu_error *err)
{
    return emu_model_save_weights_meta(m, path, NULL, err);
}

/* ---- loading ------------------------------------------------------------------- */

/* A message that lists problems while they fit. */
typedef struct report {
    char text[256];
    size_t len;
    int count, shown;
} report;

static void note(report *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void note(report *r, const char *fmt, ...)
{
    char item[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(item, sizeof item, fmt, ap);
    va_end(ap);
    r->count++;
    /* Room for "; " and a final "; and N more". */
    size_t need = strlen(item) + (r->shown ? 2 : 0);
    if (r->len + need + 20 >= sizeof r->text)
        return;
    r->len += (size_t)snprintf(r->text + r->len, sizeof r->text - r->len, "%s%s",
                               r->shown ? "; " : "", item);
    r->shown++;
}

static void shape_text(char *buf, size_t size, const size_t *shape, int ndim)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int k = 0; k < ndim && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, "%s%zu", k ? ", " : "", shape[k]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

int emu_model_load_weights(emu_model *m, emu_ctx *ctx, const emu_policy *p,
                           const char *path, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    emu_tensorfile tf;
    if (emu_tensorfile_read(&tf, path, 0, err))
        return -1;
    const int n = emu_model_named_count(m);
    int rc = 0;
    /* Every check first: a refused file leaves the model as it was. */
    report r = { .len = 0 };
    bool *used = calloc((size_t)tf.count + 1, sizeof *used);
    if (!used) {
        emu_tensorfile_free(&tf);
        return emu_fail(err, EMU_ENOMEM, path, "", "out of memory");
    }
    for (int i = 0; i < n; i++) {
        emu_param *prm;
        emu_tensor *buf;
        const char *name = emu_model_named_at(m, i, &prm, &buf);
        const emu_tensor *t = buf ? buf : &prm->w;
        if (prm && p->use_master != (prm->master.data != NULL)) {
            note(&r, "%s: the model was built %s a master copy, the policy "
                 "has %s", name, prm->master.data ? "with" : "without",
                 p->use_master ? "one" : "none");
            continue;
        }
        const emu_tf_tensor *f = emu_tensorfile_find(&tf, name);
        if (!f) {
            note(&r, "%s is missing", name);
            continue;
        }
        used[f - tf.tensors] = true;
        bool same = f->ndim == t->ndim;
        for (int k = 0; same && k < t->ndim; k++)
            same = f->shape[k] == t->shape[k];
        if (!same) {
            char a[96], b[96];
            shape_text(a, sizeof a, f->shape, f->ndim);
            shape_text(b, sizeof b, t->shape, t->ndim);
            note(&r, "%s has shape %s, the model %s", name, a, b);
            continue;
        }
        for (size_t j = 0; j < f->n; j++)
            /* (Out of binary32's range, the cast itself is undefined.) */
            if (fabs(f->values[j]) > FLT_MAX ||
                (double)(float)f->values[j] != f->values[j]) {
                note(&r, "%s: element %zu, %.17g, is not a binary32 value "
                     "(convert the tensor to float32)", name, j, f->values[j]);
                break;
            }
    }
    for (int i = 0; i < tf.count; i++)
        if (!used[i])
            note(&r, "%s is not a tensor of the model", tf.tensors[i].name);
    free(used);
    if (r.count) {
        if (r.shown < r.count)
            snprintf(r.text + r.len, sizeof r.text - r.len, "; and %d more",
                     r.count - r.shown);
        emu_fail(err, EMU_EDATA, path, "weights", "does not fit the model %s: %s",
                 m->arch, r.text);
        emu_tensorfile_free(&tf);
        return -1;
    }

    /* Nearest-even whatever the policy: the weights are data. */
    const emu_rounding rne = { .mode = EMU_RNE, .sr_bits = 64 };
    float *v = NULL;
    for (int i = 0; i < n && !rc; i++) {
        emu_param *prm;
        emu_tensor *buf;
        char name[EMU_TF_NAME_MAX], site[EMU_TF_NAME_MAX + 16];
        snprintf(name, sizeof name, "%s", emu_model_named_at(m, i, &prm, &buf));
        const emu_tf_tensor *f = emu_tensorfile_find(&tf, name);
        float *nv = realloc(v, (f->n ? f->n : 1) * sizeof *v);
        if (!nv) {
            rc = emu_fail(err, EMU_ENOMEM, path, "weights", "%s: out of memory", name);
            break;
        }
        v = nv;
        for (size_t j = 0; j < f->n; j++)
            v[j] = (float)f->values[j];
        snprintf(site, sizeof site, "%s.load", name);
        emu_tensor *dst = buf ? buf : prm->master.data ? &prm->master : &prm->w;
        rc = emu_t_load(ctx, site, dst, v, f->n, &rne);
        if (!rc && !buf && prm->master.data) {
            snprintf(site, sizeof site, "%s.load.cast", name);
            rc = emu_t_cast(ctx, site, &prm->w, &prm->master, &rne);
        }
        if (rc)
            emu_fail(err, ctx->err.code, path, "weights", "%s: %s", name,
                     ctx->err.message);
    }
    free(v);
    emu_tensorfile_free(&tf);
    return rc;
}
