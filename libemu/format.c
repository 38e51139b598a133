/*
 * format.c — parsing and validating format specs.
 *
 * Both spec syntaxes (the key = value files of formats/ and the inline
 * strings of the command line) end in apply_key(), so a key means the same
 * thing wherever it is written, and both go through emu_format_validate(),
 * the one place that decides whether a format can be emulated exactly.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/format.h"

#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *emu_next_token(char **cursor, const char *delims)
{
    char *s = *cursor;
    if (!s)
        return NULL;
    s += strspn(s, delims);
    if (!*s) {
        *cursor = NULL;
        return NULL;
    }
    char *end = s + strcspn(s, delims);
    if (*end)
        *end++ = '\0';
    else
        end = NULL;
    *cursor = end;
    return s;
}

static const char *const specials_names[EMU_SPECIALS_COUNT] = {
    [EMU_SPECIALS_IEEE] = "ieee",
    [EMU_SPECIALS_FN] = "fn",
    [EMU_SPECIALS_FINITE] = "finite",
    [EMU_SPECIALS_FNUZ] = "fnuz",
};

static const char *const overflow_names[EMU_OVERFLOW_COUNT] = {
    [EMU_OVERFLOW_INF] = "inf",
    [EMU_OVERFLOW_SATURATE] = "saturate",
    [EMU_OVERFLOW_NAN] = "nan",
};

const char *emu_specials_name(emu_specials s)
{
    return (unsigned)s < EMU_SPECIALS_COUNT ? specials_names[s] : "?";
}

const char *emu_overflow_name(emu_overflow o)
{
    return (unsigned)o < EMU_OVERFLOW_COUNT ? overflow_names[o] : "?";
}

/* Which keys a spec has set, so that duplicates are refused and defaults
 * (bias, overflow) are filled in only where the spec was silent. */
enum {
    SEEN_NAME = 1 << 0, SEEN_EXPONENT = 1 << 1, SEEN_MANTISSA = 1 << 2,
    SEEN_BIAS = 1 << 3, SEEN_SUBNORMALS = 1 << 4, SEEN_SPECIALS = 1 << 5,
    SEEN_OVERFLOW = 1 << 6, SEEN_SIGNED = 1 << 7, SEEN_ZERO = 1 << 8,
    SEEN_ALIASES = 1 << 9, SEEN_DESCRIPTION = 1 << 10
};

static int parse_int(const char *s, long lo, long hi, long *out)
{
    if (!*s)
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    if (!strcmp(s, "yes") || !strcmp(s, "true") || !strcmp(s, "1")) {
        *out = true;
        return 0;
    }
    if (!strcmp(s, "no") || !strcmp(s, "false") || !strcmp(s, "0")) {
        *out = false;
        return 0;
    }
    return -1;
}

static int parse_enum(const char *s, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

static bool valid_name(const char *s)
{
    if (!*s || strlen(s) >= EMU_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("_-.+", *s))
            return false;
    return true;
}

/* Applies one key = value to *f.  `seen` guards against repeats. */
static int apply_key(emu_format *f, unsigned *seen, const char *key,
                     const char *val, const char *where, emu_error *err)
{
    static const struct { const char *key; unsigned bit; } keys[] = {
        { "name", SEEN_NAME },         { "exponent", SEEN_EXPONENT },
        { "mantissa", SEEN_MANTISSA }, { "bias", SEEN_BIAS },
        { "subnormals", SEEN_SUBNORMALS }, { "specials", SEEN_SPECIALS },
        { "overflow", SEEN_OVERFLOW }, { "signed", SEEN_SIGNED },
        { "zero", SEEN_ZERO },         { "aliases", SEEN_ALIASES },
        { "description", SEEN_DESCRIPTION },
    };
    unsigned bit = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(key, keys[i].key))
            bit = keys[i].bit;
    if (!bit) {
        emu_fail(err, EMU_ESPEC, where, key, "unknown key (known: name, aliases, "
                  "description, exponent, mantissa, bias, subnormals, "
                  "specials, overflow, signed, zero)");
        return -1;
    }
    if (*seen & bit) {
        emu_fail(err, EMU_ESPEC, where, key, "given twice");
        return -1;
    }
    *seen |= bit;

    long v;
    bool b;
    int e;
    switch (bit) {
    case SEEN_NAME:
        if (!valid_name(val)) {
            emu_fail(err, EMU_ESPEC, where, key, "'%s' is not a name (letters, digits "
                      "and _-.+, at most %d characters)", val, EMU_NAME_MAX - 1);
            return -1;
        }
        snprintf(f->name, sizeof f->name, "%s", val);
        return 0;
    case SEEN_ALIASES:
        if (strlen(val) >= sizeof f->aliases) {
            emu_fail(err, EMU_ESPEC, where, key, "too long");
            return -1;
        }
        snprintf(f->aliases, sizeof f->aliases, "%s", val);
        return 0;
    case SEEN_DESCRIPTION:
        snprintf(f->description, sizeof f->description, "%s", val);
        return 0;
    case SEEN_EXPONENT:
        if (parse_int(val, 1, 11, &v)) {
            emu_fail(err, EMU_ESPEC, where, key, "'%s' is not a width from 1 to 11", val);
            return -1;
        }
        f->ebits = (int)v;
        return 0;
    case SEEN_MANTISSA:
        if (parse_int(val, 0, 52, &v)) {
            emu_fail(err, EMU_ESPEC, where, key, "'%s' is not a width from 0 to 52", val);
            return -1;
        }
        f->mbits = (int)v;
        return 0;
    case SEEN_BIAS:
        if (parse_int(val, -4096, 4096, &v)) {
            emu_fail(err, EMU_ESPEC, where, key, "'%s' is not an integer from -4096 "
                      "to 4096", val);
            return -1;
        }
        f->bias = (int)v;
        return 0;
    case SEEN_SUBNORMALS:
    case SEEN_SIGNED:
    case SEEN_ZERO:
        if (parse_bool(val, &b)) {
            emu_fail(err, EMU_ESPEC, where, key, "'%s' is not yes or no", val);
            return -1;
        }
        if (bit == SEEN_SUBNORMALS)
            f->subnormals = b;
        else if (bit == SEEN_SIGNED)
            f->is_signed = b;
        else
            f->has_zero = b;
        return 0;
    case SEEN_SPECIALS:
        e = parse_enum(val, specials_names, EMU_SPECIALS_COUNT);
        if (e < 0) {
            emu_fail(err, EMU_ESPEC, where, key, "'%s' is not ieee, fn, finite or fnuz",
                      val);
            return -1;
        }
        f->specials = (emu_specials)e;
        return 0;
    case SEEN_OVERFLOW:
        e = parse_enum(val, overflow_names, EMU_OVERFLOW_COUNT);
        if (e < 0) {
            emu_fail(err, EMU_ESPEC, where, key, "'%s' is not inf, saturate or nan", val);
            return -1;
        }
        f->overflow = (emu_overflow)e;
        return 0;
    }
    return 0;
}

static void format_defaults(emu_format *f)
{
    memset(f, 0, sizeof *f);
    f->is_signed = true;
    f->subnormals = true;
    f->has_zero = true;
    f->specials = EMU_SPECIALS_IEEE;
}

/* Fills what the spec left out: bias 2^(e-1)-1 and the overflow rule that
 * matches the specials (inf for IEEE, NaN where there is one, else saturate). */
static void fill_defaults(emu_format *f, unsigned seen)
{
    if (!(seen & SEEN_BIAS))
        f->bias = (1 << (f->ebits - 1)) - 1;
    if (!(seen & SEEN_OVERFLOW))
        f->overflow = f->specials == EMU_SPECIALS_IEEE ? EMU_OVERFLOW_INF
                    : f->specials == EMU_SPECIALS_FINITE ? EMU_OVERFLOW_SATURATE
                    : EMU_OVERFLOW_NAN;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

int emu_format_parse_file_text(emu_format *out, const char *text, size_t len,
                               const char *origin, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    emu_format f;
    format_defaults(&f);
    unsigned seen = 0;
    char where[256];
    char line[512];
    size_t pos = 0;
    int lineno = 0;
    /* The line each key was given on, so that an error found only when the
     * spec is validated as a whole still points at a line. */
    struct { char key[32]; int line; } keyline[16];
    int nkeys = 0;

    if (!origin)
        origin = "<string>";
    while (pos < len) {
        size_t start = pos;
        while (pos < len && text[pos] != '\n')
            pos++;
        size_t n = pos - start;
        if (pos < len)
            pos++; /* the newline */
        lineno++;
        snprintf(where, sizeof where, "%s:%d", origin, lineno);
        if (n >= sizeof line) {
            emu_fail(err, EMU_ESPEC, where, "", "line longer than %zu bytes",
                      sizeof line - 1);
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)text[start + i];
            if ((c < 0x20 && c != '\t' && c != '\r') || c >= 0x7f) {
                emu_fail(err, EMU_ESPEC, where, "", "unexpected byte 0x%02x at column "
                          "%zu (spec files are plain ASCII text)", c, i + 1);
                return -1;
            }
        }
        memcpy(line, text + start, n);
        line[n] = '\0';
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            emu_fail(err, EMU_ESPEC, where, "", "expected 'key = value', got '%s'", s);
            return -1;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        if (!*key) {
            emu_fail(err, EMU_ESPEC, where, "", "missing key before '='");
            return -1;
        }
        if (!*val) {
            emu_fail(err, EMU_ESPEC, where, key, "missing value");
            return -1;
        }
        if (apply_key(&f, &seen, key, val, where, err))
            return -1;
        if (nkeys < 16) {
            snprintf(keyline[nkeys].key, sizeof keyline[nkeys].key, "%s", key);
            keyline[nkeys++].line = lineno;
        }
    }

    snprintf(where, sizeof where, "%s", origin);
    if (!(seen & SEEN_NAME)) {
        emu_fail(err, EMU_ESPEC, where, "name", "missing (every spec file names its "
                  "format)");
        return -1;
    }
    if (!(seen & SEEN_EXPONENT) || !(seen & SEEN_MANTISSA)) {
        emu_fail(err, EMU_ESPEC, where, !(seen & SEEN_EXPONENT) ? "exponent" : "mantissa",
                  "missing");
        return -1;
    }
    fill_defaults(&f, seen);
    if (emu_format_validate(&f, err)) {
        int at = 0;
        for (int i = 0; i < nkeys; i++)
            if (!strcmp(keyline[i].key, err->key))
                at = keyline[i].line;
        if (at)
            snprintf(err->where, sizeof err->where, "%s:%d", origin, at);
        else
            snprintf(err->where, sizeof err->where, "%s", origin);
        return -1;
    }
    *out = f;
    return 0;
}

/* Registered-name lookup lives in registry.c; inline specs may start from
 * a named format. */
const emu_format *emu_format_find(const char *name);

int emu_format_parse_inline(emu_format *out, const char *spec, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    char where[256];
    snprintf(where, sizeof where, "format spec '%.200s'", spec ? spec : "");
    if (!spec || !*spec) {
        emu_fail(err, EMU_ESPEC, where, "", "empty format spec");
        return -1;
    }
    if (strlen(spec) >= 200) {
        emu_fail(err, EMU_ESPEC, where, "", "spec longer than 199 characters");
        return -1;
    }
    char buf[200];
    snprintf(buf, sizeof buf, "%s", spec);

    char *save = buf;
    char *base = emu_next_token(&save, ",");
    emu_format f;
    unsigned seen = 0;
    const emu_format *named = base ? emu_format_find(trim(base)) : NULL;
    if (named) {
        f = *named;
        /* A named base has every field decided already. */
        seen = SEEN_EXPONENT | SEEN_MANTISSA;
    } else {
        format_defaults(&f);
        long e, m;
        char *b = base ? trim(base) : "";
        char *mpos = (b[0] == 'e' || b[0] == 'E') ? strpbrk(b, "mM") : NULL;
        if (!mpos) {
            emu_fail(err, EMU_ESPEC, where, "", "'%s' is neither a known format nor "
                      "of the form eXmY (e.g. e4m3)", b);
            return -1;
        }
        *mpos = '\0';
        if (parse_int(b + 1, 1, 11, &e)) {
            emu_fail(err, EMU_ESPEC, where, "exponent", "'%s' is not a width from 1 to "
                      "11", b + 1);
            return -1;
        }
        if (parse_int(mpos + 1, 0, 52, &m)) {
            emu_fail(err, EMU_ESPEC, where, "mantissa", "'%s' is not a width from 0 to "
                      "52", mpos + 1);
            return -1;
        }
        f.ebits = (int)e;
        f.mbits = (int)m;
        seen = SEEN_EXPONENT | SEEN_MANTISSA;
    }

    /* The remaining items: key=value, or a flag standing for one. */
    static const struct { const char *flag, *key, *val; } flags[] = {
        { "subnormals", "subnormals", "yes" },
        { "nosubnormals", "subnormals", "no" },
        { "ftz", "subnormals", "no" },
        { "saturate", "overflow", "saturate" },
        { "sat", "overflow", "saturate" },
        { "unsigned", "signed", "no" },
        { "signed", "signed", "yes" },
        { "nozero", "zero", "no" },
        { "ieee", "specials", "ieee" },
        { "fn", "specials", "fn" },
        { "finite", "specials", "finite" },
        { "fnuz", "specials", "fnuz" },
    };
    unsigned named_seen = seen;
    for (char *item; (item = emu_next_token(&save, ","));) {
        item = trim(item);
        char *key = item, *val = NULL;
        char *eq = strchr(item, '=');
        if (eq) {
            *eq = '\0';
            key = trim(item);
            val = trim(eq + 1);
        } else {
            for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
                if (!strcmp(item, flags[i].flag)) {
                    key = (char *)flags[i].key;
                    val = (char *)flags[i].val;
                }
            if (!val) {
                emu_fail(err, EMU_ESPEC, where, item, "unknown flag (flags: subnormals, "
                          "nosubnormals, saturate, unsigned, nozero, ieee, fn, "
                          "finite, fnuz; or key=value)");
                return -1;
            }
        }
        if (!strcmp(key, "exponent") || !strcmp(key, "mantissa")) {
            emu_fail(err, EMU_ESPEC, where, key, "set by the eXmY base, not as an item");
            return -1;
        }
        if (!*val) {
            emu_fail(err, EMU_ESPEC, where, key, "missing value");
            return -1;
        }
        if (apply_key(&f, &seen, key, val, where, err))
            return -1;
    }
    if (named) {
        /* Changing the specials of a named format re-derives its default
         * overflow rule unless that was given too. */
        if ((seen & SEEN_SPECIALS) && !(seen & SEEN_OVERFLOW))
            fill_defaults(&f, seen | SEEN_BIAS);
    } else {
        fill_defaults(&f, seen);
    }
    if (!(seen & SEEN_NAME)) {
        /* The spec itself names a derived format, unless it is a plain
         * registered name. */
        if (!named || seen != named_seen)
            snprintf(f.name, sizeof f.name, "%.*s", EMU_NAME_MAX - 1, spec);
        if (!named || seen != named_seen) {
            f.aliases[0] = '\0';
            f.description[0] = '\0';
        }
    }
    if (emu_format_validate(&f, err)) {
        snprintf(err->where, sizeof err->where, "%s", where);
        return -1;
    }
    *out = f;
    return 0;
}

/* The seal of a validated format: every field that decides a result (the
 * spec and what validation derives from it), mixed into 64 bits; never 0,
 * which marks a format that was not validated. */
static uint64_t seal_mix(uint64_t h, uint64_t v)
{
    h = (h ^ v) * 0xbf58476d1ce4e5b9u;
    return h ^ (h >> 31);
}

static uint64_t double_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static uint64_t format_seal(const emu_format *f)
{
    uint64_t h = 0x656d752d666d7431u; /* "emu-fmt1" */
    const int64_t ints[] = {
        f->ebits, f->mbits, f->bias, f->is_signed, f->subnormals,
        f->has_zero, f->specials, f->overflow, f->bits, f->p, f->emin,
        f->emax, f->qmin, f->has_inf, f->has_nan, f->fits_carrier,
        f->fits_double };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        h = seal_mix(h, (uint64_t)ints[i]);
    const double reals[] = { f->max, f->min_normal, f->min_subnormal,
                             f->min_value, f->epsilon, f->unit_roundoff };
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
        h = seal_mix(h, double_bits(reals[i]));
    h = seal_mix(h, f->finite_count);
    return h ? h : 1;
}

bool emu_format_is_validated(const emu_format *f)
{
    return f && f->sealed != 0 && f->sealed == format_seal(f);
}

static int validate(emu_format *f, emu_error *err);

int emu_format_validate(emu_format *f, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    f->sealed = 0;
    if (validate(f, err))
        return -1;
    f->sealed = format_seal(f);
    return 0;
}

static int validate(emu_format *f, emu_error *err)
{
    const char *where = f->name[0] ? f->name : "format";
    if (f->ebits < 1 || f->ebits > 11) {
        emu_fail(err, EMU_ESPEC, where, "exponent", "%d is not a width from 1 to 11",
                  f->ebits);
        return -1;
    }
    if (f->mbits < 0 || f->mbits > 52) {
        emu_fail(err, EMU_ESPEC, where, "mantissa", "%d is not a width from 0 to 52",
                  f->mbits);
        return -1;
    }
    if (f->bias < -4096 || f->bias > 4096) {
        emu_fail(err, EMU_ESPEC, where, "bias", "%d is out of range", f->bias);
        return -1;
    }
    if ((unsigned)f->specials >= EMU_SPECIALS_COUNT ||
        (unsigned)f->overflow >= EMU_OVERFLOW_COUNT) {
        emu_fail(err, EMU_ESPEC, where, "specials", "invalid policy value");
        return -1;
    }
    f->bits = (f->is_signed ? 1 : 0) + f->ebits + f->mbits;
    if (f->bits > 64) {
        emu_fail(err, EMU_ESPEC, where, "mantissa", "%d bits in all: more than 64",
                  f->bits);
        return -1;
    }
    if (!f->has_zero && f->subnormals) {
        emu_fail(err, EMU_ESPEC, where, "zero", "a format without zero has no "
                  "subnormals: add subnormals = no");
        return -1;
    }
    if (f->specials == EMU_SPECIALS_FNUZ && !f->is_signed) {
        emu_fail(err, EMU_ESPEC, where, "specials", "fnuz keeps its NaN in the sign "
                  "bit: an unsigned format cannot be fnuz");
        return -1;
    }
    if (f->specials == EMU_SPECIALS_IEEE && f->mbits == 0) {
        emu_fail(err, EMU_ESPEC, where, "specials", "ieee needs at least one fraction "
                  "bit: with none the all-ones exponent holds infinity and "
                  "no NaN (use fn or finite)");
        return -1;
    }
    f->has_inf = f->specials == EMU_SPECIALS_IEEE;
    f->has_nan = f->specials != EMU_SPECIALS_FINITE;
    if (f->overflow == EMU_OVERFLOW_INF && !f->has_inf) {
        emu_fail(err, EMU_ESPEC, where, "overflow", "inf needs a format with "
                  "infinities (specials = ieee); use saturate or nan");
        return -1;
    }
    if (f->overflow == EMU_OVERFLOW_NAN && !f->has_nan) {
        emu_fail(err, EMU_ESPEC, where, "overflow", "nan needs a format with a NaN; "
                  "use saturate");
        return -1;
    }
    if (!f->is_signed && !f->has_nan && !f->has_zero) {
        emu_fail(err, EMU_ESPEC, where, "signed", "an unsigned format needs a NaN or a "
                  "zero to hold negative inputs");
        return -1;
    }

    const int top = (1 << f->ebits) - 1; /* all-ones exponent field */
    f->p = f->mbits + 1;
    f->emin = (f->has_zero ? 1 : 0) - f->bias;
    bool top_nan = false; /* the top binade's all-ones fraction is NaN */
    switch (f->specials) {
    case EMU_SPECIALS_IEEE:
        f->emax = top - 1 - f->bias;
        break;
    case EMU_SPECIALS_FN:
        /* With no fraction bits the NaN takes the whole top binade. */
        top_nan = f->mbits > 0;
        f->emax = top - (top_nan ? 0 : 1) - f->bias;
        break;
    default:
        f->emax = top - f->bias;
        break;
    }
    if (f->emax < f->emin) {
        emu_fail(err, EMU_ESPEC, where, "exponent", "%d exponent bits with specials = "
                  "%s leave no normal numbers", f->ebits,
                  emu_specials_name(f->specials));
        return -1;
    }
    f->qmin = f->emin - f->p + 1;
    if (f->emax > 1023 || f->qmin < -1074) {
        emu_fail(err, EMU_EUNSUPPORTED, where, "bias", "bias %d puts the values at 2^%d .. "
                  "2^%d, outside binary64: they cannot be emulated exactly",
                  f->bias, f->subnormals ? f->qmin : f->emin, f->emax);
        return -1;
    }
    f->fits_double = true;
    f->fits_carrier = f->p <= 24 && f->emax <= 127 && f->qmin >= -149;

    f->max = ldexp(2.0 - ldexp(top_nan ? 2.0 : 1.0, -f->mbits), f->emax);
    f->min_normal = ldexp(1.0, f->emin);
    f->min_subnormal = f->subnormals ? ldexp(1.0, f->qmin) : f->min_normal;
    f->min_value = f->min_subnormal;
    f->epsilon = ldexp(1.0, 1 - f->p);
    f->unit_roundoff = ldexp(1.0, -f->p);

    /* Bit patterns that are not finite numbers, per sign. */
    uint64_t nonfinite_per_sign =
        f->specials == EMU_SPECIALS_IEEE ? (1ull << f->mbits)
        : f->specials == EMU_SPECIALS_FN ? 1 : 0;
    uint64_t total = f->bits == 64 ? 0 : 1ull << f->bits; /* mod 2^64 */
    uint64_t nonfinite = f->specials == EMU_SPECIALS_FNUZ ? 1
                       : nonfinite_per_sign * (f->is_signed ? 2 : 1);
    f->finite_count = total - nonfinite;
    return 0;
}

void emu_format_spec_string(const emu_format *f, char *buf, size_t size)
{
    EMU_HOSTFP_GUARD;
    /* Every field explicit: "e4m3" alone would name the registered OCP
     * format, so the items must override whatever the base resolves to. */
    snprintf(buf, size, "e%dm%d,bias=%d,specials=%s,overflow=%s,"
             "subnormals=%s,signed=%s,zero=%s",
             f->ebits, f->mbits, f->bias, emu_specials_name(f->specials),
             emu_overflow_name(f->overflow), f->subnormals ? "yes" : "no",
             f->is_signed ? "yes" : "no", f->has_zero ? "yes" : "no");
}
