/*
 * data.c — training data sets: Fashion-MNIST IDX files and the embedded
 * synthetic images.
 *
 * IDX (LeCun's format): a 4-byte big-endian magic 0x0000TTDD (TT the
 * element type, 0x08 for unsigned bytes; DD the number of dimensions),
 * DD big-endian uint32 sizes, then the elements.  Files are read through
 * zlib, which also reads uncompressed files transparently, no further than
 * their header promises; every check names the file and the byte offset
 * that is wrong.
 */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE, posix_memalign */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/data.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <sys/stat.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "emu/rng.h"
#include "internal.h"

void emu_batch_permutation(size_t *perm, size_t n, uint64_t seed,
                           uint64_t epoch)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n > 0 ? n - 1 : 0; i > 0; i--) {
        uint64_t w = emu_random64(seed, ((uint64_t)1 << 48) + epoch, i);
        size_t j = (size_t)(w % (i + 1));
        size_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

void emu_dataset_free(emu_dataset *d)
{
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* Up to `want` more decompressed bytes into buf; the count read, or -1
 * with err (`at`: the bytes read before, for the message). */
static long long gz_fill(gzFile gz, unsigned char *buf, size_t want,
                         size_t at, const char *path, emu_error *err)
{
    size_t n = 0;
    while (n < want) {
        unsigned ask = want - n > (1u << 30) ? 1u << 30 : (unsigned)(want - n);
        int got = gzread(gz, buf + n, ask);
        int code = Z_OK;
        const char *msg = got <= 0 ? gzerror(gz, &code) : NULL;
        if (got < 0 || (got == 0 && code != Z_OK)) {
            /* zlib reports a truncated stream at the end, not in gzread. */
            emu_fail(err, EMU_EDATA, path, "", "%s after %zu bytes: %s", got < 0 ?
                     "corrupt compressed data" : "truncated or corrupt",
                     at + n, msg);
            return -1;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    return (long long)n;
}

/* Checks an IDX header of `dims` unsigned-byte dimensions (hdr bytes);
 * sizes out, and the number of data bytes it promises. */
static int idx_header(const unsigned char *buf, int dims, uint32_t *size,
                      uint64_t *count_out, const char *path, emu_error *err)
{
    uint32_t magic = be32(buf);
    uint32_t want = 0x0800u | (uint32_t)dims;
    if (magic != want)
        return emu_fail(err, EMU_EDATA, path, "", "byte 0: magic 0x%08x, expected 0x%08x "
                        "(IDX, unsigned bytes, %d dimensions)", magic, want,
                        dims);
    uint64_t count = 1;
    for (int d = 0; d < dims; d++) {
        size[d] = be32(buf + 4 + 4 * d);
        if (size[d] == 0 || size[d] > 100000000u)
            return emu_fail(err, EMU_EDATA, path, "", "byte %d: dimension %d has size %u",
                            4 + 4 * d, d, size[d]);
        count *= size[d];
        if (count > (uint64_t)1 << 32)
            return emu_fail(err, EMU_EDATA, path, "", "byte %d: %llu elements is more "
                            "than this reader accepts", 4 + 4 * d,
                            (unsigned long long)count);
    }
    *count_out = count;
    return 0;
}

/* An IDX file being read: its header checked, zlib positioned at the
 * first data byte. */
typedef struct idx_file {
    gzFile gz;
    const char *path;
    size_t hdr;      /* header bytes                                   */
    size_t count;    /* data bytes the header promises                 */
} idx_file;

static int idx_open(idx_file *f, const char *path, int dims, uint32_t *size,
                    emu_error *err)
{
    f->path = path;
    f->gz = gzopen(path, "rb");
    if (!f->gz)
        return emu_fail(err, errno ? EMU_EIO : EMU_ENOMEM, path, "",
                        "cannot open: %s",
                        errno ? strerror(errno) : "out of memory");
    f->hdr = 4 + 4 * (size_t)dims;
    unsigned char head[16];
    uint64_t count = 0;
    long long got = gz_fill(f->gz, head, f->hdr, 0, path, err);
    if (got >= 0 && (size_t)got < f->hdr)
        emu_fail(err, EMU_EDATA, path, "", "%lld bytes: too short for an IDX "
                 "header of %d dimensions (%zu bytes)", got, dims, f->hdr);
    if (got < 0 || (size_t)got < f->hdr ||
        idx_header(head, dims, size, &count, path, err)) {
        gzclose(f->gz);
        return -1;
    }
    f->count = count <= SIZE_MAX ? (size_t)count : SIZE_MAX;
    /* The data array is allocated at the size the header promises, so a
     * promise no file of this size can keep is refused before that: a
     * plain file holds its size less the header, a gzip stream at most
     * 1032 bytes per byte (deflate's limit: 258 bytes a 2-bit code).
     * Special files (a FIFO) have no size to hold against. */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        const uint64_t bytes = (uint64_t)st.st_size;
        const bool plain = gzdirect(f->gz);
        const uint64_t most = !plain ? (bytes > UINT64_MAX / 1032
                                            ? UINT64_MAX : 1032 * bytes)
                            : bytes > f->hdr ? bytes - f->hdr
                                             : 0;
        if (count > most) {
            gzclose(f->gz);
            return emu_fail(err, EMU_EDATA, path, "", "bytes 4-%zu: the header "
                            "promises %llu data bytes, more than a %s file "
                            "of %llu bytes can hold", f->hdr - 1,
                            (unsigned long long)count,
                            plain ? "plain" : "gzip",
                            (unsigned long long)bytes);
        }
    }
    return 0;
}

/* Inflates the data in pieces of IDX_PIECE bytes, each passed to
 * take(ctx, bytes, index of its first, length), then closes the file:
 * exactly the bytes the header promises, or an error naming the offset
 * where the file ends or goes on.  A file that goes on (a gzip bomb: a
 * few MB that inflate to GB) is refused at the first byte too many,
 * without inflating the rest. */
enum { IDX_PIECE = 1 << 16 };

static int idx_read(idx_file *f,
                    void (*take)(void *, const unsigned char *, size_t,
                                 size_t),
                    void *ctx, emu_error *err)
{
    unsigned char *piece = malloc(IDX_PIECE);
    size_t done = 0;
    int rc = -1;
    if (!piece) {
        emu_fail(err, EMU_ENOMEM, f->path, "", "out of memory");
        goto out;
    }
    while (done < f->count) {
        size_t want = f->count - done < IDX_PIECE ? f->count - done
                                                  : IDX_PIECE;
        long long got = gz_fill(f->gz, piece, want, f->hdr + done, f->path,
                                err);
        if (got < 0)
            goto out;
        take(ctx, piece, done, (size_t)got);
        done += (size_t)got;
        if ((size_t)got < want) {
            emu_fail(err, EMU_EDATA, f->path, "", "%zu data bytes after the "
                     "header, the header promises %zu (file truncated)", done,
                     f->count);
            goto out;
        }
    }
    long long got = gz_fill(f->gz, piece, 1, f->hdr + done, f->path, err);
    if (got < 0)
        goto out;
    if (got) {
        emu_fail(err, EMU_EDATA, f->path, "", "byte %zu: data beyond the %zu "
                 "bytes the header promises (file has trailing bytes)",
                 f->hdr + done, f->count);
        goto out;
    }
    rc = 0;
out:
    free(piece);
    gzclose(f->gz);
    return rc;
}

/* k / 255 rounded once to binary32: the values every framework uses. */
static void take_pixels(void *ctx, const unsigned char *b, size_t at,
                        size_t n)
{
    float *x = (float *)ctx + at;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)b[i] / 255.0f;
}

static void take_labels(void *ctx, const unsigned char *b, size_t at,
                        size_t n)
{
    memcpy((uint8_t *)ctx + at, b, n);
}

/* Room for n binary32 pixels.  Sets of more than a few MB ask the kernel
 * for transparent huge pages (Linux; Debian's default leaves them to
 * madvise): a 2 MB page per 512 small ones takes most of the page
 * faults out of the load and most of the TLB misses out of the batches'
 * gathers, whose rows are scattered over the whole set. */
enum { HUGE_PAGE = 2 << 20 };

static float *pixels_alloc(size_t n)
{
    const size_t bytes = n * sizeof(float);
#if defined(MADV_HUGEPAGE)
    if (bytes >= 4 * (size_t)HUGE_PAGE) {
        void *p = NULL;
        const size_t whole = (bytes + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
        if (posix_memalign(&p, HUGE_PAGE, whole))
            return NULL;
        (void)madvise(p, whole, MADV_HUGEPAGE); /* a hint: failure is fine */
        return p;
    }
#endif
    return malloc(bytes ? bytes : 1);
}

/* The images are inflated straight into their binary32 array, allocated
 * once at the size the header promises: no byte copy of the file is
 * held, and no memory is returned to the system after the pixels are
 * written (on a paravirtualised guest that unmapping made each page's
 * next first touch cost microseconds, which every training batch's
 * gather paid).  A header that promises more than its file can hold is
 * refused before the allocation (idx_open); one that lies within that
 * bound costs address space, not memory: the pages past the data are
 * never touched. */
int emu_dataset_load_idx(emu_dataset *d, const char *images_path,
                         const char *labels_path, const char *name,
                         emu_error *err)
{
    EMU_HOSTFP_GUARD;
    memset(d, 0, sizeof *d);
    uint32_t isz[3], lsz[1];
    idx_file fi, fl;
    if (idx_open(&fi, images_path, 3, isz, err))
        return -1;
    const size_t n = isz[0];
    d->x = fi.count <= SIZE_MAX / sizeof *d->x ? pixels_alloc(fi.count) : NULL;
    if (!d->x) {
        gzclose(fi.gz);
        return emu_fail(err, EMU_ENOMEM, images_path, "",
                        "out of memory for %zu images", n);
    }
    if (idx_read(&fi, take_pixels, d->x, err) ||
        idx_open(&fl, labels_path, 1, lsz, err))
        goto fail;
    if (!(d->y = malloc(fl.count))) {
        gzclose(fl.gz);
        emu_fail(err, EMU_ENOMEM, labels_path, "", "out of memory");
        goto fail;
    }
    if (idx_read(&fl, take_labels, d->y, err))
        goto fail;
    if (isz[0] != lsz[0]) {
        emu_fail(err, EMU_EDATA, labels_path, "", "%u labels for %u images in %s", lsz[0],
                 isz[0], images_path);
        goto fail;
    }
    int maxlabel = 0;
    for (uint32_t i = 0; i < lsz[0]; i++) {
        int l = d->y[i];
        if (l > 99) {
            emu_fail(err, EMU_EDATA, labels_path, "", "byte %u: label %d (labels are "
                     "class numbers below 100)", 8 + i, l);
            goto fail;
        }
        if (l > maxlabel)
            maxlabel = l;
    }
    d->n = n;
    d->channels = 1;
    d->height = (int)isz[1];
    d->width = (int)isz[2];
    d->classes = maxlabel + 1 > 10 ? maxlabel + 1 : 10;
    snprintf(d->name, sizeof d->name, "%s", name ? name : "idx");
    snprintf(d->source, sizeof d->source, "%.150s + %.150s", images_path,
             labels_path);
    return 0;
fail:
    emu_dataset_free(d);
    return -1;
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
        return emu_fail(err, EMU_EINVAL, "synthetic data", "", "%zu examples (1 to 10^7)",
                        n);
    d->x = malloc(n * SIDE * SIDE * sizeof *d->x);
    d->y = malloc(n);
    if (!d->x || !d->y) {
        emu_dataset_free(d);
        return emu_fail(err, EMU_ENOMEM, "synthetic data", "", "out of memory for %zu "
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
