/*
 * test_tensor.c — tensors (libemu/tensor.c): allocation and its refusals,
 * shapes and names, and the packed bit patterns.
 *
 * Packing is checked three ways: hand-computed bytes for one short tensor
 * of each kind of layout (16-bit, 32-bit, 8-bit, FP6 four-in-three-bytes,
 * FP4 nibbles); for every carrier format, a tensor of every value (every
 * pattern of formats up to 16 bits, random and special values of binary32
 * and tf32), whose packed stream is read back bit by bit by an independent
 * reader and compared with emu_encode of each element; and the round trip
 * pack -> unpack, which must give back the same values.  Then the sizes
 * and every error path.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ---- allocation ---------------------------------------------------------- */

static void expect_refused(const char *name, emu_role role,
                           const emu_format *fmt, int ndim,
                           const size_t *shape, const char *key,
                           const char *needle)
{
    emu_tensor t;
    emu_error err;
    memset(&t, 0x5a, sizeof t); /* garbage: alloc must leave it empty */
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(emu_tensor_alloc(&t, name, role, fmt, ndim, shape, &err),
                     -1);
    ck_assert_ptr_null(t.data);
    ck_assert_uint_eq(t.n, 0);
    ck_assert(!t.owns_data);
    ck_assert_str_eq(err.key, key);
    ck_assert_msg(strstr(err.message, needle), "message '%s' lacks '%s'",
                  err.message, needle);
    ck_assert_msg(strstr(err.where, "tensor"), "where '%s'", err.where);
    emu_tensor_free(&t); /* safe on a refused tensor */
}

START_TEST(test_alloc_errors)
{
    const emu_format *h = test_format("binary16");
    const size_t s2[2] = { 3, 4 };
    char long_name[100];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    expect_refused(long_name, EMU_ROLE_WEIGHT, h, 2, s2, "name", "longer");
    expect_refused("t", (emu_role)EMU_ROLE_COUNT, h, 2, s2, "role", "role");
    expect_refused("t", (emu_role)-1, h, 2, s2, "role", "role");
    expect_refused("t", EMU_ROLE_WEIGHT, NULL, 2, s2, "format", "no format");
    expect_refused("t", EMU_ROLE_WEIGHT, test_format("binary64"), 2, s2,
                   "format", "carrier");
    expect_refused("t", EMU_ROLE_WEIGHT, test_format("e8m0"), 2, s2, "format",
                   "no zero");
    expect_refused("t", EMU_ROLE_WEIGHT, h, 0, s2, "shape", "0 dimensions");
    expect_refused("t", EMU_ROLE_WEIGHT, h, 5, s2, "shape", "5 dimensions");
    const size_t zero[3] = { 2, 0, 3 };
    expect_refused("t", EMU_ROLE_WEIGHT, h, 3, zero, "shape", "dimension 1");
    const size_t huge[2] = { SIZE_MAX / 2, 3 };
    expect_refused("t", EMU_ROLE_WEIGHT, h, 2, huge, "shape", "overflow");
    const size_t huge1[1] = { SIZE_MAX / 4 + 1 };
    expect_refused("t", EMU_ROLE_WEIGHT, h, 1, huge1, "shape", "overflow");
#if !defined(__SANITIZE_ADDRESS__)
    /* a byte count that fits size_t but no machine's memory */
    const size_t big[1] = { SIZE_MAX / 8 };
    expect_refused("t", EMU_ROLE_WEIGHT, h, 1, big, "shape", "out of memory");
#endif
}
END_TEST

START_TEST(test_alloc_shapes)
{
    const emu_format *h = test_format("bfloat16");
    emu_error err;
    emu_tensor t;
    ck_assert_int_eq(emu_tensor_alloc4(&t, "img", EMU_ROLE_ACTIVATION, h, 64,
                                       1, 28, 28, &err), 0);
    ck_assert_int_eq(t.ndim, 4);
    ck_assert_uint_eq(t.n, 64 * 28 * 28);
    ck_assert_str_eq(t.name, "img");
    ck_assert_int_eq(t.role, EMU_ROLE_ACTIVATION);
    ck_assert_str_eq(t.fmt.name, "bfloat16");
    ck_assert(t.owns_data);
    for (size_t i = 0; i < t.n; i++)
        ck_assert(t.data[i] == 0.0f && !signbit(t.data[i])); /* zero-filled */
    char buf[64];
    emu_tensor_shape_string(&t, buf, sizeof buf);
    ck_assert_str_eq(buf, "(64, 1, 28, 28)");
    emu_tensor_shape_string(&t, buf, 6); /* truncated, terminated */
    ck_assert_str_eq(buf, "(64, ");
    emu_tensor_shape_string(&t, buf, 1);
    ck_assert_str_eq(buf, "");

    emu_tensor m, v, m2;
    ck_assert_int_eq(emu_tensor_alloc4(&m, "m", EMU_ROLE_WEIGHT, h, 256, 784,
                                       0, 0, &err), 0);
    ck_assert_int_eq(m.ndim, 2);
    ck_assert_int_eq(emu_tensor_alloc4(&v, "v", EMU_ROLE_WEIGHT, h, 5, 0, 0,
                                       0, &err), 0);
    ck_assert_int_eq(v.ndim, 1);
    emu_tensor_shape_string(&v, buf, sizeof buf);
    ck_assert_str_eq(buf, "(5)");
    const size_t sm[2] = { 256, 784 };
    ck_assert_int_eq(emu_tensor_alloc(&m2, "m2", EMU_ROLE_MASTER,
                                      test_format("binary32"), 2, sm, &err), 0);
    ck_assert(emu_tensor_same_shape(&m, &m2));
    ck_assert(!emu_tensor_same_shape(&m, &t));
    ck_assert(!emu_tensor_same_shape(&m, &v));
    /* same element count, different shape */
    emu_tensor r;
    ck_assert_int_eq(emu_tensor_alloc4(&r, "r", EMU_ROLE_WEIGHT, h, 784, 256,
                                       0, 0, &err), 0);
    ck_assert(!emu_tensor_same_shape(&m, &r));
    /* a 0 before the last dimension is a zero-size dimension */
    emu_tensor z;
    ck_assert_int_eq(emu_tensor_alloc4(&z, "z", EMU_ROLE_WEIGHT, h, 2, 0, 3,
                                       0, &err), -1);
    ck_assert_int_eq(emu_tensor_alloc4(&z, "z", EMU_ROLE_WEIGHT, h, 0, 0, 0,
                                       0, &err), -1);
    /* names up to 63 characters are kept whole */
    char name63[64];
    memset(name63, 'x', 63);
    name63[63] = '\0';
    ck_assert_int_eq(emu_tensor_alloc4(&z, name63, EMU_ROLE_OTHER, h, 1, 0, 0,
                                       0, &err), 0);
    ck_assert_str_eq(z.name, name63);
    emu_tensor_free(&z);
    ck_assert_int_eq(emu_tensor_alloc4(&z, NULL, EMU_ROLE_OTHER, h, 1, 0, 0,
                                       0, &err), 0);
    ck_assert_str_eq(z.name, "");

    emu_tensor_free(&z);
    emu_tensor_free(&z); /* twice: harmless */
    emu_tensor_free(&t);
    emu_tensor_free(&m);
    emu_tensor_free(&m2);
    emu_tensor_free(&v);
    emu_tensor_free(&r);
    ck_assert_ptr_null(t.data);
    ck_assert_uint_eq(t.n, 0);

    /* a tensor that borrows its data is not freed by emu_tensor_free */
    float store[4] = { 1, 2, 3, 4 };
    emu_tensor view = { .fmt = *h, .ndim = 1, .shape = { 4 }, .n = 4,
                        .data = store, .owns_data = false };
    emu_tensor_free(&view);
    ck_assert_float_eq(store[3], 4.0f);
}
END_TEST

START_TEST(test_roles)
{
    const char *names[] = { "weight", "activation", "act_grad", "weight_grad",
                            "master", "opt_state", "other" };
    ck_assert_int_eq(EMU_ROLE_COUNT, 7);
    for (int r = 0; r < EMU_ROLE_COUNT; r++) {
        ck_assert_str_eq(emu_role_name((emu_role)r), names[r]);
        emu_role back;
        ck_assert_int_eq(emu_role_parse(names[r], &back), 0);
        ck_assert_int_eq(back, r);
    }
    ck_assert_str_eq(emu_role_name(EMU_ROLE_COUNT), "?");
    ck_assert_str_eq(emu_role_name((emu_role)-1), "?");
    emu_role r = EMU_ROLE_MASTER;
    ck_assert_int_eq(emu_role_parse("weights", &r), -1);
    ck_assert_int_eq(emu_role_parse("", &r), -1);
    ck_assert_int_eq(emu_role_parse(NULL, &r), -1);
    ck_assert_int_eq(r, EMU_ROLE_MASTER); /* untouched on failure */
}
END_TEST

/* ---- packing: hand-computed bytes ---------------------------------------- */

static void expect_bytes(const char *fmt_name, const float *v, size_t n,
                         const uint8_t *want, size_t nbytes)
{
    const emu_format *f = test_format(fmt_name);
    emu_tensor t;
    emu_error err;
    ck_assert_int_eq(emu_tensor_alloc(&t, "t", EMU_ROLE_OTHER, f, 1, &n, &err),
                     0);
    memcpy(t.data, v, n * sizeof *v);
    ck_assert_uint_eq(emu_packed_size(f, n), nbytes);
    uint8_t buf[16];
    memset(buf, 0xee, sizeof buf);
    ck_assert_int_eq(emu_tensor_pack(&t, buf, nbytes, &err), 0);
    for (size_t k = 0; k < nbytes; k++)
        ck_assert_msg(buf[k] == want[k], "%s byte %zu: want 0x%02x got 0x%02x",
                      fmt_name, k, want[k], buf[k]);
    ck_assert_uint_eq(buf[nbytes], 0xee); /* nothing written past the end */
    emu_tensor back;
    ck_assert_int_eq(
        emu_tensor_alloc(&back, "b", EMU_ROLE_OTHER, f, 1, &n, &err), 0);
    ck_assert_int_eq(emu_tensor_unpack(&back, want, nbytes, &err), 0);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(test_same(back.data[i], v[i]), "%s element %zu: %a",
                      fmt_name, i, (double)back.data[i]);
    emu_tensor_free(&t);
    emu_tensor_free(&back);
}

START_TEST(test_pack_by_hand)
{
    /* binary16: 1.0 = 0x3c00, -2.0 = 0xc000, little-endian */
    const float h[] = { 1.0f, -2.0f, 0x1p-24f };
    const uint8_t hb[] = { 0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00 };
    expect_bytes("binary16", h, 3, hb, sizeof hb);
    /* bfloat16: 1.0 = 0x3f80 */
    const float b[] = { 1.0f, -INFINITY };
    const uint8_t bb[] = { 0x80, 0x3f, 0x80, 0xff };
    expect_bytes("bfloat16", b, 2, bb, sizeof bb);
    /* binary32: 1.0 = 0x3f800000 */
    const float s[] = { 1.0f, -0.0f };
    const uint8_t sb[] = { 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x80 };
    expect_bytes("binary32", s, 2, sb, sizeof sb);
    /* tf32 (19 bits, in 4 bytes): 1.0 = 0 01111111 0000000000 = 0x1fc00 */
    const float tf[] = { 1.0f, -1.5f };
    const uint8_t tfb[] = { 0x00, 0xfc, 0x01, 0x00, 0x00, 0xfe, 0x05, 0x00 };
    expect_bytes("tf32", tf, 2, tfb, sizeof tfb);
    /* e4m3: 1.0 = 0 0111 000 = 0x38, -448 = 1 1111 110 = 0xfe, NaN = 0x7f */
    const float e4[] = { 1.0f, -448.0f, NAN, 0x1p-9f };
    const uint8_t e4b[] = { 0x38, 0xfe, 0x7f, 0x01 };
    expect_bytes("e4m3", e4, 4, e4b, sizeof e4b);
    /* e2m1 (FP4, bias 1): 1.0 = 0 01 0 = 0x2, -0.5 = 1 00 1 = 0x9,
     * 6.0 = 0 11 1 = 0x7; element 0 in the low nibble */
    const float e2[] = { 1.0f, -0.5f, 6.0f };
    const uint8_t e2b[] = { 0x92, 0x07 };
    expect_bytes("e2m1", e2, 3, e2b, sizeof e2b);
    /* e2m3 (FP6, bias 1): 1.0 = 001000, -1.0 = 101000, 7.5 = 011111,
     * 0.125 = 000001; bits 0-5, 6-11, 12-17, 18-23 of one 24-bit word:
     * 0x08 | 0x28 << 6 | 0x1f << 12 | 0x01 << 18 = 0x05fa08 */
    const float e6[] = { 1.0f, -1.0f, 7.5f, 0.125f };
    const uint8_t e6b[] = { 0x08, 0xfa, 0x05 };
    expect_bytes("e2m3", e6, 4, e6b, sizeof e6b);
    /* five FP6 elements: the fifth starts a new 3-byte group; e3m2 (bias
     * 3): 1.0 = 0 011 00 = 0x0c, -28 = 1 111 11 = 0x3f */
    const float e3[] = { 1.0f, 1.0f, 1.0f, 1.0f, -28.0f };
    /* 0x0c | 0x0c << 6 | 0x0c << 12 | 0x0c << 18 = 0x30c30c; then 0x3f */
    const uint8_t e3b[] = { 0x0c, 0xc3, 0x30, 0x3f };
    expect_bytes("e3m2", e3, 5, e3b, sizeof e3b);
}
END_TEST

/* ---- packing: every value of every carrier format ------------------------ */

/* Bits [pos, pos + w) of a little-endian bit stream, one bit at a time. */
static uint64_t read_bits(const uint8_t *buf, size_t pos, int w)
{
    uint64_t v = 0;
    for (int k = 0; k < w; k++) {
        size_t bit = pos + (size_t)k;
        v |= (uint64_t)((buf[bit / 8] >> (bit % 8)) & 1u) << k;
    }
    return v;
}

/* The value of f at pattern i (all of them for <= 16 bits, else a mix of
 * random patterns and the specials). */
static size_t fill_values(const emu_format *f, emu_tensor *t, test_rng *g)
{
    for (size_t i = 0; i < t->n; i++) {
        emu_bits b = { i };
        if (f->bits > 16)
            b = test_random_bits(g, f);
        t->data[i] = (float)emu_decode(f, b);
    }
    if (f->bits > 16) {
        const float sp[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN,
                             (float)f->max, (float)f->min_subnormal };
        for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++)
            t->data[k] = sp[k];
    }
    return t->n;
}

START_TEST(test_pack_every_format)
{
    test_rng g = test_rng_make(0x9ac4);
    size_t formats = 0;
    for (size_t k = 0; k < emu_format_count(); k++) {
        const emu_format *f = emu_format_at(k);
        if (!f->fits_carrier || !f->has_zero)
            continue;
        formats++;
        emu_error err;
        size_t n = f->bits <= 16 ? (size_t)1 << f->bits : 65536;
        /* an odd count exercises partial bytes at the end too */
        if (f->bits < 8)
            n -= 1;
        emu_tensor t, back;
        ck_assert_int_eq(emu_tensor_alloc(&t, "t", EMU_ROLE_OTHER, f, 1, &n,
                                          &err), 0);
        ck_assert_int_eq(emu_tensor_alloc(&back, "b", EMU_ROLE_OTHER, f, 1,
                                          &n, &err), 0);
        fill_values(f, &t, &g);
        const size_t need = emu_packed_size(f, n);
        const size_t eb = f->bits <= 8 ? 0 : f->bits <= 16 ? 2 : 4;
        ck_assert_uint_eq(need, eb ? n * eb : (n * (size_t)f->bits + 7) / 8);
        uint8_t *buf = malloc(need + 1);
        ck_assert_ptr_nonnull(buf);
        buf[need] = 0xa5;
        ck_assert_msg(emu_tensor_pack(&t, buf, need, &err) == 0, "%s: %s",
                      f->name, err.message);
        ck_assert_uint_eq(buf[need], 0xa5);
        for (size_t i = 0; i < n; i++) {
            emu_bits want;
            bool ok = emu_encode(f, t.data[i], &want);
            ck_assert(ok || isnan(t.data[i]));
            uint64_t got = eb ? read_bits(buf, i * eb * 8, (int)eb * 8)
                              : read_bits(buf, i * (size_t)f->bits, f->bits);
            ck_assert_msg(got == want.v, "%s element %zu (%a): packed 0x%llx, "
                          "encode 0x%llx", f->name, i, (double)t.data[i],
                          (unsigned long long)got, (unsigned long long)want.v);
        }
        /* the unused high bits of the last byte are zero */
        if (!eb && (n * (size_t)f->bits) % 8)
            ck_assert_uint_eq(buf[need - 1] >> ((n * (size_t)f->bits) % 8), 0);
        ck_assert_int_eq(emu_tensor_unpack(&back, buf, need, &err), 0);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(test_same(back.data[i], t.data[i]),
                          "%s element %zu: %a came back as %a", f->name, i,
                          (double)t.data[i], (double)back.data[i]);
        free(buf);
        emu_tensor_free(&t);
        emu_tensor_free(&back);
    }
    ck_assert_uint_ge(formats, 14);
}
END_TEST

/* Unpacking every 16-bit pattern gives emu_decode of it (NaN payloads and
 * signaling NaNs included), whatever the pattern. */
START_TEST(test_unpack_every_pattern)
{
    const char *names[] = { "binary16", "bfloat16", "dlfloat" };
    for (int k = 0; k < 3; k++) {
        const emu_format *f = test_format(names[k]);
        emu_error err;
        size_t n = 65536;
        emu_tensor t;
        ck_assert_int_eq(emu_tensor_alloc(&t, "t", EMU_ROLE_OTHER, f, 1, &n,
                                          &err), 0);
        uint8_t *buf = malloc(2 * n);
        ck_assert_ptr_nonnull(buf);
        for (size_t i = 0; i < n; i++) {
            buf[2 * i] = (uint8_t)i;
            buf[2 * i + 1] = (uint8_t)(i >> 8);
        }
        ck_assert_int_eq(emu_tensor_unpack(&t, buf, 2 * n, &err), 0);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(test_same(t.data[i], emu_decode(f, (emu_bits){ i })),
                          "%s 0x%04zx", f->name, i);
        free(buf);
        emu_tensor_free(&t);
    }
}
END_TEST

START_TEST(test_pack_errors)
{
    const emu_format *h = test_format("binary16");
    emu_error err;
    emu_tensor t;
    size_t n = 4;
    ck_assert_int_eq(emu_tensor_alloc(&t, "w", EMU_ROLE_WEIGHT, h, 1, &n, &err),
                     0);
    uint8_t buf[16] = { 0 };
    /* too small */
    ck_assert_int_eq(emu_tensor_pack(&t, buf, 7, &err), -1);
    ck_assert_str_eq(err.key, "size");
    ck_assert_msg(strstr(err.message, "8 needed"), "%s", err.message);
    ck_assert_msg(strstr(err.where, "'w'"), "%s", err.where);
    ck_assert_int_eq(emu_tensor_unpack(&t, buf, 7, &err), -1);
    ck_assert_str_eq(err.key, "size");
    /* a value that is not a value of the format (only hands put it there) */
    t.data[2] = 1.0001f;
    ck_assert_int_eq(emu_tensor_pack(&t, buf, sizeof buf, &err), -1);
    ck_assert_str_eq(err.key, "data");
    ck_assert_msg(strstr(err.message, "element 2"), "%s", err.message);
    emu_tensor_free(&t);

    /* patterns wider than the format: tf32 is 19 bits in 4 bytes, a
     * 9-bit format 2 bytes */
    const emu_format *tf = test_format("tf32");
    ck_assert_int_eq(
        emu_tensor_alloc(&t, "tf", EMU_ROLE_WEIGHT, tf, 1, &n, &err), 0);
    uint8_t wide[16] = { 0 };
    wide[4 + 2] = 0x08; /* element 1, bit 19 */
    ck_assert_int_eq(emu_tensor_unpack(&t, wide, sizeof wide, &err), -1);
    ck_assert_str_eq(err.key, "data");
    ck_assert_msg(strstr(err.message, "element 1"), "%s", err.message);
    emu_tensor_free(&t);
    emu_format nine;
    ck_assert_int_eq(emu_format_parse_inline(&nine, "e5m3", &err), 0);
    ck_assert_int_eq(nine.bits, 9);
    ck_assert_int_eq(emu_tensor_alloc(&t, "nine", EMU_ROLE_WEIGHT, &nine, 1,
                                      &n, &err), 0);
    ck_assert_uint_eq(emu_packed_size(&nine, n), 2 * n);
    uint8_t w9[8] = { 0xff, 0x01, 0x00, 0x02 }; /* element 1 has bit 9 set */
    ck_assert_int_eq(emu_tensor_unpack(&t, w9, sizeof w9, &err), -1);
    ck_assert_msg(strstr(err.message, "element 1"), "%s", err.message);
    emu_tensor_free(&t);

    /* sizes that overflow size_t */
    ck_assert_uint_eq(emu_packed_size(h, SIZE_MAX / 2 + 1), 0);
    ck_assert_uint_eq(emu_packed_size(test_format("e2m3"), SIZE_MAX / 3), 0);
    ck_assert_uint_eq(emu_packed_size(test_format("e2m1"), 3), 2);
    ck_assert_uint_eq(emu_packed_size(test_format("e3m2"), 5), 4);
    ck_assert_uint_eq(emu_packed_size(test_format("e4m3"), 5), 5);
    ck_assert_uint_eq(emu_packed_size(tf, 5), 20);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("tensor");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_alloc_errors);
    tcase_add_test(tc, test_alloc_shapes);
    tcase_add_test(tc, test_roles);
    tcase_add_test(tc, test_pack_by_hand);
    tcase_add_test(tc, test_pack_every_format);
    tcase_add_test(tc, test_unpack_every_pattern);
    tcase_add_test(tc, test_pack_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
