/*
 * cmd_gen.c — `emu gen`: test vectors in Berkeley TestFloat's line format
 * for any format, operation, rounding mode and tininess rule, computed by
 * the bit-pattern layer emu_bits_op().  A hardware team checks its RTL
 * against these files; `emu verify` checks them (or anyone's) back.
 *
 * Operands, like TestFloat's, are chosen where formats break: a cross
 * product of exponent fields (zero, one, around the bias, the top) and
 * fraction patterns (zero, one, all ones, single bits, ...) with both
 * signs; then optional random patterns; or every pattern (--exhaustive).
 */
#include "cli.h"
#include "vectors.h"

#include <stdlib.h>
#include <string.h>

/* Stream of emu_random64 that chooses random operands; a case's rounding
 * words come from stream = the case's index, far below this. */
#define OPERAND_STREAM UINT64_C(0x6f7065726e6473) /* "operands" */

typedef struct pattern_set {
    uint64_t *v;
    size_t n, cap;
} pattern_set;

static void push(pattern_set *s, uint64_t v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) {
            cli_error("gen", "out of memory");
            exit(CLI_EXIT_USAGE);
        }
    }
    s->v[s->n++] = v;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void sort_unique(pattern_set *s)
{
    if (!s->n)
        return;
    qsort(s->v, s->n, sizeof *s->v, cmp_u64);
    size_t k = 1;
    for (size_t i = 1; i < s->n; i++)
        if (s->v[i] != s->v[k - 1])
            s->v[k++] = s->v[i];
    s->n = k;
}

/* Structured operand patterns of f.  Level 0 is the small set used for
 * three-operand ops at level 1; levels 1 and 2 grow from it. */
static pattern_set edge_patterns(const emu_format *f, int level, uint64_t seed)
{
    const int64_t top = ((int64_t)1 << f->ebits) - 1;
    const uint64_t all = f->mbits ? (((uint64_t)1 << f->mbits) - 1) : 0;
    const uint64_t msb = f->mbits ? (uint64_t)1 << (f->mbits - 1) : 0;
    const int64_t b = f->bias;

    int64_t exps[64];
    int ne = 0;
    const int64_t base_exps[] = { 0, 1, b, top - 1, top };
    for (size_t i = 0; i < sizeof base_exps / sizeof base_exps[0]; i++)
        exps[ne++] = base_exps[i];
    if (level >= 1) {
        const int64_t more[] = { 2, b - 1, b + 1 };
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
            exps[ne++] = more[i];
    }
    if (level >= 2) {
        const int64_t more[] = { 3, b - 2, b + 2, top - 2, b - f->p,
                                 b + f->p, b / 2, (b + top) / 2 };
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
            exps[ne++] = more[i];
        for (uint64_t i = 0; i < 4; i++)
            exps[ne++] = (int64_t)(emu_random64(seed, OPERAND_STREAM + 1, i)
                                   % (uint64_t)(top + 1));
    }

    uint64_t fracs[96];
    int nf = 0;
    const uint64_t base_fracs[] = { 0, 1, msb, all };
    for (size_t i = 0; i < sizeof base_fracs / sizeof base_fracs[0]; i++)
        fracs[nf++] = base_fracs[i];
    if (level >= 1) {
        fracs[nf++] = all ^ msb; /* all ones below the top bit */
        fracs[nf++] = all ^ 1;   /* all ones but the last: ties after +-1 */
    }
    if (level >= 2) {
        fracs[nf++] = 2;
        fracs[nf++] = msb | 1;
        fracs[nf++] = msb >> 1;
        fracs[nf++] = all >> (f->mbits / 2);          /* low half ones  */
        fracs[nf++] = all ^ (all >> (f->mbits / 2));  /* high half ones */
        fracs[nf++] = UINT64_C(0x5555555555555555);
        fracs[nf++] = UINT64_C(0xaaaaaaaaaaaaaaaa);
        for (int i = 0; i < f->mbits && i < 52; i += (f->mbits > 24 ? 4 : 1))
            fracs[nf++] = (uint64_t)1 << i;
        for (uint64_t i = 0; i < 4; i++)
            fracs[nf++] = emu_random64(seed, OPERAND_STREAM + 2, i);
    }

    pattern_set s = { NULL, 0, 0 };
    for (int sign = 0; sign <= (f->is_signed ? 1 : 0); sign++)
        for (int i = 0; i < ne; i++) {
            if (exps[i] < 0 || exps[i] > top)
                continue;
            for (int j = 0; j < nf; j++) {
                uint64_t v = (uint64_t)exps[i] << f->mbits | (fracs[j] & all);
                if (sign)
                    v |= (uint64_t)1 << (f->bits - 1);
                push(&s, v);
            }
        }
    sort_unique(&s);
    return s;
}

uint64_t cli_random_pattern(const emu_format *f, uint64_t seed,
                            uint64_t stream, uint64_t i)
{
    uint64_t w[4];
    emu_random64x4(seed, stream, 4 * i, w);
    uint64_t mask = f->bits == 64 ? ~(uint64_t)0
                                  : ((uint64_t)1 << f->bits) - 1;
    if (w[0] & 1)
        return w[1] & mask;
    const uint64_t all = f->mbits ? (((uint64_t)1 << f->mbits) - 1) : 0;
    const uint64_t shapes[] = { 0, all, all ^ (all >> 1), 1, w[3] };
    uint64_t frac = shapes[w[2] % (sizeof shapes / sizeof shapes[0])];
    if ((w[2] >> 8) & 1) /* shift the shape: runs of ones anywhere */
        frac >>= (w[3] >> 32) % (uint64_t)(f->mbits + 1);
    uint64_t e = (w[1] >> 1) % ((uint64_t)1 << f->ebits);
    uint64_t v = e << f->mbits | (frac & all);
    if (f->is_signed && (w[2] >> 9 & 1))
        v |= (uint64_t)1 << (f->bits - 1);
    return v;
}

typedef struct generator {
    cli_vecopts *opts;
    vec_layout lay;
    FILE *fp;
    uint64_t cases;
} generator;

static void emit(generator *g, const uint64_t *operands)
{
    emu_bits ops[3];
    int n = emu_op_arity(g->opts->op);
    for (int i = 0; i < n; i++)
        ops[i].v = operands[i];
    emu_rounding r = g->opts->rnd;
    emu_rng rng = emu_rng_make(g->opts->seed, g->cases);
    r.rng = &rng;
    emu_bits res;
    emu_status st;
    emu_error e;
    if (emu_bits_op(g->opts->op, &g->opts->in, &g->opts->out, ops, &r, &res,
                    &st, &e)) {
        cli_error("gen", "emu_bits_op refused %s on operand 0x%llx (%s): a "
                  "bug", emu_op_name(g->opts->op),
                  (unsigned long long)operands[0], e.message);
        exit(CLI_EXIT_USAGE);
    }
    vec_case c = { { 0, 0, 0 }, res.v, st.flags & EMU_FLAG_TESTFLOAT_MASK };
    for (int i = 0; i < n; i++)
        c.operand[i] = operands[i];
    char line[256];
    vec_format_line(&g->lay, &c, line, sizeof line);
    fputs(line, g->fp);
    putc('\n', g->fp);
    g->cases++;
}

/* Every tuple drawn from s (arity 1..3). */
static void cross(generator *g, const pattern_set *s, int arity)
{
    uint64_t o[3] = { 0, 0, 0 };
    size_t n = s->n;
    size_t nb = arity >= 2 ? n : 1, nc = arity >= 3 ? n : 1;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < nb; j++)
            for (size_t k = 0; k < nc; k++) {
                o[0] = s->v[i];
                o[1] = s->v[j];
                o[2] = s->v[k];
                emit(g, o);
            }
}

static void help(void)
{
    printf(
        "Usage: emu gen --op OP --format F [options]\n"
        "       emu gen --op OP --in F --out G [options]\n"
        "\n"
        "Writes test vectors in Berkeley TestFloat's line format, one case a\n"
        "line:  A [B [C]] RESULT FLAGS  in hex: operand patterns of the input\n"
        "format, the result pattern of the output format (0/1 for\n"
        "comparisons), flags as two hex digits: inexact 01, underflow 02,\n"
        "overflow 04, infinite 08, invalid 10.  NaN results are the output\n"
        "format's default NaN, or carry the NaN operand's sign and payload,\n"
        "as --profile says; a format without NaN gives +0 and invalid.\n"
        "A first line '#! emu-vectors ...' records the settings, so that\n"
        "'emu verify FILE' needs no options.\n"
        "\n"
        "  --op OP            add sub mul div sqrt fma convert eq lt le\n"
        "  --format F         input and output format\n"
        "  --in F, --out G    input and output formats (convert, mixed precision)\n"
        "  --mode M           rne (default) rna rz ru rd ro sr srN\n"
        "  --tiny before|after  tininess detection (default after)\n"
        "  --saturate         overflow and +-inf give +-max (OCP saturation)\n"
        "  --profile P        special values as ieee (default), ocp or riscv\n"
        "                     define them: signalling NaNs, default NaN, NaN\n"
        "                     sign and payload (see README: profiles)\n"
        "  --level 1|2        structured cases (default 1): a cross product of\n"
        "                     exponent fields (0, 1, 2, bias-1..bias+1, top-1,\n"
        "                     top) and fractions (0, 1, top bit, all ones, ...)\n"
        "                     with both signs; level 2 adds more of each\n"
        "  --count N          N random cases more (default 0)\n"
        "  --seed N           random operands and stochastic rounding (default\n"
        "                     0); case k rounds with words of stream k\n"
        "  --exhaustive       every tuple of patterns (operand bits x arity\n"
        "                     at most 24: e.g. every pair of an 8-bit format)\n"
        "  -o FILE            write FILE atomically (default standard output):\n"
        "                     a temporary beside it, renamed over it at the\n"
        "                     end; a symlink's target is replaced, a device\n"
        "                     or FIFO written in place\n"
        "\n"
        "Arithmetic ops need formats of binary32 values (p <= 24); convert\n"
        "takes any.  Example:\n"
        "  emu gen --op mul --format e4m3 --mode rz --exhaustive -o mul.tv\n"
        "  emu gen --op convert --in binary32 --out bf16 --count 100000\n");
}

int cmd_gen(int argc, char **argv)
{
    static const cli_opt opts[] = {
        { "op", 0, true },     { "format", 0, true },  { "in", 0, true },
        { "out", 0, true },    { "mode", 0, true },    { "tiny", 0, true },
        { "saturate", 0, false }, { "seed", 0, true }, { "level", 0, true },
        { "profile", 0, true },
        { "count", 0, true },  { "exhaustive", 0, false },
        { "output", 'o', true }, { "help", 'h', false }, { NULL, 0, false },
    };
    cli_vecopts v;
    memset(&v, 0, sizeof v);
    int level = 1;
    uint64_t count = 0;
    bool exhaustive = false;
    const char *path = NULL, *val;
    cli_parser p;
    cli_parser_init(&p, "gen", argc, argv);
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        if (o == CLI_ARG_POSITIONAL)
            cli_usage_error("gen", "unexpected argument '%s'", val);
        const char *name = opts[o].name;
        if (cli_vecopts_option(&v, "gen", name, val))
            continue;
        if (!strcmp(name, "help")) {
            help();
            return CLI_EXIT_OK;
        } else if (!strcmp(name, "level")) {
            if (strcmp(val, "1") && strcmp(val, "2"))
                cli_usage_error("gen", "--level: '%s' is neither 1 nor 2", val);
            level = val[0] - '0';
        } else if (!strcmp(name, "count")) {
            count = cli_parse_u64("gen", "--count", val);
        } else if (!strcmp(name, "exhaustive")) {
            exhaustive = true;
        } else {
            path = val;
        }
    }
    cli_vecopts_finish(&v, "gen");
    const int arity = emu_op_arity(v.op);
    if (exhaustive && v.in.bits * arity > 24)
        cli_usage_error("gen", "--exhaustive: %d operand%s of %d bits make "
                        "2^%d cases; the limit is 2^24", arity,
                        arity > 1 ? "s" : "", v.in.bits, v.in.bits * arity);

    generator g = { &v, { arity, v.in.bits,
                          emu_op_is_compare(v.op) ? 1 : v.out.bits },
                    NULL, 0 };
    cli_output out;
    if (cli_output_open(&out, "gen", path))
        return CLI_EXIT_USAGE;
    g.fp = out.fp;

    char mode[16];
    cli_mode_name(&v.rnd, mode, sizeof mode);
    fprintf(g.fp, "# emu gen (libemu %s): %s, %s -> %s, mode %s, tininess "
            "%s%s, profile %s, %s, seed %llu\n", EMU_VERSION_STRING,
            emu_op_name(v.op), v.in.name, v.out.name, mode,
            v.rnd.tininess == EMU_TINY_BEFORE ? "before" : "after",
            v.rnd.saturate ? ", saturate" : "", cli_profile_name(&v.rnd),
            exhaustive ? "exhaustive" : level == 1 ? "level 1" : "level 2",
            (unsigned long long)v.seed);
    cli_vecopts_write_header(&v, g.fp);

    if (exhaustive) {
        pattern_set all = { NULL, 0, 0 };
        for (uint64_t i = 0; i < (uint64_t)1 << v.in.bits; i++)
            push(&all, i);
        cross(&g, &all, arity);
        free(all.v);
    } else {
        /* Three operands multiply the set thrice: one level smaller. */
        pattern_set s = edge_patterns(&v.in, arity == 3 ? level - 1 : level,
                                      v.seed);
        cross(&g, &s, arity);
        free(s.v);
    }
    for (uint64_t i = 0; i < count; i++) {
        uint64_t o[3];
        for (int k = 0; k < arity; k++)
            o[k] = cli_random_pattern(&v.in, v.seed, OPERAND_STREAM,
                                      3 * i + (uint64_t)k);
        emit(&g, o);
    }
    if (cli_output_commit(&out, "gen"))
        return CLI_EXIT_USAGE;
    if (path)
        fprintf(stderr, "emu gen: %llu cases written to %s\n",
                (unsigned long long)g.cases, path);
    return CLI_EXIT_OK;
}
