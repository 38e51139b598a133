/* embedded.h — the spec files of formats/, compiled in (internal). */
#ifndef EMU_EMBEDDED_H
#define EMU_EMBEDDED_H

#include <stddef.h>

typedef struct emu_embedded_spec {
    const char *path;
    const char *text;
} emu_embedded_spec;

extern const emu_embedded_spec emu_embedded_specs[];
extern const size_t emu_embedded_spec_count;

#endif
