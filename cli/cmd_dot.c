/*
 * cmd_dot.c — `emu dot gen|verify`: test vectors of a dot-product unit.
 *
 * A hardware dot-product unit (a tensor-core lane, an FP8 MAC array) is
 * defined by its input format, its accumulator model (emu/accum.h: when it
 * rounds, how wide it aligns) and its output rounding.  `emu dot gen`
 * writes cases of that unit, one line each,
 *
 *     A0 B0 A1 B1 ... A(K-1) B(K-1) RESULT FLAGS
 *
 * operands in the input format, RESULT in the output format, FLAGS (two
 * hex digits, TestFloat's numbering) of the final rounding into the output
 * format; `emu dot verify` checks such a file — from an RTL simulation —
 * against the model.  The settings travel in a '#! emu-dot' header line.
 */
#include "cli.h"
#include "vectors.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Operand streams, apart from the rounding streams of the cases. */
#define OPERAND_STREAM ((uint64_t)0xd07 << 40)
#define OUTPUT_STREAM ((uint64_t)0xd08 << 40)

uint64_t cli_dot_evaluate(const cli_dotopts *d, const uint64_t *ab,
                          uint64_t k, unsigned *flags, cli_dot_sum *sum)
{
    float a[CLI_DOT_MAX_K], b[CLI_DOT_MAX_K];
    for (unsigned i = 0; i < d->k; i++) {
        a[i] = (float)emu_decode(&d->in, (emu_bits){ ab[2 * i] });
        b[i] = (float)emu_decode(&d->in, (emu_bits){ ab[2 * i + 1] });
    }
    emu_accum_rng arng = { d->seed, 0, k };
    double lo = 0.0;
    emu_accum_counts *counts = NULL;
    if (sum) {
        memset(&sum->counts, 0, sizeof sum->counts);
        counts = &sum->counts;
    }
    double hi = emu_accum_dot(&lo, counts, &d->model, a, 1, b, 1, d->k, &arng);
    if (sum) {
        sum->hi = hi;
        sum->lo = lo;
    }
    emu_status st;
    double r = emu_round2_word(&d->out, hi, lo, &d->rnd,
                               emu_random64(d->seed, OUTPUT_STREAM, k), &st);
    emu_bits res;
    if (!emu_encode_in(&d->out, &d->rnd.profile, r, &res) && !isnan(r)) {
        cli_error("dot", "a result the output format cannot hold (%a): a bug",
                  r);
        exit(CLI_EXIT_USAGE);
    }
    *flags = st.flags & EMU_FLAG_TESTFLOAT_MASK;
    return res.v;
}

static void parse_k(cli_dotopts *d, const char *val)
{
    if (!cli_dot_k(val, &d->k))
        cli_usage_error("dot", "--k: '%s' is not a length from 1 to %d", val,
                        CLI_DOT_MAX_K);
    d->have_k = true;
}

/* Who gave spec i: its header line, or the option. */
static const char *origin(const cli_dotopts *d, int i, const char *option)
{
    return d->where[i][0] ? d->where[i] : option;
}

void cli_dot_finish(cli_dotopts *d)
{
    if (!d->in_spec)
        cli_usage_error("dot", "missing --in FORMAT (the operands' format)");
    if (!d->accum_spec)
        cli_usage_error("dot", "missing --accum SPEC (e.g. "
                        "fused,k=4,w=14,acc=binary32)");
    cli_resolve_format("dot", origin(d, 0, "--in"), d->in_spec, &d->in);
    if (!d->in.fits_carrier) {
        cli_error("dot", "%s: %s is not held by binary32, which the "
                  "accumulator models read", origin(d, 0, "--in"), d->in.name);
        exit(CLI_EXIT_USAGE);
    }
    emu_error err;
    if (emu_accum_parse(&d->model, d->accum_spec, &err)) {
        char msg[700];
        emu_error_format(&err, msg, sizeof msg);
        cli_error("dot", "%s: %s", origin(d, 2, "--accum"), msg);
        exit(CLI_EXIT_USAGE);
    }
    if (d->out_spec)
        cli_resolve_format("dot", origin(d, 1, "--out"), d->out_spec, &d->out);
    else
        d->out = d->model.acc;
    memset(&d->rnd, 0, sizeof d->rnd);
    const char *mode = d->mode_spec ? d->mode_spec : "rne";
    if (emu_rnd_parse(mode, &d->rnd.mode, &d->rnd.sr_bits)) {
        cli_error("dot", "%s: '%s' is not a rounding mode (rne rna rz ru rd "
                  "ro sr srN with N = 1..64)", origin(d, 3, "--mode"), mode);
        exit(CLI_EXIT_USAGE);
    }
    const char *profile = d->profile_spec ? d->profile_spec : "ieee";
    if (emu_profile_parse(profile, &d->rnd.profile, NULL)) {
        cli_error("dot", "%s: '%s' is not a profile (%s)",
                  origin(d, 4, "--profile"), profile, emu_profile_names());
        exit(CLI_EXIT_USAGE);
    }
    if (!d->have_k)
        d->k = 16;
}

static void write_header(const cli_dotopts *d, FILE *fp)
{
    char in[256], out[256], accum[256], mode[16];
    emu_format_spec_string(&d->in, in, sizeof in);
    emu_format_spec_string(&d->out, out, sizeof out);
    emu_accum_string(&d->model, accum, sizeof accum);
    cli_mode_name(&d->rnd, mode, sizeof mode);
    fprintf(fp, "%s in=%s out=%s accum=%s mode=%s k=%u seed=%llu profile=%s\n",
            CLI_DOT_TAG, in, out, accum, mode, d->k, (unsigned long long)d->seed,
            cli_profile_name(&d->rnd));
}

/* ---- gen --------------------------------------------------------------- */

/* Operands of case k.  Cases cycle through four kinds, because uniform
 * patterns alone seldom exercise a unit's alignment: (0) random patterns
 * of any class; (1) one large product and small ones (swamping); (2)
 * products cancelling in pairs but for the last (cancellation); (3)
 * random patterns of one exponent field (dense ties and carries). */
static void make_case(const cli_dotopts *d, uint64_t k, uint64_t *ab)
{
    const emu_format *f = &d->in;
    const unsigned n = 2 * d->k;
    const uint64_t base = k * (uint64_t)n;
    for (unsigned i = 0; i < n; i++)
        ab[i] = cli_random_pattern(f, d->seed, OPERAND_STREAM, base + i);
    const uint64_t sign = f->is_signed ? (uint64_t)1 << (f->bits - 1) : 0;
    const uint64_t top = ((uint64_t)1 << f->ebits) - 1;
    switch (k % 4) {
    case 1: /* the first product near the top, the rest near the bottom */
        for (unsigned i = 0; i < n; i++) {
            uint64_t e = i < 2 ? top - 1 - (ab[i] & 1) : 1 + (ab[i] & 1);
            ab[i] = (ab[i] & (sign | (((uint64_t)1 << f->mbits) - 1))) |
                    e << f->mbits;
        }
        break;
    case 2: /* a_{2j+1} = -a_{2j}, b_{2j+1} = b_{2j}: products cancel */
        for (unsigned i = 0; i + 3 < n; i += 4) {
            ab[i + 2] = ab[i] ^ sign;
            ab[i + 3] = ab[i + 1];
        }
        break;
    case 3: { /* one exponent field for every operand */
        uint64_t e = 1 + ab[0] % (top > 2 ? top - 1 : 1);
        for (unsigned i = 0; i < n; i++)
            ab[i] = (ab[i] & (sign | (((uint64_t)1 << f->mbits) - 1))) |
                    e << f->mbits;
        break;
    }
    default:
        break;
    }
}

static int dot_gen(cli_dotopts *d, uint64_t count, const char *path)
{
    cli_dot_finish(d);
    cli_output out;
    if (cli_output_open(&out, "dot", path))
        return CLI_EXIT_USAGE;
    char accum[256];
    emu_accum_string(&d->model, accum, sizeof accum);
    fprintf(out.fp, "# emu dot gen (libemu %s): %u products of %s, "
            "accumulator %s, output %s; line = A0 B0 ... A%u B%u RESULT "
            "FLAGS\n", EMU_VERSION_STRING, d->k, d->in.name, accum,
            d->out.name, d->k - 1, d->k - 1);
    write_header(d, out.fp);
    uint64_t ab[2 * CLI_DOT_MAX_K];
    const int dig_in = cli_hex_digits(d->in.bits);
    const int dig_out = cli_hex_digits(d->out.bits);
    for (uint64_t k = 0; k < count; k++) {
        make_case(d, k, ab);
        unsigned flags;
        uint64_t r = cli_dot_evaluate(d, ab, k, &flags, NULL);
        for (unsigned i = 0; i < 2 * d->k; i++)
            fprintf(out.fp, "%0*llX ", dig_in, (unsigned long long)ab[i]);
        fprintf(out.fp, "%0*llX %02X\n", dig_out, (unsigned long long)r,
                flags);
    }
    if (cli_output_commit(&out, "dot"))
        return CLI_EXIT_USAGE;
    if (path && strcmp(path, "-"))
        fprintf(stderr, "emu dot: %llu cases written to %s\n",
                (unsigned long long)count, path);
    return CLI_EXIT_OK;
}

/* ---- verify ------------------------------------------------------------ */

const char *cli_dot_parse_line(const cli_dotopts *d, char *line, uint64_t *ab,
                               uint64_t *result, unsigned *flags)
{
    static char why[160];
    const unsigned want = 2 * d->k + 2;
    unsigned got = 0;
    for (char *tok = strtok(line, " \t\r"); tok; tok = strtok(NULL, " \t\r")) {
        if (*tok == '#')
            break;
        if (got == want) {
            snprintf(why, sizeof why, "more than %u fields (K = %u)", want,
                     d->k);
            return why;
        }
        for (const char *c = tok; *c; c++)
            if (!isxdigit((unsigned char)*c) || c - tok >= 16) {
                snprintf(why, sizeof why, "field %u '%.40s' is not a hex "
                         "pattern", got + 1, tok);
                return why;
            }
        uint64_t v = strtoull(tok, NULL, 16);
        int bits = got < 2 * d->k ? d->in.bits
                 : got == 2 * d->k ? d->out.bits : 8;
        if (bits < 64 && v >> bits) {
            snprintf(why, sizeof why, "field %u (%s) is wider than %d bits",
                     got + 1, tok, bits);
            return why;
        }
        if (got < 2 * d->k)
            ab[got] = v;
        else if (got == 2 * d->k)
            *result = v;
        else
            *flags = (unsigned)v;
        got++;
    }
    if (got != want) {
        snprintf(why, sizeof why, "%u fields, expected %u (2K operands, "
                 "result, flags; K = %u)", got, want, d->k);
        return why;
    }
    return NULL;
}

static bool same(const cli_dotopts *d, uint64_t want, uint64_t got, bool exact_nan)
{
    if (want == got)
        return true;
    return !exact_nan &&
           emu_classify_bits(&d->out, (emu_bits){ want }) == EMU_CLASS_NAN &&
           emu_classify_bits(&d->out, (emu_bits){ got }) == EMU_CLASS_NAN;
}

_Noreturn static void header_error(const char *why)
{
    cli_error("dot", "%s", why);
    exit(CLI_EXIT_USAGE);
}

static int dot_verify(cli_dotopts *d, const char *path, bool exact_nan,
                      uint64_t max_errors)
{
    const char *name;
    FILE *fp = cli_open_input("dot", path, &name);
    if (!fp)
        return CLI_EXIT_USAGE;
    cli_header h;
    cli_header_init(&h, CLI_DOT_TAG, cli_dot_header_keys, name);
    char header_why[400];
    char *line = NULL;
    size_t cap = 0, len = 0;
    unsigned long lineno = 0;
    uint64_t checked = 0, mismatches = 0, malformed = 0;
    bool ready = false;
    uint64_t ab[2 * CLI_DOT_MAX_K];
    int rc;
    while ((rc = vec_read_line(fp, &line, &cap, &len)) > 0) {
        lineno++;
        char *t = line;
        while (*t == ' ' || *t == '\t')
            t++;
        if (rc == 1 && !ready) {
            int hr = cli_header_read(&h, line, len, lineno, header_why,
                                     sizeof header_why);
            if (hr < 0)
                header_error(header_why);
            if (hr > 0)
                continue;
        }
        if (rc == 1 && (!*t || *t == '#'))
            continue;
        if (!ready) {
            if (!cli_dot_from_header(d, &h, header_why, sizeof header_why))
                header_error(header_why);
            cli_dot_finish(d);
            ready = true;
        }
        uint64_t want = 0;
        unsigned want_flags = 0;
        const char *why = rc == 2 ? "line too long"
                        : strlen(line) != len ? "NUL byte in the line"
                        : cli_dot_parse_line(d, line, ab, &want, &want_flags);
        if (why) {
            if (malformed++ < max_errors)
                cli_error("dot", "%s:%lu: malformed line: %s", name, lineno,
                          why);
            continue;
        }
        unsigned flags;
        uint64_t got = cli_dot_evaluate(d, ab, checked, &flags, NULL);
        checked++;
        want_flags &= EMU_FLAG_TESTFLOAT_MASK;
        if (same(d, want, got, exact_nan) && want_flags == flags)
            continue;
        if (mismatches++ < max_errors)
            printf("%s:%lu: expected %0*llX flags %02X, the model gives "
                   "%0*llX (%a) flags %02X\n", name, lineno,
                   cli_hex_digits(d->out.bits), (unsigned long long)want,
                   want_flags, cli_hex_digits(d->out.bits),
                   (unsigned long long)got,
                   emu_decode(&d->out, (emu_bits){ got }), flags);
    }
    free(line);
    bool read_error = rc < 0 || ferror(fp);
    int read_errno = errno;
    if (fp != stdin)
        fclose(fp);
    if (read_error) {
        cli_error("dot", "%s: read error after line %lu: %s", name, lineno,
                  strerror(read_errno));
        return CLI_EXIT_USAGE;
    }
    if (!ready && !malformed)
        cli_error("dot", "%s: no test vectors", name);
    printf("%s: %llu lines checked, %llu mismatch%s", name,
           (unsigned long long)checked, (unsigned long long)mismatches,
           mismatches == 1 ? "" : "es");
    if (malformed)
        printf(", %llu malformed", (unsigned long long)malformed);
    putchar('\n');
    if (malformed || !ready || cli_stdout_status("dot"))
        return CLI_EXIT_USAGE;
    return mismatches ? CLI_EXIT_MISMATCH : CLI_EXIT_OK;
}

static void help(void)
{
    printf(
        "Usage: emu dot gen    --in FMT --accum SPEC [options] [-o FILE]\n"
        "       emu dot verify [--in FMT --accum SPEC ...] FILE|-\n"
        "\n"
        "Test vectors of a dot-product unit: K products of operands in FMT,\n"
        "summed by an accumulator model, rounded into the output format.\n"
        "Each line:  A0 B0 A1 B1 ... A(K-1) B(K-1) RESULT FLAGS  (hex; FLAGS\n"
        "of the final rounding, TestFloat's numbering).  gen writes the\n"
        "settings into a '#! emu-dot' header that verify reads back; options\n"
        "given to verify win over it.\n"
        "\n"
        "  --in FMT          operand format (e4m3, binary16, ...)\n"
        "  --accum SPEC      the unit's accumulator model, e.g.\n"
        "                    fused,k=4,w=14,acc=binary32  (tensor-core style)\n"
        "                    sequential,acc=binary16  blocked,acc=binary16,\n"
        "                    wide=binary32,block=128  kahan,acc=bfloat16  exact\n"
        "  --out FMT         output format (default: the accumulator's)\n"
        "  --mode MODE       output rounding (default rne)\n"
        "  --profile P       special values as ieee (default), ocp or riscv\n"
        "                    define them (default NaN, NaN sign and payload)\n"
        "  --k K             products per case, 1..%d (default 16)\n"
        "  --count N         gen: cases (default 1000); they cycle through\n"
        "                    random, swamping, cancelling and same-exponent\n"
        "                    operands\n"
        "  --seed N          operands and stochastic rounding (default 0)\n"
        "  -o FILE           gen: write FILE atomically (default stdout; a\n"
        "                    device or FIFO is written in place)\n"
        "  --exact-nan       verify: NaN results must match bit for bit\n"
        "  --max-errors N    verify: print at most N mismatches (default 20)\n"
        "\n"
        "Exit status of verify: 0 all lines match, 1 a mismatch, 2 malformed\n"
        "lines (reported with their line numbers) or a usage error.\n"
        "Block-scaled operands (MX, NVFP4): emu dot --scaled mxfp8 --help.\n"
        "\n"
        "Example:\n"
        "  emu dot gen --in e4m3 --accum fused,k=4,w=14,acc=binary32 --k 32 \\\n"
        "      --count 10000 -o fp8_dot.tv\n"
        "  emu dot verify rtl_output.tv\n", CLI_DOT_MAX_K);
}

void cli_dot_operand(const char *val, const char **verb, const char **file)
{
    if (!*verb)
        *verb = val;
    else if (!*file)
        *file = val;
    else
        cli_usage_error("dot", "unexpected argument '%s'", val);
}

bool cli_dot_is_gen(const char *verb, const char *file)
{
    if (!verb)
        cli_usage_error("dot", "missing gen or verify");
    if (!strcmp(verb, "gen")) {
        if (file)
            cli_usage_error("dot", "gen takes no FILE (use -o FILE)");
        return true;
    }
    if (strcmp(verb, "verify"))
        cli_usage_error("dot", "'%s' is neither gen nor verify", verb);
    if (!file)
        cli_usage_error("dot", "verify: missing FILE (or - for stdin)");
    return false;
}

int cmd_dot(int argc, char **argv)
{
    static const cli_opt opts[] = {
        { "in", 0, true },     { "out", 0, true },     { "accum", 0, true },
        { "mode", 0, true },   { "k", 0, true },       { "count", 0, true },
        { "seed", 0, true },   { "output", 'o', true }, { "exact-nan", 0, false },
        { "max-errors", 0, true }, { "help", 'h', false },
        { "profile", 0, true },    { NULL, 0, false },
    };
    enum { O_IN, O_OUT, O_ACCUM, O_MODE, O_K, O_COUNT, O_SEED, O_OUTPUT,
           O_EXACT_NAN, O_MAX_ERRORS, O_HELP, O_PROFILE };
    if (cli_dot_is_scaled(argc, argv))
        return cmd_dot_scaled(argc, argv);
    cli_dotopts d;
    memset(&d, 0, sizeof d);
    uint64_t count = 1000, max_errors = 20;
    bool exact_nan = false;
    const char *verb = NULL, *file = NULL, *path = NULL, *val;
    cli_parser p;
    cli_parser_init(&p, "dot", argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        switch (o) {
        case O_HELP: help(); return CLI_EXIT_OK;
        case O_IN: d.in_spec = val; break;
        case O_OUT: d.out_spec = val; break;
        case O_ACCUM: d.accum_spec = val; break;
        case O_MODE: d.mode_spec = val; break;
        case O_PROFILE: d.profile_spec = val; break;
        case O_K: parse_k(&d, val); break;
        case O_COUNT: count = cli_parse_u64("dot", "--count", val); break;
        case O_SEED:
            d.seed = cli_parse_u64("dot", "--seed", val);
            d.have_seed = true;
            break;
        case O_OUTPUT: path = val; break;
        case O_EXACT_NAN: exact_nan = true; break;
        case O_MAX_ERRORS:
            max_errors = cli_parse_u64("dot", "--max-errors", val);
            break;
        default:
            cli_dot_operand(val, &verb, &file);
        }
    }
    if (cli_dot_is_gen(verb, file))
        return dot_gen(&d, count, path);
    return dot_verify(&d, file, exact_nan, max_errors);
}
