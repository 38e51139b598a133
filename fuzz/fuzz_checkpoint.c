/*
 * fuzz_checkpoint.c — libFuzzer harness for the checkpoint reader
 * (emu_checkpoint_check; layout in libemu/nn_ckpt.h).  Each input is read
 * twice: as it is, which mostly exercises the frame checks, and with its
 * checksums recomputed wherever the frame allows (the header's file size
 * set to the input's), so that mutations reach the section decoders
 * behind the crc32s.  Besides memory errors and undefined behaviour
 * (ASan/UBSan) it checks what a refusal promises: the message names the
 * offset that is wrong.  Built by fuzz/CMakeLists.txt; run by fuzz/run.sh,
 * seeded with the checkpoint of a short run.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "emu/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { HEADER = 28, SECTION_HEAD = 16, TRAILER = 12, SECTIONS = 7 };

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

static uint32_t crc(const uint8_t *p, size_t n)
{
    return (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)n);
}

/* The checksums and the file size made right, as far as the section
 * lengths allow. */
static void reseal(uint8_t *b, size_t size)
{
    if (size < HEADER + TRAILER)
        return;
    for (int i = 0; i < 8; i++)
        b[16 + i] = (uint8_t)((uint64_t)size >> 8 * i);
    wr32(b + 24, crc(b, 24));
    size_t pos = HEADER, tail = size - TRAILER;
    for (int s = 0; s < SECTIONS && tail - pos >= SECTION_HEAD; s++) {
        uint8_t *h = b + pos;
        uint64_t len = rd32(h + 4) | (uint64_t)rd32(h + 8) << 32;
        if (len > tail - pos - SECTION_HEAD)
            break;
        uint32_t c = crc(h, 12);
        c = (uint32_t)crc32(c, h + SECTION_HEAD, (uInt)len);
        wr32(h + 12, c);
        pos += SECTION_HEAD + (size_t)len;
    }
    wr32(b + size - 4, crc(b, size - 4));
}

static void check(const uint8_t *data, size_t size)
{
    emu_train_config cfg;
    emu_policy p;
    emu_error err;
    memset(&err, 0, sizeof err);
    if (emu_checkpoint_check(data, size, &cfg, &p, &err) &&
        !strstr(err.message, "offset")) {
        fprintf(stderr, "fuzz_checkpoint: a refusal that names no offset: "
                "%s: %s\n", err.where, err.message);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    reseal(copy, size);
    check(copy, size);
    free(copy);
    return 0;
}
