/* ops_util.c — argument checks, scratch memory and the GEMM results' chunk
 * producers shared by the op files. */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"

int emu_check_tensor(emu_ctx *ctx, const char *site, const char *what,
                     const emu_tensor *t)
{
    if (!t || !t->data || t->n == 0 || t->ndim < 1)
        return emu_ctx_fail(ctx, site, "%s: tensor not allocated", what);
    if (!emu_format_is_validated(&t->fmt))
        return emu_ctx_fail(ctx, site, "%s '%s': format %s was changed after "
                            "emu_format_validate", what, t->name, t->fmt.name);
    if (!t->fmt.fits_carrier)
        return emu_ctx_fail(ctx, site, "%s '%s': format %s is not held by "
                            "the binary32 carrier", what, t->name, t->fmt.name);
    return 0;
}

int emu_check_rounding(emu_ctx *ctx, const char *site,
                       const emu_rounding *rnd)
{
    if (!rnd)
        return emu_ctx_fail(ctx, site, "no rounding given (rnd is NULL; "
                            "a zero emu_rounding is nearest-even)");
    if ((unsigned)rnd->mode >= EMU_RND_COUNT)
        return emu_ctx_fail(ctx, site, "unknown rounding mode %d",
                            (int)rnd->mode);
    return 0;
}

int emu_check_accum(emu_ctx *ctx, const char *site, const emu_accum *accum)
{
    if (!accum)
        return emu_ctx_fail(ctx, site, "no accumulator model given (accum "
                            "is NULL; emu_accum_default fills the default)");
    emu_error e;
    if (emu_accum_validate(accum, &e))
        return emu_ctx_failc(ctx, e.code, site, "accumulator: %s%s%s", e.key,
                             e.key[0] ? ": " : "", e.message);
    return 0;
}

int emu_check_same_shape(emu_ctx *ctx, const char *site, const char *what_a,
                         const emu_tensor *a, const char *what_b,
                         const emu_tensor *b)
{
    if (emu_tensor_same_shape(a, b))
        return 0;
    char sa[96], sb[96];
    emu_tensor_shape_string(a, sa, sizeof sa);
    emu_tensor_shape_string(b, sb, sizeof sb);
    return emu_ctx_fail(ctx, site, "shape mismatch: %s '%s' is %s, %s '%s' "
                        "is %s", what_a, a->name, sa, what_b, b->name, sb);
}

double *emu_scratch(emu_ctx *ctx, const char *site, size_t n)
{
    double *p = n <= SIZE_MAX / sizeof(double) ? malloc(n ? n * sizeof *p : 1)
                                               : NULL;
    if (!p)
        emu_ctx_failc(ctx, EMU_ENOMEM, site, "out of memory for %zu scratch values", n);
    return p;
}

bool emu_tensors_overlap(const emu_tensor *a, const emu_tensor *b)
{
    if (!a || !b)
        return false;
    uintptr_t a0 = (uintptr_t)a->data, a1 = (uintptr_t)(a->data + a->n);
    uintptr_t b0 = (uintptr_t)b->data, b1 = (uintptr_t)(b->data + b->n);
    return a0 < b1 && b0 < a1;
}

bool emu_store_early_ok(const emu_tensor *out, const float *in, size_t n)
{
    if (!in || in == out->data)
        return true;
    uintptr_t a0 = (uintptr_t)out->data, a1 = (uintptr_t)(out->data + out->n);
    uintptr_t b0 = (uintptr_t)in, b1 = (uintptr_t)(in + n);
    return !(a0 < b1 && b0 < a1);
}

int emu_shape_fail(emu_ctx *ctx, const char *site, const char *what,
                   const emu_tensor *t, const char *want)
{
    char s[96];
    emu_tensor_shape_string(t, s, sizeof s);
    return emu_ctx_fail(ctx, site, "%s '%s' is %s, expected %s", what,
                        t->name, s, want);
}

/* Whether some |v[i]| has magnitude bits above limit, a signed compare
 * of the bits (SSE2 has it in 32-bit lanes) ORed over runs of 64, which
 * vectorises at every level: above 0x7f800000 is a NaN, above 0x7f7fffff
 * is not finite.  The scans read whole GEMM outputs, gradients and
 * velocities on the caller's thread, where isnan's and isfinite's
 * early-exit loops were scalar. */
static EMU_KERNEL_INLINE bool mag_above(const float *v, size_t n,
                                        int32_t limit)
{
    enum { RUN = 64 };
    size_t i = 0;
    for (; i + RUN <= n; i += RUN) {
        uint32_t u[RUN];
        int32_t any = 0;
        memcpy(u, v + i, sizeof u);
        for (int k = 0; k < RUN; k++)
            any |= -(int32_t)((int32_t)(u[k] & 0x7fffffffu) > limit);
        if (any)
            return true;
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, v + i, sizeof u);
        if ((int32_t)(u & 0x7fffffffu) > limit)
            return true;
    }
    return false;
}

EMU_TARGET_CLONES
static bool any_nan_scan(const float *v, size_t n)
{
    return mag_above(v, n, 0x7f800000);
}

bool emu_any_nan(const float *v, size_t n)
{
    return any_nan_scan(v, n);
}

/* The NaN scan for binary64 values. */
EMU_TARGET_CLONES
static bool any_nan64_scan(const double *v, size_t n)
{
    enum { RUN = 64 };
    size_t i = 0;
    for (; i + RUN <= n; i += RUN) {
        uint64_t u[RUN], any = 0;
        memcpy(u, v + i, sizeof u);
        for (int k = 0; k < RUN; k++)
            any |= (uint64_t)((int64_t)(u[k] & ~(1ull << 63)) >
                              (int64_t)0x7ff0000000000000);
        if (any)
            return true;
    }
    for (; i < n; i++)
        if (isnan(v[i]))
            return true;
    return false;
}

bool emu_any_nan64(const double *v, size_t n)
{
    return any_nan64_scan(v, n);
}

EMU_TARGET_CLONES
static bool all_finite_scan(const float *v, size_t n)
{
    return !mag_above(v, n, 0x7f7fffff);
}

bool emu_all_finite(const float *v, size_t n)
{
    return all_finite_scan(v, n);
}

void emu_scale_pairs(double *hi, double *lo, bool lo_valid, size_t n,
                     double alpha)
{
    if (alpha == 1.0 && (lo_valid || !lo))
        return;
    if (emu_is_pow2(alpha)) {
        for (size_t i = 0; i < n; i++) {
            hi[i] *= alpha; /* exact: binary64 has the range */
            if (lo)
                lo[i] = lo_valid ? lo[i] * alpha : 0.0;
        }
        return;
    }
    mpfr_t x, t;
    bool init = false;
    for (size_t i = 0; i < n; i++) {
        const double h = hi[i], l = lo_valid ? lo[i] : 0.0;
        if (!isfinite(h) || h == 0.0 || l == 0.0) {
            double p = h * alpha;
            hi[i] = p;
            /* Exact residual; products of binary32 data stay far above
             * binary64's underflow, where fma would lose it. */
            lo[i] = isfinite(p) && p != 0.0 ? fma(h, alpha, -p) : 0.0;
            continue;
        }
        if (!init) {
            mpfr_inits2(256, x, t, (mpfr_ptr)0);
            init = true;
        }
        mpfr_set_d(x, h, MPFR_RNDN);
        mpfr_mul_d(x, x, alpha, MPFR_RNDN);  /* 106 bits: exact */
        mpfr_set_d(t, l, MPFR_RNDN);
        mpfr_mul_d(t, t, alpha, MPFR_RNDN);
        mpfr_add(x, x, t, MPFR_RNDN);        /* |l| <= ulp(h)/2: exact */
        double p = mpfr_get_d(x, MPFR_RNDN);
        mpfr_sub_d(x, x, p, MPFR_RNDN);
        hi[i] = p;
        lo[i] = mpfr_get_d(x, MPFR_RNDN);
    }
    if (init)
        mpfr_clears(x, t, (mpfr_ptr)0);
}

/* ---- GEMM results as chunk producers ------------------------------------- */

/* Walks the sources of outputs i0 .. i0+m-1 in the NCHW transpose of a
 * (N*P, C) GEMM: output (n*C + c)*P + p reads (n*P + p)*C + c.  BODY sees
 * the output's j and its source src. */
#define GEMM_SRC_NCHW(s, i0, m, BODY)                                       \
    do {                                                                    \
        const size_t C_ = (s)->tc, P_ = (s)->tp;                            \
        size_t n_ = (i0) / (C_ * P_), c_ = (i0) / P_ % C_, p_ = (i0) % P_;  \
        for (size_t j = 0; j < (m); j++) {                                  \
            const size_t src = (n_ * P_ + p_) * C_ + c_;                    \
            BODY;                                                           \
            if (++p_ == P_) {                                               \
                p_ = 0;                                                     \
                if (++c_ == C_) {                                           \
                    c_ = 0;                                                 \
                    n_++;                                                   \
                }                                                           \
            }                                                               \
        }                                                                   \
    } while (0)

bool emu_gemm_src_f32(const emu_gemm_src *s)
{
    return s->f && s->alpha == 1.0;
}

int emu_gemm_src_fill(const emu_gemm_src *s, size_t i0, size_t m, double *hi,
                      double *lo)
{
    if (!s->f) {
        if (s->tc)
            GEMM_SRC_NCHW(s, i0, m, {
                hi[j] = s->hi[src];
                if (s->lo)
                    lo[j] = s->lo[src];
            });
        else
            for (size_t j = 0; j < m; j++) {
                hi[j] = s->hi[i0 + j];
                if (s->lo)
                    lo[j] = s->lo[i0 + j];
            }
        return s->lo != NULL;
    }
    if (s->tc)
        GEMM_SRC_NCHW(s, i0, m, { hi[j] = s->f[src]; });
    else
        for (size_t j = 0; j < m; j++)
            hi[j] = s->f[i0 + j];
    /* as emu_scale_pairs scales the whole array: its low parts (TwoProduct
     * residuals) exist only for an alpha that is not a power of two */
    const bool pairs = !emu_is_pow2(s->alpha);
    emu_scale_pairs(hi, pairs ? lo : NULL, false, m, s->alpha);
    return pairs;
}

void emu_gemm_src_fill32(const emu_gemm_src *s, size_t i0, size_t m, float *v)
{
    if (!s->tc)
        memcpy(v, s->f + i0, m * sizeof *v);
    else
        GEMM_SRC_NCHW(s, i0, m, { v[j] = s->f[src]; });
}

/* Nothing measured and binary32 outputs under nearest-even: the host's
 * conversion of each value is the choke point's rounding (IEEE binary32,
 * the host in its default state under EMU_HOSTFP_GUARD), NaN made the
 * canonical one as the choke point writes it; a value with a low part
 * goes through emu_round2.  Then the commit without values, which only
 * advances the op index.  Otherwise emu_commit itself. */
/* The conversion loop, vectorised (a compare and a blend for the NaN). */
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic",
                       "fp-contract=off")))
static void host_f32(float *out, const double *v, size_t m)
{
    for (size_t j = 0; j < m; j++) {
        const float f = (float)v[j];
        out[j] = f != f ? NAN : f;
    }
}

int emu_commit_direct(emu_ctx *ctx, const emu_op_out *o)
{
    if (!o->fill || !o->store_early || emu_commit_measures(ctx) ||
        !o->rnd || o->rnd->mode != EMU_RNE ||
        !emu_round_is_identity_f32(&o->out->fmt, o->rnd))
        return emu_commit(ctx, o);
    double hi[EMU_COMMIT_CHUNK], lo[EMU_COMMIT_CHUNK];
    float *out = o->out->data;
    const size_t n = o->out->n;
    for (size_t i0 = 0; i0 < n; i0 += EMU_COMMIT_CHUNK) {
        const size_t m = n - i0 < EMU_COMMIT_CHUNK ? n - i0 : EMU_COMMIT_CHUNK;
        if (o->fill(o->op, i0, m, hi, lo)) {
            emu_status st;
            for (size_t j = 0; j < m; j++)
                out[i0 + j] = (float)emu_round2_unguarded(&o->out->fmt, hi[j],
                                                          lo[j], o->rnd, &st);
            continue;
        }
        host_f32(out + i0, hi, m);
    }
    emu_op_out bare = { .site = o->site, .kind = o->kind, .out = o->out,
                        .rnd = o->rnd };
    return emu_commit(ctx, &bare);
}
