/*
 * fuzz_tensorfile.c — libFuzzer harness for the safetensors reader
 * (emu_tensorfile_parse; layout in emu/tensorfile.h).  Each input is read
 * twice: as it is, and with its first 8 bytes rewritten to the length of
 * the rest up to its last '}' (or to all of it), so that mutations of the
 * JSON reach the schema and layout checks instead of dying at the frame.
 * Besides memory errors and undefined behaviour (ASan/UBSan) it checks
 * what the reader promises: a refusal leaves the result empty and names
 * the file and a field; an accepted file's ranges hold exactly its
 * shapes, and writing it back (emu_tensorfile_write) and reading that
 * gives the same tensors bit for bit.  Built by fuzz/CMakeLists.txt; run
 * by fuzz/run.sh, seeded with weights files of short runs.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/tensorfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why, const emu_error *err)
{
    fprintf(stderr, "fuzz_tensorfile: %s (%s: %s: %s)\n", why,
            err ? err->where : "", err ? err->key : "", err ? err->message : "");
    abort();
}

static void same_bits(double a, double b)
{
    if (isnan(a) ? !isnan(b) : (memcmp(&a, &b, sizeof a) != 0))
        fail("a value changed in a write and read back", NULL);
}

/* Writes the tensors of tf (binary32 values only) and reads them back. */
static void write_back(const emu_tensorfile *tf)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/fuzz_tensorfile-%ld.safetensors",
                 (long)getpid());
    emu_tf_out *out = calloc((size_t)tf->count + 1, sizeof *out);
    float **vals = calloc((size_t)tf->count + 1, sizeof *vals);
    if (!out || !vals)
        goto done;
    for (int i = 0; i < tf->count; i++) {
        const emu_tf_tensor *t = &tf->tensors[i];
        if (t->dtype == EMU_TF_F64)
            goto done; /* not binary32 in general */
        vals[i] = malloc(t->n ? t->n * sizeof(float) : 1);
        if (!vals[i])
            goto done;
        for (size_t k = 0; k < t->n; k++)
            vals[i][k] = (float)t->values[k];
        out[i] = (emu_tf_out){ .name = t->name, .ndim = t->ndim, .data = vals[i] };
        memcpy(out[i].shape, t->shape, sizeof t->shape);
    }
    const char **meta = calloc(2 * (size_t)tf->meta_count + 1, sizeof *meta);
    if (!meta)
        goto done;
    for (int i = 0; i < tf->meta_count; i++) {
        meta[2 * i] = tf->meta_keys[i];
        meta[2 * i + 1] = tf->meta_values[i];
    }
    emu_error err;
    if (emu_tensorfile_write(path, out, tf->count, meta, &err))
        fail("a file that was read cannot be written", &err);
    free(meta);
    emu_tensorfile back;
    if (emu_tensorfile_read(&back, path, EMU_TF_ALLOW_NONFINITE, &err))
        fail("a written file is refused", &err);
    if (back.count != tf->count || back.meta_count != tf->meta_count)
        fail("a written file reads back with other counts", NULL);
    for (int i = 0; i < tf->count; i++) {
        const emu_tf_tensor *a = &tf->tensors[i], *b = &back.tensors[i];
        if (strcmp(a->name, b->name) || a->ndim != b->ndim || a->n != b->n ||
            memcmp(a->shape, b->shape, sizeof a->shape))
            fail("a tensor reads back with another name or shape", NULL);
        for (size_t k = 0; k < a->n; k++)
            same_bits(a->values[k], b->values[k]);
    }
    for (int i = 0; i < tf->meta_count; i++)
        if (strcmp(tf->meta_keys[i], back.meta_keys[i]) ||
            strcmp(tf->meta_values[i], back.meta_values[i]))
            fail("metadata reads back changed", NULL);
    emu_tensorfile_free(&back);
    unlink(path);
done:
    for (int i = 0; vals && i < tf->count; i++)
        free(vals[i]);
    free(vals);
    free(out);
}

static void check(const uint8_t *data, size_t size)
{
    emu_tensorfile tf;
    emu_error err;
    memset(&err, 0, sizeof err);
    if (emu_tensorfile_parse(&tf, data, size, "input", EMU_TF_ALLOW_NONFINITE,
                             &err)) {
        if (tf.count || tf.tensors || tf.meta_count)
            fail("a refusal left tensors behind", &err);
        if (strcmp(err.where, "input") || (!err.key[0] && err.code == EMU_EDATA))
            fail("a refusal that names no file or field", &err);
        return;
    }
    size_t total = 0;
    for (int i = 0; i < tf.count; i++) {
        const emu_tf_tensor *t = &tf.tensors[i];
        size_t n = 1;
        for (int k = 0; k < t->ndim; k++)
            n *= t->shape[k];
        if (n != t->n)
            fail("an element count that is not its shape's", NULL);
        total += n * (t->dtype == EMU_TF_F64 ? 8 : t->dtype == EMU_TF_F32 ? 4 : 2);
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)data[i] << 8 * i;
    if (8 + hlen + total != size)
        fail("accepted data that do not tile the file", NULL);
    write_back(&tf);
    emu_tensorfile_free(&tf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    if (size < 8)
        return 0;
    uint8_t *copy = malloc(size);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    size_t h = size - 8;
    for (size_t i = size; i > 8; i--)
        if (copy[i - 1] == '}') {
            h = i - 8;
            break;
        }
    for (int i = 0; i < 8; i++)
        copy[i] = (uint8_t)((uint64_t)h >> 8 * i);
    check(copy, size);
    free(copy);
    return 0;
}
