/*
 * hostfp.c — the slow path of the host floating-point guard (hostfp.h):
 * the caller's control state is not the default, so it is saved, the
 * default is installed for the duration of the call, and the caller's
 * state (its sticky flags included) is put back on return.
 *
 * x86: both units are set, MXCSR (SSE, where libemu computes) and the x87
 * control word (which long double code in libm would use).  The caller's
 * flags are restored with its control bits, so flags raised inside the
 * call do not leak out of this path.
 */
#include "hostfp.h"

#if defined(__x86_64__) || defined(__i386__)

#define X87_DEFAULT_CW 0x037Fu /* all masked, round to nearest, 64-bit */

void emu_hostfp_replace(emu_hostfp *h)
{
    h->mxcsr = _mm_getcsr();
    __asm__ __volatile__("fnstcw %0" : "=m"(h->x87cw));
    _mm_setcsr(EMU_MXCSR_DEFAULT);
    if (h->x87cw != X87_DEFAULT_CW) {
        uint16_t cw = X87_DEFAULT_CW;
        __asm__ __volatile__("fldcw %0" : : "m"(cw));
    }
}

void emu_hostfp_restore(const emu_hostfp *h)
{
    if (h->x87cw != X87_DEFAULT_CW)
        __asm__ __volatile__("fldcw %0" : : "m"(h->x87cw));
    _mm_setcsr(h->mxcsr);
}

#elif defined(__aarch64__)

void emu_hostfp_replace(emu_hostfp *h)
{
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(h->fpcr));
    uint64_t clean = h->fpcr & ~(uint64_t)EMU_FPCR_CONTROL;
    __asm__ __volatile__("msr fpcr, %0" : : "r"(clean));
}

void emu_hostfp_restore(const emu_hostfp *h)
{
    __asm__ __volatile__("msr fpcr, %0" : : "r"(h->fpcr));
}

#else

#include <string.h>

_Static_assert(sizeof(fenv_t) <= sizeof(((emu_hostfp *)0)->env),
               "emu_hostfp.env is too small for this platform's fenv_t");

void emu_hostfp_replace(emu_hostfp *h)
{
    fenv_t env;
    fegetenv(&env);
    memcpy(h->env, &env, sizeof env);
    fesetenv(FE_DFL_ENV);
}

void emu_hostfp_restore(const emu_hostfp *h)
{
    fenv_t env;
    memcpy(&env, h->env, sizeof env);
    fesetenv(&env);
}

#endif
