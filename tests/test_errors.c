/*
 * test_errors.c — the error convention of emu/error.h: for each code, a
 * real failure of a public function sets that code, says where, names the
 * key, and puts the offending value in the message.  Ops report through
 * ctx->err the same way.  The code names are checked as a table: every
 * code has its own name and the table covers the enum.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* The failure carries `code`, `key`, and a message holding `needle`. */
#define EXPECT_ERR(rc, err, want_code, want_key, needle)                    \
    do {                                                                    \
        ck_assert_int_eq((rc), -1);                                         \
        ck_assert_msg((err).code == (want_code), "code %s, expected %s: "   \
                      "%s: %s", emu_error_code_name((err).code),            \
                      emu_error_code_name(want_code), (err).where,          \
                      (err).message);                                       \
        ck_assert_str_eq((err).key, (want_key));                            \
        ck_assert_msg(strstr((err).message, (needle)), "message '%s' lacks " \
                      "'%s'", (err).message, (needle));                     \
    } while (0)

static emu_error fresh(void)
{
    emu_error e;
    memset(&e, 0x5a, sizeof e); /* garbage: a failure must overwrite it */
    e.where[0] = e.key[0] = e.message[0] = '\0';
    return e;
}

START_TEST(code_names)
{
    ck_assert_int_eq(EMU_OK, 0);
    for (int i = 0; i < EMU_ERR_COUNT; i++) {
        const char *n = emu_error_code_name((emu_errcode)i);
        ck_assert_msg(!strncmp(n, "EMU_", 4) && strcmp(n, "EMU_E?"),
                      "code %d has no name", i);
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(n, emu_error_code_name((emu_errcode)j));
    }
    ck_assert_str_eq(emu_error_code_name(EMU_ERR_COUNT), "EMU_E?");
    ck_assert_str_eq(emu_error_code_name((emu_errcode)-1), "EMU_E?");
    emu_error e = fresh();
    e.code = EMU_EIO;
    emu_error_clear(&e);
    ck_assert_int_eq(e.code, EMU_OK);
    ck_assert_str_eq(e.message, "");
    emu_error_clear(NULL); /* allowed, like every err argument */
}
END_TEST

/* A bad spec names its key and value; the same failure with err NULL
 * fails the same way, silently. */
START_TEST(spec)
{
    emu_format f;
    emu_error e = fresh();
    EXPECT_ERR(emu_format_parse_inline(&f, "e4m3,bias=99999", &e), e,
               EMU_ESPEC, "bias", "99999");
    ck_assert_int_eq(emu_format_parse_inline(&f, "e4m3,bias=99999", NULL), -1);

    e = fresh();
    EXPECT_ERR(emu_format_parse_inline(&f, "e4m3,colour=red", &e), e,
               EMU_ESPEC, "colour", "unknown");

    emu_accum a;
    e = fresh();
    EXPECT_ERR(emu_accum_parse(&a, "fused,k=0", &e), e, EMU_ESPEC, "k", "'0'");

    emu_policy p;
    ck_assert_int_eq(emu_policy_preset(&p, "fp32", &e), 0);
    e = fresh();
    EXPECT_ERR(emu_policy_set(&p, "scaling=sometimes", &e), e, EMU_ESPEC,
               "scaling", "sometimes");
    e = fresh();
    EXPECT_ERR(emu_policy_preset(&p, "fp7-magic", &e), e, EMU_ESPEC, "preset",
               "fp7-magic");

    emu_scaled_format sf;
    e = fresh();
    EXPECT_ERR(emu_scaled_format_parse(&sf, "mxfp8,block=0", &e), e,
               EMU_ESPEC, "block", "'0'");
}
END_TEST

/* A bad argument: an op's shape mismatch in ctx->err (where = the site),
 * and the library's own argument checks. */
START_TEST(invalid)
{
    const emu_format *h = test_format("binary16");
    emu_tensor a, b, y;
    emu_error e = fresh();
    ck_assert_int_eq(emu_tensor_alloc4(&a, "a", EMU_ROLE_OTHER, h, 3, 4, 0, 0, &e), 0);
    ck_assert_int_eq(emu_tensor_alloc4(&b, "b", EMU_ROLE_OTHER, h, 4, 3, 0, 0, &e), 0);
    ck_assert_int_eq(emu_tensor_alloc4(&y, "y", EMU_ROLE_OTHER, h, 3, 4, 0, 0, &e), 0);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ck_assert_int_eq(emu_t_add(&ctx, "fc.add", &y, &a, &b, &test_rne), -1);
    ck_assert_int_eq(ctx.err.code, EMU_EINVAL);
    ck_assert_str_eq(ctx.err.where, "fc.add");
    ck_assert_msg(strstr(ctx.err.message, "(4, 3)") &&
                  strstr(ctx.err.message, "'b'"),
                  "message '%s' does not name b and its shape",
                  ctx.err.message);

    /* An operand wider than its format. */
    const emu_format *e4m3 = test_format("e4m3");
    emu_bits ops[2] = { { 0x1ff }, { 0 } }, res;
    e = fresh();
    EXPECT_ERR(emu_bits_op(EMU_OP_ADD, e4m3, e4m3, ops, NULL, &res, NULL, &e),
               e, EMU_EINVAL, "operands", "0x1ff");

    /* A packing buffer too small. */
    uint8_t buf[2];
    e = fresh();
    EXPECT_ERR(emu_tensor_pack(&a, buf, sizeof buf, &e), e, EMU_EINVAL, "size",
               "2 bytes");
    emu_tensor_free(&a);
    emu_tensor_free(&b);
    emu_tensor_free(&y);
}
END_TEST

/* A format the binary32 carrier cannot hold: refused, never mis-rounded. */
START_TEST(unsupported)
{
    const emu_format *d = test_format("binary64");
    emu_tensor t;
    emu_error e = fresh();
    EXPECT_ERR(emu_tensor_alloc4(&t, "w", EMU_ROLE_WEIGHT, d, 4, 0, 0, 0, &e),
               e, EMU_EUNSUPPORTED, "format", "binary64");
    float x[2] = { 1.0f, 2.0f };
    emu_array_rounding ar;
    memset(&ar, 0, sizeof ar);
    e = fresh();
    EXPECT_ERR(emu_round_array_f32(d, x, x, 2, &ar, NULL, &e), e,
               EMU_EUNSUPPORTED, "format", "binary64");
    emu_bits ops[2] = { { 0 }, { 0 } }, res;
    e = fresh();
    EXPECT_ERR(emu_bits_op(EMU_OP_MUL, d, d, ops, NULL, &res, NULL, &e), e,
               EMU_EUNSUPPORTED, "in", "binary64");
}
END_TEST

/* File and system errors name the path and carry the system's reason. */
START_TEST(io)
{
    emu_stats s;
    emu_stats_init(&s);
    emu_error e = fresh();
    const char *path = "/nonexistent-emu-dir/ops.csv";
    EXPECT_ERR(emu_stats_write_csv(&s, path, &e), e, EMU_EIO, "",
               "No such file");
    ck_assert_msg(strstr(e.where, "/nonexistent-emu-dir"), "where '%s'",
                  e.where);
    e = fresh();
    EXPECT_ERR(emu_format_load_file("/nonexistent-emu-dir/x.fmt", &e), e,
               EMU_EIO, "", "cannot open");

    /* A stream that cannot be written. */
    FILE *ro = fopen("/dev/null", "r");
    ck_assert_ptr_nonnull(ro);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 1);
    ctx.stats = &s;
    const emu_format *h = test_format("binary16");
    emu_tensor a;
    ck_assert_int_eq(emu_tensor_alloc4(&a, "a", EMU_ROLE_OTHER, h, 4, 0, 0, 0, &e), 0);
    ck_assert_int_eq(emu_t_cast(&ctx, "cast", &a, &a, &test_rne), 0);
    e = fresh();
    EXPECT_ERR(emu_stats_write_step_rows(&s, ro, true, &e), e, EMU_EIO, "",
               "cannot write");
    fclose(ro);
    emu_tensor_free(&a);
    emu_stats_free(&s);
}
END_TEST

/* Damaged data: a checkpoint with a wrong header checksum. */
START_TEST(data)
{
    unsigned char img[256];
    memset(img, 0, sizeof img);
    memcpy(img, "EMU-CKPT", 8);
    emu_train_config c;
    emu_policy p;
    emu_error e = fresh();
    EXPECT_ERR(emu_checkpoint_check(img, sizeof img, &c, &p, &e), e, EMU_EDATA,
               "", "offset");
    e = fresh();
    EXPECT_ERR(emu_checkpoint_check("not a checkpoint at all, but long "
                                    "enough to have a header of its own",
                                    64, &c, &p, &e),
               e, EMU_EDATA, "", "magic");
}
END_TEST

/* What conflicts with what exists: a name already registered. */
START_TEST(state)
{
    char dir[] = "/tmp/emu_errors_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/mine.fmt", dir);
    FILE *fp = fopen(path, "w");
    ck_assert_ptr_nonnull(fp);
    fputs("name = e5m2\nexponent = 5\nmantissa = 2\n", fp);
    fclose(fp);
    emu_error e = fresh();
    EXPECT_ERR(emu_format_load_file(path, &e), e, EMU_ESTATE, "name", "e5m2");
    remove(path);
    rmdir(dir);
}
END_TEST

/* range=error refuses data whose block needs a clamped scale. */
START_TEST(range)
{
    emu_scaled_format sf;
    emu_error e = fresh();
    ck_assert_int_eq(emu_scaled_format_parse(&sf, "mxfp8,block=4,range=error", &e), 0);
    emu_scaled_tensor q;
    size_t shape[1] = { 4 };
    ck_assert_int_eq(emu_scaled_alloc(&q, &sf, 1, shape, 0, &e), 0);
    float tiny[4] = { 0x1p-125f, 0x1p-126f, 0.0f, 0.0f };
    e = fresh();
    EXPECT_ERR(emu_scaled_quantize(&q, tiny, NULL, NULL, NULL, &e), e,
               EMU_ERANGE, "range", "block 0");
    emu_scaled_free(&q);
}
END_TEST

/* Out of memory: a tensor of 2^40 elements (4 TiB) cannot be had.  The
 * sanitizers abort on such a request instead of returning NULL. */
#if defined(__SANITIZE_ADDRESS__)
#define EMU_TEST_NO_HUGE_ALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_TEST_NO_HUGE_ALLOC 1
#endif
#endif
START_TEST(nomem)
{
#ifndef EMU_TEST_NO_HUGE_ALLOC
    emu_tensor t;
    emu_error e = fresh();
    EXPECT_ERR(emu_tensor_alloc4(&t, "huge", EMU_ROLE_OTHER,
                                 test_format("binary16"), (size_t)1 << 20,
                                 (size_t)1 << 20, 0, 0, &e),
               e, EMU_ENOMEM, "shape", "out of memory");
#endif
}
END_TEST

/* A stop request: emu_train returns EMU_TRAIN_STOPPED, not -1, and err
 * says where the run stands under EMU_ESTOPPED. */
START_TEST(stopped)
{
    char dir[] = "./test_errors.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    emu_train_config c;
    emu_train_config_default(&c);
    snprintf(c.arch, sizeof c.arch, "mlp:784-4-10");
    snprintf(c.out_dir, sizeof c.out_dir, "%s/run", dir);
    c.train_examples = 32;
    c.test_examples = 16;
    c.batch = 16;
    c.max_steps = 4;
    c.quiet = true;
    emu_policy p;
    emu_error e = fresh();
    ck_assert_int_eq(emu_policy_preset(&p, "fp32", &e), 0);
    emu_train_stop(15);
    e = fresh();
    ck_assert_int_eq(emu_train(&c, &p, NULL, &e), EMU_TRAIN_STOPPED);
    ck_assert_int_eq(e.code, EMU_ESTOPPED);
    ck_assert_msg(strstr(e.message, "signal 15"), "message '%s'", e.message);

    /* The folder now holds a run: a new one there is refused. */
    e = fresh();
    EXPECT_ERR(emu_train(&c, &p, NULL, &e), e, EMU_ESTATE, "", "--resume");
    ck_assert_int_eq(emu_train_resume(c.out_dir, 1, true, NULL, &e), 0);

    static const char *const files[] = {
        "meta.json", "steps.csv", "ops_steps.csv", "layers_steps.csv",
        "eval.csv", "ops.csv", "hist.csv", "ops.json", "summary.txt",
        "checkpoint.bin",
    };
    char path[700];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", c.out_dir, files[i]);
        remove(path);
    }
    rmdir(c.out_dir);
    rmdir(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("codes");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, code_names);
    tcase_add_test(tc, spec);
    tcase_add_test(tc, invalid);
    tcase_add_test(tc, unsupported);
    tcase_add_test(tc, io);
    tcase_add_test(tc, data);
    tcase_add_test(tc, state);
    tcase_add_test(tc, range);
    tcase_add_test(tc, nomem);
    tcase_add_test(tc, stopped);
    suite_add_tcase(s, tc);
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
