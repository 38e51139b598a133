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

typedef struct coverage {
    cli_vecopts *v;
    uint64_t lines;
    uint64_t operand[VEC_MAX_OPERANDS][OC_COUNT];
    uint64_t result[OC_COUNT];
    uint64_t rounding[RC_COUNT];
    uint64_t flags[5];
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
    if (emu_bits_op(v->op, &v->in, &v->out, ops, &r, &res, &st))
        return; /* cannot happen after cli_vecopts_finish */
    for (int k = 0; k < 5; k++)
        c->flags[k] += (st.flags >> k) & 1;
    if (emu_op_is_compare(v->op))
        return;
    c->result[classify(&v->out, res.v)]++;
    if (st.flags & EMU_FLAG_OVERFLOW)
        c->rounding[RC_OVERFLOW]++;
    if (st.flags & EMU_FLAG_UNDERFLOW)
        c->rounding[RC_UNDERFLOW]++;
    mpfr_t x;
    mpfr_init2(x, EXACT_PREC);
    int ter = exact_result(v->op, val, x);
    if (ter != 2 && !(st.flags & EMU_FLAG_OVERFLOW))
        c->rounding[mpfr_zero_p(x) ? RC_EXACT : grid_position(&v->out, x, ter)]++;
    mpfr_clear(x);
}

/* Whether a rounding class can occur at all.  A square root of a p-bit
 * value is never halfway between two p-bit values (the square of a
 * (p+1)-bit odd significand has 2p+1 bits), and it reaches the range's
 * ends only if the input range is wider than the output's. */
static bool rounding_possible(const cli_vecopts *v, enum rclass k)
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

/* Whether a result class can occur: a square root's results lie between
 * the square roots of the input range's ends. */
static bool result_possible(const cli_vecopts *v, enum opclass k)
{
    if (!possible(&v->out, k) || k == OC_SNAN)
        return false;
    if (v->op == EMU_OP_SQRT && k == OC_SUBNORMAL)
        return rounding_possible(v, RC_UNDERFLOW);
    if (v->op == EMU_OP_SQRT && k == OC_MAX)
        return sqrt(v->in.max) >= v->out.max;
    return true;
}

/* Whether flag k can be raised at all by this op on these formats. */
static bool flag_possible(const cli_vecopts *v, int k)
{
    if (emu_op_is_compare(v->op))
        return 1u << k == EMU_FLAG_INVALID;
    if (1u << k == EMU_FLAG_UNDERFLOW)
        return rounding_possible(v, RC_UNDERFLOW);
    if (1u << k == EMU_FLAG_OVERFLOW)
        return rounding_possible(v, RC_OVERFLOW);
    switch (1u << k) {
    case EMU_FLAG_INFINITE:
        return v->op == EMU_OP_DIV;
    case EMU_FLAG_INVALID: /* inf * 0, inf - inf, a signalling NaN, ... */
        return v->op == EMU_OP_DIV || v->op == EMU_OP_SQRT ||
               v->op == EMU_OP_CONVERT || v->in.has_inf ||
               possible(&v->in, OC_SNAN);
    default:
        return true;
    }
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

static void report(const coverage *c, const char *name)
{
    const cli_vecopts *v = c->v;
    int n = emu_op_arity(v->op);
    bool cmp = emu_op_is_compare(v->op);
    char mode[16];
    cli_mode_name(&v->rnd, mode, sizeof mode);
    printf("%s: %llu lines, %s, %s -> %s, mode %s%s\n", name,
           (unsigned long long)c->lines, emu_op_name(v->op),
           short_name(&v->in), short_name(&v->out), mode, v->rnd.saturate ? ", saturate" : "");
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
    if (!cmp) {
        printf("rounding\n");
        for (int k = 0; k < RC_COUNT; k++)
            printf("  %-12s %10llu   %s\n", rclass_name[k],
                   (unsigned long long)c->rounding[k], rclass_help[k]);
    }
    printf("flags\n");
    for (int k = 0; k < 5; k++)
        printf("  %-12s %10llu\n", flag_name[k],
               (unsigned long long)c->flags[k]);

    /* What no line reached, among what the formats and the op allow. */
    printf("missed:");
    int missed = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < OC_COUNT; k++)
            if (!c->operand[i][k] && possible(&v->in, k)) {
                printf(" %c:%s", 'A' + i, opclass_name[k]);
                missed++;
            }
    if (!cmp) {
        for (int k = 0; k < OC_COUNT; k++)
            if (!c->result[k] && result_possible(v, k)) {
                printf(" result:%s", opclass_name[k]);
                missed++;
            }
        for (int k = 0; k < RC_COUNT; k++)
            if (!c->rounding[k] && rounding_possible(v, k)) {
                printf(" %s", rclass_name[k]);
                missed++;
            }
    }
    for (int k = 0; k < 5; k++)
        if (!c->flags[k] && flag_possible(v, k)) {
            printf(" flag:%s", flag_name[k]);
            missed++;
        }
    printf("%s\n", missed ? "" : " nothing");
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
        "Exit status: 0, or 2 for malformed lines or a usage error.\n"
        "\n"
        "Example: emu gen --op mul --format e4m3 --count 100 | emu coverage -\n");
}

_Noreturn static void header_error(const char *why)
{
    cli_error("coverage", "%s", why);
    exit(CLI_EXIT_USAGE);
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
    if (!c) {
        cli_error("coverage", "out of memory");
        return CLI_EXIT_USAGE;
    }
    c->v = &v;
    cli_header h;
    cli_header_init(&h, CLI_VECTORS_TAG, cli_vecopts_header_keys, name);
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
                if (cli_header_read(&h, line, len, lineno, why, sizeof why) < 0)
                    header_error(why);
                continue;
            }
            if (!cli_vecopts_from_header(&v, &h, why, sizeof why))
                header_error(why);
            cli_vecopts_finish(&v, "coverage");
            lay.operands = emu_op_arity(v.op);
            lay.operand_bits = v.in.bits;
            lay.result_bits = emu_op_is_compare(v.op) ? 1 : v.out.bits;
            ready = true;
        }
        vec_case vc;
        vec_status s = rc == 2 ? VEC_BAD
                     : vec_parse_line(&lay, line, len, &vc, why, sizeof why);
        if (s == VEC_OK)
            count_case(c, &vc);
        else if (s == VEC_BAD && malformed++ < 20)
            cli_error("coverage", "%s:%lu: malformed line: %s", name, lineno,
                      why);
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
    free(c);
    return status;
}
