/*
 * fuzz_scaled.c — libFuzzer harness for block-scaled formats: the spec
 * parser, then quantization, packing and unpacking of fuzzer-chosen data
 * in whatever format the spec gave.  Input: a spec line, '\n', three
 * bytes (rows, columns and axis of the tensor, mode), then binary32 data
 * (any bit patterns: NaN, inf, subnormals).  Besides memory errors and
 * undefined behaviour (ASan/UBSan) it checks what a yes promises: the
 * canonical spec parses back to itself, every value lies within the
 * format's reach, and packed bytes unpack to the same values.  Built by
 * fuzz/CMakeLists.txt; run by fuzz/run.sh.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/scaled.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *spec, const char *what)
{
    fprintf(stderr, "fuzz_scaled: %s (spec '%s')\n", what, spec);
    abort();
}

static bool same(double a, double b)
{
    return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size < 200 ? size : 200);
    if (!nl)
        return 0;
    char spec[201];
    size_t len = (size_t)(nl - data);
    memcpy(spec, data, len);
    spec[len] = '\0';
    emu_scaled_format sf;
    emu_error err;
    if (emu_scaled_format_parse(&sf, spec, &err)) {
        if (!err.message[0])
            fail(spec, "refused without a message");
        return 0;
    }
    char canon[256];
    emu_scaled_format_string(&sf, canon, sizeof canon);
    emu_scaled_format back;
    if (emu_scaled_format_parse(&back, canon, &err))
        fail(spec, "the canonical spec does not parse");
    char canon2[256];
    emu_scaled_format_string(&back, canon2, sizeof canon2);
    if (strcmp(canon, canon2))
        fail(spec, "the canonical spec does not parse back to itself");

    const uint8_t *p = nl + 1;
    size_t rest = size - len - 1;
    if (rest < 3)
        return 0;
    size_t shape[2] = { 1 + p[0] % 8, 1 + p[1] % 70 };
    int ndim = (p[2] & 1) ? 2 : 1;
    if (ndim == 1)
        shape[0] = shape[0] * shape[1];
    int axis = (p[2] >> 1) & 1 ? 0 : -1;
    emu_quant_opts o;
    memset(&o, 0, sizeof o);
    o.mode = (emu_rnd)((p[2] >> 2) % EMU_RND_COUNT);
    o.sr_bits = 1 + (p[2] >> 5);
    o.seed = 1;
    p += 3;
    rest -= 3;
    emu_scaled_tensor q;
    if (emu_scaled_alloc(&q, &sf, ndim, shape, axis, &err))
        return 0; /* e.g. a 2-D tile on a vector, pad=no */
    float *x = calloc(q.n, sizeof *x);
    if (!x)
        abort();
    memcpy(x, p, rest < q.n * sizeof *x ? rest : q.n * sizeof *x);
    emu_quant_counts c;
    memset(&c, 0, sizeof c);
    if (emu_scaled_quantize(&q, x, &o, &c, NULL, &err) == 0) {
        const double reach = sf.elem.max * (double)q.tensor_scale;
        for (size_t i = 0; i < q.n; i++) {
            double v = emu_scaled_value(&q, i);
            double s = sf.block_scaled ? q.scale[emu_scaled_block_of(&q, i)] : 1.0;
            if (isinf(v) && (sf.block_scaled || !sf.elem.has_inf))
                fail(spec, "an infinite value (only a per-tensor format "
                           "with inf may keep one)");
            if (isfinite(v) && fabs(v) > reach * s)
                fail(spec, "a value beyond max_elem * scale * g");
        }
        if (c.n != q.n || c.clipped > c.n || c.flushed > c.n)
            fail(spec, "counts out of range");
        size_t bytes = emu_scaled_packed_size(&q);
        uint8_t *buf = bytes ? malloc(bytes) : NULL;
        emu_scaled_tensor r;
        if (buf && emu_scaled_pack(&q, buf, bytes, &err) == 0 &&
            emu_scaled_alloc(&r, &sf, ndim, shape, axis, &err) == 0) {
            if (emu_scaled_unpack(&r, buf, bytes, &err))
                fail(spec, "packed bytes do not unpack");
            for (size_t i = 0; i < q.n; i++)
                if (!same(emu_scaled_value(&q, i), emu_scaled_value(&r, i)))
                    fail(spec, "unpacked values differ");
            emu_scaled_free(&r);
        }
        free(buf);
    } else if (!err.message[0]) {
        fail(spec, "quantization refused without a message");
    }
    free(x);
    emu_scaled_free(&q);
    return 0;
}
