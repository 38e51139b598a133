/*
 * dpi.c — the DPI-C golden model (emu/dpi.h): handles that hold a unit's
 * settings, and the operations a SystemVerilog testbench calls on them.
 *
 * The arithmetic is the library's own (emu_bits_op, emu_accum_dot_init,
 * emu_round2_word): this file only resolves names once, keeps the
 * results, and turns patterns into values and back.  Handles live in a
 * fixed table written under a mutex and published with a release store of
 * the count, so that readers in other threads need no lock.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/dpi.h"

#include "emu/accum.h"
#include "emu/arith.h"
#include "emu/scaled.h"

#include "internal.h"

#include <math.h>
#include <mpfr.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <threads.h>

enum unit_kind { UNIT_SCALAR, UNIT_DOT, UNIT_SCALED };

typedef struct unit {
    enum unit_kind kind;
    char key[512];        /* the open call's arguments, to find it again */
    emu_format in, out;
    emu_rounding rnd;     /* scalar ops, or a dot's output rounding       */
    emu_accum model;      /* UNIT_DOT, UNIT_SCALED                        */
    emu_scaled_format sf; /* UNIT_SCALED                                  */
} unit;

static unit units[EMU_DPI_MAX_HANDLES];
static atomic_int unit_count;
static mtx_t open_lock;
static once_flag open_once = ONCE_FLAG_INIT;

static _Thread_local char last_error[512];

const char *emu_dpi_last_error(void)
{
    return last_error;
}

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}

static int fail_err(const char *what, const emu_error *err)
{
    char msg[600];
    emu_error_format(err, msg, sizeof msg);
    return fail("%s: %s", what, msg);
}

/* The settings string of emu_dpi_open: "MODE,sat,tiny=before,profile=ieee". */
static int parse_settings(const char *settings, emu_rounding *r)
{
    memset(r, 0, sizeof *r);
    r->mode = EMU_RNE;
    if (!settings)
        return 0;
    char buf[256];
    if (strlen(settings) >= sizeof buf)
        return fail("settings '%.40s...': longer than %zu characters",
                    settings, sizeof buf - 1);
    strcpy(buf, settings);
    for (char *item = buf, *next; item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        char *val = strchr(item, '=');
        if (val)
            *val++ = '\0';
        if (!*item && !val)
            continue;
        if (!val && (!strcmp(item, "sat") || !strcmp(item, "saturate"))) {
            r->saturate = true;
        } else if (!strcmp(item, "tiny") && val) {
            if (!strcmp(val, "after"))
                r->tininess = EMU_TINY_AFTER;
            else if (!strcmp(val, "before"))
                r->tininess = EMU_TINY_BEFORE;
            else
                return fail("settings '%s': tiny=%s: not after or before",
                            settings, val);
        } else if (!strcmp(item, "profile") && val) {
            if (emu_profile_parse(val, &r->profile, NULL))
                return fail("settings '%s': profile=%s: not a profile (%s)",
                            settings, val, emu_profile_names());
        } else if (!val || !strcmp(item, "mode")) {
            const char *m = val ? val : item;
            if (emu_rnd_parse(m, &r->mode, &r->sr_bits))
                return fail("settings '%s': '%s' is not a rounding mode "
                            "or a setting (sat, tiny=, profile=)",
                            settings, m);
        } else {
            return fail("settings '%s': unknown key '%s'", settings, item);
        }
    }
    return 0;
}

static int resolve(emu_format *f, const char *spec, const char *role)
{
    emu_error err;
    if (!spec || !*spec)
        return fail("%s format: empty", role);
    if (emu_format_resolve(f, spec, &err))
        return fail_err(role, &err);
    return 0;
}

static void init_lock(void)
{
    mtx_init(&open_lock, mtx_plain);
}

/* Finds a unit with u's key or adds u; returns its handle or -1. */
static int find_or_add(const unit *u)
{
    call_once(&open_once, init_lock);
    mtx_lock(&open_lock);
    int n = atomic_load_explicit(&unit_count, memory_order_relaxed);
    int h = -1;
    for (int i = 0; i < n && h < 0; i++)
        if (units[i].kind == u->kind && !strcmp(units[i].key, u->key))
            h = i;
    if (h < 0 && n < EMU_DPI_MAX_HANDLES) {
        units[n] = *u;
        atomic_store_explicit(&unit_count, n + 1, memory_order_release);
        h = n;
    }
    mtx_unlock(&open_lock);
    if (h < 0)
        return fail("too many handles (%d): open each unit's settings once",
                    EMU_DPI_MAX_HANDLES);
    return h;
}

static int make_key(unit *u, const char *a, const char *b, const char *c,
                    const char *d)
{
    int n = snprintf(u->key, sizeof u->key, "%s\x1f%s\x1f%s\x1f%s",
                     a ? a : "", b ? b : "", c ? c : "", d ? d : "");
    if (n < 0 || (size_t)n >= sizeof u->key)
        return fail("settings too long (%d characters)", n);
    return 0;
}

static int open_model(unit *u, const char *accum);

int emu_dpi_open(const char *in, const char *out, const char *settings)
{
    unit u;
    memset(&u, 0, sizeof u);
    u.kind = UNIT_SCALAR;
    if (make_key(&u, in, out, settings, NULL) ||
        parse_settings(settings, &u.rnd) || resolve(&u.in, in, "in"))
        return -1;
    if (out && *out) {
        if (resolve(&u.out, out, "out"))
            return -1;
    } else {
        u.out = u.in;
    }
    return find_or_add(&u);
}

int emu_dpi_open_dot(const char *in, const char *accum, const char *out,
                     const char *settings)
{
    unit u;
    memset(&u, 0, sizeof u);
    u.kind = UNIT_DOT;
    if (make_key(&u, in, accum, out, settings) ||
        parse_settings(settings, &u.rnd) || resolve(&u.in, in, "in"))
        return -1;
    if (!u.in.fits_carrier)
        return fail("in format '%s': its values are not all binary32 values",
                    in);
    if (!accum || !*accum)
        return fail("accum: empty");
    if (open_model(&u, accum))
        return -1;
    if (out && *out) {
        if (resolve(&u.out, out, "out"))
            return -1;
    } else {
        u.out = u.model.acc;
    }
    return find_or_add(&u);
}

/* The accumulator model of a dot unit (u->model) from spec, "" = exact. */
static int open_model(unit *u, const char *accum)
{
    const char *spec = accum && *accum ? accum : "exact";
    emu_error err;
    if (emu_accum_parse(&u->model, spec, &err) ||
        emu_accum_validate(&u->model, &err))
        return fail_err("accum", &err);
    if (u->model.kind == EMU_ACCUM_FAST)
        return fail("accum '%s': the fast model is the host's arithmetic, "
                    "not a golden model", spec);
    if (emu_rnd_is_stochastic(u->model.rnd.mode))
        return fail("accum '%s': stochastic accumulation needs random "
                    "words, which this interface does not take", spec);
    if (emu_rnd_is_stochastic(u->rnd.mode))
        return fail("settings: stochastic mode %s: dot-product units take "
                    "no random words (scalar ones do: emu_dpi_op_word)",
                    emu_rnd_name(u->rnd.mode));
    return 0;
}

int emu_dpi_open_scaled(const char *scaled, const char *accum,
                        const char *out, const char *settings)
{
    unit u;
    memset(&u, 0, sizeof u);
    u.kind = UNIT_SCALED;
    emu_error err;
    if (make_key(&u, scaled, accum, out, settings) ||
        parse_settings(settings, &u.rnd) || open_model(&u, accum))
        return -1;
    if (!scaled || emu_scaled_format_parse(&u.sf, scaled, &err))
        return scaled ? fail_err("scaled", &err) : fail("scaled: empty");
    if (u.sf.int_elem)
        return fail("scaled '%s': integer elements (two's complement "
                    "codes) are not supported yet", scaled);
    if (u.sf.block_scaled && u.sf.block[1] > 1)
        return fail("scaled '%s': 2-D blocks; a dot product takes 1-D ones",
                    scaled);
    if (resolve(&u.in, "binary32", "binary32")) /* the tensor scales */
        return -1;
    if (out && *out)
        return resolve(&u.out, out, "out") ? -1 : find_or_add(&u);
    u.out = u.in;
    return find_or_add(&u);
}

static const char *const kind_name[] = {
    [UNIT_SCALAR] = "scalar", [UNIT_DOT] = "dot-product",
    [UNIT_SCALED] = "block-scaled dot-product",
};

static const unit *get(int h, enum unit_kind kind)
{
    int n = atomic_load_explicit(&unit_count, memory_order_acquire);
    if (h < 0 || h >= n) {
        fail("handle %d: not opened", h);
        return NULL;
    }
    if (units[h].kind != kind) {
        fail("handle %d: a %s unit, not a %s unit", h,
             kind_name[units[h].kind], kind_name[kind]);
        return NULL;
    }
    return &units[h];
}

/* word is the stochastic rounding's random word, NULL for the word-less
 * calls; a deterministic handle ignores it. */
static int scalar(int h, emu_op op, emu_dpi_u64 a, emu_dpi_u64 b,
                  emu_dpi_u64 c, const emu_dpi_u64 *word, emu_dpi_u64 *r,
                  emu_dpi_u32 *flags)
{
    EMU_HOSTFP_GUARD;
    const unit *u = get(h, UNIT_SCALAR);
    if (!u)
        return -1;
    if (!word && emu_rnd_is_stochastic(u->rnd.mode) && !emu_op_is_compare(op))
        return fail("%s: handle %d rounds stochastically (%s): call "
                    "emu_dpi_op_word with the random word", emu_op_name(op),
                    h, emu_rnd_name(u->rnd.mode));
    const emu_bits x[3] = { { a }, { b }, { c } };
    for (int i = 0; i < emu_op_arity(op); i++)
        if (u->in.bits < 64 && x[i].v >> u->in.bits)
            return fail("%s: operand %d (0x%llx) is wider than %s's %d bits",
                        emu_op_name(op), i + 1, (unsigned long long)x[i].v,
                        u->in.name, u->in.bits);
    emu_bits res = { 0 };
    emu_status st;
    emu_error e;
    int rc = word ? emu_bits_op_word(op, &u->in, &u->out, x, &u->rnd, *word,
                                     &res, &st, &e)
                  : emu_bits_op(op, &u->in, &u->out, x, &u->rnd, &res, &st,
                                &e);
    if (rc)
        return fail("%s from %s to %s: %s", emu_op_name(op), u->in.name,
                    u->out.name, e.message);
    *r = res.v;
    *flags = st.flags & EMU_FLAG_TESTFLOAT_MASK;
    return 0;
}

int emu_dpi_add(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
                emu_dpi_u32 *flags)
{
    return scalar(h, EMU_OP_ADD, a, b, 0, NULL, r, flags);
}

int emu_dpi_sub(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
                emu_dpi_u32 *flags)
{
    return scalar(h, EMU_OP_SUB, a, b, 0, NULL, r, flags);
}

int emu_dpi_mul(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
                emu_dpi_u32 *flags)
{
    return scalar(h, EMU_OP_MUL, a, b, 0, NULL, r, flags);
}

int emu_dpi_div(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
                emu_dpi_u32 *flags)
{
    return scalar(h, EMU_OP_DIV, a, b, 0, NULL, r, flags);
}

int emu_dpi_sqrt(int h, emu_dpi_u64 a, emu_dpi_u64 *r, emu_dpi_u32 *flags)
{
    return scalar(h, EMU_OP_SQRT, a, 0, 0, NULL, r, flags);
}

int emu_dpi_fma(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 c,
                emu_dpi_u64 *r, emu_dpi_u32 *flags)
{
    return scalar(h, EMU_OP_FMA, a, b, c, NULL, r, flags);
}

int emu_dpi_convert(int h, emu_dpi_u64 a, emu_dpi_u64 *r, emu_dpi_u32 *flags)
{
    return scalar(h, EMU_OP_CONVERT, a, 0, 0, NULL, r, flags);
}

int emu_dpi_eq(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
               emu_dpi_u32 *flags)
{
    return scalar(h, EMU_OP_EQ, a, b, 0, NULL, r, flags);
}

int emu_dpi_lt(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
               emu_dpi_u32 *flags)
{
    return scalar(h, EMU_OP_LT, a, b, 0, NULL, r, flags);
}

int emu_dpi_le(int h, emu_dpi_u64 a, emu_dpi_u64 b, emu_dpi_u64 *r,
               emu_dpi_u32 *flags)
{
    return scalar(h, EMU_OP_LE, a, b, 0, NULL, r, flags);
}

static int op_word(int h, const char *op, emu_dpi_u64 a, emu_dpi_u64 b,
                   emu_dpi_u64 c, const emu_dpi_u64 *word, emu_dpi_u64 *r,
                   emu_dpi_u32 *flags)
{
    emu_op o;
    if (emu_op_parse(op, &o))
        return fail("op '%s': not one of add sub mul div sqrt fma convert "
                    "eq lt le", op ? op : "(null)");
    return scalar(h, o, a, b, c, word, r, flags);
}

int emu_dpi_op(int h, const char *op, emu_dpi_u64 a, emu_dpi_u64 b,
               emu_dpi_u64 c, emu_dpi_u64 *r, emu_dpi_u32 *flags)
{
    return op_word(h, op, a, b, c, NULL, r, flags);
}

int emu_dpi_op_word(int h, const char *op, emu_dpi_u64 a, emu_dpi_u64 b,
                    emu_dpi_u64 c, emu_dpi_u64 word, emu_dpi_u64 *r,
                    emu_dpi_u32 *flags)
{
    return op_word(h, op, a, b, c, &word, r, flags);
}

/* The value of pattern p of f, or -1 naming it if p is wider than f. */
static int decode(const emu_format *f, emu_dpi_u64 p, const char *what,
                  int i, double *v)
{
    if (f->bits < 64 && p >> f->bits)
        return fail("dot: %s[%d] (0x%llx) is wider than %s's %d bits", what,
                    i, p, f->name, f->bits);
    *v = emu_decode(f, (emu_bits){ p });
    return 0;
}

/* The unit's output: hi + lo rounded into out, as a pattern. */
static int round_out(const unit *u, double hi, double lo, emu_dpi_u64 *r,
                     emu_dpi_u32 *flags)
{
    emu_status st;
    double d = emu_round2_word(&u->out, hi, lo, &u->rnd, 0, &st);
    emu_bits res = { 0 };
    if (isnan(d)) {
        if (!emu_nan_bits(&u->out, &res))
            st.flags |= EMU_FLAG_INVALID;
    } else if (!emu_encode(&u->out, d, &res)) {
        return fail("dot: a result %s cannot hold (%a): a libemu bug",
                    u->out.name, d);
    }
    *r = res.v;
    *flags = st.flags & EMU_FLAG_TESTFLOAT_MASK;
    return 0;
}

int emu_dpi_dot(int h, int k, const emu_dpi_u64 *a, const emu_dpi_u64 *b,
                emu_dpi_u64 c, emu_dpi_u64 *r, emu_dpi_u32 *flags)
{
    EMU_HOSTFP_GUARD;
    const unit *u = get(h, UNIT_DOT);
    if (!u)
        return -1;
    if (k < 0 || k > EMU_DPI_MAX_K)
        return fail("dot: k = %d, not from 0 to %d", k, EMU_DPI_MAX_K);
    float x[EMU_DPI_MAX_K], y[EMU_DPI_MAX_K];
    double v = 0.0, init = 0.0;
    for (int i = 0; i < k; i++) {
        if (decode(&u->in, a[i], "a", i, &v))
            return -1;
        x[i] = (float)v; /* exact: the format fits the carrier */
        if (decode(&u->in, b[i], "b", i, &v))
            return -1;
        y[i] = (float)v;
    }
    if (decode(&u->model.acc, c, "c", 0, &init))
        return -1;
    double lo = 0.0;
    double hi = emu_accum_dot_init(&lo, NULL, &u->model, init, x, 1, y, 1,
                                   (size_t)k, NULL);
    return round_out(u, hi, lo, r, flags);
}

int emu_dpi_dot4(int h, emu_dpi_u64 a0, emu_dpi_u64 b0, emu_dpi_u64 a1,
                 emu_dpi_u64 b1, emu_dpi_u64 a2, emu_dpi_u64 b2,
                 emu_dpi_u64 a3, emu_dpi_u64 b3, emu_dpi_u64 c,
                 emu_dpi_u64 *r, emu_dpi_u32 *flags)
{
    const emu_dpi_u64 a[4] = { a0, a1, a2, a3 }, b[4] = { b0, b1, b2, b3 };
    return emu_dpi_dot(h, 4, a, b, c, r, flags);
}

/* e_i s_block(i) of one operand as binary32 values; -1 if one is not. */
static int scaled_values(const unit *u, int k, const emu_dpi_u64 *e,
                         const emu_dpi_u64 *s, const char *what, float *out)
{
    const size_t block = u->sf.block_scaled ? u->sf.block[0] : 0;
    double v = 0.0;
    for (int i = 0; i < k; i++) {
        if (decode(&u->sf.elem, e[i], what, i, &v))
            return -1;
        if (block) {
            double sv = 0.0;
            if (decode(&u->sf.scale, s[(size_t)i / block],
                       what[0] == 'a' ? "sa" : "sb", (int)((size_t)i / block),
                       &sv))
                return -1;
            v *= sv; /* exact in binary64: few significant bits */
        }
        out[i] = (float)v;
        if (!isnan(v) && (double)out[i] != v)
            return fail("dot_scaled: %s[%d] times its scale (%a) is not a "
                        "binary32", what, i, v);
    }
    return 0;
}

/* (hi + lo) g_a g_b exactly, back as a pair hi + lo (MPFR, so that no
 * host rounding can enter: 24 + 24 + 53 bits fit 256). */
static void scale_pair(double *hi, double *lo, double ga, double gb)
{
    if (!isfinite(*hi) || *hi == 0.0) {
        *hi = *hi * ga * gb; /* inf, NaN or a signed zero: exact */
        *lo = 0.0;
        return;
    }
    mpfr_t s, t;
    mpfr_inits2(256, s, t, (mpfr_ptr)0);
    mpfr_set_d(s, *hi, MPFR_RNDN);
    mpfr_set_d(t, *lo, MPFR_RNDN);
    mpfr_add(s, s, t, MPFR_RNDN);
    mpfr_mul_d(s, s, ga, MPFR_RNDN);
    mpfr_mul_d(s, s, gb, MPFR_RNDN);
    *hi = mpfr_get_d(s, MPFR_RNDN);
    mpfr_sub_d(s, s, *hi, MPFR_RNDN);
    *lo = isfinite(*hi) ? mpfr_get_d(s, MPFR_RNDN) : 0.0;
    mpfr_clears(s, t, (mpfr_ptr)0);
}

int emu_dpi_dot_scaled(int h, int k, const emu_dpi_u64 *a,
                       const emu_dpi_u64 *sa, const emu_dpi_u64 *b,
                       const emu_dpi_u64 *sb, emu_dpi_u64 ga, emu_dpi_u64 gb,
                       emu_dpi_u64 *r, emu_dpi_u32 *flags)
{
    EMU_HOSTFP_GUARD;
    const unit *u = get(h, UNIT_SCALED);
    if (!u)
        return -1;
    if (k < 0 || k > EMU_DPI_MAX_K)
        return fail("dot_scaled: k = %d, not from 0 to %d", k, EMU_DPI_MAX_K);
    float x[EMU_DPI_MAX_K], y[EMU_DPI_MAX_K];
    if (scaled_values(u, k, a, sa, "a", x) || scaled_values(u, k, b, sb, "b", y))
        return -1;
    double lo = 0.0;
    double hi = emu_accum_dot(&lo, NULL, &u->model, x, 1, y, 1, (size_t)k, NULL);
    if (u->sf.tensor_scale) {
        double g[2] = { 0.0, 0.0 };
        if (decode(&u->in, ga, "ga", 0, &g[0]) ||
            decode(&u->in, gb, "gb", 0, &g[1]))
            return -1;
        scale_pair(&hi, &lo, g[0], g[1]);
    }
    return round_out(u, hi, lo, r, flags);
}
