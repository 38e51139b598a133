/*
 * data.c — training data sets: Fashion-MNIST IDX files and the embedded
 * synthetic images.
 *
 * IDX (LeCun's format): a 4-byte big-endian magic 0x0000TTDD (TT the
 * element type, 0x08 for unsigned bytes; DD the number of dimensions),
 * DD big-endian uint32 sizes, then the elements.  Files are read whole
 * through zlib, which also reads uncompressed files transparently; every
 * check names the file and the byte offset that is wrong.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/data.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "emu/rng.h"
#include "internal.h"

void emu_dataset_free(emu_dataset *d)
{
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}

/* The whole decompressed file, at most `limit` bytes (a larger file is not
 * one of ours). */
static unsigned char *read_gz(const char *path, size_t limit, size_t *len,
                              emu_error *err)
{
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        emu_fail(err, path, "", "cannot open: %s", errno ? strerror(errno)
                                                 : "out of memory");
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            emu_fail(err, path, "", "out of memory");
            break;
        }
        if (n == cap) {
            if (cap >= limit) {
                emu_fail(err, path, "", "larger than %zu bytes: not an IDX "
                         "file of this data set", limit);
                free(buf);
                buf = NULL;
                break;
            }
            cap *= 2;
            unsigned char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                buf = NULL;
                continue;
            }
            buf = p;
        }
        unsigned want = cap - n > (1u << 30) ? 1u << 30 : (unsigned)(cap - n);
        int got = gzread(gz, buf + n, want);
        if (got < 0) {
            int code;
            const char *msg = gzerror(gz, &code);
            emu_fail(err, path, "", "corrupt compressed data after %zu bytes: "
                     "%s", n, msg);
            free(buf);
            buf = NULL;
            break;
        }
        n += (size_t)got;
        if (got == 0) {
            int code;
            const char *msg = gzerror(gz, &code);
            if (code != Z_OK) {
                /* zlib reports a truncated stream here, not in gzread. */
                emu_fail(err, path, "", "truncated or corrupt after %zu bytes: "
                         "%s", n, msg);
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    gzclose(gz);
    *len = n;
    return buf;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* Checks an IDX header of `dims` unsigned-byte dimensions; sizes out. */
static int idx_header(const unsigned char *buf, size_t len, int dims,
                      uint32_t *size, const char *path, emu_error *err)
{
    size_t hdr = 4 + 4 * (size_t)dims;
    if (len < hdr)
        return emu_fail(err, path, "", "%zu bytes: too short for an IDX header "
                        "of %d dimensions (%zu bytes)", len, dims, hdr);
    uint32_t magic = be32(buf);
    uint32_t want = 0x0800u | (uint32_t)dims;
    if (magic != want)
        return emu_fail(err, path, "", "byte 0: magic 0x%08x, expected 0x%08x "
                        "(IDX, unsigned bytes, %d dimensions)", magic, want,
                        dims);
    uint64_t count = 1;
    for (int d = 0; d < dims; d++) {
        size[d] = be32(buf + 4 + 4 * d);
        if (size[d] == 0 || size[d] > 100000000u)
            return emu_fail(err, path, "", "byte %d: dimension %d has size %u",
                            4 + 4 * d, d, size[d]);
        count *= size[d];
        if (count > (uint64_t)1 << 32)
            return emu_fail(err, path, "", "byte %d: %llu elements is more "
                            "than this reader accepts", 4 + 4 * d,
                            (unsigned long long)count);
    }
    if (len - hdr != count)
        return emu_fail(err, path, "", "%zu data bytes after the header, the "
                        "header promises %llu (file %s)", len - hdr,
                        (unsigned long long)count,
                        len - hdr < count ? "truncated" : "has trailing bytes");
    return 0;
}

int emu_dataset_load_idx(emu_dataset *d, const char *images_path,
                         const char *labels_path, const char *name,
                         emu_error *err)
{
    EMU_HOSTFP_GUARD;
    memset(d, 0, sizeof *d);
    size_t ilen = 0, llen = 0;
    unsigned char *img = read_gz(images_path, (size_t)1 << 31, &ilen, err);
    if (!img)
        return -1;
    unsigned char *lab = read_gz(labels_path, (size_t)1 << 28, &llen, err);
    if (!lab) {
        free(img);
        return -1;
    }
    uint32_t isz[3], lsz[1];
    int rc = -1;
    if (idx_header(img, ilen, 3, isz, images_path, err) ||
        idx_header(lab, llen, 1, lsz, labels_path, err))
        goto done;
    if (isz[0] != lsz[0]) {
        emu_fail(err, labels_path, "", "%u labels for %u images in %s", lsz[0],
                 isz[0], images_path);
        goto done;
    }
    int maxlabel = 0;
    for (uint32_t i = 0; i < lsz[0]; i++) {
        int l = lab[8 + i];
        if (l > 99) {
            emu_fail(err, labels_path, "", "byte %u: label %d (labels are "
                     "class numbers below 100)", 8 + i, l);
            goto done;
        }
        if (l > maxlabel)
            maxlabel = l;
    }
    size_t n = isz[0], pix = (size_t)isz[1] * isz[2];
    d->x = malloc(n * pix * sizeof *d->x);
    d->y = malloc(n);
    if (!d->x || !d->y) {
        emu_fail(err, images_path, "", "out of memory for %zu images", n);
        goto done;
    }
    /* k / 255 rounded once to binary32: the values every framework uses. */
    for (size_t i = 0; i < n * pix; i++)
        d->x[i] = (float)img[16 + i] / 255.0f;
    memcpy(d->y, lab + 8, n);
    d->n = n;
    d->channels = 1;
    d->height = (int)isz[1];
    d->width = (int)isz[2];
    d->classes = maxlabel + 1 > 10 ? maxlabel + 1 : 10;
    snprintf(d->name, sizeof d->name, "%s", name ? name : "idx");
    snprintf(d->source, sizeof d->source, "%.150s + %.150s", images_path,
             labels_path);
    rc = 0;
done:
    free(img);
    free(lab);
    if (rc)
        emu_dataset_free(d);
    return rc;
}

int emu_dataset_fashion_mnist(emu_dataset *train, emu_dataset *test,
                              const char *dir, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    if (!dir)
        dir = EMU_FASHION_MNIST_DIR;
    char ip[512], lp[512];
    snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte.gz", dir);
    if (emu_dataset_load_idx(train, ip, lp, "fashion-mnist/train", err))
        return -1;
    snprintf(ip, sizeof ip, "%s/t10k-images-idx3-ubyte.gz", dir);
    snprintf(lp, sizeof lp, "%s/t10k-labels-idx1-ubyte.gz", dir);
    if (emu_dataset_load_idx(test, ip, lp, "fashion-mnist/test", err)) {
        emu_dataset_free(train);
        return -1;
    }
    return 0;
}

/* ---- the synthetic data set -------------------------------------------- */

enum { SIDE = 28, CLASSES = 10 };

typedef struct draw {
    uint64_t seed, stream, index;
} draw;

/* Uniform in [lo, hi) from 53 random bits. */
static double uniform(draw *g, double lo, double hi)
{
    uint64_t w = emu_random64(g->seed, g->stream, g->index++);
    return lo + (hi - lo) * ldexp((double)(w >> 11), -53);
}

/* Distance from (x, y) to the segment (ax, ay)-(bx, by). */
static double seg_dist(double x, double y, double ax, double ay, double bx,
                       double by)
{
    double dx = bx - ax, dy = by - ay;
    double t = ((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy);
    t = t < 0.0 ? 0.0 : t > 1.0 ? 1.0 : t;
    double ex = ax + t * dx - x, ey = ay + t * dy - y;
    return sqrt(ex * ex + ey * ey);
}

/* How far (x, y) is from class c's stroke, for a shape of centre (cx, cy)
 * and half-size s. */
static double shape_dist(int c, double x, double y, double cx, double cy,
                         double s)
{
    double u = x - cx, v = y - cy, r = sqrt(u * u + v * v);
    switch (c) {
    case 0: return seg_dist(x, y, cx - s, cy, cx + s, cy);          /* -  */
    case 1: return seg_dist(x, y, cx, cy - s, cx, cy + s);          /* |  */
    case 2: return seg_dist(x, y, cx - s, cy - s, cx + s, cy + s);  /* \  */
    case 3: return seg_dist(x, y, cx - s, cy + s, cx + s, cy - s);  /* /  */
    case 4: return fabs(r - s);                                     /* O  */
    case 5: return r < 0.6 * s ? 0.0 : r - 0.6 * s;                 /* dot */
    case 6: return fmin(seg_dist(x, y, cx - s, cy, cx + s, cy),     /* +  */
                        seg_dist(x, y, cx, cy - s, cx, cy + s));
    case 7: return fmin(seg_dist(x, y, cx - s, cy - s, cx + s, cy + s), /* x */
                        seg_dist(x, y, cx - s, cy + s, cx + s, cy - s));
    case 8: return fabs(fmax(fabs(u), fabs(v)) - s);                /* [] */
    default: {                                                      /* :  */
        double a = sqrt(u * u + (v - 0.6 * s) * (v - 0.6 * s));
        double b = sqrt(u * u + (v + 0.6 * s) * (v + 0.6 * s));
        return fmin(a, b) < 0.35 * s ? 0.0 : fmin(a, b) - 0.35 * s;
    }
    }
}

static void synth_image(float *img, int c, draw *g)
{
    double cx = SIDE / 2.0 + uniform(g, -4.0, 4.0);
    double cy = SIDE / 2.0 + uniform(g, -4.0, 4.0);
    double s = uniform(g, 5.0, 9.0);
    double w = uniform(g, 1.0, 2.5);       /* stroke half-width   */
    double a = uniform(g, 0.45, 1.0);      /* contrast            */
    double bg = uniform(g, 0.0, 0.15);     /* background level    */
    for (int y = 0; y < SIDE; y++)
        for (int x = 0; x < SIDE; x++) {
            double d = shape_dist(c, x + 0.5, y + 0.5, cx, cy, s);
            double ink = d < w ? 1.0 : d < w + 1.0 ? w + 1.0 - d : 0.0;
            /* Sum of two uniforms: a cheap bell-shaped noise. */
            double noise = 0.12 * (uniform(g, -1.0, 1.0) + uniform(g, -1.0, 1.0));
            double p = bg + a * ink + noise;
            img[y * SIDE + x] = (float)(p < 0.0 ? 0.0 : p > 1.0 ? 1.0 : p);
        }
}

static int synth_split(emu_dataset *d, const char *name, uint64_t seed,
                       uint64_t split, size_t n, emu_error *err)
{
    memset(d, 0, sizeof *d);
    if (n == 0 || n > 10000000)
        return emu_fail(err, "synthetic data", "", "%zu examples (1 to 10^7)",
                        n);
    d->x = malloc(n * SIDE * SIDE * sizeof *d->x);
    d->y = malloc(n);
    if (!d->x || !d->y) {
        emu_dataset_free(d);
        return emu_fail(err, "synthetic data", "", "out of memory for %zu "
                        "images", n);
    }
    for (size_t i = 0; i < n; i++) {
        /* Example i of a split is a pure function of (seed, split, i). */
        draw g = { seed, split << 40 | i, 0 };
        int c = (int)(emu_random64(seed, g.stream, 1u << 20) % CLASSES);
        d->y[i] = (uint8_t)c;
        synth_image(d->x + i * SIDE * SIDE, c, &g);
    }
    d->n = n;
    d->channels = 1;
    d->height = d->width = SIDE;
    d->classes = CLASSES;
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->source, sizeof d->source, "embedded generator, seed %llu",
             (unsigned long long)seed);
    return 0;
}

int emu_dataset_synthetic(emu_dataset *train, emu_dataset *test,
                          uint64_t seed, size_t n_train, size_t n_test,
                          emu_error *err)
{
    EMU_HOSTFP_GUARD;
    if (synth_split(train, "synthetic/train", seed, 1, n_train, err))
        return -1;
    if (synth_split(test, "synthetic/test", seed, 2, n_test, err)) {
        emu_dataset_free(train);
        return -1;
    }
    return 0;
}
