/*
 * cmd_verify.c — `emu verify FILE|-`: checks TestFloat-format vector lines
 * (from emu gen, from TestFloat's testfloat_gen, or dumped by an RTL
 * simulation) against the emulator, one line at a time, and reports every
 * disagreement with its line number.
 */
#include "cli.h"
#include "vectors.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct checker {
    cli_vecopts *opts;
    vec_layout lay;
    bool exact_nan, check_flags;
    uint64_t max_errors;
    uint64_t checked, mismatches, malformed;
} checker;

/* "3C00 (0x1p+0)": a pattern with the value it encodes; NaNs say whether
 * they signal under the profile p. */
static void describe(const emu_format *f, const emu_profile *p, uint64_t v,
                     bool is_bool, char *buf, size_t size)
{
    if (is_bool) {
        snprintf(buf, size, "%llu", (unsigned long long)v);
        return;
    }
    emu_bits b = { v };
    char hf[CLI_NUM_MAX];
    cli_hexfloat(emu_decode(f, b), hf, sizeof hf);
    if (emu_classify_bits(f, b) == EMU_CLASS_NAN)
        snprintf(hf, sizeof hf, "%s", f->specials != EMU_SPECIALS_IEEE ? "nan"
                 : emu_is_signaling_in(f, p, b) ? "snan" : "qnan");
    snprintf(buf, size, "%0*llX (%s)", cli_hex_digits(f->bits),
             (unsigned long long)v, hf);
}

static bool same_result(const checker *c, uint64_t want, uint64_t got)
{
    if (want == got)
        return true;
    if (c->exact_nan || emu_op_is_compare(c->opts->op))
        return false;
    const emu_format *f = &c->opts->out;
    return emu_classify_bits(f, (emu_bits){ want }) == EMU_CLASS_NAN &&
           emu_classify_bits(f, (emu_bits){ got }) == EMU_CLASS_NAN;
}

static void check_case(checker *c, const char *name, unsigned long lineno,
                       const vec_case *vc)
{
    const cli_vecopts *v = c->opts;
    int n = emu_op_arity(v->op);
    emu_bits ops[3];
    for (int i = 0; i < n; i++)
        ops[i].v = vc->operand[i];
    emu_rounding r = v->rnd;
    emu_rng rng = emu_rng_make(v->seed, c->checked);
    r.rng = &rng;
    emu_bits res;
    emu_status st;
    c->checked++;
    emu_error e;
    if (emu_bits_op(v->op, &v->in, &v->out, ops, &r, &res, &st, &e)) {
        cli_error("verify", "%s:%lu: the emulator refused these operands "
                  "(%s: a bug)", name, lineno, e.message);
        c->mismatches++;
        return;
    }
    unsigned want_flags = vc->flags & EMU_FLAG_TESTFLOAT_MASK;
    unsigned got_flags = st.flags & EMU_FLAG_TESTFLOAT_MASK;
    if (same_result(c, vc->result, res.v) &&
        (!c->check_flags || want_flags == got_flags))
        return;
    if (c->mismatches++ >= c->max_errors) {
        if (c->mismatches == c->max_errors + 1)
            printf("(further mismatches are counted, not shown)\n");
        return;
    }
    bool is_bool = emu_op_is_compare(v->op);
    char text[3][80], want[80], got[80], wf[128], gf[128];
    for (int i = 0; i < n; i++)
        describe(&v->in, &v->rnd.profile, vc->operand[i], false, text[i],
                 sizeof text[i]);
    describe(&v->out, &v->rnd.profile, vc->result, is_bool, want, sizeof want);
    describe(&v->out, &v->rnd.profile, res.v, is_bool, got, sizeof got);
    emu_flags_string(want_flags, wf, sizeof wf);
    emu_flags_string(got_flags, gf, sizeof gf);
    printf("%s:%lu: %s", name, lineno, emu_op_name(v->op));
    for (int i = 0; i < n; i++)
        printf(" %s", text[i]);
    printf(": expected %s flags %02X (%s), emulator %s flags %02X (%s)\n",
           want, want_flags, wf, got, got_flags, gf);
}

_Noreturn static void header_error(const char *why)
{
    cli_error("verify", "%s", why);
    exit(CLI_EXIT_USAGE);
}

static void help(void)
{
    printf(
        "Usage: emu verify [options] FILE|-\n"
        "\n"
        "Checks each line  A [B [C]] RESULT FLAGS  (Berkeley TestFloat's\n"
        "format, hex; see 'emu gen --help') against the emulator.  Settings\n"
        "come from the options, else from the file's '#! emu-vectors' header\n"
        "(written by emu gen); options win over the header.  Blank lines and\n"
        "'#' comments are skipped.  For TestFloat's own files give the\n"
        "settings, e.g. testfloat_gen -rnear_even f16_mul:\n"
        "  emu verify --op mul --format binary16 --mode rne f16_mul.tv\n"
        "\n"
        "  --op, --format, --in, --out, --mode, --tiny, --saturate, --seed,\n"
        "  --profile\n"
        "                     as for emu gen (stochastic modes: line k of\n"
        "                     data uses stream k of --seed, as gen does)\n"
        "  --exact-nan        NaN results must match bit for bit (default:\n"
        "                     any NaN pattern matches any NaN)\n"
        "  --no-flags         compare results only\n"
        "  --max-errors N     print at most N mismatches (default 20); all\n"
        "                     are counted\n"
        "\n"
        "Prints each mismatch (file:line, operands, expected and computed\n"
        "result and flags), then one summary line.  Exit status: 0 all lines\n"
        "match, 1 some mismatch, 2 malformed lines (each reported on stderr\n"
        "with its line number: field count, non-hex field, pattern wider\n"
        "than its format) or a usage error.\n"
        "\n"
        "Example: emu gen --op add --format bf16 --mode rz | emu verify -\n");
}

int cmd_verify(int argc, char **argv)
{
    static const cli_opt opts[] = {
        { "op", 0, true },     { "format", 0, true },  { "in", 0, true },
        { "out", 0, true },    { "mode", 0, true },    { "tiny", 0, true },
        { "saturate", 0, false }, { "seed", 0, true },
        { "profile", 0, true },   { "exact-nan", 0, false }, { "no-flags", 0, false },
        { "max-errors", 0, true }, { "help", 'h', false },
        { NULL, 0, false },
    };
    cli_vecopts v;
    memset(&v, 0, sizeof v);
    checker c = { &v, { 0, 0, 0 }, false, true, 20, 0, 0, 0 };
    const char *path = NULL, *val;
    cli_parser p;
    cli_parser_init(&p, "verify", argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        if (o == CLI_ARG_POSITIONAL) {
            if (path)
                cli_usage_error("verify", "one FILE only (got '%s' and '%s')",
                                path, val);
            path = val;
            continue;
        }
        const char *name = opts[o].name;
        if (cli_vecopts_option(&v, "verify", name, val))
            continue;
        if (!strcmp(name, "help")) {
            help();
            return CLI_EXIT_OK;
        } else if (!strcmp(name, "exact-nan")) {
            c.exact_nan = true;
        } else if (!strcmp(name, "no-flags")) {
            c.check_flags = false;
        } else {
            c.max_errors = cli_parse_u64("verify", "--max-errors", val);
        }
    }
    if (!path)
        cli_usage_error("verify", "missing FILE (or - for standard input)");
    const char *name;
    FILE *fp = cli_open_input("verify", path, &name);
    if (!fp)
        return CLI_EXIT_USAGE;
    cli_header h;
    cli_header_init(&h, CLI_VECTORS_TAG, cli_vecopts_header_keys, name);

    char *line = NULL;
    size_t cap = 0, len = 0;
    unsigned long lineno = 0;
    bool ready = false;
    int rc;
    while ((rc = vec_read_line(fp, &line, &cap, &len)) > 0) {
        lineno++;
        char why[160];
        vec_case vc;
        if (rc == 2) {
            snprintf(why, sizeof why, "line longer than %d bytes",
                     VEC_LINE_MAX);
        } else if (!ready) {
            /* Before the first case, a comment may be the header; the
             * settings must be complete once a case arrives. */
            size_t skip = 0;
            while (skip < len && (line[skip] == ' ' || line[skip] == '\t'))
                skip++;
            if (skip == len || line[skip] == '#') {
                if (cli_header_read(&h, line, len, lineno, why, sizeof why) < 0)
                    header_error(why);
                continue;
            }
            if (!cli_vecopts_from_header(&v, &h, why, sizeof why))
                header_error(why);
            cli_vecopts_finish(&v, "verify");
            c.lay.operands = emu_op_arity(v.op);
            c.lay.operand_bits = v.in.bits;
            c.lay.result_bits = emu_op_is_compare(v.op) ? 1 : v.out.bits;
            ready = true;
        }
        vec_status s = rc == 2 ? VEC_BAD
                     : vec_parse_line(&c.lay, line, len, &vc, why, sizeof why);
        if (s == VEC_SKIP)
            continue;
        if (s == VEC_BAD) {
            if (c.malformed++ < c.max_errors)
                cli_error("verify", "%s:%lu: malformed line: %s", name,
                          lineno, why);
            continue;
        }
        check_case(&c, name, lineno, &vc);
    }
    free(line);
    bool read_error = rc < 0 || ferror(fp);
    int read_errno = errno;
    if (fp != stdin)
        fclose(fp);
    if (read_error) {
        cli_error("verify", "%s: read error after line %lu: %s", name, lineno,
                  strerror(read_errno));
        return CLI_EXIT_USAGE;
    }
    if (!ready && !c.malformed)
        cli_error("verify", "%s: no test vectors", name);

    printf("%s: %llu lines checked, %llu mismatch%s", name,
           (unsigned long long)c.checked, (unsigned long long)c.mismatches,
           c.mismatches == 1 ? "" : "es");
    if (c.malformed)
        printf(", %llu malformed", (unsigned long long)c.malformed);
    putchar('\n');
    int out = cli_stdout_status("verify");
    if (c.malformed || !ready || out)
        return CLI_EXIT_USAGE;
    return c.mismatches ? CLI_EXIT_MISMATCH : CLI_EXIT_OK;
}
