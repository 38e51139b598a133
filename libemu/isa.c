/*
 * isa.c — which instruction-set level the array kernels run at.
 *
 * The hot array passes (round_array.c's rounding kernels, rng.c's Philox
 * fill) are compiled three times from one source: for baseline x86-64
 * (SSE2), for AVX2 and for AVX-512 (x86-64-v4), and this file picks one
 * per process: the best the CPU and the build have, or a lower one named
 * by the environment variable EMU_ISA (baseline, avx2, avx512), so that
 * the tests can hold every compiled version bit-identical to the scalar
 * reference on a machine that has them all.  Every version does the same
 * integer and IEEE operations in the same order, so the results are the
 * same whichever runs.
 *
 * Built with -DEMU_NO_TARGET_CLONES, or not for x86-64 with GCC or clang,
 * only the baseline exists.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/round.h"
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const char *const isa_names[EMU_ISA_COUNT] = {
    [EMU_ISA_BASELINE] = "baseline",
    [EMU_ISA_AVX2] = "avx2",
    [EMU_ISA_AVX512] = "avx512",
};

const char *emu_isa_name(emu_isa isa)
{
    return (unsigned)isa < EMU_ISA_COUNT ? isa_names[isa] : "?";
}

emu_isa emu_isa_best(void)
{
#if EMU_HAVE_ISA_CLONES
    __builtin_cpu_init();
    /* x86-64-v4's AVX-512 subsets, as GCC's arch=x86-64-v4 assumes them;
     * libgcc also checks that the OS saves the registers (XCR0). */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512dq")
        && __builtin_cpu_supports("avx512vl")
        && __builtin_cpu_supports("avx512cd")
        && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2")
        && __builtin_cpu_supports("fma"))
        return EMU_ISA_AVX512;
    if (__builtin_cpu_supports("avx2"))
        return EMU_ISA_AVX2;
#endif
    return EMU_ISA_BASELINE;
}

/* Decided once; a race between first callers stores the same value. */
static atomic_int isa_cached = -1;

emu_isa emu_isa_requested(void)
{
    const char *s = getenv("EMU_ISA");
    if (s && *s)
        for (int i = 0; i < EMU_ISA_COUNT; i++)
            if (!strcmp(s, isa_names[i]))
                return (emu_isa)i;
    return EMU_ISA_COUNT; /* none, or not a level's name: the best */
}

emu_isa emu_isa_active(void)
{
    int v = atomic_load_explicit(&isa_cached, memory_order_relaxed);
    if (v < 0) {
        emu_isa best = emu_isa_best(), want = emu_isa_requested();
        v = (int)(want < best ? want : best);
        atomic_store_explicit(&isa_cached, v, memory_order_relaxed);
    }
    return (emu_isa)v;
}

const char *emu_round_kernel_isa(void)
{
    return emu_isa_name(emu_isa_active());
}
