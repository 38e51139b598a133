/*
 * mpfr_check.h — the comparison every test_mpfr_* suite makes: one result
 * of the emulator against the oracle's, value (the sign of zero counts),
 * ternary sign and all seven flags, and a report of a mismatch that
 * carries everything needed to replay it.
 */
#ifndef EMU_MPFR_CHECK_H
#define EMU_MPFR_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include <emu/emu.h>

/* Mismatches printed before the rest are only counted. */
enum { PRINT_LIMIT = 20 };

/* Results compared and mismatches found, over the whole suite. */
extern unsigned long long n_checked, n_mismatch;

/* One result of the emulator (got) against the oracle's (want).  `in` is
 * the operands' format (NULL: plain doubles, printed as binary64); n
 * operands, as patterns (bits, may be NULL) and values (v). */
bool check_one(const char *op, const emu_format *in, const emu_format *out,
               const emu_rounding *r, int n, const uint64_t *bits,
               const double *v, double want, emu_status ws, double got,
               emu_status gs);

#endif
