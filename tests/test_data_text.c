/*
 * test_data_text.c — text data for language models (emu/data.h, text
 * section): the vocabulary, the embedded story corpus (deterministic for
 * a seed, and holding the structure it documents: closed brackets and
 * quotes, counted lines, repeated names, copied codes), fortunes files
 * (the split by record, disjoint and complete; every error naming the
 * file, with real files in a temporary folder), and the training and
 * evaluation windows (in bounds, deterministic, targets one ahead).
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* The bytes of a set. */
static char *decode(const emu_textset *t)
{
    char *s = malloc(t->n + 1);
    ck_assert_ptr_nonnull(s);
    for (size_t i = 0; i < t->n; i++) {
        int c = emu_text_char(t->tokens[i]);
        ck_assert_msg(c >= 0, "%s: token %zu is id %d", t->name, i,
                      t->tokens[i]);
        s[i] = (char)c;
    }
    s[t->n] = '\0';
    return s;
}

START_TEST(vocabulary)
{
    int ids = 0;
    for (int b = 0; b < 256; b++) {
        int id = emu_text_id(b);
        bool in = b == '\t' || b == '\n' || (b >= 0x20 && b <= 0x7e);
        ck_assert_msg((id >= 0) == in, "byte 0x%02x: id %d", b, id);
        if (id >= 0) {
            ck_assert_int_lt(id, EMU_TEXT_VOCAB);
            ck_assert_int_eq(emu_text_char(id), b);
            ids++;
        }
    }
    ck_assert_int_eq(ids, EMU_TEXT_VOCAB);
    ck_assert_int_eq(emu_text_id('\t'), 0);
    ck_assert_int_eq(emu_text_id('\n'), 1);
    ck_assert_int_eq(emu_text_id(' '), 2);
    ck_assert_int_eq(emu_text_id('~'), 96);
    ck_assert_int_eq(emu_text_char(-1), -1);
    ck_assert_int_eq(emu_text_char(EMU_TEXT_VOCAB), -1);
}
END_TEST

START_TEST(embedded_deterministic)
{
    emu_textset a, av, b, bv, c, cv;
    emu_error err;
    ck_assert_int_eq(emu_text_embedded(&a, &av, 7, 20000, 3000, &err), 0);
    ck_assert_int_eq(emu_text_embedded(&b, &bv, 7, 20000, 3000, &err), 0);
    ck_assert_int_eq(emu_text_embedded(&c, &cv, 8, 20000, 3000, &err), 0);
    ck_assert_uint_eq(a.n, 20000);
    ck_assert_uint_eq(av.n, 3000);
    ck_assert(!memcmp(a.tokens, b.tokens, a.n));
    ck_assert(!memcmp(av.tokens, bv.tokens, av.n));
    ck_assert(memcmp(a.tokens, c.tokens, a.n));
    /* The splits are different draws, not a prefix of one another. */
    ck_assert(memcmp(a.tokens, av.tokens, av.n));
    /* A longer set begins with the shorter one: story k is a function of
     * (seed, split, k) alone. */
    emu_textset l, lv;
    ck_assert_int_eq(emu_text_embedded(&l, &lv, 7, 50000, 10, &err), 0);
    ck_assert(!memcmp(a.tokens, l.tokens, a.n));
    ck_assert_str_eq(a.name, "text/train");
    ck_assert_str_eq(av.name, "text/val");
    ck_assert_ptr_nonnull(strstr(a.source, "seed 7"));
    emu_textset *all[] = { &a, &av, &b, &bv, &c, &cv, &l, &lv };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        emu_textset_free(all[i]);
    ck_assert_int_eq(emu_text_embedded(&a, &av, 7, 0, 10, &err), -1);
    ck_assert_int_eq(err.code, EMU_EINVAL);
}
END_TEST

/* The documented structure, story by story. */
START_TEST(embedded_structure)
{
    emu_textset t, v;
    emu_error err;
    ck_assert_int_eq(emu_text_embedded(&t, &v, 3, 200000, 100, &err), 0);
    char *s = decode(&t);
    printf("embedded corpus: %zu stories in %zu characters, generator "
           "information %.4f bits/char\n", t.records, t.n, t.entropy_bits);
    ck_assert(t.entropy_bits > 0.5 && t.entropy_bits < 2.0);
    size_t stories = 0, codes = 0;
    char *p = s;
    for (;;) {
        char *end = strstr(p, "\n\n");
        if (!end)
            break; /* the cut last story */
        *end = '\0';
        stories++;
        size_t number;
        char a[16], b[16];
        ck_assert_msg(sscanf(p, "story %zu: %15s and %15[^.].", &number, a, b) == 3,
                      "story %zu begins '%.40s'", stories, p);
        ck_assert_uint_eq(number, stories);
        char last[64];
        snprintf(last, sizeof last, "the end of %s and %s.", a, b);
        const char *final = strrchr(p, '\n');
        ck_assert_ptr_nonnull(final);
        ck_assert_str_eq(final + 1, last);
        /* Lines numbered from 1, brackets and quotes closed on each. */
        int line = 0;
        char hidden[8] = "";
        for (char *q = strchr(p, '\n') + 1; q < final; q = strchr(q, '\n') + 1) {
            int k, used;
            ck_assert_int_eq(sscanf(q, "%d. %n", &k, &used), 1);
            ck_assert_int_eq(k, ++line);
            int depth = 0, quotes = 0;
            for (char *c = q; *c != '\n'; c++) {
                depth += *c == '(' ? 1 : *c == ')' ? -1 : 0;
                ck_assert_int_ge(depth, 0);
                quotes += *c == '"';
            }
            ck_assert_int_eq(depth, 0);
            ck_assert_int_eq(quotes % 2, 0);
            const char *see = strstr(q, "(see line ");
            if (see && see < strchr(q, '\n'))
                ck_assert_int_lt(atoi(see + 10), k);
            const char *h = strstr(q, " hides the code ");
            const char *f = strstr(q, " finds the code ");
            if (h && h < strchr(q, '\n')) {
                ck_assert_str_eq(hidden, "");
                memcpy(hidden, h + 16, 5);
                hidden[5] = '\0';
            } else if (f && f < strchr(q, '\n')) {
                ck_assert_str_ne(hidden, "");
                ck_assert(!strncmp(f + 16, hidden, 5));
                hidden[0] = '\0';
                codes++;
            }
        }
        ck_assert_msg(!hidden[0], "story %zu leaves its code hidden", stories);
        ck_assert_int_ge(line, 4);
        p = end + 2;
    }
    ck_assert_uint_ge(stories, 100);
    ck_assert_uint_ge(codes, stories / 2);
    free(s);
    emu_textset_free(&t);
    emu_textset_free(&v);
}
END_TEST

/* ---- files in a temporary folder ---------------------------------------- */

static char tmpdir[64];

static void tmp_setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/emu-text-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void tmp_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *put_file(const char *name, const char *text, size_t n)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_uint_eq(fwrite(text, 1, n, fp), n);
    fclose(fp);
    return path;
}

static void expect_fail(const char *path, emu_errcode code, const char *where,
                        const char *words)
{
    emu_textset t, v;
    emu_error err;
    emu_error_clear(&err);
    ck_assert_int_eq(emu_text_fortunes(&t, &v, path, &err), -1);
    ck_assert_msg(err.code == code, "%s: %s (%s)", path,
                  emu_error_code_name(err.code), err.message);
    ck_assert_msg(!strcmp(err.where, where), "where '%s', expected '%s'",
                  err.where, where);
    ck_assert_msg(strstr(err.message, words), "'%s' lacks '%s'", err.message,
                  words);
    ck_assert_ptr_null(t.tokens);
    ck_assert_ptr_null(v.tokens);
}

START_TEST(fortunes_split)
{
    /* 25 records over two files: a.txt ends with its "%" line, b.txt
     * without one and without a final newline; an empty record (two "%"
     * lines) is skipped; a "100%" line is text, not a separator. */
    char text[2048];
    size_t n = 0;
    for (int i = 0; i < 12; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "rec %02d\n\tline 100%%\n%%\n", i);
    n += (size_t)snprintf(text + n, sizeof text - n, "%%\n");
    put_file("a.txt", text, n);
    n = 0;
    for (int i = 12; i < 25; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%srec %02d\n\tline 100%%",
                              i > 12 ? "\n%\n" : "", i);
    put_file("b.txt", text, n);
    put_file("b.txt.dat", "\x01\x02", 2);   /* skipped: an index  */
    put_file(".hidden", "\x01\x02", 2);     /* skipped            */
    mkdir(strcat(strcpy(text, tmpdir), "/sub"), 0777); /* not a file */

    emu_textset t, v;
    emu_error err;
    ck_assert_msg(emu_text_fortunes(&t, &v, tmpdir, &err) == 0, "%s",
                  err.message);
    ck_assert_uint_eq(t.records, 23);
    ck_assert_uint_eq(v.records, 2);
    char *ts = decode(&t), *vs = decode(&v);
    ck_assert_str_eq(vs, "rec 09\n\tline 100%\n%\nrec 19\n\tline 100%\n%\n");
    size_t want = 0;
    for (int i = 0; i < 25; i++) {
        char rec[32];
        snprintf(rec, sizeof rec, "rec %02d\n\tline 100%%\n%%\n", i);
        bool in_val = i % 10 == 9;
        ck_assert_msg((strstr(ts, rec) != NULL) == !in_val, "record %d", i);
        ck_assert_msg((strstr(vs, rec) != NULL) == in_val, "record %d", i);
        want += in_val ? 0 : strlen(rec);
    }
    ck_assert_uint_eq(t.n, want);
    ck_assert_ptr_nonnull(strstr(t.source, "a.txt ("));
    ck_assert_ptr_nonnull(strstr(t.source, "b.txt ("));
    ck_assert_ptr_null(strstr(t.source, ".dat"));
    free(ts);
    free(vs);
    emu_textset_free(&t);
    emu_textset_free(&v);

    /* One file by its path. */
    char path[256];
    snprintf(path, sizeof path, "%s/a.txt", tmpdir);
    ck_assert_int_eq(emu_text_fortunes(&t, &v, path, &err), 0);
    ck_assert_uint_eq(t.records + v.records, 12);
    ck_assert_uint_eq(v.records, 1);
    emu_textset_free(&t);
    emu_textset_free(&v);
}
END_TEST

START_TEST(fortunes_errors)
{
    char missing[256];
    snprintf(missing, sizeof missing, "%s/none", tmpdir);
    expect_fail(missing, EMU_EIO, missing, "No such file");
    const char *empty = put_file("empty", "", 0);
    char e[256];
    snprintf(e, sizeof e, "%s", empty);
    expect_fail(e, EMU_EDATA, e, "empty");
    /* The offset and value of the first byte outside the vocabulary. */
    char bad[256], b[256];
    snprintf(bad, sizeof bad, "%s", put_file("bad", "ab\n%\ncaf\xc3\xa9\n", 10));
    expect_fail(bad, EMU_EDATA, bad, "byte 8 is 0xc3");
    const char *cr = put_file("cr", "a\r\n", 3);
    snprintf(b, sizeof b, "%s", cr);
    expect_fail(b, EMU_EDATA, b, "byte 1 is 0x0d");
    /* A folder is refused for its first bad file, by name. */
    const char *few = put_file("few", "1\n%\n2\n%\n3\n", 10);
    snprintf(b, sizeof b, "%s", few);
    expect_fail(b, EMU_EDATA, b, "3 records");
    /* A folder: refused at its first bad file in name order. */
    expect_fail(tmpdir, EMU_EDATA, bad, "byte 8 is 0xc3");
}
END_TEST

START_TEST(folder_errors)
{
    expect_fail(tmpdir, EMU_EDATA, tmpdir, "no text files");
    put_file("x.dat", "1", 1);
    expect_fail(tmpdir, EMU_EDATA, tmpdir, "no text files");
    char b[256];
    snprintf(b, sizeof b, "%s", put_file("bad", "ok\n\x7f", 4));
    expect_fail(tmpdir, EMU_EDATA, b, "byte 3 is 0x7f");
}
END_TEST

/* The size limit: the folder's files' sizes against it before anything
 * is read (naming the folder), a file's bytes while it is read (naming
 * the file); exactly the limit is accepted, 0 is the default. */
START_TEST(size_limit)
{
    char text[512];
    size_t n = 0;
    for (int i = 0; i < 12; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "rec %02d\n%%\n", i);
    char a[256];
    snprintf(a, sizeof a, "%s", put_file("a", text, n));
    put_file("b", text, n);
    emu_textset t, v;
    emu_error err;
    ck_assert_int_eq(emu_text_fortunes_max(&t, &v, tmpdir, 2 * n, &err), 0);
    emu_textset_free(&t);
    emu_textset_free(&v);
    ck_assert_int_eq(emu_text_fortunes_max(&t, &v, tmpdir, 0, &err), 0);
    emu_textset_free(&t);
    emu_textset_free(&v);
    ck_assert_int_eq(emu_text_fortunes_max(&t, &v, tmpdir, 2 * n - 1, &err), -1);
    ck_assert_int_eq(err.code, EMU_EDATA);
    ck_assert_str_eq(err.where, tmpdir);
    char want[160];
    snprintf(want, sizeof want, "the folder's text files hold %zu bytes of text, "
             "more than the limit of %zu bytes", 2 * n, 2 * n - 1);
    ck_assert_msg(strstr(err.message, want), "%s", err.message);
    ck_assert_ptr_null(t.tokens);
    ck_assert_ptr_null(v.tokens);
    ck_assert_int_eq(emu_text_fortunes_max(&t, &v, a, n, &err), 0);
    emu_textset_free(&t);
    emu_textset_free(&v);
    ck_assert_int_eq(emu_text_fortunes_max(&t, &v, a, n - 1, &err), -1);
    ck_assert_str_eq(err.where, a);
    snprintf(want, sizeof want, "the file holds more text than the limit of %zu "
             "bytes", n - 1);
    ck_assert_msg(strstr(err.message, want), "%s", err.message);
    ck_assert_ptr_null(t.tokens);
}
END_TEST

/* The default set, when Debian's package is installed. */
START_TEST(fortunes_default)
{
    struct stat st;
    if (stat(EMU_FORTUNES_DIR "/cookie", &st)) {
        printf("fortunes_default: skipped, %s/cookie is missing (package "
               "fortunes)\n", EMU_FORTUNES_DIR);
        return;
    }
    emu_textset t, v;
    emu_error err;
    ck_assert_msg(emu_text_fortunes(&t, &v, NULL, &err) == 0, "%s: %s",
                  err.where, err.message);
    printf("fortunes: train %zu characters (%zu fortunes), val %zu (%zu)\n",
           t.n, t.records, v.n, v.records);
    ck_assert_uint_eq(v.records, (t.records + v.records) / 10);
    ck_assert_ptr_nonnull(strstr(t.source, "cookie (245093 bytes)"));
    ck_assert_ptr_nonnull(strstr(t.source, "zippy ("));
    ck_assert_uint_gt(t.n, 400000);
    ck_assert_uint_gt(v.n, 40000);
    /* Every record of each split ends with its "%" line. */
    ck_assert_int_eq(emu_text_char(t.tokens[t.n - 2]), '%');
    ck_assert_int_eq(emu_text_char(v.tokens[v.n - 1]), '\n');
    emu_textset_free(&t);
    emu_textset_free(&v);
}
END_TEST

/* ---- windows -------------------------------------------------------------- */

/* n tokens in which every window of 8 or more is (almost surely) unique. */
static emu_textset counting(size_t n)
{
    emu_textset t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "counting");
    t.n = n;
    t.tokens = malloc(n);
    for (size_t i = 0; i < n; i++)
        t.tokens[i] = (uint8_t)(emu_random64(99, 0, i) % EMU_TEXT_VOCAB);
    return t;
}

START_TEST(training_windows)
{
    emu_textset t = counting(1000);
    enum { B = 16, T = 24 };
    int32_t x[B * T], y[B * T], x2[B * T], y2[B * T];
    size_t seen_lo = 1000, seen_hi = 0;
    for (uint64_t step = 0; step < 200; step++) {
        emu_text_batch(&t, B, T, 5, step, x, y);
        emu_text_batch(&t, B, T, 5, step, x2, y2);
        ck_assert(!memcmp(x, x2, sizeof x) && !memcmp(y, y2, sizeof y));
        for (int b = 0; b < B; b++) {
            const int32_t *xb = x + b * T, *yb = y + b * T;
            /* The window's start: the one place of the data it matches. */
            size_t p = SIZE_MAX;
            for (size_t q = 0; q + T < t.n; q++) {
                bool match = true;
                for (int j = 0; j < T && match; j++)
                    match = xb[j] == t.tokens[q + j] && yb[j] == t.tokens[q + j + 1];
                if (match) {
                    ck_assert_msg(p == SIZE_MAX, "two matches");
                    p = q;
                }
            }
            if (p != SIZE_MAX) {
                seen_lo = p < seen_lo ? p : seen_lo;
                seen_hi = p > seen_hi ? p : seen_hi;
            }
            ck_assert_msg(p != SIZE_MAX, "step %llu window %d is not a window "
                          "of the data", (unsigned long long)step, b);
        }
    }
    /* 3200 draws over 976 starts reach both ends. */
    ck_assert_uint_lt(seen_lo, 10);
    ck_assert_uint_gt(seen_hi, 1000 - T - 1 - 10);
    /* Another step or seed, other windows. */
    emu_text_batch(&t, B, T, 5, 0, x, y);
    emu_text_batch(&t, B, T, 5, 1, x2, y2);
    ck_assert(memcmp(x, x2, sizeof x));
    emu_text_batch(&t, B, T, 6, 0, x2, y2);
    ck_assert(memcmp(x, x2, sizeof x));
    emu_textset_free(&t);

    /* A set of exactly T + 1 tokens has one window. */
    t = counting(T + 1);
    emu_error err;
    ck_assert_int_eq(emu_text_check_context(&t, T, &err), 0);
    emu_text_batch(&t, B, T, 5, 3, x, y);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++)
            ck_assert(x[b * T + j] == t.tokens[j] && y[b * T + j] == t.tokens[j + 1]);
    ck_assert_int_eq(emu_text_check_context(&t, T + 1, &err), -1);
    ck_assert_int_eq(err.code, EMU_ESPEC);
    ck_assert_ptr_nonnull(strstr(err.message, "longer than the data"));
    ck_assert_int_eq(emu_text_check_context(&t, 0, &err), -1);
    ck_assert_int_eq(emu_text_check_context(&t, -3, &err), -1);
    emu_textset_free(&t);
}
END_TEST

START_TEST(eval_windows)
{
    emu_textset t = counting(1001);
    enum { T = 10 };
    ck_assert_uint_eq(emu_text_eval_count(&t, T, 5), 5);
    ck_assert_uint_eq(emu_text_eval_count(&t, T, 1000), 100);
    ck_assert_uint_eq(emu_text_eval_count(&t, 1001, 4), 0);
    for (size_t count = 1; count <= 100; count += 33) {
        int32_t x[128 * T], y[128 * T];
        emu_text_eval_batch(&t, T, count, 0, 128, x, y);
        size_t prev_end = 0;
        for (size_t k = 0; k < 128; k++) {
            size_t kk = k < count ? k : 0;
            /* Window k's start from the formula, and its bytes. */
            size_t start = count > 1 ? kk * ((1001 - 1 - T) / (count - 1)) : 0;
            for (int j = 0; j < T; j++) {
                ck_assert_int_eq(x[k * T + j], t.tokens[start + j]);
                ck_assert_int_eq(y[k * T + j], t.tokens[start + j + 1]);
            }
            if (k < count) {
                ck_assert(k == 0 || start >= prev_end); /* no overlap */
                ck_assert_uint_le(start + T, 1000);     /* targets in range */
                prev_end = start + T;
            }
        }
        if (count > 1) /* spread to the end, not only the beginning */
            ck_assert_uint_gt(prev_end, 1000 - (1000 / count) - T);
    }
    emu_textset_free(&t);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("data_text");
    TCase *tc = tcase_create("text");
    tcase_add_test(tc, vocabulary);
    tcase_add_test(tc, embedded_deterministic);
    tcase_add_test(tc, embedded_structure);
    tcase_add_test(tc, fortunes_default);
    tcase_add_test(tc, training_windows);
    tcase_add_test(tc, eval_windows);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("files");
    tcase_add_checked_fixture(tf, tmp_setup, tmp_teardown);
    tcase_add_test(tf, fortunes_split);
    tcase_add_test(tf, fortunes_errors);
    tcase_add_test(tf, folder_errors);
    tcase_add_test(tf, size_limit);
    suite_add_tcase(s, tf);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
