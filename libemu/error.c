/*
 * error.c — filling and formatting emu_error (the convention is in
 * emu/error.h).  emu_fail is the one place the library fills a caller's
 * error, so every report carries a code.
 */
#include "emu/error.h"

#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const code_names[EMU_ERR_COUNT] = {
    [EMU_OK] = "EMU_OK",
    [EMU_EINVAL] = "EMU_EINVAL",
    [EMU_ESPEC] = "EMU_ESPEC",
    [EMU_ENOMEM] = "EMU_ENOMEM",
    [EMU_EIO] = "EMU_EIO",
    [EMU_EDATA] = "EMU_EDATA",
    [EMU_EUNSUPPORTED] = "EMU_EUNSUPPORTED",
    [EMU_ESTATE] = "EMU_ESTATE",
    [EMU_ERANGE] = "EMU_ERANGE",
    [EMU_ESTOPPED] = "EMU_ESTOPPED",
};

const char *emu_error_code_name(emu_errcode code)
{
    return (unsigned)code < EMU_ERR_COUNT && code_names[code]
               ? code_names[code]
               : "EMU_E?";
}

void emu_error_clear(emu_error *err)
{
    if (err) {
        err->code = EMU_OK;
        err->where[0] = err->key[0] = err->message[0] = '\0';
    }
}

int emu_vfail(emu_error *err, emu_errcode code, const char *where,
              const char *key, const char *fmt, va_list ap)
{
    if (err) {
        err->code = code;
        snprintf(err->where, sizeof err->where, "%s", where ? where : "");
        snprintf(err->key, sizeof err->key, "%s", key ? key : "");
        vsnprintf(err->message, sizeof err->message, fmt, ap);
    }
    return -1;
}

int emu_fail(emu_error *err, emu_errcode code, const char *where,
             const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emu_vfail(err, code, where, key, fmt, ap);
    va_end(ap);
    return -1;
}

void emu_error_format(const emu_error *err, char *buf, size_t size)
{
    if (err->key[0])
        snprintf(buf, size, "%s: key '%s': %s", err->where, err->key,
                 err->message);
    else
        snprintf(buf, size, "%s: %s", err->where, err->message);
}
