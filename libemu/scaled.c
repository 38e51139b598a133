/*
 * scaled.c — block-scaled formats: specs, quantization, packed storage and
 * per-tensor scaling recipes (emu/scaled.h has the definitions).
 *
 * Quantization has one definition and faster paths tested against it (and
 * against MPFR).  The definition: per block, the scale from the block's
 * amax; then every element rounded once by the choke point from the exact
 * quotient x / (s g), given as hi + lo (hi = fl(x / d), lo from the exact
 * remainder, as arith.c divides).  The paths:
 *   - power-of-two divisors (the MX formats): x * 2^-k in binary32 is the
 *     quotient except below 2^-126 or beyond binary32's range, so the array
 *     rounding (any mode), or for nearest-even a lean kernel, rounds the
 *     whole chunk, and those few exceptions are redone by the choke point;
 *   - other divisors (NVFP4's E4M3 scales, tensor scales), nearest-even:
 *     RN32(x * (1/d)) through the same kernel, redoing the quotients whose
 *     binary32 has the shape of a rounding boundary (div_run has the
 *     proof); NVFP4's scales themselves likewise (scale_rne_fast);
 *   - other divisors, stochastic modes: the choke point's decision on
 *     hi + lo written out branch-free (sr_quotient), same words, so that
 *     it vectorizes; the choke point for the few it does not decide;
 *   - other divisors, other deterministic modes (and layouts other than
 *     the two below): fl(x / d) in binary64 through the binary64 array
 *     rounding, redoing boundary cases (round_chunk).
 * The usual layout (1-d blocks along the last axis) runs fused, a chunk of
 * rows at a time, while the chunk is in cache; per-tensor formats run in
 * chunks of one divisor.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/scaled.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/rng.h"
#include "internal.h"
#include "ops_internal.h" /* emu_quant_keep */

/* ---- formats ---------------------------------------------------------------- */

typedef struct preset {
    const char *name, *elem, *scale;
    size_t block;
    emu_scale_rule rule;
    bool tensor, int_elem;
} preset;

static const preset presets[] = {
    { "mxfp8", "e4m3", "e8m0", 32, EMU_SCALE_RULE_FLOOR, false, false },
    { "mxfp8-e5m2", "e5m2", "e8m0", 32, EMU_SCALE_RULE_FLOOR, false, false },
    { "mxfp6-e2m3", "e2m3", "e8m0", 32, EMU_SCALE_RULE_FLOOR, false, false },
    { "mxfp6-e3m2", "e3m2", "e8m0", 32, EMU_SCALE_RULE_FLOOR, false, false },
    { "mxfp4", "e2m1", "e8m0", 32, EMU_SCALE_RULE_FLOOR, false, false },
    { "mxint8", "int8", "e8m0", 32, EMU_SCALE_RULE_FLOOR, false, true },
    { "nvfp4", "e2m1", "e4m3", 16, EMU_SCALE_RULE_AMAX, true, false },
};
enum { N_PRESETS = sizeof presets / sizeof presets[0] };

const char *const *emu_scaled_preset_names(void)
{
    static const char *names[N_PRESETS + 1];
    for (int i = 0; i < N_PRESETS; i++)
        names[i] = presets[i].name;
    names[N_PRESETS] = NULL;
    return names;
}

static const char *const rule_names[EMU_SCALE_RULE_COUNT] = { "floor", "ceil",
                                                              "amax" };

const char *emu_scale_rule_name(emu_scale_rule r)
{
    return (unsigned)r < EMU_SCALE_RULE_COUNT ? rule_names[r] : "?";
}

static int set_format(emu_format *f, const char *name, const char *where,
                      const char *key, emu_error *err)
{
    const emu_format *g = emu_format_find(name);
    if (!g)
        return emu_fail(err, EMU_ESPEC, where, key, "unknown format '%s' (a registered "
                        "name: see `emu formats`)", name);
    *f = *g;
    return 0;
}

static int parse_size(const char *v, size_t *out)
{
    char *end;
    if (!*v || *v == '-' || *v == '+')
        return -1;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end || x == 0 || x > (1u << 20))
        return -1;
    *out = (size_t)x;
    return 0;
}

static int parse_bool(const char *v, bool *out)
{
    if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1"))
        return *out = true, 0;
    if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0"))
        return *out = false, 0;
    return -1;
}

static void from_preset(emu_scaled_format *sf, const preset *p)
{
    memset(sf, 0, sizeof *sf);
    snprintf(sf->name, sizeof sf->name, "%s", p->name);
    sf->elem = *emu_format_find(p->elem);
    sf->int_elem = p->int_elem;
    sf->block_scaled = true;
    sf->scale = *emu_format_find(p->scale);
    sf->block[0] = p->block;
    sf->block[1] = 1;
    sf->rule = p->rule;
    sf->scale_mode = EMU_RNE;
    sf->tensor_scale = p->tensor;
    sf->pad = true;
}

int emu_scaled_format_parse(emu_scaled_format *sf, const char *spec,
                            emu_error *err)
{
    EMU_HOSTFP_GUARD;
    char where[200];
    snprintf(where, sizeof where, "scaled format '%.170s'", spec ? spec : "");
    if (!spec || !*spec)
        return emu_fail(err, EMU_ESPEC, where, "", "empty spec");
    char buf[512];
    if (strlen(spec) >= sizeof buf)
        return emu_fail(err, EMU_ESPEC, where, "", "spec longer than %zu characters",
                        sizeof buf - 1);
    strcpy(buf, spec);
    char *cur = buf, *tok = emu_next_token(&cur, ",");
    bool have_elem = false;
    if (tok && !strchr(tok, '=')) {
        const preset *p = NULL;
        for (int i = 0; i < N_PRESETS; i++)
            if (!strcmp(tok, presets[i].name))
                p = &presets[i];
        if (!p) {
            char names[256] = "";
            for (int i = 0; i < N_PRESETS; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names),
                         "%s%s", i ? ", " : "", presets[i].name);
            return emu_fail(err, EMU_ESPEC, where, "", "unknown preset '%s' (known: %s; "
                            "or keys elem=, scale=, block=, rule=)", tok, names);
        }
        from_preset(sf, p);
        have_elem = true;
        tok = emu_next_token(&cur, ",");
    } else {
        memset(sf, 0, sizeof *sf);
        snprintf(sf->name, sizeof sf->name, "custom");
        sf->block[0] = 32;
        sf->block[1] = 1;
        sf->rule = EMU_SCALE_RULE_FLOOR;
        sf->scale_mode = EMU_RNE;
        sf->pad = true;
        sf->block_scaled = true;
        if (set_format(&sf->scale, "e8m0", where, "scale", err))
            return -1;
    }
    bool custom = false;
    for (; tok; tok = emu_next_token(&cur, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return emu_fail(err, EMU_ESPEC, where, tok, "expected key=value");
        *eq = '\0';
        const char *key = tok, *v = eq + 1;
        custom = true;
        if (!strcmp(key, "elem")) {
            if (set_format(&sf->elem, v, where, key, err))
                return -1;
            sf->int_elem = !strcmp(sf->elem.name, "int8");
            have_elem = true;
        } else if (!strcmp(key, "scale")) {
            if (!strcmp(v, "none"))
                sf->block_scaled = false;
            else if (set_format(&sf->scale, v, where, key, err))
                return -1;
            else
                sf->block_scaled = true;
        } else if (!strcmp(key, "block")) {
            char tmp[64];
            snprintf(tmp, sizeof tmp, "%s", v);
            char *x = strchr(tmp, 'x');
            if (x)
                *x = '\0';
            if (parse_size(tmp, &sf->block[0]) ||
                (x ? parse_size(x + 1, &sf->block[1]) : (sf->block[1] = 1, 0)))
                return emu_fail(err, EMU_ESPEC, where, key, "'%s' is not N or NxM with "
                                "sizes 1..1048576", v);
        } else if (!strcmp(key, "rule")) {
            int r = -1;
            for (int i = 0; i < EMU_SCALE_RULE_COUNT; i++)
                if (!strcmp(v, rule_names[i]))
                    r = i;
            if (r < 0)
                return emu_fail(err, EMU_ESPEC, where, key, "'%s' is not floor, ceil or "
                                "amax", v);
            sf->rule = (emu_scale_rule)r;
        } else if (!strcmp(key, "scale_mode")) {
            unsigned bits;
            if (emu_rnd_parse(v, &sf->scale_mode, &bits) ||
                emu_rnd_is_stochastic(sf->scale_mode))
                return emu_fail(err, EMU_ESPEC, where, key, "'%s' is not a deterministic "
                                "rounding mode (rne, rna, rz, ru, rd, ro)", v);
        } else if (!strcmp(key, "tensor")) {
            if (parse_bool(v, &sf->tensor_scale))
                return emu_fail(err, EMU_ESPEC, where, key, "'%s' is not yes or no", v);
        } else if (!strcmp(key, "pad")) {
            if (parse_bool(v, &sf->pad))
                return emu_fail(err, EMU_ESPEC, where, key, "'%s' is not yes or no", v);
        } else if (!strcmp(key, "range")) {
            if (strcmp(v, "clamp") && strcmp(v, "error"))
                return emu_fail(err, EMU_ESPEC, where, key, "'%s' is not clamp or error", v);
            sf->strict_range = !strcmp(v, "error");
        } else {
            return emu_fail(err, EMU_ESPEC, where, key, "unknown key (elem, scale, "
                            "block, rule, scale_mode, tensor, pad, range)");
        }
    }
    if (!have_elem)
        return emu_fail(err, EMU_ESPEC, where, "elem", "no element format (elem=FMT or "
                        "a preset)");
    if (custom && strcmp(sf->name, "custom")) {
        /* A preset with overrides is no longer the preset. */
        char base[EMU_NAME_MAX];
        snprintf(base, sizeof base, "%s", sf->name);
        snprintf(sf->name, sizeof sf->name, "%.40s+", base);
    }
    if (emu_scaled_format_validate(sf, err)) {
        snprintf(err->where, sizeof err->where, "%s", where);
        return -1;
    }
    return 0;
}

int emu_scaled_format_validate(const emu_scaled_format *sf, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    const char *w = "scaled format";
    const emu_format *e = &sf->elem;
    if (!emu_format_is_validated(e))
        return emu_fail(err, EMU_EINVAL, w, "elem", "%s was not validated, or was changed "
                        "since: call emu_format_validate", e->name);
    if (sf->block_scaled && !emu_format_is_validated(&sf->scale))
        return emu_fail(err, EMU_EINVAL, w, "scale", "%s was not validated, or was "
                        "changed since: call emu_format_validate",
                        sf->scale.name);
    if (!e->fits_carrier || !e->is_signed || !e->has_zero)
        return emu_fail(err, EMU_EUNSUPPORTED, w, "elem", "element format %s must be signed, "
                        "have a zero and fit binary32", e->name);
    if (sf->int_elem && (e->ebits != 1 || e->bits != 8 ||
                         e->specials != EMU_SPECIALS_FINITE))
        return emu_fail(err, EMU_ESPEC, w, "elem", "integer elements need a sign-"
                        "magnitude format with one exponent bit and no "
                        "specials (formats/int8.fmt)");
    if (!sf->block_scaled && !sf->tensor_scale)
        return emu_fail(err, EMU_ESPEC, w, "scale", "neither block scales nor a tensor "
                        "scale: that is the plain format %s", e->name);
    if (sf->block_scaled) {
        const emu_format *s = &sf->scale;
        if (!s->fits_carrier)
            return emu_fail(err, EMU_EUNSUPPORTED, w, "scale", "scale format %s does not fit "
                            "binary32", s->name);
        if (sf->block[0] < 1 || sf->block[1] < 1)
            return emu_fail(err, EMU_ESPEC, w, "block", "block sizes must be at least 1");
        if ((sf->rule == EMU_SCALE_RULE_FLOOR || sf->rule == EMU_SCALE_RULE_CEIL) &&
            (s->max < 1.0 || s->min_value > 1.0))
            return emu_fail(err, EMU_ESPEC, w, "scale", "a power-of-two rule needs a "
                            "scale format that holds 1 (%s holds %g..%g)",
                            s->name, s->min_value, s->max);
        if ((unsigned)sf->rule >= EMU_SCALE_RULE_COUNT)
            return emu_fail(err, EMU_ESPEC, w, "rule", "unknown rule");
        if (emu_rnd_is_stochastic(sf->scale_mode) ||
            (unsigned)sf->scale_mode >= EMU_RND_COUNT)
            return emu_fail(err, EMU_ESPEC, w, "scale_mode", "the scale is rounded "
                            "deterministically");
    }
    int bits = e->p + (sf->block_scaled ? sf->scale.p : 0) +
               (sf->tensor_scale ? 24 : 0);
    if (bits > 53)
        return emu_fail(err, EMU_EUNSUPPORTED, w, "elem", "element (%d bits), scale (%d) and "
                        "tensor scale (%d) significands exceed binary64's 53: "
                        "values would not be exact", e->p,
                        sf->block_scaled ? sf->scale.p : 0,
                        sf->tensor_scale ? 24 : 0);
    return 0;
}

void emu_scaled_format_string(const emu_scaled_format *sf, char *buf,
                              size_t size)
{
    EMU_HOSTFP_GUARD;
    char block[48] = "";
    if (sf->block[1] > 1)
        snprintf(block, sizeof block, "%zux%zu", sf->block[0], sf->block[1]);
    else
        snprintf(block, sizeof block, "%zu", sf->block[0]);
    if (!sf->block_scaled) {
        snprintf(buf, size, "elem=%s,scale=none,tensor=%s", sf->elem.name,
                 sf->tensor_scale ? "yes" : "no");
        return;
    }
    snprintf(buf, size, "elem=%s,scale=%s,block=%s,rule=%s,scale_mode=%s,"
             "tensor=%s,pad=%s%s", sf->elem.name, sf->scale.name, block,
             emu_scale_rule_name(sf->rule), emu_rnd_name(sf->scale_mode),
             sf->tensor_scale ? "yes" : "no", sf->pad ? "yes" : "no",
             sf->strict_range ? ",range=error" : "");
}

double emu_scaled_bits_per_element(const emu_scaled_format *sf)
{
    EMU_HOSTFP_GUARD;
    double b = sf->elem.bits;
    if (sf->block_scaled)
        b += (double)sf->scale.bits / ((double)sf->block[0] * (double)sf->block[1]);
    return b;
}

/* ---- geometry ----------------------------------------------------------------
 * A block is a 2-d strided set of elements: nr rows of nc elements, from
 * `base`, rows `rs` apart and elements `cs` apart.  1-d blocks along axis a
 * of a tensor seen as (outer, len, inner): nr = 1, cs = inner.  Tiles of a
 * matrix (R, C): rows of a tile are matrix rows. */

typedef struct geom {
    bool tile;
    size_t outer, len, inner, nb;   /* 1-d: nb blocks along the axis      */
    size_t R, C, tr, tc, nbr, nbc;  /* tiles: tr x tc, nbr x nbc of them  */
} geom;

typedef struct block_ref {
    size_t base, nr, nc, rs, cs;
} block_ref;

static size_t ceil_div(size_t a, size_t b)
{
    return a / b + (a % b != 0);
}

static void geometry(const emu_scaled_tensor *q, geom *g)
{
    memset(g, 0, sizeof *g);
    const emu_scaled_format *sf = &q->sf;
    if (!sf->block_scaled)
        return;
    if (sf->block[1] > 1) {
        g->tile = true;
        g->R = q->shape[0];
        g->C = q->shape[1];
        g->tr = q->axis == 1 ? sf->block[1] : sf->block[0];
        g->tc = q->axis == 1 ? sf->block[0] : sf->block[1];
        g->nbr = ceil_div(g->R, g->tr);
        g->nbc = ceil_div(g->C, g->tc);
        return;
    }
    g->outer = g->inner = 1;
    for (int d = 0; d < q->axis; d++)
        g->outer *= q->shape[d];
    for (int d = q->axis + 1; d < q->ndim; d++)
        g->inner *= q->shape[d];
    g->len = q->shape[q->axis];
    g->nb = ceil_div(g->len, sf->block[0]);
}

static block_ref block_at(const emu_scaled_tensor *q, const geom *g, size_t b)
{
    block_ref r;
    if (!q->sf.block_scaled) {
        r.base = 0;
        r.nr = 1;
        r.nc = q->n;
        r.rs = 0;
        r.cs = 1;
    } else if (g->tile) {
        size_t br = b / g->nbc, bc = b % g->nbc;
        r.base = br * g->tr * g->C + bc * g->tc;
        r.nr = br + 1 < g->nbr ? g->tr : g->R - br * g->tr;
        r.nc = bc + 1 < g->nbc ? g->tc : g->C - bc * g->tc;
        r.rs = g->C;
        r.cs = 1;
    } else {
        size_t in = b % g->inner, t = b / g->inner;
        size_t lb = t % g->nb, o = t / g->nb;
        size_t b0 = q->sf.block[0];
        r.base = (o * g->len + lb * b0) * g->inner + in;
        r.nr = 1;
        r.nc = lb + 1 < g->nb ? b0 : g->len - lb * b0;
        r.rs = 0;
        r.cs = g->inner;
    }
    return r;
}

size_t emu_scaled_block_of(const emu_scaled_tensor *q, size_t i)
{
    geom g;
    if (!q->sf.block_scaled)
        return 0;
    geometry(q, &g);
    if (g.tile) {
        size_t r = i / g.C, c = i % g.C;
        return (r / g.tr) * g.nbc + c / g.tc;
    }
    size_t in = i % g.inner, t = i / g.inner;
    size_t l = t % g.len, o = t / g.len;
    return (o * g.nb + l / q->sf.block[0]) * g.inner + in;
}

/* Visits a block's elements: for (r) for (c) idx = base + r*rs + c*cs. */
#define FOR_BLOCK(ref, idx, ...)                                               \
    for (size_t r_ = 0; r_ < (ref).nr; r_++)                                   \
        for (size_t c_ = 0; c_ < (ref).nc; c_++) {                             \
            const size_t idx = (ref).base + r_ * (ref).rs + c_ * (ref).cs;     \
            __VA_ARGS__                                                        \
        }

/* Validates the shape and fills q's header (everything but its buffers:
 * elem and scale are left NULL). */
static int scaled_header(emu_scaled_tensor *q, const emu_scaled_format *sf,
                         int ndim, const size_t *shape, int axis,
                         emu_error *err)
{
    memset(q, 0, sizeof *q);
    const char *w = "scaled tensor";
    if (emu_scaled_format_validate(sf, err))
        return -1;
    if (ndim < 1 || ndim > EMU_SCALED_MAX_DIMS)
        return emu_fail(err, EMU_EINVAL, w, "shape", "%d dimensions (1..%d)", ndim,
                        EMU_SCALED_MAX_DIMS);
    if (axis < 0)
        axis += ndim;
    if (axis < 0 || axis >= ndim)
        return emu_fail(err, EMU_EINVAL, w, "axis", "axis out of range for %d dimensions",
                        ndim);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            return emu_fail(err, EMU_EINVAL, w, "shape", "dimension %d is zero", d);
        if (n > SIZE_MAX / sizeof(float) / shape[d])
            return emu_fail(err, EMU_EINVAL, w, "shape", "too many elements");
        n *= shape[d];
    }
    if (sf->block_scaled) {
        if (sf->block[1] > 1 && ndim != 2)
            return emu_fail(err, EMU_EINVAL, w, "block", "a %zux%zu tile needs a matrix, "
                            "not %d dimensions", sf->block[0], sf->block[1],
                            ndim);
        if (!sf->pad) {
            size_t along = shape[axis];
            size_t across = ndim == 2 ? shape[1 - axis] : 1;
            if (along % sf->block[0] || (sf->block[1] > 1 && across % sf->block[1]))
                return emu_fail(err, EMU_EINVAL, w, "block", "the block %zux%zu does not "
                                "divide the dimensions (%zu along the axis, "
                                "%zu across) and the format says pad=no",
                                sf->block[0], sf->block[1], along, across);
        }
    }
    q->sf = *sf;
    q->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        q->shape[d] = shape[d];
    q->n = n;
    q->axis = axis;
    geom g;
    geometry(q, &g);
    q->nblocks = !sf->block_scaled ? 1 : g.tile ? g.nbr * g.nbc
                                                : g.outer * g.nb * g.inner;
    q->tensor_scale = 1.0f;
    return 0;
}

int emu_scaled_alloc(emu_scaled_tensor *q, const emu_scaled_format *sf,
                     int ndim, const size_t *shape, int axis, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    if (scaled_header(q, sf, ndim, shape, axis, err))
        return -1;
    q->elem = calloc(q->n, sizeof *q->elem);
    q->scale = malloc(q->nblocks * sizeof *q->scale);
    if (!q->elem || !q->scale) {
        emu_scaled_free(q);
        return emu_fail(err, EMU_ENOMEM, "scaled tensor", "",
                        "out of memory for %zu elements", q->n);
    }
    for (size_t b = 0; b < q->nblocks; b++)
        q->scale[b] = 1.0f;
    return 0;
}

int emu_quant_keep_shape(emu_quant_keep *k, const emu_scaled_format *sf,
                         int ndim, const size_t *shape, int axis,
                         emu_error *err)
{
    EMU_HOSTFP_GUARD;
    emu_scaled_tensor h;
    if (scaled_header(&h, sf, ndim, shape, axis, err))
        return -1;
    if (emu_quant_keep_grow(&k->q.elem, &k->elem_cap, h.n))
        return emu_fail(err, EMU_ENOMEM, "scaled tensor", "",
                        "out of memory for %zu elements", h.n);
    if (emu_quant_keep_grow(&k->q.scale, &k->scale_cap, h.nblocks))
        return emu_fail(err, EMU_ENOMEM, "scaled tensor", "",
                        "out of memory for %zu scales", h.nblocks);
    h.elem = k->q.elem;
    h.scale = k->q.scale;
    k->q = h;
    for (size_t b = 0; b < h.nblocks; b++)
        k->q.scale[b] = 1.0f;
    return 0;
}

int emu_quant_keep_grow(float **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    float *b = malloc(n * sizeof *b);
    if (!b)
        return -1;
    free(*buf);
    *buf = b;
    *cap = n;
    return 0;
}

void emu_quant_keep_free(emu_quant_keep *k)
{
    if (!k)
        return;
    emu_scaled_free(&k->q);
    free(k->sc);
    memset(k, 0, sizeof *k);
}

void emu_scaled_free(emu_scaled_tensor *q)
{
    if (!q)
        return;
    free(q->elem);
    free(q->scale);
    q->elem = q->scale = NULL;
}

/* ---- scales ------------------------------------------------------------------ */

/* Exponent and fraction bits of a positive normal double (every binary32
 * value and every product of two is one), and 2^k for a normal k: bit
 * operations, as these run once per block. */
static inline int exp_of(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return (int)((u >> 52) & 0x7ff) - 1023;
}

static inline uint64_t frac_of(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u & (((uint64_t)1 << 52) - 1);
}

static inline double pow2i(int k)
{
    uint64_t u = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* floor(log2(a / d)) exactly, a and d positive normal doubles. */
static int floor_log2_ratio(double a, double d)
{
    return exp_of(a) - exp_of(d) - (frac_of(a) < frac_of(d));
}

/* The power-of-two exponents a scale format holds: [lo, hi]. */
static void pow2_range(const emu_format *s, int *lo, int *hi)
{
    *hi = (int)floor(log2(s->max));
    *lo = (int)ceil(log2(s->min_value));
}

/* The block scale for amax a (finite, >= 0) with tensor scale g; [lo, hi]
 * the scale format's power-of-two exponents (pow2_range).  Sets *clamped
 * when the ideal scale lay outside the scale format. */
static double block_scale(const emu_scaled_format *sf, double a, double g,
                          int lo, int hi, bool *clamped)
{
    const emu_format *e = &sf->elem, *s = &sf->scale;
    *clamped = false;
    if (sf->rule == EMU_SCALE_RULE_AMAX) {
        if (a == 0.0)
            return s->min_value;
        double d = e->max * g; /* exact: p_elem + 24 <= 53 */
        double qh = a / d, ql = fma(-qh, d, a) / d;
        emu_rounding r = { .mode = sf->scale_mode, .saturate = true };
        emu_status st;
        double v = emu_round2_unguarded(s, qh, ql, &r, &st);
        if (st.flags & EMU_FLAG_OVERFLOW)
            *clamped = true;
        if (v <= 0.0) {
            *clamped = true;
            v = s->min_value;
        }
        return v;
    }
    if (a == 0.0)
        return pow2i(lo);
    int k;
    if (sf->rule == EMU_SCALE_RULE_FLOOR) {
        k = floor_log2_ratio(a, g) - e->emax;
    } else {
        /* The smallest k with a <= max_elem * g * 2^k. */
        double d = e->max * g;
        k = floor_log2_ratio(a, d);
        if (d * pow2i(k) < a) /* exact: a power of two times d */
            k++;
    }
    if (k < lo || k > hi) {
        *clamped = true;
        k = k < lo ? lo : hi;
    }
    return pow2i(k);
}

/* a / d rounded into binary32 with mode m, from the exact quotient (a >= 0
 * and d > 0 finite); never 0 and never above FLT_MAX (the tensor scale
 * must be usable). */
static double div_to_f32(double a, double d, emu_rnd m)
{
    double hi = a / d, lo = isfinite(hi) && hi != 0.0 ? fma(-hi, d, a) / d : 0.0;
    emu_rounding r = { .mode = m, .saturate = true };
    double g = emu_round2_unguarded(emu_format_find("binary32"), hi, lo, &r,
                                    NULL);
    return g == 0.0 ? FLT_TRUE_MIN : g;
}

/* The tensor scale is rounded like the block scales (the AMAX rule's
 * scale_mode), so that ru keeps its promise to clip nothing; nearest-even
 * otherwise. */
static emu_rnd tensor_scale_mode(const emu_scaled_format *sf)
{
    return sf->block_scaled && sf->rule == EMU_SCALE_RULE_AMAX ? sf->scale_mode
                                                              : EMU_RNE;
}

/* ---- quantization ------------------------------------------------------------ */

/* What sr_quotient needs to know about the element format. */
typedef struct sr_plan {
    int p, emin, qsub;   /* precision, 2^emin, the quantum below 2^emin   */
    double max;
    unsigned shift;      /* 64 - the random bits compared (0 for EMU_RS)  */
    uint64_t lim;        /* 2^bits - 1                                    */
    bool neg_zero;       /* a negative value that rounds to 0 gives -0    */
} sr_plan;

typedef struct qrun {
    emu_scaled_tensor *q;
    const float *x;
    const emu_quant_opts *o;
    emu_rounding rnd;           /* elements: saturating                      */
    double g;
    geom geo;
    int scale_lo, scale_hi;     /* pow2_range of the scale format           */
    bool kernel_ok;             /* the nearest-even kernel applies          */
    bool pow2_scales;           /* every s g is a power of two whose
                                   reciprocal is a binary32 (known ahead) */
    bool div_ok;                /* nearest-even by x * (1/d), see div_run  */
    bool sr_ok;                 /* stochastic by sr_quotient               */
    bool scale_fast;            /* AMAX scales by scale_rne_fast           */
    uint32_t div_fmask;         /* binary32 fraction bits below p + 1      */
    uint32_t scale_fmask;       /* the same for the scale format           */
    double amax_inv;            /* 1 / (max_elem g), for scale_rne_fast    */
    emu_rne_sat_plan kernel;
    emu_rne_sat_plan scale_kernel;
    sr_plan sr;
} qrun;

/* The largest finite |x| of n values (0 if none), on the bit patterns as
 * amax_run below (inf and NaN count as 0; |x| < 2^31 as an integer, so signed
 * lanes, which baseline SSE2 compares too).  A whole-tensor pass (the
 * tensor scale): compiled also for AVX2 and AVX-512. */
EMU_TARGET_CLONES
static double amax_finite(const float *xs, size_t n)
{
    int32_t lane[16] = { 0 };
    size_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int j = 0; j < 16; j++) {
            int32_t u;
            memcpy(&u, &xs[k + (size_t)j], sizeof u);
            u &= 0x7fffffff;
            u = u < 0x7f800000 ? u : 0;
            lane[j] = u > lane[j] ? u : lane[j];
        }
    int32_t m = 0;
    for (int j = 0; j < 16; j++)
        m = lane[j] > m ? lane[j] : m;
    for (; k < n; k++) {
        int32_t u;
        memcpy(&u, &xs[k], sizeof u);
        u &= 0x7fffffff;
        u = u < 0x7f800000 ? u : 0;
        m = u > m ? u : m;
    }
    float f;
    memcpy(&f, &m, sizeof f);
    return (double)f;
}

static int tensor_scale_of(qrun *R, emu_error *err)
{
    const emu_scaled_format *sf = &R->q->sf;
    R->g = 1.0;
    if (!sf->tensor_scale)
        return 0;
    double g = R->o->tensor_scale;
    if (g == 0.0) {
        /* The largest finite |x|: one inf must not decide the scale of
         * every other element (it saturates on its own). */
        const double a = amax_finite(R->x, R->q->n);
        double ms = sf->block_scaled ? sf->scale.max : 1.0;
        g = isfinite(a) && a > 0.0
                ? div_to_f32(a, sf->elem.max * ms, tensor_scale_mode(sf))
                : 1.0;
    }
    if (!(g > 0.0) || !isfinite(g) || (double)(float)g != g)
        return emu_fail(err, EMU_EINVAL, "quantize", "tensor_scale", "%g is not a positive "
                        "finite binary32 value", g);
    R->g = g;
    return 0;
}

/* Adds one element's outcome to a block's statistics. */
static void note_element(emu_block_stats *bs, double x, double v, double e,
                         double emax_elem_value, double scaled_hi,
                         double scaled_lo, double *relmax)
{
    double fs = fabs(scaled_hi);
    if (fs > emax_elem_value ||
        (fs == emax_elem_value && scaled_lo != 0.0 &&
         (scaled_lo > 0.0) == (scaled_hi > 0.0)))
        bs->clipped++;
    if (x != 0.0 && e == 0.0)
        bs->flushed++;
    double d, dl;
    emu_two_sum(v, -x, &d, &dl);
    if (d != 0.0 || dl != 0.0)
        bs->inexact++;
    bs->err_sq += d * d;
    bs->ref_sq += x * x;
    if (x != 0.0) {
        double rel = fabs(d) / fabs(x);
        if (rel > *relmax)
            *relmax = rel;
    }
}

/* The block's amax: NaN if it holds a NaN, inf if an inf.  On the bit
 * patterns, where the largest |x| is the largest integer, a loop that
 * compilers vectorize. */
/* The largest |x| of n contiguous values (NaN if one is NaN), on the bit
 * patterns, where |x| orders as an unsigned integer and NaN lies above
 * inf: sixteen independent lanes (elementwise maxima, which vectorize),
 * folded in halves at the end. */
static inline double amax_run(const float *xs, size_t n)
{
    uint32_t lane[16] = { 0 };
    size_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int j = 0; j < 16; j++) {
            uint32_t u;
            memcpy(&u, &xs[k + (size_t)j], sizeof u);
            u &= 0x7fffffffu;
            lane[j] = u > lane[j] ? u : lane[j];
        }
    for (int j = 0; j < 8; j++) /* fixed trip counts: a few vector ops */
        lane[j] = lane[j + 8] > lane[j] ? lane[j + 8] : lane[j];
    for (int j = 0; j < 4; j++)
        lane[j] = lane[j + 4] > lane[j] ? lane[j + 4] : lane[j];
    uint32_t m = 0;
    for (int j = 0; j < 4; j++)
        m = lane[j] > m ? lane[j] : m;
    for (; k < n; k++) {
        uint32_t u;
        memcpy(&u, &xs[k], sizeof u);
        u &= 0x7fffffffu;
        m = u > m ? u : m;
    }
    float f;
    memcpy(&f, &m, sizeof f);
    return m > 0x7f800000u ? NAN : (double)f;
}

double emu_amax(const float *x, size_t n)
{
    EMU_HOSTFP_GUARD;
    return amax_run(x, n);
}

/* t = x * f for n contiguous values (f a power of two: exact but below
 * 2^-126), in fixed-length runs that vectorize.  tmp is the caller's
 * scratch, never the data: restrict. */
static inline void scale_run(float *restrict t, const float *restrict x,
                             float f, size_t n)
{
    size_t k = 0;
    for (; k + 16 <= n; k += 16) {
        float v[16];
        memcpy(v, x + k, sizeof v);
        for (int j = 0; j < 16; j++)
            v[j] *= f;
        memcpy(t + k, v, sizeof v);
    }
    for (; k < n; k++)
        t[k] = x[k] * f;
}

static void block_amax(const qrun *R, const block_ref *br, double *amax)
{
    double m = 0.0;
    bool nan = false;
    for (size_t r = 0; r < br->nr; r++) {
        const float *row = R->x + br->base + r * br->rs;
        if (br->cs == 1) {
            const double a = amax_run(row, br->nc);
            nan |= isnan(a);
            m = a > m ? a : m;
            continue;
        }
        for (size_t c = 0; c < br->nc; c++) {
            const double a = fabs((double)row[c * br->cs]);
            nan |= isnan(a);
            m = a > m ? a : m;
        }
    }
    *amax = nan ? NAN : m;
}

/* ---- the 1-d layout in memory order -----------------------------------------
 * A tensor blocked along axis a, seen as (outer, len, inner): element
 * (o, l, c) lies at (o len + l) inner + c and belongs to block
 * (o nb + l / b) inner + c.  Visited in memory order, a row of `inner`
 * elements meets a row of `inner` consecutive blocks: contiguous loops on
 * both sides, which vectorize, in place of block_at's strided visits (the
 * weight-gradient operands are blocked along axis 0, inner > 1).  The row
 * kernels below are compiled for baseline x86-64, AVX2 and AVX-512, one
 * chosen per process as round_array.c's are (EMU_ISA forces a lower one:
 * test_scaled runs at each level). */

/* acc[c] = max(acc[c], |x[c]|) on the bit patterns (NaN above inf, as
 * amax_run orders them). */
static EMU_KERNEL_INLINE uint32_t amax_row_any(uint32_t *restrict acc,
                                               const float *restrict x,
                                               size_t n)
{
    for (size_t c = 0; c < n; c++) {
        uint32_t u;
        memcpy(&u, &x[c], sizeof u);
        u &= 0x7fffffffu;
        acc[c] = u > acc[c] ? u : acc[c];
    }
    return 0; /* (the levels' wrappers return what the kernels do) */
}

/* out[c] = e[c] s[c] gs (s[c] NaN: NaN) rounded to binary32; returns
 * nonzero if a product is not a binary32 value (the caller then redoes
 * the row by the definition, which names the element). */
static EMU_KERNEL_INLINE uint32_t deq_row_any(float *restrict out,
                                              const float *restrict e,
                                              const float *restrict s,
                                              double gs, size_t n)
{
    uint32_t bad = 0;
    for (size_t c = 0; c < n; c++) {
        const double sc = s[c];
        const double v = sc != sc ? (double)NAN : (double)e[c] * sc * gs;
        const float f = (float)v;
        bad |= (uint32_t)((double)f != v) & (uint32_t)(v == v);
        out[c] = f;
    }
    return bad;
}

/* The same with one scale for the row (contiguous blocks). */
static EMU_KERNEL_INLINE uint32_t deq_run_any(float *restrict out,
                                              const float *restrict e,
                                              double s, double gs, size_t n)
{
    uint32_t bad = 0;
    for (size_t c = 0; c < n; c++) {
        const double v = (double)e[c] * s * gs;
        const float f = (float)v;
        bad |= (uint32_t)((double)f != v) & (uint32_t)(v == v);
        out[c] = f;
    }
    return bad;
}

/* Without a tensor scale, the scales all positive normal powers of two
 * (scales_pow2), in binary32: out[c] = e[c] s[c], equal to the binary64
 * product deq_row rounds (zeros' signs alike) iff f (1/s[c]) = e[c].  1/s
 * is a binary32 value (2^-127 a subnormal one), and the product can be
 * rounded only where it is subnormal with s < 1 or infinite: then f 2^m
 * (m > 0) is exact and not e, or infinite and e finite.  Returns nonzero
 * if a product is not known exact (rounded, or NaN): the caller then
 * redoes the row in binary64 by deq_row, which refuses a product that is
 * not a binary32 value.  No conversions to binary64 and back; exact
 * subnormal products (small gradients) stay here. */
static EMU_KERNEL_INLINE uint32_t deq_row_f32_any(float *restrict out,
                                                  const float *restrict e,
                                                  const float *restrict s,
                                                  size_t n)
{
    uint32_t redo = 0;
    for (size_t c = 0; c < n; c++) {
        const float f = e[c] * s[c];
        redo |= (uint32_t)(f * (1.0f / s[c]) != e[c]);
        out[c] = f;
    }
    return redo;
}

/* The same for nblk whole contiguous blocks of b elements, block k scaled
 * by s[k]. */
static EMU_KERNEL_INLINE uint32_t deq_blocks_f32_any(float *restrict out,
                                                     const float *restrict e,
                                                     const float *restrict s,
                                                     size_t b, size_t nblk)
{
    uint32_t redo = 0;
    for (size_t k = 0; k < nblk; k++) {
        const float sk = s[k], inv = 1.0f / sk;
        for (size_t c = 0; c < b; c++) {
            const float f = e[k * b + c] * sk;
            redo |= (uint32_t)(f * inv != e[k * b + c]);
            out[k * b + c] = f;
        }
    }
    return redo;
}

/* Contiguous blocks (inner 1): nblk whole blocks of b elements each,
 * acc[k] the bit-pattern maximum of block k. */
static EMU_KERNEL_INLINE uint32_t amax_blocks_any(uint32_t *restrict acc,
                                                  const float *restrict x,
                                                  size_t b, size_t nblk)
{
    for (size_t k = 0; k < nblk; k++) {
        uint32_t m = 0;
        for (size_t c = 0; c < b; c++) {
            uint32_t u;
            memcpy(&u, &x[k * b + c], sizeof u);
            u &= 0x7fffffffu;
            m = u > m ? u : m;
        }
        acc[k] = m;
    }
    return 0;
}

/* Dequantization of nblk whole contiguous blocks of b elements, block k
 * scaled by s[k] (NaN: its elements NaN); nonzero as deq_row. */
static EMU_KERNEL_INLINE uint32_t deq_blocks_any(float *restrict out,
                                                 const float *restrict e,
                                                 const float *restrict s,
                                                 double gs, size_t b,
                                                 size_t nblk)
{
    uint32_t bad = 0;
    for (size_t k = 0; k < nblk; k++) {
        const double sk = s[k];
        if (sk != sk) {
            for (size_t c = 0; c < b; c++)
                out[k * b + c] = NAN;
            continue;
        }
        bad |= deq_run_any(out + k * b, e + k * b, sk, gs, b);
    }
    return bad;
}

/* Each row kernel at the three levels (EMU_ISA_VARIANTS) and the entry
 * point that runs the process's level. */
#define EMU_SCALED_LEVELS(name, ret, params, args)                             \
    EMU_ISA_VARIANTS(ret, name, params, args)                                  \
    static ret name params { return name##_for(emu_isa_active()) args; }

EMU_SCALED_LEVELS(amax_row, uint32_t,
                  (uint32_t *restrict acc, const float *restrict x, size_t n),
                  (acc, x, n))
EMU_SCALED_LEVELS(deq_row, uint32_t,
                  (float *restrict out, const float *restrict e,
                   const float *restrict s, double gs, size_t n),
                  (out, e, s, gs, n))
EMU_SCALED_LEVELS(deq_row_f32, uint32_t,
                  (float *restrict out, const float *restrict e,
                   const float *restrict s, size_t n),
                  (out, e, s, n))
EMU_SCALED_LEVELS(deq_blocks_f32, uint32_t,
                  (float *restrict out, const float *restrict e,
                   const float *restrict s, size_t b, size_t nblk),
                  (out, e, s, b, nblk))
EMU_SCALED_LEVELS(amax_blocks, uint32_t,
                  (uint32_t *restrict acc, const float *restrict x, size_t b,
                   size_t nblk),
                  (acc, x, b, nblk))
EMU_SCALED_LEVELS(deq_blocks, uint32_t,
                  (float *restrict out, const float *restrict e,
                   const float *restrict s, double gs, size_t b, size_t nblk),
                  (out, e, s, gs, b, nblk))

/* Every scale of q a positive normal power of two (biased exponent 1 to
 * 254, fraction zero): the condition of the binary32 rows above. */
static bool scales_pow2(const emu_scaled_tensor *q)
{
    uint32_t bad = 0;
    for (size_t b = 0; b < q->nblocks; b++) {
        uint32_t u;
        memcpy(&u, &q->scale[b], sizeof u);
        bad |= (u & 0x807fffffu) | (uint32_t)(u - 0x00800000u >= 0x7f000000u);
    }
    return !bad;
}

/* The amax of a block from its bit-pattern maximum (as amax_run). */
static double amax_of_bits(uint32_t m)
{
    float f;
    memcpy(&f, &m, sizeof f);
    return m > 0x7f800000u ? NAN : (double)f;
}

static double scale_of_amax(const qrun *R, size_t b, double a,
                            emu_quant_counts *counts, emu_block_stats *blocks);

/* Every block's scale as set_scale sets it, for the 1-d layout in memory
 * order (the blocks' amaxes are the same maxima, taken in another
 * order).  Returns -1 (nothing done) out of memory. */
static int scales_1d(const qrun *R)
{
    const geom *g = &R->geo;
    const size_t b0 = R->q->sf.block[0];
    const size_t row = g->nb * g->inner; /* the blocks of one o */
    uint32_t *acc = malloc((row ? row : 1) * sizeof *acc);
    if (!acc)
        return -1;
    if (g->inner == 1) {
        const size_t whole = g->len / b0, tail = g->len - whole * b0;
        for (size_t o = 0; o < g->outer; o++) {
            const float *xo = R->x + o * g->len;
            amax_blocks(acc, xo, b0, whole);
            for (size_t k = 0; k < whole; k++)
                scale_of_amax(R, o * row + k, amax_of_bits(acc[k]), NULL,
                              NULL);
            if (tail)
                scale_of_amax(R, o * row + whole,
                              amax_run(xo + whole * b0, tail), NULL, NULL);
        }
        free(acc);
        return 0;
    }
    for (size_t o = 0; o < g->outer; o++) {
        memset(acc, 0, row * sizeof *acc);
        for (size_t l = 0; l < g->len; l++)
            amax_row(acc + (l / b0) * g->inner,
                     R->x + (o * g->len + l) * g->inner, g->inner);
        for (size_t k = 0; k < row; k++)
            scale_of_amax(R, o * row + k, amax_of_bits(acc[k]), NULL, NULL);
    }
    free(acc);
    return 0;
}

/* Integer elements have no -0 (two's complement): x + 0 turns -0 into +0
 * and leaves every other value alone.  Run on each chunk while it is in
 * cache. */
static void no_negative_zero(const qrun *R, size_t e0, size_t n)
{
    if (!R->q->sf.int_elem)
        return;
    float *e = R->q->elem + e0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) /* fixed-length runs vectorize */
        for (int j = 0; j < 16; j++)
            e[i + (size_t)j] += 0.0f;
    for (; i < n; i++)
        e[i] += 0.0f;
}

/* Blocks are quantized a chunk at a time: a run of consecutive blocks
 * covering about CHUNK contiguous elements when blocks are contiguous runs
 * (1-d blocks along the last axis, the usual layout), so that the data
 * stays in cache between the passes; otherwise the whole tensor. */
enum { CHUNK = 4096 };

/* The quotient x / d of one element, as hi + lo for the choke point. */
static void quotient(double x, double d, bool pow2, double *hi, double *lo)
{
    *hi = x / d; /* exact if d is a power of two */
    *lo = 0.0;
    if (!pow2 && isfinite(*hi) && *hi != 0.0)
        *lo = fma(-*hi, d, x) / d;
}

/* Element i by the definition: the exact quotient x_i / d rounded once by
 * the choke point, with word i for stochastic modes.  The fast paths call
 * it for the few elements they cannot round themselves. */
static float elem_by_definition(const qrun *R, size_t i, double d)
{
    double hi, lo;
    quotient(R->x[i], d, emu_is_pow2(d), &hi, &lo);
    const emu_quant_opts *o = R->o;
    const uint64_t w = emu_rnd_is_stochastic(o->mode)
                           ? emu_random64(o->seed, o->stream, i) : 0;
    return (float)emu_round2_word_unguarded(&R->q->sf.elem, hi, lo, &R->rnd, w,
                                            NULL);
}

/* Whether t = x * 2^-k in binary32 may differ from the exact quotient:
 * below 2^-126 (binary32 subnormals lose bits) or beyond binary32's range.
 * Non-finite x (the data of a NaN block) is flagged too. */
static inline bool pow2_quotient_suspect(float t, float x)
{
    t = fabsf(t);
    return (t < FLT_MIN && x != 0.0f) || !(t <= FLT_MAX) || !isfinite(x);
}

/* ---- divisors that are not powers of two ----------------------------------
 * Nearest-even (div_run, then the lean kernel).  Let Q = x / d (exact, x a
 * binary32, d = s g a binary64 with d and 1/d normal) and
 * t = RN32(RN64(x * RN64(1/d))): then y = RN64(x * RN64(1/d)) = Q (1 + δ)
 * with |δ| < 2^-51.  Every rounding boundary B of the element format (a
 * grid point or a midpoint: at most p + 1 significant bits, at or above
 * 2^(qmin-1) >= 2^-149) is a binary32.  Claim: if t is no boundary, then t
 * and Q lie on the same side of every boundary, so the kernel rounds t
 * like the exact quotient.  For Q < B < t: RN32 is monotonic and fixes B,
 * so y > B, and t >= B+ (the next binary32) means y >= (B + B+) / 2, hence
 * y - Q > (B+ - B) / 2 >= 2^-25 B (2^-150 for a binary32 subnormal B),
 * while y - Q = Q δ < 2^-51 B.  For t < B < Q: y <= (B- + B) / 2, so
 * Q - y >= (B - B-) / 2 >= 2^-25 B (or 2^-150), while
 * Q - y = Q |δ| < 2^-51 y / (1 - 2^-51) < 2^-50 B.  Both impossible.  So
 * only a t shaped like a boundary (its fraction bits below p + 1 clear),
 * a t below 2^-126 (binary32 subnormals, zero), and a non-finite t (inf,
 * NaN: an element of a NaN block, or x non-finite) are redone by the
 * choke point; x = ±0 gives t = ±0, which the kernel keeps, as the choke
 * point does.  Probability about 2^(p-23) per element: a cheap redo.
 *
 * Stochastic (sr_quotient): the choke point's decision for the pair it is
 * given, hi = fl(x / d) and lo = fl(fma(-hi, d, x) / d), written out for
 * the common case (finite x, normal hi) without its general entry, so
 * that it inlines into the chunk loop: the same operations in the same
 * order (round.c's decide(), EMU_RS and EMU_RS_BITS), hence the same
 * result for the same word.  The choke point first normalises the pair
 * (hi, lo) by TwoSum; |lo| <= ulp(hi) / 2 with hi = RN(hi + lo), so that
 * is the identity, and sr_quotient checks hi + lo == hi rather than
 * assume it. */

/* The chunk loops inline their helpers, so that the helpers are compiled
 * into each CPU clone of the loop. */
#if defined(__GNUC__)
#define EMU_INLINE static inline __attribute__((always_inline))
#else
#define EMU_INLINE static inline
#endif

/* t = RN32(x * inv) through binary64, for n contiguous values, in
 * fixed-length runs that vectorize. */
static inline void div_run(float *restrict t, const float *restrict x,
                           double inv, size_t n)
{
    size_t k = 0;
    for (; k + 16 <= n; k += 16) {
        float v[16];
        memcpy(v, x + k, sizeof v);
        for (int j = 0; j < 16; j++)
            v[j] = (float)((double)v[j] * inv);
        memcpy(t + k, v, sizeof v);
    }
    for (; k < n; k++)
        t[k] = (float)((double)x[k] * inv);
}

/* Whether div_run's t for source x must be redone (see above). */
static inline uint32_t div_suspect(uint32_t t, uint32_t x, uint32_t fmask)
{
    t &= 0x7fffffffu;
    return (uint32_t)((x & 0x7fffffffu) != 0) &
           ((uint32_t)((t & fmask) == 0) | (uint32_t)(t < 0x00800000u) |
            (uint32_t)(t >= 0x7f800000u));
}

/* Scans elements [e0, e0 + n) for those the fast pass may have rounded
 * wrongly (div: div_suspect, else pow2_quotient_suspect), a branch-free
 * test per tile of 64, and redoes them: 0 in a NaN block, else the choke
 * point.  blocked: 1-d contiguous blocks along the last axis; otherwise
 * one divisor, R->g. */
EMU_INLINE void fix_suspects(const qrun *R, size_t e0, size_t n,
                                const float *tmp, bool div, bool blocked)
{
    enum { KTILE = 64 };
    const emu_scaled_tensor *q = R->q;
    const float *x = R->x + e0;
    const uint32_t fm = R->div_fmask;
    for (size_t k0 = 0; k0 < n; k0 += KTILE) {
        const size_t len2 = n - k0 < KTILE ? n - k0 : KTILE;
        uint32_t any = 1;
        if (len2 == KTILE) {
            any = 0;
            for (int j = 0; j < KTILE; j++) {
                const uint32_t t = f2u(tmp[k0 + (size_t)j]),
                               xa = f2u(x[k0 + (size_t)j]) & 0x7fffffffu;
                if (div) {
                    any |= div_suspect(t, xa, fm);
                } else {
                    const uint32_t ta = t & 0x7fffffffu;
                    any |= (uint32_t)(ta < 0x00800000u && xa != 0) |
                           (uint32_t)(ta >= 0x7f800000u) |
                           (uint32_t)(xa >= 0x7f800000u);
                }
            }
        }
        if (!any)
            continue;
        for (size_t k = k0; k < k0 + len2; k++) {
            if (div ? !div_suspect(f2u(tmp[k]), f2u(x[k]), fm)
                    : !pow2_quotient_suspect(tmp[k], x[k]))
                continue;
            const size_t i = e0 + k;
            size_t b = 0;
            if (blocked) {
                const size_t len = R->geo.len, r = i / len;
                b = r * R->geo.nb + (i - r * len) / q->sf.block[0];
            }
            const double d = (double)q->scale[b] * R->g;
            q->elem[i] = isnan(d) ? 0.0f : elem_by_definition(R, i, d);
        }
    }
}

/* The element format's parameters for sr_quotient; false if the format
 * is one it does not cover (unsigned, no zero). */
static bool sr_plan_make(sr_plan *P, const emu_format *f, const emu_rounding *r)
{
    if (!emu_rnd_is_stochastic(r->mode) || !f->is_signed || !f->has_zero ||
        !f->fits_carrier)
        return false;
    P->p = f->p;
    P->emin = f->emin;
    P->qsub = f->subnormals ? f->emin - f->p + 1 : f->emin;
    P->max = f->max;
    unsigned bits = r->mode == EMU_RS ? 64 : r->sr_bits;
    if (bits == 0 || bits > 64)
        bits = 64;
    P->shift = 64 - bits;
    P->lim = UINT64_MAX >> P->shift;
    P->neg_zero = f->specials != EMU_SPECIALS_FNUZ;
    return true;
}

/* x / d (x a binary32, d > 0 finite) rounded stochastically with `word`,
 * saturating, as the choke point rounds hi + lo (see above).  Branch-free
 * (the signs and ties it looks at are random: branches would mispredict),
 * so that the chunk loop runs straight and vectorizes where the CPU has
 * the conversions.  Returns 0 where it does not decide (*out is then
 * meaningless): x not finite, hi outside [2^-1000, 2^1000), a pair that
 * is not normalised. */
/* c ? a : b on the bit patterns: both operands are computed, so
 * compilers keep the code straight (a conditional FP operation could trap,
 * which keeps them from if-converting it). */
static inline double sel(bool c, double a, double b)
{
    const uint64_t m = (uint64_t)0 - (uint64_t)c;
    const uint64_t u = (d2u(a) & m) | (d2u(b) & ~m);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

EMU_INLINE uint32_t sr_quotient(const sr_plan *P, float xf, double d,
                                uint64_t word, float *out)
{
    /* Every operation unconditional, then selects (&, not &&; sel): what
     * compilers if-convert and vectorize. */
    const bool zero = xf == 0.0f;
    const double x = sel(zero, 1.0, (double)xf);
    const double hi = x / d;
    const uint64_t uh = d2u(hi) & 0x7fffffffffffffffu;
    const int eh = (int)(uh >> 52) - 1023; /* NaN, inf: 1024 */
    const double lo = fma(-hi, d, x) / d;
    const bool ok = (eh >= -1000) & (eh < 1000) & (hi + lo == hi);
    const bool neg = hi < 0.0;
    const double ah = fabs(hi), al = sel(neg, -lo, lo);
    /* the exact value below 2^eh: its binade is eh - 1 */
    const int e = eh - (int)((al < 0.0) &
                             ((uh & (((uint64_t)1 << 52) - 1)) == 0));
    const int q = (e < P->emin ? P->qsub : e - P->p + 1) & -(int)ok;
    const double m = ah * pow2i(-q); /* exact */
    /* floor by truncation (floor() does not vectorize under strict ISO C
     * here): 0 <= m < 2^63 where ok; 0 stands in otherwise */
    const double M0 = (double)(int64_t)sel(ok, m, 0.0), fr = m - M0;
    /* hi on the grid, Q below: decide()'s case (kept, although a binary32
     * x over a binary64 d does not seem to reach it) */
    const bool below = (fr == 0.0) & (al < 0.0);
    const double M = sel(below, M0 - 1.0, M0);
    /* Fq = floor(F 2^64) as decide() forms it: floor(fr 2^64), corrected
     * by floor(lo 2^(64-q)) when fr 2^64 is an integer (F = 1 + lo when
     * below: 2^64 wraps to 0).  An exact value gives Fq = 0, up = 0. */
    const double xl = al * pow2i(64 - q);
    const double xc = sel(ok, xl, 0.0); /* |xl| < 2^(11+p) where ok */
    const double tr = (double)(int64_t)xc;
    const double fl = sel((al < 0.0) & (xl == 0.0), -1.0,
                          sel(tr > xc, tr - 1.0, tr)); /* floor(xl) */
    const double fx = sel(ok, fl, 0.0);
    const double t = sel(below | !ok, 0.0, fr * 0x1p64);
    const uint64_t T = (uint64_t)t;
    const int64_t fxi = (int64_t)fx;
    const uint64_t corr = (uint64_t)fxi &
                          ((uint64_t)0 - (uint64_t)((double)T == t));
    const uint64_t Fq = T + corr;
    /* up: the carry out of the top `bits` bits of Fq plus those of the
     * word, a + w >= 2^bits, i.e. a > (2^bits - 1) - w (no shift by 64) */
    const uint64_t a = Fq >> P->shift, w = word >> P->shift;
    const double up = sel(a > P->lim - w, 1.0, 0.0);
    double v = (M + up) * pow2i(q); /* exact */
    v = sel(v > P->max, P->max, v); /* saturating */
    double r = sel(neg, -v, v);
    r = sel(P->neg_zero, r, r + 0.0); /* fnuz: -0 -> +0 */
    r = sel(zero, sel(P->neg_zero, (double)xf, 0.0), r);
    *out = (float)r;
    return (uint32_t)(ok | zero);
}

/* Stochastic rounding of n quotients x[k] / d (d finite) into out with
 * word k each: the branch-free pass, then the choke point for the few it
 * did not decide (on the same word: elem_by_definition's). */
EMU_INLINE void sr_run(const sr_plan *P, const emu_format *ef,
                       const emu_rounding *rnd, float *out, const float *x,
                       size_t n, double d, const uint64_t *words)
{
    const sr_plan Pl = *P;
    uint32_t all = 1;
    size_t k = 0;
    for (; k + 16 <= n; k += 16) { /* fixed-length runs vectorize */
        float ov[16];
        for (int j = 0; j < 16; j++)
            all &= sr_quotient(&Pl, x[k + (size_t)j], d, words[k + (size_t)j],
                               &ov[j]);
        memcpy(out + k, ov, sizeof ov);
    }
    for (; k < n; k++)
        all &= sr_quotient(&Pl, x[k], d, words[k], &out[k]);
    if (all)
        return;
    const bool pow2 = emu_is_pow2(d);
    for (k = 0; k < n; k++) {
        float tmp;
        if (sr_quotient(&Pl, x[k], d, words[k], &tmp))
            continue;
        double hi, lo;
        quotient(x[k], d, pow2, &hi, &lo);
        out[k] = (float)emu_round2_word_unguarded(ef, hi, lo, rnd, words[k],
                                                  NULL);
    }
}

/* An AMAX-rule scale rounded to nearest-even: t = RN32(a (1/(max_elem g)))
 * decides like the exact quotient unless t is shaped like a boundary of
 * the scale format (the argument above); t outside the scale format's
 * normal range (zero, subnormal, clamped) is left to block_scale too.
 * Then t's bits round to the nearest-even normal value, which is at most
 * max (t <= max, and max is a grid point). */
/* scale_rne_fast for a run of blocks, branch-free: the scale, or 0 where
 * block_scale must decide (a NaN amax gives a NaN t, above max). */
EMU_INLINE uint32_t scale_rne_bits(const qrun *R, double a, float *s)
{
    const uint32_t u = f2u((float)(a * R->amax_inv));
    const emu_rne_sat_plan *k = &R->scale_kernel;
    const uint32_t ok = (uint32_t)(u >= k->min_normal) &
                        (uint32_t)(u <= k->max) &
                        (uint32_t)((u & R->scale_fmask) != 0);
    const uint32_t sh = k->shift;
    const uint32_t r = (u + k->half_minus_1 + ((u >> sh) & 1u)) &
                       ~((1u << sh) - 1u);
    *s = u2f(r & (0u - ok));
    return ok;
}

EMU_INLINE bool scale_rne_fast(const qrun *R, double a, double *s)
{
    const uint32_t u = f2u((float)(a * R->amax_inv));
    const emu_rne_sat_plan *k = &R->scale_kernel;
    if (u < k->min_normal || u > k->max || (u & R->scale_fmask) == 0)
        return false;
    const uint32_t sh = k->shift;
    *s = u2f((u + k->half_minus_1 + ((u >> sh) & 1u)) &
                ~((1u << sh) - 1u));
    return true;
}

/* Rounds the elements of blocks [b0, b1), which cover flat indices
 * [e0, e0 + len) (every one if !contig), into q->elem.  See the top of the
 * file: power-of-two divisors go through the binary32 array rounding
 * (exact quotients, but below 2^-126, where the element is redone by the
 * choke point); other divisors through the binary64 array rounding of
 * hi = fl(x / d), redoing the elements whose hi could be a rounding
 * boundary while the remainder is not zero (only there can hi alone round
 * differently from the exact quotient).  Stochastic modes with such
 * divisors take the choke point for every inexact quotient. */
static void round_chunk(const qrun *R, size_t b0, size_t b1, size_t e0,
                        size_t len, float *tmp, double *tmp64)
{
    emu_scaled_tensor *q = R->q;
    const emu_format *ef = &q->sf.elem;
    const float *x = R->x;
    const emu_quant_opts *o = R->o;
    const bool sr = emu_rnd_is_stochastic(o->mode);
    bool pow2 = true;
    for (size_t b = b0; b < b1 && pow2; b++) {
        const double d = (double)q->scale[b] * R->g;
        /* 1/d must be a binary32 too: x * (1/d) is then the quotient. */
        pow2 = isnan(d) ||
               (emu_is_pow2(d) && (double)(float)(1.0 / d) == 1.0 / d);
    }
    emu_array_rounding ar = { .rnd = R->rnd, .seed = o->seed,
                              .stream = o->stream, .first_index = e0 };
    if (pow2) {
        for (size_t b = b0; b < b1; b++) {
            block_ref br = block_at(q, &R->geo, b);
            const double d = (double)q->scale[b] * R->g;
            const float inv = isnan(d) ? 0.0f : (float)(1.0 / d); /* 2^-k */
            FOR_BLOCK(br, i, { tmp[i - e0] = x[i] * inv; })
        }
        emu_round_array_f32_unguarded(ef, q->elem + e0, tmp, len, &ar, NULL);
        for (size_t b = b0; b < b1; b++) {
            block_ref br = block_at(q, &R->geo, b);
            const double d = (double)q->scale[b] * R->g;
            if (isnan(d)) {
                FOR_BLOCK(br, i, { q->elem[i] = 0.0f; })
                continue;
            }
            FOR_BLOCK(br, i, {
                if (pow2_quotient_suspect(tmp[i - e0], x[i]))
                    q->elem[i] = elem_by_definition(R, i, d);
            })
        }
        return;
    }
    if (R->kernel_ok && !sr && ef->qmin - 1 >= -149) {
        /* Nearest-even through the binary32 kernel: f = RN32(x / d).  Every
         * rounding boundary of the element format (grid point or midpoint:
         * at most p + 1 significant bits, at or above 2^(qmin-1)) is a
         * binary32, and RN32 is monotonic, so f rounds like the exact
         * quotient unless f itself has the shape of a boundary (its
         * fraction bits below p + 1 clear) while differing from the
         * quotient: those few are redone by the choke point. */
        const uint32_t fmask = (1u << (23 - ef->p)) - 1;
        for (size_t b = b0; b < b1; b++) {
            block_ref br = block_at(q, &R->geo, b);
            const double d = (double)q->scale[b] * R->g;
            FOR_BLOCK(br, i, { tmp[i - e0] = isnan(d) ? 0.0f : (float)(x[i] / d); })
        }
        emu_rne_sat_f32(&R->kernel, q->elem + e0, tmp, len);
        for (size_t b = b0; b < b1; b++) {
            block_ref br = block_at(q, &R->geo, b);
            const double d = (double)q->scale[b] * R->g;
            if (isnan(d)) {
                FOR_BLOCK(br, i, { q->elem[i] = 0.0f; })
                continue;
            }
            FOR_BLOCK(br, i, {
                uint32_t u;
                memcpy(&u, &tmp[i - e0], sizeof u);
                /* boundary-shaped: redo (exact ones come out the same) */
                if ((u & fmask) == 0 && x[i] != 0.0f)
                    q->elem[i] = elem_by_definition(R, i, d);
            })
        }
        return;
    }
    /* Significand bits below the element precision plus one: a boundary
     * (grid point or midpoint) has none of them set. */
    const uint64_t mask = ((uint64_t)1 << (52 - ef->p)) - 1;
    /* Stochastic: every element's word, in bulk (the words of a chunk are
     * consecutive: element i takes word i). */
    uint64_t *words = (uint64_t *)tmp64 + len;
    if (sr)
        emu_random_fill(o->seed, o->stream, e0, words, len);
    for (size_t b = b0; b < b1; b++) {
        block_ref br = block_at(q, &R->geo, b);
        const double d = (double)q->scale[b] * R->g;
        if (isnan(d)) {
            FOR_BLOCK(br, i, { tmp64[i - e0] = 0.0; })
        } else if (sr) {
            FOR_BLOCK(br, i, {
                double hi, lo;
                quotient(x[i], d, false, &hi, &lo);
                tmp64[i - e0] = emu_round2_word_unguarded(ef, hi, lo, &R->rnd,
                                                          words[i - e0], NULL);
            })
        } else {
            FOR_BLOCK(br, i, { tmp64[i - e0] = x[i] / d; })
        }
    }
    if (!sr)
        emu_round_array_f64_unguarded(ef, tmp64, tmp64, len, &ar, NULL);
    for (size_t b = b0; b < b1; b++) {
        block_ref br = block_at(q, &R->geo, b);
        const double d = (double)q->scale[b] * R->g;
        FOR_BLOCK(br, i, {
            double e = tmp64[i - e0];
            if (!sr && !isnan(d)) {
                double hi = x[i] / d;
                uint64_t u;
                memcpy(&u, &hi, sizeof u);
                if ((u & mask) == 0 && isfinite(hi) && hi != 0.0 &&
                    fma(-hi, d, x[i]) != 0.0)
                    e = elem_by_definition(R, i, d);
            }
            q->elem[i] = (float)e;
        })
    }
}

/* Statistics of blocks [b0, b1) once their elements are in q->elem. */
static void chunk_stats(const qrun *R, size_t b0, size_t b1,
                        emu_quant_counts *counts, emu_block_stats *blocks)
{
    const emu_scaled_tensor *q = R->q;
    const emu_format *ef = &q->sf.elem;
    double relmax = counts ? counts->err_max : 0.0;
    for (size_t b = b0; b < b1; b++) {
        block_ref br = block_at(q, &R->geo, b);
        const double d = (double)q->scale[b] * R->g;
        emu_block_stats bs;
        memset(&bs, 0, sizeof bs);
        if (!isnan(d)) {
            const bool pow2 = emu_is_pow2(d);
            FOR_BLOCK(br, i, {
                const double xi = R->x[i];
                if (isfinite(xi)) {
                    double hi, lo;
                    quotient(xi, d, pow2, &hi, &lo);
                    const double e = q->elem[i];
                    note_element(&bs, xi, e * d, e, ef->max, hi, lo, &relmax);
                }
            })
        }
        if (blocks) {
            bs.amax = blocks[b].amax;
            blocks[b] = bs;
        }
        if (counts) {
            counts->n += br.nr * br.nc;
            counts->clipped += bs.clipped;
            counts->flushed += bs.flushed;
            counts->inexact += bs.inexact;
            counts->err_sq += bs.err_sq;
            counts->ref_sq += bs.ref_sq;
        }
    }
    if (counts)
        counts->err_max = relmax;
}

/* Chooses block b's scale from its amax (NaN for a block with inf or NaN;
 * the caller has refused those where the scale format has no NaN). */
/* Block b's scale from its amax a (NaN for a block with inf or NaN; the
 * caller has refused those where the scale format has no NaN). */
static double scale_of_amax(const qrun *R, size_t b, double a,
                            emu_quant_counts *counts, emu_block_stats *blocks)
{
    const emu_scaled_format *sf = &R->q->sf;
    if (blocks)
        blocks[b].amax = (float)a;
    double s = 1.0;
    bool clamped = false;
    /* A per-tensor format's inf and NaN go through the element rounding
     * (inf stays or saturates; NaN where the element format has it). */
    if (sf->block_scaled) {
        if (!isfinite(a))
            s = NAN;
        else if (!R->scale_fast || !scale_rne_fast(R, a, &s))
            s = block_scale(sf, a, R->g, R->scale_lo, R->scale_hi, &clamped);
    }
    R->q->scale[b] = (float)s;
    if (counts) {
        counts->blocks++;
        counts->scale_clamped += clamped;
        counts->nonfinite_blocks += isnan(s);
        if (!isnan(s) && sf->block_scaled)
            counts->scale_hist[emu_hist_bin_unguarded(s)]++;
    }
    return s;
}

static double set_scale(const qrun *R, size_t b, block_ref br,
                        emu_quant_counts *counts, emu_block_stats *blocks)
{
    double a;
    block_amax(R, &br, &a);
    return scale_of_amax(R, b, a, counts, blocks);
}

/* The usual layout, fused: rows [r0, r1) of a tensor blocked along its
 * last axis, 1-d blocks, contiguous.  Scales, the scaled values and the
 * rounding of each chunk of rows while it is in cache.  Its loops are
 * compiled also for AVX2 and AVX-512 (as round_array.c's kernel is). */
EMU_TARGET_CLONES
static void quantize_rows(const qrun *R, size_t r0, size_t r1, float *tmp,
                          double *tmp64, emu_quant_counts *counts,
                          emu_block_stats *blocks)
{
    emu_scaled_tensor *q = R->q;
    const emu_format *ef = &q->sf.elem;
    const size_t len = R->geo.len, nb = R->geo.nb, bs = q->sf.block[0];
    const size_t e0 = r0 * len, n = (r1 - r0) * len;
    const float *x = R->x;
    const bool fast_div = R->div_ok || R->sr_ok;
    /* 1/d of each block of the chunk (0 for a NaN block), for div_run */
    double *invs = tmp64;
    bool pow2 = true;
    if (R->scale_fast && !counts && !blocks && fast_div) {
        /* NVFP4 without statistics: the block amaxes, then their scales by
         * scale_rne_fast sixteen to a run (vectorized), then block_scale
         * (via scale_of_amax) for the few it leaves: boundary-shaped,
         * clamped, zero, non-finite.  The divisors are not powers of two. */
        const size_t nbc = (r1 - r0) * nb;
        double *am = tmp64 + n; /* nbc <= n; the SR words come later */
        float *sv = tmp;        /* the scales; tmp is free until div_run */
        for (size_t r = r0; r < r1; r++)
            for (size_t j = 0; j < nb; j++) {
                const size_t start = r * len + j * bs;
                const size_t cnt = len - j * bs < bs ? len - j * bs : bs;
                am[(r - r0) * nb + j] = amax_run(x + start, cnt);
            }
        uint32_t all = 1;
        size_t k = 0;
        for (; k + 16 <= nbc; k += 16)
            for (int j = 0; j < 16; j++)
                all &= scale_rne_bits(R, am[k + (size_t)j], &sv[k + (size_t)j]);
        for (; k < nbc; k++)
            all &= scale_rne_bits(R, am[k], &sv[k]);
        float *sc = q->scale + r0 * nb;
        memcpy(sc, sv, nbc * sizeof *sc);
        if (!all)
            for (k = 0; k < nbc; k++)
                if (sv[k] == 0.0f)
                    scale_of_amax(R, r0 * nb + k, am[k], counts, blocks);
        pow2 = false;
    } else
    for (size_t r = r0; r < r1; r++)
        for (size_t j = 0; j < nb; j++) {
            const size_t b = r * nb + j, start = r * len + j * bs;
            const size_t cnt = len - j * bs < bs ? len - j * bs : bs;
            /* amax inline, so that it is compiled into the AVX clones */
            const float *xs = x + start;
            const double m = amax_run(xs, cnt);
            double s;
            /* NVFP4's scales inline when no statistic is asked for */
            if (R->scale_fast && !counts && !blocks && m <= DBL_MAX &&
                scale_rne_fast(R, m, &s))
                q->scale[b] = (float)s;
            else
                s = scale_of_amax(R, b, m, counts, blocks);
            const double d = s * R->g;
            if (pow2) {
                const float inv = (float)(1.0 / d);
                /* d > 0: a power of two has no fraction bits */
                if (!R->pow2_scales && !isnan(d) &&
                    !(frac_of(d) == 0 && (double)inv == 1.0 / d))
                    pow2 = false;
                else
                    scale_run(tmp + (start - e0), xs, isnan(d) ? 0.0f : inv,
                              cnt);
            }
        }
    if (!pow2 && fast_div) {
        /* 1/d of every block of the chunk, in runs that vectorize (a
         * division per block in the loop above would stall it) */
        const size_t nbc = (r1 - r0) * nb;
        const float *sc = q->scale + r0 * nb;
        const double g = R->g;
        size_t k = 0;
        for (; k + 16 <= nbc; k += 16)
            for (int j = 0; j < 16; j++) {
                const double d = (double)sc[k + (size_t)j] * g, v = 1.0 / d;
                invs[k + (size_t)j] = sel(d == d, v, 0.0);
            }
        for (; k < nbc; k++) {
            const double d = (double)sc[k] * g;
            invs[k] = d == d ? 1.0 / d : 0.0;
        }
    }
    if (!pow2 && R->div_ok) {
        for (size_t r = r0; r < r1; r++)
            for (size_t j = 0; j < nb; j++) {
                const size_t start = r * len + j * bs;
                const size_t cnt = len - j * bs < bs ? len - j * bs : bs;
                div_run(tmp + (start - e0), x + start, invs[r * nb + j - r0 * nb],
                        cnt);
            }
        emu_rne_sat_f32(&R->kernel, q->elem + e0, tmp, n);
        fix_suspects(R, e0, n, tmp, true, true);
        return;
    }
    if (!pow2 && R->sr_ok) {
        uint64_t *words = (uint64_t *)tmp64 + n;
        emu_random_fill(R->o->seed, R->o->stream, e0, words, n);
        for (size_t r = r0; r < r1; r++)
            for (size_t j = 0; j < nb; j++) {
                const size_t b = r * nb + j, start = r * len + j * bs;
                const size_t cnt = len - j * bs < bs ? len - j * bs : bs;
                const double d = (double)q->scale[b] * R->g;
                if (isnan(d))
                    memset(q->elem + start, 0, cnt * sizeof *q->elem);
                else
                    sr_run(&R->sr, ef, &R->rnd, q->elem + start, x + start,
                           cnt, d, words + (start - e0));
            }
        return;
    }
    if (!pow2) {
        round_chunk(R, r0 * nb, r1 * nb, e0, n, tmp, tmp64);
        return;
    }
    const emu_quant_opts *o = R->o;
    if (R->kernel_ok) {
        emu_rne_sat_f32(&R->kernel, q->elem + e0, tmp, n);
    } else {
        emu_array_rounding ar = { .rnd = R->rnd, .seed = o->seed,
                                  .stream = o->stream, .first_index = e0 };
        emu_round_array_f32_unguarded(ef, q->elem + e0, tmp, n, &ar, NULL);
    }
    /* Elements of NaN blocks are 0 (their data was set to 0 above, x is
     * NaN or inf there); quotients that binary32 could not hold exactly
     * (below 2^-126, or beyond its range) are redone from the exact one.
     * Both are rare: a branch-free scan of each tile finds them. */
    fix_suspects(R, e0, n, tmp, false, true);
}

/* A per-tensor format (one divisor, g), elements [e0, e0 + n) while they
 * are in cache: nearest-even or stochastic by the fast paths above. */
EMU_TARGET_CLONES
static void quantize_flat(const qrun *R, size_t e0, size_t n, float *tmp,
                          double *tmp64)
{
    const double d = R->g;
    if (R->div_ok) {
        div_run(tmp, R->x + e0, 1.0 / d, n);
        emu_rne_sat_f32(&R->kernel, R->q->elem + e0, tmp, n);
        fix_suspects(R, e0, n, tmp, true, false);
        return;
    }
    uint64_t *words = (uint64_t *)tmp64;
    emu_random_fill(R->o->seed, R->o->stream, e0, words, n);
    sr_run(&R->sr, &R->q->sf.elem, &R->rnd, R->q->elem + e0, R->x + e0, n, d,
           words);
}

/* The stochastic fast path on given words (internal.h): for the tests,
 * which choose words next to each decision's threshold.  Compiled for the
 * same CPUs as the chunk loops. */
EMU_TARGET_CLONES
static void sr_words(const sr_plan *P, const emu_format *ef,
                     const emu_rounding *rnd, float *out, const float *x,
                     size_t n, double d, const uint64_t *words)
{
    sr_run(P, ef, rnd, out, x, n, d, words);
}

bool emu_scaled_sr_words(const emu_format *f, const emu_rounding *r, double d,
                         float *out, const float *x, const uint64_t *words,
                         size_t n)
{
    EMU_HOSTFP_GUARD;
    emu_rounding rs = *r;
    rs.saturate = true;
    sr_plan P;
    if (!sr_plan_make(&P, f, &rs) || !(d > 0.0) || !isfinite(d))
        return false;
    sr_words(&P, f, &rs, out, x, n, d, words);
    return true;
}

/* emu_scaled_quantize, or (elements false; counts and blocks NULL) its
 * checks and scales alone: emu_scaled_quantize_scales. */
static int quantize(emu_scaled_tensor *q, const float *x,
                    const emu_quant_opts *opts, emu_quant_counts *counts,
                    emu_block_stats *blocks, bool elements, emu_error *err)
{
    static const emu_quant_opts none;
    const emu_quant_opts *o = opts ? opts : &none;
    const emu_scaled_format *sf = &q->sf;
    if (!q->elem || !q->scale)
        return emu_fail(err, EMU_EINVAL, "quantize", "", "scaled tensor not allocated");
    if ((unsigned)o->mode >= EMU_RND_COUNT)
        return emu_fail(err, EMU_EINVAL, "quantize", "mode", "unknown rounding mode");
    if (o->mode == EMU_RS_BITS && (o->sr_bits < 1 || o->sr_bits > 64))
        return emu_fail(err, EMU_EINVAL, "quantize", "sr_bits", "%u random bits (1..64)",
                        o->sr_bits);
    qrun R = { .q = q, .x = x, .o = o };
    R.rnd.mode = o->mode;
    R.rnd.sr_bits = o->sr_bits;
    R.rnd.saturate = true;
    if (tensor_scale_of(&R, err))
        return -1;
    geometry(q, &R.geo);
    if (sf->block_scaled)
        pow2_range(&sf->scale, &R.scale_lo, &R.scale_hi);
    R.kernel_ok = o->mode == EMU_RNE &&
                  emu_rne_sat_plan_make(&R.kernel, &sf->elem);
    /* Power-of-two rules give 2^k with k in the scale format's range; with
     * g = 1 and that range inside binary32's normal one, 1 / s is a
     * binary32 too. */
    R.pow2_scales = sf->block_scaled && R.g == 1.0 &&
                    sf->rule != EMU_SCALE_RULE_AMAX && R.scale_lo >= -126 &&
                    R.scale_hi <= 126;
    /* Other divisors (see div_run): the boundaries must be binary32s. */
    R.div_ok = R.kernel_ok && sf->elem.qmin - 1 >= -149;
    R.div_fmask = (1u << (23 - sf->elem.p)) - 1;
    R.sr_ok = sr_plan_make(&R.sr, &sf->elem, &R.rnd);
    if (sf->block_scaled && sf->rule == EMU_SCALE_RULE_AMAX &&
        sf->scale_mode == EMU_RNE && sf->scale.qmin - 1 >= -149 &&
        emu_rne_sat_plan_make(&R.scale_kernel, &sf->scale)) {
        R.scale_fast = true;
        R.scale_fmask = (1u << (23 - sf->scale.p)) - 1;
        R.amax_inv = 1.0 / (sf->elem.max * R.g); /* max_elem g: exact */
    }

    /* A per-tensor format rounds NaN into the element format: refuse it
     * if that has no NaN (inf saturates). */
    if (!sf->block_scaled && !sf->elem.has_nan)
        for (size_t i = 0; i < q->n; i++)
            if (isnan(x[i]))
                return emu_fail(err, EMU_ERANGE, "quantize", "data", "element %zu is NaN "
                                "and the element format %s has no NaN", i,
                                sf->elem.name);
    /* A block holding inf or NaN gets a NaN scale: refuse up front (before
     * any element is written) if the scale format has no NaN. */
    if (sf->block_scaled && !sf->scale.has_nan)
        for (size_t i = 0; i < q->n; i++)
            if (!isfinite(x[i]))
                return emu_fail(err, EMU_ERANGE, "quantize", "data", "element %zu is %s "
                                "and the scale format %s has no NaN to mark "
                                "its block", i, isnan(x[i]) ? "NaN" : "inf",
                                sf->scale.name);
    q->tensor_scale = (float)R.g;
    /* range=error: a block whose scale would be clamped is refused, before
     * any element is written. */
    if (sf->block_scaled && sf->strict_range)
        for (size_t b = 0; b < q->nblocks; b++) {
            double a;
            block_ref br = block_at(q, &R.geo, b);
            block_amax(&R, &br, &a);
            bool clamped = false;
            if (isfinite(a))
                block_scale(sf, a, R.g, R.scale_lo, R.scale_hi, &clamped);
            if (clamped)
                return emu_fail(err, EMU_ERANGE, "quantize", "range", "block %zu (amax %g"
                                "%s) needs a scale outside the range of %s "
                                "(%g .. %g); range=clamp would clamp it and "
                                "clip or flush its elements", b, a,
                                R.g != 1.0 ? ", divided by the tensor scale" : "",
                                sf->scale.name, sf->scale.min_value,
                                sf->scale.max);
        }

    if (!elements) {
        /* each block's scale as the statistics path sets it (the fused
         * paths' fast scales are tested equal to it); a per-tensor
         * format's one "block scale" is 1 */
        if (!sf->block_scaled)
            q->scale[0] = 1.0f;
        else if (R.geo.tile || scales_1d(&R))
            for (size_t b = 0; b < q->nblocks; b++)
                set_scale(&R, b, block_at(q, &R.geo, b), NULL, NULL);
        return 0;
    }
    const bool contig = sf->block_scaled && !R.geo.tile && R.geo.inner == 1;
    /* a per-tensor format by the fast paths: chunks of one divisor */
    const bool flat = !sf->block_scaled && (R.div_ok || R.sr_ok);
    const size_t rows_per = contig ? (R.geo.len < CHUNK ? CHUNK / R.geo.len : 1)
                                   : 0;
    const size_t cap = contig ? rows_per * R.geo.len
                       : flat ? (q->n < CHUNK ? q->n : CHUNK)
                              : q->n;
    float *tmp = malloc((cap ? cap : 1) * sizeof *tmp);
    /* binary64 quotients, then as many random words (round_chunk) */
    double *tmp64 = cap <= SIZE_MAX / 16 ? malloc((cap ? 2 * cap : 1) * 8) : NULL;
    if (!tmp || !tmp64) {
        free(tmp);
        free(tmp64);
        return emu_fail(err, EMU_ENOMEM, "quantize", "", "out of memory for %zu values",
                        cap);
    }
    const bool want_stats = counts || blocks;
    if (flat) {
        /* the one block's amax is only a statistic here */
        double a = 0.0;
        if (blocks) {
            block_ref br = block_at(q, &R.geo, 0);
            block_amax(&R, &br, &a);
        }
        scale_of_amax(&R, 0, a, counts, blocks);
        for (size_t e0 = 0; e0 < q->n; e0 += cap) {
            const size_t len = q->n - e0 < cap ? q->n - e0 : cap;
            quantize_flat(&R, e0, len, tmp, tmp64);
            no_negative_zero(&R, e0, len);
        }
        if (want_stats)
            chunk_stats(&R, 0, 1, counts, blocks);
    } else if (!contig) {
        for (size_t b = 0; b < q->nblocks; b++)
            set_scale(&R, b, block_at(q, &R.geo, b), counts, blocks);
        round_chunk(&R, 0, q->nblocks, 0, q->n, tmp, tmp64);
        no_negative_zero(&R, 0, q->n);
        if (want_stats)
            chunk_stats(&R, 0, q->nblocks, counts, blocks);
    } else {
        const size_t rows = R.geo.outer;
        for (size_t r0 = 0; r0 < rows; r0 += rows_per) {
            size_t r1 = r0 + rows_per < rows ? r0 + rows_per : rows;
            quantize_rows(&R, r0, r1, tmp, tmp64, counts, blocks);
            no_negative_zero(&R, r0 * R.geo.len, (r1 - r0) * R.geo.len);
            if (want_stats)
                chunk_stats(&R, r0 * R.geo.nb, r1 * R.geo.nb, counts, blocks);
        }
    }
    free(tmp);
    free(tmp64);
    return 0;
}

int emu_scaled_quantize(emu_scaled_tensor *q, const float *x,
                        const emu_quant_opts *opts, emu_quant_counts *counts,
                        emu_block_stats *blocks, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    return quantize(q, x, opts, counts, blocks, true, err);
}

int emu_scaled_quantize_scales(emu_scaled_tensor *q, const float *x,
                               const emu_quant_opts *opts, emu_error *err)
{
    return quantize(q, x, opts, NULL, NULL, false, err);
}

void emu_scaled_element_scales(const emu_scaled_tensor *q, float *out)
{
    geom g;
    geometry(q, &g);
    if (q->sf.block_scaled && !g.tile) { /* in memory order */
        const size_t b0 = q->sf.block[0];
        for (size_t o = 0; o < g.outer; o++) {
            if (g.inner > 1) {
                for (size_t l = 0; l < g.len; l++)
                    memcpy(out + (o * g.len + l) * g.inner,
                           q->scale + (o * g.nb + l / b0) * g.inner,
                           g.inner * sizeof *out);
                continue;
            }
            for (size_t lb = 0; lb < g.nb; lb++) {
                const float s = q->scale[o * g.nb + lb];
                float *d = out + o * g.len + lb * b0;
                const size_t nc = lb * b0 + b0 <= g.len ? b0 : g.len - lb * b0;
                for (size_t c = 0; c < nc; c++)
                    d[c] = s;
            }
        }
        return;
    }
    for (size_t b = 0; b < q->nblocks; b++) {
        block_ref br = block_at(q, &g, b);
        const float s = q->sf.block_scaled ? q->scale[b] : 1.0f;
        FOR_BLOCK(br, i, { out[i] = s; })
    }
}

double emu_scaled_value(const emu_scaled_tensor *q, size_t i)
{
    EMU_HOSTFP_GUARD;
    double s = q->sf.block_scaled ? q->scale[emu_scaled_block_of(q, i)] : 1.0;
    return (double)q->elem[i] * s * (double)q->tensor_scale; /* exact */
}

int emu_scaled_dequantize(const emu_scaled_tensor *q, float *out,
                          bool with_tensor_scale, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    geom g;
    geometry(q, &g);
    const double gs = with_tensor_scale ? q->tensor_scale : 1.0;
    /* The 1-d layout in memory order, by the vector rows: in binary32
     * without a tensor scale where the scales are powers of two (MX's), a
     * row redone in binary64 where that is not known exact; a product that
     * is not a binary32 value sends the whole tensor through the
     * definition below, which names it. */
    if (q->sf.block_scaled && !g.tile) {
        const size_t b0 = q->sf.block[0];
        const bool f32 = gs == 1.0 && scales_pow2(q);
        uint32_t bad = 0;
        for (size_t o = 0; o < g.outer && !bad; o++) {
            if (g.inner > 1) {
                for (size_t l = 0; l < g.len; l++) {
                    const size_t e0 = (o * g.len + l) * g.inner;
                    const float *s = q->scale + (o * g.nb + l / b0) * g.inner;
                    if (!f32 ||
                        deq_row_f32(out + e0, q->elem + e0, s, g.inner))
                        bad |= deq_row(out + e0, q->elem + e0, s, gs, g.inner);
                }
                continue;
            }
            const size_t whole = g.len / b0, tail = g.len - whole * b0;
            const size_t e0 = o * g.len;
            if (!f32 || deq_blocks_f32(out + e0, q->elem + e0,
                                       q->scale + o * g.nb, b0, whole))
                bad |= deq_blocks(out + e0, q->elem + e0, q->scale + o * g.nb,
                                  gs, b0, whole);
            if (tail) /* the row's last block, short */
                bad |= deq_blocks_any(out + e0 + whole * b0,
                                      q->elem + e0 + whole * b0,
                                      q->scale + o * g.nb + whole, gs, tail, 1);
        }
        if (!bad)
            return 0;
    }
    for (size_t b = 0; b < q->nblocks; b++) {
        block_ref br = block_at(q, &g, b);
        const double s = q->sf.block_scaled ? q->scale[b] : 1.0;
        FOR_BLOCK(br, i, {
            double v = isnan(s) ? NAN : (double)q->elem[i] * s * gs;
            float f = (float)v;
            if ((double)f != v && !isnan(v))
                return emu_fail(err, EMU_EUNSUPPORTED, "dequantize", "", "element %zu is %.17g, "
                                "not a binary32 value (%s)", i, v,
                                fabs(v) > FLT_MAX ? "beyond binary32's range"
                                                  : "more bits than binary32 "
                                                    "holds");
            out[i] = f;
        })
    }
    return 0;
}

/* ---- packed storage -------------------------------------------------------------- */

static size_t code_bytes(const emu_format *f, size_t n)
{
    return emu_packed_size(f, n);
}

size_t emu_scaled_packed_size(const emu_scaled_tensor *q)
{
    size_t e = code_bytes(&q->sf.elem, q->n);
    size_t s = q->sf.block_scaled ? code_bytes(&q->sf.scale, q->nblocks) : 0;
    size_t t = q->sf.tensor_scale ? 4 : 0;
    if (!e || (q->sf.block_scaled && !s) || e > SIZE_MAX - s - t)
        return 0;
    return e + s + t;
}

/* Element codes through a scratch tensor, so the layout is emu_tensor's. */
static int codes_via_tensor(const emu_format *f, float *vals, size_t n,
                            uint8_t *buf, size_t size, bool unpack,
                            emu_error *err)
{
    emu_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "scaled");
    t.fmt = *f;
    t.ndim = 1;
    t.shape[0] = n;
    t.n = n;
    t.data = vals;
    return unpack ? emu_tensor_unpack(&t, buf, size, err)
                  : emu_tensor_pack(&t, buf, size, err);
}

/* MXINT8: sign-magnitude codes <-> two's complement bytes. */
static void int_codes(uint8_t *buf, size_t n, int bits, bool to_twos)
{
    const unsigned sign = 1u << (bits - 1), mag = sign - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned c = buf[i];
        if (to_twos)
            c = (c & sign) ? (unsigned)(-(int)(c & mag)) & 0xffu : c;
        else
            c = (c & 0x80u) ? sign | ((unsigned)(-(int)(int8_t)c) & mag) : c;
        buf[i] = (uint8_t)c;
    }
}

int emu_scaled_pack(const emu_scaled_tensor *q, uint8_t *buf, size_t size,
                    emu_error *err)
{
    EMU_HOSTFP_GUARD;
    size_t need = emu_scaled_packed_size(q);
    if (!need || size < need)
        return emu_fail(err, EMU_EINVAL, "pack", "", "buffer of %zu bytes, %zu needed",
                        size, need);
    size_t eb = code_bytes(&q->sf.elem, q->n);
    if (codes_via_tensor(&q->sf.elem, q->elem, q->n, buf, eb, false, err))
        return -1;
    if (q->sf.int_elem)
        int_codes(buf, q->n, q->sf.elem.bits, true);
    size_t off = eb;
    if (q->sf.block_scaled) {
        size_t sb = code_bytes(&q->sf.scale, q->nblocks);
        if (codes_via_tensor(&q->sf.scale, q->scale, q->nblocks, buf + off, sb,
                             false, err))
            return -1;
        off += sb;
    }
    if (q->sf.tensor_scale) {
        uint32_t u;
        memcpy(&u, &q->tensor_scale, 4);
        for (int k = 0; k < 4; k++)
            buf[off + (size_t)k] = (uint8_t)(u >> (8 * k));
    }
    return 0;
}

int emu_scaled_unpack(emu_scaled_tensor *q, const uint8_t *buf, size_t size,
                      emu_error *err)
{
    EMU_HOSTFP_GUARD;
    size_t need = emu_scaled_packed_size(q);
    if (!need || size < need)
        return emu_fail(err, EMU_EINVAL, "unpack", "", "buffer of %zu bytes, %zu needed",
                        size, need);
    size_t eb = code_bytes(&q->sf.elem, q->n);
    uint8_t *tmp = NULL;
    const uint8_t *ebuf = buf;
    if (q->sf.int_elem) {
        tmp = malloc(eb);
        if (!tmp)
            return emu_fail(err, EMU_ENOMEM, "unpack", "", "out of memory");
        memcpy(tmp, buf, eb);
        for (size_t i = 0; i < eb; i++)
            if (tmp[i] == 0x80u) {
                free(tmp);
                return emu_fail(err, EMU_EDATA, "unpack", "data", "element %zu is -128, "
                                "which MXINT8 leaves unused here (symmetric "
                                "range)", i);
            }
        int_codes(tmp, q->n, q->sf.elem.bits, false);
        ebuf = tmp;
    }
    int rc = codes_via_tensor(&q->sf.elem, q->elem, q->n, (uint8_t *)ebuf, eb,
                              true, err);
    free(tmp);
    if (rc)
        return -1;
    size_t off = eb;
    if (q->sf.block_scaled) {
        size_t sb = code_bytes(&q->sf.scale, q->nblocks);
        if (codes_via_tensor(&q->sf.scale, q->scale, q->nblocks,
                             (uint8_t *)buf + off, sb, true, err))
            return -1;
        for (size_t b = 0; b < q->nblocks; b++)
            if (!(q->scale[b] > 0.0f) && !isnan(q->scale[b]))
                return emu_fail(err, EMU_EDATA, "unpack", "data", "block %zu has scale "
                                "%g: scales are positive", b,
                                (double)q->scale[b]);
        off += sb;
    }
    q->tensor_scale = 1.0f;
    if (q->sf.tensor_scale) {
        uint32_t u = 0;
        for (int k = 0; k < 4; k++)
            u |= (uint32_t)buf[off + (size_t)k] << (8 * k);
        float g;
        memcpy(&g, &u, 4);
        if (!(g > 0.0f) || !isfinite(g))
            return emu_fail(err, EMU_EDATA, "unpack", "data", "tensor scale %g is not a "
                            "positive finite binary32", (double)g);
        q->tensor_scale = g;
    }
    return 0;
}

/* ---- per-tensor scaling recipes --------------------------------------------------- */

void emu_amax_record(emu_amax_history *h, int history, double amax)
{
    EMU_HOSTFP_GUARD;
    if (history < 1)
        history = 1;
    if (history > EMU_AMAX_HISTORY_MAX)
        history = EMU_AMAX_HISTORY_MAX;
    if (!isfinite(amax)) {
        h->rejected++;
        return;
    }
    if (h->pos >= history)
        h->pos = 0;
    h->amax[h->pos] = (float)amax;
    h->pos = (h->pos + 1) % history;
    if (h->len < history)
        h->len++;
}

double emu_tensor_scaling_factor(const emu_tensor_scaling *t,
                                 const emu_amax_history *h, double amax_now,
                                 double previous, const emu_scaled_format *sf)
{
    EMU_HOSTFP_GUARD;
    double a = 0.0;
    if (t->kind == EMU_TSCALE_DELAYED && h && h->len > 0) {
        if (t->algo == EMU_AMAX_RECENT) {
            int hist = t->history < 1 ? 1 : t->history;
            int last = (h->pos + hist - 1) % hist;
            a = h->amax[last < h->len ? last : h->len - 1];
        } else {
            for (int i = 0; i < h->len; i++)
                a = h->amax[i] > a ? h->amax[i] : a;
        }
    }
    if (!(a > 0.0) || !isfinite(a))
        a = amax_now; /* current scaling, or a delayed one with no history */
    if (!(a > 0.0) || !isfinite(a))
        return previous > 0.0 && isfinite(previous) &&
                       (double)(float)previous == previous
                   ? previous
                   : 1.0;
    double ms = sf->block_scaled ? sf->scale.max : 1.0;
    return div_to_f32(ldexp(a, t->margin), sf->elem.max * ms,
                      tensor_scale_mode(sf));
}

int emu_tensor_scaling_parse(emu_tensor_scaling *t, const char *spec,
                             emu_error *err)
{
    EMU_HOSTFP_GUARD;
    char where[200];
    snprintf(where, sizeof where, "tensor scaling '%.170s'", spec ? spec : "");
    memset(t, 0, sizeof *t);
    t->history = 16;
    char buf[256];
    if (!spec || strlen(spec) >= sizeof buf)
        return emu_fail(err, EMU_ESPEC, where, "", "missing or too long");
    strcpy(buf, spec);
    char *cur = buf, *tok = emu_next_token(&cur, ",");
    if (!tok)
        return emu_fail(err, EMU_ESPEC, where, "", "empty spec (current or delayed)");
    if (!strcmp(tok, "current"))
        t->kind = EMU_TSCALE_CURRENT;
    else if (!strcmp(tok, "delayed"))
        t->kind = EMU_TSCALE_DELAYED;
    else
        return emu_fail(err, EMU_ESPEC, where, "", "'%s' is not current or delayed", tok);
    while ((tok = emu_next_token(&cur, ","))) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return emu_fail(err, EMU_ESPEC, where, tok, "expected key=value");
        *eq = '\0';
        const char *v = eq + 1;
        char *end;
        if (!strcmp(tok, "history")) {
            long h = strtol(v, &end, 10);
            if (*end || !*v || h < 1 || h > EMU_AMAX_HISTORY_MAX)
                return emu_fail(err, EMU_ESPEC, where, tok, "'%s' is not 1..%d", v,
                                EMU_AMAX_HISTORY_MAX);
            t->history = (int)h;
        } else if (!strcmp(tok, "algo")) {
            if (!strcmp(v, "max"))
                t->algo = EMU_AMAX_MAX;
            else if (!strcmp(v, "recent"))
                t->algo = EMU_AMAX_RECENT;
            else
                return emu_fail(err, EMU_ESPEC, where, tok, "'%s' is not max or recent", v);
        } else if (!strcmp(tok, "margin")) {
            long m = strtol(v, &end, 10);
            if (*end || !*v || m < -64 || m > 64)
                return emu_fail(err, EMU_ESPEC, where, tok, "'%s' is not an integer in "
                                "-64..64", v);
            t->margin = (int)m;
        } else {
            return emu_fail(err, EMU_ESPEC, where, tok, "unknown key (history, algo, "
                            "margin)");
        }
    }
    return 0;
}

void emu_tensor_scaling_string(const emu_tensor_scaling *t, char *buf,
                               size_t size)
{
    EMU_HOSTFP_GUARD;
    if (t->kind == EMU_TSCALE_CURRENT)
        snprintf(buf, size, "current,margin=%d", t->margin);
    else
        snprintf(buf, size, "delayed,history=%d,algo=%s,margin=%d", t->history,
                 t->algo == EMU_AMAX_RECENT ? "recent" : "max", t->margin);
}
