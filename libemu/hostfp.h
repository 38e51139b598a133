/*
 * hostfp.h — the host never decides a result (library-private).
 *
 * libemu computes with host doubles where that is exact and cheap (TwoSum,
 * fma residuals, scaling by powers of two), and such code is only correct
 * in the IEEE 754 default environment: round to nearest, subnormals kept
 * (no flush-to-zero, no denormals-are-zero), exceptions masked, no excess
 * precision, no contraction of a*b+c.  libemu runs inside other processes
 * (PyTorch with flush-to-zero, a -ffast-math testbench, a program that
 * changed the rounding mode), so:
 *
 *  - the build refuses excess precision and fast-math, and turns off
 *    contraction in every source that includes this header first;
 *  - every public entry point that touches a floating-point value starts
 *    with EMU_HOSTFP_GUARD: if the calling thread's control state is
 *    already the default (the common case: one register read and a
 *    compare) nothing happens; otherwise the state is saved, set to the
 *    default and restored, flags included, on every return path.
 *
 * Inside the library the guard is already held, so internal code calls the
 * `_unguarded` twins of the hot public functions (internal.h).
 */
#ifndef EMU_HOSTFP_H
#define EMU_HOSTFP_H

#include <float.h>
#include <stdbool.h>
#include <stdint.h>

/* x87 excess precision rounds twice (to 64 bits, then to 53 on a store):
 * every error-free transformation (TwoSum, the fma residuals) is then
 * wrong.  Build for SSE2 (-mfpmath=sse) or a 64-bit target. */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "libemu needs FLT_EVAL_METHOD == 0: excess precision (x87) breaks its error-free transformations; build with -msse2 -mfpmath=sse"
#endif

/* -ffast-math reassociates a + b - a to b, flushes subnormals at startup
 * and assumes no NaN or inf: none of the emulation survives it. */
#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "libemu must not be built with -ffast-math or -ffinite-math-only: they rewrite its exact arithmetic"
#endif

/* No fused a*b+c unless written as fma(): a contracted TwoSum or residual
 * is no longer exact.  GCC ignores (and warns about) the standard pragma;
 * in ISO mode (-std=c11) its default is already off, in GNU mode it is
 * "fast", so a vendored build with -std=gnu11 needs its own spelling. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#else
#pragma STDC FP_CONTRACT OFF
#endif

#if !defined(__GNUC__)
#error "libemu's host floating-point guard needs __attribute__((cleanup)) (GCC or Clang)"
#endif

/* The caller's control state, when it had to be replaced. */
typedef struct emu_hostfp {
    bool replaced;
#if defined(__x86_64__) || defined(__i386__)
    uint32_t mxcsr;
    uint16_t x87cw;
#elif defined(__aarch64__)
    uint64_t fpcr;
#else
    char env[128]; /* a fenv_t, kept opaque here (hostfp.c checks the size) */
#endif
} emu_hostfp;

/* Reads of the control register: the fast path of every entry point. */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
/* Default MXCSR: every exception masked, round to nearest, FZ = DAZ = 0.
 * The low six bits are the sticky flags, which decide nothing. */
#define EMU_MXCSR_DEFAULT 0x1F80u
#define EMU_MXCSR_CONTROL 0xFFC0u
static inline bool emu_hostfp_is_default(void)
{
    return (_mm_getcsr() & EMU_MXCSR_CONTROL) == EMU_MXCSR_DEFAULT;
}
#elif defined(__aarch64__)
/* FPCR bits that change results or trap: FIZ, AH, NEP (0-2), the trap
 * enables (8-12, 15), FZ16 (19), RMode (22-23), FZ (24), DN (25). */
#define EMU_FPCR_CONTROL 0x03C89F07u
static inline bool emu_hostfp_is_default(void)
{
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    return (fpcr & EMU_FPCR_CONTROL) == 0;
}
#else
/* Portable fallback: only the rounding mode can be seen; a platform's
 * flush-to-zero bit is not (documented in the README). */
#include <fenv.h>
static inline bool emu_hostfp_is_default(void)
{
    return fegetround() == FE_TONEAREST;
}
#endif

/* Saves the caller's state into *h and installs the default one. */
void emu_hostfp_replace(emu_hostfp *h);
/* Puts back what emu_hostfp_replace saved. */
void emu_hostfp_restore(const emu_hostfp *h);

static inline emu_hostfp emu_hostfp_enter(void)
{
    emu_hostfp h = { .replaced = !emu_hostfp_is_default() };
    if (h.replaced)
        emu_hostfp_replace(&h);
    return h;
}

static inline void emu_hostfp_leave(emu_hostfp *h)
{
    if (h->replaced)
        emu_hostfp_restore(h);
}

/* The first statement of a public entry point.  The cleanup runs after
 * the return value is computed, on every return path ("unused": Clang
 * does not count a cleanup as a use).  EMU_NO_HOSTFP_GUARD
 * (CMake -DEMU_HOSTFP_GUARD=OFF) exists only to measure what the guard
 * costs and to show that the host-state tests fail without it. */
#if defined(EMU_NO_HOSTFP_GUARD)
#define EMU_HOSTFP_GUARD ((void)0)
#else
#define EMU_HOSTFP_GUARD                                                   \
    emu_hostfp emu_hostfp_held_                                           \
        __attribute__((cleanup(emu_hostfp_leave), unused)) =              \
            emu_hostfp_enter()
#endif

#endif
