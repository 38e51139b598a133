/*
 * nn_ckpt.c — the checkpoint codec: explicit little-endian fields,
 * sections with lengths and crc32s, and a reader that trusts nothing it
 * has not checked (the layout is in nn_ckpt.h).  The training loop
 * (nn_train.c) says what the sections hold; this file writes and checks
 * them, and encodes the parts that are not the loop's own: the
 * configuration, the policy and the statistics of every op site.
 */
#define _POSIX_C_SOURCE 200809L

#include "nn_ckpt.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "internal.h"
#include "nn_internal.h"

static const char MAGIC[8] = { 'E', 'M', 'U', '-', 'C', 'K', 'P', 'T' };
static const char END[8] = { 'E', 'M', 'U', '-', 'E', 'N', 'D', '\n' };
static const char TAGS[CKPT_SECTIONS][5] = {
    "CONF", "POLI", "STAT", "LAYR", "TENS", "SITE", "TIME",
};

/* zlib's crc32 takes a uInt length: feed it in pieces. */
static uint32_t crc(uint32_t c, const unsigned char *p, size_t n)
{
    while (n) {
        uInt k = n > (1u << 30) ? 1u << 30 : (uInt)n;
        c = (uint32_t)crc32(c, p, k);
        p += k;
        n -= k;
    }
    return c;
}

static uint32_t crc_of(const unsigned char *p, size_t n)
{
    return crc((uint32_t)crc32(0L, Z_NULL, 0), p, n);
}

static void le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}

static void le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* ---- writing ----------------------------------------------------------- */

static unsigned char *room(ckpt_out *o, size_t n)
{
    if (o->oom)
        return NULL;
    if (n > SIZE_MAX / 2 - o->len) {
        o->oom = true;
        return NULL;
    }
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 1 << 16;
        while (cap < o->len + n)
            cap *= 2;
        unsigned char *p = realloc(o->p, cap);
        if (!p) {
            o->oom = true;
            return NULL;
        }
        o->p = p;
        o->cap = cap;
    }
    unsigned char *at = o->p + o->len;
    o->len += n;
    return at;
}

static void put(ckpt_out *o, const void *bytes, size_t n)
{
    unsigned char *at = room(o, n);
    if (at)
        memcpy(at, bytes, n);
}

void ckpt_u32(ckpt_out *o, uint32_t v)
{
    unsigned char *at = room(o, 4);
    if (at)
        le32(at, v);
}

void ckpt_u64(ckpt_out *o, uint64_t v)
{
    unsigned char *at = room(o, 8);
    if (at)
        le64(at, v);
}

void ckpt_f64(ckpt_out *o, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    ckpt_u64(o, u);
}

void ckpt_f32s(ckpt_out *o, const float *v, size_t n)
{
    unsigned char *at = n <= SIZE_MAX / 8 ? room(o, 4 * n) : NULL;
    for (size_t i = 0; at && i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        le32(at + 4 * i, u);
    }
}

void ckpt_str(ckpt_out *o, const char *s)
{
    size_t n = strlen(s);
    ckpt_u32(o, (uint32_t)n);
    put(o, s, n);
}

static void close_section(ckpt_out *o)
{
    if (!o->section || o->oom)
        return;
    unsigned char *h = o->p + o->section;
    le64(h + 4, o->len - o->section - CKPT_SECTION_HEAD);
    uint32_t c = crc_of(h, 12);
    c = crc(c, h + CKPT_SECTION_HEAD, o->len - o->section - CKPT_SECTION_HEAD);
    le32(h + 12, c);
    o->section = 0;
}

void ckpt_begin(ckpt_out *o)
{
    memset(o, 0, sizeof *o);
    room(o, CKPT_HEADER);
}

void ckpt_section(ckpt_out *o, ckpt_tag tag)
{
    close_section(o);
    size_t at = o->len;
    unsigned char *h = room(o, CKPT_SECTION_HEAD);
    if (!h)
        return;
    memcpy(h, TAGS[tag], 4);
    o->section = at;
}

void ckpt_finish(ckpt_out *o)
{
    close_section(o);
    unsigned char *t = room(o, CKPT_TRAILER);
    if (!t)
        return;
    memcpy(t, END, sizeof END);
    unsigned char *h = o->p;
    memcpy(h, MAGIC, sizeof MAGIC);
    le32(h + 8, CKPT_VERSION);
    le32(h + 12, CKPT_SECTIONS);
    le64(h + 16, o->len);
    le32(h + 24, crc_of(h, 24));
    le32(o->p + o->len - 4, crc_of(o->p, o->len - 4));
}

void ckpt_out_free(ckpt_out *o)
{
    free(o->p);
    memset(o, 0, sizeof *o);
}

/* ---- checking the frame -------------------------------------------------- */

int ckpt_open(const unsigned char *img, size_t size, const char *path,
              ckpt_span span[CKPT_SECTIONS], emu_error *err)
{
    if (size >= sizeof MAGIC ? memcmp(img, MAGIC, sizeof MAGIC) != 0
                             : memcmp(img, MAGIC, size) != 0)
        return emu_fail(err, EMU_EDATA, path, "", "offset 0..7: not a libemu checkpoint "
                        "(no \"EMU-CKPT\" magic; checkpoints of libemu before "
                        "layout version 3 cannot be read)");
    if (size < CKPT_HEADER + CKPT_TRAILER)
        return emu_fail(err, EMU_EDATA, path, "", "truncated at offset %zu: a checkpoint "
                        "has at least %d bytes", size,
                        CKPT_HEADER + CKPT_TRAILER);
    if (rd32(img + 24) != crc_of(img, 24))
        return emu_fail(err, EMU_EDATA, path, "", "damaged at offset 0..27 (header): "
                        "crc32 0x%08x, the bytes give 0x%08x", rd32(img + 24),
                        crc_of(img, 24));
    if (rd32(img + 8) != CKPT_VERSION)
        return emu_fail(err, EMU_EUNSUPPORTED, path, "", "offset 8: layout version %u; this "
                        "libemu reads version %d", rd32(img + 8), CKPT_VERSION);
    if (rd32(img + 12) != CKPT_SECTIONS)
        return emu_fail(err, EMU_EDATA, path, "", "offset 12: %u sections; version %d "
                        "has %d", rd32(img + 12), CKPT_VERSION, CKPT_SECTIONS);
    uint64_t want = rd64(img + 16);
    if (want > size)
        return emu_fail(err, EMU_EDATA, path, "", "truncated at offset %zu: the header "
                        "(offset 16) gives the file %llu bytes", size,
                        (unsigned long long)want);
    if (want < size)
        return emu_fail(err, EMU_EDATA, path, "", "offset %llu: the file goes on for %llu "
                        "bytes past the end the header (offset 16) gives", (unsigned long long)want,
                        (unsigned long long)(size - want));
    const size_t tail = size - CKPT_TRAILER;
    size_t pos = CKPT_HEADER;
    for (int s = 0; s < CKPT_SECTIONS; s++) {
        if (tail - pos < CKPT_SECTION_HEAD)
            return emu_fail(err, EMU_EDATA, path, "", "damaged at offset %zu: section "
                            "'%s' expected, the trailer is at %zu", pos,
                            TAGS[s], tail);
        const unsigned char *h = img + pos;
        uint64_t len = rd64(h + 4);
        if (len > tail - pos - CKPT_SECTION_HEAD)
            return emu_fail(err, EMU_EDATA, path, "", "damaged at offset %zu..%zu "
                            "(header of section %d, '%s'): a body of %llu "
                            "bytes runs past the trailer at %zu", pos,
                            pos + CKPT_SECTION_HEAD - 1, s + 1, TAGS[s],
                            (unsigned long long)len, tail);
        uint32_t c = crc(crc_of(h, 12), h + CKPT_SECTION_HEAD, (size_t)len);
        size_t last = pos + CKPT_SECTION_HEAD + (size_t)len - 1;
        if (c != rd32(h + 12))
            return emu_fail(err, EMU_EDATA, path, "", "damaged at offset %zu..%zu "
                            "(section %d, '%s'): crc32 0x%08x, the bytes "
                            "give 0x%08x", pos, last, s + 1, TAGS[s],
                            rd32(h + 12), c);
        if (memcmp(h, TAGS[s], 4))
            return emu_fail(err, EMU_EDATA, path, "", "offset %zu: section %d is not "
                            "'%s' (tag %02x %02x %02x %02x)", pos, s + 1,
                            TAGS[s], h[0], h[1], h[2], h[3]);
        span[s].off = pos + CKPT_SECTION_HEAD;
        span[s].len = (size_t)len;
        pos = last + 1;
    }
    if (pos != tail)
        return emu_fail(err, EMU_EDATA, path, "", "damaged at offset %zu..%zu: %zu bytes "
                        "between the last section and the trailer", pos,
                        tail - 1, tail - pos);
    if (memcmp(img + tail, END, sizeof END))
        return emu_fail(err, EMU_EDATA, path, "", "damaged at offset %zu..%zu (trailer): "
                        "no end magic", tail, tail + 7);
    if (rd32(img + size - 4) != crc_of(img, size - 4))
        return emu_fail(err, EMU_EDATA, path, "", "damaged at offset %zu..%zu (trailer): "
                        "crc32 0x%08x, the file gives 0x%08x", size - 4,
                        size - 1, rd32(img + size - 4), crc_of(img, size - 4));
    return 0;
}

/* ---- reading fields ---------------------------------------------------------- */

void ckpt_in_init(ckpt_in *in, const unsigned char *img, const ckpt_span *span,
                  ckpt_tag tag, const char *path, emu_error *err)
{
    in->base = img;
    in->pos = span[tag].off;
    in->end = span[tag].off + span[tag].len;
    in->tag = tag;
    in->path = path;
    in->err = err;
    in->failed = false;
}

void ckpt_bad(ckpt_in *in, const char *fmt, ...)
{
    if (in->failed)
        return;
    in->failed = true;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    emu_fail(in->err, EMU_EDATA, in->path, "", "offset %zu (section '%s'): %s", in->pos,
             TAGS[in->tag], msg);
}

int ckpt_done(ckpt_in *in)
{
    if (!in->failed && in->pos != in->end)
        ckpt_bad(in, "%zu bytes left over at the end of the section",
                 in->end - in->pos);
    return in->failed ? -1 : 0;
}

static const unsigned char *take(ckpt_in *in, size_t n)
{
    if (in->failed)
        return NULL;
    if (n > in->end - in->pos) {
        ckpt_bad(in, "the section ends %zu bytes early",
                 n - (in->end - in->pos));
        return NULL;
    }
    const unsigned char *p = in->base + in->pos;
    in->pos += n;
    return p;
}

uint32_t ckpt_get_u32(ckpt_in *in)
{
    const unsigned char *p = take(in, 4);
    return p ? rd32(p) : 0;
}

uint64_t ckpt_get_u64(ckpt_in *in)
{
    const unsigned char *p = take(in, 8);
    return p ? rd64(p) : 0;
}

double ckpt_get_f64(ckpt_in *in)
{
    uint64_t u = ckpt_get_u64(in);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

void ckpt_get_f32s(ckpt_in *in, float *v, size_t n)
{
    const unsigned char *p = n <= SIZE_MAX / 8 ? take(in, 4 * n) : NULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = p ? rd32(p + 4 * i) : 0;
        memcpy(&v[i], &u, sizeof u);
    }
}

size_t ckpt_get_count(ckpt_in *in, size_t item, const char *what)
{
    size_t at = in->pos;
    uint64_t n = ckpt_get_u64(in);
    if (!in->failed && n > (in->end - in->pos) / (item ? item : 1)) {
        in->pos = at;
        ckpt_bad(in, "%llu %s cannot fit in the %zu bytes left",
                 (unsigned long long)n, what, in->end - in->pos - 8);
        return 0;
    }
    return in->failed ? 0 : (size_t)n;
}

void ckpt_get_str(ckpt_in *in, char *buf, size_t size)
{
    size_t at = in->pos;
    uint32_t n = ckpt_get_u32(in);
    buf[0] = '\0';
    if (in->failed)
        return;
    if (n >= size) {
        in->pos = at;
        ckpt_bad(in, "a string of %u bytes where at most %zu fit", n, size - 1);
        return;
    }
    const unsigned char *p = take(in, n);
    if (!p)
        return;
    if (memchr(p, '\0', n)) {
        in->pos = at;
        ckpt_bad(in, "a string with a NUL byte");
        return;
    }
    memcpy(buf, p, n);
    buf[n] = '\0';
}

/* An enumeration's value, checked against its count. */
static unsigned get_enum(ckpt_in *in, unsigned count, const char *what)
{
    size_t at = in->pos;
    uint32_t v = ckpt_get_u32(in);
    if (!in->failed && v >= count) {
        in->pos = at;
        ckpt_bad(in, "%s %u is not below %u", what, v, count);
        return 0;
    }
    return v;
}

static bool get_bool(ckpt_in *in)
{
    return get_enum(in, 2, "a truth value") != 0;
}

static int get_int(ckpt_in *in)
{
    return (int)(int32_t)ckpt_get_u32(in);
}

/* ---- the configuration ---------------------------------------------------------- */

void ckpt_put_config(ckpt_out *o, const emu_train_config *c)
{
    ckpt_str(o, c->preset);
    ckpt_str(o, c->arch);
    ckpt_str(o, c->data);
    ckpt_str(o, c->data_dir);
    ckpt_u64(o, c->train_examples);
    ckpt_u64(o, c->test_examples);
    ckpt_u32(o, (uint32_t)c->epochs);
    ckpt_u64(o, (uint64_t)c->max_steps);
    ckpt_u32(o, (uint32_t)c->batch);
    ckpt_u32(o, (uint32_t)c->opt);
    const double reals[] = { c->lr, c->momentum, c->weight_decay, c->beta1,
                             c->beta2, c->eps };
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++)
        ckpt_f64(o, reals[i]);
    ckpt_u32(o, (uint32_t)c->schedule);
    ckpt_f64(o, c->lr_final);
    ckpt_u64(o, (uint64_t)c->lr_step);
    ckpt_f64(o, c->loss_mult);
    ckpt_u64(o, c->seed);
    ckpt_f64(o, c->ref_rate);
    ckpt_u32(o, (uint32_t)c->stats_every);
    ckpt_u32(o, (uint32_t)c->checkpoint_every);
    ckpt_u32(o, (uint32_t)c->threads);
    /* Settings added after layout version 3 was fixed: optional tails,
     * in order, written up to the last one a run uses, so that every other
     * run's checkpoint keeps its bytes (and older checkpoints read as "not
     * used").  1: warm-up and clipping; 2: language-model runs' window
     * and evaluation; 3: fortunes' size limit (a resume reads the files
     * again under it); 4: the histogram steps. */
    const int tails = c->hist_every ? 4
                      : c->data_max_bytes ? 3
                      : c->seq_len || c->eval_windows ? 2
                      : c->warmup || c->clip_norm != 0.0 ? 1 : 0;
    if (tails >= 1) {
        ckpt_u64(o, (uint64_t)c->warmup);
        ckpt_f64(o, c->clip_norm);
    }
    if (tails >= 2) {
        ckpt_u32(o, (uint32_t)c->seq_len);
        ckpt_u64(o, (uint64_t)c->eval_windows);
    }
    if (tails >= 3)
        ckpt_u64(o, (uint64_t)c->data_max_bytes);
    if (tails >= 4)
        ckpt_u32(o, (uint32_t)c->hist_every);
}

int ckpt_get_config(ckpt_in *in, emu_train_config *c)
{
    emu_train_config_default(c);
    ckpt_get_str(in, c->preset, sizeof c->preset);
    ckpt_get_str(in, c->arch, sizeof c->arch);
    ckpt_get_str(in, c->data, sizeof c->data);
    ckpt_get_str(in, c->data_dir, sizeof c->data_dir);
    c->train_examples = (size_t)ckpt_get_u64(in);
    c->test_examples = (size_t)ckpt_get_u64(in);
    c->epochs = get_int(in);
    c->max_steps = (int64_t)ckpt_get_u64(in);
    c->batch = get_int(in);
    c->opt = (emu_optimizer)get_enum(in, EMU_OPT_COUNT, "optimizer");
    double *reals[] = { &c->lr, &c->momentum, &c->weight_decay, &c->beta1,
                        &c->beta2, &c->eps };
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++)
        *reals[i] = ckpt_get_f64(in);
    c->schedule = (emu_schedule)get_enum(in, EMU_LR_COUNT, "schedule");
    c->lr_final = ckpt_get_f64(in);
    c->lr_step = (int64_t)ckpt_get_u64(in);
    c->loss_mult = ckpt_get_f64(in);
    c->seed = ckpt_get_u64(in);
    c->ref_rate = ckpt_get_f64(in);
    c->stats_every = get_int(in);
    c->checkpoint_every = get_int(in);
    c->threads = get_int(in);
    if (!in->failed && in->pos != in->end) {
        c->warmup = (int64_t)ckpt_get_u64(in);
        c->clip_norm = ckpt_get_f64(in);
        if (!in->failed && (c->warmup < 0 || !(c->clip_norm >= 0.0) ||
                            isinf(c->clip_norm)))
            ckpt_bad(in, "warm-up %lld or clipping norm %g out of range",
                     (long long)c->warmup, c->clip_norm);
    }
    if (!in->failed && in->pos != in->end) {
        size_t at = in->pos;
        c->seq_len = get_int(in);
        c->eval_windows = (size_t)ckpt_get_u64(in);
        if (!in->failed && (c->seq_len < 0 || c->eval_windows > ((size_t)1 << 40))) {
            in->pos = at;
            ckpt_bad(in, "sequence length %d or %zu evaluation windows out of "
                     "range", c->seq_len, c->eval_windows);
        }
    }
    if (!in->failed && in->pos != in->end)
        c->data_max_bytes = (size_t)ckpt_get_u64(in);
    if (!in->failed && in->pos != in->end) {
        size_t at = in->pos;
        c->hist_every = get_int(in);
        if (!in->failed && c->hist_every < 0) {
            in->pos = at;
            ckpt_bad(in, "histograms every %d steps", c->hist_every);
        }
    }
    return ckpt_done(in);
}

/* ---- the policy ------------------------------------------------------------------ */

/* A format by its spec; the derived constants are recomputed on reading.
 * A slot the policy leaves unused (an accumulator's product format when
 * products are exact, an operand quantizer that is off) is all zeros,
 * which is no format: a flag says which. */
static void put_format(ckpt_out *o, const emu_format *f)
{
    ckpt_u32(o, f->ebits != 0);
    if (!f->ebits)
        return;
    ckpt_str(o, f->name);
    ckpt_str(o, f->aliases);
    ckpt_str(o, f->description);
    ckpt_u32(o, (uint32_t)f->ebits);
    ckpt_u32(o, (uint32_t)f->mbits);
    ckpt_u32(o, (uint32_t)f->bias);
    ckpt_u32(o, f->is_signed);
    ckpt_u32(o, f->subnormals);
    ckpt_u32(o, f->has_zero);
    ckpt_u32(o, (uint32_t)f->specials);
    ckpt_u32(o, (uint32_t)f->overflow);
}

static void get_format(ckpt_in *in, emu_format *f)
{
    memset(f, 0, sizeof *f);
    if (!get_bool(in))
        return;
    size_t at = in->pos;
    ckpt_get_str(in, f->name, sizeof f->name);
    ckpt_get_str(in, f->aliases, sizeof f->aliases);
    ckpt_get_str(in, f->description, sizeof f->description);
    f->ebits = get_int(in);
    f->mbits = get_int(in);
    f->bias = get_int(in);
    f->is_signed = get_bool(in);
    f->subnormals = get_bool(in);
    f->has_zero = get_bool(in);
    f->specials = (emu_specials)get_enum(in, EMU_SPECIALS_COUNT, "specials");
    f->overflow = (emu_overflow)get_enum(in, EMU_OVERFLOW_COUNT, "overflow");
    emu_error e;
    if (!in->failed && emu_format_validate(f, &e)) {
        in->pos = at;
        ckpt_bad(in, "format '%s': %s", f->name, e.message);
    }
}

static void put_rounding(ckpt_out *o, const emu_rounding *r)
{
    ckpt_u32(o, (uint32_t)r->mode);
    ckpt_u32(o, r->sr_bits);
    ckpt_u32(o, (uint32_t)r->tininess);
    ckpt_u32(o, r->saturate);
}

static void get_rounding(ckpt_in *in, emu_rounding *r)
{
    memset(r, 0, sizeof *r);
    r->mode = (emu_rnd)get_enum(in, EMU_RND_COUNT, "rounding mode");
    r->sr_bits = ckpt_get_u32(in);
    r->tininess = (emu_tininess)get_enum(in, 2, "tininess");
    r->saturate = get_bool(in);
}

static void put_prec(ckpt_out *o, const emu_role_prec *r)
{
    put_format(o, &r->fmt);
    put_rounding(o, &r->rnd);
}

static void get_prec(ckpt_in *in, emu_role_prec *r)
{
    get_format(in, &r->fmt);
    get_rounding(in, &r->rnd);
}

static void put_scaled(ckpt_out *o, const emu_scaled_format *s)
{
    ckpt_str(o, s->name);
    put_format(o, &s->elem);
    ckpt_u32(o, s->int_elem);
    ckpt_u32(o, s->block_scaled);
    put_format(o, &s->scale);
    ckpt_u64(o, s->block[0]);
    ckpt_u64(o, s->block[1]);
    ckpt_u32(o, (uint32_t)s->rule);
    ckpt_u32(o, (uint32_t)s->scale_mode);
    ckpt_u32(o, s->tensor_scale);
    ckpt_u32(o, s->pad);
    ckpt_u32(o, s->strict_range);
}

static void get_scaled(ckpt_in *in, emu_scaled_format *s)
{
    memset(s, 0, sizeof *s);
    ckpt_get_str(in, s->name, sizeof s->name);
    get_format(in, &s->elem);
    s->int_elem = get_bool(in);
    s->block_scaled = get_bool(in);
    get_format(in, &s->scale);
    s->block[0] = (size_t)ckpt_get_u64(in);
    s->block[1] = (size_t)ckpt_get_u64(in);
    s->rule = (emu_scale_rule)get_enum(in, EMU_SCALE_RULE_COUNT, "scale rule");
    s->scale_mode = (emu_rnd)get_enum(in, EMU_RND_COUNT, "rounding mode");
    s->tensor_scale = get_bool(in);
    s->pad = get_bool(in);
    s->strict_range = get_bool(in);
}

static void put_quant(ckpt_out *o, const emu_operand_quant *q)
{
    ckpt_u32(o, q->on);
    put_scaled(o, &q->fmt);
    ckpt_u32(o, (uint32_t)q->mode);
    ckpt_u32(o, q->sr_bits);
}

static void get_quant(ckpt_in *in, emu_operand_quant *q)
{
    q->on = get_bool(in);
    get_scaled(in, &q->fmt);
    q->mode = (emu_rnd)get_enum(in, EMU_RND_COUNT, "rounding mode");
    q->sr_bits = ckpt_get_u32(in);
}

static void put_accum(ckpt_out *o, const emu_accum *a)
{
    ckpt_u32(o, (uint32_t)a->kind);
    put_format(o, &a->acc);
    ckpt_u32(o, a->round_products);
    put_format(o, &a->prod);
    put_format(o, &a->wide);
    put_rounding(o, &a->rnd);
    ckpt_u32(o, a->block);
    ckpt_u32(o, a->fused_k);
    ckpt_u32(o, a->fused_w);
}

static void get_accum(ckpt_in *in, emu_accum *a)
{
    a->kind = (emu_accum_kind)get_enum(in, EMU_ACCUM_COUNT, "accumulator");
    get_format(in, &a->acc);
    a->round_products = get_bool(in);
    get_format(in, &a->prod);
    get_format(in, &a->wide);
    get_rounding(in, &a->rnd);
    a->block = ckpt_get_u32(in);
    a->fused_k = ckpt_get_u32(in);
    a->fused_w = ckpt_get_u32(in);
}

void ckpt_put_policy(ckpt_out *o, const emu_policy *p)
{
    ckpt_str(o, p->name);
    ckpt_str(o, p->paper);
    const emu_role_prec *roles[] = { &p->weight, &p->master, &p->activation,
                                     &p->act_grad, &p->weight_grad,
                                     &p->opt_state, &p->exempt_prec };
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        put_prec(o, roles[i]);
    ckpt_u32(o, p->use_master);
    put_accum(o, &p->accum);
    ckpt_u32(o, p->exempt);
    ckpt_u32(o, (uint32_t)p->update);
    const emu_loss_scaling *s = &p->scaling;
    ckpt_u32(o, (uint32_t)s->kind);
    ckpt_f64(o, s->init);
    ckpt_f64(o, s->growth);
    ckpt_f64(o, s->backoff);
    ckpt_u32(o, (uint32_t)s->interval);
    ckpt_f64(o, s->floor);
    ckpt_f64(o, s->floor_growth);
    ckpt_u32(o, (uint32_t)s->floor_every);
    ckpt_f64(o, s->target);
    ckpt_f64(o, s->max);
    put_quant(o, &p->q_weight);
    put_quant(o, &p->q_activation);
    put_quant(o, &p->q_act_grad);
    ckpt_u32(o, (uint32_t)p->tscale.kind);
    ckpt_u32(o, (uint32_t)p->tscale.history);
    ckpt_u32(o, (uint32_t)p->tscale.algo);
    ckpt_u32(o, (uint32_t)p->tscale.margin);
    /* The op classes, appended only when one differs from what a policy
     * without them meant: an image run's checkpoint stays as it was, and
     * an older checkpoint (which ends here) reads as legacy. */
    if (!emu_policy_classes_legacy(p) || s->kind == EMU_SCALE_LAYERWISE ||
        p->attn_quant || p->rht != EMU_RHT_NONE) {
        put_prec(o, &p->norm_stats);
        put_prec(o, &p->softmax);
        put_prec(o, &p->loss);
    }
    /* LAYERWISE's caps after the classes (then always written): a kind no
     * older checkpoint can hold, so that every older one reads as it was. */
    if (s->kind == EMU_SCALE_LAYERWISE) {
        ckpt_f64(o, p->layer_max);
        ckpt_f64(o, p->total_max);
    }
    /* attn_quant, only when set or followed by the transform (absent: no);
     * then the random Hadamard transform, only when applied (absent: none). */
    if (p->attn_quant || p->rht != EMU_RHT_NONE)
        ckpt_u32(o, p->attn_quant);
    if (p->rht != EMU_RHT_NONE) {
        ckpt_u32(o, (uint32_t)p->rht);
        ckpt_u32(o, p->rht_block);
        ckpt_u64(o, p->rht_seed);
    }
}

int ckpt_get_policy(ckpt_in *in, emu_policy *p)
{
    memset(p, 0, sizeof *p);
    ckpt_get_str(in, p->name, sizeof p->name);
    ckpt_get_str(in, p->paper, sizeof p->paper);
    emu_role_prec *roles[] = { &p->weight, &p->master, &p->activation,
                               &p->act_grad, &p->weight_grad, &p->opt_state,
                               &p->exempt_prec };
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        get_prec(in, roles[i]);
    p->use_master = get_bool(in);
    get_accum(in, &p->accum);
    p->exempt = get_enum(in, 4, "exempt layers");
    p->update = (emu_update_rule)get_enum(in, EMU_UPDATE_COUNT, "update rule");
    emu_loss_scaling *s = &p->scaling;
    s->kind = (emu_scaling)get_enum(in, EMU_SCALE_COUNT, "loss scaling");
    s->init = ckpt_get_f64(in);
    s->growth = ckpt_get_f64(in);
    s->backoff = ckpt_get_f64(in);
    s->interval = get_int(in);
    s->floor = ckpt_get_f64(in);
    s->floor_growth = ckpt_get_f64(in);
    s->floor_every = get_int(in);
    s->target = ckpt_get_f64(in);
    s->max = ckpt_get_f64(in);
    get_quant(in, &p->q_weight);
    get_quant(in, &p->q_activation);
    get_quant(in, &p->q_act_grad);
    p->tscale.kind = (emu_tscale_kind)get_enum(in, EMU_TSCALE_COUNT,
                                               "tensor scaling");
    p->tscale.history = get_int(in);
    p->tscale.algo = (emu_amax_algo)get_enum(in, EMU_AMAX_ALGO_COUNT,
                                             "amax algorithm");
    p->tscale.margin = get_int(in);
    emu_policy_class_reset(p, &p->norm_stats);
    emu_policy_class_reset(p, &p->softmax);
    emu_policy_class_reset(p, &p->loss);
    if (!in->failed && in->pos < in->end) {
        get_prec(in, &p->norm_stats);
        get_prec(in, &p->softmax);
        get_prec(in, &p->loss);
    }
    /* Not in the record of the other kinds: the defaults (unused there). */
    p->layer_max = 16.0;
    p->total_max = 1024.0;
    if (!in->failed && s->kind == EMU_SCALE_LAYERWISE) {
        p->layer_max = ckpt_get_f64(in);
        p->total_max = ckpt_get_f64(in);
    }
    if (!in->failed && in->pos < in->end)
        p->attn_quant = get_bool(in);
    p->rht_block = 16;
    if (!in->failed && in->pos < in->end) {
        p->rht = (emu_rht_apply)get_enum(in, EMU_RHT_COUNT, "Hadamard transform");
        p->rht_block = ckpt_get_u32(in);
        p->rht_seed = ckpt_get_u64(in);
    }
    if (ckpt_done(in))
        return -1;
    /* Well-formed is not enough: the policy must be one emu_train accepts. */
    emu_error e;
    if (emu_policy_validate(p, &e)) {
        in->pos = in->end;
        ckpt_bad(in, "the saved policy is refused: %s: %s", e.key, e.message);
        return -1;
    }
    return 0;
}

/* ---- op-site statistics ------------------------------------------------------------ */

/* A histogram: its number of bins (so that a change of bins is caught),
 * then only its non-zero bins, as (index, count) in increasing index:
 * most bins of most sites are empty. */
static void put_bins(ckpt_out *o, const uint64_t *v, size_t n)
{
    uint32_t nz = 0;
    for (size_t i = 0; i < n; i++)
        nz += v[i] != 0;
    ckpt_u32(o, (uint32_t)n);
    ckpt_u32(o, nz);
    for (size_t i = 0; i < n; i++)
        if (v[i]) {
            ckpt_u32(o, (uint32_t)i);
            ckpt_u64(o, v[i]);
        }
}

static void get_bins(ckpt_in *in, uint64_t *v, size_t n)
{
    memset(v, 0, n * sizeof *v);
    size_t at = in->pos;
    uint32_t bins = ckpt_get_u32(in), nz = ckpt_get_u32(in);
    if (!in->failed && (bins != n || nz > n)) {
        in->pos = at;
        ckpt_bad(in, "a histogram of %u bins (%u used); this libemu has %zu",
                 bins, nz, n);
        return;
    }
    for (uint32_t k = 0, next = 0; k < nz && !in->failed; k++) {
        at = in->pos;
        uint32_t i = ckpt_get_u32(in);
        uint64_t c = ckpt_get_u64(in);
        if (!in->failed && (i < next || i >= n || c == 0)) {
            in->pos = at;
            ckpt_bad(in, "histogram bin %u (count %llu) out of order or range",
                     i, (unsigned long long)c);
            return;
        }
        v[i] = c;
        next = i + 1;
    }
}

/* The counters of one emu_site_stats, in this order, then its
 * histograms. */
static void put_site_stats(ckpt_out *o, const emu_site_stats *t)
{
    const uint64_t counts[] = { t->results, t->inexact, t->underflow,
                                t->to_zero, t->subnormal, t->overflow, t->nan,
                                t->nan_produced, t->adds, t->absorbed,
                                t->ref_samples, t->dot_samples };
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
        ckpt_u64(o, counts[i]);
    const double reals[] = { t->ulp_sum, t->ulp_max, t->rel_sum, t->rel_max,
                             t->quant_sum, t->quant_max, t->accum_sum,
                             t->accum_max, t->round_sum, t->round_max };
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++)
        ckpt_f64(o, reals[i]);
    put_bins(o, t->lost_bits, EMU_LOST_BINS);
    put_bins(o, t->hist_exact, EMU_HIST_BINS);
    put_bins(o, t->hist_rounded, EMU_HIST_BINS);
    put_bins(o, t->hist_scale, EMU_HIST_BINS);
    put_bins(o, t->ulp_hist, EMU_ULPERR_BINS);
    put_bins(o, t->rel_hist, EMU_RELERR_BINS);
}

static void get_site_stats(ckpt_in *in, emu_site_stats *t)
{
    uint64_t *counts[] = { &t->results, &t->inexact, &t->underflow,
                           &t->to_zero, &t->subnormal, &t->overflow, &t->nan,
                           &t->nan_produced, &t->adds, &t->absorbed,
                           &t->ref_samples, &t->dot_samples };
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
        *counts[i] = ckpt_get_u64(in);
    double *reals[] = { &t->ulp_sum, &t->ulp_max, &t->rel_sum, &t->rel_max,
                        &t->quant_sum, &t->quant_max, &t->accum_sum,
                        &t->accum_max, &t->round_sum, &t->round_max };
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++)
        *reals[i] = ckpt_get_f64(in);
    get_bins(in, t->lost_bits, EMU_LOST_BINS);
    get_bins(in, t->hist_exact, EMU_HIST_BINS);
    get_bins(in, t->hist_rounded, EMU_HIST_BINS);
    get_bins(in, t->hist_scale, EMU_HIST_BINS);
    get_bins(in, t->ulp_hist, EMU_ULPERR_BINS);
    get_bins(in, t->rel_hist, EMU_RELERR_BINS);
}

void ckpt_put_stats(ckpt_out *o, const emu_stats *st)
{
    ckpt_u64(o, st->count);
    for (size_t i = 0; i < st->count; i++) {
        const emu_site *s = &st->sites[i];
        ckpt_str(o, s->name);
        ckpt_str(o, s->kind);
        ckpt_u32(o, (uint32_t)s->role);
        ckpt_str(o, s->format);
        put_site_stats(o, &s->total);
        put_site_stats(o, &s->step);
        ckpt_u32(o, s->active);
    }
}

int ckpt_get_stats(ckpt_in *in, emu_stats *st)
{
    /* A site takes at least 468 bytes (three empty strings, a role, two
     * sets of 22 scalars and 6 empty histograms, a flag): a count that
     * claims more sites than fit is refused before it allocates. */
    size_t n = ckpt_get_count(in, 468, "op sites");
    emu_stats_free(st);
    emu_stats_init(st);
    if (n) {
        st->sites = calloc(n, sizeof *st->sites);
        if (!st->sites) {
            ckpt_bad(in, "out of memory for %zu op sites", n);
            return -1;
        }
        st->cap = n;
    }
    for (size_t i = 0; i < n && !in->failed; i++) {
        emu_site *s = &st->sites[i];
        ckpt_get_str(in, s->name, sizeof s->name);
        ckpt_get_str(in, s->kind, sizeof s->kind);
        s->role = (emu_role)get_enum(in, EMU_ROLE_COUNT, "role");
        ckpt_get_str(in, s->format, sizeof s->format);
        get_site_stats(in, &s->total);
        get_site_stats(in, &s->step);
        s->active = get_bool(in);
        st->count = i + 1;
    }
    return ckpt_done(in);
}

/* ---- the file ------------------------------------------------------------------------ */

unsigned char *ckpt_slurp(const char *path, size_t limit, size_t *size,
                          emu_error *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        emu_fail(err, EMU_EIO, path, "", "cannot open: %s", strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            emu_fail(err, EMU_ENOMEM, path, "", "out of memory");
            break;
        }
        if (n == cap) {
            if (cap >= limit) {
                emu_fail(err, EMU_EDATA, path, "", "larger than %zu bytes: not a "
                         "checkpoint of this libemu", limit);
                free(buf);
                buf = NULL;
                break;
            }
            unsigned char *p = realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                buf = NULL;
                continue;
            }
            buf = p;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0) {
            if (ferror(fp)) {
                emu_fail(err, EMU_EIO, path, "", "cannot read: %s", strerror(errno));
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    fclose(fp);
    *size = n;
    return buf;
}
