/*
 * output.c — the files a command names: input opened with a clear error
 * (a directory is not a vector file), and output for `emu gen -o FILE`,
 * `emu dot gen -o FILE`, `emu scaled quant --pack FILE` through the
 * library's atomic writer (libemu/atomic_file.h), so that a killed run
 * leaves the old file or the new one, never half of one, a device or a
 * FIFO is written in place, and a symlink's target is replaced.
 *
 * POSIX for fstat: ISO C opens a directory and only fails on reading.
 */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

FILE *cli_open_input(const char *cmd, const char *path, const char **name)
{
    if (!strcmp(path, "-")) {
        *name = "<stdin>";
        return stdin;
    }
    *name = path;
    FILE *fp = fopen(path, "rb");
    struct stat st;
    if (fp && fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(fp);
        cli_error(cmd, "%s: is a directory, not a file", path);
        return NULL;
    }
    if (!fp)
        cli_error(cmd, "%s: %s", path, strerror(errno));
    return fp;
}

int cli_output_open(cli_output *o, const char *cmd, const char *path)
{
    o->fp = stdout;
    o->to_file = false;
    if (!path || !strcmp(path, "-"))
        return 0;
    emu_error err;
    if (emu_atomic_open(&o->file, path, &err)) {
        cli_error(cmd, "%s: %s", err.where, err.message);
        return -1;
    }
    o->to_file = true;
    o->fp = o->file.fp;
    return 0;
}

int cli_output_commit(cli_output *o, const char *cmd)
{
    if (!o->to_file) {
        if (fflush(stdout) || ferror(stdout)) {
            cli_error(cmd, "error writing standard output: %s", strerror(errno));
            return -1;
        }
        return 0;
    }
    o->to_file = false;
    o->fp = NULL;
    emu_error err;
    if (emu_atomic_commit(&o->file, &err)) {
        cli_error(cmd, "%s: %s", err.where, err.message);
        return -1;
    }
    return 0;
}

void cli_output_abort(cli_output *o)
{
    if (o->to_file)
        emu_atomic_abort(&o->file);
    o->to_file = false;
    o->fp = NULL;
}

int cli_stdout_status(const char *cmd)
{
    cli_output o = { .fp = stdout, .to_file = false };
    return cli_output_commit(&o, cmd) ? CLI_EXIT_USAGE : CLI_EXIT_OK;
}
