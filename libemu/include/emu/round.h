/*
 * emu/round.h — the rounding choke point.
 *
 * Every value the library produces in a format passes through
 * emu_round2(): an exact real number, given as a double or as an
 * unevaluated pair hi + lo (the output of an error-free transformation),
 * is rounded once into the format.  The function reports, in MPFR's
 * convention, whether the result lies above, below or on the exact value,
 * and raises flags in SoftFloat's numbering.
 *
 * Nothing else in the library rounds.  The array functions below are
 * faster implementations of exactly the same map and are tested to be
 * bit-identical to it.
 */
#ifndef EMU_ROUND_H
#define EMU_ROUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "emu/format.h"
#include "emu/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emu_rnd {
    EMU_RNE,     /* to nearest, ties to even (IEEE default)               */
    EMU_RNA,     /* to nearest, ties away from zero                       */
    EMU_RZ,      /* toward zero                                           */
    EMU_RU,      /* toward +inf                                           */
    EMU_RD,      /* toward -inf                                           */
    EMU_RO,      /* round to odd: truncate, set the last bit if inexact   */
    EMU_RS,      /* stochastic, P(away from zero) = distance ratio        */
    EMU_RS_BITS, /* stochastic with r random bits, as hardware builds it  */
    EMU_RND_COUNT
} emu_rnd;

/* Flags: the low five match Berkeley SoftFloat / TestFloat. */
enum {
    EMU_FLAG_INEXACT   = 1u << 0,
    EMU_FLAG_UNDERFLOW = 1u << 1, /* tiny and inexact                     */
    EMU_FLAG_OVERFLOW  = 1u << 2,
    EMU_FLAG_INFINITE  = 1u << 3, /* exact infinite result from finite (x/0) */
    EMU_FLAG_INVALID   = 1u << 4,
    EMU_FLAG_SUBNORMAL = 1u << 5, /* result is subnormal (non-zero, < 2^emin) */
    EMU_FLAG_FLUSHED   = 1u << 6, /* a subnormal result was flushed to zero  */
    EMU_FLAG_TESTFLOAT_MASK = 0x1f
};

typedef enum emu_tininess {
    EMU_TINY_AFTER,  /* IEEE 754 default on x86: after rounding            */
    EMU_TINY_BEFORE  /* before rounding (ARM, some hardware)               */
} emu_tininess;

/* The choices IEEE 754 and the OCP OFP8 specification leave to an
 * implementation, one field each, so that a hardware designer can match
 * the unit under test.  Zero-initialised it is EMU_PROFILE_IEEE: the
 * library's behaviour before profiles existed.  "Narrow" means a format
 * of at most 8 bits.  NaN results at the value level are doubles whose
 * sign and fraction bits carry the format NaN's sign and payload (the
 * payload top-aligned below the quiet bit, as hardware widens it). */
typedef struct emu_profile {
    bool narrow_nans_quiet;   /* no signalling NaN in narrow formats: every
                                 NaN pattern is quiet (RISC-V Zvfofp8min)  */
    bool quiet_unrepresentable; /* inf or NaN into a format without them
                                 raises no invalid                         */
    bool saturate_keeps_inf;  /* saturation leaves ±inf as ±inf instead of
                                 ±max (not OCP's saturation mode)          */
    bool narrow_nan_all_ones; /* default NaN of a narrow format with IEEE
                                 specials: every fraction bit set (0x7F in
                                 E5M2) rather than the quiet bit alone     */
    bool nan_negative;        /* the default NaN has its sign bit set      */
    bool nan_keep_sign;       /* a NaN result takes its NaN operand's sign */
    bool nan_keep_payload;    /* ... and its payload, truncated to the top
                                 bits the format holds, quiet bit set      */
} emu_profile;

/* Named profiles (tabulated in README.md, tested in test_profiles.c). */
typedef enum emu_profile_id {
    EMU_PROFILE_IEEE,  /* IEEE 754: sNaN everywhere, default NaN           */
    EMU_PROFILE_OCP,   /* OCP OFP8 1.0 + IEEE 754 6.2.3: NaNs propagate   */
    EMU_PROFILE_RISCV, /* RISC-V F/V + Zvfofp8min: canonical NaN, OFP8
                          NaNs quiet, 0x7F                                */
    EMU_PROFILE_COUNT
} emu_profile_id;

/* How to round.  Zero-initialised it means: nearest-even, tininess after
 * rounding, the format's own overflow rule, the IEEE profile. */
typedef struct emu_rounding {
    emu_rnd mode;
    unsigned sr_bits;       /* r for EMU_RS_BITS, 1..64                  */
    emu_tininess tininess;
    bool saturate;          /* overrides the format: overflow and ±inf
                               give ±max (OCP OFP8 saturation mode)      */
    emu_rng *rng;           /* word source for EMU_RS / EMU_RS_BITS       */
    emu_profile profile;    /* special values: NaN and invalid choices    */
} emu_rounding;

/* What rounding did: ternary > 0 if the result is above the exact value,
 * < 0 below, 0 exact (and for NaN results); flags as above. */
typedef struct emu_status {
    int ternary;
    unsigned flags;
} emu_status;

/* Round the exact value hi + lo into fmt; lo = 0 for a plain double.
 * Any pair of doubles is accepted: one whose parts overlap (|lo| above
 * ulp(hi)/2, even |lo| > |hi|, as in (1, 2^60)) is first normalised
 * without error by TwoSum, so the result is that of the exact sum.  The
 * outputs of TwoSum, of the fma product residual and of the division and
 * square-root residuals are already normalised.  Exceptions: an infinite
 * lo with a finite hi is that infinity; an overlapping pair whose sum
 * exceeds binary64's range (|hi + lo| >= 2^1024 - 2^970) is an overflow
 * for a format whose binades stop below 2^1023, and is refused (NaN if
 * the format has one, else 0, with EMU_FLAG_INVALID) for a format
 * reaching 2^1023 (binary64: its rounding there would need a wider
 * exponent) and for a negative one in an unsigned format.  (A normalised
 * pair such as (DBL_MAX, 2^970) is rounded as always.)
 * For stochastic modes a random word is taken from r->rng (required).
 * `st` may be NULL. */
double emu_round2(const emu_format *fmt, double hi, double lo,
                  const emu_rounding *r, emu_status *st);

static inline double emu_round(const emu_format *fmt, double x,
                               const emu_rounding *r, emu_status *st)
{
    return emu_round2(fmt, x, 0.0, r, st);
}

/* Same as emu_round2 for stochastic modes, with the random word given. */
double emu_round2_word(const emu_format *fmt, double hi, double lo,
                       const emu_rounding *r, uint64_t word, emu_status *st);

/* Array forms: the same map as emu_round2 applied to each element, with
 * faster code paths (tested bit-identical to the scalar choke point).
 *
 * out may equal in.  For stochastic modes element i uses the random word
 * emu_random64(seed, stream, first_index + i), so a result never depends
 * on how an array is split into calls or threads. */
typedef struct emu_array_rounding {
    emu_rounding rnd;        /* rnd.rng is ignored here                   */
    uint64_t seed, stream;   /* for stochastic modes                      */
    uint64_t first_index;
} emu_array_rounding;

/* What happened to the elements of one or more array calls (the calls
 * add to it, so zero it before the first). */
typedef struct emu_round_counts {
    uint64_t n;          /* elements rounded                               */
    uint64_t inexact;    /* result differs from the input                  */
    uint64_t underflow;  /* tiny and inexact                               */
    uint64_t to_zero;    /* non-zero finite input, zero result             */
    uint64_t subnormal;  /* non-zero result below 2^emin                   */
    uint64_t overflow;   /* finite input beyond the range                  */
    uint64_t nan;        /* NaN results, whatever the input                */
    uint64_t invalid;    /* e.g. inf into a format without inf             */
    unsigned flags;      /* OR of every element's flags                    */
} emu_round_counts;

/* Round n binary32 values into fmt.  counts may be NULL.  Returns 0, or
 * -1 with err and nothing written if fmt was never validated or changed
 * since (EMU_EINVAL, emu_format_is_validated) or does not fit the binary32
 * carrier (EMU_EUNSUPPORTED, fmt->fits_carrier). */
int emu_round_array_f32(const emu_format *fmt, float *out, const float *in,
                        size_t n, const emu_array_rounding *a,
                        emu_round_counts *counts, emu_error *err);

/* The instruction-set level the array kernels of this process run at:
 * "avx512", "avx2" or "baseline" — the best the CPU has, or the one the
 * environment variable EMU_ISA names if lower.  Results are the same at
 * every level. */
const char *emu_round_kernel_isa(void);

/* Round n binary64 values into fmt (any format).  Returns 0, or -1 with
 * err (EMU_EINVAL) and nothing written for a format that
 * emu_format_is_validated refuses. */
int emu_round_array_f64(const emu_format *fmt, double *out, const double *in,
                        size_t n, const emu_array_rounding *a,
                        emu_round_counts *counts, emu_error *err);

/* Adds one element's outcome to counts (what the array forms do for each
 * element; exported for the slow paths of other modules). */
void emu_round_counts_add(emu_round_counts *counts, double in, double out,
                          unsigned flags);

/* Names as the CLI and spec files spell them ("rne", "rz", "sr", ...). */
const char *emu_rnd_name(emu_rnd m);
/* Parses a mode name; "sr13" means EMU_RS_BITS with 13 bits.  A look-up:
 * 0, or -1 if s is not a mode name (or srN with N outside 1..64). */
int emu_rnd_parse(const char *s, emu_rnd *mode, unsigned *sr_bits);
bool emu_rnd_is_stochastic(emu_rnd m);

/* The choices of a named profile (all false for an unknown id). */
emu_profile emu_profile_preset(emu_profile_id id);
/* "ieee", "ocp", "riscv"; "?" for an unknown id. */
const char *emu_profile_name(emu_profile_id id);
/* Parses a profile name into *out.  A look-up: 0, or -1 if s names no
 * profile (emu_profile_names lists them). */
int emu_profile_parse(const char *s, emu_profile *out, emu_profile_id *id);
/* The id of a named profile with exactly these choices, or
 * EMU_PROFILE_COUNT if the choices were set one by one. */
emu_profile_id emu_profile_id_of(const emu_profile *p);
/* The names, for messages: "ieee, ocp, riscv". */
const char *emu_profile_names(void);

/* The NaN result of an operation into fmt under profile p, as a double:
 * `in` is the NaN operand it propagates (sign and payload, if p keeps
 * them); for a new NaN, the signed value it stands for (-inf into E4M3:
 * its sign, if p keeps signs), or 0.0 when it has no sign (inf - inf). */
double emu_nan_result(const emu_format *fmt, const emu_profile *p, double in);

/* Writes "inexact|underflow" etc. into buf ("none" for 0). */
void emu_flags_string(unsigned flags, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
