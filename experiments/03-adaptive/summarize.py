#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 3's numbers, from its result files.

Per run and parameter layer: the mean underflow rate of the layer's input
gradient (dinput: exact value non-zero, FP16 result zero, over the
tensor's size) and of its weight gradient, over the second half of the run
(after the scales have settled), and the mean adaptive factor.  Writes
RESULTS_DIR/summary_layers.csv (long form) and summary_runs.csv,
summary_dinput_underflow.csv (the op's own roundings to zero) and
summary_dinput_underflow_zhao.csv (per step, zeros in the rounded input
gradient minus zeros in the FP32 run's at the same step).

Zhao et al.'s own definition, non-zeros in FP32 minus non-zeros in FP16 over
the tensor's size, also counts values that are zero because their inputs
had already underflowed upstream (which an op's own count does not): it is
computed over the whole run from the histograms, as the fraction of zeros
in each FP16 run's rounded tensor minus that of the FP32 run
(summary_cumulative.csv).
"""
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import exputil as eu  # noqa: E402

RUNS = ["fp16-plain-none", "fp16-none", "fp16-s8", "fp16-s128", "fp16-s1024",
        "fp16-dynamic", "fp16-adaptive"]


def zhao_per_step(results, run, base):
    """layers_steps.csv with Zhao et al.'s rate per layer and step: the zero
    fraction of the layer's rounded input gradient minus the FP32 run's at
    the same step (base; for the FP32 run itself, against itself)."""
    ls = pd.read_csv(os.path.join(results, run, "layers_steps.csv"))
    if "dinput_zero" not in ls.columns:
        return ls
    ref = ls if base is None else base
    ref = ref[["step", "layer", "dinput_zero"]].rename(columns={"dinput_zero": "ref_zero"})
    ls = ls.merge(ref, on=["step", "layer"], how="left")
    ls["underflow_zhao"] = ls["dinput_zero"] - ls["ref_zero"]
    return ls


def zero_fraction(results, run, sites):
    h = eu.hist(results, run)
    h = h[h["which"] == "rounded"]
    out = {}
    for site in sites:
        g = h[h["site"] == site]
        out[site] = g.loc[g["bin"] == "zero", "count"].sum() / max(1, g["count"].sum())
    return out


def cumulative(results, layer_order):
    """Zeros in each FP16 run's tensors minus zeros in FP32's (whole run)."""
    sites = ["loss.dlogits"] + [f"{l}.dinput" for l in reversed(list(layer_order))
                                if l != "fc1"]
    if not os.path.exists(os.path.join(results, "fp32", "hist.csv")):
        return pd.DataFrame()
    base = zero_fraction(results, "fp32", sites)
    rows = []
    for run in RUNS:
        if not os.path.exists(os.path.join(results, run, "hist.csv")):
            continue
        z = zero_fraction(results, run, sites)
        rows.append({"run": run, **{s.replace(".dinput", ""): z[s] - base[s] for s in sites}})
    return pd.DataFrame(rows)


def main(results):
    layers, runs = [], []
    base = None
    for run in ["fp32"] + RUNS:
        if not eu.have(results, run):
            continue
        ls = zhao_per_step(results, run, base)
        if run == "fp32":
            base = ls
        half = ls[ls["step"] >= ls["step"].max() / 2]
        g = half.groupby(["layer", "index"], sort=False).mean(numeric_only=True)
        for (layer, index), r in g.sort_index(level=1).iterrows():
            layers.append({"run": run, "layer": layer, "index": index,
                           "dinput_to_zero": r["dinput_to_zero"],
                           "dinput_underflow_zhao": r.get("underflow_zhao", float("nan")),
                           "dweight_to_zero": r["dweight_to_zero"],
                           "scale": r["scale"], "grad_scale": r["grad_scale"]})
        s = eu.steps(results, run)
        o = eu.ops(results, run)
        o = o[eu.is_grad_site(o)]
        m = eu.meta(results, run)
        runs.append({"run": run, "test_accuracy": m["test_accuracy"],
                     "skipped_steps": m["skipped_steps"],
                     "final_train_loss": eu.final_loss(s),
                     "act_grad_to_zero": s["act_grad_to_zero"].mean(),
                     "weight_grad_to_zero": s["weight_grad_to_zero"].mean(),
                     "overflowed_values": int(o["overflow"].sum())})
    lt = pd.DataFrame(layers)
    order = lt.drop_duplicates("layer").sort_values("index")["layer"]

    def by_layer(values):
        w = lt.pivot(index="run", columns="layer", values=values)
        w = w[[c for c in order if c in w.columns and w[c].notna().any()]]
        return w.reindex([r for r in ["fp32"] + RUNS if r in w.index]).reset_index()

    wide = by_layer("dinput_to_zero")
    zhao = by_layer("dinput_underflow_zhao") if lt["dinput_underflow_zhao"].notna().any() \
        else pd.DataFrame()
    lt.to_csv(os.path.join(results, "summary_layers.csv"), index=False,
              float_format="%.6g")
    scales = lt[lt["run"] == "fp16-adaptive"][["layer", "scale", "grad_scale"]]
    eu.write_tables(results, {"runs": pd.DataFrame(runs),
                              "dinput_underflow": wide,
                              "dinput_underflow_zhao": zhao,
                              "cumulative": cumulative(results, order),
                              "adaptive_scales": scales})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
