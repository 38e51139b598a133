/*
 * emu/data.h — training data: Fashion-MNIST from its IDX files, and a
 * small image-like data set generated in code, so that a training run
 * works on a machine with no data installed; and text for character
 * language models: a corpus generated in code, and Debian's fortunes.
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

/* ---- text: character language models -------------------------------------
 * A text is a sequence of token ids over a fixed 97-character vocabulary:
 * id 0 is tab, id 1 newline, ids 2 .. 96 the printable ASCII characters
 * ' ' .. '~' in order.  Any other byte is outside the vocabulary, and a
 * file holding one is refused (never mapped or dropped silently). */

/* Where Debian's package `fortunes` puts its files. */
#define EMU_FORTUNES_DIR "/usr/share/games/fortunes"
#define EMU_TEXT_VOCAB 97   /* '\t', '\n', ' ' .. '~' (ids in that order)  */

typedef struct emu_textset {
    char name[64];          /* "text/train", "fortunes/val"                */
    char source[2048];      /* the generator and seed, or the files read
                               with their sizes in bytes                  */
    size_t n;               /* tokens                                      */
    uint8_t *tokens;        /* ids 0 .. EMU_TEXT_VOCAB-1                   */
    size_t records;         /* stories (generated) or fortunes it holds    */
    /* The generated corpus: the information of the generator's random
     * choices per character, in bits — what a model that knew the
     * grammar would score (bits per character); 0 for files. */
    double entropy_bits;
} emu_textset;

/* The embedded corpus: n_train and n_val characters (each 1 .. 10^8) of
 * numbered "stories" from a small grammar, with the long-range structure
 * that attention and recurrence are for: each story introduces two made-up
 * names and repeats them, numbers its lines, closes every bracket and
 * quote it opens, refers back to earlier line numbers, and copies a random
 * 5-letter code from the line that hides it to the line that finds it
 * (README "Text data" has the grammar).  A pure function of the seed:
 * story k of a split comes from Philox stream 2^47 + split 2^40 + k
 * (split 1 train, 2 validation), so the two splits are disjoint draws. */
int emu_text_embedded(emu_textset *train, emu_textset *val, uint64_t seed,
                      size_t n_train, size_t n_val, emu_error *err);

/* Debian's fortunes.  path NULL: the default set, the 17 files of
 * EMU_FORTUNES_DIR that lie entirely inside the vocabulary (ascii-art
 * cookie debian disclaimer food linuxcookie magic medicine paradoxum perl
 * pratchett riddles sports startrek tao translate-me zippy; package
 * fortunes 1:1.99.1-7.3: 572,887 bytes, 3,408 fortunes).  Otherwise path is a
 * text file, or a folder whose regular files are all read (in strcmp
 * order of their names; names beginning with '.' or ending in ".dat" or
 * ".u8" skipped).  A file is a sequence of records ("fortunes") separated
 * by lines holding only "%"; records are numbered across the files in
 * order, and record i goes to validation when i % 10 == 9, to training
 * otherwise.  Each split is its records, each as its lines (a final
 * newline added if missing) followed by the line "%".  Errors name the
 * file: missing, unreadable, empty, a byte outside the vocabulary (its
 * offset and value), or fewer than 10 records in all. */
int emu_text_fortunes(emu_textset *train, emu_textset *val, const char *path,
                      emu_error *err);

/* The most text emu_text_fortunes reads, all files together: 256 MiB
 * (its tokens and the two splits' copies take about three times that
 * in memory while it reads). */
#define EMU_TEXT_MAX_BYTES ((size_t)1 << 28)

/* emu_text_fortunes with another limit on the bytes read (0: the default
 * EMU_TEXT_MAX_BYTES).  A folder whose text files hold more (by their
 * sizes, before anything is read) or a file or folder that turns out to
 * hold more while it is read is refused: EMU_EDATA, naming the folder (or
 * the file) and the limit. */
int emu_text_fortunes_max(emu_textset *train, emu_textset *val,
                          const char *path, size_t max_bytes, emu_error *err);

void emu_textset_free(emu_textset *t);

/* The id of a byte (-1 outside the vocabulary), and the byte of an id
 * (-1 outside 0 .. EMU_TEXT_VOCAB-1). */
int emu_text_id(int byte);
int emu_text_char(int id);

/* Whether t holds a window of T tokens: 1 <= T and T + 1 <= t->n (the
 * targets run one token further).  Returns 0, or -1 with err (EMU_ESPEC)
 * naming the set, its size and T. */
int emu_text_check_context(const emu_textset *t, int T, emu_error *err);

/* Training windows: example b of step `step` starts at position
 * p = w mod (n - T), w = word b of Philox stream 2^48 + 2^44 + step of
 * `seed` (a stream no op, initialiser or emu_batch_permutation draws
 * from); x[b*T + j] = tokens[p + j], y[b*T + j] = tokens[p + j + 1].
 * A pure function of (t, T, seed, step): a resumed run draws the same
 * windows.  The caller checks the context first (emu_text_check_context). */
void emu_text_batch(const emu_textset *t, int batch, int T, uint64_t seed,
                    uint64_t step, int32_t *x, int32_t *y);

/* Evaluation windows: `count` non-overlapping windows spread evenly over
 * t, window k starting at k * ((n - 1 - T) / (count - 1)) (0 when count
 * is 1), so they cover the whole set, not only its beginning.
 * emu_text_eval_count is the number used for a request of `want`:
 * min(want, (n - 1) / T).  emu_text_eval_batch fills `batch` windows
 * first .. first+batch-1 (those at or past count repeat window 0). */
size_t emu_text_eval_count(const emu_textset *t, int T, size_t want);
void emu_text_eval_batch(const emu_textset *t, int T, size_t count,
                         size_t first, int batch, int32_t *x, int32_t *y);

#ifdef __cplusplus
}
#endif
#endif
