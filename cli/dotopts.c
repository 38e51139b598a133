/*
 * dotopts.c — the settings of `emu dot` that a vector file's
 * "#! emu-dot" header carries from `emu dot gen` to `emu dot verify`
 * (input and output formats, accumulator model, mode, special-value
 * profile, K, seed), read
 * without exiting so that the fuzz harness runs the same code.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *const cli_dot_header_keys[] = {
    "in", "out", "accum", "mode", "profile", "k", "seed", NULL,
};

bool cli_dot_k(const char *s, unsigned *k)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *s == '-' || *end || errno || v < 1 || v > CLI_DOT_MAX_K)
        return false;
    *k = (unsigned)v;
    return true;
}

bool cli_dot_from_header(cli_dotopts *d, const cli_header *h, char *why,
                         size_t size)
{
    /* The specs, checked where they are resolved (with their `where`). */
    const char **spec[CLI_DOT_SPECS] = { &d->in_spec, &d->out_spec,
                                         &d->accum_spec, &d->mode_spec,
                                         &d->profile_spec };
    for (int i = 0; i < CLI_DOT_SPECS; i++) {
        const char *val = cli_header_get(h, cli_dot_header_keys[i],
                                         d->where[i], sizeof d->where[i]);
        if (!val || *spec[i])
            continue;
        snprintf(d->header_spec[i], sizeof d->header_spec[i], "%s", val);
        *spec[i] = d->header_spec[i];
    }
    char where[300];
    const char *val = cli_header_get(h, "k", where, sizeof where);
    if (val && !d->have_k) {
        if (!cli_dot_k(val, &d->k)) {
            snprintf(why, size, "%s: '%s' is not a length from 1 to %d", where,
                     val, CLI_DOT_MAX_K);
            return false;
        }
        d->have_k = true;
    }
    val = cli_header_get(h, "seed", where, sizeof where);
    if (val && !d->have_seed) {
        unsigned long long seed;
        if (!cli_text_u64(val, &seed)) {
            snprintf(why, size, "%s: '%s' is not a non-negative integer below "
                     "2^64", where, val);
            return false;
        }
        d->seed = seed;
        d->have_seed = true;
    }
    return true;
}
