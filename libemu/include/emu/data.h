/*
 * emu/data.h — training data: Fashion-MNIST from its IDX files, and a
 * small image-like data set generated in code, so that a training run
 * works on a machine with no data installed.
 */
#ifndef EMU_DATA_H
#define EMU_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "emu/format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where Debian's dataset-fashion-mnist package puts the files. */
#define EMU_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct emu_dataset {
    char name[64];       /* "fashion-mnist/train", "synthetic/test"      */
    char source[320];    /* the files read, or the generator and seed   */
    size_t n;            /* examples                                    */
    int channels, height, width;
    int classes;
    float *x;            /* (n, channels, height, width), in [0, 1]     */
    uint8_t *y;          /* (n) labels, 0 .. classes-1                  */
} emu_dataset;

/* Reads an IDX image file (magic 0x00000803, unsigned bytes, 3 dims) and
 * its label file (0x00000801), gzip-compressed or not.  Validates magic
 * numbers, dimensions, lengths (a truncated or over-long file is an error
 * naming the file and the byte offset), label range (< 10 classes unless
 * more are seen in a valid file: classes = max label + 1) and that the two
 * files have the same number of examples.  Pixels are scaled to [0, 1]. */
int emu_dataset_load_idx(emu_dataset *d, const char *images_path,
                         const char *labels_path, const char *name,
                         emu_error *err);

/* Both splits of Fashion-MNIST from dir (NULL: EMU_FASHION_MNIST_DIR),
 * files train-images-idx3-ubyte.gz etc. */
int emu_dataset_fashion_mnist(emu_dataset *train, emu_dataset *test,
                              const char *dir, emu_error *err);

/* The embedded data set: 28 x 28 grey images of 10 classes of simple
 * shapes (bars, rings, crosses, ...) at random positions, sizes and
 * contrasts, with noise; deterministic for a seed, learnable by a small
 * MLP or CNN in a few hundred steps but not trivially. */
int emu_dataset_synthetic(emu_dataset *train, emu_dataset *test,
                          uint64_t seed, size_t n_train, size_t n_test,
                          emu_error *err);

void emu_dataset_free(emu_dataset *d);

/* The order in which a training run visits n examples in epoch `epoch`
 * (emu_train's batches are its consecutive runs of `batch` indices):
 * perm[0..n) receives a permutation of 0..n-1 — every index exactly once.
 * It is a function of (n, seed, epoch) alone, the same on every machine:
 * a Fisher-Yates shuffle driven by Philox stream 2^48 + epoch of `seed`
 * (j = w mod (i + 1), so each permutation has probability 1/n! up to a
 * bias below n / 2^64), a stream no op of the library draws from.  So a
 * program of its own replays emu_train's batches exactly, and each epoch
 * has its own order. */
void emu_batch_permutation(size_t *perm, size_t n, uint64_t seed,
                           uint64_t epoch);

#ifdef __cplusplus
}
#endif
#endif
