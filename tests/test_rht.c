/*
 * test_rht.c — the random Hadamard transform (emu_rht) against MPFR.
 *
 * The oracle replays emu/scaled.h's definition with libemu's MPFR
 * reference (emu_ref_mul, emu_ref_add, emu_ref_sub into binary32, round to
 * nearest even): the signs, log2(b) butterfly stages, the scaling, each a
 * separately and correctly rounded operation.  emu_rht must agree bit for
 * bit (signs of zero included; NaN as NaN) on random tensors of several
 * value classes, for every block size, forward and inverse, with a tail
 * shorter than a block and an inner stride.  Then the properties the
 * recipes rely on: R^T R = I and (R a) . (R b) = a . b exactly where no
 * step rounds (small integers), the same answer in place and from a
 * hostile host state, the signs a function of the seed and balanced
 * (statistically), and bad arguments refused by name.
 *
 * Inside training (policy rht=wgrad|backward): the gradients of an MLP, the
 * CNN and resnet:1 with the transform stay within the operands' rounding
 * of those without it (paired, on the right axis, with the same signs),
 * the policy keys and their refusals, the run record, and the checkpoint.
 */
#define _POSIX_C_SOURCE 200809L /* fmemopen, mkdtemp */

#include <check.h>
#include <fenv.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xmmintrin.h>

#include <emu/nn.h>
#include <emu/ref.h>
#include <emu/scaled.h>
#include <unistd.h>

#include "testutil.h"

static const unsigned blocks[] = { 4, 16, 64, 256 };
enum { N_BLOCKS = sizeof blocks / sizeof blocks[0] };

/* A binary32 value of class k: 0 spread over the whole normal range, 1
 * near 1 (cancellation in the butterflies), 2 subnormal or near the
 * normal threshold (the scaling rounds), 3 near the overflow threshold
 * (the sums overflow), 4 any bit pattern (zeros, infinities, NaNs). */
static float random_value(test_rng *g, int k)
{
    const double sign = test_next(g) & 1 ? -1.0 : 1.0;
    const double m = 1.0 + (double)(test_next(g) >> 40) / 0x1p24;
    switch (k) {
    case 0: return (float)(sign * ldexp(m, (int)test_below(g, 250) - 125));
    case 1: return (float)(sign * ldexp(m, (int)test_below(g, 4) - 2));
    case 2: return (float)(sign * ldexp(m, (int)test_below(g, 30) - 150));
    case 3: return (float)(sign * ldexp(m, 120 + (int)test_below(g, 8)));
    default: {
        uint32_t u = (uint32_t)test_next(g);
        float x;
        memcpy(&x, &u, sizeof x);
        return x;
    }
    }
}

/* One block through the MPFR oracle, in place (values held as doubles,
 * each a binary32 value). */
static void oracle_block(double *v, unsigned b, const float *signs,
                         bool inverse)
{
    const emu_format *f32 = test_format("binary32");
    emu_rounding r;
    memset(&r, 0, sizeof r);
    r.mode = EMU_RNE;
    emu_status st;
    int lg = 0;
    while ((1u << lg) < b)
        lg++;
    const double scale = ldexp(1.0, -lg / 2);
    if (!inverse)
        for (unsigned j = 0; j < b; j++)
            v[j] = emu_ref_mul(f32, v[j], signs[j], &r, &st);
    for (unsigned h = 1; h < b; h *= 2)
        for (unsigned i0 = 0; i0 < b; i0 += 2 * h)
            for (unsigned i = i0; i < i0 + h; i++) {
                const double u = v[i], w = v[i + h];
                v[i] = emu_ref_add(f32, u, w, &r, &st);
                v[i + h] = emu_ref_sub(f32, u, w, &r, &st);
            }
    for (unsigned j = 0; j < b; j++)
        v[j] = emu_ref_mul(f32, v[j], scale, &r, &st);
    if (inverse)
        for (unsigned j = 0; j < b; j++)
            v[j] = emu_ref_mul(f32, v[j], signs[j], &r, &st);
}

/* The whole tensor (outer, len, inner) through the oracle. */
static void oracle(float *out, const float *in, size_t outer, size_t len,
                   size_t inner, unsigned b, uint64_t seed, bool inverse)
{
    float signs[256];
    ck_assert_int_eq(emu_rht_signs(signs, b, seed, NULL), 0);
    double v[256];
    memcpy(out, in, outer * len * inner * sizeof *out);
    for (size_t o = 0; o < outer; o++)
        for (size_t c = 0; c < inner; c++)
            for (size_t k0 = 0; k0 + b <= len; k0 += b) {
                const size_t at = o * len * inner + k0 * inner + c;
                for (unsigned j = 0; j < b; j++)
                    v[j] = in[at + j * inner];
                oracle_block(v, b, signs, inverse);
                for (unsigned j = 0; j < b; j++)
                    out[at + j * inner] = (float)v[j];
            }
}

START_TEST(against_mpfr)
{
    const unsigned b = blocks[_i % N_BLOCKS];
    const bool inverse = _i / N_BLOCKS;
    test_rng g = test_rng_make(0x7248 + (uint64_t)_i);
    const size_t reps = test_scaled(40, 4);
    size_t mismatches = 0, checked = 0;
    for (size_t rep = 0; rep < reps; rep++) {
        /* A tail shorter than a block, and (every other rep) all tail. */
        const size_t outer = 1 + test_below(&g, 3), inner = 1 + test_below(&g, 4);
        const size_t len = rep % 7 == 6 ? test_below(&g, b)
                                        : b * (1 + test_below(&g, 3)) + test_below(&g, b);
        const size_t n = outer * len * inner;
        const int cls = (int)(rep % 5);
        float *in = malloc((n + 1) * sizeof *in), *got = malloc((n + 1) * sizeof *got),
              *want = malloc((n + 1) * sizeof *want);
        ck_assert(in && got && want);
        for (size_t i = 0; i < n; i++)
            /* mostly the class, with values of other classes mixed in */
            in[i] = random_value(&g, test_below(&g, 8) ? cls : (int)test_below(&g, 5));
        const uint64_t seed = test_next(&g);
        emu_error e;
        ck_assert_msg(emu_rht(got, in, outer, len, inner, b, seed, inverse, &e) == 0,
                      "%s", e.message);
        oracle(want, in, outer, len, inner, b, seed, inverse);
        for (size_t i = 0; i < n; i++, checked++)
            if (!test_same(got[i], want[i])) {
                if (mismatches++ < 5)
                    fprintf(stderr, "b=%u %s class %d: element %zu of (%zu,%zu,%zu): "
                            "got %a, MPFR %a\n", b, inverse ? "inverse" : "forward",
                            cls, i, outer, len, inner, got[i], want[i]);
            }
        /* In place gives the same. */
        memcpy(got, in, n * sizeof *got);
        ck_assert_int_eq(emu_rht(got, got, outer, len, inner, b, seed, inverse, NULL), 0);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(test_same(got[i], want[i]), "in place differs at %zu", i);
        free(in);
        free(got);
        free(want);
    }
    ck_assert_msg(mismatches == 0, "%zu of %zu elements differ from MPFR", mismatches,
                  checked);
    ck_assert_uint_gt(checked, 0);
}
END_TEST

/* R^T R = I, and (R a) . (R b) = a . b, exactly: with integer inputs of a
 * few bits every butterfly is exact, and so is the scaling. */
START_TEST(orthogonal)
{
    const unsigned b = blocks[_i];
    test_rng g = test_rng_make(0x0e7 + (uint64_t)_i);
    const size_t len = 3 * b + b / 2, inner = 3, n = len * inner;
    static float a[4096], c[4096], ra[4096], rc[4096], back[4096], other[4096];
    ck_assert_uint_le(n, 4096);
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)((int)test_below(&g, 2001) - 1000);
        c[i] = (float)((int)test_below(&g, 2001) - 1000);
    }
    const uint64_t seed = 42 + (uint64_t)_i;
    ck_assert_int_eq(emu_rht(ra, a, 1, len, inner, b, seed, false, NULL), 0);
    ck_assert_int_eq(emu_rht(rc, c, 1, len, inner, b, seed, false, NULL), 0);
    ck_assert_int_eq(emu_rht(back, ra, 1, len, inner, b, seed, true, NULL), 0);
    double dot = 0.0, rdot = 0.0;
    size_t moved = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(back[i] == a[i], "R^T R a != a at %zu: %a against %a", i,
                      back[i], a[i]);
        dot += (double)a[i] * c[i];
        rdot += (double)ra[i] * rc[i];
        moved += ra[i] != a[i];
    }
    ck_assert_msg(dot == rdot, "(Ra).(Rc) = %.17g, a.c = %.17g", rdot, dot);
    ck_assert_uint_gt(moved, n / 2); /* the transform did something */
    /* A different seed, a different (but still orthogonal) transform. */
    ck_assert_int_eq(emu_rht(other, a, 1, len, inner, b, seed + 1, false, NULL), 0);
    ck_assert(memcmp(other, ra, n * sizeof *ra) != 0);
}
END_TEST

/* The answer does not depend on the caller's rounding mode or FTZ/DAZ. */
START_TEST(host_state)
{
    test_rng g = test_rng_make(0x4057);
    enum { N = 4 * 64 };
    float in[N], want[N], got[N];
    for (int i = 0; i < N; i++)
        in[i] = random_value(&g, 2); /* subnormal and near it: FTZ and DAZ would act */
    ck_assert_int_eq(emu_rht(want, in, 4, 64, 1, 16, 7, false, NULL), 0);
    const unsigned csr = _mm_getcsr();
    ck_assert_int_eq(fesetround(FE_UPWARD), 0);
    _mm_setcsr((_mm_getcsr() & ~0x3Fu) | 0x8040u); /* FTZ | DAZ */
    const unsigned hostile = _mm_getcsr();
    const int rc = emu_rht(got, in, 4, 64, 1, 16, 7, false, NULL);
    const unsigned after = _mm_getcsr();
    _mm_setcsr(csr);
    fesetround(FE_TONEAREST);
    ck_assert_int_eq(rc, 0);
    /* the caller's state given back */
    ck_assert_uint_eq(after & 0xFFC0u, hostile & 0xFFC0u);
    size_t sub = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_msg(test_same(got[i], want[i]), "element %d: %a under upward+FTZ, %a",
                      i, got[i], want[i]);
        sub += want[i] != 0.0f && fabsf(want[i]) < 0x1p-126f;
    }
    ck_assert_uint_gt(sub, 0); /* FTZ had something to flush */
}
END_TEST

/* The signs: a function of the seed, balanced.  Over 2000 seeds x 256
 * signs the fraction of -1 has standard deviation 0.5/sqrt(512000) =
 * 7.0e-4: a tolerance of 0.005 is over 7 of them. */
START_TEST(signs)
{
    float s1[256], s2[256];
    ck_assert_int_eq(emu_rht_signs(s1, 256, 99, NULL), 0);
    ck_assert_int_eq(emu_rht_signs(s2, 256, 99, NULL), 0);
    ck_assert(memcmp(s1, s2, sizeof s1) == 0);
    float s4[4];
    ck_assert_int_eq(emu_rht_signs(s4, 4, 99, NULL), 0);
    ck_assert(memcmp(s4, s1, sizeof s4) == 0); /* a prefix of the same stream */
    size_t neg = 0, total = 0;
    for (uint64_t seed = 0; seed < 2000; seed++) {
        ck_assert_int_eq(emu_rht_signs(s1, 256, seed, NULL), 0);
        for (int j = 0; j < 256; j++, total++) {
            ck_assert(s1[j] == 1.0f || s1[j] == -1.0f);
            neg += s1[j] < 0;
        }
    }
    const double frac = (double)neg / (double)total;
    ck_assert_msg(fabs(frac - 0.5) < 0.005, "fraction of -1: %.5f", frac);
}
END_TEST

START_TEST(bad_arguments)
{
    float x[16] = { 0 }, y[16];
    emu_error e;
    const unsigned bad[] = { 0, 1, 2, 8, 32, 128, 512 };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(emu_rht(y, x, 1, 16, 1, bad[i], 0, false, &e), -1);
        ck_assert_int_eq(e.code, EMU_EINVAL);
        ck_assert_str_eq(e.key, "block");
        ck_assert_int_eq(emu_rht_signs(y, bad[i], 0, &e), -1);
    }
    ck_assert_int_eq(emu_rht(y, NULL, 1, 16, 1, 16, 0, false, &e), -1);
    ck_assert_str_eq(e.key, "in");
    ck_assert_int_eq(emu_rht(NULL, x, 1, 16, 1, 16, 0, false, &e), -1);
    ck_assert_str_eq(e.key, "out");
    ck_assert_int_eq(emu_rht(y, x, SIZE_MAX / 2, 4, 1, 16, 0, false, &e), -1);
    ck_assert_str_eq(e.key, "shape");
    ck_assert_int_eq(emu_rht(NULL, NULL, 0, 16, 1, 16, 0, false, &e), 0); /* empty */
}
END_TEST


/* ---- inside training (policy rht) ----------------------------------------- */

/* One forward and backward pass of arch on a fixed random batch under
 * preset with the assignments sets (NULL-terminated); every parameter's
 * gradient is copied, concatenated, into *grads (n of them). */
static void grads_of(const char *arch, int c, int hw, const char *preset,
                     const char *const *sets, float **grads, size_t *n)
{
    emu_policy p;
    emu_error err;
    ck_assert_int_eq(emu_policy_preset(&p, preset, &err), 0);
    for (int i = 0; sets[i]; i++)
        ck_assert_msg(emu_policy_set(&p, sets[i], &err) == 0, "%s: %s", sets[i],
                      err.message);
    ck_assert_msg(emu_policy_validate(&p, &err) == 0, "%s", err.message);
    emu_ctx ctx;
    emu_ctx_init(&ctx, 5);
    emu_model m;
    enum { B = 48, K = 10 };
    ck_assert_msg(emu_model_build(&m, arch, &p, B, c, hw, hw, K, 5, &ctx, &err) == 0,
                  "%s: %s", arch, err.message);
    test_rng g = test_rng_make(11);
    for (size_t i = 0; i < m.x.n; i++)
        m.x.data[i] = (float)test_below(&g, 256) / 255.0f;
    int labels[B];
    for (int i = 0; i < B; i++)
        labels[i] = (int)test_below(&g, K);
    ck_assert_msg(emu_model_forward(&m, &ctx, &p) == 0 &&
                  emu_model_backward(&m, &ctx, &p, labels, 1.0f) == 0,
                  "%s", ctx.err.message);
    size_t total = 0;
    for (int i = 0; i < m.n_layers; i++)
        if (m.layers[i].has_params)
            total += m.layers[i].weight.g.n +
                     (m.layers[i].has_bias ? m.layers[i].bias.g.n : 0);
    float *out = malloc(total * sizeof *out);
    ck_assert_ptr_nonnull(out);
    size_t at = 0;
    for (int i = 0; i < m.n_layers; i++) {
        const emu_layer *l = &m.layers[i];
        if (!l->has_params)
            continue;
        memcpy(out + at, l->weight.g.data, l->weight.g.n * sizeof *out);
        at += l->weight.g.n;
        if (l->has_bias) {
            memcpy(out + at, l->bias.g.data, l->bias.g.n * sizeof *out);
            at += l->bias.g.n;
        }
    }
    emu_model_free(&m);
    *grads = out;
    *n = total;
}

/* Relative distance ||a - b|| / ||b||. */
static double rel_dist(const float *a, const float *b, size_t n)
{
    double d = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d / r);
}

/* R^T R = I inside the layers: with the GEMM operands rounded into
 * binary16 (no block scales, so the transform's effect on scaling is out
 * of the picture), the gradients with the transform applied to the weight
 * gradient's, then every backward GEMM's operands stay within binary16's
 * rounding of those without it (the transform is paired, on the right
 * axis, with the same signs on both operands; a wrong sign, axis or block
 * puts them O(1) apart), yet differ from them (it was applied).  The MLP,
 * the CNN (the convolutions' operands: the batch axis for the weight
 * gradient, channels for the input gradient) and resnet:1. */
START_TEST(training_orthogonal)
{
    static const struct {
        const char *arch;
        int c, hw;
    } models[] = { { "mlp:64-48-32-10", 1, 8 }, { "cnn", 1, 28 }, { "resnet:1", 1, 12 } };
    const int k = _i / 2;
    const char *apply = _i % 2 ? "rht=backward" : "rht=wgrad";
    const char *plain[] = { "q.all=elem=binary16,scale=none,tensor=yes", NULL };
    const char *with[] = { "q.all=elem=binary16,scale=none,tensor=yes", apply, NULL };
    float *a, *b;
    size_t na, nb;
    grads_of(models[k].arch, models[k].c, models[k].hw, "fp32", plain, &b, &nb);
    grads_of(models[k].arch, models[k].c, models[k].hw, "fp32", with, &a, &na);
    ck_assert_uint_eq(na, nb);
    const double d = rel_dist(a, b, na);
    ck_assert_msg(d < 4e-3, "%s %s: gradients %.3g apart", models[k].arch, apply, d);
    ck_assert_msg(d > 0.0, "%s %s: the transform changed nothing", models[k].arch, apply);
    free(a);
    free(b);
}
END_TEST

START_TEST(policy_keys)
{
    emu_policy p;
    emu_error err;
    ck_assert_int_eq(emu_policy_preset(&p, "nvfp4", &err), 0);
    ck_assert_int_eq(p.rht, EMU_RHT_NONE);
    ck_assert_uint_eq(p.rht_block, 16);
    ck_assert_int_eq(emu_policy_set(&p, "rht=backward", &err), 0);
    ck_assert_int_eq(emu_policy_set(&p, "rht_block=64", &err), 0);
    ck_assert_int_eq(emu_policy_set(&p, "rht_seed=0xffffffffffffffff", &err), 0);
    ck_assert_int_eq(emu_policy_validate(&p, &err), 0);
    ck_assert(p.rht == EMU_RHT_BACKWARD && p.rht_block == 64 && p.rht_seed == UINT64_MAX);
    /* the record says so */
    char buf[8192];
    FILE *fp = fmemopen(buf, sizeof buf, "w");
    emu_policy_write_json(&p, fp, 0);
    fclose(fp);
    ck_assert_msg(strstr(buf, "\"rht\": {\"apply\": \"backward\", \"block\": 64, "
                              "\"seed\": 18446744073709551615}"), "%s", buf);
    /* refusals, by key */
    const struct {
        const char *preset, *set, *key, *says;
    } bad[] = {
        { "nvfp4", "rht=yes", "rht", "'yes'" },
        { "nvfp4", "rht_block=x", "rht_block", "'x'" },
        { "nvfp4", "rht_seed=-1", "rht_seed", "'-1'" },
        { "nvfp4", "rht_seed=1e3", "rht_seed", "'1e3'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        emu_policy_preset(&p, bad[i].preset, &err);
        ck_assert_int_eq(emu_policy_set(&p, bad[i].set, &err), -1);
        ck_assert_str_eq(err.key, bad[i].key);
        ck_assert_msg(strstr(err.message, bad[i].says), "%s", err.message);
    }
    const struct {
        const char *preset, *set1, *set2, *key, *says;
    } invalid[] = {
        { "nvfp4", "rht=wgrad", "rht_block=32", "rht_block", "32" },
        { "fp16-mpt", "rht=wgrad", NULL, "rht", "q.act_grad is none" },
        { "nvfp4", "rht=wgrad", "q.activation=none", "rht", "q.activation is none" },
        { "nvfp4", "rht=backward", "q.weight=none", "rht", "q.weight is none" },
    };
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        emu_policy_preset(&p, invalid[i].preset, &err);
        ck_assert_int_eq(emu_policy_set(&p, invalid[i].set1, &err), 0);
        if (invalid[i].set2)
            ck_assert_int_eq(emu_policy_set(&p, invalid[i].set2, &err), 0);
        ck_assert_int_eq(emu_policy_validate(&p, &err), -1);
        ck_assert_str_eq(err.key, invalid[i].key);
        ck_assert_msg(strstr(err.message, invalid[i].says), "%s", err.message);
    }
    /* q.weight=none is fine for the weight gradient alone */
    emu_policy_preset(&p, "nvfp4", &err);
    emu_policy_set(&p, "rht=wgrad", &err);
    emu_policy_set(&p, "q.weight=none", &err);
    ck_assert_int_eq(emu_policy_validate(&p, &err), 0);
}
END_TEST

/* A checkpoint carries the transform (a resumed run keeps applying it,
 * with its block and seed), with and without attn_quant before it. */
START_TEST(checkpoint)
{
    char dir[] = "/tmp/emu-rht-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const struct {
        const char *preset, *set;
        emu_rht_apply want;
        bool attn;
    } cases[] = { { "nvfp4", "rht=wgrad", EMU_RHT_WGRAD, false },
                  { "mxfp8", "rht=backward", EMU_RHT_BACKWARD, true },
                  { "nvfp4", NULL, EMU_RHT_NONE, false } };
    for (int k = 0; k < 3; k++) {
        emu_train_config c;
        emu_train_config_default(&c);
        snprintf(c.arch, sizeof c.arch, "mlp:784-16-10");
        snprintf(c.data, sizeof c.data, "synthetic");
        snprintf(c.out_dir, sizeof c.out_dir, "%s/run%d", dir, k);
        c.train_examples = 64;
        c.test_examples = 32;
        c.batch = 32;
        c.max_steps = 1;
        c.quiet = true;
        emu_policy p, p2;
        emu_error err;
        if (emu_policy_preset(&p, cases[k].preset, &err) ||
            (cases[k].set && emu_policy_set(&p, cases[k].set, &err)) ||
            emu_policy_set(&p, "rht_block=4", &err) ||
            emu_policy_set(&p, "rht_seed=77", &err) ||
            (cases[k].attn && emu_policy_set(&p, "attn_quant=yes", &err)) ||
            emu_train(&c, &p, NULL, &err))
            ck_abort_msg("%s: %s: %s", cases[k].preset, err.where, err.message);
        char path[sizeof c.out_dir + 32];
        snprintf(path, sizeof path, "%s/checkpoint.bin", c.out_dir);
        FILE *fp = fopen(path, "rb");
        ck_assert_ptr_nonnull(fp);
        static unsigned char img[1 << 22];
        size_t n = fread(img, 1, sizeof img, fp);
        fclose(fp);
        ck_assert(n > 0 && n < sizeof img);
        emu_train_config c2;
        if (emu_checkpoint_check(img, n, &c2, &p2, &err))
            ck_abort_msg("checkpoint: %s", err.message);
        ck_assert_int_eq(p2.rht, cases[k].want);
        if (cases[k].want != EMU_RHT_NONE)
            ck_assert(p2.rht_block == 4 && p2.rht_seed == 77);
        snprintf(path, sizeof path, "rm -rf '%s'", c.out_dir);
        ck_assert_int_eq(system(path), 0);
    }
    rmdir(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("rht");
    TCase *tc = tcase_create("rht");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, against_mpfr, 0, 2 * N_BLOCKS);
    tcase_add_loop_test(tc, orthogonal, 0, N_BLOCKS);
    tcase_add_test(tc, host_state);
    tcase_add_test(tc, signs);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    TCase *tt = tcase_create("training");
    tcase_set_timeout(tt, 600);
    tcase_add_loop_test(tt, training_orthogonal, 0, 6);
    tcase_add_test(tt, policy_keys);
    tcase_add_test(tt, checkpoint);
    suite_add_tcase(s, tt);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
