"""seedstats.py — statistics over seeds for the experiments' summaries:
mean and standard deviation per variant, the paired difference against a
named baseline (same seed, same data order and initial weights) with a
t-based confidence interval, and a verdict on a paper's claim.

Conventions (every experiment uses them):
  difference   variant minus baseline, in the metric's own units (accuracy
               differences in percentage points): a positive accuracy
               difference is better than the baseline, a positive loss
               difference worse.
  interval     mean paired difference +- t(1 - alpha/2, n-1) * sd / sqrt(n),
               two-sided, level 0.95 by default (n = seeds present in both
               runs; sd with n-1 in the denominator).  A 95% two-sided
               interval that excludes a value is a one-sided test at 2.5%.
  verdict      a claim is one of
                 Claim("less", c)     the difference is below c (e.g. "nearest
                                      rounding loses accuracy": less than 0)
                 Claim("greater", c)  the difference is above c
                 Claim("within", a, b) the difference lies in [a, b] (e.g.
                                      "within -0.1..+0.2 points of FP32")
               and the verdict, from the interval [lo, hi]:
                 "reproduces"          less: hi < c;  greater: lo > c;
                                       within: a <= lo and hi <= b
                 "does not reproduce"  less: lo >= c; greater: hi <= c;
                                       within: hi < a or lo > b
                 "inconclusive at this power"  otherwise, and whenever
                                       fewer than 2 seeds are paired.
               Bounds equal up to rounding noise (TOL) count as equal.
               A within-claim that "reproduces" is an equivalence test (the
               two one-sided tests at 2.5% each).  When every paired
               difference is the same (sd 0 up to rounding: accuracies are
               multiples of 1/test examples, so with 2-3 seeds this happens)
               the interval is that single value; finding() says so in its
               "note" column, since the verdict then rests on the seeds
               agreeing exactly rather than on a measured spread.

Only numpy, pandas and the standard library: the t distribution is computed
here (its CDF from the regularized incomplete beta function, the quantile by
bisection on it), not taken from scipy.
"""
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

REPRODUCES = "reproduces"
DOES_NOT = "does not reproduce"
INCONCLUSIVE = "inconclusive at this power"


# --- the t distribution ------------------------------------------------------

def _betacf(a, b, x):
    """The continued fraction of the incomplete beta function (modified
    Lentz), converging fast for x < (a + 1) / (a + b + 2)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            return h
    raise ArithmeticError("incomplete beta: no convergence")


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError("x outside [0, 1]")
    if x == 0.0 or x == 1.0:
        return x
    lnfront = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
               + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lnfront) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lnfront) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df > 0 degrees of freedom."""
    if df <= 0:
        raise ValueError("df must be positive")
    if t == 0:
        return 0.5
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t > 0 else tail


def t_ppf(p, df):
    """The p-quantile of Student's t: the t with t_cdf(t, df) = p, found by
    bisection to the resolution of a double."""
    if not 0.0 < p < 1.0:
        raise ValueError("p outside (0, 1)")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# --- per-variant statistics and paired differences ---------------------------

def describe(values):
    """(n, mean, sd) of a sample; sd uses n - 1 (NaN below 2 values)."""
    v = np.asarray(list(values), dtype=float)
    n = len(v)
    mean = float(v.mean()) if n else math.nan
    sd = float(v.std(ddof=1)) if n >= 2 else math.nan
    return n, mean, sd


@dataclass
class Paired:
    n: int          # seeds present in both
    mean: float     # mean of variant - baseline
    sd: float       # standard deviation of the differences (n - 1)
    lo: float       # confidence interval of the mean difference
    hi: float
    level: float


def paired(variant, baseline, level=0.95):
    """The paired difference variant - baseline over the seeds both have.
    variant, baseline: mappings seed -> value (dict or pandas Series)."""
    v, b = pd.Series(variant, dtype=float), pd.Series(baseline, dtype=float)
    seeds = sorted(set(v.dropna().index) & set(b.dropna().index))
    d = np.array([v[s] - b[s] for s in seeds], dtype=float)
    n, mean, sd = describe(d)
    if n < 2:
        return Paired(n, mean, math.nan, math.nan, math.nan, level)
    half = t_ppf(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return Paired(n, mean, sd, mean - half, mean + half, level)


@dataclass
class Claim:
    kind: str             # "less", "greater" or "within"
    a: float = 0.0        # the threshold (less, greater) or lower bound
    b: float = math.nan   # the upper bound (within)

    def __post_init__(self):
        if self.kind not in ("less", "greater", "within"):
            raise ValueError(f"unknown claim kind {self.kind!r}")
        if self.kind == "within" and not self.a <= self.b:
            raise ValueError("within: need a <= b")

    def text(self):
        if self.kind == "less":
            return f"< {self.a:g}"
        if self.kind == "greater":
            return f"> {self.a:g}"
        return f"in [{self.a:g}, {self.b:g}]"


# Bounds are compared with this tolerance (relative to the larger of 1 and
# the numbers compared): differences of decimal metrics carry rounding noise
# (100 * (0.876 - 0.874) is 0.2000000000000018), which must not decide a
# verdict at a claim's boundary.
TOL = 1e-9


def _eq(x, y):
    return abs(x - y) <= TOL * max(1.0, abs(x), abs(y))


def verdict(p, claim):
    """The verdict on a claim about the difference, from its interval (the
    rule is in the module's docstring; bounds equal within TOL count as
    equal)."""
    if p.n < 2 or math.isnan(p.lo):
        return INCONCLUSIVE
    lo, hi, a, b = p.lo, p.hi, claim.a, claim.b

    def lt(x, y):   # x < y, beyond rounding noise
        return x < y and not _eq(x, y)

    def le(x, y):   # x <= y, up to rounding noise
        return x <= y or _eq(x, y)

    if claim.kind == "less":
        if lt(hi, a):
            return REPRODUCES
        return DOES_NOT if le(a, lo) else INCONCLUSIVE
    if claim.kind == "greater":
        if lt(a, lo):
            return REPRODUCES
        return DOES_NOT if le(hi, a) else INCONCLUSIVE
    if le(a, lo) and le(hi, b):
        return REPRODUCES
    if lt(hi, a) or lt(b, lo):
        return DOES_NOT
    return INCONCLUSIVE


# --- tables for the summaries --------------------------------------------------

def per_variant(runs, metrics, by="variant"):
    """runs: one row per (variant, seed) with the metric columns.  Returns
    one row per variant: seeds, and <metric>_mean, <metric>_sd for each."""
    rows = []
    for name, g in runs.groupby(by, sort=False):
        row = {by: name, "seeds": len(g)}
        for m in metrics:
            _, mean, sd = describe(g[m])
            row[f"{m}_mean"], row[f"{m}_sd"] = mean, sd
        rows.append(row)
    return pd.DataFrame(rows)


def finding(runs, name, metric, variant, baseline, claim, paper="",
            scale=1.0, by="variant", level=0.95):
    """One finding's row: the paired difference variant - baseline of a
    metric (times scale, e.g. 100 for accuracy in points), its interval
    and the verdict on the claim (stated in the same scaled units)."""
    def series(v):
        g = runs[runs[by] == v]
        return pd.Series(scale * g[metric].to_numpy(dtype=float),
                         index=g["seed"].to_numpy())
    p = paired(series(variant), series(baseline), level)
    note = ""
    if p.n >= 2 and p.sd <= 1e-9 * max(1.0, abs(p.mean)):
        note = "every paired difference equal: an interval of no width"
    return {"finding": name, "metric": metric, "variant": variant,
            "baseline": baseline, "seeds": p.n, "diff_mean": p.mean,
            "diff_sd": p.sd, "ci_lo": p.lo, "ci_hi": p.hi,
            "ci_level": level, "claim": claim.text(), "paper": paper,
            "verdict": verdict(p, claim), "note": note}
