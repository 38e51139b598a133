/*
 * emu/tensor.h — tensors: binary32 carrier values that are all values of
 * one format, with a shape, a name and a role.
 *
 * The carrier is binary32 because every format the tensor layer accepts
 * (fits_carrier: p <= 24 and an exponent range inside binary32's) has only
 * binary32 values.  The invariant "every element is a value of fmt, or a
 * NaN" is kept by the ops: nothing writes a tensor except through the
 * choke point (emu/ops.h), which rounds.
 *
 * Layout is row-major; shapes are written (N, C, H, W) for images and
 * (rows, cols) for matrices, outermost first.
 */
#ifndef EMU_TENSOR_H
#define EMU_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "emu/format.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EMU_TENSOR_MAX_DIMS 4
#define EMU_TENSOR_NAME_MAX 64

/* What a tensor is for in training: statistics are kept per role, and a
 * precision policy assigns a format per role. */
typedef enum emu_role {
    EMU_ROLE_WEIGHT,      /* compute copy of parameters                 */
    EMU_ROLE_ACTIVATION,
    EMU_ROLE_ACT_GRAD,    /* gradient w.r.t. activations ("errors")     */
    EMU_ROLE_WEIGHT_GRAD,
    EMU_ROLE_MASTER,      /* master copy of the weights                 */
    EMU_ROLE_OPT_STATE,   /* momentum, Adam moments                     */
    EMU_ROLE_OTHER,
    EMU_ROLE_COUNT
} emu_role;

const char *emu_role_name(emu_role r);          /* "weight", "act_grad", ... */
/* A look-up: 0, or -1 if s names no role. */
int emu_role_parse(const char *s, emu_role *r);

typedef struct emu_tensor {
    char name[EMU_TENSOR_NAME_MAX];
    emu_role role;
    emu_format fmt;      /* a copy: inline specs need no registry entry  */
    int ndim;            /* 1 .. EMU_TENSOR_MAX_DIMS                      */
    size_t shape[EMU_TENSOR_MAX_DIMS];
    size_t n;            /* number of elements, the product of shape      */
    float *data;         /* n carrier values, row-major                   */
    bool owns_data;
} emu_tensor;

/* Allocates a zero-filled tensor.  Refuses (with err naming the tensor
 * and the problem): a format the binary32 carrier cannot hold, 0 or more
 * than 4 dimensions, a zero-size dimension, a byte count that overflows
 * size_t, a format without zero (zero-fill impossible), failed allocation.
 * Returns 0 or -1 with err (EMU_EUNSUPPORTED for the format, EMU_ENOMEM,
 * EMU_EINVAL otherwise); on -1 *t is left empty (safe to free). */
int emu_tensor_alloc(emu_tensor *t, const char *name, emu_role role,
                     const emu_format *fmt, int ndim, const size_t *shape,
                     emu_error *err);

/* Same, shape given as up to four sizes (trailing zeros ignored):
 * emu_tensor_alloc4(&t, "fc1.w", EMU_ROLE_WEIGHT, fmt, 256, 784, 0, 0, err). */
int emu_tensor_alloc4(emu_tensor *t, const char *name, emu_role role,
                      const emu_format *fmt, size_t d0, size_t d1, size_t d2,
                      size_t d3, emu_error *err);

void emu_tensor_free(emu_tensor *t);

bool emu_tensor_same_shape(const emu_tensor *a, const emu_tensor *b);

/* "(64, 1, 28, 28)" */
void emu_tensor_shape_string(const emu_tensor *t, char *buf, size_t size);

/* ---- packed storage ------------------------------------------------------
 * The real bit patterns of a tensor, for exchange with hardware simulations
 * and files.  Formats of 8 bits or fewer are one little-endian bit stream:
 * element i occupies bits [i*b, (i+1)*b) (so FP4 is two per byte, element 0
 * in the low nibble, and FP6 packs four elements in three bytes).  Wider
 * formats take 2 bytes (9..16 bits) or 4 bytes (17..32), little-endian,
 * unused high bits zero. */

/* Bytes needed for n elements of fmt (0 if that overflows size_t). */
size_t emu_packed_size(const emu_format *fmt, size_t n);

/* Writes t's patterns.  Fails if size is too small (EMU_EINVAL), or if an
 * element is not a value of t's format (EMU_EDATA: something wrote the
 * tensor around the ops). */
int emu_tensor_pack(const emu_tensor *t, uint8_t *buf, size_t size,
                    emu_error *err);

/* Reads patterns into t (its format, its n).  Fails if size is too small
 * (EMU_EINVAL) or a pattern is not a value the carrier can hold (EMU_EDATA;
 * a format without NaN has none; NaN patterns become NaN). */
int emu_tensor_unpack(emu_tensor *t, const uint8_t *buf, size_t size,
                      emu_error *err);

#ifdef __cplusplus
}
#endif
#endif
