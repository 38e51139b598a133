/*
 * api_headers.c — compiled (never linked or run) by two CTests, to hold
 * the public headers' include contract:
 *
 *   api_emu_h_no_mpfr      <emu/emu.h> alone, as a user's program sees it
 *                          (strict C11, warnings as errors): it must not
 *                          bring in MPFR (or GMP) — only the opt-in
 *                          emu/extend.h and emu/ref.h may;
 *   api_extend_h_has_mpfr  the same check on <emu/extend.h>, which must
 *                          trip it: shows that the check can fail.
 *
 * The include guards of mpfr.h (__MPFR_H) and gmp.h (__GMP_H__), and
 * MPFR_VERSION, are how the check sees them.
 */
#ifndef EMU_API_HEADER
#define EMU_API_HEADER <emu/emu.h>
#endif
#include EMU_API_HEADER

#if defined(__MPFR_H) || defined(MPFR_VERSION) || defined(__GMP_H__)
#error "this header includes <mpfr.h>"
#endif

int emu_api_headers_check(void);
int emu_api_headers_check(void) { return 0; }
