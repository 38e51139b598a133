/*
 * nn_ckpt.h — the checkpoint file's byte layout, shared by the training
 * loop (nn_train.c), which decides what goes in it, and its codec
 * (nn_ckpt.c), which decides how it is laid out and checked.
 *
 * Version 3, every integer little-endian, every real its IEEE bit pattern
 * (binary64 as u64, binary32 as u32), every string a u32 length then its
 * bytes; nothing is a raw struct, so neither padding, pointers nor the
 * host's byte order reach the file:
 *
 *   offset  size  field
 *   0       8     magic "EMU-CKPT"
 *   8       4     u32 version (3)
 *   12      4     u32 number of sections (CKPT_SECTIONS)
 *   16      8     u64 size of the whole file in bytes
 *   24      4     u32 crc32 of bytes 0..23
 *   28      ...   sections, in the order of ckpt_tag, each:
 *                   4  tag (ASCII)
 *                   8  u64 length L of the body
 *                   4  u32 crc32 of the tag, the length and the body
 *                   L  body
 *   size-12 8     end magic "EMU-END\n"
 *   size-4  4     u32 crc32 of every byte before it
 *
 * A damaged file is refused with the range of offsets that failed its
 * check: the header, one section (the first that fails, walking in order,
 * so the damage lies in it) or the trailer.
 */
#ifndef EMU_NN_CKPT_H
#define EMU_NN_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "emu/nn.h"

enum { CKPT_VERSION = 3, CKPT_HEADER = 28, CKPT_SECTION_HEAD = 16,
       CKPT_TRAILER = 12 };

/* The sections, in file order.  CKPT_TIME holds only the elapsed time,
 * the one thing that differs between a resumed and an uninterrupted run:
 * it comes last so that everything before it can be compared byte for
 * byte (tests/cli/lib/train_common.sh). */
typedef enum ckpt_tag {
    CKPT_CONF,   /* the training configuration                              */
    CKPT_POLI,   /* the precision policy                                    */
    CKPT_STAT,   /* the loop's scalars: step, loss scale, op counter, ...   */
    CKPT_LAYR,   /* per layer: gradient traces, scales, amax histories      */
    CKPT_TENS,   /* the tensors that carry state: weights, moments, ...     */
    CKPT_SITE,   /* the statistics of every op site                         */
    CKPT_TIME,   /* seconds of training before this checkpoint              */
    CKPT_SECTIONS
} ckpt_tag;

/* ---- writing --------------------------------------------------------- */

typedef struct ckpt_out {
    unsigned char *p;
    size_t len, cap;
    size_t section;   /* where the open section starts                      */
    bool oom;
} ckpt_out;

void ckpt_begin(ckpt_out *o);
void ckpt_section(ckpt_out *o, ckpt_tag tag);   /* closes the previous one */
void ckpt_finish(ckpt_out *o);                  /* closes, adds the trailer */
void ckpt_out_free(ckpt_out *o);

void ckpt_u32(ckpt_out *o, uint32_t v);
void ckpt_u64(ckpt_out *o, uint64_t v);
void ckpt_f64(ckpt_out *o, double v);
void ckpt_f32s(ckpt_out *o, const float *v, size_t n);
void ckpt_str(ckpt_out *o, const char *s);

void ckpt_put_config(ckpt_out *o, const emu_train_config *c);
void ckpt_put_policy(ckpt_out *o, const emu_policy *p);
void ckpt_put_stats(ckpt_out *o, const emu_stats *st);

/* ---- reading ----------------------------------------------------------- */

typedef struct ckpt_span {
    size_t off, len;  /* the body                                           */
} ckpt_span;

/* A cursor over one section's body; the first failure sticks (later reads
 * give zeros) and is reported once, naming the offset. */
typedef struct ckpt_in {
    const unsigned char *base;
    size_t pos, end;
    const char *path;
    ckpt_tag tag;
    emu_error *err;
    bool failed;
} ckpt_in;

/* Checks the header, every section's checksum and the trailer of the
 * image (size bytes read from path), and finds the sections.  Returns 0,
 * or -1 with err naming path and the offsets that fail. */
int ckpt_open(const unsigned char *img, size_t size, const char *path,
              ckpt_span span[CKPT_SECTIONS], emu_error *err);
void ckpt_in_init(ckpt_in *in, const unsigned char *img, const ckpt_span *span,
                  ckpt_tag tag, const char *path, emu_error *err);
/* Fails the cursor at its position ("offset N (section 'TAG'): ..."). */
void ckpt_bad(ckpt_in *in, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* 0 if the body was read to its end without failure, else -1 (reported). */
int ckpt_done(ckpt_in *in);

uint32_t ckpt_get_u32(ckpt_in *in);
uint64_t ckpt_get_u64(ckpt_in *in);
double ckpt_get_f64(ckpt_in *in);
void ckpt_get_f32s(ckpt_in *in, float *v, size_t n);
/* A count of items of at least `item` bytes each that must fit in what is
 * left of the body (so a damaged count never allocates much). */
size_t ckpt_get_count(ckpt_in *in, size_t item, const char *what);
void ckpt_get_str(ckpt_in *in, char *buf, size_t size);

int ckpt_get_config(ckpt_in *in, emu_train_config *c);
int ckpt_get_policy(ckpt_in *in, emu_policy *p);
/* Replaces st's sites with the section's. */
int ckpt_get_stats(ckpt_in *in, emu_stats *st);

/* The image of the file at path, read whole (at most `limit` bytes). */
unsigned char *ckpt_slurp(const char *path, size_t limit, size_t *size,
                          emu_error *err);

#endif
