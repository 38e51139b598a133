/*
 * nn_layerwise.c — the per-layer loss-scale factor of Zhao et al.,
 * "Adaptive Loss Scaling for Mixed Precision Training" (2019), for the
 * LAYERWISE scaling kind.  emu_model_backward (nn_model.c) calls it for
 * each GEMM layer (linear, convolution) right before the layer's
 * input-gradient GEMM dX = dY . W, and tests/test_layerwise.c checks it
 * against MPFR.
 *
 * The rule, every iteration and without feedback from earlier steps:
 * treat the products dY_ij W_jk that the GEMM sums as drawn from one
 * zero-mean Gaussian whose variance is that of the product of two
 * independent variables, (sigma_g^2 + mu_g^2)(sigma_W^2 + mu_W^2) — the
 * product of the operands' mean squares.  At a factor alpha, a fraction
 * erf(u_min / (sqrt 2 alpha sigma)) of them lies below u_min, the smallest
 * positive value of the gradient's format: the expected underflow rate.
 * alpha must bring it to the target, and must keep the largest possible
 * sum, K max|dY| max|W| (K the GEMM's reduction length), at most the
 * format's largest finite value.  Then
 *
 *   alpha = min( max(lower, 1), upper, layer_max, total_max / carried )
 *
 * with `carried` the loss scale times the factors the incoming gradient
 * already carries (the loss multiplier of the shifted experiments is not
 * a scale and is not counted), all powers of two.  The scale a gradient
 * carries therefore never falls from the output toward the input: it
 * grows by construction until a cap stops it.
 *
 * Where we had to choose (the paper and the authors' released code leave
 * these open or differ from what a bit-exact emulator needs):
 * - Powers of two: the lower (underflow) bound is rounded UP — the
 *   smallest power of two whose expected rate is at most the target, so
 *   that the target is met as the paper states it — and the upper bounds
 *   DOWN; the authors' code rounds the bounded value down, which can miss
 *   the target by up to a factor 2 in alpha.  The power of two is found by
 *   evaluating erf at each candidate, not from erfinv, so that the choice
 *   is exactly the one the definition makes (up to erf's last bit).
 * - "At least 1" loses to "nothing overflows": where the overflow bound
 *   is below 1 the factor goes below 1 (as in the authors' code), the only
 *   case in which the carried scale falls.
 * - The statistics are those of the GEMM's operands as they are stored
 *   (dY already carrying its scale, the compute copy of W), in binary64;
 *   an all-zero operand (sigma 0) has nothing to rescue: factor 1 (or
 *   less, if the overflow bound says so — it cannot, with a zero operand).
 * - The model is the one of the paper: the products, not the sum the GEMM
 *   rounds.  Under independence the sum's spread is sqrt(K) times the
 *   products', so the output's underflow rate (what the choke point
 *   measures, at site <layer>.dinput) lies at or below the target.
 * - Defaults (preset "layerwise"): target 1e-3, layer_max 16, total_max
 *   1024, the values of the authors' released code (n_uf_threshold,
 *   scale_upper_bound, accum_upper_bound); loss scale 1.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/nn.h"

#include <math.h>

#include "nn_internal.h"

void emu_layerwise_operand_stats(emu_layerwise_stats *s, const emu_tensor *dy,
                                 const emu_tensor *w, double k)
{
    const emu_tensor *ts[2] = { dy, w };
    double ms[2], amax[2];
    for (int t = 0; t < 2; t++) {
        double s2 = 0.0, mx = 0.0;
        for (size_t j = 0; j < ts[t]->n; j++) {
            double v = ts[t]->data[j]; /* squares of binary32 are exact */
            s2 += v * v;
            mx = fmax(mx, fabs(v));
        }
        ms[t] = ts[t]->n ? s2 / (double)ts[t]->n : 0.0;
        amax[t] = mx;
    }
    s->g_ms = ms[0];
    s->w_ms = ms[1];
    s->g_amax = amax[0];
    s->w_amax = amax[1];
    s->k = k;
}

/* The expected fraction of products below u at factor 2^e. */
static double rate_at(double u, double sigma, int e)
{
    return erf(u / (sqrt(2.0) * ldexp(sigma, e)));
}

/* The largest power of two at most x (x > 0, finite). */
static double pow2_below(double x)
{
    int e;
    frexp(x, &e);
    return ldexp(1.0, e - 1);
}

double emu_layerwise_lower(double sigma, double u, double target)
{
    if (!(sigma > 0.0) || !isfinite(sigma))
        return 1.0;
    /* A first guess from erf(x) ~ 2x / sqrt(pi) for small x, then the
     * exponent walked to the smallest e >= 0 with rate_at(e) <= target
     * (the rate falls as e grows). */
    double x0 = target * 0.886226925452758; /* sqrt(pi) / 2 */
    int e;
    frexp(u / (sqrt(2.0) * sigma * x0), &e);
    if (e < 0)
        e = 0;
    if (e > 2000)
        e = 2000;
    while (e > 0 && rate_at(u, sigma, e - 1) <= target)
        e--;
    while (e < 2100 && rate_at(u, sigma, e) > target)
        e++;
    return ldexp(1.0, e);
}

double emu_layerwise_factor(const emu_layerwise_stats *s, const emu_format *f,
                            double target, double layer_max, double room)
{
    double sigma = sqrt(s->g_ms) * sqrt(s->w_ms);
    double a = emu_layerwise_lower(sigma, f->min_value, target);
    double big = s->k * s->g_amax * s->w_amax; /* the largest |sum| possible */
    if (!isfinite(big) || !isfinite(sigma))
        return 1.0; /* an operand is not finite: no factor helps (the step
                       is skipped for its non-finite gradients) */
    if (big > 0.0) {
        double upper = f->max / big;
        if (upper > 0.0) /* (0 only if big is near DBL_MAX) */
            a = fmin(a, pow2_below(upper));
    }
    return fmin(fmin(a, layer_max), room);
}
