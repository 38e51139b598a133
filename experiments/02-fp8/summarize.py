#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 2's numbers, from its result files.

Four studies, each a set of variants run over the same seeds (folders
VARIANT-seedN; see run.sh): cnn-* (the recipe on the CNN), deep-* (loss
scaling on the deep MLP with the loss x2^-24), fit-* (stochastic against
nearest rounding on a training subset) and resnet-* (the recipe on
ResNet-8, first and last layers exempt).  Writes RESULTS_DIR/
  summary_fp8_runs.csv      one row per run: accuracy, losses, the
                            train-test gap, skipped steps, the loss scale,
                            errors and weight gradients rounded to zero
  summary_fp8.csv           one row per variant: mean and sd over seeds
  summary_fp8_findings.csv  one row per finding of the paper: the paired
                            difference variant - baseline (accuracy in
                            points), its 95% t interval and the verdict
                            (tools/seedstats.py states the rule)
  summary_predicted.csv     what E5M2 and binary16 would lose of the FP32
                            CNN's and ResNet's gradients (seed 1's
                            histograms) at a few loss scales
  summary_resnet_sites.csv  the E5M2 ResNet's op sites (every seed summed):
                            results, and the fractions inexact, rounded to
                            zero, underflowing, subnormal and overflowing
  summary_resnet_kinds.csv  the same per kind of op and role (conv outputs,
                            batch-norm outputs, batch-norm input gradients
                            ...), the mechanism behind the ResNet's numbers
and prints them as Markdown tables (the README quotes them).
"""
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import exputil as eu  # noqa: E402
import seedstats as ss  # noqa: E402

# E5M2: the smallest subnormal is 2^-16; RNE loses |x| <= 2^-17 (binades
# <= -18 and the tie 2^-17); |x| >= 61440 overflows (binades >= 16 lose
# all, 15 partly).  binary16: |x| <= 2^-25.
E5M2_LOST, FP16_LOST = -18, -26

VARIANTS = ["cnn-fp32", "cnn-sr", "cnn-rne", "cnn-sr-none",
            "deep-fp32", "deep-none", "deep-dynamic2000", "deep-dynamic100", "deep-dynamic25",
            "deep-enhanced", "deep-static",
            "fit-fp32", "fit-sr", "fit-rne",
            "resnet-fp32", "resnet-sr", "resnet-rne"]
METRICS = ["test_accuracy", "test_loss", "train_accuracy", "train_loss",
           "gap_accuracy", "gap_loss", "skipped_steps", "loss_scale_min",
           "loss_scale_final", "act_grad_to_zero", "weight_grad_to_zero"]

# Mellempudi et al.'s findings as claims about variant - baseline
# (seedstats' Claim; accuracy in points, scale 100).  "Matches FP32" is
# read as within half a point either way (the paper's ImageNet and GNMT
# results are within about that of FP32; ours is a band, not its number).
MATCH = ss.Claim("within", -0.5, 0.5)
FINDINGS = [
    # name, metric, variant, baseline, claim, paper, scale
    ("CNN: the E5M2 recipe (SR, enhanced scaling) matches FP32",
     "test_accuracy", "cnn-sr", "cnn-fp32", MATCH, "matches FP32", 100),
    ("CNN: nearest rounding loses accuracy against SR", "test_accuracy",
     "cnn-rne", "cnn-sr", ss.Claim("less", 0), "RNE loses accuracy", 100),
    ("CNN: E5M2 without loss scaling loses accuracy", "test_accuracy",
     "cnn-sr-none", "cnn-sr", ss.Claim("less", 0), "scaling needed", 100),
    ("deep MLP, loss x2^-24: unscaled E5M2 loses accuracy", "test_accuracy",
     "deep-none", "deep-fp32", ss.Claim("less", 0), "scaling needed", 100),
    ("deep MLP: dynamic scaling, interval 2000, loses accuracy",
     "test_accuracy", "deep-dynamic2000", "deep-fp32", ss.Claim("less", 0),
     "scale too low", 100),
    ("deep MLP: enhanced beats dynamic (interval 100)", "test_accuracy",
     "deep-enhanced", "deep-dynamic100", ss.Claim("greater", 0),
     "enhanced converges better", 100),
    ("deep MLP: enhanced scaling matches FP32", "test_accuracy",
     "deep-enhanced", "deep-fp32", MATCH, "matches FP32", 100),
    ("deep MLP: the floor beats dynamic scaling growing as fast "
     "(interval 25; ours)", "test_accuracy", "deep-enhanced",
     "deep-dynamic25", ss.Claim("greater", 0), "", 100),
    ("subset: nearest rounding loses test accuracy against SR",
     "test_accuracy", "fit-rne", "fit-sr", ss.Claim("less", 0),
     "RNE overfits, SR regularises", 100),
    ("subset: nearest rounding widens the train-test gap", "gap_accuracy",
     "fit-rne", "fit-sr", ss.Claim("greater", 0), "RNE overfits", 100),
    ("subset: nearest rounding raises the test loss", "test_loss",
     "fit-rne", "fit-sr", ss.Claim("greater", 0), "RNE overfits", 1),
    ("subset: SR matches FP32", "test_accuracy", "fit-sr", "fit-fp32",
     MATCH, "matches FP32", 100),
    ("ResNet-8 (first and last layers exempt): the E5M2 recipe matches FP32",
     "test_accuracy", "resnet-sr", "resnet-fp32", MATCH, "matches FP32", 100),
    ("ResNet-8: nearest rounding loses accuracy against SR", "test_accuracy",
     "resnet-rne", "resnet-sr", ss.Claim("less", 0), "RNE loses accuracy", 100),
]
# The roles whose values E5M2 holds (the rest is bookkeeping: binary32
# batch-norm statistics, the FP16 master copy and momentum).
TENSOR_ROLES = ["weight", "activation", "act_grad", "weight_grad"]


def to_zero(o, role):
    """Fraction of a gradient role's results (every op site, every format)
    rounded to zero from a non-zero exact value."""
    d = o[eu.is_grad_site(o) & (o["role"] == role)]
    return d["to_zero"].sum() / max(1, d["results"].sum())


def measure(results, run):
    m = eu.meta(results, run)
    s = eu.steps(results, run)
    e = eu.evals(results, run)
    o = eu.ops(results, run)
    # The last epoch's training batches (as trained: SR noise included).
    last = s[s["epoch"] == s["epoch"].max()]
    lo = s["loss_scale_min"] if "loss_scale_min" in s else s["loss_scale"]
    row = {"test_accuracy": m["test_accuracy"],
           "test_loss": e["test_loss"].iloc[-1],
           "train_accuracy": last["accuracy"].mean(),
           "train_loss": last["loss"].mean(),
           "skipped_steps": m["skipped_steps"],
           "loss_scale_min": lo.min(),
           "loss_scale_final": s["loss_scale"].iloc[-1],
           "act_grad_to_zero": to_zero(o, "act_grad"),
           "weight_grad_to_zero": to_zero(o, "weight_grad")}
    row["gap_accuracy"] = row["train_accuracy"] - row["test_accuracy"]
    row["gap_loss"] = row["test_loss"] - row["train_loss"]
    return row


def predicted(results):
    """What E5M2 would lose of the FP32 CNN's and ResNet's gradients at a
    few scales (seed 1's histograms)."""
    rows = []
    for model in ("cnn", "resnet"):
        run = f"{model}-fp32"
        if not eu.have(results, run):
            continue
        h = eu.hist(results, run)
        for role in eu.GRAD_ROLES:
            bz = eu.binades(h, role)
            for log2s in (0, 8, 12, 16):
                f = eu.lost_fraction(bz, log2s, E5M2_LOST, 16)
                rows.append({"model": model, "role": role,
                             "loss_scale": f"2^{log2s}",
                             "zero": f["zero"], "e5m2_lost": f["lost"],
                             "e5m2_overflow": f["overflow"],
                             "fp16_lost": eu.lost_fraction(bz, log2s, FP16_LOST)["lost"]})
    return pd.DataFrame(rows)


COUNTS = ["results", "inexact", "to_zero", "underflow", "subnormal",
          "overflow"]


def kind_of(site, kind):
    """A site's group for the per-kind table: the op's kind, with batch
    norm's input gradient and a cast's target told apart by name."""
    if kind == "cast":
        return "cast (." + site.rsplit(".", 1)[-1] + ")"
    return kind


def resnet_sites(results):
    """The E5M2 ResNet runs' op sites, every seed summed, per variant:
    counts and rates (rate = count / results), and the same per kind of op
    and role.  Only sites holding weights, activations and gradients."""
    frames = []
    for v in ("resnet-sr", "resnet-rne"):
        for seed, f in eu.seeds(results, v).items():
            o = eu.ops(results, f)
            o = o[o["role"].isin(TENSOR_ROLES)]
            frames.append(o.assign(variant=v)[["variant", "site", "kind", "role",
                                               "format"] + COUNTS])
    if not frames:
        return pd.DataFrame(), pd.DataFrame()
    o = pd.concat(frames)
    o["group"] = [kind_of(s, k) for s, k in zip(o["site"], o["kind"])]

    def rates(df, keys):
        g = df.groupby(keys, sort=False)[COUNTS].sum().reset_index()
        for c in COUNTS[1:]:
            g[c + "_rate"] = g[c] / g["results"].clip(lower=1)
        return g

    sites = rates(o, ["variant", "site", "kind", "role", "format"])
    kinds = rates(o, ["variant", "role", "group", "format"])
    kinds["sites"] = o.groupby(["variant", "role", "group", "format"],
                               sort=False)["site"].nunique().values
    return sites, kinds


def main(results):
    runs = eu.over_seeds(results, VARIANTS, lambda f: measure(results, f))
    sites, kinds = resnet_sites(results)
    tables = {"fp8_runs": runs, "predicted": predicted(results),
              "resnet_sites": sites, "resnet_kinds": kinds}
    if not runs.empty:
        # variant - FP32 of the same study and seed, the sign convention of
        # every experiment (accuracy in points).
        study = runs["variant"].str.split("-").str[0]
        base = runs[runs["variant"].str.endswith("-fp32")]
        base = {(v.split("-")[0], s): a for v, s, a in
                zip(base["variant"], base["seed"], base["test_accuracy"])}
        runs["diff_to_fp32_points"] = [
            100 * (a - base.get((st, s), float("nan")))
            for st, s, a in zip(study, runs["seed"], runs["test_accuracy"])]
        tables["fp8"] = ss.per_variant(runs, METRICS + ["diff_to_fp32_points"])
        have = set(runs["variant"])
        tables["fp8_findings"] = pd.DataFrame([
            ss.finding(runs, name, metric, variant, baseline, claim, paper, scale)
            for name, metric, variant, baseline, claim, paper, scale in FINDINGS
            if variant in have and baseline in have])
    eu.write_tables(results, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
