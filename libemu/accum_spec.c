/*
 * accum_spec.c — accumulator models as data: defaults, spec strings,
 * validation.  The arithmetic of the models lives in accum.c.
 *
 * Spec strings are what the command line and precision policies use:
 *   "sequential,acc=binary16"          "blocked,acc=e5m2,wide=binary32,block=128"
 *   "fused,k=32,w=14,acc=binary32"     "kahan,acc=bfloat16"  "exact"  "fast"
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/accum.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const kind_names[EMU_ACCUM_COUNT] = {
    [EMU_ACCUM_SEQUENTIAL] = "sequential", [EMU_ACCUM_PAIRWISE] = "pairwise",
    [EMU_ACCUM_BLOCKED] = "blocked",       [EMU_ACCUM_FUSED] = "fused",
    [EMU_ACCUM_KAHAN] = "kahan",           [EMU_ACCUM_EXACT] = "exact",
    [EMU_ACCUM_FAST] = "fast",
};

const char *emu_accum_kind_name(emu_accum_kind k)
{
    return (unsigned)k < EMU_ACCUM_COUNT ? kind_names[k] : "?";
}

static const emu_format *binary32(void)
{
    return emu_format_find("binary32");
}

void emu_accum_default(emu_accum *a)
{
    memset(a, 0, sizeof *a);
    a->kind = EMU_ACCUM_SEQUENTIAL;
    a->acc = *binary32();
    a->prod = *binary32();
    a->wide = *binary32();
    a->rnd.mode = EMU_RNE;
    a->rnd.sr_bits = 64;
    a->block = 128;
    a->fused_k = 32;
    a->fused_w = 24;
}

static int fail(emu_error *err, emu_errcode code, const char *spec,
                const char *key, const char *fmt, ...)
{
    char where[256];
    snprintf(where, sizeof where, "accumulator '%.200s'", spec);
    va_list ap;
    va_start(ap, fmt);
    emu_vfail(err, code, where, key, fmt, ap);
    va_end(ap);
    return -1;
}

static int parse_count(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return -1;
    *out = (unsigned)v;
    return 0;
}

int emu_accum_validate(const emu_accum *a, emu_error *err)
{
    const char *name = emu_accum_kind_name(a->kind);
    if ((unsigned)a->kind >= EMU_ACCUM_COUNT)
        return fail(err, EMU_ESPEC, name, "kind", "unknown accumulator kind");
    const emu_format *fs[3] = { &a->acc, &a->prod, &a->wide };
    const char *keys[3] = { "acc", "prod", "wide" };
    for (int i = 0; i < 3; i++)
        if (!emu_format_is_validated(fs[i]))
            return fail(err, EMU_EINVAL, name, keys[i], "%s was not validated, or was "
                        "changed since: call emu_format_validate", fs[i]->name);
    for (int i = 0; i < 3; i++)
        if (!fs[i]->fits_carrier)
            return fail(err, EMU_EUNSUPPORTED, name, keys[i], "%s is not held by the binary32 "
                        "carrier", fs[i]->name);
    if (a->kind == EMU_ACCUM_BLOCKED && (a->block < 1 || a->block > (1u << 20)))
        return fail(err, EMU_ESPEC, name, "block", "%u is not in 1..2^20", a->block);
    if (a->kind == EMU_ACCUM_FUSED) {
        if (a->fused_k < 1 || a->fused_k > 4096)
            return fail(err, EMU_ESPEC, name, "k", "%u is not in 1..4096", a->fused_k);
        if (a->fused_w < 2 || a->fused_w > 60)
            return fail(err, EMU_ESPEC, name, "w", "%u is not in 2..60", a->fused_w);
    }
    if (emu_rnd_is_stochastic(a->rnd.mode) &&
        (a->kind == EMU_ACCUM_EXACT || a->kind == EMU_ACCUM_FAST))
        return fail(err, EMU_ESPEC, name, "mode", "the %s model has no accumulator "
                    "rounding to make stochastic", name);
    return 0;
}

int emu_accum_parse(emu_accum *a, const char *spec, emu_error *err)
{
    emu_accum m;
    emu_accum_default(&m);
    if (!spec || !*spec)
        return fail(err, EMU_ESPEC, "", "", "empty accumulator spec");
    char buf[256];
    if (strlen(spec) >= sizeof buf)
        return fail(err, EMU_ESPEC, spec, "", "longer than %zu characters",
                    sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", spec);
    char *cursor = buf;
    char *kind = emu_next_token(&cursor, ",");
    if (!kind)
        return fail(err, EMU_ESPEC, spec, "", "no kind given");
    if (!strcmp(kind, "seq"))
        kind = "sequential";
    int k = -1;
    for (int i = 0; i < EMU_ACCUM_COUNT; i++)
        if (!strcmp(kind, kind_names[i]))
            k = i;
    if (k < 0)
        return fail(err, EMU_ESPEC, spec, "kind", "'%s' is not sequential, pairwise, "
                    "blocked, fused, kahan, exact or fast", kind);
    m.kind = (emu_accum_kind)k;

    for (char *item; (item = emu_next_token(&cursor, ","));) {
        char *eq = strchr(item, '=');
        if (!eq)
            return fail(err, EMU_ESPEC, spec, item, "expected key=value");
        *eq = '\0';
        const char *key = item, *val = eq + 1;
        emu_error ferr;
        if (!strcmp(key, "acc") || !strcmp(key, "wide") ||
            !strcmp(key, "prod")) {
            if (!strcmp(key, "prod") && !strcmp(val, "exact")) {
                m.round_products = false;
                continue;
            }
            emu_format f;
            if (emu_format_resolve(&f, val, &ferr)) {
                char msg[600];
                emu_error_format(&ferr, msg, sizeof msg);
                return fail(err, EMU_ESPEC, spec, key, "%s", msg);
            }
            if (!strcmp(key, "acc"))
                m.acc = f;
            else if (!strcmp(key, "wide"))
                m.wide = f;
            else {
                m.prod = f;
                m.round_products = true;
            }
        } else if (!strcmp(key, "mode")) {
            if (emu_rnd_parse(val, &m.rnd.mode, &m.rnd.sr_bits))
                return fail(err, EMU_ESPEC, spec, key, "'%s' is not a rounding mode "
                            "(rne rna rz ru rd ro sr srN)", val);
        } else if (!strcmp(key, "block")) {
            if (parse_count(val, 1, 1u << 20, &m.block))
                return fail(err, EMU_ESPEC, spec, key, "'%s' is not in 1..2^20", val);
        } else if (!strcmp(key, "k")) {
            if (parse_count(val, 1, 4096, &m.fused_k))
                return fail(err, EMU_ESPEC, spec, key, "'%s' is not in 1..4096", val);
        } else if (!strcmp(key, "w")) {
            if (parse_count(val, 2, 60, &m.fused_w))
                return fail(err, EMU_ESPEC, spec, key, "'%s' is not in 2..60", val);
        } else {
            return fail(err, EMU_ESPEC, spec, key, "unknown key (acc, prod, wide, mode, "
                        "block, k, w)");
        }
    }
    if (emu_accum_validate(&m, err))
        return -1;
    *a = m;
    return 0;
}

void emu_accum_string(const emu_accum *a, char *buf, size_t size)
{
    const char *mode = a->rnd.mode == EMU_RS_BITS ? NULL : emu_rnd_name(a->rnd.mode);
    char modebuf[16];
    if (!mode) {
        snprintf(modebuf, sizeof modebuf, "sr%u", a->rnd.sr_bits);
        mode = modebuf;
    }
    switch (a->kind) {
    case EMU_ACCUM_EXACT:
    case EMU_ACCUM_FAST:
        snprintf(buf, size, "%s", emu_accum_kind_name(a->kind));
        break;
    case EMU_ACCUM_BLOCKED:
        snprintf(buf, size, "blocked,acc=%s,wide=%s,block=%u,prod=%s,mode=%s",
                 a->acc.name, a->wide.name, a->block,
                 a->round_products ? a->prod.name : "exact", mode);
        break;
    case EMU_ACCUM_FUSED:
        snprintf(buf, size, "fused,acc=%s,k=%u,w=%u,prod=%s,mode=%s",
                 a->acc.name, a->fused_k, a->fused_w,
                 a->round_products ? a->prod.name : "exact", mode);
        break;
    default:
        snprintf(buf, size, "%s,acc=%s,prod=%s,mode=%s",
                 emu_accum_kind_name(a->kind), a->acc.name,
                 a->round_products ? a->prod.name : "exact", mode);
        break;
    }
}
