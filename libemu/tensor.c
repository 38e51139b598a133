/*
 * tensor.c — allocation, shapes and packed bit patterns of emu tensors.
 *
 * Allocation checks everything that could later corrupt memory (element
 * counts and byte counts that overflow size_t) once, here, so that the
 * ops can index with plain size_t arithmetic.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/tensor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/bits.h"
#include "internal.h"

static const char *const role_names[EMU_ROLE_COUNT] = {
    [EMU_ROLE_WEIGHT] = "weight",
    [EMU_ROLE_ACTIVATION] = "activation",
    [EMU_ROLE_ACT_GRAD] = "act_grad",
    [EMU_ROLE_WEIGHT_GRAD] = "weight_grad",
    [EMU_ROLE_MASTER] = "master",
    [EMU_ROLE_OPT_STATE] = "opt_state",
    [EMU_ROLE_OTHER] = "other",
};

const char *emu_role_name(emu_role r)
{
    return (unsigned)r < EMU_ROLE_COUNT ? role_names[r] : "?";
}

int emu_role_parse(const char *s, emu_role *r)
{
    for (int i = 0; s && i < EMU_ROLE_COUNT; i++)
        if (!strcmp(s, role_names[i])) {
            *r = (emu_role)i;
            return 0;
        }
    return -1;
}

static int fail(emu_error *err, emu_errcode code, const char *name,
                const char *key, const char *fmt, ...)
{
    char where[256];
    snprintf(where, sizeof where, "tensor '%s'", name ? name : "");
    va_list ap;
    va_start(ap, fmt);
    emu_vfail(err, code, where, key, fmt, ap);
    va_end(ap);
    return -1;
}

int emu_tensor_alloc(emu_tensor *t, const char *name, emu_role role,
                     const emu_format *fmt, int ndim, const size_t *shape,
                     emu_error *err)
{
    memset(t, 0, sizeof *t);
    if (!name)
        name = "";
    if (strlen(name) >= sizeof t->name)
        return fail(err, EMU_EINVAL, name, "name", "longer than %d characters",
                    EMU_TENSOR_NAME_MAX - 1);
    if ((unsigned)role >= EMU_ROLE_COUNT)
        return fail(err, EMU_EINVAL, name, "role", "invalid role %d", (int)role);
    if (!fmt)
        return fail(err, EMU_EINVAL, name, "format", "no format given");
    if (!emu_format_is_validated(fmt))
        return fail(err, EMU_EINVAL, name, "format", "%s was not validated, "
                    "or was changed since: call emu_format_validate",
                    fmt->name);
    if (!fmt->fits_carrier)
        return fail(err, EMU_EUNSUPPORTED, name, "format", "%s has values that are not binary32 "
                    "values (p = %d, exponents %d..%d): the tensor carrier "
                    "cannot hold it", fmt->name, fmt->p, fmt->qmin, fmt->emax);
    if (!fmt->has_zero)
        return fail(err, EMU_EUNSUPPORTED, name, "format", "%s has no zero: it can scale "
                    "tensors but not hold one", fmt->name);
    if (ndim < 1 || ndim > EMU_TENSOR_MAX_DIMS)
        return fail(err, EMU_EINVAL, name, "shape", "%d dimensions (1 to %d allowed)",
                    ndim, EMU_TENSOR_MAX_DIMS);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            return fail(err, EMU_EINVAL, name, "shape", "dimension %d has size 0", d);
        if (n > SIZE_MAX / sizeof(float) / shape[d])
            return fail(err, EMU_EINVAL, name, "shape", "too many elements: the byte "
                        "count overflows");
        n *= shape[d];
    }
    float *data = calloc(n, sizeof *data);
    if (!data)
        return fail(err, EMU_ENOMEM, name, "shape", "out of memory for %zu elements", n);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->role = role;
    t->fmt = *fmt;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->n = n;
    t->data = data;
    t->owns_data = true;
    return 0;
}

int emu_tensor_alloc4(emu_tensor *t, const char *name, emu_role role,
                      const emu_format *fmt, size_t d0, size_t d1, size_t d2,
                      size_t d3, emu_error *err)
{
    const size_t dims[EMU_TENSOR_MAX_DIMS] = { d0, d1, d2, d3 };
    int ndim = EMU_TENSOR_MAX_DIMS;
    while (ndim > 1 && dims[ndim - 1] == 0)
        ndim--;
    return emu_tensor_alloc(t, name, role, fmt, ndim, dims, err);
}

void emu_tensor_free(emu_tensor *t)
{
    if (t->owns_data)
        free(t->data);
    t->data = NULL;
    t->n = 0;
    t->ndim = 0;
    t->owns_data = false;
}

bool emu_tensor_same_shape(const emu_tensor *a, const emu_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return true;
}

void emu_tensor_shape_string(const emu_tensor *t, char *buf, size_t size)
{
    size_t used = 0;
    int k = snprintf(buf, size, "(");
    used = k > 0 ? (size_t)k : 0;
    for (int d = 0; d < t->ndim && used < size; d++) {
        k = snprintf(buf + used, size - used, "%s%zu", d ? ", " : "",
                     t->shape[d]);
        used += k > 0 ? (size_t)k : 0;
    }
    if (used < size)
        snprintf(buf + used, size - used, ")");
}

/* ---- packing ------------------------------------------------------------ */

static size_t element_bytes(const emu_format *fmt)
{
    return fmt->bits <= 8 ? 0 : fmt->bits <= 16 ? 2 : 4;
}

size_t emu_packed_size(const emu_format *fmt, size_t n)
{
    size_t eb = element_bytes(fmt);
    if (eb)
        return n > SIZE_MAX / eb ? 0 : n * eb;
    size_t bits = (size_t)fmt->bits;
    if (n > (SIZE_MAX - 7) / bits)
        return 0;
    return (n * bits + 7) / 8;
}

int emu_tensor_pack(const emu_tensor *t, uint8_t *buf, size_t size,
                    emu_error *err)
{
    EMU_HOSTFP_GUARD;
    const emu_format *fmt = &t->fmt;
    size_t need = emu_packed_size(fmt, t->n);
    if (need == 0 || size < need)
        return fail(err, EMU_EINVAL, t->name, "size", "buffer of %zu bytes, %zu needed",
                    size, need);
    const size_t eb = element_bytes(fmt);
    if (!eb)
        memset(buf, 0, need);
    for (size_t i = 0; i < t->n; i++) {
        emu_bits b;
        double v = t->data[i];
        if (!emu_encode_unguarded(fmt, v, &b) && !isnan(v))
            return fail(err, EMU_EDATA, t->name, "data", "element %zu (%a) is not a "
                        "value of %s", i, v, fmt->name);
        if (eb) {
            for (size_t k = 0; k < eb; k++)
                buf[i * eb + k] = (uint8_t)(b.v >> (8 * k));
        } else {
            /* A b-bit field at bit offset i*b spans at most two bytes. */
            size_t bit = i * (size_t)fmt->bits;
            unsigned w = (unsigned)b.v << (bit % 8);
            buf[bit / 8] |= (uint8_t)w;
            if ((bit % 8) + (size_t)fmt->bits > 8)
                buf[bit / 8 + 1] |= (uint8_t)(w >> 8);
        }
    }
    return 0;
}

int emu_tensor_unpack(emu_tensor *t, const uint8_t *buf, size_t size,
                      emu_error *err)
{
    EMU_HOSTFP_GUARD;
    const emu_format *fmt = &t->fmt;
    size_t need = emu_packed_size(fmt, t->n);
    if (need == 0 || size < need)
        return fail(err, EMU_EINVAL, t->name, "size", "%zu bytes given, %zu needed", size,
                    need);
    const size_t eb = element_bytes(fmt);
    const uint64_t mask = (1ull << fmt->bits) - 1; /* bits <= 32 here */
    /* Two passes: every pattern is checked before any element is written,
     * so a bad buffer leaves the tensor as it was. */
    for (int write = 0; write < 2; write++)
    for (size_t i = 0; i < t->n; i++) {
        emu_bits b = { 0 };
        if (eb) {
            for (size_t k = 0; k < eb; k++)
                b.v |= (uint64_t)buf[i * eb + k] << (8 * k);
            if (b.v & ~mask)
                return fail(err, EMU_EDATA, t->name, "data", "element %zu: pattern "
                            "0x%llx wider than %d bits", i,
                            (unsigned long long)b.v, fmt->bits);
        } else {
            size_t bit = i * (size_t)fmt->bits;
            unsigned w = buf[bit / 8];
            if ((bit % 8) + (size_t)fmt->bits > 8)
                w |= (unsigned)buf[bit / 8 + 1] << 8;
            b.v = (w >> (bit % 8)) & mask;
        }
        if (write)
            t->data[i] = (float)emu_decode_unguarded(fmt, b);
    }
    return 0;
}
