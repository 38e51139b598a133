#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 5's numbers: error and swamping at
a few K per accumulator model, from accum_sweep's CSVs.  Writes
RESULTS_DIR/summary_<input>_<dist>.csv and prints Markdown tables.

Error measure: for positive (uniform) inputs the relative error
|got - exact| / |exact|; for signed (normal) inputs, where |exact| can be
arbitrarily small, the error relative to sum |x_i y_i| (nrel); both the
maximum over the dot products and the mean."""
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import exputil as eu  # noqa: E402


def main(results):
    d = pd.concat([pd.read_csv(os.path.join(results, f))
                   for f in ("sweep_binary16.csv", "sweep_e4m3.csv")
                   if os.path.exists(os.path.join(results, f))])
    tables = {}
    for (inp, dist), g in d.groupby(["input", "dist"], sort=False):
        g = g[g["K"].isin([256, 4096, 16384])]
        err = "rel" if dist == "uniform" else "nrel"
        parts = []
        for col, name in ((f"{err}_max", f"max_{err}"), (f"{err}_mean", f"mean_{err}"),
                          ("absorbed_rate", "absorbed")):
            t = g.pivot(index="model", columns="K", values=col)
            t.columns = [f"{name}_K{k}" for k in t.columns]
            parts.append(t)
        order = list(dict.fromkeys(g["model"]))
        t = parts[0].join(parts[1:]).reindex(order).reset_index()
        tables[f"{inp}_{dist}"] = t
    eu.write_tables(results, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
