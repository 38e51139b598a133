/*
 * emu/error.h — how every libemu function reports a failure.
 *
 * THE CONVENTION (the whole public API follows it):
 *
 *  - A function that can fail returns 0 (or a pointer) on success and -1
 *    (or NULL) on failure, and fills the caller's `emu_error *err` with a
 *    code, where, key and message.  err may be NULL: the function still
 *    fails the same way, it only says nothing.  On success *err is left
 *    as it was.
 *  - Tensor ops (emu/ops.h, emu/scaled.h's emu_t_*, emu_model_forward and
 *    emu_model_backward) take no err: they fill ctx->err, an emu_error of
 *    the same kind ("where" is the op's site).
 *  - Pure look-ups fail only because the name or index is unknown and say
 *    so in their comment instead of taking err: emu_format_find,
 *    emu_format_at, emu_role_parse, emu_rnd_parse, emu_profile_parse,
 *    emu_op_parse, emu_stats_find, emu_stats_counter, ... (the caller
 *    knows the name it asked for, and is the one to word the message).
 *  - Functions that allocate and have no other way to fail (emu_stats_site)
 *    return NULL only for EMU_ENOMEM and say so.
 *  - emu_dpi_* (emu/dpi.h) keep the DPI-C ABI: -1 and a per-thread
 *    message, emu_dpi_last_error().
 *
 * Codes are appended, never renumbered: a program (or the Python
 * binding) may map them to its own exceptions.  The message is for
 * people and names the offending value; the code is for programs.
 */
#ifndef EMU_ERROR_H
#define EMU_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What kind of failure (emu_error.code). */
typedef enum emu_errcode {
    EMU_OK = 0,
    EMU_EINVAL,      /* a bad argument: NULL, a number out of range, shapes
                        that do not match, an output sharing an input's
                        storage, a buffer too small                      */
    EMU_ESPEC,       /* a bad spec, configuration or text: a format spec
                        or spec file, a policy key, an accumulator,
                        scaled-format or architecture string, a
                        contradictory policy or training configuration  */
    EMU_ENOMEM,      /* an allocation failed                              */
    EMU_EIO,         /* a file or system call failed: open, read, write,
                        rename, mkdir (the message carries strerror)     */
    EMU_EDATA,       /* damaged or malformed data: a checkpoint, an IDX
                        file, a packed bit pattern the format lacks      */
    EMU_EUNSUPPORTED,/* well formed, but not emulated exactly: a format
                        the binary32 carrier (or binary64) cannot hold, a
                        combination the arithmetic does not implement   */
    EMU_ESTATE,      /* conflicts with what exists: an output folder that
                        holds another run, a format name already
                        registered, a checkpoint of another configuration */
    EMU_ERANGE,      /* data the target cannot represent where the caller
                        asked for an error rather than a clamp (scaled
                        formats with range=error, NaN into a format or
                        scale without NaN)                               */
    EMU_ESTOPPED,    /* not a failure: a training run stopped on request
                        (emu_train_stop) with its checkpoint saved       */
    EMU_ERR_COUNT
} emu_errcode;

/* "EMU_EINVAL", ...; "EMU_E?" for a value outside the enum. */
const char *emu_error_code_name(emu_errcode code);

/* A failure report: what kind, where, which key, and why. */
typedef struct emu_error {
    emu_errcode code;
    char where[256];     /* "formats/e4m3.fmt:3", "inline spec 'e3m4,x'",
                            a path, or an op's site                       */
    char key[32];        /* the offending key or argument, or ""          */
    char message[256];
} emu_error;

/* Resets *err to EMU_OK with empty strings. */
void emu_error_clear(emu_error *err);

/* Formats one error as "where: key 'k': message" into buf. */
void emu_error_format(const emu_error *err, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
