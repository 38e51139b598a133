/*
 * emu/rng.h — counter-based random numbers for stochastic rounding.
 *
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11).  A random word is a pure function of (seed, stream, index):
 * element i of an array op always gets the same word whatever the chunking
 * or the thread count, which is what makes stochastic rounding reproducible.
 */
#ifndef EMU_RNG_H
#define EMU_RNG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The 64-bit random word number `index` of stream `stream` under `seed`. */
uint64_t emu_random64(uint64_t seed, uint64_t stream, uint64_t index);

/* Four words at once: out[j] = emu_random64(seed, stream, index + j). */
void emu_random64x4(uint64_t seed, uint64_t stream, uint64_t index,
                    uint64_t out[4]);

/* n consecutive words, out[j] = emu_random64(seed, stream, index + j):
 * the bulk form the array roundings use. */
void emu_random_fill(uint64_t seed, uint64_t stream, uint64_t index,
                     uint64_t *out, size_t n);

/* The raw Philox4x32-10 block function (exposed for known-answer tests). */
void emu_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                       uint32_t out[4]);

/* A sequential view for scalar code: each draw takes the next index. */
typedef struct emu_rng {
    uint64_t seed;
    uint64_t stream;
    uint64_t index;
} emu_rng;

static inline emu_rng emu_rng_make(uint64_t seed, uint64_t stream)
{
    emu_rng r = { seed, stream, 0 };
    return r;
}

static inline uint64_t emu_rng_next(emu_rng *r)
{
    return emu_random64(r->seed, r->stream, r->index++);
}

#ifdef __cplusplus
}
#endif
#endif
