/*
 * atomic_file.h — the one way libemu and the `emu` program write a file:
 * a reader, a crash or a kill never sees half of it.
 *
 * Internal (not installed): the library's exports (stats.c, nn_train.c)
 * and the CLI's -o/--pack call it; the name may change when the public
 * API is settled.
 *
 * What "writing PATH" means:
 *   - PATH a regular file, or absent: the bytes go to "PATH.tmp-PID-N"
 *     beside it, which is synced and renamed over PATH, then the
 *     directory is synced.  An existing file keeps its permission bits.
 *   - PATH a symbolic link: the link is followed (to the end of a chain,
 *     even a dangling one) and its target written as above; the link
 *     itself stays.
 *   - PATH a character or block device, a FIFO or a socket: written in
 *     place (opened for writing, never replaced: `-o /dev/null` must not
 *     turn /dev/null into a regular file).
 *   - PATH a directory: refused.
 * While a temporary file exists, SIGINT, SIGTERM and SIGHUP (where the
 * process left them at their default action) remove it before the
 * signal takes its default course.
 */
#ifndef EMU_ATOMIC_FILE_H
#define EMU_ATOMIC_FILE_H

#include <stdio.h>

#include "emu/format.h" /* emu_error */

typedef struct emu_atomic_file {
    FILE *fp;       /* where to write                                     */
    char *path;     /* the file written: PATH with symlinks followed      */
    char *tmp;      /* the temporary beside it; NULL when written in place */
    int slot;       /* its entry in the signal handler's table, or -1     */
} emu_atomic_file;

/* Opens PATH for writing as above.  Returns 0, or -1 with err naming the
 * path and the reason (f is then left closed). */
int emu_atomic_open(emu_atomic_file *f, const char *path, emu_error *err);

/* Flushes, syncs and renames into place (or closes a file written in
 * place).  Returns 0, or -1 with err; on failure the target is as it was
 * and no temporary remains.  f is closed either way. */
int emu_atomic_commit(emu_atomic_file *f, emu_error *err);

/* Drops what was written: removes the temporary, leaves the target. */
void emu_atomic_abort(emu_atomic_file *f);

/* open, `write` (returns 0 or non-zero on failure), commit. */
int emu_write_atomic(const char *path,
                     int (*write)(FILE *fp, const void *arg), const void *arg,
                     emu_error *err);

#endif
