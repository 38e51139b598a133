#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 4's numbers, from its result files.

Per run: test accuracy and its gap to FP32, the training-loss floor (mean
over the last tenth of the steps), and the fraction of weight updates that
changed nothing (over the whole run and over its last tenth, when the
learning rate is smallest).  Writes RESULTS_DIR/summary_bf16.csv.
"""
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import exputil as eu  # noqa: E402

RUNS = ["fp32", "bf16-nearest", "bf16-sr", "bf16-kahan", "bf16-fp32w"]


def main(results):
    rows = []
    for run in RUNS:
        if not eu.have(results, run):
            continue
        s = eu.steps(results, run)
        m = eu.meta(results, run)
        tail = s.iloc[-max(1, len(s) // 10):]
        ev = pd.read_csv(os.path.join(results, run, "eval.csv"))
        rows.append({"run": run, "test_accuracy": m["test_accuracy"],
                     "test_loss": ev["test_loss"].iloc[-1],
                     "train_loss_floor": eu.final_loss(s),
                     "cancelled_updates": eu.absorbed_rate(s),
                     "cancelled_updates_last_tenth": eu.absorbed_rate(tail)})
    t = pd.DataFrame(rows)
    t["gap_to_fp32_points"] = 100 * (t["test_accuracy"] - t["test_accuracy"].iloc[0])
    eu.write_tables(results, {"bf16": t})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
