/*
 * vecopts.c — the settings of a test-vector file (operation, formats,
 * rounding), shared by `emu gen` and `emu verify` so that both read the
 * same options the same way, and the header line that carries them from
 * a generated file to its verification.
 */
#include "cli.h"

#include <string.h>

static void set_op(cli_vecopts *v, const char *cmd, const char *s)
{
    if (emu_op_parse(s, &v->op))
        cli_usage_error(cmd, "--op: '%s' is not an operation (add sub mul "
                        "div sqrt fma convert eq lt le)", s);
    v->have_op = true;
}

void cli_parse_profile(const char *cmd, const char *s, emu_rounding *r)
{
    if (emu_profile_parse(s, &r->profile, NULL))
        cli_usage_error(cmd, "--profile: '%s' is not a profile (%s)", s,
                        emu_profile_names());
}

const char *cli_profile_name(const emu_rounding *r)
{
    /* Only named profiles reach the CLI's settings. */
    return emu_profile_name(emu_profile_id_of(&r->profile));
}

bool cli_vecopts_option(cli_vecopts *v, const char *cmd, const char *name,
                        const char *value)
{
    if (!strcmp(name, "op")) {
        set_op(v, cmd, value);
    } else if (!strcmp(name, "format")) {
        v->format_spec = value;
    } else if (!strcmp(name, "in")) {
        v->in_spec = value;
    } else if (!strcmp(name, "out")) {
        v->out_spec = value;
    } else if (!strcmp(name, "mode")) {
        cli_parse_mode(cmd, value, &v->rnd);
        v->have_mode = true;
    } else if (!strcmp(name, "tiny")) {
        cli_parse_tininess(cmd, value, &v->rnd);
        v->have_tiny = true;
    } else if (!strcmp(name, "saturate")) {
        v->rnd.saturate = true;
        v->have_saturate = true;
    } else if (!strcmp(name, "seed")) {
        v->seed = cli_parse_u64(cmd, "--seed", value);
        v->have_seed = true;
    } else if (!strcmp(name, "profile")) {
        cli_parse_profile(cmd, value, &v->rnd);
        v->have_profile = true;
    } else {
        return false;
    }
    return true;
}

const char *const cli_vecopts_header_keys[] = {
    "op", "in", "out", "mode", "tiny", "saturate", "seed", "profile", NULL,
};

/* One key of the header, if the command line left it open: false with
 * why ("FILE:LINE: header key 'mode': 'rnx' is not ...") if unusable. */
static bool header_value(cli_vecopts *v, const cli_header *h, const char *key,
                         char *why, size_t size)
{
    char where[300];
    const char *val = cli_header_get(h, key, where, sizeof where);
    if (!val)
        return true;
    const char *bad = NULL;
    char profiles[128];
    if (!strcmp(key, "op")) {
        if (!v->have_op && emu_op_parse(val, &v->op))
            bad = "is not an operation (add sub mul div sqrt fma convert eq "
                  "lt le)";
        v->have_op = true;
    } else if (!strcmp(key, "mode")) {
        if (!v->have_mode && emu_rnd_parse(val, &v->rnd.mode, &v->rnd.sr_bits))
            bad = "is not a rounding mode (rne rna rz ru rd ro sr srN with "
                  "N = 1..64)";
        v->have_mode = true;
    } else if (!strcmp(key, "tiny")) {
        if (!v->have_tiny && strcmp(val, "after") && strcmp(val, "before"))
            bad = "is neither 'before' nor 'after'";
        else if (!v->have_tiny)
            v->rnd.tininess = val[0] == 'b' ? EMU_TINY_BEFORE : EMU_TINY_AFTER;
        v->have_tiny = true;
    } else if (!strcmp(key, "saturate")) {
        if (!v->have_saturate && !cli_text_yes_no(val, &v->rnd.saturate))
            bad = "is neither yes nor no";
        v->have_saturate = true;
    } else if (!strcmp(key, "seed")) {
        unsigned long long seed;
        if (!v->have_seed && !cli_text_u64(val, &seed))
            bad = "is not a non-negative integer below 2^64";
        else if (!v->have_seed)
            v->seed = seed;
        v->have_seed = true;
    } else if (!strcmp(key, "profile")) {
        /* A file without the key was made before profiles: ieee. */
        if (!v->have_profile && emu_profile_parse(val, &v->rnd.profile, NULL)) {
            snprintf(profiles, sizeof profiles, "is not a profile (%s)",
                     emu_profile_names());
            bad = profiles;
        }
        v->have_profile = true;
    } else {
        /* in, out: resolved by cli_vecopts_finish, which blames `where`. */
        bool in = key[0] == 'i';
        snprintf(in ? v->header_in : v->header_out, sizeof v->header_in, "%s",
                 val);
        snprintf(in ? v->in_where : v->out_where, sizeof v->in_where, "%s",
                 where);
        if (in)
            v->in_spec = v->header_in;
        else
            v->out_spec = v->header_out;
    }
    if (bad)
        snprintf(why, size, "%s: '%s' %s", where, val, bad);
    return !bad;
}

bool cli_vecopts_from_header(cli_vecopts *v, const cli_header *h, char *why,
                             size_t size)
{
    /* Formats come as a pair: any format option on the command line
     * overrides both. */
    bool take_formats = !v->format_spec && !v->in_spec && !v->out_spec;
    for (int i = 0; cli_vecopts_header_keys[i]; i++) {
        const char *key = cli_vecopts_header_keys[i];
        bool format = !strcmp(key, "in") || !strcmp(key, "out");
        if ((!format || take_formats) && !header_value(v, h, key, why, size))
            return false;
    }
    return true;
}

void cli_vecopts_finish(cli_vecopts *v, const char *cmd)
{
    if (!v->have_op)
        cli_usage_error(cmd, "missing --op (add sub mul div sqrt fma convert "
                        "eq lt le)");
    const char *in = v->in_spec ? v->in_spec : v->format_spec;
    const char *out = v->out_spec ? v->out_spec
                    : v->format_spec ? v->format_spec : in;
    if (!in)
        cli_usage_error(cmd, "missing --format (or --in and --out)");
    cli_resolve_format(cmd, v->in_where[0] ? v->in_where : "input format",
                       in, &v->in);
    cli_resolve_format(cmd, v->out_where[0] ? v->out_where : "output format",
                       out, &v->out);
    if (emu_op_is_compare(v->op)) {
        v->out = v->in; /* the result is 0 or 1 */
        return;
    }
    /* Conversions take any formats; arithmetic works on binary32 values. */
    if (v->op == EMU_OP_CONVERT)
        return;
    if (!emu_arith_supported(&v->in) || !emu_arith_supported(&v->out))
        cli_usage_error(cmd, "%s needs formats whose values are binary32 "
                        "values (p <= 24, binary32's range): %s is not one",
                        emu_op_name(v->op),
                        emu_arith_supported(&v->in) ? v->out.name : v->in.name);
}

void cli_mode_name(const emu_rounding *r, char *buf, size_t size)
{
    if (r->mode == EMU_RS_BITS)
        snprintf(buf, size, "sr%u", r->sr_bits);
    else
        snprintf(buf, size, "%s", emu_rnd_name(r->mode));
}

/* Every field spelled out, so that the string means the same format
 * whatever a registered name of the same eXmY shape has for defaults
 * (e8m0 is registered unsigned, without zero and subnormals). */
static void full_spec(const emu_format *f, char *buf, size_t size)
{
    snprintf(buf, size, "e%dm%d,bias=%d,specials=%s,overflow=%s,"
             "subnormals=%s,signed=%s,zero=%s", f->ebits, f->mbits, f->bias,
             emu_specials_name(f->specials), emu_overflow_name(f->overflow),
             f->subnormals ? "yes" : "no", f->is_signed ? "yes" : "no",
             f->has_zero ? "yes" : "no");
}

void cli_vecopts_write_header(const cli_vecopts *v, FILE *fp)
{
    char in[256], out[256], mode[16];
    full_spec(&v->in, in, sizeof in);
    full_spec(&v->out, out, sizeof out);
    cli_mode_name(&v->rnd, mode, sizeof mode);
    fprintf(fp, "%s op=%s in=%s out=%s mode=%s tiny=%s saturate=%s "
            "seed=%llu profile=%s\n", CLI_VECTORS_TAG, emu_op_name(v->op), in,
            out, mode, v->rnd.tininess == EMU_TINY_BEFORE ? "before" : "after",
            v->rnd.saturate ? "yes" : "no", (unsigned long long)v->seed,
            cli_profile_name(&v->rnd));
}
