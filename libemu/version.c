/*
 * version.c — the API version compiled into the library, for programs
 * that check their header (emu/version.h) against the shared library
 * they run with.
 */
#include "emu/version.h"

int emu_api_version(void)
{
    return EMU_API_VERSION;
}
