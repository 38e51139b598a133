#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 1's numbers, from its result files.

Writes RESULTS_DIR/summary_scaling.csv, summary_shift.csv,
summary_master.csv and summary_rule.csv (the mechanism, from seed 1's runs:
exputil reads RUN-seed1, or the older single-seed folder RUN), and over
every seed summary_runs.csv (per run), summary_variants.csv (mean and sd
per run name) and summary_findings.csv (per finding of the paper: the
paired difference variant - baseline in accuracy points, its 95% t
interval and the verdict; tools/seedstats.py states the rule), and prints
them as Markdown tables (the README quotes them).  Called by run.sh after
the runs.
"""
import os
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import exputil as eu  # noqa: E402
import seedstats as ss  # noqa: E402

SCALES = (1, 8, 1024, 32768)
SHIFT = {"plain": 0, "shifted": -12}
# binary16: the smallest subnormal is 2^-24; RNE sends |x| <= 2^-25 to zero
# (binades <= -26, and the tie 2^-25 itself); |x| >= 65520 overflows.
FP16_LOST_RNE, FP16_LOST_LT24, FP16_OVERFLOW = -26, -25, 16


def measured(results, run):
    """What an FP16 run itself saw, over the whole run (ops.csv totals)."""
    o = eu.ops(results, run)
    o = o[eu.is_grad_site(o)]
    m = eu.meta(results, run)
    row = {"test_accuracy": m["test_accuracy"], "skipped_steps": m["skipped_steps"],
           "final_train_loss": eu.final_loss(eu.steps(results, run))}
    for role in eu.GRAD_ROLES:
        d = o[o["role"] == role]
        row[f"{role}_to_zero"] = d["to_zero"].sum() / d["results"].sum()
        row[f"{role}_overflow"] = d["overflow"].sum() / d["results"].sum()
    return row


def scaling_table(results):
    h = eu.hist(results, "fp32")
    bz = {role: eu.binades(h, role) for role in eu.GRAD_ROLES}
    fp32_acc = eu.meta(results, "fp32")["test_accuracy"]
    rows = []
    for variant, shift in SHIFT.items():
        for scale in SCALES + ("dynamic",):
            run = f"fp16-{variant}-" + (f"s{scale}" if scale != "dynamic" else "dynamic")
            row = {"variant": variant, "loss_scale": scale}
            for role in eu.GRAD_ROLES:
                if scale == "dynamic":
                    continue
                ls = int(np.log2(scale)) + shift
                rne = eu.lost_fraction(bz[role], ls, FP16_LOST_RNE, FP16_OVERFLOW)
                lt24 = eu.lost_fraction(bz[role], ls, FP16_LOST_LT24)
                row[f"fp32hist_{role}_zero"] = rne["zero"]
                row[f"fp32hist_{role}_lost_rne"] = rne["lost"]
                row[f"fp32hist_{role}_lost_lt2^-24"] = lt24["lost"]
                row[f"fp32hist_{role}_overflow"] = rne["overflow"]
            if eu.have(results, run):
                row.update(measured(results, run))
            row["fp32_test_accuracy"] = fp32_acc
            rows.append(row)
    return pd.DataFrame(rows)


def shift_table(results):
    """FP16 without loss scaling as the loss multiplier shrinks the
    gradients further: where does training break?"""
    h = eu.hist(results, "fp32")
    bz = {role: eu.binades(h, role) for role in eu.GRAD_ROLES}
    rows = []
    for sh in (0, 12, 16, 20, 24):
        run = {0: "fp16-plain-s1", 12: "fp16-shifted-s1"}.get(sh, f"fp16-shift{sh}-s1")
        if not eu.have(results, run):
            continue
        row = {"loss_multiplier": f"2^-{sh}"}
        for role in eu.GRAD_ROLES:
            row[f"fp32hist_{role}_lost_rne"] = eu.lost_fraction(
                bz[role], -sh, FP16_LOST_RNE)["lost"]
        row.update(measured(results, run))
        rows.append(row)
    return pd.DataFrame(rows)


def master_table(results):
    pairs = [("recipe: momentum 0.9, cosine lr 0.05 to 5e-4, dynamic scaling",
              "fp16-plain-dynamic", "fp16-nomaster"),
             ("plain SGD, lr 0.005, scale 1024", "sgd0.005-master", "sgd0.005-nomaster"),
             ("plain SGD, lr 0.001, scale 1024", "sgd0.001-master", "sgd0.001-nomaster")]
    rows = []
    for name, master, nomaster in pairs:
        if not (eu.have(results, master) and eu.have(results, nomaster)):
            continue
        row = {"setting": name}
        for tag, run in (("master", master), ("nomaster", nomaster)):
            s = eu.steps(results, run)
            row[f"{tag}_absorbed"] = eu.absorbed_rate(s)
            row[f"{tag}_test_accuracy"] = eu.meta(results, run)["test_accuracy"]
            row[f"{tag}_final_train_loss"] = eu.final_loss(s)
        # variant - baseline, as everywhere: no master copy - master copy.
        row["diff_nomaster_minus_master_points"] = 100 * (
            row["nomaster_test_accuracy"] - row["master_test_accuracy"])
        rows.append(row)
    return pd.DataFrame(rows)


def rule_table(results):
    p = os.path.join(results, "update_rule_steps.csv")
    if not os.path.exists(p):
        return pd.DataFrame()
    s = pd.read_csv(p).sum(numeric_only=True)
    r = pd.read_csv(os.path.join(results, "update_rule_ratio.csv"))

    def absorbed_where(mask):
        return r.loc[mask, "absorbed"].sum() / max(1, r.loc[mask, "updates"].sum())

    nonzero_w = s["updates"] - s["zero_w"]
    return pd.DataFrame([{
        "updates": int(s["updates"]),
        "absorbed_rate": s["absorbed"] / s["updates"],
        "ratio_lt2^-11_rate": s["rule11"] / nonzero_w,
        "ratio_lt2^-12_rate": s["rule12"] / nonzero_w,
        # Of the updates that changed nothing, how many the rule predicted:
        "absorbed_predicted_by_rule": s["absorbed_and_rule11"]
        / max(1, s["absorbed"] - s["zero_w_stuck"]),
        # Of the updates the rule flags, how many changed nothing:
        "rule_flagged_absorbed": s["absorbed_and_rule11"] / max(1, s["rule11"]),
        "absorbed_ratio_below_2^-12": absorbed_where(r.log2_ratio < -12),
        "absorbed_ratio_in_[2^-12,2^-11)": absorbed_where(r.log2_ratio == -12),
        "absorbed_ratio_from_2^-11": absorbed_where(r.log2_ratio >= -11),
        "zero_weights_stuck": int(s["zero_w_stuck"]),
    }])


# The training runs (each over seeds).
RUNS = (["fp32"]
        + [f"fp16-{v}-{s}" for v in SHIFT
           for s in [f"s{x}" for x in SCALES] + ["dynamic"]]
        + [f"fp16-shift{k}-s1" for k in (16, 20, 24)]
        + ["fp16-nomaster"]
        + [f"sgd{lr}-{m}" for lr in ("0.005", "0.001")
           for m in ("master", "nomaster")])

# "Matches FP32": the paper gives no band; ours is +-0.5 accuracy points.
MATCH = 0.5
# The findings, each a claim about variant - baseline in accuracy points.
FINDINGS = [
    ("loss scale 8 matches FP32", "fp16-plain-s8", "fp32",
     ss.Claim("within", -MATCH, MATCH), "SSD: scale 8 matches FP32"),
    ("unscaled FP16 matches FP32 (plain loss)", "fp16-plain-s1", "fp32",
     ss.Claim("within", -MATCH, MATCH), "-"),
    ("unscaled FP16 loses accuracy with gradients 2^12x smaller",
     "fp16-shifted-s1", "fp32", ss.Claim("less", 0),
     "SSD without scaling: diverges"),
    ("a loss scale (2^15) recovers FP32 with gradients 2^12x smaller",
     "fp16-shifted-s32768", "fp32", ss.Claim("within", -MATCH, MATCH),
     "scaling recovers FP32"),
    ("dynamic scaling recovers FP32 with gradients 2^12x smaller",
     "fp16-shifted-dynamic", "fp32", ss.Claim("within", -MATCH, MATCH),
     "scaling recovers FP32"),
    ("unscaled FP16 fails with gradients 2^20x smaller (ours)",
     "fp16-shift20-s1", "fp32", ss.Claim("less", -10), "-"),
    ("no master copy loses accuracy (recipe, lr to 5e-4)", "fp16-nomaster",
     "fp16-plain-dynamic", ss.Claim("less", 0),
     "speech: 80% relative accuracy lost"),
    ("no master copy loses accuracy (SGD lr 0.005)", "sgd0.005-nomaster",
     "sgd0.005-master", ss.Claim("less", 0), "speech: 80% relative accuracy lost"),
    ("no master copy loses accuracy (SGD lr 0.001)", "sgd0.001-nomaster",
     "sgd0.001-master", ss.Claim("less", 0), "speech: 80% relative accuracy lost"),
]


def seed_tables(results):
    def measure(run):
        return {"test_accuracy": eu.meta(results, run)["test_accuracy"],
                "final_train_loss": eu.final_loss(eu.steps(results, run))}
    runs = eu.over_seeds(results, RUNS, measure)
    if runs.empty:
        return runs, runs, runs
    per = ss.per_variant(runs, ["test_accuracy", "final_train_loss"])
    findings = pd.DataFrame([
        ss.finding(runs, name, "test_accuracy", variant, base, claim, paper,
                   scale=100)
        for name, variant, base, claim, paper in FINDINGS
        if (runs.variant == variant).any() and (runs.variant == base).any()])
    return runs, per, findings


def main(results):
    runs, per, findings = seed_tables(results)
    eu.write_tables(results, {"scaling": scaling_table(results),
                              "shift": shift_table(results),
                              "master": master_table(results),
                              "rule": rule_table(results),
                              "runs": runs, "variants": per,
                              "findings": findings})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
