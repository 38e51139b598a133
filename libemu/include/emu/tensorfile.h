/*
 * emu/tensorfile.h — named tensors in and out of a file that PyTorch,
 * NumPy and the safetensors package read as they are.
 *
 * The layout is safetensors':
 *
 *   8 bytes   N, the header's length, unsigned little-endian
 *   N bytes   a JSON object, UTF-8:
 *               {"__metadata__": {"key": "value", ...},
 *                "fc1.weight": {"dtype": "F32", "shape": [256, 784],
 *                               "data_offsets": [0, 802816]}, ...}
 *             (libemu pads it with spaces to a multiple of 8 bytes)
 *   the data  each tensor's values, row-major, little-endian, at
 *             [begin, end) counted from the first byte after the header
 *
 * libemu writes binary32 ("F32") and reads F32, F64, F16 and BF16.
 * The reader trusts nothing: the header length within the file and at
 * most 100 MB; the JSON strictly of this schema (no other keys, no
 * duplicates, integers for shapes and offsets, valid UTF-8 and escapes);
 * each shape's byte size without overflow and equal to its byte range;
 * the ranges, in offset order, tiling the data exactly (no overlap, no
 * gap, nothing after the last); and, unless asked otherwise, every value
 * finite.  A refusal (EMU_EDATA; EMU_EIO for a file that cannot be read,
 * EMU_ENOMEM) names the file (where), the field (key: "header",
 * "dtype", "shape", "data_offsets", "value", ...) and the tensor (in the
 * message).
 */
#ifndef EMU_TENSORFILE_H
#define EMU_TENSORFILE_H

#include <stddef.h>

#include "emu/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emu_tf_dtype {
    EMU_TF_F32,
    EMU_TF_F64,
    EMU_TF_F16,
    EMU_TF_BF16,
    EMU_TF_DTYPE_COUNT
} emu_tf_dtype;

/* "F32", "F64", "F16", "BF16" (the safetensors names); "?" otherwise. */
const char *emu_tf_dtype_name(emu_tf_dtype d);

enum {
    EMU_TF_MAX_DIMS = 8,         /* dimensions of one tensor            */
    EMU_TF_NAME_MAX = 256,       /* bytes of a name, with its NUL       */
    EMU_TF_HEADER_MAX = 100000000 /* bytes of the JSON header (100 MB)  */
};

/* One tensor read from a file.  values holds n numbers, exactly (every
 * dtype read is a subset of binary64). */
typedef struct emu_tf_tensor {
    char name[EMU_TF_NAME_MAX];
    emu_tf_dtype dtype;          /* as stored                            */
    int ndim;                    /* 0 (a scalar) .. EMU_TF_MAX_DIMS      */
    size_t shape[EMU_TF_MAX_DIMS];
    size_t n;                    /* elements: the product of shape       */
    double *values;
    size_t nonfinite;            /* values that are inf or NaN           */
} emu_tf_tensor;

typedef struct emu_tensorfile {
    int count;
    emu_tf_tensor *tensors;      /* in the header's order                */
    int meta_count;
    char **meta_keys, **meta_values; /* "__metadata__", in its order     */
} emu_tensorfile;

/* Reading flags. */
enum { EMU_TF_ALLOW_NONFINITE = 1u << 0 };

/* Reads and checks the file at path (above); flags EMU_TF_*.  Returns 0,
 * or -1 with err and *tf empty (safe to free). */
int emu_tensorfile_read(emu_tensorfile *tf, const char *path, unsigned flags,
                        emu_error *err);
/* The same on an image in memory; `name` stands for the file in
 * messages. */
int emu_tensorfile_parse(emu_tensorfile *tf, const void *data, size_t size,
                         const char *name, unsigned flags, emu_error *err);
void emu_tensorfile_free(emu_tensorfile *tf);

/* A look-up: the tensor or metadata value of that name, or NULL. */
const emu_tf_tensor *emu_tensorfile_find(const emu_tensorfile *tf,
                                         const char *name);
const char *emu_tensorfile_meta(const emu_tensorfile *tf, const char *key);

/* One tensor to write, as binary32. */
typedef struct emu_tf_out {
    const char *name;
    int ndim;                    /* 0 .. EMU_TF_MAX_DIMS                 */
    size_t shape[EMU_TF_MAX_DIMS];
    const float *data;           /* the product of shape values          */
} emu_tf_out;

/* Writes `count` tensors in that order (F32, data in the same order) and
 * the metadata `meta` (key, value, key, value, ..., NULL; may be NULL) to
 * path, atomically: a regular file is replaced by rename, so a reader
 * never sees half of it; a device or FIFO is written in place.  Refuses
 * (EMU_EINVAL) an empty, duplicate, over-long or "__metadata__" name, a
 * name or metadata text that is not UTF-8, a shape whose size overflows.
 * Non-finite values are written as they are.  Returns 0 or -1 with err. */
int emu_tensorfile_write(const char *path, const emu_tf_out *tensors,
                         int count, const char *const *meta, emu_error *err);

#ifdef __cplusplus
}
#endif
#endif
