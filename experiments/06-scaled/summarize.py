#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 6's numbers, from its result files.

Writes to RESULTS_DIR:
  summary_accuracy.csv  per run: final test accuracy, difference to the model's
                        FP32 run, training-loss floor, overall clipping and
                        flush-to-zero rates of the quantized GEMM operands
  summary_quant.csv     per run, layer and operand (x, w, dy.dw, x.dw, dy,
                        w.dx): elements quantized, clipping rate
                        (overflow / results), flush-to-zero rate
                        (to_zero / results: non-zero inputs whose element
                        is zero), mean and largest relative quantization
                        error
  summary_operand.csv   the same per run and operand kind, over all layers
  summary_split.csv     per run and GEMM (matmul / convolution, forward,
                        weight gradient, input gradient): the error of the
                        sampled outputs against MPFR on the exact
                        unquantized operands, split into quantization,
                        accumulation and output rounding (means of
                        relative errors; the quantization part only for
                        matmuls: libemu's convolution reference has no
                        unquantized sources)
and prints the short tables.  Called by run.sh after the runs; exits
non-zero if a run or one of its files is missing.
"""
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import exputil as eu  # noqa: E402

PRESETS = ["fp32", "fp8-delayed", "fp8-current", "mxfp8", "mxfp4", "nvfp4"]
# MXFP4 gradient recipes (MLP, seeds 1 and 2): the preset (ceil-rule scales
# + SR), floor-rule scales + SR (the previous preset), ceil + nearest,
# floor + nearest.
MXFP4_VARIANTS = ["mxfp4-seed2", "mxfp4-floor-sr", "mxfp4-floor-sr-seed2",
                  "mxfp4-rne", "mxfp4-rne-seed2",
                  "mxfp4-floor-rne", "mxfp4-floor-rne-seed2"]
RUNS = ([f"mlp-{p}" for p in PRESETS] + [f"mlp-{v}" for v in MXFP4_VARIANTS]
        + [f"cnn-{p}" for p in PRESETS])
FILES = ("meta.json", "steps.csv", "eval.csv", "ops.csv")
# The quantize sites' operand tags, in the order a training step meets them.
OPERANDS = ["x", "w", "dy.dw", "x.dw", "dy", "w.dx"]
KIND = {"x": "activation", "x.dw": "activation", "w": "weight",
        "w.dx": "weight", "dy": "gradient", "dy.dw": "gradient"}
GEMM_KINDS = ("matmul", "conv2d", "conv2d_bwd_weights", "conv2d_bwd_data")
PASS = {"matmul": "forward", "conv": "forward", "dweight": "weight gradient",
        "dinput": "input gradient"}


def check(results):
    missing = [os.path.join(results, r, f) for r in RUNS for f in FILES
               if not os.path.exists(os.path.join(results, r, f))]
    if missing:
        print("summarize.py: missing result files:\n  " + "\n  ".join(missing),
              file=sys.stderr)
        sys.exit(1)


# Sanity bound on the mean relative error that the operands' quantization
# adds to one GEMM site's sampled outputs.  Genuine values reach ~16 at
# 4 bits (means dominated by outputs near zero after cancellation); a split
# against a wrongly scaled reference (libemu before 077da3d multiplied the
# exact product of the unquantized operands by the tensor scales) gave
# 5e4 to 2e10.
QUANT_MEAN_MAX = 100.0


def check_split(split):
    """Fails loudly if a GEMM's error split looks absurd."""
    bad = split[(split["quant_measured"] & ~(split["quant_mean"] <= QUANT_MEAN_MAX))
                | ~(split["accum_mean"] <= 1e-3)
                | ~(split["round_mean"] <= 1e-3)]
    if len(bad):
        print("summarize.py: implausible GEMM error split (quant_mean > "
              f"{QUANT_MEAN_MAX:g} or accum/round_mean > 1e-3, or NaN):\n"
              + bad[["run", "site", "quant_mean", "accum_mean",
                     "round_mean"]].to_string(index=False), file=sys.stderr)
        sys.exit(1)


def quant_sites(results, run):
    o = eu.ops(results, run)
    q = o[o["kind"] == "quantize"].copy()
    parts = q["site"].str.split(".q.", n=1, regex=False)
    q["layer"] = parts.str[0]
    q["operand"] = parts.str[1]
    return q


def rates(d):
    n = d["results"].sum()
    return {"elements": int(n),
            "clip_rate": d["overflow"].sum() / n if n else float("nan"),
            "flush_rate": d["to_zero"].sum() / n if n else float("nan"),
            # rel_mean is per sampled element: weight it by the samples.
            "rel_err_mean": ((d["rel_mean"] * d["ref_samples"]).sum()
                             / d["ref_samples"].sum()
                             if d["ref_samples"].sum() else float("nan")),
            "rel_err_max": d["rel_max"].max() if len(d) else float("nan")}


def main(results):
    check(results)
    acc, quant, operand, split = [], [], [], []
    for run in RUNS:
        m = eu.meta(results, run)
        s = eu.steps(results, run)
        model, variant = run.split("-", 1)
        q = quant_sites(results, run)
        row = {"run": run, "model": model, "variant": variant,
               "test_accuracy": m["test_accuracy"],
               "final_train_loss": eu.final_loss(s),
               "steps": m["steps"], "skipped_steps": m["skipped_steps"],
               "nan_loss_steps": int((~s["loss"].apply(pd.notna)).sum()),
               "seconds": m["seconds"]}
        if len(q):
            r = rates(q)
            row.update({"clip_rate": r["clip_rate"], "flush_rate": r["flush_rate"]})
        acc.append(row)
        for (layer, op), d in q.groupby(["layer", "operand"], sort=False):
            quant.append({"run": run, "layer": layer, "operand": op,
                          "kind": KIND.get(op, "?"), "format": d["format"].iloc[0],
                          **rates(d)})
        for op in OPERANDS:
            d = q[q["operand"] == op]
            if len(d):
                operand.append({"run": run, "operand": op, "kind": KIND[op],
                                **rates(d)})
        o = eu.ops(results, run)
        g = o[o["kind"].isin(GEMM_KINDS) & (o["dot_samples"] > 0)]
        for _, r in g.iterrows():
            layer, what = r["site"].split(".", 1)
            # The convolutions' MPFR reference has no unquantized sources
            # (conv_ref, libemu/ops_conv.c): their quant part reads 0 but
            # is not measured, so it is left empty here.
            measured = r["kind"] == "matmul"
            nan = float("nan")
            split.append({"run": run, "site": r["site"], "layer": layer,
                          "pass": PASS.get(what, what),
                          "dot_samples": int(r["dot_samples"]),
                          "quant_measured": measured,
                          "quant_mean": r["quant_mean"] if measured else nan,
                          "accum_mean": r["accum_mean"],
                          "round_mean": r["round_mean"],
                          "quant_max": r["quant_max"] if measured else nan,
                          # the output against MPFR on the quantized operands
                          "out_rel_mean": r["rel_mean"],
                          "out_ulp_mean": r["ulp_mean"]})
    acc = pd.DataFrame(acc)
    for model in acc["model"].unique():
        base = acc[acc["run"] == f"{model}-fp32"]["test_accuracy"]
        sel = acc["model"] == model
        # variant - FP32, the sign convention of every experiment.
        acc.loc[sel, "diff_to_fp32_points"] = 100 * (acc.loc[sel, "test_accuracy"] - base.iloc[0])
    acc = acc[["run", "model", "variant", "test_accuracy", "diff_to_fp32_points",
               "final_train_loss", "clip_rate", "flush_rate", "steps",
               "skipped_steps", "nan_loss_steps", "seconds"]]
    quant, operand, split = (pd.DataFrame(quant), pd.DataFrame(operand),
                             pd.DataFrame(split))
    check_split(split)
    for name, df in (("quant", quant), ("operand", operand), ("split", split)):
        path = os.path.join(results, f"summary_{name}.csv")
        df.to_csv(path, index=False, float_format="%.6g")
    acc.to_csv(os.path.join(results, "summary_accuracy.csv"), index=False,
               float_format="%.6g")

    # The short tables.
    print("\n## accuracy (clip/flush: all quantized GEMM operands)\n")
    print(eu.markdown(acc[["run", "test_accuracy", "diff_to_fp32_points",
                           "final_train_loss", "clip_rate", "flush_rate"]]))
    print("\n## clipping / flush-to-zero by operand (all layers)\n")
    t = operand.pivot(index="run", columns="operand", values=["clip_rate", "flush_rate"])
    t.columns = [f"{a.split('_')[0]} {b}" for a, b in t.columns]
    t = t[[f"{a} {b}" for a in ("clip", "flush") for b in OPERANDS
           if f"{a} {b}" in t.columns]]
    print(eu.markdown(t.reset_index(), floatfmt="{:.3g}"))
    print("\n## error split of the GEMM outputs (mean relative errors)\n")
    sp = split.groupby(["run", "pass"], sort=False)[["quant_mean", "accum_mean",
                                                 "round_mean"]].mean().reset_index()
    print(eu.markdown(sp))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
