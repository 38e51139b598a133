/*
 * atomic_file.c — writing a file so that nobody sees half of it (see
 * atomic_file.h for what is replaced, what is written in place, and why).
 *
 * The one POSIX file of the library: ISO C can neither create a file
 * exclusively, nor make data durable, nor tell a device from a file.
 *
 * Temporary files and signals: every temporary path is entered in a small
 * table of atomic pointers before the file is created and leaves it after
 * the rename (or unlink).  The handler only reads that table, unlinks and
 * re-raises: all async-signal-safe.  A signal that lands between a rename
 * and the table update unlinks a name that no longer exists: harmless.
 */
#define _POSIX_C_SOURCE 200809L

#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#if ATOMIC_POINTER_LOCK_FREE != 2
#error "the signal handler needs lock-free atomic pointers"
#endif

/* ---- temporaries removed on SIGINT / SIGTERM / SIGHUP ---------------------- */

enum { MAX_PENDING = 64, MAX_LINKS = 40 };

static _Atomic(char *) pending[MAX_PENDING];
static atomic_flag handlers_installed = ATOMIC_FLAG_INIT;
static const int cleanup_signals[] = { SIGINT, SIGTERM, SIGHUP };

static void remove_pending_and_reraise(int sig)
{
    for (int i = 0; i < MAX_PENDING; i++) {
        char *p = atomic_load(&pending[i]);
        if (p)
            unlink(p);
    }
    /* SA_RESETHAND restored the default action on entry; the signal is
     * blocked in its handler, so it is delivered as soon as we return. */
    raise(sig);
}

/* Installed once, and only over a default action: a host program that
 * handles or ignores a signal (Python's SIGINT, `cmd &` ignoring SIGINT)
 * keeps its own behaviour. */
static void install_handlers(void)
{
    if (atomic_flag_test_and_set(&handlers_installed))
        return;
    const size_t n = sizeof cleanup_signals / sizeof *cleanup_signals;
    for (size_t i = 0; i < n; i++) {
        struct sigaction old, sa;
        if (sigaction(cleanup_signals[i], NULL, &old) ||
            old.sa_handler != SIG_DFL)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = remove_pending_and_reraise;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(cleanup_signals[i], &sa, NULL);
    }
}

static int register_pending(char *tmp)
{
    install_handlers();
    for (int i = 0; i < MAX_PENDING; i++) {
        char *expected = NULL;
        if (atomic_compare_exchange_strong(&pending[i], &expected, tmp))
            return i;
    }
    return -1;
}

static void unregister_pending(emu_atomic_file *f)
{
    if (f->slot >= 0)
        atomic_store(&pending[f->slot], NULL);
    f->slot = -1;
}

/* ---- where the bytes go ------------------------------------------------------- */

static char *dup_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* The link `target` read from `link`, as a path usable from here: a
 * relative target is relative to the link's directory. */
static char *link_target(const char *link, const char *target)
{
    const char *slash = strrchr(link, '/');
    size_t dir = target[0] == '/' || !slash ? 0 : (size_t)(slash - link) + 1;
    size_t n = strlen(target);
    char *p = malloc(dir + n + 1);
    if (p) {
        memcpy(p, link, dir);
        memcpy(p + dir, target, n + 1);
    }
    return p;
}

/* PATH with every symbolic link of the last component followed; a
 * dangling link gives the path it points to (writing creates it). */
static char *follow_links(const char *path, emu_error *err)
{
    char *p = dup_string(path);
    for (int hops = 0; p; hops++) {
        struct stat st;
        if (lstat(p, &st) || !S_ISLNK(st.st_mode))
            return p;
        char *target = NULL;
        if (hops == MAX_LINKS) {
            errno = ELOOP;
        } else {
            char buf[4096];
            ssize_t n = readlink(p, buf, sizeof buf - 1);
            if (n >= 0) {
                buf[n] = '\0';
                target = link_target(p, buf);
            }
        }
        if (!target) {
            emu_fail(err, EMU_EIO, path, "", "cannot follow the link %s: %s", p,
                     strerror(errno));
            free(p);
            return NULL;
        }
        free(p);
        p = target;
    }
    emu_fail(err, EMU_ENOMEM, path, "", "out of memory");
    return NULL;
}

static int open_in_place(emu_atomic_file *f, emu_error *err)
{
    int fd = open(f->path, O_WRONLY | O_NOCTTY);
    if (fd < 0 || !(f->fp = fdopen(fd, "w"))) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return emu_fail(err, EMU_EIO, f->path, "", "cannot write: %s", strerror(e));
    }
    return 0;
}

/* Creates "PATH.tmp-PID-N" exclusively, with the mode of the file it
 * will replace (or 0666 less the umask for a new file). */
static int open_temporary(emu_atomic_file *f, const struct stat *old,
                          emu_error *err)
{
    static atomic_uint counter;
    size_t size = strlen(f->path) + 48;
    if (!(f->tmp = malloc(size)))
        return emu_fail(err, EMU_ENOMEM, f->path, "", "out of memory");
    for (int tries = 0; tries < 100; tries++) {
        snprintf(f->tmp, size, "%s.tmp-%ld-%u", f->path, (long)getpid(),
                 atomic_fetch_add(&counter, 1));
        if ((f->slot = register_pending(f->tmp)) < 0)
            return emu_fail(err, EMU_EIO, f->path, "", "more than %d files being "
                            "written at once", MAX_PENDING);
        int fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd < 0) {
            int e = errno;
            unregister_pending(f);
            if (e == EEXIST)
                continue;
            return emu_fail(err, EMU_EIO, f->path, "", "cannot write: no temporary "
                            "file can be made beside it (%s)", strerror(e));
        }
        if ((old && fchmod(fd, old->st_mode & 07777)) ||
            !(f->fp = fdopen(fd, "w"))) {
            int e = errno;
            close(fd);
            unlink(f->tmp);
            unregister_pending(f);
            return emu_fail(err, EMU_EIO, f->tmp, "", "%s", strerror(e));
        }
        return 0;
    }
    unregister_pending(f);
    return emu_fail(err, EMU_EIO, f->path, "", "cannot find a free temporary name");
}

int emu_atomic_open(emu_atomic_file *f, const char *path, emu_error *err)
{
    f->fp = NULL;
    f->path = f->tmp = NULL;
    f->slot = -1;
    /* What the path leads to, as the kernel follows it: a device or FIFO
     * is opened by the path given, because links such as /dev/stdout ->
     * /proc/self/fd/1 -> "pipe:[1234]" only the kernel can follow. */
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if (!exists && errno != ENOENT)
        return emu_fail(err, EMU_EIO, path, "", "%s", strerror(errno));
    int rc;
    if (exists && S_ISDIR(st.st_mode)) {
        rc = emu_fail(err, EMU_EIO, path, "", "is a directory");
    } else if (exists && !S_ISREG(st.st_mode)) {
        f->path = dup_string(path);
        rc = f->path ? open_in_place(f, err)
                     : emu_fail(err, EMU_ENOMEM, path, "", "out of memory");
    } else if (!(f->path = follow_links(path, err))) {
        rc = -1;
    } else {
        /* The temporary goes beside the file the links end at. */
        rc = open_temporary(f, exists ? &st : NULL, err);
    }
    if (rc)
        emu_atomic_abort(f);
    return rc;
}

/* ---- finishing ----------------------------------------------------------------- */

/* The directory entry of a rename is durable only once the directory is
 * synced.  Best effort: the new file is in place whatever this returns,
 * and some file systems refuse fsync on a directory. */
static void sync_directory(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? malloc((size_t)(slash - path) + 2) : dup_string(".");
    if (!dir)
        return;
    if (slash) {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

static void release(emu_atomic_file *f)
{
    free(f->tmp);
    free(f->path);
    f->tmp = f->path = NULL;
    f->fp = NULL;
}

int emu_atomic_commit(emu_atomic_file *f, emu_error *err)
{
    errno = 0;
    int bad = fflush(f->fp) != 0 || ferror(f->fp);
    /* A device or a FIFO has nothing to sync (fsync fails with EINVAL). */
    if (!bad && f->tmp)
        bad = fsync(fileno(f->fp)) != 0;
    int e = errno;
    bad |= fclose(f->fp) != 0;
    f->fp = NULL;
    if (!e)
        e = errno;
    if (!bad && f->tmp && rename(f->tmp, f->path)) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        emu_fail(err, EMU_EIO, f->path, "", "cannot write: %s",
                 e ? strerror(e) : "write error");
        emu_atomic_abort(f);
        return -1;
    }
    unregister_pending(f);
    if (f->tmp)
        sync_directory(f->path);
    release(f);
    return 0;
}

void emu_atomic_abort(emu_atomic_file *f)
{
    if (f->fp)
        fclose(f->fp);
    if (f->tmp && f->slot >= 0)
        unlink(f->tmp);
    unregister_pending(f);
    release(f);
}

int emu_write_atomic(const char *path,
                     int (*write)(FILE *fp, const void *arg), const void *arg,
                     emu_error *err)
{
    emu_atomic_file f;
    if (emu_atomic_open(&f, path, err))
        return -1;
    errno = 0;
    if (write(f.fp, arg)) {
        int e = errno;
        emu_fail(err, EMU_EIO, f.path, "", "cannot write: %s",
                 e ? strerror(e) : "write error");
        emu_atomic_abort(&f);
        return -1;
    }
    return emu_atomic_commit(&f, err);
}
