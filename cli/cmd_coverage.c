/*
 * cmd_coverage.c — `emu coverage FILE|-`: what a TestFloat-format vector
 * file exercises.  For each line it classifies the operands and the
 * emulator's result (zero, subnormal, normal, max, inf, NaN, signalling
 * NaN), where the exact result lies against the output grid (exact, a
 * tie, a near-tie, other inexact; overflow and underflow), and the flags
 * the emulator raises; then prints the counts and the classes no line
 * reached, so that a designer sees what a random set missed (TestFloat's
 * level 1/2 idea made visible).
 *
 * The exact result comes from GNU MPFR (exact for add, sub, mul, fma and
 * conversions at the precision below; div and sqrt to that precision with
 * a sticky ternary), so ties are told apart from near-ties without
 * trusting the rounding under test.
 *
 * A '#! emu-dot' file (emu dot gen) is replayed through emu dot verify's
 * model: its operands, its products against the accumulator's format,
 * cancellation and swamping inside the model, and the position of the
 * model's value (hi + lo, exact in binary64 pairs) before the output
 * rounding.  A '#! emu-dot-scaled' file (emu dot gen --scaled) is
 * replayed through the DPI model of emu dot verify --scaled: its element
 * codes, its block-scale codes in the scale format, the products of the
 * scaled elements, and the model's value times the tensor scales.
 */
#include "cli.h"
#include "vectors.h"

#include <errno.h>
#include <math.h>
#include <mpfr.h>
#include <stdlib.h>
#include <string.h>

/* Enough for any exact sum or fma of binary32 values (their exponents
 * span 2^-298 .. 2^256), and for conversions from binary64. */
enum { EXACT_PREC = 2400 };

enum opclass {
    OC_ZERO, OC_SUBNORMAL, OC_NORMAL, OC_MAX, OC_INF, OC_NAN, OC_SNAN,
    OC_COUNT
};
static const char *const opclass_name[OC_COUNT] = {
    "zero", "subnormal", "normal", "max", "inf", "nan", "snan",
};

enum rclass {
    RC_EXACT, RC_TIE, RC_NEAR_TIE, RC_INEXACT, RC_OVERFLOW, RC_UNDERFLOW,
    RC_COUNT
};
static const char *const rclass_name[RC_COUNT] = {
    "exact", "tie", "near-tie", "other inexact", "overflow", "underflow",
};
static const char *const rclass_help[RC_COUNT] = {
    "the exact result is a value of the output format",
    "the exact result is halfway between two neighbours",
    "within a quarter ulp of halfway, not on it",
    "any other rounded result",
    "beyond the largest finite value (the overflow flag)",
    "tiny and inexact (the underflow flag)",
};

static const char *const flag_name[5] = {
    "inexact", "underflow", "overflow", "infinite", "invalid",
};

/* A dot file's products t_i = A_i B_i (exact), against the accumulator's
 * format. */
enum pclass { PC_ZERO, PC_TINY, PC_NORMAL, PC_HUGE, PC_NONFINITE, PC_COUNT };
static const char *const pclass_name[PC_COUNT] = {
    "zero", "tiny", "normal", "huge", "inf/nan",
};
static const char *const pclass_help[PC_COUNT] = {
    "an exact zero",
    "non-zero, below the accumulator's normal range",
    "within the accumulator's normal range",
    "beyond the accumulator's largest finite value",
    "an inf or NaN factor",
};

/* What a dot file's line did inside the accumulator model. */
enum sclass { SC_CANCEL, SC_SWAMP, SC_LOST, SC_COUNT };
static const char *const sclass_name[SC_COUNT] = {
    "cancellation", "swamping", "lost bits",
};
static const char *const sclass_help[SC_COUNT] = {
    "the sum p(acc) or more binades below the largest product",
    "a non-zero addend left the accumulator unchanged",
    "an addend lost low bits to alignment or rounding",
};

/* A scaled file's block-scale codes, in the scale format (E8M0 has only
 * min, normal, max and NaN; min is listed where it is not a subnormal). */
enum scclass { SCL_ZERO, SCL_SUBNORMAL, SCL_MIN, SCL_NORMAL, SCL_MAX, SCL_NAN,
               SCL_COUNT };
static const char *const scclass_name[SCL_COUNT] = {
    "zero", "subnormal", "min", "normal", "max", "nan",
};

/* What the products and sums of a dot or scaled file can reach: the
 * non-zero |A_i B_i| lie in [pmin, pmax], the sums before the output
 * rounding are at most top and, if non-zero, at least bottom. */
typedef struct dotrange {
    const emu_format *in, *acc, *out;
    unsigned k;
    double pmin, pmax, bottom, top;
    bool nonfinite, nan; /* an inf or NaN factor; a NaN one */
    bool rounds;         /* the output rounding can have work */
} dotrange;

typedef struct coverage {
    cli_vecopts *v;
    cli_dotopts *d;      /* a '#! emu-dot' file; NULL for emu-vectors */
    cli_sdot *s;         /* a '#! emu-dot-scaled' file; else NULL */
    dotrange r;          /* for d or s */
    uint64_t scale[2][SCL_COUNT];
    uint64_t lines;
    uint64_t operand[VEC_MAX_OPERANDS][OC_COUNT];
    uint64_t result[OC_COUNT];
    uint64_t rounding[RC_COUNT];
    uint64_t flags[5];
    uint64_t product[PC_COUNT];
    uint64_t sum[SC_COUNT];
} coverage;

static enum opclass classify(const emu_format *f, uint64_t p)
{
    emu_bits b = { p };
    switch (emu_classify_bits(f, b)) {
    case EMU_CLASS_ZERO: return OC_ZERO;
    case EMU_CLASS_SUBNORMAL: return OC_SUBNORMAL;
    case EMU_CLASS_INF: return OC_INF;
    case EMU_CLASS_NAN: return emu_is_signaling(f, b) ? OC_SNAN : OC_NAN;
    default: return fabs(emu_decode(f, b)) == f->max ? OC_MAX : OC_NORMAL;
    }
}

/* The classes a format can hold at all (the others are not "missed"). */
static bool possible(const emu_format *f, enum opclass c)
{
    switch (c) {
    case OC_ZERO: return f->has_zero;
    case OC_SUBNORMAL: return f->subnormals && f->has_zero;
    case OC_INF: return f->has_inf;
    case OC_NAN: return f->has_nan;
    case OC_SNAN: return f->has_nan && f->specials == EMU_SPECIALS_IEEE;
    default: return true;
    }
}

static enum scclass scale_class(const emu_format *f, uint64_t p)
{
    switch (classify(f, p)) {
    case OC_ZERO: return SCL_ZERO;
    case OC_SUBNORMAL: return SCL_SUBNORMAL;
    case OC_MAX: return SCL_MAX;
    case OC_NAN: case OC_SNAN: case OC_INF: return SCL_NAN;
    default:
        return fabs(emu_decode(f, (emu_bits){ p })) == f->min_value
             ? SCL_MIN : SCL_NORMAL;
    }
}

static bool scale_possible(const coverage *c, int k)
{
    const emu_format *f = &c->s->sf.scale;
    switch (k) {
    case SCL_ZERO: return possible(f, OC_ZERO);
    case SCL_SUBNORMAL: return possible(f, OC_SUBNORMAL);
    case SCL_MIN: return !possible(f, OC_SUBNORMAL) && f->min_value < f->max;
    case SCL_NAN: return f->has_nan;
    default: return true;
    }
}

/* The exact result of the op into x; returns MPFR's ternary (non-zero
 * only if div or sqrt are not exact at EXACT_PREC), or 2 if the result is
 * not a finite number. */
static int exact_result(emu_op op, const double *v, mpfr_t x)
{
    mpfr_t t;
    mpfr_init2(t, EXACT_PREC);
    int ter = 0;
    mpfr_set_d(x, v[0], MPFR_RNDN);
    switch (op) {
    case EMU_OP_ADD: ter = mpfr_add_d(x, x, v[1], MPFR_RNDZ); break;
    case EMU_OP_SUB: ter = mpfr_sub_d(x, x, v[1], MPFR_RNDZ); break;
    case EMU_OP_MUL: ter = mpfr_mul_d(x, x, v[1], MPFR_RNDZ); break;
    case EMU_OP_DIV: ter = mpfr_div_d(x, x, v[1], MPFR_RNDZ); break;
    case EMU_OP_SQRT: ter = mpfr_sqrt(x, x, MPFR_RNDZ); break;
    case EMU_OP_FMA:
        mpfr_mul_d(x, x, v[1], MPFR_RNDZ);
        mpfr_set_d(t, v[2], MPFR_RNDN);
        ter = mpfr_add(x, x, t, MPFR_RNDZ);
        break;
    default: break; /* convert: x is the operand */
    }
    mpfr_clear(t);
    return mpfr_number_p(x) ? ter : 2;
}

/* Where the exact x lies between two neighbours of f (x finite, non-zero,
 * within f's range): its distance from the lower one in ulps. */
static enum rclass grid_position(const emu_format *f, mpfr_t x, int ter)
{
    long e = mpfr_get_exp(x) - 1; /* x in [2^e, 2^(e+1)) */
    long q = (e > f->emin ? e : f->emin) - (f->p - 1);
    mpfr_t y;
    mpfr_init2(y, EXACT_PREC);
    mpfr_abs(y, x, MPFR_RNDN);
    mpfr_mul_2si(y, y, -q, MPFR_RNDN);
    mpfr_frac(y, y, MPFR_RNDN); /* exact: y has no more bits than x */
    enum rclass c;
    if (mpfr_zero_p(y) && ter == 0) {
        c = RC_EXACT;
    } else if (mpfr_cmp_d(y, 0.5) == 0 && ter == 0) {
        c = RC_TIE;
    } else {
        mpfr_sub_d(y, y, 0.5, MPFR_RNDN);
        mpfr_abs(y, y, MPFR_RNDN);
        c = mpfr_cmp_ui_2exp(y, 1, -2) < 0 ? RC_NEAR_TIE : RC_INEXACT;
    }
    mpfr_clear(y);
    return c;
}

static void count_flags(coverage *c, unsigned flags)
{
    for (int k = 0; k < 5; k++)
        c->flags[k] += (flags >> k) & 1;
}

/* The result pattern's class, and where the exact value x lies on out's
 * grid (ter as exact_result's: 2 if x is not a finite number). */
static void count_result(coverage *c, const emu_format *out, uint64_t res,
                         unsigned flags, mpfr_t x, int ter)
{
    c->result[classify(out, res)]++;
    if (flags & EMU_FLAG_OVERFLOW)
        c->rounding[RC_OVERFLOW]++;
    if (flags & EMU_FLAG_UNDERFLOW)
        c->rounding[RC_UNDERFLOW]++;
    if (ter != 2 && !(flags & EMU_FLAG_OVERFLOW))
        c->rounding[mpfr_zero_p(x) ? RC_EXACT : grid_position(out, x, ter)]++;
}

static void count_case(coverage *c, const vec_case *vc)
{
    const cli_vecopts *v = c->v;
    int n = emu_op_arity(v->op);
    emu_bits ops[VEC_MAX_OPERANDS];
    double val[VEC_MAX_OPERANDS] = { 0.0, 0.0, 0.0 };
    for (int i = 0; i < n; i++) {
        ops[i].v = vc->operand[i];
        val[i] = emu_decode(&v->in, ops[i]);
        c->operand[i][classify(&v->in, ops[i].v)]++;
    }
    emu_rounding r = v->rnd;
    emu_rng rng = emu_rng_make(v->seed, c->lines);
    r.rng = &rng;
    emu_bits res;
    emu_status st;
    c->lines++;
    if (emu_bits_op(v->op, &v->in, &v->out, ops, &r, &res, &st, NULL))
        return; /* cannot happen after cli_vecopts_finish */
    count_flags(c, st.flags);
    if (emu_op_is_compare(v->op))
        return;
    mpfr_t x;
    mpfr_init2(x, EXACT_PREC);
    count_result(c, &v->out, res.v, st.flags, x, exact_result(v->op, val, x));
    mpfr_clear(x);
}

static enum pclass product_class(const emu_format *acc, double t)
{
    if (!isfinite(t))
        return PC_NONFINITE;
    if (t == 0.0)
        return PC_ZERO;
    if (fabs(t) < acc->min_normal)
        return PC_TINY;
    return fabs(t) > acc->max ? PC_HUGE : PC_NORMAL;
}

/* Whether some addend lost bits without being absorbed whole. */
static bool lost_bits(const emu_accum_counts *n)
{
    for (int b = 1; b < EMU_LOST_BINS - 1; b++)
        if (n->lost_bits[b])
            return true;
    return false;
}

/* The products t_i (exact: binary32 factors) against the accumulator's
 * format; returns the largest finite |t_i|. */
static double count_products(coverage *c, const double *t, unsigned k)
{
    double big = 0.0;
    for (unsigned i = 0; i < k; i++) {
        c->product[product_class(c->r.acc, t[i])]++;
        if (isfinite(t[i]))
            big = fmax(big, fabs(t[i]));
    }
    return big;
}

/* The model's value hi + lo times g[0] g[1], exactly into x (EXACT_PREC
 * holds it); returns 2 if it is not a finite number, else 0. */
static int model_value(mpfr_t x, double hi, double lo, const double *g)
{
    if (!isfinite(hi))
        return 2;
    mpfr_set_d(x, hi, MPFR_RNDN);
    mpfr_add_d(x, x, lo, MPFR_RNDN);
    mpfr_mul_d(x, x, g[0], MPFR_RNDN);
    mpfr_mul_d(x, x, g[1], MPFR_RNDN);
    return mpfr_number_p(x) ? 0 : 2;
}

/* One line of a dot file: 2K operands in ab.  The result, flags and the
 * accumulator's value come from the model, as emu dot verify checks. */
static void count_dot(coverage *c, const uint64_t *ab)
{
    const cli_dotopts *d = c->d;
    double t[CLI_DOT_MAX_K];
    for (unsigned i = 0; i < 2 * d->k; i++)
        c->operand[i & 1][classify(&d->in, ab[i])]++;
    for (unsigned i = 0; i < d->k; i++)
        t[i] = emu_decode(&d->in, (emu_bits){ ab[2 * i] }) *
               emu_decode(&d->in, (emu_bits){ ab[2 * i + 1] });
    double big = count_products(c, t, d->k);
    cli_dot_sum s;
    unsigned flags;
    uint64_t res = cli_dot_evaluate(d, ab, c->lines, &flags, &s);
    c->lines++;
    count_flags(c, flags);
    c->sum[SC_SWAMP] += s.counts.absorbed > 0;
    c->sum[SC_LOST] += lost_bits(&s.counts);
    mpfr_t x;
    mpfr_init2(x, EXACT_PREC);
    int ter = model_value(x, s.hi, s.lo, (const double[2]){ 1.0, 1.0 });
    if (!ter && big > 0.0 &&
        (mpfr_zero_p(x) || ilogb(big) - (mpfr_get_exp(x) - 1) >= c->r.acc->p))
        c->sum[SC_CANCEL]++;
    count_result(c, &d->out, res, flags, x, ter);
    mpfr_clear(x);
}

/* One operand of a scaled line: its element and scale codes, and its
 * values e_i s_block(i) into v. */
static void count_scaled_operand(coverage *c, int col, const emu_dpi_u64 *e,
                                 const emu_dpi_u64 *sc, double *v)
{
    const cli_sdot *s = c->s;
    for (unsigned i = 0; i < s->k; i++) {
        c->operand[col][classify(&s->sf.elem, e[i])]++;
        v[i] = emu_decode(&s->sf.elem, (emu_bits){ e[i] });
        if (s->sf.block_scaled)
            v[i] *= emu_decode(&s->sf.scale,
                               (emu_bits){ sc[i / s->sf.block[0]] });
    }
    for (unsigned j = 0; j < s->nblocks; j++)
        c->scale[col][scale_class(&s->sf.scale, sc[j])]++;
}

/* One line of a scaled file, through the DPI model as emu dot verify
 * --scaled checks it; NULL, or why the model refuses the case. */
static const char *count_scaled(coverage *c, const cli_sdot_case *sc)
{
    const cli_sdot *s = c->s;
    unsigned flags;
    const char *why;
    uint64_t res = cli_sdot_eval(s, sc, &flags, &why);
    if (why)
        return why;
    double x[CLI_SDOT_MAX_K], y[CLI_SDOT_MAX_K], g[2] = { 1.0, 1.0 };
    count_scaled_operand(c, 0, sc->a, sc->sa, x);
    count_scaled_operand(c, 1, sc->b, sc->sb, y);
    for (unsigned i = 0; i < s->k; i++)
        x[i] *= y[i]; /* exact: binary32 factors */
    count_products(c, x, s->k);
    if (s->sf.tensor_scale) {
        g[0] = emu_decode(&s->g32, (emu_bits){ sc->ga });
        g[1] = emu_decode(&s->g32, (emu_bits){ sc->gb });
    }
    double hi, lo;
    cli_sdot_sum(s, sc, &hi, &lo);
    c->lines++;
    count_flags(c, flags);
    mpfr_t v;
    mpfr_init2(v, EXACT_PREC);
    count_result(c, &s->out, res, flags, v, model_value(v, hi, lo, g));
    mpfr_clear(v);
    return NULL;
}

/* Whether a rounding class can occur at all.  A square root of a p-bit
 * value is never halfway between two p-bit values (the square of a
 * (p+1)-bit odd significand has 2p+1 bits), and it reaches the range's
 * ends only if the input range is wider than the output's. */
static bool scalar_rounding_possible(const cli_vecopts *v, int k)
{
    if (v->op != EMU_OP_SQRT)
        return true;
    switch (k) {
    case RC_TIE: return v->in.p > v->out.p;
    case RC_OVERFLOW: return sqrt(v->in.max) > v->out.max;
    case RC_UNDERFLOW: return sqrt(v->in.min_value) < v->out.min_normal;
    default: return true;
    }
}

/* A dot file's sums: |sum| <= K max^2, and a non-zero sum of the products
 * (multiples of min_value^2) is at least min_value^2.  A scaled file's
 * factors are e s, binary32 values; its tensor scales (any binary32) put
 * its sums anywhere. */
static dotrange dot_range(const cli_dotopts *d)
{
    const emu_format *acc = &d->model.acc, *out = &d->out;
    dotrange r = {
        .in = &d->in, .acc = acc, .out = out, .k = d->k,
        .pmin = d->in.min_value * d->in.min_value,
        .pmax = d->in.max * d->in.max,
        .nonfinite = d->in.has_inf || d->in.has_nan, .nan = d->in.has_nan,
        .rounds = d->model.kind == EMU_ACCUM_EXACT || acc->p > out->p ||
                  acc->qmin < out->qmin || acc->max > out->max,
    };
    r.bottom = r.pmin;
    r.top = d->k * r.pmax;
    return r;
}

static dotrange scaled_range(const cli_sdot *s)
{
    const emu_format *e = &s->sf.elem, *sc = &s->sf.scale;
    const emu_format *acc = &s->model.acc, *out = &s->out;
    double lo = s->sf.block_scaled ? e->min_value * sc->min_value
                                   : e->min_value;
    double hi = s->sf.block_scaled ? e->max * sc->max : e->max;
    lo = fmax(lo, 0x1p-149);
    hi = fmin(hi, s->g32.max);
    dotrange r = {
        .in = e, .acc = acc, .out = out, .k = s->k,
        .pmin = lo * lo, .pmax = hi * hi,
        .nonfinite = e->has_inf || e->has_nan ||
                     (s->sf.block_scaled && sc->has_nan),
        .rounds = s->sf.tensor_scale || s->model.kind == EMU_ACCUM_EXACT ||
                  acc->p > out->p || acc->qmin < out->qmin ||
                  acc->max > out->max,
    };
    r.nan = r.nonfinite;
    r.bottom = s->sf.tensor_scale ? 0.0 : r.pmin;
    r.top = s->sf.tensor_scale ? INFINITY : s->k * r.pmax;
    return r;
}

static bool is_dot(const coverage *c)
{
    return c->d || c->s;
}

/* The output rounding has work only if the model's value can fall off the
 * output's grid: the exact model, an accumulator finer or wider than the
 * output format, or tensor scales. */
static bool dot_rounding_possible(const dotrange *r, int k)
{
    switch (k) {
    case RC_EXACT: return true;
    case RC_OVERFLOW: return r->rounds && r->top > r->out->max;
    case RC_UNDERFLOW: return r->rounds && r->bottom < r->out->min_normal;
    default: return r->rounds;
    }
}

static bool rounding_possible(const coverage *c, int k)
{
    return is_dot(c) ? dot_rounding_possible(&c->r, k)
                     : scalar_rounding_possible(c->v, k);
}

static bool operand_possible(const coverage *c, int k)
{
    return possible(is_dot(c) ? c->r.in : &c->v->in, k);
}

/* Whether a result class can occur: a square root's results lie between
 * the square roots of the input range's ends; a dot product's as above. */
static bool result_possible(const coverage *c, int k)
{
    const emu_format *out = is_dot(c) ? c->r.out : &c->v->out;
    if (!possible(out, k) || k == OC_SNAN)
        return false;
    if (is_dot(c)) {
        const dotrange *r = &c->r;
        switch (k) {
        case OC_SUBNORMAL: return r->bottom < out->min_normal;
        case OC_MAX: return r->top >= out->max * (1 - out->unit_roundoff);
        case OC_INF: return r->in->has_inf || r->top > out->max ||
                            r->top > r->acc->max;
        case OC_NAN: return r->nonfinite;
        default: return true;
        }
    }
    const cli_vecopts *v = c->v;
    if (v->op == EMU_OP_SQRT && k == OC_SUBNORMAL)
        return rounding_possible(c, RC_UNDERFLOW);
    if (v->op == EMU_OP_SQRT && k == OC_MAX)
        return sqrt(v->in.max) >= v->out.max;
    return true;
}

/* Whether flag k can be raised at all by this op on these formats.  A dot
 * file's flags are those of the output rounding of the model's value (a
 * binary64 number or NaN): never infinite; invalid only for a scaled
 * file's NaN into an output format without one (the DPI model's rule). */
static bool flag_possible(const coverage *c, int k)
{
    const cli_vecopts *v = c->v;
    if (is_dot(c) && 1u << k == EMU_FLAG_INFINITE)
        return false;
    if (is_dot(c) && 1u << k == EMU_FLAG_INVALID)
        return c->s && c->r.nonfinite && !c->r.out->has_nan;
    if (!is_dot(c) && emu_op_is_compare(v->op))
        return 1u << k == EMU_FLAG_INVALID;
    switch (1u << k) {
    case EMU_FLAG_INEXACT: return rounding_possible(c, RC_INEXACT);
    case EMU_FLAG_UNDERFLOW: return rounding_possible(c, RC_UNDERFLOW);
    case EMU_FLAG_OVERFLOW: return rounding_possible(c, RC_OVERFLOW);
    case EMU_FLAG_INFINITE:
        return v->op == EMU_OP_DIV;
    default: /* invalid: inf * 0, inf - inf, a signalling NaN, ... */
        return v->op == EMU_OP_DIV || v->op == EMU_OP_SQRT ||
               v->op == EMU_OP_CONVERT || v->in.has_inf ||
               possible(&v->in, OC_SNAN);
    }
}

static bool product_possible(const coverage *c, int k)
{
    const dotrange *r = &c->r;
    switch (k) {
    case PC_ZERO: return r->in->has_zero;
    case PC_TINY: return r->pmin < r->acc->min_normal;
    case PC_HUGE: return r->pmax > r->acc->max;
    case PC_NONFINITE: return r->nonfinite;
    default: return true;
    }
}

/* Cancellation needs two products; swamping an accumulator that rounds
 * addition by addition and counts it (emu/accum.h). */
static bool sum_possible(const coverage *c, int k)
{
    const cli_dotopts *d = c->d;
    if (k == SC_CANCEL)
        return d->k > 1;
    return d->model.kind != EMU_ACCUM_EXACT && d->model.kind != EMU_ACCUM_FAST;
}

/* A registered name for a format read back from a header's inline spec
 * (e4m3 rather than "e4m3,bias=7,specials=fn,..."). */
static const char *short_name(const emu_format *f)
{
    char want[256], have[256];
    emu_format_spec_string(f, want, sizeof want);
    for (size_t i = 0; i < emu_format_count(); i++) {
        emu_format_spec_string(emu_format_at(i), have, sizeof have);
        if (!strcmp(want, have))
            return emu_format_at(i)->name;
    }
    return f->name;
}

static void title(const coverage *c, const char *name)
{
    char mode[16];
    if (c->s) {
        const cli_sdot *s = c->s;
        char accum[256];
        emu_accum_string(&s->model, accum, sizeof accum);
        cli_mode_name(&s->rnd, mode, sizeof mode);
        printf("%s: %llu lines, dot K=%u, scaled %s -> %s, accum %s, "
               "mode %s\n", name, (unsigned long long)c->lines, s->k,
               s->scaled_spec, short_name(&s->out), accum, mode);
        return;
    }
    if (c->d) {
        const cli_dotopts *d = c->d;
        char accum[256];
        emu_accum_string(&d->model, accum, sizeof accum);
        cli_mode_name(&d->rnd, mode, sizeof mode);
        printf("%s: %llu lines, dot K=%u, %s -> %s, accum %s, mode %s\n",
               name, (unsigned long long)c->lines, d->k, short_name(&d->in),
               short_name(&d->out), accum, mode);
        return;
    }
    const cli_vecopts *v = c->v;
    cli_mode_name(&v->rnd, mode, sizeof mode);
    printf("%s: %llu lines, %s, %s -> %s, mode %s%s\n", name,
           (unsigned long long)c->lines, emu_op_name(v->op),
           short_name(&v->in), short_name(&v->out), mode,
           v->rnd.saturate ? ", saturate" : "");
}

/* A titled list of counts, each with its explanation (help may be NULL). */
static void section(const char *head, const uint64_t *n,
                    const char *const *names, const char *const *help,
                    int count)
{
    printf("%s\n", head);
    for (int k = 0; k < count; k++)
        printf("  %-13s %9llu%s%s\n", names[k], (unsigned long long)n[k],
               help ? "   " : "", help ? help[k] : "");
}

/* The classes of a list no line reached, among those that can occur. */
static int missed(const coverage *c, const uint64_t *n,
                  const char *const *names, int count, const char *prefix,
                  bool (*can)(const coverage *, int))
{
    int m = 0;
    for (int k = 0; k < count; k++)
        if (!n[k] && can(c, k)) {
            printf(" %s%s", prefix, names[k]);
            m++;
        }
    return m;
}

static void report(const coverage *c, const char *name)
{
    int n = is_dot(c) ? 2 : emu_op_arity(c->v->op);
    bool cmp = !is_dot(c) && emu_op_is_compare(c->v->op);
    bool scales = c->s && c->s->sf.block_scaled;
    title(c, name);
    printf("%-14s", "class");
    for (int i = 0; i < n; i++)
        printf(" %10c", 'A' + i);
    if (!cmp)
        printf(" %10s", "result");
    putchar('\n');
    for (int k = 0; k < OC_COUNT; k++) {
        printf("%-14s", opclass_name[k]);
        for (int i = 0; i < n; i++)
            printf(" %10llu", (unsigned long long)c->operand[i][k]);
        if (!cmp)
            printf(" %10llu", (unsigned long long)c->result[k]);
        putchar('\n');
    }
    if (scales) {
        section("scales SA", c->scale[0], scclass_name, NULL, SCL_COUNT);
        section("scales SB", c->scale[1], scclass_name, NULL, SCL_COUNT);
    }
    if (is_dot(c))
        section("products", c->product, pclass_name, pclass_help, PC_COUNT);
    if (c->d)
        section("accumulation", c->sum, sclass_name, sclass_help, SC_COUNT);
    if (!cmp)
        section("rounding", c->rounding, rclass_name, rclass_help, RC_COUNT);
    section("flags", c->flags, flag_name, NULL, 5);

    /* What no line reached, among what the formats and the op allow. */
    printf("missed:");
    int m = 0;
    for (int i = 0; i < n; i++) {
        char prefix[4] = { (char)('A' + i), ':', '\0' };
        m += missed(c, c->operand[i], opclass_name, OC_COUNT, prefix,
                    operand_possible);
    }
    if (scales) {
        m += missed(c, c->scale[0], scclass_name, SCL_COUNT, "SA:",
                    scale_possible);
        m += missed(c, c->scale[1], scclass_name, SCL_COUNT, "SB:",
                    scale_possible);
    }
    if (is_dot(c))
        m += missed(c, c->product, pclass_name, PC_COUNT, "product:",
                    product_possible);
    if (c->d)
        m += missed(c, c->sum, sclass_name, SC_COUNT, "", sum_possible);
    if (!cmp) {
        m += missed(c, c->result, opclass_name, OC_COUNT, "result:",
                    result_possible);
        m += missed(c, c->rounding, rclass_name, RC_COUNT, "", rounding_possible);
    }
    m += missed(c, c->flags, flag_name, 5, "flag:", flag_possible);
    printf("%s\n", m ? "" : " nothing");
}

static void help(void)
{
    printf(
        "Usage: emu coverage [options] FILE|-\n"
        "\n"
        "Counts what the lines of a TestFloat-format vector file exercise\n"
        "(the file of emu gen, of testfloat_gen, or of an RTL run): the\n"
        "class of each operand and of the emulator's result (zero,\n"
        "subnormal, normal, max, inf, nan, snan), where the exact result\n"
        "lies on the output grid (exact, tie, near-tie, other inexact,\n"
        "overflow, underflow) and each flag the emulator raises; then the\n"
        "classes no line reached ('missed:').  Settings as for emu verify:\n"
        "options, else the file's '#! emu-vectors' header.\n"
        "\n"
        "  --op, --format, --in, --out, --mode, --tiny, --saturate, --seed\n"
        "\n"
        "A file of emu dot gen ('#! emu-dot' header; its settings only) is\n"
        "counted against the accumulator model: columns A and B hold all\n"
        "A_i and all B_i; the products A_i*B_i (exact) against the\n"
        "accumulator's format (zero; tiny, below its normal range; normal;\n"
        "huge, above its largest value; inf/nan); per line, cancellation\n"
        "(the model's sum zero, or p(acc) or more binades below the largest\n"
        "product), swamping (the model absorbed a non-zero addend: the\n"
        "accumulator unchanged by it, as emu/accum.h counts it) and lost\n"
        "bits (an addend lost low bits to alignment or rounding, not\n"
        "absorbed); the rounding class places the model's value before the\n"
        "output rounding (hi + lo of emu_accum_dot) on the output grid.\n"
        "A file of emu dot gen --scaled ('#! emu-dot-scaled' header) is\n"
        "replayed through the DPI model of emu dot verify --scaled: columns\n"
        "A and B hold the element codes (in the element format), 'scales SA'\n"
        "and 'scales SB' the block-scale codes (in the scale format: zero,\n"
        "subnormal, min, normal, max, nan), the products are those of the\n"
        "scaled elements, and the rounding class places the model's value\n"
        "times the tensor scales on the output grid.\n"
        "\n"
        "Exit status: 0, or 2 for malformed lines or a usage error.\n"
        "\n"
        "Example: emu gen --op mul --format e4m3 --count 100 | emu coverage -\n"
        "         emu dot gen --in e4m3 --accum fused,k=4,w=14,acc=binary32 \\\n"
        "             --k 4 | emu coverage -\n");
}

_Noreturn static void header_error(const char *why)
{
    cli_error("coverage", "%s", why);
    exit(CLI_EXIT_USAGE);
}

/* The headers a file may carry; the one read decides its kind. */
typedef struct headers {
    cli_header vec, dot;
    cli_sdot *scaled;
    bool is_vec, is_dot, is_scaled, scalar_options;
} headers;

static void read_header_line(headers *h, const char *line, size_t len,
                             unsigned long lineno)
{
    char why[400];
    const char *t = line + strspn(line, " \t");
    if (!strncmp(t, "#! emu-dot-scaled", 17)) {
        char copy[1024]; /* the reader cuts its line up */
        snprintf(copy, sizeof copy, "%s", t);
        cli_sdot_read_header(h->scaled, copy);
        h->is_scaled = true;
        return;
    }
    int rv = cli_header_read(&h->vec, line, len, lineno, why, sizeof why);
    int rd = rv ? 0 : cli_header_read(&h->dot, line, len, lineno, why,
                                      sizeof why);
    if (rv < 0 || rd < 0)
        header_error(why);
    h->is_vec |= rv > 0;
    h->is_dot |= rd > 0;
}

/* At the first vector line: the settings of the file's kind. */
static void settle(coverage *c, headers *h, vec_layout *lay)
{
    char why[400];
    if (h->is_scaled) {
        if (h->is_vec || h->is_dot || h->scalar_options)
            header_error("a '#! emu-dot-scaled' file takes its settings from "
                         "its header only (no other header, no --op ... "
                         "options)");
        cli_sdot_finish(h->scaled);
        c->d = NULL;
        c->s = h->scaled;
        c->r = scaled_range(c->s);
        return;
    }
    if (h->is_dot) {
        if (h->is_vec || h->scalar_options)
            header_error("a '#! emu-dot' file takes its settings from its "
                         "header only (no '#! emu-vectors' header, no --op "
                         "... options)");
        if (!cli_dot_from_header(c->d, &h->dot, why, sizeof why))
            header_error(why);
        cli_dot_finish(c->d);
        c->r = dot_range(c->d);
        return;
    }
    c->d = NULL;
    cli_vecopts *v = c->v;
    if (!cli_vecopts_from_header(v, &h->vec, why, sizeof why))
        header_error(why);
    cli_vecopts_finish(v, "coverage");
    lay->operands = emu_op_arity(v->op);
    lay->operand_bits = v->in.bits;
    lay->result_bits = emu_op_is_compare(v->op) ? 1 : v->out.bits;
}

/* One vector line of either kind: NULL, or why it is malformed. */
static const char *count_line(coverage *c, const vec_layout *lay, char *line,
                              size_t len, char *why, size_t size)
{
    if (!is_dot(c)) {
        vec_case vc;
        vec_status s = vec_parse_line(lay, line, len, &vc, why, size);
        if (s == VEC_OK)
            count_case(c, &vc);
        return s == VEC_BAD ? why : NULL;
    }
    const char *t = line + strspn(line, " \t\r");
    if (!*t || *t == '#')
        return NULL;
    if (strlen(line) != len)
        return "NUL byte in the line";
    uint64_t result;
    unsigned flags;
    if (c->s) {
        cli_sdot_case sc;
        const char *bad = cli_sdot_parse_line(c->s, line, &sc, &result,
                                              &flags);
        return bad ? bad : count_scaled(c, &sc);
    }
    uint64_t ab[2 * CLI_DOT_MAX_K];
    const char *bad = cli_dot_parse_line(c->d, line, ab, &result, &flags);
    if (!bad)
        count_dot(c, ab);
    return bad;
}

int cmd_coverage(int argc, char **argv)
{
    static const cli_opt opts[] = {
        { "op", 0, true },     { "format", 0, true },  { "in", 0, true },
        { "out", 0, true },    { "mode", 0, true },    { "tiny", 0, true },
        { "saturate", 0, false }, { "seed", 0, true },
        { "help", 'h', false }, { NULL, 0, false },
    };
    cli_vecopts v;
    memset(&v, 0, sizeof v);
    headers h;
    memset(&h, 0, sizeof h);
    const char *path = NULL, *val;
    cli_parser p;
    cli_parser_init(&p, "coverage", argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        if (o == CLI_ARG_POSITIONAL) {
            if (path)
                cli_usage_error("coverage", "one FILE only (got '%s' and "
                                "'%s')", path, val);
            path = val;
        } else if (!cli_vecopts_option(&v, "coverage", opts[o].name, val)) {
            help();
            return CLI_EXIT_OK;
        }
        h.scalar_options |= o != CLI_ARG_POSITIONAL;
    }
    if (!path)
        cli_usage_error("coverage", "missing FILE (or - for standard input)");
    FILE *fp = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!fp) {
        cli_error("coverage", "%s: %s", path, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    const char *name = fp == stdin ? "<stdin>" : path;

    coverage *c = calloc(1, sizeof *c);
    cli_dotopts *d = calloc(1, sizeof *d);
    h.scaled = calloc(1, sizeof *h.scaled);
    if (!c || !d || !h.scaled) {
        cli_error("coverage", "out of memory");
        free(h.scaled);
        free(d);
        free(c);
        return CLI_EXIT_USAGE;
    }
    c->v = &v;
    c->d = d;
    cli_header_init(&h.vec, CLI_VECTORS_TAG, cli_vecopts_header_keys, name);
    cli_header_init(&h.dot, CLI_DOT_TAG, cli_dot_header_keys, name);
    vec_layout lay = { 0, 0, 0 };
    char *line = NULL;
    size_t cap = 0, len = 0;
    unsigned long lineno = 0, malformed = 0;
    bool ready = false;
    int rc;
    while ((rc = vec_read_line(fp, &line, &cap, &len)) > 0) {
        lineno++;
        char why[160] = "line too long";
        if (rc == 1 && !ready) {
            size_t skip = strspn(line, " \t");
            if (skip == len || line[skip] == '#') {
                read_header_line(&h, line, len, lineno);
                continue;
            }
            settle(c, &h, &lay);
            ready = true;
        }
        const char *bad = rc == 2 ? why
                        : count_line(c, &lay, line, len, why, sizeof why);
        if (bad && malformed++ < 20)
            cli_error("coverage", "%s:%lu: malformed line: %s", name, lineno,
                      bad);
    }
    free(line);
    bool read_error = rc < 0 || ferror(fp);
    if (fp != stdin)
        fclose(fp);
    int status = CLI_EXIT_OK;
    if (read_error) {
        cli_error("coverage", "%s: read error after line %lu", name, lineno);
        status = CLI_EXIT_USAGE;
    } else if (!ready) {
        cli_error("coverage", "%s: no test vectors", name);
        status = CLI_EXIT_USAGE;
    } else {
        report(c, name);
        if (malformed || cli_stdout_status("coverage"))
            status = CLI_EXIT_USAGE;
    }
    free(h.scaled);
    free(d);
    free(c);
    return status;
}
