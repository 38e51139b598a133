/*
 * output.c — atomic file output for `emu gen -o FILE` (and any command
 * that writes a file): a temporary file in the target's directory, synced
 * and renamed over the target only when everything was written.
 *
 * The only file of the CLI that needs POSIX (mkstemp, fsync, fchmod):
 * ISO C has no way to create a unique file or to make data durable.
 */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_output_open(cli_output *o, const char *cmd, const char *path)
{
    o->fp = stdout;
    o->path = NULL;
    o->tmp = NULL;
    if (!path || !strcmp(path, "-"))
        return 0;

    size_t n = strlen(path);
    o->path = malloc(n + 1);
    o->tmp = malloc(n + sizeof ".tmp-XXXXXX");
    if (!o->path || !o->tmp) {
        cli_error(cmd, "out of memory");
        cli_output_abort(o);
        return -1;
    }
    memcpy(o->path, path, n + 1);
    snprintf(o->tmp, n + sizeof ".tmp-XXXXXX", "%s.tmp-XXXXXX", path);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        cli_error(cmd, "%s: cannot create a temporary file beside it: %s",
                  path, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        cli_output_abort(o);
        return -1;
    }
    /* mkstemp makes the file private; give it the mode a plain fopen would. */
    mode_t mask = umask(0);
    umask(mask);
    (void)fchmod(fd, 0666 & ~mask);
    o->fp = fdopen(fd, "w");
    if (!o->fp) {
        cli_error(cmd, "%s: %s", o->tmp, strerror(errno));
        close(fd);
        cli_output_abort(o);
        return -1;
    }
    return 0;
}

int cli_output_commit(cli_output *o, const char *cmd)
{
    if (!o->path) {
        if (fflush(stdout) || ferror(stdout)) {
            cli_error(cmd, "error writing standard output: %s", strerror(errno));
            return -1;
        }
        return 0;
    }
    int bad = fflush(o->fp) != 0 || ferror(o->fp);
    bad |= fsync(fileno(o->fp)) != 0;
    int err = errno;
    bad |= fclose(o->fp) != 0;
    o->fp = NULL;
    if (bad) {
        cli_error(cmd, "%s: write failed: %s", o->path, strerror(err ? err : errno));
        cli_output_abort(o);
        return -1;
    }
    if (rename(o->tmp, o->path)) {
        cli_error(cmd, "%s: cannot rename %s over it: %s", o->path, o->tmp,
                  strerror(errno));
        cli_output_abort(o);
        return -1;
    }
    free(o->tmp);
    free(o->path);
    o->tmp = o->path = NULL;
    return 0;
}

void cli_output_abort(cli_output *o)
{
    if (o->fp && o->fp != stdout)
        fclose(o->fp);
    o->fp = NULL;
    if (o->tmp)
        remove(o->tmp);
    free(o->tmp);
    free(o->path);
    o->tmp = o->path = NULL;
}

int cli_stdout_status(const char *cmd)
{
    cli_output o = { stdout, NULL, NULL };
    return cli_output_commit(&o, cmd) ? CLI_EXIT_USAGE : CLI_EXIT_OK;
}
