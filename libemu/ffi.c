/*
 * ffi.c — the foreign-function ABI of emu/ffi.h, for the Python package.
 *
 * A thin layer: every function here calls the library's public functions
 * (array rounding, the format registry and parser, the scaled quantizer,
 * emu_t_load / emu_t_matmul through an emu_ctx, the emu_stats writers,
 * the policy presets) and only translates between them and what a
 * foreign caller can pass safely: scalars, flat arrays, strings and
 * opaque handles.  Nothing rounds here.  Failures land in a per-thread
 * emu_error that emu_ffi_error_*() read, so a binding that releases its
 * interpreter lock around calls still reads its own thread's error.
 */
#define _POSIX_C_SOURCE 200809L /* open_memstream, mkdir */

#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/ffi.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "emu/bits.h"
#include "emu/extend.h"
#include "emu/nn.h"
#include "emu/ops.h"
#include "emu/scaled.h"
#include "emu/stats.h"
#include "emu/version.h"
#include "internal.h"

/* ---- errors ---------------------------------------------------------------- */

static _Thread_local emu_error last_error;

/* A scratch emu_error for one call; copied to last_error on failure only,
 * so that a call that succeeds leaves the previous failure readable. */
static int keep(const emu_error *e)
{
    last_error = *e;
    return -1;
}

static int fail(emu_errcode code, const char *where, const char *key,
                const char *msg)
{
    emu_error e;
    emu_fail(&e, code, where, key, "%s", msg);
    return keep(&e);
}

int emu_ffi_fail_(emu_errcode code, const char *where, const char *key,
                  const char *msg)
{
    return fail(code, where, key, msg);
}

int emu_ffi_error_code(void) { return (int)last_error.code; }
const char *emu_ffi_error_code_name(void)
{
    return emu_error_code_name(last_error.code);
}
const char *emu_ffi_error_where(void) { return last_error.where; }
const char *emu_ffi_error_key(void) { return last_error.key; }
const char *emu_ffi_error_message(void) { return last_error.message; }

const char *emu_ffi_version_string(void) { return EMU_VERSION_STRING; }

/* Copies s into buf (truncated, NUL-terminated); refuses no buffer. */
static int put_str(const char *s, char *buf, size_t size, const char *where)
{
    if (!buf || !size)
        return fail(EMU_EINVAL, where, "buf", "no buffer");
    snprintf(buf, size, "%s", s ? s : "");
    return 0;
}

/* ---- formats ----------------------------------------------------------------- */

struct emu_ffi_format {
    emu_format fmt;
};

size_t emu_ffi_format_count(void) { return emu_format_count(); }

const char *emu_ffi_format_name(size_t i)
{
    const emu_format *f = emu_format_at(i);
    return f ? f->name : NULL;
}

int emu_ffi_format_new(const char *spec, emu_ffi_format **out)
{
    if (!out)
        return fail(EMU_EINVAL, "format", "out", "no output handle");
    *out = NULL;
    if (!spec)
        return fail(EMU_EINVAL, "format", "spec", "no format spec");
    emu_ffi_format *f = calloc(1, sizeof *f);
    if (!f)
        return fail(EMU_ENOMEM, "format", "", "out of memory");
    emu_error e;
    if (emu_format_resolve(&f->fmt, spec, &e)) {
        free(f);
        return keep(&e);
    }
    *out = f;
    return 0;
}

void emu_ffi_format_free(emu_ffi_format *f) { free(f); }

typedef struct format_key {
    const char *name;
    char type;
} format_key;

static const format_key format_keys[] = {
    { "name", 's' },          { "spec", 's' },         { "aliases", 's' },
    { "description", 's' },   { "bits", 'i' },         { "exp_bits", 'i' },
    { "man_bits", 'i' },      { "bias", 'i' },         { "precision", 'i' },
    { "emin", 'i' },          { "emax", 'i' },         { "qmin", 'i' },
    { "is_signed", 'b' },     { "subnormals", 'b' },   { "has_zero", 'b' },
    { "specials", 's' },      { "overflow", 's' },     { "max", 'd' },
    { "min_normal", 'd' },    { "min_subnormal", 'd' }, { "min_value", 'd' },
    { "epsilon", 'd' },       { "unit_roundoff", 'd' }, { "finite_count", 'u' },
    { "has_inf", 'b' },       { "has_nan", 'b' },      { "fits_carrier", 'b' },
    { "fits_double", 'b' },
};
enum { N_FORMAT_KEYS = sizeof format_keys / sizeof format_keys[0] };

const char *emu_ffi_format_key(size_t i)
{
    return i < N_FORMAT_KEYS ? format_keys[i].name : NULL;
}

int emu_ffi_format_key_type(size_t i)
{
    return i < N_FORMAT_KEYS ? format_keys[i].type : 0;
}

static int unknown_key(const char *key)
{
    emu_error e;
    emu_fail(&e, EMU_EINVAL, "format", key ? key : "",
             "'%s' is not a format field", key ? key : "(null)");
    return keep(&e);
}

int emu_ffi_format_get_int(const emu_ffi_format *f, const char *key,
                           int64_t *out)
{
    if (!f || !key || !out)
        return fail(EMU_EINVAL, "format", "", "no format, key or output");
    const emu_format *m = &f->fmt;
    static const struct { const char *k; size_t off; char t; } ints[] = {
        { "bits", offsetof(emu_format, bits), 'i' },
        { "exp_bits", offsetof(emu_format, ebits), 'i' },
        { "man_bits", offsetof(emu_format, mbits), 'i' },
        { "bias", offsetof(emu_format, bias), 'i' },
        { "precision", offsetof(emu_format, p), 'i' },
        { "emin", offsetof(emu_format, emin), 'i' },
        { "emax", offsetof(emu_format, emax), 'i' },
        { "qmin", offsetof(emu_format, qmin), 'i' },
        { "is_signed", offsetof(emu_format, is_signed), 'b' },
        { "subnormals", offsetof(emu_format, subnormals), 'b' },
        { "has_zero", offsetof(emu_format, has_zero), 'b' },
        { "has_inf", offsetof(emu_format, has_inf), 'b' },
        { "has_nan", offsetof(emu_format, has_nan), 'b' },
        { "fits_carrier", offsetof(emu_format, fits_carrier), 'b' },
        { "fits_double", offsetof(emu_format, fits_double), 'b' },
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (strcmp(ints[i].k, key))
            continue;
        const char *p = (const char *)m + ints[i].off;
        if (ints[i].t == 'i') {
            int v;
            memcpy(&v, p, sizeof v);
            *out = v;
        } else {
            bool v;
            memcpy(&v, p, sizeof v);
            *out = v;
        }
        return 0;
    }
    return unknown_key(key);
}

int emu_ffi_format_get_uint(const emu_ffi_format *f, const char *key,
                            uint64_t *out)
{
    if (!f || !key || !out)
        return fail(EMU_EINVAL, "format", "", "no format, key or output");
    if (strcmp(key, "finite_count"))
        return unknown_key(key);
    *out = f->fmt.finite_count; /* binary64's is above 2^63 */
    return 0;
}

int emu_ffi_format_get_real(const emu_ffi_format *f, const char *key,
                            double *out)
{
    EMU_HOSTFP_GUARD;
    if (!f || !key || !out)
        return fail(EMU_EINVAL, "format", "", "no format, key or output");
    const emu_format *m = &f->fmt;
    const struct { const char *k; double v; } reals[] = {
        { "max", m->max },
        { "min_normal", m->min_normal },
        { "min_subnormal", m->min_subnormal },
        { "min_value", m->min_value },
        { "epsilon", m->epsilon },
        { "unit_roundoff", m->unit_roundoff },
    };
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
        if (!strcmp(reals[i].k, key)) {
            *out = reals[i].v;
            return 0;
        }
    return unknown_key(key);
}

int emu_ffi_format_get_str(const emu_ffi_format *f, const char *key,
                           char *buf, size_t size)
{
    if (!f || !key)
        return fail(EMU_EINVAL, "format", "", "no format or key");
    const emu_format *m = &f->fmt;
    if (!strcmp(key, "spec")) {
        char spec[256];
        emu_format_spec_string(m, spec, sizeof spec);
        return put_str(spec, buf, size, "format");
    }
    const char *v = !strcmp(key, "name")          ? m->name
                    : !strcmp(key, "aliases")     ? m->aliases
                    : !strcmp(key, "description") ? m->description
                    : !strcmp(key, "specials")    ? emu_specials_name(m->specials)
                    : !strcmp(key, "overflow")    ? emu_overflow_name(m->overflow)
                                                  : NULL;
    if (!v)
        return unknown_key(key);
    return put_str(v, buf, size, "format");
}

/* ---- rounding ------------------------------------------------------------------ */

struct emu_ffi_rounding {
    emu_rounding rnd;
    int saturate;            /* -1 format's rule, 0 never, 1 always       */
};

int emu_ffi_rounding_new(const char *mode, int saturate, const char *tininess,
                         const char *profile, emu_ffi_rounding **out)
{
    if (!out)
        return fail(EMU_EINVAL, "rounding", "out", "no output handle");
    *out = NULL;
    emu_rounding r = { 0 };
    if (!mode || emu_rnd_parse(mode, &r.mode, &r.sr_bits)) {
        emu_error e;
        emu_fail(&e, EMU_EINVAL, "rounding", "mode",
                 "'%s' is not a rounding mode (rne rna rz ru rd ro sr srN "
                 "with N = 1..64)", mode ? mode : "(null)");
        return keep(&e);
    }
    if (saturate < -1 || saturate > 1)
        return fail(EMU_EINVAL, "rounding", "saturate",
                    "saturate is -1 (the format's rule), 0 or 1");
    r.saturate = saturate == 1;
    if (tininess && *tininess) {
        if (!strcmp(tininess, "before"))
            r.tininess = EMU_TINY_BEFORE;
        else if (strcmp(tininess, "after")) {
            emu_error e;
            emu_fail(&e, EMU_EINVAL, "rounding", "tininess",
                     "'%s' is not a tininess rule (before, after)", tininess);
            return keep(&e);
        }
    }
    if (profile && *profile && emu_profile_parse(profile, &r.profile, NULL)) {
        emu_error e;
        emu_fail(&e, EMU_EINVAL, "rounding", "profile",
                 "'%s' is not a profile (%s)", profile, emu_profile_names());
        return keep(&e);
    }
    emu_ffi_rounding *h = calloc(1, sizeof *h);
    if (!h)
        return fail(EMU_ENOMEM, "rounding", "", "out of memory");
    h->rnd = r;
    h->saturate = saturate;
    *out = h;
    return 0;
}

void emu_ffi_rounding_free(emu_ffi_rounding *r) { free(r); }

static const char *const counts_names[] = {
    "n", "inexact", "underflow", "to_zero", "subnormal", "overflow", "nan",
    "invalid", "flags",
};
enum { N_COUNTS = sizeof counts_names / sizeof counts_names[0] };

size_t emu_ffi_counts_count(void) { return N_COUNTS; }
const char *emu_ffi_counts_name(size_t i)
{
    return i < N_COUNTS ? counts_names[i] : NULL;
}

static void add_counts(uint64_t *out, const emu_round_counts *c)
{
    if (!out)
        return;
    const uint64_t v[N_COUNTS] = { c->n,        c->inexact, c->underflow,
                                   c->to_zero,  c->subnormal, c->overflow,
                                   c->nan,      c->invalid, c->flags };
    for (int i = 0; i < N_COUNTS - 1; i++)
        out[i] += v[i];
    out[N_COUNTS - 1] |= v[N_COUNTS - 1];
}

/* The format a rounding applies: f itself, or for saturate = 0 on a
 * saturating format a copy of it that overflows to inf (or NaN). */
static const emu_format *format_for(const emu_ffi_format *f,
                                    const emu_ffi_rounding *r,
                                    emu_format *copy, emu_error *e)
{
    if (r->saturate != 0 || f->fmt.overflow != EMU_OVERFLOW_SATURATE)
        return &f->fmt;
    *copy = f->fmt;
    if (f->fmt.has_inf)
        copy->overflow = EMU_OVERFLOW_INF;
    else if (f->fmt.has_nan)
        copy->overflow = EMU_OVERFLOW_NAN;
    else {
        emu_fail(e, EMU_EINVAL, f->fmt.name, "saturate",
                 "saturate=0: format '%s' has neither inf nor NaN to "
                 "overflow to", f->fmt.name);
        return NULL;
    }
    return emu_format_validate(copy, e) ? NULL : copy;
}

static int check_round_args(const emu_ffi_format *f, const emu_ffi_rounding *r,
                            const void *out, const void *in, size_t n)
{
    if (!f || !r)
        return fail(EMU_EINVAL, "round", "", "no format or rounding");
    if (n && (!out || !in))
        return fail(EMU_EINVAL, "round", "", "no input or output array");
    return 0;
}

static emu_array_rounding array_rounding(const emu_ffi_rounding *r,
                                         uint64_t seed, uint64_t stream,
                                         uint64_t first)
{
    emu_array_rounding a = { .rnd = r->rnd, .seed = seed, .stream = stream,
                             .first_index = first };
    return a;
}

int emu_ffi_round_f32(const emu_ffi_format *f, const emu_ffi_rounding *r,
                      uint64_t seed, uint64_t stream, uint64_t first_index,
                      float *out, const float *in, size_t n, uint64_t *counts)
{
    EMU_HOSTFP_GUARD;
    if (check_round_args(f, r, out, in, n))
        return -1;
    emu_error e;
    emu_format copy;
    const emu_format *fmt = format_for(f, r, &copy, &e);
    if (!fmt)
        return keep(&e);
    emu_array_rounding a = array_rounding(r, seed, stream, first_index);
    emu_round_counts c = { 0 };
    if (emu_round_array_f32(fmt, out, in, n, &a, counts ? &c : NULL, &e))
        return keep(&e);
    add_counts(counts, &c);
    return 0;
}

int emu_ffi_round_f64(const emu_ffi_format *f, const emu_ffi_rounding *r,
                      uint64_t seed, uint64_t stream, uint64_t first_index,
                      double *out, const double *in, size_t n,
                      uint64_t *counts)
{
    EMU_HOSTFP_GUARD;
    if (check_round_args(f, r, out, in, n))
        return -1;
    emu_error e;
    emu_format copy;
    const emu_format *fmt = format_for(f, r, &copy, &e);
    if (!fmt)
        return keep(&e);
    emu_array_rounding a = array_rounding(r, seed, stream, first_index);
    emu_round_counts c = { 0 };
    if (emu_round_array_f64(fmt, out, in, n, &a, counts ? &c : NULL, &e))
        return keep(&e);
    add_counts(counts, &c);
    return 0;
}

/* Rounds in chunks into a buffer on the stack, then encodes each result:
 * the array kernels do the rounding, emu_encode_in the patterns. */
enum { BITS_CHUNK = 1024 };

static int encode_chunk(const emu_format *fmt, const emu_profile *p,
                        const double *v, size_t n, size_t first,
                        uint8_t *bits, size_t width, emu_error *e)
{
    for (size_t i = 0; i < n; i++) {
        emu_bits b;
        /* Only a NaN result can lack a pattern: NaN (or an invalid
         * input) into a format without NaN, where the value layer
         * answers NaN and raises invalid. */
        if (!emu_encode_in(fmt, p, v[i], &b))
            return emu_fail(e, EMU_ERANGE, fmt->name, "",
                            "element %zu: the result %g has no bit pattern "
                            "in '%s' (a format without NaN)", first + i,
                            v[i], fmt->name);
        for (size_t k = 0; k < width; k++)
            bits[i * width + k] = (uint8_t)(k < 8 ? b.v >> (8 * k) : 0);
    }
    return 0;
}

static int check_width(const emu_format *fmt, size_t width)
{
    if ((width != 1 && width != 2 && width != 4 && width != 8) ||
        width * 8 < (size_t)fmt->bits) {
        emu_error e;
        emu_fail(&e, EMU_EINVAL, "round", "width",
                 "%zu-byte patterns cannot hold the %d bits of '%s' (1, 2, "
                 "4 or 8 bytes)", width, fmt->bits, fmt->name);
        return keep(&e);
    }
    return 0;
}

/* The bit-pattern rounding of a binary32 (in32) or binary64 (in64) array:
 * each chunk through its array kernel, then encoded. */
static int round_bits(const emu_ffi_format *f, const emu_ffi_rounding *r,
                      uint64_t seed, uint64_t stream, uint64_t first_index,
                      void *bits, size_t width, const float *in32,
                      const double *in64, size_t n, uint64_t *counts)
{
    if (check_round_args(f, r, bits, in32 ? (const void *)in32 : in64, n) ||
        check_width(&f->fmt, width))
        return -1;
    emu_error e;
    emu_format copy;
    const emu_format *fmt = format_for(f, r, &copy, &e);
    if (!fmt)
        return keep(&e);
    float buf[BITS_CHUNK];
    double v[BITS_CHUNK];
    emu_round_counts c = { 0 };
    for (size_t at = 0; at < n; at += BITS_CHUNK) {
        size_t m = n - at < BITS_CHUNK ? n - at : BITS_CHUNK;
        emu_array_rounding a = array_rounding(r, seed, stream, first_index + at);
        emu_round_counts *cp = counts ? &c : NULL;
        if (in32 ? emu_round_array_f32(fmt, buf, in32 + at, m, &a, cp, &e)
                 : emu_round_array_f64(fmt, v, in64 + at, m, &a, cp, &e))
            return keep(&e);
        if (in32)
            for (size_t i = 0; i < m; i++)
                v[i] = buf[i];
        if (encode_chunk(fmt, &r->rnd.profile, v, m, at,
                         (uint8_t *)bits + at * width, width, &e))
            return keep(&e);
    }
    add_counts(counts, &c);
    return 0;
}

int emu_ffi_round_f32_bits(const emu_ffi_format *f, const emu_ffi_rounding *r,
                           uint64_t seed, uint64_t stream,
                           uint64_t first_index, void *bits, size_t width,
                           const float *in, size_t n, uint64_t *counts)
{
    EMU_HOSTFP_GUARD;
    return round_bits(f, r, seed, stream, first_index, bits, width, in, NULL,
                      n, counts);
}

int emu_ffi_round_f64_bits(const emu_ffi_format *f, const emu_ffi_rounding *r,
                           uint64_t seed, uint64_t stream,
                           uint64_t first_index, void *bits, size_t width,
                           const double *in, size_t n, uint64_t *counts)
{
    EMU_HOSTFP_GUARD;
    return round_bits(f, r, seed, stream, first_index, bits, width, NULL, in,
                      n, counts);
}

int emu_ffi_round_f64_to_f32(const emu_ffi_format *f,
                             const emu_ffi_rounding *r, uint64_t seed,
                             uint64_t stream, uint64_t first_index,
                             float *out, const double *in, size_t n,
                             uint64_t *counts)
{
    EMU_HOSTFP_GUARD; /* the narrowing below must not flush subnormals */
    if (check_round_args(f, r, out, in, n))
        return -1;
    emu_error e;
    emu_format copy;
    const emu_format *fmt = format_for(f, r, &copy, &e);
    if (!fmt)
        return keep(&e);
    if (!fmt->fits_carrier) {
        emu_fail(&e, EMU_EUNSUPPORTED, fmt->name, "",
                 "'%s' has values that binary32 cannot hold", fmt->name);
        return keep(&e);
    }
    double v[BITS_CHUNK];
    emu_round_counts c = { 0 };
    for (size_t at = 0; at < n; at += BITS_CHUNK) {
        size_t m = n - at < BITS_CHUNK ? n - at : BITS_CHUNK;
        emu_array_rounding a = array_rounding(r, seed, stream, first_index + at);
        if (emu_round_array_f64(fmt, v, in + at, m, &a, counts ? &c : NULL, &e))
            return keep(&e);
        for (size_t i = 0; i < m; i++)
            out[at + i] = (float)v[i]; /* exact: fmt fits binary32 */
    }
    add_counts(counts, &c);
    return 0;
}

int emu_ffi_round_scalar(const emu_ffi_format *f, const emu_ffi_rounding *r,
                         double hi, double lo, uint64_t seed, uint64_t stream,
                         uint64_t index, double *out, int *ternary,
                         unsigned *flags)
{
    EMU_HOSTFP_GUARD;
    if (!f || !r || !out)
        return fail(EMU_EINVAL, "round", "", "no format, rounding or output");
    emu_error e;
    emu_format copy;
    const emu_format *fmt = format_for(f, r, &copy, &e);
    if (!fmt)
        return keep(&e);
    emu_status st = { 0, 0 };
    if (emu_rnd_is_stochastic(r->rnd.mode))
        *out = emu_round2_word(fmt, hi, lo, &r->rnd,
                               emu_random64(seed, stream, index), &st);
    else
        *out = emu_round2(fmt, hi, lo, &r->rnd, &st);
    if (ternary)
        *ternary = st.ternary;
    if (flags)
        *flags = st.flags;
    return 0;
}

int emu_ffi_decode(const emu_ffi_format *f, uint64_t bits, double *out)
{
    EMU_HOSTFP_GUARD;
    if (!f || !out)
        return fail(EMU_EINVAL, "decode", "", "no format or output");
    if (f->fmt.bits < 64 && bits >> f->fmt.bits) {
        emu_error e;
        emu_fail(&e, EMU_EINVAL, f->fmt.name, "bits",
                 "pattern 0x%llx is wider than the %d bits of '%s'",
                 (unsigned long long)bits, f->fmt.bits, f->fmt.name);
        return keep(&e);
    }
    emu_bits b = { bits };
    *out = emu_decode(&f->fmt, b);
    return 0;
}

int emu_ffi_encode(const emu_ffi_format *f, const emu_ffi_rounding *r,
                   double x, uint64_t *bits)
{
    EMU_HOSTFP_GUARD;
    if (!f || !bits)
        return fail(EMU_EINVAL, "encode", "", "no format or output");
    emu_profile ieee = { 0 };
    emu_bits b;
    if (!emu_encode_in(&f->fmt, r ? &r->rnd.profile : &ieee, x, &b)) {
        emu_error e;
        emu_fail(&e, EMU_EDATA, f->fmt.name, "x",
                 "%.17g is not a value of '%s'", x, f->fmt.name);
        return keep(&e);
    }
    *bits = b.v;
    return 0;
}

/* ---- accumulators -------------------------------------------------------------- */

struct emu_ffi_accum {
    emu_accum acc;
};

int emu_ffi_accum_new(const char *spec, emu_ffi_accum **out)
{
    if (!out)
        return fail(EMU_EINVAL, "accum", "out", "no output handle");
    *out = NULL;
    if (!spec)
        return fail(EMU_EINVAL, "accum", "spec", "no accumulator spec");
    emu_ffi_accum *a = calloc(1, sizeof *a);
    if (!a)
        return fail(EMU_ENOMEM, "accum", "", "out of memory");
    emu_error e;
    if (emu_accum_parse(&a->acc, spec, &e) || emu_accum_validate(&a->acc, &e)) {
        free(a);
        return keep(&e);
    }
    *out = a;
    return 0;
}

void emu_ffi_accum_free(emu_ffi_accum *a) { free(a); }

int emu_ffi_accum_string(const emu_ffi_accum *a, char *buf, size_t size)
{
    if (!a)
        return fail(EMU_EINVAL, "accum", "", "no accumulator");
    char s[512];
    emu_accum_string(&a->acc, s, sizeof s);
    return put_str(s, buf, size, "accum");
}

/* ---- sessions ------------------------------------------------------------------- */

struct emu_ffi_session {
    emu_ctx ctx;
    emu_stats stats;
    emu_format binary32;     /* the format of the GEMM input tensors      */
    char *steps;             /* ops_steps.csv rows of the steps that ended */
    size_t steps_len;
    bool stepping;           /* a step was begun                           */
};

int emu_ffi_session_new(uint64_t seed, double ref_rate, int threads,
                        emu_ffi_session **out)
{
    EMU_HOSTFP_GUARD;
    if (!out)
        return fail(EMU_EINVAL, "session", "out", "no output handle");
    *out = NULL;
    if (!(ref_rate >= 0 && ref_rate <= 1))
        return fail(EMU_EINVAL, "session", "ref_rate",
                    "ref_rate must lie in [0, 1]");
    if (threads < 1)
        return fail(EMU_EINVAL, "session", "threads", "threads must be >= 1");
    const emu_format *b32 = emu_format_find("binary32");
    if (!b32)
        return fail(EMU_ESTATE, "session", "", "binary32 is not registered");
    emu_ffi_session *s = calloc(1, sizeof *s);
    if (!s)
        return fail(EMU_ENOMEM, "session", "", "out of memory");
    emu_stats_init(&s->stats);
    emu_ctx_init(&s->ctx, seed);
    s->ctx.stats = &s->stats;
    s->ctx.measure = EMU_MEASURE_ALL;
    s->ctx.ref_rate = ref_rate;
    s->ctx.threads = threads;
    s->binary32 = *b32;
    *out = s;
    return 0;
}

void emu_ffi_session_free(emu_ffi_session *s)
{
    if (!s)
        return;
    emu_stats_free(&s->stats);
    free(s->steps);
    free(s);
}

/* A tensor over the caller's memory (not owned: emu_tensor_free is never
 * called on it).  fmt must be validated. */
static void wrap(emu_tensor *t, const char *name, emu_role role,
                 const emu_format *fmt, size_t d0, size_t d1, float *data)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->role = role;
    t->fmt = *fmt;
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->n = d1 ? d0 * d1 : d0;
    t->data = data;
    t->owns_data = false;
}

static int parse_role(const char *role, emu_role *r)
{
    if (role && !emu_role_parse(role, r))
        return 0;
    emu_error e;
    emu_fail(&e, EMU_EINVAL, "session", "role",
             "'%s' is not a role (weight, activation, act_grad, weight_grad, "
             "master, opt_state, other)", role ? role : "(null)");
    return keep(&e);
}

static int ctx_failed(emu_ffi_session *s)
{
    return keep(&s->ctx.err);
}

/* The session's rounding op: out = in rounded into out's format, an op of
 * the caller's kind through the choke point (emu_t_load is this op with
 * kind "load").  Output i reads in[i] alone, so out may be in itself. */
typedef struct {
    const float *in;
} load_op;

static void load_fill32(const void *op, size_t i0, size_t m, float *v)
{
    memcpy(v, ((const load_op *)op)->in + i0, m * sizeof *v);
}

static int load_ref(const void *op, size_t i, mpfr_ptr exact, mpfr_ptr src)
{
    (void)src;
    mpfr_set_flt(exact, ((const load_op *)op)->in[i], MPFR_RNDN);
    return 0;
}

static bool load_had_nan(const void *op, size_t i)
{
    return isnan(((const load_op *)op)->in[i]);
}

int emu_ffi_session_round(emu_ffi_session *s, const char *site,
                          const char *kind, const char *role,
                          const emu_ffi_format *f, const emu_ffi_rounding *r,
                          float *out, const float *in, size_t n)
{
    EMU_HOSTFP_GUARD;
    emu_role ro;
    if (!s || !site || !f || !r || !out || !in || !n)
        return fail(EMU_EINVAL, "session round", "",
                    "no session, site, format, rounding or data");
    if (!kind || !*kind)
        kind = "load";
    if (strlen(kind) >= sizeof ((emu_site *)0)->kind)
        return fail(EMU_EINVAL, "session round", "kind",
                    "an op kind has at most 23 characters");
    /* addresses as integers: relational comparison of pointers into
     * different arrays is undefined */
    const uintptr_t o0 = (uintptr_t)out, i0 = (uintptr_t)in;
    if (o0 != i0 && o0 < i0 + n * sizeof *in && i0 < o0 + n * sizeof *out)
        return fail(EMU_EINVAL, "session round", "out",
                    "out overlaps in without being it (in place: out == in)");
    if (parse_role(role, &ro))
        return -1;
    emu_error e;
    emu_format copy;
    const emu_format *fmt = format_for(f, r, &copy, &e);
    if (!fmt)
        return keep(&e);
    emu_tensor t;
    wrap(&t, site, ro, fmt, n, 0, out);
    if (!emu_commit_measures(&s->ctx)) {
        /* Nothing measured: the array rounding with the words the choke
         * point would use (this op's stream, element i's index), then
         * the commit that only advances the op index. */
        emu_array_rounding a = { .rnd = r->rnd, .seed = s->ctx.seed,
                                 .stream = emu_ctx_stream(&s->ctx) };
        a.rnd.rng = NULL;
        if (emu_round_array_f32(fmt, out, in, n, &a, NULL, &e))
            return keep(&e);
        if (emu_commit(&s->ctx, &(emu_op_out){ .site = site, .kind = kind,
                                               .out = &t, .rnd = &r->rnd }))
            return ctx_failed(s);
        return 0;
    }
    load_op op = { .in = in };
    emu_op_out o = { .site = site, .kind = kind, .out = &t, .op = &op,
                     .fill32 = load_fill32, .ref = load_ref,
                     .inputs_had_nan = load_had_nan, .rnd = &r->rnd,
                     .store_early = true };
    if (emu_commit(&s->ctx, &o))
        return ctx_failed(s);
    return 0;
}

int emu_ffi_session_measure(emu_ffi_session *s, unsigned measure,
                            double ref_rate)
{
    if (!s)
        return fail(EMU_EINVAL, "session", "", "no session");
    if (measure & ~(unsigned)EMU_MEASURE_ALL)
        return fail(EMU_EINVAL, "session", "measure",
                    "measure is a sum of 1 (counters), 2 (histograms), 4 "
                    "(swamping) and 8 (MPFR sampling)");
    if (!(ref_rate >= 0 && ref_rate <= 1))
        return fail(EMU_EINVAL, "session", "ref_rate",
                    "ref_rate must lie in [0, 1]");
    s->ctx.measure = measure;
    s->ctx.ref_rate = ref_rate;
    return 0;
}

int emu_ffi_session_matmul(emu_ffi_session *s, const char *site,
                           const char *role, const emu_ffi_accum *accum,
                           const emu_ffi_format *out_fmt,
                           const emu_ffi_rounding *r, float *out,
                           const float *a, const float *b, size_t m,
                           size_t k, size_t n, int trans_a, int trans_b,
                           double alpha, int accumulate, const float *a_src,
                           const float *b_src)
{
    EMU_HOSTFP_GUARD;
    emu_role ro;
    if (!s || !site || !accum || !out_fmt || !r || !out || !a || !b)
        return fail(EMU_EINVAL, "session matmul", "",
                    "no session, site, accumulator, format, rounding or data");
    if (!m || !k || !n)
        return fail(EMU_EINVAL, "session matmul", "shape",
                    "empty matrix (M, K and N must be >= 1)");
    if (parse_role(role, &ro))
        return -1;
    emu_error e;
    emu_format copy;
    const emu_format *fmt = format_for(out_fmt, r, &copy, &e);
    if (!fmt)
        return keep(&e);
    emu_tensor ta, tb, tc, sa, sb;
    /* The inputs are read only; the tensor struct has no const view. */
    wrap(&ta, "a", ro, &s->binary32, trans_a ? k : m, trans_a ? m : k,
         (float *)a);
    wrap(&tb, "b", ro, &s->binary32, trans_b ? n : k, trans_b ? k : n,
         (float *)b);
    wrap(&tc, site, ro, fmt, m, n, out);
    emu_matmul_opts o = { .accum = &accum->acc, .trans_a = trans_a != 0,
                          .trans_b = trans_b != 0, .alpha = alpha,
                          .accumulate = accumulate != 0 };
    if (a_src) {
        wrap(&sa, "a_src", ro, &s->binary32, ta.shape[0], ta.shape[1],
             (float *)a_src);
        o.a_src = &sa;
    }
    if (b_src) {
        wrap(&sb, "b_src", ro, &s->binary32, tb.shape[0], tb.shape[1],
             (float *)b_src);
        o.b_src = &sb;
    }
    if (emu_t_matmul(&s->ctx, site, &tc, &ta, &tb, &o, &r->rnd))
        return ctx_failed(s);
    return 0;
}

/* The current step's rows (with the header first if header), appended to
 * *text (malloc'd, grown). */
static int step_rows(const emu_ffi_session *s, bool header, char **text,
                     size_t *len)
{
    char *t = NULL;
    size_t tl = 0;
    FILE *fp = open_memstream(&t, &tl);
    if (!fp)
        return fail(EMU_ENOMEM, "session", "", "out of memory");
    emu_error e;
    int rc = emu_stats_write_step_rows(&s->stats, fp, header, &e);
    fclose(fp);
    if (rc) {
        free(t);
        return keep(&e);
    }
    char *grown = realloc(*text, *len + tl + 1);
    if (!grown) {
        free(t);
        return fail(EMU_ENOMEM, "session", "", "out of memory");
    }
    memcpy(grown + *len, t, tl + 1);
    *text = grown;
    *len += tl;
    free(t);
    return 0;
}

int emu_ffi_session_begin_step(emu_ffi_session *s, int64_t step)
{
    if (!s)
        return fail(EMU_EINVAL, "session", "", "no session");
    if (step_rows(s, !s->stepping, &s->steps, &s->steps_len))
        return -1;
    s->stepping = true;
    emu_stats_begin_step(&s->stats, step);
    return 0;
}

static int write_text(FILE *fp, const void *arg)
{
    const char *t = arg;
    return fputs(t, fp) < 0 ? -1 : 0;
}

int emu_ffi_session_write(const emu_ffi_session *s, const char *dir)
{
    if (!s || !dir || !*dir)
        return fail(EMU_EINVAL, "session write", "dir", "no session or folder");
    if (mkdir(dir, 0777) && errno != EEXIST) {
        emu_error e;
        emu_fail(&e, EMU_EIO, dir, "", "cannot create the folder: %s",
                 strerror(errno));
        return keep(&e);
    }
    size_t dl = strlen(dir);
    char *path = malloc(dl + 32);
    if (!path)
        return fail(EMU_ENOMEM, "session write", "", "out of memory");
    emu_error e;
    int rc = 0;
    snprintf(path, dl + 32, "%s/ops.csv", dir);
    rc = emu_stats_write_csv(&s->stats, path, &e);
    if (!rc) {
        snprintf(path, dl + 32, "%s/hist.csv", dir);
        rc = emu_stats_write_hist_csv(&s->stats, path, &e);
    }
    if (!rc) {
        snprintf(path, dl + 32, "%s/ops.json", dir);
        rc = emu_stats_write_json(&s->stats, path, &e);
    }
    if (!rc && s->stepping) {
        /* The steps that ended, and the current one's rows so far. */
        char *text = NULL;
        size_t len = 0;
        if (s->steps_len) {
            text = malloc(s->steps_len + 1);
            if (!text) {
                free(path);
                return fail(EMU_ENOMEM, "session write", "", "out of memory");
            }
            memcpy(text, s->steps, s->steps_len + 1);
            len = s->steps_len;
        }
        if (step_rows(s, len == 0, &text, &len)) {
            free(text);
            free(path);
            return -1;
        }
        snprintf(path, dl + 32, "%s/ops_steps.csv", dir);
        rc = emu_write_atomic(path, write_text, text, &e);
        free(text);
    }
    free(path);
    return rc ? keep(&e) : 0;
}

size_t emu_ffi_session_site_count(const emu_ffi_session *s)
{
    return s ? emu_stats_site_count(&s->stats) : 0;
}

static const emu_site *site_at(const emu_ffi_session *s, size_t i)
{
    const emu_site *site = s ? emu_stats_site_at(&s->stats, i) : NULL;
    if (!site) {
        emu_error e;
        emu_fail(&e, EMU_EINVAL, "session", "site", "no site %zu", i);
        keep(&e);
    }
    return site;
}

int emu_ffi_session_site_str(const emu_ffi_session *s, size_t i,
                             const char *key, char *buf, size_t size)
{
    const emu_site *site = site_at(s, i);
    if (!site)
        return -1;
    const char *v = !key                     ? NULL
                    : !strcmp(key, "name")   ? site->name
                    : !strcmp(key, "kind")   ? site->kind
                    : !strcmp(key, "role")   ? emu_role_name(site->role)
                    : !strcmp(key, "format") ? site->format
                                             : NULL;
    if (!v) {
        emu_error e;
        emu_fail(&e, EMU_EINVAL, "session", "key",
                 "'%s' is not a site field (name, kind, role, format)",
                 key ? key : "(null)");
        return keep(&e);
    }
    return put_str(v, buf, size, "session");
}

static int check_span(int span)
{
    if (span == EMU_SPAN_TOTAL || span == EMU_SPAN_STEP)
        return 0;
    return fail(EMU_EINVAL, "session", "span", "span is 0 (run) or 1 (step)");
}

int emu_ffi_session_counters(const emu_ffi_session *s, size_t i, int span,
                             double *out, size_t n)
{
    EMU_HOSTFP_GUARD;
    const emu_site *site = site_at(s, i);
    if (!site || check_span(span))
        return -1;
    if (!out || n != emu_stats_counter_count())
        return fail(EMU_EINVAL, "session", "n",
                    "the output must hold emu_stats_counter_count() values");
    for (size_t k = 0; k < n; k++)
        if (emu_stats_counter(site, (emu_stats_span)span,
                              emu_stats_counter_name(k), &out[k]))
            return fail(EMU_ESTATE, "session", "", "counter table changed");
    return 0;
}

int emu_ffi_session_hist(const emu_ffi_session *s, size_t i, int span,
                         const char *which, uint64_t *out, size_t n)
{
    const emu_site *site = site_at(s, i);
    if (!site || check_span(span))
        return -1;
    if (!out || n != EMU_HIST_BINS)
        return fail(EMU_EINVAL, "session", "n",
                    "the output must hold EMU_HIST_BINS values");
    if (!which || emu_stats_hist(site, (emu_stats_span)span, which, out)) {
        emu_error e;
        emu_fail(&e, EMU_EINVAL, "session", "which",
                 "'%s' is not a histogram (exact, rounded, scale)",
                 which ? which : "(null)");
        return keep(&e);
    }
    return 0;
}

size_t emu_ffi_hist_bins(void) { return EMU_HIST_BINS; }

/* ---- block-scaled quantization ---------------------------------------------------- */

struct emu_ffi_quant {
    emu_scaled_tensor q;
    bool done;               /* quantized at least once                   */
};

int emu_ffi_quant_new(const char *spec, int ndim, const size_t *shape,
                      int axis, emu_ffi_quant **out)
{
    if (!out)
        return fail(EMU_EINVAL, "quantize", "out", "no output handle");
    *out = NULL;
    if (!spec || !shape)
        return fail(EMU_EINVAL, "quantize", "", "no spec or shape");
    emu_scaled_format sf;
    emu_error e;
    if (emu_scaled_format_parse(&sf, spec, &e))
        return keep(&e);
    emu_ffi_quant *h = calloc(1, sizeof *h);
    if (!h)
        return fail(EMU_ENOMEM, "quantize", "", "out of memory");
    if (emu_scaled_alloc(&h->q, &sf, ndim, shape, axis, &e)) {
        free(h);
        return keep(&e);
    }
    *out = h;
    return 0;
}

void emu_ffi_quant_free(emu_ffi_quant *q)
{
    if (!q)
        return;
    emu_scaled_free(&q->q);
    free(q);
}

int emu_ffi_quant_spec(const emu_ffi_quant *q, char *buf, size_t size)
{
    if (!q)
        return fail(EMU_EINVAL, "quantize", "", "no scaled tensor");
    char s[512];
    emu_scaled_format_string(&q->q.sf, s, sizeof s);
    return put_str(s, buf, size, "quantize");
}

size_t emu_ffi_quant_nblocks(const emu_ffi_quant *q)
{
    return q ? q->q.nblocks : 0;
}

double emu_ffi_quant_bits_per_element(const emu_ffi_quant *q)
{
    EMU_HOSTFP_GUARD;
    return q ? emu_scaled_bits_per_element(&q->q.sf) : 0;
}

static const char *const qcounts_names[] = {
    "n", "blocks", "clipped", "flushed", "inexact", "nonfinite_blocks",
    "scale_clamped", "err_sq", "ref_sq", "err_max",
};
enum { N_QCOUNTS = sizeof qcounts_names / sizeof qcounts_names[0] };
static const char *const qblock_names[] = {
    "amax", "clipped", "flushed", "inexact", "err_sq", "ref_sq",
};
enum { N_QBLOCK = sizeof qblock_names / sizeof qblock_names[0] };

size_t emu_ffi_quant_counts_count(void) { return N_QCOUNTS; }
const char *emu_ffi_quant_counts_name(size_t i)
{
    return i < N_QCOUNTS ? qcounts_names[i] : NULL;
}
size_t emu_ffi_quant_block_count(void) { return N_QBLOCK; }
const char *emu_ffi_quant_block_name(size_t i)
{
    return i < N_QBLOCK ? qblock_names[i] : NULL;
}

/* The totals as emu_ffi_quant_counts_name lists them (counts may be NULL). */
static void put_qcounts(double *counts, const emu_quant_counts *c)
{
    if (!counts)
        return;
    const double v[N_QCOUNTS] = {
        (double)c->n,        (double)c->blocks,  (double)c->clipped,
        (double)c->flushed,  (double)c->inexact, (double)c->nonfinite_blocks,
        (double)c->scale_clamped, c->err_sq,     c->ref_sq,
        c->err_max,
    };
    memcpy(counts, v, sizeof v);
}

int emu_ffi_quant_run(emu_ffi_quant *q, const float *x, const char *mode,
                      uint64_t seed, uint64_t stream, double tensor_scale,
                      double *counts, double *blocks)
{
    EMU_HOSTFP_GUARD;
    if (!q || !x)
        return fail(EMU_EINVAL, "quantize", "", "no scaled tensor or data");
    emu_quant_opts o = { .seed = seed, .stream = stream,
                         .tensor_scale = tensor_scale };
    if (!mode || emu_rnd_parse(mode, &o.mode, &o.sr_bits)) {
        emu_error e;
        emu_fail(&e, EMU_EINVAL, "quantize", "mode",
                 "'%s' is not a rounding mode (rne rna rz ru rd ro sr srN "
                 "with N = 1..64)", mode ? mode : "(null)");
        return keep(&e);
    }
    emu_quant_counts c;
    memset(&c, 0, sizeof c);
    emu_block_stats *bs = NULL;
    if (blocks) {
        bs = calloc(q->q.nblocks ? q->q.nblocks : 1, sizeof *bs);
        if (!bs)
            return fail(EMU_ENOMEM, "quantize", "", "out of memory");
    }
    emu_error e;
    int rc = emu_scaled_quantize(&q->q, x, &o, &c, bs, &e);
    if (rc) {
        free(bs);
        return keep(&e);
    }
    q->done = true;
    put_qcounts(counts, &c);
    if (bs) {
        for (size_t b = 0; b < q->q.nblocks; b++) {
            double *row = blocks + b * N_QBLOCK;
            row[0] = bs[b].amax;
            row[1] = bs[b].clipped;
            row[2] = bs[b].flushed;
            row[3] = bs[b].inexact;
            row[4] = bs[b].err_sq;
            row[5] = bs[b].ref_sq;
        }
        free(bs);
    }
    return 0;
}

int emu_ffi_session_quantize(emu_ffi_session *s, const char *site,
                             const char *role, emu_ffi_quant *q,
                             const float *x, const emu_ffi_rounding *r,
                             double tensor_scale, double *counts)
{
    EMU_HOSTFP_GUARD;
    emu_role ro;
    if (!s || !site || !q || !x || !r)
        return fail(EMU_EINVAL, "session quantize", "",
                    "no session, site, scaled tensor, data or rounding");
    if (parse_role(role, &ro))
        return -1;
    /* x, read only, as a binary32 tensor of the scaled tensor's shape */
    emu_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", site);
    t.role = ro;
    t.fmt = s->binary32;
    t.ndim = q->q.ndim;
    for (int d = 0; d < q->q.ndim; d++)
        t.shape[d] = q->q.shape[d];
    t.n = q->q.n;
    t.data = (float *)x;
    emu_quant_opts o = { .tensor_scale = tensor_scale };
    emu_quant_counts c;
    memset(&c, 0, sizeof c);
    if (emu_t_quantize_scaled(&s->ctx, site, &q->q, &t, &o, &c, &r->rnd))
        return ctx_failed(s);
    q->done = true;
    put_qcounts(counts, &c);
    return 0;
}

static int check_done(const emu_ffi_quant *q, const void *out, size_t n,
                      size_t need)
{
    if (!q || !out)
        return fail(EMU_EINVAL, "quantize", "", "no scaled tensor or output");
    if (!q->done)
        return fail(EMU_ESTATE, "quantize", "", "nothing quantized yet");
    if (n != need) {
        emu_error e;
        emu_fail(&e, EMU_EINVAL, "quantize", "n",
                 "output of %zu values, %zu needed", n, need);
        return keep(&e);
    }
    return 0;
}

int emu_ffi_quant_values_f32(const emu_ffi_quant *q, float *out, size_t n)
{
    EMU_HOSTFP_GUARD;
    if (check_done(q, out, n, q ? q->q.n : 0))
        return -1;
    /* The exact values, rounded once into binary32 (the identity unless
     * a tensor scale gives them more bits than binary32 has). */
    const emu_format *b32 = emu_format_find("binary32");
    if (!b32)
        return fail(EMU_ESTATE, "quantize", "", "binary32 is not registered");
    emu_array_rounding a = { .rnd = { .mode = EMU_RNE } };
    double v[BITS_CHUNK];
    emu_error e;
    for (size_t at = 0; at < n; at += BITS_CHUNK) {
        size_t m = n - at < BITS_CHUNK ? n - at : BITS_CHUNK;
        for (size_t i = 0; i < m; i++)
            v[i] = emu_scaled_value(&q->q, at + i);
        if (emu_round_array_f64(b32, v, v, m, &a, NULL, &e))
            return keep(&e);
        for (size_t i = 0; i < m; i++)
            out[at + i] = (float)v[i];
    }
    return 0;
}

int emu_ffi_quant_values_f64(const emu_ffi_quant *q, double *out, size_t n)
{
    EMU_HOSTFP_GUARD;
    if (check_done(q, out, n, q ? q->q.n : 0))
        return -1;
    for (size_t i = 0; i < n; i++)
        out[i] = emu_scaled_value(&q->q, i);
    return 0;
}

int emu_ffi_quant_elements(const emu_ffi_quant *q, float *out, size_t n)
{
    EMU_HOSTFP_GUARD;
    if (check_done(q, out, n, q ? q->q.n : 0))
        return -1;
    memcpy(out, q->q.elem, n * sizeof *out);
    return 0;
}

int emu_ffi_quant_scales(const emu_ffi_quant *q, float *out, size_t n)
{
    EMU_HOSTFP_GUARD;
    if (check_done(q, out, n, q ? q->q.nblocks : 0))
        return -1;
    memcpy(out, q->q.scale, n * sizeof *out);
    return 0;
}

double emu_ffi_quant_tensor_scale(const emu_ffi_quant *q)
{
    EMU_HOSTFP_GUARD;
    return q ? q->q.tensor_scale : 0;
}

size_t emu_ffi_quant_packed_size(const emu_ffi_quant *q)
{
    return q ? emu_scaled_packed_size(&q->q) : 0;
}

int emu_ffi_quant_pack(const emu_ffi_quant *q, uint8_t *buf, size_t size)
{
    if (check_done(q, buf, size, size))
        return -1;
    emu_error e;
    return emu_scaled_pack(&q->q, buf, size, &e) ? keep(&e) : 0;
}

/* ---- policies ------------------------------------------------------------------------ */

int emu_ffi_policy_json(const char *name, const char *assignments,
                        char *buf, size_t size, size_t *needed)
{
    EMU_HOSTFP_GUARD;
    if (!name || !needed)
        return fail(EMU_EINVAL, "policy", "", "no policy name or output");
    emu_policy p;
    emu_error e;
    if (emu_policy_preset(&p, name, &e))
        return keep(&e);
    if (assignments) {
        char *copy = strdup(assignments);
        if (!copy)
            return fail(EMU_ENOMEM, "policy", "", "out of memory");
        int rc = 0;
        for (char *line = copy, *next; line && !rc; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            if (*line)
                rc = emu_policy_set(&p, line, &e);
        }
        free(copy);
        if (rc)
            return keep(&e);
    }
    if (emu_policy_validate(&p, &e))
        return keep(&e);
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    if (!fp)
        return fail(EMU_ENOMEM, "policy", "", "out of memory");
    emu_policy_write_json(&p, fp, 0);
    fclose(fp);
    *needed = len;
    if (buf && size > len)
        memcpy(buf, text, len + 1);
    free(text);
    return 0;
}
