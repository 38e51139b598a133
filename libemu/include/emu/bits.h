/*
 * emu/bits.h — bit patterns of a format: decode, encode, classify.
 *
 * Bit patterns are carried in a struct so that they never mix silently with
 * arithmetic on values.  Bit 0 is the last fraction bit; the sign, if the
 * format has one, is bit (fmt->bits - 1).
 */
#ifndef EMU_BITS_H
#define EMU_BITS_H

#include <stdbool.h>
#include <stdint.h>

#include "emu/format.h"
#include "emu/round.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct emu_bits {
    uint64_t v;
} emu_bits;

typedef enum emu_class {
    EMU_CLASS_ZERO,
    EMU_CLASS_SUBNORMAL,
    EMU_CLASS_NORMAL,
    EMU_CLASS_INF,
    EMU_CLASS_NAN,
    EMU_CLASS_COUNT
} emu_class;

/* The value a pattern encodes.  A NaN pattern gives a quiet double NaN
 * with the pattern's sign and, in formats with IEEE specials, its
 * fraction top-aligned in the double's (so that a profile that keeps
 * payloads can propagate it; the quiet bit is set, as quieting does).
 * Bits above fmt->bits are ignored. */
double emu_decode(const emu_format *fmt, emu_bits b);

/* Class of a pattern. */
emu_class emu_classify_bits(const emu_format *fmt, emu_bits b);

/* Class of a value as fmt would hold it (the value must be representable
 * or NaN/inf). */
emu_class emu_classify(const emu_format *fmt, double x);

/* The pattern of a representable value.  NaN gives the format's canonical
 * NaN.  Returns false (and *out = canonical NaN or 0) if x is not exactly
 * representable, or is NaN/inf in a format that cannot hold it. */
bool emu_encode(const emu_format *fmt, double x, emu_bits *out);

/* Canonical quiet NaN of the format (false if the format has no NaN). */
bool emu_nan_bits(const emu_format *fmt, emu_bits *out);

/* IEEE formats only: a NaN pattern with the quiet bit clear. */
bool emu_is_signaling(const emu_format *fmt, emu_bits b);

/* The same three under a profile (emu/round.h): which patterns signal,
 * which pattern a new NaN gets, and how a NaN result's sign and payload
 * (a double from the value layer, emu_nan_result) become a pattern.  With
 * the IEEE profile they agree with the three above. */
bool emu_is_signaling_in(const emu_format *fmt, const emu_profile *p,
                         emu_bits b);
bool emu_nan_bits_in(const emu_format *fmt, const emu_profile *p,
                     emu_bits *out);
bool emu_encode_in(const emu_format *fmt, const emu_profile *p, double x,
                   emu_bits *out);

/* True if x is exactly a value of fmt (NaN/inf only where the format has them). */
bool emu_representable(const emu_format *fmt, double x);

/* The next value of fmt above x (toward +inf), x representable. */
double emu_next_up(const emu_format *fmt, double x);
double emu_next_down(const emu_format *fmt, double x);

const char *emu_class_name(emu_class c);

#ifdef __cplusplus
}
#endif
#endif
