/*
 * data_text.c — text for character language models: the 97-character
 * vocabulary, the embedded story corpus, Debian's fortunes, and the
 * training and evaluation windows.
 *
 * Everything random is a Philox word keyed by (seed, stream, index), so a
 * corpus and a run's windows are the same on every machine and a resumed
 * run draws what an uninterrupted one would.  Streams used here:
 *   2^47 + split 2^40 + k     story k of split (1 train, 2 validation)
 *   2^48 + 2^44 + step        the training windows of a step
 * ops use their op counter (far below 2^40), initialisers small numbers,
 * emu_batch_permutation 2^48 + epoch (epochs below 2^44).
 */
#define _POSIX_C_SOURCE 200809L

#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/data.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "emu/rng.h"
#include "internal.h"

int emu_text_id(int byte)
{
    if (byte == '\t')
        return 0;
    if (byte == '\n')
        return 1;
    if (byte >= 0x20 && byte <= 0x7e)
        return byte - 0x20 + 2;
    return -1;
}

int emu_text_char(int id)
{
    if (id == 0)
        return '\t';
    if (id == 1)
        return '\n';
    if (id >= 2 && id < EMU_TEXT_VOCAB)
        return id - 2 + 0x20;
    return -1;
}

void emu_textset_free(emu_textset *t)
{
    free(t->tokens);
    memset(t, 0, sizeof *t);
}

/* ---- a growable byte buffer ---------------------------------------------- */

typedef struct tbuf {
    char *p;
    size_t len, cap;
    bool oom;
} tbuf;

static void tb_put(tbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void tb_str(tbuf *b, const char *s)
{
    tb_put(b, s, strlen(s));
}

/* The text (every byte inside the vocabulary) as token ids. */
static int to_tokens(emu_textset *t, const char *text, size_t n,
                     emu_error *err)
{
    t->tokens = malloc(n ? n : 1);
    if (!t->tokens)
        return emu_fail(err, EMU_ENOMEM, t->name, "", "out of memory for %zu "
                        "tokens", n);
    for (size_t i = 0; i < n; i++)
        t->tokens[i] = (uint8_t)emu_text_id((unsigned char)text[i]);
    t->n = n;
    return 0;
}

/* ---- the embedded corpus ------------------------------------------------------
 *
 * A story (split s, number k from 1) is:
 *
 *   story K: A and B.
 *   1. LINE
 *   ...
 *   L. LINE
 *   the end of A and B.
 *   (a blank line)
 *
 * A, B: two different made-up names of 2 or 3 syllables (consonant from
 * "bdfgklmnprstvz", vowel from "aeiou"), capitalised; L uniform in 4..9.
 * Each LINE is one of the kinds that can come next, uniformly:
 *   plain   SUBJ VERB OBJ.
 *   aside   SUBJ VERB OBJ (ASIDE).     ASIDE: near NP | ADJ and ADJ |
 *                                       see line J (J an earlier line) |
 *                                       NP (ADJ)   — brackets nest
 *   quote   SUBJ says "SUBJ VERB OBJ".
 *   hide    NAME hides the code CODE.  (only while no code is hidden)
 *   find    NAME finds the code CODE.  (only while one is: the same CODE)
 * and a story whose code is still hidden after line L gets one more line,
 * a find.  SUBJ and OBJ are a name (A or B) or an NP, each half the time;
 * NP is "the NOUN" or "the ADJ NOUN"; CODE is 5 random letters a..z.
 * 16 verbs, 32 nouns, 16 adjectives.
 *
 * What a model can learn: the words, the line and story numbers (each one
 * more than the last), which names the story uses (from its first line
 * to its last), closing brackets and quotes, and the code (23.5 bits of
 * noise at the hide line, copied exactly at the find line, up to ~9 lines
 * later).  Every random choice is counted with its information
 * (log2 of the number of equally likely outcomes), and the total divided
 * by the characters is emu_textset.entropy_bits: 0.54 bits per character
 * for seed 1 and 10^6 characters (tests/test_data_text.c prints it), the
 * loss of a model that knew the grammar exactly.  For scale, the in-sample
 * conditional entropy of a character given the k before it, on the same
 * text: 4.74 bits (k = 0), 3.15 (k = 1), 1.99 (k = 2), 1.16 (k = 4) — the
 * last 0.6 bits are names, numbers and codes, which take memory.
 */

typedef struct gen {
    uint64_t seed, stream, index;
    double bits;   /* information of the choices so far */
} gen;

static unsigned pick(gen *g, unsigned k)
{
    uint64_t w = emu_random64(g->seed, g->stream, g->index++);
    g->bits += log2((double)k);
    return (unsigned)(w % k);
}

static const char *const VERBS[16] = {
    "sees", "finds", "helps", "follows", "calls", "meets", "watches", "feeds",
    "paints", "carries", "visits", "teaches", "likes", "greets", "trusts",
    "hears",
};
static const char *const NOUNS[32] = {
    "fox", "owl", "cat", "dog", "river", "mill", "king", "queen", "baker",
    "child", "ship", "tower", "garden", "lamp", "bridge", "wolf", "horse",
    "sailor", "farmer", "map", "key", "door", "storm", "forest", "village",
    "teacher", "crow", "bell", "stone", "boat", "hill", "road",
};
static const char *const ADJS[16] = {
    "red", "old", "tall", "quiet", "small", "bright", "lazy", "brave",
    "green", "cold", "happy", "dark", "little", "strange", "gentle", "wise",
};

static void gen_name(gen *g, char *out)
{
    static const char cons[] = "bdfgklmnprstvz", vow[] = "aeiou";
    int syl = 2 + (int)pick(g, 2), n = 0;
    for (int i = 0; i < syl; i++) {
        out[n++] = cons[pick(g, sizeof cons - 1)];
        out[n++] = vow[pick(g, sizeof vow - 1)];
    }
    out[n] = '\0';
    out[0] = (char)(out[0] - 'a' + 'A');
}

static void gen_np(gen *g, tbuf *b)
{
    tb_str(b, "the ");
    if (pick(g, 2)) {
        tb_str(b, ADJS[pick(g, 16)]);
        tb_str(b, " ");
    }
    tb_str(b, NOUNS[pick(g, 32)]);
}

/* A name of the story or an NP, half the time each. */
static void gen_actor(gen *g, tbuf *b, const char *a, const char *bn)
{
    if (pick(g, 2))
        tb_str(b, pick(g, 2) ? bn : a);
    else
        gen_np(g, b);
}

static void gen_clause(gen *g, tbuf *b, const char *a, const char *bn)
{
    gen_actor(g, b, a, bn);
    tb_str(b, " ");
    tb_str(b, VERBS[pick(g, 16)]);
    tb_str(b, " ");
    gen_actor(g, b, a, bn);
}

static void gen_story(gen *g, tbuf *b, size_t number)
{
    char a[8], bn[8], code[6] = { 0 }, num[48];
    gen_name(g, a);
    do
        gen_name(g, bn); /* a repeat (p < 1/4900) is redrawn, not counted */
    while (!strcmp(a, bn));
    snprintf(num, sizeof num, "story %zu: ", number);
    tb_str(b, num);
    tb_str(b, a);
    tb_str(b, " and ");
    tb_str(b, bn);
    tb_str(b, ".\n");
    int lines = 4 + (int)pick(g, 6);
    bool hidden = false;
    for (int line = 1; line <= lines + (hidden ? 1 : 0); line++) {
        snprintf(num, sizeof num, "%d. ", line);
        tb_str(b, num);
        enum { PLAIN, ASIDE, QUOTE, CODE } kinds[4] = { PLAIN, ASIDE, QUOTE, CODE };
        /* Past the last line only the find remains. */
        int kind = line > lines ? CODE : (int)kinds[pick(g, 4)];
        switch (kind) {
        case PLAIN:
            gen_clause(g, b, a, bn);
            break;
        case ASIDE:
            gen_clause(g, b, a, bn);
            tb_str(b, " (");
            switch (line > 1 ? pick(g, 4) : pick(g, 3)) {
            case 0:
                tb_str(b, "near ");
                gen_np(g, b);
                break;
            case 1:
                tb_str(b, ADJS[pick(g, 16)]);
                tb_str(b, " and ");
                tb_str(b, ADJS[pick(g, 16)]);
                break;
            case 2:
                gen_np(g, b);
                tb_str(b, " (");
                tb_str(b, ADJS[pick(g, 16)]);
                tb_str(b, ")");
                break;
            default:
                snprintf(num, sizeof num, "see line %u",
                         1 + pick(g, (unsigned)line - 1));
                tb_str(b, num);
                break;
            }
            tb_str(b, ")");
            break;
        case QUOTE:
            gen_actor(g, b, a, bn);
            tb_str(b, " says \"");
            gen_clause(g, b, a, bn);
            tb_str(b, "\"");
            break;
        default:
            tb_str(b, pick(g, 2) ? bn : a);
            if (!hidden) {
                for (int i = 0; i < 5; i++)
                    code[i] = (char)('a' + pick(g, 26));
                tb_str(b, " hides the code ");
            } else {
                tb_str(b, " finds the code ");
            }
            tb_str(b, code);
            hidden = !hidden;
            break;
        }
        tb_str(b, ".\n");
    }
    tb_str(b, "the end of ");
    tb_str(b, a);
    tb_str(b, " and ");
    tb_str(b, bn);
    tb_str(b, ".\n\n");
}

static int gen_split(emu_textset *t, const char *name, uint64_t seed,
                     uint64_t split, size_t n, emu_error *err)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    if (n == 0 || n > 100000000)
        return emu_fail(err, EMU_EINVAL, "text data", "", "%zu characters "
                        "(1 to 10^8)", n);
    tbuf b = { 0 };
    double bits = 0.0;
    size_t k = 0;
    while (b.len < n && !b.oom) {
        gen g = { seed, ((uint64_t)1 << 47) + (split << 40) + k, 0, 0.0 };
        gen_story(&g, &b, ++k);
        bits += g.bits;
    }
    if (b.oom) {
        free(b.p);
        return emu_fail(err, EMU_ENOMEM, "text data", "", "out of memory for %zu "
                        "characters", n);
    }
    /* The rate over whole stories; the set is their first n characters. */
    t->entropy_bits = bits / (double)b.len;
    t->records = k;
    int rc = to_tokens(t, b.p, n, err);
    free(b.p);
    snprintf(t->source, sizeof t->source, "embedded story generator, seed %llu",
             (unsigned long long)seed);
    return rc;
}

int emu_text_embedded(emu_textset *train, emu_textset *val, uint64_t seed,
                      size_t n_train, size_t n_val, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    memset(val, 0, sizeof *val);
    if (gen_split(train, "text/train", seed, 1, n_train, err))
        return -1;
    if (gen_split(val, "text/val", seed, 2, n_val, err)) {
        emu_textset_free(train);
        return -1;
    }
    return 0;
}

/* ---- fortunes ------------------------------------------------------------------ */

static const char *const FORTUNE_FILES[] = {
    "ascii-art", "cookie", "debian", "disclaimer", "food", "linuxcookie",
    "magic", "medicine", "paradoxum", "perl", "pratchett", "riddles",
    "sports", "startrek", "tao", "translate-me", "zippy", NULL,
};

/* The limit's error, naming `where` (the folder, or the file); have: the
 * bytes found, 0 when reading stopped at the limit. */
static int over_limit(emu_error *err, const char *where, bool is_dir,
                      size_t have, size_t limit)
{
    const char *what = is_dir ? "the folder's text files hold" : "the file holds";
    if (have)
        return emu_fail(err, EMU_EDATA, where, "", "%s %zu bytes of text, more "
                        "than the limit of %zu bytes (raise it with "
                        "--data-max-bytes, emu_train_config.data_max_bytes)",
                        what, have, limit);
    return emu_fail(err, EMU_EDATA, where, "", "%s more text than the limit of "
                    "%zu bytes (raise it with --data-max-bytes, "
                    "emu_train_config.data_max_bytes)", what, limit);
}

/* Appends the file's bytes to b; every byte must be in the vocabulary.
 * *total counts the files' bytes read so far: more than `limit` is
 * refused, naming `where`. */
static int read_text_file(const char *path, tbuf *b, size_t *size,
                          size_t *total, size_t limit, const char *where,
                          bool is_dir, emu_error *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        int e = errno;
        return emu_fail(err, EMU_EIO, path, "", "cannot open: %s%s", strerror(e),
                        e == ENOENT && !strncmp(path, EMU_FORTUNES_DIR "/",
                                                strlen(EMU_FORTUNES_DIR) + 1)
                            ? " (install Debian's package fortunes)" : "");
    }
    size_t start = b->len;
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, fp)) > 0) {
        if (got > limit - *total) {
            fclose(fp);
            return over_limit(err, where, is_dir, 0, limit);
        }
        *total += got;
        tb_put(b, chunk, got);
    }
    bool bad = ferror(fp) != 0;
    int e = errno;
    fclose(fp);
    if (bad)
        return emu_fail(err, EMU_EIO, path, "", "cannot read: %s", strerror(e));
    if (b->oom)
        return emu_fail(err, EMU_ENOMEM, path, "", "out of memory");
    *size = b->len - start;
    if (*size == 0)
        return emu_fail(err, EMU_EDATA, path, "", "the file is empty");
    for (size_t i = start; i < b->len; i++)
        if (emu_text_id((unsigned char)b->p[i]) < 0)
            return emu_fail(err, EMU_EDATA, path, "", "byte %zu is 0x%02x, outside "
                            "the vocabulary (tab, newline, ' ' .. '~')",
                            i - start, (unsigned char)b->p[i]);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

/* The regular files of dir that are text (see emu/data.h), sorted, and
 * the sum of their sizes (saturating). */
static int list_dir(const char *dir, char ***names, size_t *count,
                    size_t *bytes, emu_error *err)
{
    *bytes = 0;
    DIR *d = opendir(dir);
    if (!d)
        return emu_fail(err, EMU_EIO, dir, "", "cannot open the folder: %s",
                        strerror(errno));
    char **v = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *s = e->d_name;
        if (s[0] == '.' || ends_with(s, ".dat") || ends_with(s, ".u8"))
            continue;
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, s);
        if (stat(path, &st) || !S_ISREG(st.st_mode))
            continue;
        *bytes = (size_t)st.st_size > SIZE_MAX - *bytes ? SIZE_MAX
                                                        : *bytes + (size_t)st.st_size;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **p = realloc(v, cap * sizeof *v);
            if (!p) {
                rc = -1;
                break;
            }
            v = p;
        }
        if (!(v[n] = strdup(s))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        free(v);
        return emu_fail(err, EMU_ENOMEM, dir, "", "out of memory");
    }
    if (n == 0) {
        free(v);
        return emu_fail(err, EMU_EDATA, dir, "", "no text files in the folder");
    }
    qsort(v, n, sizeof *v, by_name);
    *names = v;
    *count = n;
    return 0;
}

/* Splits the text of all files into records and deals them out. */
static int deal_records(const tbuf *all, emu_textset *train, emu_textset *val,
                        const char *where, emu_error *err)
{
    tbuf out[2] = { { 0 }, { 0 } };
    size_t nrec[2] = { 0, 0 }, rec = 0;
    size_t i = 0;
    while (i < all->len) {
        /* One record: lines up to a line holding only "%" (or the end). */
        size_t start = i, end = i;
        while (i < all->len) {
            size_t e = i;
            while (e < all->len && all->p[e] != '\n')
                e++;
            size_t next = e < all->len ? e + 1 : e;
            if (e - i == 1 && all->p[i] == '%') {
                i = next;
                break;
            }
            end = next;
            i = next;
        }
        if (end == start)
            continue; /* an empty record: two "%" lines in a row */
        int s = rec % 10 == 9;
        tb_put(&out[s], all->p + start, end - start);
        if (all->p[end - 1] != '\n')
            tb_str(&out[s], "\n");
        tb_str(&out[s], "%\n");
        nrec[s]++;
        rec++;
    }
    int rc = 0;
    if (out[0].oom || out[1].oom)
        rc = emu_fail(err, EMU_ENOMEM, where, "", "out of memory");
    else if (rec < 10)
        rc = emu_fail(err, EMU_EDATA, where, "", "%zu records (texts separated "
                      "by lines holding only '%%'): at least 10 are needed, "
                      "every 10th one going to the validation set", rec);
    if (!rc) {
        train->records = nrec[0];
        val->records = nrec[1];
        rc = to_tokens(train, out[0].p, out[0].len, err) ||
             to_tokens(val, out[1].p, out[1].len, err) ? -1 : 0;
    }
    free(out[0].p);
    free(out[1].p);
    return rc;
}

/* A file or the text files of a folder (NULL: the default fortunes). */
int emu_text_fortunes(emu_textset *train, emu_textset *val, const char *path,
                      emu_error *err)
{
    return emu_text_fortunes_max(train, val, path, 0, err);
}

int emu_text_fortunes_max(emu_textset *train, emu_textset *val,
                          const char *path, size_t max_bytes, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    const size_t limit = max_bytes ? max_bytes : EMU_TEXT_MAX_BYTES;
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    snprintf(train->name, sizeof train->name, "fortunes/train");
    snprintf(val->name, sizeof val->name, "fortunes/val");
    char **owned = NULL;
    const char *const *names = FORTUNE_FILES;
    size_t count = 0;
    const char *dir = path ? path : EMU_FORTUNES_DIR;
    bool is_dir = true;
    if (path) {
        struct stat st;
        if (stat(path, &st))
            return emu_fail(err, EMU_EIO, path, "", "cannot open: %s",
                            strerror(errno));
        is_dir = S_ISDIR(st.st_mode);
        size_t bytes = 0;
        if (is_dir && list_dir(path, &owned, &count, &bytes, err))
            return -1;
        if (is_dir && bytes > limit) {
            for (size_t i = 0; i < count; i++)
                free(owned[i]);
            free(owned);
            return over_limit(err, path, true, bytes, limit);
        }
        names = (const char *const *)owned;
    } else {
        while (FORTUNE_FILES[count])
            count++;
    }
    if (!is_dir)
        count = 1;
    tbuf all = { 0 }, src = { 0 };
    tb_str(&src, is_dir ? dir : path);
    tb_str(&src, is_dir ? ":" : "");
    int rc = 0;
    size_t total = 0;
    for (size_t i = 0; i < count && !rc; i++) {
        char fpath[4096];
        if (is_dir)
            snprintf(fpath, sizeof fpath, "%s/%s", dir, names[i]);
        else
            snprintf(fpath, sizeof fpath, "%s", path);
        size_t size = 0;
        rc = read_text_file(fpath, &all, &size, &total, limit,
                            is_dir ? dir : path, is_dir, err);
        /* A file's last record ends with it, not in the next file (if
         * the file ended with a "%" line, an empty record, skipped). */
        if (!rc && all.p[all.len - 1] != '\n')
            tb_str(&all, "\n");
        if (!rc)
            tb_str(&all, "%\n");
        char item[320];
        snprintf(item, sizeof item, " %s (%zu bytes)", is_dir ? names[i] : "",
                 size);
        if (!rc)
            tb_str(&src, is_dir ? item : item + 1);
        if (is_dir && i + 1 < count && !rc)
            tb_str(&src, ",");
    }
    if (!rc && (all.oom || src.oom))
        rc = emu_fail(err, EMU_ENOMEM, dir, "", "out of memory");
    if (!rc)
        rc = deal_records(&all, train, val, is_dir ? dir : path, err);
    if (!rc) {
        /* A source too long for the field is cut with "...". */
        tb_put(&src, "", 1);
        if (src.len > sizeof train->source)
            memcpy(src.p + sizeof train->source - 4, "...", 4);
        snprintf(train->source, sizeof train->source, "%s", src.p);
        snprintf(val->source, sizeof val->source, "%s", src.p);
    }
    free(all.p);
    free(src.p);
    for (size_t i = 0; owned && i < count; i++)
        free(owned[i]);
    free(owned);
    if (rc) {
        emu_textset_free(train);
        emu_textset_free(val);
    }
    return rc;
}

/* ---- windows ------------------------------------------------------------------- */

int emu_text_check_context(const emu_textset *t, int T, emu_error *err)
{
    if (T <= 0)
        return emu_fail(err, EMU_ESPEC, t->name, "seq_len", "a context of %d "
                        "tokens: it must be at least 1", T);
    if (t->n < (size_t)T + 1)
        return emu_fail(err, EMU_ESPEC, t->name, "seq_len", "a context of %d "
                        "tokens is longer than the data: the set holds %zu "
                        "tokens, a window needs %d (its targets run one "
                        "further)", T, t->n, T + 1);
    return 0;
}

static void window(const emu_textset *t, size_t p, int T, int32_t *x,
                   int32_t *y)
{
    for (int j = 0; j < T; j++) {
        x[j] = t->tokens[p + (size_t)j];
        y[j] = t->tokens[p + (size_t)j + 1];
    }
}

void emu_text_batch(const emu_textset *t, int batch, int T, uint64_t seed,
                    uint64_t step, int32_t *x, int32_t *y)
{
    const uint64_t stream = ((uint64_t)1 << 48) + ((uint64_t)1 << 44) + step;
    const size_t span = t->n - (size_t)T; /* starts 0 .. n-T-1 */
    for (int b = 0; b < batch; b++) {
        uint64_t w = emu_random64(seed, stream, (uint64_t)b);
        size_t p = (size_t)(w % span);
        window(t, p, T, x + (size_t)b * (size_t)T, y + (size_t)b * (size_t)T);
    }
}

size_t emu_text_eval_count(const emu_textset *t, int T, size_t want)
{
    if (T <= 0 || t->n < (size_t)T + 1)
        return 0;
    size_t most = (t->n - 1) / (size_t)T;
    return want < most ? want : most;
}

void emu_text_eval_batch(const emu_textset *t, int T, size_t count,
                         size_t first, int batch, int32_t *x, int32_t *y)
{
    const size_t stride = count > 1 ? (t->n - 1 - (size_t)T) / (count - 1) : 0;
    for (int b = 0; b < batch; b++) {
        size_t k = first + (size_t)b;
        if (k >= count)
            k = 0;
        window(t, k * stride, T, x + (size_t)b * (size_t)T,
               y + (size_t)b * (size_t)T);
    }
}
