"""exputil.py — helpers shared by the experiments' summarize.py scripts and
the notebooks: reading a run's result files and the quantities computed
from them.  Everything here reads only the files that tools/collect.py
keeps (meta.json, steps.csv, eval.csv, ops.csv, hist.csv,
layers_steps.csv).
"""
import json
import os

import numpy as np
import pandas as pd

GRAD_ROLES = ("act_grad", "weight_grad")


def have(results, run):
    return os.path.exists(os.path.join(results, run, "meta.json"))


def meta(results, run):
    with open(os.path.join(results, run, "meta.json")) as f:
        return json.load(f)


def steps(results, run):
    return pd.read_csv(os.path.join(results, run, "steps.csv"))


def ops(results, run):
    return pd.read_csv(os.path.join(results, run, "ops.csv"))


def hist(results, run):
    return pd.read_csv(os.path.join(results, run, "hist.csv"))


def is_grad_site(df):
    """The gradient sites of the backward pass: not the master copy's cast
    of the gradient or its unscaling (binary32 bookkeeping)."""
    return (df["role"].isin(GRAD_ROLES)
            & ~df["site"].str.endswith(".gradm")
            & ~df["site"].str.endswith(".unscale"))


def final_loss(s):
    """Mean training loss over the last tenth of the run (the loss floor)."""
    return s["loss"].iloc[-max(1, len(s) // 10):].mean()


def absorbed_rate(s):
    """Updates that changed nothing over updates made, whole run."""
    return (s["update_absorbed"] * s["updates"]).sum() / s["updates"].sum()


def binades(h, role, which="exact", sites=None):
    """(zero count, total count, Series binade -> count) of a role's
    histogram; binade e holds 2^e <= |x| < 2^(e+1).  Values below binary32's
    range count in binade -200 (lost at any scale of interest)."""
    d = h[(h["which"] == which) & is_grad_site(h) & (h["role"] == role)]
    if sites is not None:
        d = d[d["site"].isin(sites)]
    total = d["count"].sum()
    zero = d.loc[d["bin"] == "zero", "count"].sum()
    below = d.loc[d["bin"] == "below", "count"].sum()
    b = d[d["log2_lower"].notna()].groupby("log2_lower")["count"].sum()
    b.index = b.index.astype(int)
    if below:
        b.loc[-200] = b.get(-200, 0) + below
    return zero, total, b.sort_index()


def lost_fraction(bz, log2_scale, lost_below, overflow_from=None):
    """Fractions of all values that a format loses when the values are
    multiplied by 2^log2_scale (an exact shift of binades): 'lost' = every
    binade e + log2_scale <= lost_below (round-to-nearest-even sends
    |x| <= 2^(emin_sub - 1) to zero, i.e. binades <= emin_sub - 2, plus the
    single tie value 2^(emin_sub - 1) that a histogram cannot resolve),
    'overflow' = binades >= overflow_from."""
    zero, total, b = bz
    e = b.index.values + log2_scale
    c = b.values
    out = {"zero": zero / total, "lost": c[e <= lost_below].sum() / total,
           "lost_of_nonzero": c[e <= lost_below].sum() / max(1, total - zero)}
    if overflow_from is not None:
        out["overflow"] = c[e >= overflow_from].sum() / total
    return out


def markdown(df, floatfmt="{:.4g}"):
    """A DataFrame as a Markdown table (for the READMEs)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |",
             "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        cells = [floatfmt.format(v) if isinstance(v, (float, np.floating)) else str(v)
                 for v in r]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_tables(results, tables):
    """Writes each table to results/summary_<name>.csv and prints it; an
    empty table (its runs are missing) leaves no file."""
    for name, df in tables.items():
        path = os.path.join(results, f"summary_{name}.csv")
        if df.empty:
            if os.path.exists(path):
                os.remove(path)
            continue
        df.to_csv(path, index=False, float_format="%.6g")
        print(f"\n## {name}\n")
        print(markdown(df))
