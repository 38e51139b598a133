#!/usr/bin/env python3
"""collect.py RUN_DIR OUT_DIR [--hist]

Copies what the notebooks need from one `emu train` results folder into an
experiment's results/ (run by the experiments' run.sh after each run):

  meta.json, eval.csv, ops.csv     as written
  steps.csv                        at most 500 steps: longer logs are
                                   averaged over windows of consecutive
                                   steps (skipped steps summed, the loss
                                   scale's minimum and maximum kept)
  layers_steps.csv                 at most 300 steps, likewise, per layer
  hist.csv (with --hist)           only the gradient roles (act_grad,
                                   weight_grad), which the histograms use

The checkpoint, ops.json, ops_steps.csv and summary.txt stay behind (in
the experiment's work/ folder): they are large and the notebooks do not
read them.
"""
import math
import os
import shutil
import sys

import pandas as pd


def windows(df, max_rows, by=None):
    """Mean over windows of consecutive steps so that at most max_rows
    steps remain; 'step' becomes the window's last step."""
    steps = df["step"].nunique()
    w = max(1, math.ceil(steps / max_rows))
    if w == 1:
        return df
    df = df.copy()
    df["window"] = df["step"] // w
    keys = ["window"] + ([by] if by else [])
    num = [c for c in df.columns if c not in keys and c != by
           and pd.api.types.is_numeric_dtype(df[c])]
    agg = {c: "mean" for c in num}
    agg["step"] = "max"
    if "skipped" in agg:
        agg["skipped"] = "sum"
    if "epoch" in agg:
        agg["epoch"] = "max"
    out = df.groupby(keys, sort=True).agg(agg).reset_index()
    if "loss_scale" in df.columns:
        g = df.groupby(keys, sort=True)["loss_scale"]
        out["loss_scale_min"] = g.min().values
        out["loss_scale_max"] = g.max().values
    out["window_steps"] = w
    return out.drop(columns=["window"])[
        [c for c in df.columns if c != "window"]
        + [c for c in ("loss_scale_min", "loss_scale_max", "window_steps")
           if c in out.columns]]


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = argv[1], argv[2]
    keep_hist = "--hist" in argv[3:]
    os.makedirs(dst, exist_ok=True)
    for f in ("meta.json", "eval.csv", "ops.csv"):
        shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
    steps = pd.read_csv(os.path.join(src, "steps.csv"))
    windows(steps, 500).to_csv(os.path.join(dst, "steps.csv"),
                                    index=False, float_format="%.6g")
    layers = pd.read_csv(os.path.join(src, "layers_steps.csv"))
    if len(layers):
        windows(layers, 300, by="layer").sort_values(
            ["step", "index"]).to_csv(os.path.join(dst, "layers_steps.csv"),
                                      index=False, float_format="%.6g")
    for stale in ("hist.csv", "ops_steps.csv"):
        if os.path.exists(os.path.join(dst, stale)):
            os.remove(os.path.join(dst, stale))
    if keep_hist:
        hist = pd.read_csv(os.path.join(src, "hist.csv"))
        hist[hist["role"].isin(["act_grad", "weight_grad"])].to_csv(
            os.path.join(dst, "hist.csv"), index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
