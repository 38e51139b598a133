/* internal.h — library-private declarations shared between modules. */
#ifndef EMU_INTERNAL_H
#define EMU_INTERNAL_H

#include <stdint.h>

/* A word for stochastic rounding when the caller gave no generator: the
 * next index of one process-wide stream (seed 0, stream 0).  Reproducible
 * in a single thread; never a constant, so SR never degenerates. */
uint64_t emu_default_random_word(void);

/* strtok_r without POSIX: the next token of *cursor delimited by any of
 * `delims` (empty tokens are skipped), NUL-terminated in place; NULL at
 * the end. */
char *emu_next_token(char **cursor, const char *delims);

/* Writes a file atomically: `write` fills "<path>.tmp", which is then
 * renamed to path; on any failure the temporary is removed, path is left
 * as it was, and err names the path.  Returns 0 or -1. */
#include <stdio.h>
struct emu_error;
int emu_write_atomic(const char *path,
                     int (*write)(FILE *fp, const void *arg), const void *arg,
                     struct emu_error *err);

#endif
