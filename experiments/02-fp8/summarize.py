#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 2's numbers, from its result files.

Writes RESULTS_DIR/summary_fp8.csv and summary_predicted.csv and prints
them as Markdown tables.  Called by run.sh after the runs.
"""
import os
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import exputil as eu  # noqa: E402

# E5M2: the smallest subnormal is 2^-16; RNE loses |x| <= 2^-17 (binades
# <= -18 and the tie 2^-17); |x| >= 61440 overflows (binades >= 16 lose
# all, 15 partly).  binary16: |x| <= 2^-25.
E5M2_LOST, FP16_LOST = -18, -26


def fp8_row(results, run):
    o = eu.ops(results, run)
    o = o[eu.is_grad_site(o)]
    s = eu.steps(results, run)
    m = eu.meta(results, run)
    row = {"run": run, "test_accuracy": m["test_accuracy"],
           "skipped_steps": m["skipped_steps"], "steps": m["steps"],
           "final_train_loss": eu.final_loss(s),
           "loss_scale_final": s["loss_scale"].iloc[-1],
           "update_absorbed": eu.absorbed_rate(s)}
    for role in eu.GRAD_ROLES:
        for fmt in ("e5m2", "binary16"):
            d = o[(o["role"] == role) & (o["format"] == fmt)]
            if d["results"].sum():
                row[f"{role}_{fmt}_to_zero"] = d["to_zero"].sum() / d["results"].sum()
        d = o[o["role"] == role]
        row[f"{role}_overflow"] = d["overflow"].sum() / d["results"].sum()
    return row


def main(results):
    rows = [fp8_row(results, "fp32")]
    for rnd in ("sr", "rne"):
        for sc in ("none", "dynamic", "enhanced"):
            run = f"fp8-{rnd}-{sc}"
            if eu.have(results, run):
                rows.append(fp8_row(results, run))
    for run in ("fp8-sr-dynamic-i50", "fp8-sr-enhanced-i50"):
        if eu.have(results, run):
            rows.append(fp8_row(results, run))
    t = pd.DataFrame(rows)
    # variant - FP32, the sign convention of every experiment.
    t["diff_to_fp32_points"] = 100 * (t["test_accuracy"] - t["test_accuracy"].iloc[0])

    # What E5M2 would lose of the FP32 run's gradients at a few scales.
    h = eu.hist(results, "fp32")
    pred = []
    for role in eu.GRAD_ROLES:
        bz = eu.binades(h, role)
        for log2s in (0, 8, 12, 16):
            f = eu.lost_fraction(bz, log2s, E5M2_LOST, 16)
            pred.append({"role": role, "loss_scale": f"2^{log2s}",
                         "zero": f["zero"], "e5m2_lost": f["lost"],
                         "e5m2_overflow": f["overflow"],
                         "fp16_lost": eu.lost_fraction(bz, log2s, FP16_LOST)["lost"]})
    eu.write_tables(results, {"fp8": t, "predicted": pd.DataFrame(pred)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
