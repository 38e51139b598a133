"""Tests of seedstats.py: the t distribution against independent
computations (numerical integration of the density, closed forms for 1 and
2 degrees of freedom, the normal limit), the interval's coverage by
simulation, and the verdict rule on intervals built for each case."""
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import seedstats as ss  # noqa: E402


def t_density(x, df):
    """Student's t density, normalized with the gamma function."""
    lc = (math.lgamma((df + 1) / 2) - math.lgamma(df / 2)
          - 0.5 * math.log(df * math.pi))
    return np.exp(lc - (df + 1) / 2 * np.log1p(x * x / df))


def cdf_by_integration(t, df, n=200001):
    """0.5 + the integral of the density from 0 to t (Simpson's rule)."""
    x = np.linspace(0.0, abs(t), n)
    f = t_density(x, df)
    h = x[1] - x[0]
    s = h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return 0.5 + math.copysign(s, t)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 12, 30, 100])
@pytest.mark.parametrize("t", [-6.0, -2.5, -0.3, 0.7, 1.96, 4.3, 12.0])
def test_cdf_matches_integrated_density(df, t):
    assert ss.t_cdf(t, df) == pytest.approx(cdf_by_integration(t, df),
                                            abs=1e-10)


@pytest.mark.parametrize("p", [0.001, 0.025, 0.1, 0.4, 0.6, 0.9, 0.975, 0.9995])
def test_ppf_closed_forms(p):
    # df = 1 is the Cauchy distribution; df = 2 has a closed-form quantile.
    assert ss.t_ppf(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)),
                                           rel=1e-11, abs=1e-12)
    assert ss.t_ppf(p, 2) == pytest.approx(
        (2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-11, abs=1e-12)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 19, 50])
def test_ppf_inverts_the_integrated_cdf(df):
    # The 97.5% quantile (the one the intervals use) makes the integrated
    # density 0.975, and lies above the normal's (heavier tails).
    q = ss.t_ppf(0.975, df)
    assert cdf_by_integration(q, df) == pytest.approx(0.975, abs=1e-9)
    z = normal_ppf(0.975)
    assert q > z


def normal_ppf(p):
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def test_ppf_tends_to_the_normal():
    z = normal_ppf(0.975)
    prev = math.inf
    for df in (10, 100, 1000, 100000):
        q = ss.t_ppf(0.975, df)
        assert z < q < prev      # decreasing toward the normal quantile
        prev = q
    assert ss.t_ppf(0.975, 100000) == pytest.approx(z, abs=1e-4)


def test_ppf_symmetry_and_roundtrip():
    for df in (1, 3, 8):
        for p in (0.01, 0.3, 0.77):
            q = ss.t_ppf(p, df)
            assert ss.t_ppf(1 - p, df) == pytest.approx(-q, rel=1e-12)
            assert ss.t_cdf(q, df) == pytest.approx(p, abs=1e-14)
    assert ss.t_ppf(0.5, 4) == 0.0


def test_paired_interval_by_hand():
    base = {1: 0.80, 2: 0.82, 3: 0.81, 4: 0.79}
    var = {1: 0.78, 2: 0.81, 3: 0.80, 4: 0.76}
    d = np.array([var[s] - base[s] for s in base])
    p = ss.paired(var, base)
    half = ss.t_ppf(0.975, 3) * d.std(ddof=1) / 2
    assert p.n == 4
    assert p.mean == pytest.approx(d.mean(), abs=1e-15)
    assert p.lo == pytest.approx(d.mean() - half, abs=1e-15)
    assert p.hi == pytest.approx(d.mean() + half, abs=1e-15)


def test_paired_by_seed_not_position():
    # Seeds are matched by value; a seed only one side has is left out.
    base = {3: 10.0, 1: 1.0, 2: 5.0, 9: 100.0}
    var = {1: 2.0, 2: 6.0, 3: 11.0, 7: -50.0}
    p = ss.paired(var, base)
    assert p.n == 3 and p.mean == 1.0 and p.sd == 0.0
    assert p.lo == 1.0 and p.hi == 1.0


def test_interval_coverage_by_simulation():
    # With 3 seeds the 95% t interval covers the true mean ~95% of the
    # time; the normal quantile (1.96) would cover only ~81%.
    rng = np.random.default_rng(20261127)
    trials, cover = 4000, 0
    for _ in range(trials):
        d = rng.normal(0.3, 1.0, size=3)
        p = ss.paired(dict(enumerate(d)), dict(enumerate(np.zeros(3))))
        cover += p.lo <= 0.3 <= p.hi
    assert abs(cover / trials - 0.95) < 0.015


def test_too_few_seeds_is_inconclusive():
    p = ss.paired({1: 0.5}, {1: 0.1})
    assert p.n == 1 and math.isnan(p.lo)
    assert ss.verdict(p, ss.Claim("greater", 0)) == ss.INCONCLUSIVE


def interval(lo, hi, n=3):
    return ss.Paired(n, (lo + hi) / 2, 1.0, lo, hi, 0.95)


@pytest.mark.parametrize("lo,hi,claim,want", [
    (-2.0, -0.5, ss.Claim("less", 0), ss.REPRODUCES),
    (-2.0, 0.5, ss.Claim("less", 0), ss.INCONCLUSIVE),
    (0.0, 0.0, ss.Claim("less", 0), ss.DOES_NOT),      # identical runs
    (0.1, 0.9, ss.Claim("less", 0), ss.DOES_NOT),
    (-2.0, -1.5, ss.Claim("less", -1), ss.REPRODUCES),
    (-2.0, -0.5, ss.Claim("less", -1), ss.INCONCLUSIVE),
    (0.2, 0.4, ss.Claim("greater", 0), ss.REPRODUCES),
    (-0.2, 0.4, ss.Claim("greater", 0), ss.INCONCLUSIVE),
    (-0.4, -0.2, ss.Claim("greater", 0), ss.DOES_NOT),
    (-0.05, 0.15, ss.Claim("within", -0.1, 0.2), ss.REPRODUCES),
    (-0.1, 0.2, ss.Claim("within", -0.1, 0.2), ss.REPRODUCES),
    (-0.3, 0.15, ss.Claim("within", -0.1, 0.2), ss.INCONCLUSIVE),
    (-0.9, -0.3, ss.Claim("within", -0.1, 0.2), ss.DOES_NOT),
    (0.25, 0.6, ss.Claim("within", -0.1, 0.2), ss.DOES_NOT),
])
def test_verdict_rule(lo, hi, claim, want):
    assert ss.verdict(interval(lo, hi), claim) == want


def test_rounding_noise_does_not_decide():
    # 100 * (0.876 - 0.874) is not exactly 0.2: at the band's edge the
    # interval still counts as inside it, and the identical-runs case
    # (exactly 0, or 0 up to noise) as not below 0.
    d = 100 * (0.876 - 0.874)
    assert d != 0.2
    assert ss.verdict(interval(d, d), ss.Claim("within", -0.1, 0.2)) == ss.REPRODUCES
    assert ss.verdict(interval(-d, -d), ss.Claim("within", -0.2, 0.1)) == ss.REPRODUCES
    tiny = 100 * (0.3 - 0.1 - 0.2)
    assert tiny != 0
    assert ss.verdict(interval(tiny, tiny), ss.Claim("less", 0)) == ss.DOES_NOT
    assert ss.verdict(interval(tiny, tiny), ss.Claim("greater", 0)) == ss.DOES_NOT
    # A real margin beyond the tolerance still decides.
    assert ss.verdict(interval(0.2001, 0.3), ss.Claim("within", -0.1, 0.2)) == ss.DOES_NOT


def test_finding_row_and_per_variant():
    import pandas as pd
    runs = pd.DataFrame({
        "variant": ["fp32"] * 3 + ["bf16"] * 3,
        "seed": [1, 2, 3, 1, 2, 3],
        "acc": [0.870, 0.875, 0.872, 0.860, 0.866, 0.861]})
    row = ss.finding(runs, "bf16 loses", "acc", "bf16", "fp32",
                     ss.Claim("less", 0), scale=100)
    d = 100 * np.array([0.860 - 0.870, 0.866 - 0.875, 0.861 - 0.872])
    half = ss.t_ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    assert row["seeds"] == 3
    assert row["diff_mean"] == pytest.approx(d.mean(), abs=1e-12)
    assert row["ci_hi"] == pytest.approx(d.mean() + half, abs=1e-12)
    assert row["verdict"] == ss.REPRODUCES
    assert row["note"] == ""
    # Equal differences up to rounding (0.4 - 0.8 vs 0.5 - 0.9, scaled):
    # an interval of no width, flagged.
    same = pd.DataFrame({"variant": ["a", "a", "b", "b"], "seed": [1, 2, 1, 2],
                         "acc": [0.8, 0.9, 0.4, 0.5]})
    row = ss.finding(same, "b < a", "acc", "b", "a", ss.Claim("less", 0), scale=100)
    assert row["diff_sd"] < 1e-12 and row["verdict"] == ss.REPRODUCES
    assert "no width" in row["note"]
    t = ss.per_variant(runs, ["acc"])
    assert list(t["variant"]) == ["fp32", "bf16"]
    assert t.loc[0, "acc_mean"] == pytest.approx(np.mean([0.870, 0.875, 0.872]))
    assert t.loc[1, "acc_sd"] == pytest.approx(np.std([0.860, 0.866, 0.861], ddof=1))
