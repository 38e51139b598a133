/*
 * emu/format.h — floating-point formats as data.
 *
 * A format is a handful of numbers and two policies (special-value encoding,
 * overflow behaviour).  Everything else — precision, exponent range, largest
 * finite value, number of finite values — is derived once, when the format is
 * validated, and stored beside the spec so that the rounding hot path never
 * recomputes it.
 *
 * The derived fields are read-only: emu_format_validate() writes them and
 * seals the result.  A format built or changed by hand (a struct literal, a
 * copy with one spec field edited) must go through emu_format_validate()
 * again before use.  The entry points that keep a format or sweep arrays
 * with it (tensors and so every op, array rounding, accumulator specs,
 * precision policies) refuse an unsealed one with an error; the scalar
 * functions (emu_round, emu_add, emu_encode, ...) trust theirs, for speed.
 *
 * Formats come from three places: the spec files in formats/ (embedded into
 * the library at build time), a user's spec file loaded at run time, and
 * inline spec strings such as "e5m10,bias=14" or "e4m3,nosubnormals,saturate".
 * All three go through the same parser and the same validation.  Errors
 * follow emu/error.h: a bad spec is EMU_ESPEC with the key, a valid one
 * the emulator cannot do exactly EMU_EUNSUPPORTED.
 */
#ifndef EMU_FORMAT_H
#define EMU_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "emu/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EMU_NAME_MAX 64

/* How the all-ones exponent field and negative zero are spent. */
typedef enum emu_specials {
    EMU_SPECIALS_IEEE,   /* exponent all ones: fraction 0 = ±inf, else NaN  */
    EMU_SPECIALS_FN,     /* no inf; NaN only at S.11…1.11…1 (OCP E4M3)      */
    EMU_SPECIALS_FINITE, /* no inf, no NaN: every encoding is a number       */
    EMU_SPECIALS_FNUZ,   /* no inf, no -0; the single NaN is 1.00…0.00…0    */
    EMU_SPECIALS_COUNT
} emu_specials;

/* What a finite result too large for the format becomes. */
typedef enum emu_overflow {
    EMU_OVERFLOW_INF,      /* IEEE 754: ±inf or ±max by rounding direction  */
    EMU_OVERFLOW_SATURATE, /* always ±max finite                            */
    EMU_OVERFLOW_NAN,      /* NaN where IEEE would give inf (OCP non-sat.)  */
    EMU_OVERFLOW_COUNT
} emu_overflow;

typedef struct emu_format {
    char name[EMU_NAME_MAX];
    char aliases[128];      /* comma-separated other names, may be ""     */
    char description[192];  /* one line of prose, may be ""              */

    /* --- the spec ----------------------------------------------------- */
    int ebits;           /* exponent field width, 1..11                     */
    int mbits;           /* stored fraction bits, 0..52                     */
    int bias;            /* exponent bias                                   */
    bool is_signed;      /* has a sign bit                                  */
    bool subnormals;     /* false: results below min normal flush to ±0     */
    bool has_zero;       /* false (E8M0): exponent field 0 is a normal binade */
    emu_specials specials;
    emu_overflow overflow;

    /* --- derived by emu_format_validate(): read-only -------------------- */
    int bits;            /* total width: sign + ebits + mbits               */
    int p;               /* precision in bits, mbits + 1                    */
    int emin;            /* exponent of the smallest normal, 2^emin         */
    int emax;            /* exponent of the largest finite binade           */
    int qmin;            /* exponent of the smallest quantum (ulp)           */
    double max;          /* largest finite value                            */
    double min_normal;   /* 2^emin                                          */
    double min_subnormal;/* 2^qmin if subnormals, else min_normal           */
    double min_value;    /* smallest positive value (0 excluded)            */
    double epsilon;      /* 2^(1-p): gap between 1 and the next value        */
    double unit_roundoff;/* 2^-p                                            */
    uint64_t finite_count; /* number of distinct finite bit patterns       */
    bool has_inf;
    bool has_nan;
    bool fits_carrier;   /* every value is a binary32 (the tensor carrier)  */
    bool fits_double;    /* every value is a binary64 (scalar rounding)     */
    /* The seal: a fingerprint of the spec and derived fields (not the
     * names) that only emu_format_validate() writes; 0 if it never ran. */
    uint64_t sealed;
} emu_format;

/* Parse a spec in the file syntax (key = value lines, '#' comments).
 * `origin` names the source for messages (a path or "<string>").
 * Returns 0 on success, -1 with *err filled in. */
int emu_format_parse_file_text(emu_format *out, const char *text, size_t len,
                               const char *origin, emu_error *err);

/* Parse an inline spec: a registered name or "eXmY", then optional
 * ",key=value" or ",flag" items.  Returns 0 or -1 with *err. */
int emu_format_parse_inline(emu_format *out, const char *spec, emu_error *err);

/* Fill the derived fields and check the spec can be emulated exactly.
 * Returns 0 (fmt sealed) or -1 with *err (key names the offending field;
 * fmt is left unsealed). */
int emu_format_validate(emu_format *fmt, emu_error *err);

/* Whether fmt is as emu_format_validate() left it: sealed, and no field
 * but the names changed since.  False for NULL. */
bool emu_format_is_validated(const emu_format *fmt);

/* Registry: the embedded formats, plus any the user adds.  emu_format_at
 * and emu_format_find are look-ups (emu/error.h): NULL for an index past
 * the count or a name (or alias) not registered. */
size_t emu_format_count(void);
const emu_format *emu_format_at(size_t i);
const emu_format *emu_format_find(const char *name);

/* Add a format from a spec file on disk.  Errors name the file and line
 * (EMU_EIO: unreadable; EMU_ESPEC: a bad spec); a name already registered
 * is refused (EMU_ESTATE). */
int emu_format_load_file(const char *path, emu_error *err);

/* Resolve a user's string: a registered name, an inline spec or, if it
 * names a readable file ending in ".fmt", that file.  The result is copied
 * into *out. */
int emu_format_resolve(emu_format *out, const char *spec, emu_error *err);

/* Short names for policies, as the spec files spell them. */
const char *emu_specials_name(emu_specials s);
const char *emu_overflow_name(emu_overflow o);

/* Writes the canonical inline spec of a format (e.g. "e4m3,bias=7,fn,nan")
 * into buf; round-trips through emu_format_parse_inline. */
void emu_format_spec_string(const emu_format *fmt, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
