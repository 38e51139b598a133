"""exputil.py — helpers shared by the experiments' summarize.py scripts and
the notebooks: reading a run's result files and the quantities computed
from them.  Everything here reads only the files that tools/collect.py
keeps (meta.json, steps.csv, eval.csv, ops.csv, hist.csv,
layers_steps.csv).

Seeds: a run over seeds has one folder per seed, RUN-seedN.  Every reader
here takes the run's name: RUN itself when that folder exists (the older,
single-seed results), else RUN-seed1, so tables and figures of one run's
mechanism read seed 1; seeds(results, RUN) lists every seed's folder.
"""
import json
import os
import re

import numpy as np
import pandas as pd

GRAD_ROLES = ("act_grad", "weight_grad")


def _done(results, folder):
    return os.path.exists(os.path.join(results, folder, "meta.json"))


def folder(results, run):
    """The folder of a run: RUN itself, else RUN-seed1 (see above)."""
    if not _done(results, run) and _done(results, f"{run}-seed1"):
        return f"{run}-seed1"
    return run


def seeds(results, run):
    """{seed: folder} of a run: every RUN-seedN, and the folder RUN (older
    results) under the seed of its meta.json."""
    out = {}
    if os.path.isdir(results):
        for f in os.listdir(results):
            m = re.fullmatch(re.escape(run) + r"-seed(\d+)", f)
            if m and _done(results, f):
                out[int(m.group(1))] = f
    if _done(results, run):
        out.setdefault(int(meta(results, run)["config"]["seed"]), run)
    return dict(sorted(out.items()))


def have(results, run):
    return _done(results, folder(results, run))


def meta(results, run):
    with open(os.path.join(results, folder(results, run), "meta.json")) as f:
        return json.load(f)


def _csv(results, run, name):
    return pd.read_csv(os.path.join(results, folder(results, run), name))


def steps(results, run):
    return _csv(results, run, "steps.csv")


def evals(results, run):
    return _csv(results, run, "eval.csv")


def ops(results, run):
    return _csv(results, run, "ops.csv")


def hist(results, run):
    return _csv(results, run, "hist.csv")


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


def over_seeds(results, variants, measure):
    """One row per (variant, seed) present: variant, seed, run (the folder)
    and the dict measure(folder) returns."""
    rows = []
    for v in variants:
        for seed, f in seeds(results, v).items():
            rows.append({"variant": v, "seed": seed, "run": f, **measure(f)})
    return pd.DataFrame(rows)
