#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 4's numbers, from its result files.

Per run (variant x seed): test accuracy, test loss, the training-loss floor
(mean over the last tenth of the steps), and the fraction of weight updates
that changed nothing (over the whole run and over its last tenth, when the
learning rate is smallest).  Writes RESULTS_DIR/
  summary_bf16_runs.csv      one row per run
  summary_bf16.csv           one row per variant: mean and sd over seeds
  summary_bf16_findings.csv  one row per finding of the paper: the paired
                             difference to FP32 (variant - FP32, accuracy
                             in points), its 95% t interval and the verdict
                             (tools/seedstats.py states the rule)
Run folders are VARIANT-seedN; a folder without the suffix (the results of
the older, single-seed format) counts as the seed in its meta.json.
"""
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import exputil as eu  # noqa: E402
import seedstats as ss  # noqa: E402

VARIANTS = ["fp32", "bf16-nearest", "bf16-sr", "bf16-kahan", "bf16-fp32w"]
METRICS = ["test_accuracy", "test_loss", "train_loss_floor",
           "cancelled_updates", "cancelled_updates_last_tenth"]

# The paper's findings, each as a claim about variant - FP32 (seedstats'
# Claim; accuracy in points).  Zamirai et al.: nearest rounding of the
# updates costs accuracy (up to 7 points) and a worse loss; stochastic
# rounding and Kahan summation come within -0.1..+0.2 points of FP32.
FINDINGS = [
    ("nearest rounding loses accuracy", "test_accuracy", "bf16-nearest",
     ss.Claim("less", 0), "up to -7 points", 100),
    ("nearest rounding raises the loss floor", "train_loss_floor",
     "bf16-nearest", ss.Claim("greater", 0), "higher training loss", 1),
    ("stochastic rounding matches FP32", "test_accuracy", "bf16-sr",
     ss.Claim("within", -0.1, 0.2), "-0.1..+0.2 points", 100),
    ("Kahan summation matches FP32", "test_accuracy", "bf16-kahan",
     ss.Claim("within", -0.1, 0.2), "-0.1..+0.2 points", 100),
    ("FP32 weights alone match FP32 (ablation, ours)", "test_accuracy",
     "bf16-fp32w", ss.Claim("within", -0.1, 0.2), "", 100),
]


def runs_table(results):
    def measure(run):
        s = eu.steps(results, run)
        tail = s.iloc[-max(1, len(s) // 10):]
        return {"test_accuracy": eu.meta(results, run)["test_accuracy"],
                "test_loss": eu.evals(results, run)["test_loss"].iloc[-1],
                "train_loss_floor": eu.final_loss(s),
                "cancelled_updates": eu.absorbed_rate(s),
                "cancelled_updates_last_tenth": eu.absorbed_rate(tail)}
    return eu.over_seeds(results, VARIANTS, measure)


def main(results):
    runs = runs_table(results)
    if runs.empty:
        eu.write_tables(results, {"bf16_runs": runs})
        return 0
    per = ss.per_variant(runs, METRICS)
    fp32 = runs[runs["variant"] == "fp32"].set_index("seed")["test_accuracy"]
    runs["diff_to_fp32_points"] = [
        100 * (r.test_accuracy - fp32.get(r.seed, float("nan")))
        for r in runs.itertuples()]
    findings = pd.DataFrame([
        ss.finding(runs, name, metric, variant, "fp32", claim, paper, scale)
        for name, metric, variant, claim, paper, scale in FINDINGS])
    eu.write_tables(results, {"bf16_runs": runs, "bf16": per,
                              "bf16_findings": findings})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
