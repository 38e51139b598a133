/*
 * test_tensorfile.c — the safetensors reader and writer (emu/tensorfile.h):
 * what is written reads back bit for bit (with the exact header bytes
 * that other readers see), every dtype decodes exactly, and each kind of
 * damage in a crafted file is refused with the code, the field and the
 * tensor it promises.
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp */

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* A file image: the 8-byte length of `json`, json, then `dlen` data bytes. */
static unsigned char *image(const char *json, const void *data, size_t dlen,
                            size_t *size)
{
    size_t h = strlen(json);
    *size = 8 + h + dlen;
    unsigned char *b = malloc(*size + 1);
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)h >> 8 * i);
    memcpy(b + 8, json, h);
    if (dlen)
        memcpy(b + 8 + h, data, dlen);
    return b;
}

/* Parses json + data; expects failure with `code`, `key`, and `words` in
 * the message (NULL: success expected).  *tf is filled on success. */
static void parse_expect(const char *json, const void *data, size_t dlen,
                         emu_errcode code, const char *key, const char *words,
                         emu_tensorfile *out)
{
    size_t size;
    unsigned char *b = image(json, data, dlen, &size);
    emu_tensorfile tf;
    emu_error err;
    emu_error_clear(&err);
    int rc = emu_tensorfile_parse(&tf, b, size, "crafted.safetensors", 0, &err);
    free(b);
    if (!words) {
        ck_assert_msg(rc == 0, "%s: refused: %s: %s: %s", json, err.where,
                      err.key, err.message);
        if (out)
            *out = tf;
        else
            emu_tensorfile_free(&tf);
        return;
    }
    ck_assert_msg(rc == -1, "%s: accepted", json);
    ck_assert_msg(err.code == code, "%s: code %s, expected %s (%s)", json,
                  emu_error_code_name(err.code), emu_error_code_name(code),
                  err.message);
    ck_assert_str_eq(err.where, "crafted.safetensors");
    ck_assert_msg(!strcmp(err.key, key), "%s: key '%s', expected '%s' (%s)",
                  json, err.key, key, err.message);
    ck_assert_msg(strstr(err.message, words), "%s: message '%s' lacks '%s'",
                  json, err.message, words);
    ck_assert_int_eq(tf.count, 0);
    ck_assert_ptr_null(tf.tensors);
}

static const float two[2] = { 1.0f, -2.0f };

#define ONE "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

START_TEST(round_trip)
{
    char path[] = "/tmp/emu_tf_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    const float w[6] = { 1.0f, -0.0f, 0x1p-149f, -0x1.fffffep127f, 0.1f, 3.0f };
    const float s[1] = { 42.0f };
    const emu_tf_out t[3] = {
        { .name = "fc1.weight", .ndim = 2, .shape = { 2, 3 }, .data = w },
        { .name = "scalar \"q\"\n\xc3\xa9", .ndim = 0, .data = s },
        { .name = "empty", .ndim = 2, .shape = { 3, 0 }, .data = NULL },
    };
    const char *meta[] = { "arch", "mlp:6-2", "step", "7", NULL };
    emu_error err;
    ck_assert_int_eq(emu_tensorfile_write(path, t, 3, meta, &err), 0);

    /* The exact bytes: the header other readers parse, padded with
     * spaces to a multiple of 8, then the data little-endian. */
    FILE *fp = fopen(path, "rb");
    unsigned char buf[512];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    static const char want[] =
        "{\"__metadata__\":{\"arch\":\"mlp:6-2\",\"step\":\"7\"},"
        "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"scalar \\\"q\\\"\\u000a\xc3\xa9\":{\"dtype\":\"F32\",\"shape\":[],"
        "\"data_offsets\":[24,28]},"
        "\"empty\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[28,28]}}";
    size_t hl = (size_t)buf[0] | (size_t)buf[1] << 8;
    ck_assert_int_eq(hl % 8, 0);
    ck_assert_uint_ge(hl, strlen(want));
    ck_assert_int_eq(memcmp(buf + 8, want, strlen(want)), 0);
    for (size_t i = strlen(want); i < hl; i++)
        ck_assert_int_eq(buf[8 + i], ' ');
    ck_assert_uint_eq(n, 8 + hl + 28);
    ck_assert_int_eq(buf[8 + hl + 3], 0x3f); /* 1.0f = 0x3f800000, LE */
    ck_assert_int_eq(buf[8 + hl + 2], 0x80);

    emu_tensorfile tf;
    ck_assert_int_eq(emu_tensorfile_read(&tf, path, 0, &err), 0);
    ck_assert_int_eq(tf.count, 3);
    ck_assert_str_eq(tf.tensors[0].name, "fc1.weight");
    ck_assert_int_eq(tf.tensors[0].dtype, EMU_TF_F32);
    ck_assert_int_eq(tf.tensors[0].ndim, 2);
    ck_assert_uint_eq(tf.tensors[0].shape[1], 3);
    for (int i = 0; i < 6; i++)
        ck_assert(test_same(tf.tensors[0].values[i], w[i]));
    ck_assert_str_eq(tf.tensors[1].name, "scalar \"q\"\n\xc3\xa9");
    ck_assert_int_eq(tf.tensors[1].ndim, 0);
    ck_assert_uint_eq(tf.tensors[1].n, 1);
    ck_assert(tf.tensors[1].values[0] == 42.0);
    ck_assert_uint_eq(tf.tensors[2].n, 0);
    ck_assert_ptr_eq(emu_tensorfile_find(&tf, "empty"), &tf.tensors[2]);
    ck_assert_ptr_null(emu_tensorfile_find(&tf, "nope"));
    ck_assert_str_eq(emu_tensorfile_meta(&tf, "step"), "7");
    ck_assert_ptr_null(emu_tensorfile_meta(&tf, "nope"));
    emu_tensorfile_free(&tf);
    emu_tensorfile_free(&tf); /* twice is harmless */
    unlink(path);
}
END_TEST

START_TEST(dtypes_decode_exactly)
{
    /* F16: 1, 2^-24 (the least subnormal), -inf; BF16: 1, -2^-133
     * (a binary32 subnormal); F64: 0.1 (not a binary32). */
    const unsigned char d[] = {
        0x00, 0x3c, 0x01, 0x00, 0x00, 0xfc,
        0x80, 0x3f, 0x01, 0x80,
        0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f,
    };
    emu_tensorfile tf;
    const char *json =
        " { \"h\" : { \"shape\" : [ 3 ] , \"dtype\" : \"F16\", \"data_offsets\": [0, 6] },"
        "\"b\":{\"data_offsets\":[6,10],\"dtype\":\"BF16\",\"shape\":[1,2]},\r\n"
        "\"d\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[10,18]}}\t ";
    size_t size;
    unsigned char *b = image(json, d, sizeof d, &size);
    emu_error err;
    /* -inf is refused by default, naming the tensor and the element ... */
    ck_assert_int_eq(emu_tensorfile_parse(&tf, b, size, "x", 0, &err), -1);
    ck_assert_int_eq(err.code, EMU_EDATA);
    ck_assert_str_eq(err.key, "value");
    ck_assert_str_eq(err.message, "tensor 'h': element [2] is -inf");
    /* ... and read when asked for. */
    ck_assert_int_eq(emu_tensorfile_parse(&tf, b, size, "x", EMU_TF_ALLOW_NONFINITE,
                                          &err), 0);
    free(b);
    ck_assert_int_eq(tf.tensors[0].dtype, EMU_TF_F16);
    ck_assert(tf.tensors[0].values[0] == 1.0);
    ck_assert(tf.tensors[0].values[1] == 0x1p-24);
    ck_assert(tf.tensors[0].values[2] == -INFINITY);
    ck_assert_uint_eq(tf.tensors[0].nonfinite, 1);
    ck_assert_int_eq(tf.tensors[1].dtype, EMU_TF_BF16);
    ck_assert(tf.tensors[1].values[0] == 1.0);
    ck_assert(tf.tensors[1].values[1] == -0x1p-133);
    ck_assert_int_eq(tf.tensors[2].dtype, EMU_TF_F64);
    ck_assert(tf.tensors[2].values[0] == 0.1);
    ck_assert_str_eq(emu_tf_dtype_name(EMU_TF_BF16), "BF16");
    ck_assert_str_eq(emu_tf_dtype_name(EMU_TF_DTYPE_COUNT), "?");
    emu_tensorfile_free(&tf);
}
END_TEST

START_TEST(strings_and_escapes)
{
    emu_tensorfile tf;
    /* \u00e9, a surrogate pair (U+1F600), \/ and raw UTF-8 in names;
     * an empty file of no tensors; metadata alone. */
    parse_expect("{\"\\u00e9\\ud83d\\ude00\\/x\xe2\x82\xac\":{\"dtype\":\"F32\","
                 "\"shape\":[2],\"data_offsets\":[0,8]}}", two, 8, 0, NULL, NULL,
                 &tf);
    ck_assert_str_eq(tf.tensors[0].name, "\xc3\xa9\xf0\x9f\x98\x80/x\xe2\x82\xac");
    emu_tensorfile_free(&tf);
    parse_expect("{}", NULL, 0, 0, NULL, NULL, &tf);
    ck_assert_int_eq(tf.count, 0);
    parse_expect("{\"__metadata__\":{}}", NULL, 0, 0, NULL, NULL, &tf);
    parse_expect("{\"__metadata__\":{\"a\":\"\",\"b\":\"c\"}," ONE "}", two, 8, 0,
                 NULL, NULL, &tf);
    ck_assert_int_eq(tf.meta_count, 2);
    ck_assert_str_eq(emu_tensorfile_meta(&tf, "a"), "");
    emu_tensorfile_free(&tf);
}
END_TEST

/* The frame: the header length against the file. */
START_TEST(bad_frame)
{
    emu_tensorfile tf;
    emu_error err;
    unsigned char b[16] = { 0 };
    ck_assert_int_eq(emu_tensorfile_parse(&tf, b, 7, "crafted.safetensors", 0, &err), -1);
    ck_assert_str_eq(err.key, "header");
    ck_assert(strstr(err.message, "shorter than the 8-byte"));
    /* Length 0, 1, past the end, above 100 MB. */
    const uint64_t lens[] = { 0, 1, 9, 100000001, UINT64_MAX };
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        for (int k = 0; k < 8; k++)
            b[k] = (unsigned char)(lens[i] >> 8 * k);
        memcpy(b + 8, "{}      ", 8);
        ck_assert_int_eq(emu_tensorfile_parse(&tf, b, 16, "crafted.safetensors", 0,
                                              &err), -1);
        ck_assert_int_eq(err.code, EMU_EDATA);
        ck_assert_str_eq(err.key, "header");
        ck_assert_msg(strstr(err.message, "a header of"), "%s", err.message);
    }
    /* A file that cannot be read. */
    ck_assert_int_eq(emu_tensorfile_read(&tf, "/nonexistent/w.safetensors", 0, &err), -1);
    ck_assert_int_eq(err.code, EMU_EIO);
    ck_assert_str_eq(err.where, "/nonexistent/w.safetensors");
    ck_assert_int_eq(emu_tensorfile_read(&tf, "/tmp", 0, &err), -1);
    ck_assert_int_eq(err.code, EMU_EIO);
}
END_TEST

START_TEST(bad_json)
{
    const struct { const char *json, *key, *words; } c[] = {
        { "[]", "header", "expected '{', found '['" },
        { "{ ", "header", "ends where a string was expected" },
        { "{" ONE ",}", "header", "expected a string, found '}'" },
        { "{" ONE "}}", "header", "bytes after the JSON object" },
        { "{" ONE "}x", "header", "bytes after the JSON object" },
        { "{" ONE " x", "header", "expected ',' or '}', found 'x'" },
        { "{\"w:{}}", "header", "a string that does not end" },
        { "{\"w\\q\":{}}", "header", "unknown escape" },
        { "{\"w\\u12g4\":{}}", "header", "four hex digits" },
        { "{\"w\\udc00\":{}}", "header", "lone low surrogate" },
        { "{\"w\\ud800x\":{}}", "header", "without its low half" },
        { "{\"w\\u0000\":{}}", "header", "NUL" },
        { "{\"w\x01\":{}}", "header", "control character (0x01)" },
        { "{\"w\xc0\xaf\":{}}", "header", "not UTF-8" },       /* overlong '/' */
        { "{\"w\xed\xa0\x80\":{}}", "header", "not UTF-8" },   /* a surrogate */
        { "{\"w\xf4\x90\x80\x80\":{}}", "header", "not UTF-8" }, /* > U+10FFFF */
        { "{\"w\":{}}", "header", "tensor 'w': no dtype, shape or data_offsets" },
        { "{\"\":{}}", "header", "an empty tensor name" },
        { "{\"w\":{\"\"dtype\":\"F32\"}}", "header", "expected ':', found 'd'" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", "data_offsets",
          "tensor 'w' has no data_offsets" },
        { "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", "shape",
          "tensor 'w' has no shape" },
        { "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", "dtype",
          "tensor 'w' has no dtype" },
        { "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", "dtype", "dtype given twice" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"shape\":[2]}}", "shape",
          "shape given twice" },
        { "{\"w\":{\"data_offsets\":[0,8],\"data_offsets\":[0,8]}}", "data_offsets",
          "data_offsets given twice" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}",
          "header", "tensor 'w': unknown field 'x'" },
        { "{\"w\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "dtype",
          "dtype 'f32' is no safetensors dtype" },
        { "{\"w\":{\"dtype\":3,\"shape\":[2],\"data_offsets\":[0,8]}}", "dtype",
          "expected a string" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", "shape",
          "leading zero" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", "shape",
          "expected an unsigned integer" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", "shape",
          "fraction or exponent" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}", "shape",
          "fraction or exponent" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,],\"data_offsets\":[0,8]}}", "shape",
          "expected an unsigned integer" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}",
          "shape", "more than 8 values" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[18446744073709551616],"
          "\"data_offsets\":[0,8]}}", "shape", "above 2^64 - 1" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}",
          "data_offsets", "needs [begin, end]" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]}}",
          "data_offsets", "more than 2 values" },
        { "{\"__metadata__\":{\"a\":1}," ONE "}", "__metadata__", "expected a string" },
        { "{\"__metadata__\":{\"a\":\"b\",\"a\":\"c\"}," ONE "}", "__metadata__",
          "metadata key 'a' given twice" },
        { "{\"__metadata__\":{},\"__metadata__\":{}," ONE "}", "__metadata__",
          "__metadata__ given twice" },
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++)
        parse_expect(c[i].json, two, 8, EMU_EDATA, c[i].key, c[i].words, NULL);
    /* A dtype of safetensors that libemu does not read. */
    parse_expect("{\"w\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", two,
                 8, EMU_EUNSUPPORTED, "dtype", "dtype 'I64' is not read by libemu",
                 NULL);
    /* The byte offset of the fault is named (file offset: 8 + index). */
    parse_expect("{\"w\" x", two, 8, EMU_EDATA, "header", "header, byte 13:", NULL);
}
END_TEST

START_TEST(bad_layout)
{
    const float four[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
#define T(name, b, e) "\"" name "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" #b "," #e "]}"
    const struct { const char *json; size_t dlen; const char *key, *words; } c[] = {
        { "{" T("w", 0, 8) "," T("w", 8, 16) "}", 16, "header",
          "tensor 'w' is given twice" },
        { "{" T("w", 8, 0) "}", 8, "data_offsets", "tensor 'w': [8, 0] ends before it begins" },
        { "{" T("w", 0, 12) "}", 8, "data_offsets", "reaches past the data (8 bytes)" },
        { "{" T("w", 0, 4) "}", 8, "data_offsets", "holds 4 bytes, but F32 of that shape needs 8" },
        { "{" T("a", 0, 8) "," T("b", 4, 12) "}", 16, "data_offsets",
          "tensor 'b' [4, 12] overlaps tensor 'a' [0, 8]" },
        { "{" T("a", 0, 8) "," T("b", 0, 8) "}", 16, "data_offsets",
          "[0, 8] overlaps tensor" },
        { "{" T("a", 8, 16) "}", 16, "data_offsets",
          "tensor 'a' begins at 8, leaving a gap of 8 bytes after the header" },
        { "{" T("a", 0, 8) "," T("b", 12, 20) "}", 20, "data_offsets",
          "tensor 'b' begins at 12, leaving a gap of 4 bytes after tensor 'a'" },
        { "{" T("a", 0, 8) "}", 12, "data_offsets", "4 bytes after the last tensor's data ('a')" },
        { "{}", 4, "data_offsets", "4 bytes after the last tensor's data" },
        { "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,2],"
          "\"data_offsets\":[0,8]}}", 8, "shape", "element count overflows 64 bits" },
        { "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,1073741824],"
          "\"data_offsets\":[0,8]}}", 8, "shape", "the byte size overflows" },
    };
#undef T
    for (size_t i = 0; i < sizeof c / sizeof *c; i++)
        parse_expect(c[i].json, four, c[i].dlen, EMU_EDATA, c[i].key, c[i].words,
                     NULL);
    /* Out of offset order in the header is fine: the ranges tile. */
    emu_tensorfile tf;
    parse_expect("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                 two, 8, 0, NULL, NULL, &tf);
    ck_assert_str_eq(tf.tensors[0].name, "b");
    ck_assert(tf.tensors[0].values[0] == -2.0);
    emu_tensorfile_free(&tf);
}
END_TEST

START_TEST(nonfinite_named)
{
    const float v[6] = { 0, 1, 2, 3, NAN, 5 };
    parse_expect("{\"layer2.0.bn1.running_var\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                 "\"data_offsets\":[0,24]}}", v, 24, EMU_EDATA, "value",
                 "tensor 'layer2.0.bn1.running_var': element [1, 1] is NaN", NULL);
}
END_TEST

START_TEST(writer_refuses)
{
    const float v[2] = { 1, 2 };
    emu_error err;
    const char *bad_names[] = { "", "__metadata__", "a\xff" };
    for (int i = 0; i < 3; i++) {
        emu_tf_out t = { .name = bad_names[i], .ndim = 1, .shape = { 2 }, .data = v };
        ck_assert_int_eq(emu_tensorfile_write("/dev/null", &t, 1, NULL, &err), -1);
        ck_assert_int_eq(err.code, EMU_EINVAL);
        ck_assert_str_eq(err.key, "name");
    }
    emu_tf_out d[2] = { { .name = "a", .ndim = 1, .shape = { 2 }, .data = v },
                        { .name = "a", .ndim = 1, .shape = { 2 }, .data = v } };
    ck_assert_int_eq(emu_tensorfile_write("/dev/null", d, 2, NULL, &err), -1);
    ck_assert(strstr(err.message, "tensor 'a' is given twice"));
    d[1].name = "b";
    d[1].ndim = 9;
    ck_assert_int_eq(emu_tensorfile_write("/dev/null", d, 2, NULL, &err), -1);
    ck_assert_str_eq(err.key, "shape");
    d[1].ndim = 1;
    const char *meta[] = { "k", NULL };
    ck_assert_int_eq(emu_tensorfile_write("/dev/null", d, 2, meta, &err), -1);
    ck_assert_str_eq(err.key, "__metadata__");
    /* A device is written in place, never replaced (atomic_file.h). */
    ck_assert_int_eq(emu_tensorfile_write("/dev/null", d, 2, NULL, &err), 0);
    ck_assert_int_eq(emu_tensorfile_write("/nonexistent/dir/w.safetensors", d, 2,
                                          NULL, &err), -1);
    ck_assert_int_eq(err.code, EMU_EIO);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tensorfile");
    TCase *tc = tcase_create("tensorfile");
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, dtypes_decode_exactly);
    tcase_add_test(tc, strings_and_escapes);
    tcase_add_test(tc, bad_frame);
    tcase_add_test(tc, bad_json);
    tcase_add_test(tc, bad_layout);
    tcase_add_test(tc, nonfinite_named);
    tcase_add_test(tc, writer_refuses);
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
