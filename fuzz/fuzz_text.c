/*
 * fuzz_text.c — libFuzzer harness for the text reader of the language
 * models (emu_text_fortunes_max, libemu/data_text.c) on arbitrary bytes.
 *
 * Input: a control byte, a limit byte, then the text.  Control bit 0: the
 * text is one file (0) or a folder of up to four files (1), the text cut
 * into them at NUL bytes (a NUL is outside the vocabulary, so no file
 * loses a byte it could have kept); bits 1..3 pick a window length T =
 * 1 + (bits) for the batches.  Limit byte L: the limit is 16 L bytes, or
 * the default (EMU_TEXT_MAX_BYTES) when L = 0.
 *
 * Besides memory errors and undefined behaviour (ASan/UBSan) it checks
 * what the reader promises.  A refusal: a known code (EMU_EIO, EMU_EDATA,
 * EMU_ENOMEM), a named file or folder, both sets left empty.  An accepted
 * text: at most the limit's bytes were read; every token is in the
 * vocabulary; each split is its records, each ending in the line "%",
 * and as many such lines as records; every 10th record went to
 * validation (val = all / 10, at least 10 in all); a second read gives
 * the same tokens.  Training and evaluation windows of T (when the sets
 * hold one) are in range and their targets are the next tokens.  Built
 * by fuzz/CMakeLists.txt; run by fuzz/run.sh, seeded with fortunes files
 * and small folders.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why, const emu_error *err)
{
    fprintf(stderr, "fuzz_text: %s (%s: %s: %s)\n", why, err ? err->where : "",
            err ? err->key : "", err ? err->message : "");
    abort();
}

static char dir[64];

static void write_file(const char *name, const uint8_t *p, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp)
        fail("cannot write a temporary file", NULL);
    if (n && fwrite(p, 1, n, fp) != n)
        fail("cannot write a temporary file", NULL);
    fclose(fp);
}

/* The split's text: its records, each ending with a "%" line, as many
 * such lines as records. */
static void check_split(const emu_textset *t)
{
    size_t percent_lines = 0, line_start = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->tokens[i] >= EMU_TEXT_VOCAB)
            fail("a token outside the vocabulary", NULL);
        if (emu_text_char(t->tokens[i]) == '\n') {
            if (i == line_start + 1 && emu_text_char(t->tokens[line_start]) == '%')
                percent_lines++;
            line_start = i + 1;
        }
    }
    if (t->n && (t->n < 2 || emu_text_char(t->tokens[t->n - 1]) != '\n' ||
                 emu_text_char(t->tokens[t->n - 2]) != '%'))
        fail("a split that does not end with a \"%\" line", NULL);
    if (line_start != t->n)
        fail("a split whose last line has no newline", NULL);
    if (percent_lines != t->records)
        fail("the \"%\" lines do not count the records", NULL);
}

static void check_windows(const emu_textset *t, int T)
{
    emu_error err;
    if (emu_text_check_context(t, T, &err))
        return;
    int32_t x[2 * 8], y[2 * 8];
    emu_text_batch(t, 2, T, 7, 3, x, y);
    for (int i = 0; i < 2 * T; i++) {
        if (x[i] < 0 || x[i] >= EMU_TEXT_VOCAB || y[i] < 0 || y[i] >= EMU_TEXT_VOCAB)
            fail("a training window outside the vocabulary", NULL);
        if (i % T + 1 < T && y[i] != x[i + 1])
            fail("a training target is not the next token", NULL);
    }
    const size_t count = emu_text_eval_count(t, T, 2);
    if (count > 2 || count * (size_t)T + 1 > t->n)
        fail("more evaluation windows than the set holds", NULL);
    if (count) {
        emu_text_eval_batch(t, T, count, 0, (int)count, x, y);
        for (size_t i = 0; i < count * (size_t)T; i++)
            if (x[i] < 0 || x[i] >= EMU_TEXT_VOCAB || (i % (size_t)T + 1 < (size_t)T &&
                                                       y[i] != x[i + 1]))
                fail("a bad evaluation window", NULL);
    }
}

static const char *const names[4] = { "f0", "f1", "f2", "f3" };

/* The temporary folder's files, then the folder (at exit). */
static void clean(void)
{
    char path[128];
    for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_text-%ld", (long)getpid());
        if (mkdir(dir, 0700) && errno != EEXIST)
            fail("cannot make the temporary folder", NULL);
        atexit(clean);
    }
    const bool folder = data[0] & 1;
    const int T = 1 + ((data[0] >> 1) & 7);
    const size_t limit = (size_t)data[1] * 16;
    const uint8_t *text = data + 2;
    size_t n = size - 2;

    char path[128];
    size_t bytes = 0; /* what the files hold */
    for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        unlink(path);
    }
    if (folder) {
        size_t start = 0;
        for (int k = 0; k < 4; k++) {
            size_t end = start;
            while (end < n && (text[end] != 0 || k == 3))
                end++;
            write_file(names[k], text + start, end - start);
            bytes += end - start;
            if (end >= n)
                break;
            start = end + 1;
        }
        snprintf(path, sizeof path, "%s", dir);
    } else {
        write_file(names[0], text, n);
        bytes = n;
        snprintf(path, sizeof path, "%s/%s", dir, names[0]);
    }

    emu_textset tr, va;
    emu_error err;
    memset(&err, 0, sizeof err);
    if (emu_text_fortunes_max(&tr, &va, path, limit, &err)) {
        if (err.code != EMU_EIO && err.code != EMU_EDATA && err.code != EMU_ENOMEM)
            fail("a refusal with an unexpected code", &err);
        if (!err.where[0] || !strstr(err.where, dir))
            fail("a refusal that names no file or folder", &err);
        if (tr.tokens || va.tokens || tr.n || va.n)
            fail("a refusal left a set behind", &err);
        /* a folder's sizes are checked before anything is read, and a
         * file's first chunk (64 KiB) before its bytes */
        if ((limit ? limit : EMU_TEXT_MAX_BYTES) < bytes &&
            !strstr(err.message, "limit of"))
            fail("text over the limit refused for another reason", &err);
        return 0;
    }
    if (bytes > (limit ? limit : EMU_TEXT_MAX_BYTES))
        fail("more text than the limit was accepted", NULL);
    const size_t all = tr.records + va.records;
    if (all < 10 || va.records != all / 10)
        fail("the records are not dealt one in ten to validation", NULL);
    check_split(&tr);
    check_split(&va);
    if (!tr.source[0])
        fail("no source recorded", NULL);
    emu_textset tr2, va2;
    if (emu_text_fortunes_max(&tr2, &va2, path, limit, &err))
        fail("a second read refused what the first accepted", &err);
    if (tr2.n != tr.n || va2.n != va.n || memcmp(tr2.tokens, tr.tokens, tr.n) ||
        memcmp(va2.tokens, va.tokens, va.n))
        fail("a second read gave other tokens", NULL);
    check_windows(&tr, T);
    check_windows(&va, T);
    emu_textset_free(&tr);
    emu_textset_free(&va);
    emu_textset_free(&tr2);
    emu_textset_free(&va2);
    return 0;
}
