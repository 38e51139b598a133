#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 3's numbers, from its result files.

Runs are MODEL-POLICY-seedN, MODEL mlp (784-128x8-10) or resnet (resnet:1),
POLICY fp32, none, sN (static 2^k), dynamic, adaptive (libemu's feedback
variant), layerwise (Zhao et al.'s rule).  Per run: test accuracy, skipped
steps, training-loss floor, overflowed values; per run and parameter layer,
over the second half of the run (layers_steps.csv): the op's own rate of
input-gradient values rounded to zero (dinput_to_zero), Zhao et al.'s rate
(zeros in the rounded input gradient minus the FP32 run's of the same seed
at the same step), the factor and the scale the layer's weight gradient
carries (grad_scale, divided by the loss multiplier: the scale the policy
applied).  Writes RESULTS_DIR/
  summary_runs.csv       one row per run
  summary_variants.csv   one row per model and policy: mean, sd over seeds
  summary_layers.csv     per model, policy and layer: seed means (and sd)
  summary_scales.csv     the layerwise runs' mean effective scale (log2 of
                         grad_scale / loss multiplier, averaged over layers
                         and steps), the static baselines' reference
  summary_findings.csv   one row per finding: the paired difference over
                         seeds (variant - baseline; accuracy in points, a
                         positive difference better), its 95% t interval
                         and the verdict (tools/seedstats.py states the rule)
  summary_cumulative.csv seed 1: zeros in each FP16 run's tensors minus
                         FP32's over the whole run (hist.csv), per tensor
"""
import math
import os
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import exputil as eu  # noqa: E402
import seedstats as ss  # noqa: E402

SHIFT = 2.0 ** -12
TARGET = 1e-3
MODELS = {"mlp": ["fp32", "none", "s256", "s1024", "dynamic", "adaptive",
                  "layerwise"],
          "resnet": ["fp32", "none", "s256", "dynamic", "layerwise"]}
METRICS = ["test_accuracy", "train_loss_floor", "skipped_steps",
           "dinput_to_zero_mean", "dinput_to_zero_max", "gemm_to_zero_max",
           "norm_to_zero_mean",
           "underflow_zhao_mean", "log2_scale_mean", "log2_scale_growth"]


def is_gemm(layer):
    """Whether a parameter layer is a GEMM (linear, convolution), the
    layers the rule gives a factor, rather than a batch norm."""
    return "bn" not in layer and not layer.endswith("downsample.1")


def layer_table(results, run, base):
    """layers_steps.csv of a run, second half, with Zhao's rate against the
    FP32 run of the same seed (base: its layers_steps.csv, or None)."""
    ls = pd.read_csv(os.path.join(results, run, "layers_steps.csv"))
    if base is not None:
        ref = base[["step", "layer", "dinput_zero"]].rename(
            columns={"dinput_zero": "ref_zero"})
        ls = ls.merge(ref, on=["step", "layer"], how="left")
        ls["underflow_zhao"] = ls["dinput_zero"] - ls["ref_zero"]
    else:
        ls["underflow_zhao"] = np.nan
    mult = 1.0 if "-fp32-" in run else SHIFT
    ls["log2_scale"] = np.log2(ls["grad_scale"] / mult)
    return ls[ls["step"] >= ls["step"].max() / 2]


def runs_and_layers(results):
    runs, layers = [], []
    for model, policies in MODELS.items():
        for seed, f32 in eu.seeds(results, f"{model}-fp32").items():
            base = pd.read_csv(os.path.join(results, f32, "layers_steps.csv"))
            for pol in policies:
                run = f"{model}-{pol}-seed{seed}"
                if not eu.have(results, run):
                    continue
                ls = layer_table(results, run, None if pol == "fp32" else base)
                per = ls.groupby(["layer", "index"], sort=False).mean(
                    numeric_only=True).reset_index().sort_values("index")
                for r in per.itertuples():
                    layers.append({"model": model, "variant": pol, "seed": seed,
                                   "layer": r.layer, "index": r.index,
                                   "gemm": is_gemm(r.layer),
                                   "dinput_to_zero": r.dinput_to_zero,
                                   "underflow_zhao": r.underflow_zhao,
                                   "factor": r.scale,
                                   "log2_scale": r.log2_scale})
                # The first parameter layer has no input gradient.
                d = per[per["dinput_to_zero"].notna()]
                gemm = d[d["layer"].map(is_gemm)]
                norm = d[~d["layer"].map(is_gemm)]
                s = eu.steps(results, run)
                m = eu.meta(results, run)
                o = eu.ops(results, run)
                o = o[eu.is_grad_site(o)]
                runs.append({
                    "model": model, "variant": pol, "seed": seed, "run": run,
                    "test_accuracy": m["test_accuracy"],
                    "train_loss_floor": eu.final_loss(s),
                    "skipped_steps": m["skipped_steps"],
                    "overflowed_values": int(o["overflow"].sum()),
                    "dinput_to_zero_mean": d["dinput_to_zero"].mean(),
                    "dinput_to_zero_max": d["dinput_to_zero"].max(),
                    # the GEMM layers' worst (what the rule bounds), and the
                    # batch norms' mean (layers no factor acts on)
                    "gemm_to_zero_max": gemm["dinput_to_zero"].max(),
                    "norm_to_zero_mean": norm["dinput_to_zero"].mean(),
                    "underflow_zhao_mean": d["underflow_zhao"].mean(),
                    "log2_scale_mean": per["log2_scale"].mean(),
                    # input layer's scale over the last layer's (log2)
                    "log2_scale_growth": per["log2_scale"].iloc[0] -
                                         per["log2_scale"].iloc[-1]})
    return pd.DataFrame(runs), pd.DataFrame(layers)


def zero_fraction(results, run, sites):
    h = eu.hist(results, run)
    h = h[h["which"] == "rounded"]
    out = {}
    for site in sites:
        g = h[h["site"] == site]
        out[site] = g.loc[g["bin"] == "zero", "count"].sum() / max(1, g["count"].sum())
    return out


def cumulative(results, layers):
    """Seed 1: zeros in each FP16 run's tensors minus zeros in FP32's."""
    rows = []
    for model, policies in MODELS.items():
        f32 = f"{model}-fp32-seed1"
        if not os.path.exists(os.path.join(results, f32, "hist.csv")):
            continue
        order = layers[(layers.model == model)].drop_duplicates("layer") \
            .sort_values("index", ascending=False)["layer"].tolist()
        sites = ["loss.dlogits"] + [f"{l}.dinput" for l in order[:-1]]
        base = zero_fraction(results, f32, sites)
        for pol in policies[1:]:
            run = f"{model}-{pol}-seed1"
            if not os.path.exists(os.path.join(results, run, "hist.csv")):
                continue
            z = zero_fraction(results, run, sites)
            for s in sites:
                rows.append({"model": model, "variant": pol,
                             "tensor": s.replace(".dinput", ""),
                             "zeros_minus_fp32": z[s] - base[s]})
    return pd.DataFrame(rows)


def one_sample(runs, model, name, metric, variant, claim, paper, scale=1.0):
    """A finding about one policy's own metric (not a difference): the
    paired machinery against a baseline of zeros."""
    g = runs[(runs.model == model) & (runs.variant == variant)]
    v = pd.Series(scale * g[metric].to_numpy(dtype=float), index=g["seed"].to_numpy())
    p = ss.paired(v, pd.Series(0.0, index=v.index))
    return {"model": model, "finding": name, "metric": metric, "variant": variant,
            "baseline": "(the value itself)", "seeds": p.n, "diff_mean": p.mean,
            "diff_sd": p.sd, "ci_lo": p.lo, "ci_hi": p.hi, "ci_level": p.level,
            "claim": claim.text(), "paper": paper, "verdict": ss.verdict(p, claim),
            "note": ""}


def findings(runs):
    rows = []
    for model, policies in MODELS.items():
        r = runs[runs.model == model]
        if r.empty or "layerwise" not in set(r.variant):
            continue
        static = [p for p in policies if p.startswith("s")][0]
        rows.append(one_sample(
            r, model, "the scale grows toward the input (log2 of the input "
            "layer's scale over the output layer's)", "log2_scale_growth",
            "layerwise", ss.Claim("greater", 0), "grows toward the input"))
        rows.append(one_sample(
            r, model, "every GEMM layer's input-gradient underflow at or below "
            "the target 1e-3 (the worst layer, per op)", "gemm_to_zero_max",
            "layerwise", ss.Claim("less", TARGET), "held near the target"))
        for base in [static, "dynamic"]:
            f = ss.finding(r, f"layerwise underflows less than {base} (mean over "
                           "layers, per op)", "dinput_to_zero_mean", "layerwise",
                           base, ss.Claim("less", 0), "less underflow")
            rows.append({"model": model, **f})
        for base in ["fp32", static, "dynamic", "none"]:
            claim = (ss.Claim("within", -0.5, 0.5) if base == "fp32"
                     else ss.Claim("greater", 0))
            paper = ("matches FP32" if base == "fp32"
                     else "better than fixed/dynamic loss scaling")
            f = ss.finding(r, f"accuracy: layerwise vs {base}", "test_accuracy",
                           "layerwise", base, claim, paper, 100)
            rows.append({"model": model, **f})
    return pd.DataFrame(rows)


def scales(runs):
    """The layerwise runs' mean effective scale, and the static baseline."""
    rows = []
    for model, policies in MODELS.items():
        g = runs[(runs.model == model) & (runs.variant == "layerwise")]
        static = [p for p in policies if p.startswith("s")][0]
        for r in g.itertuples():
            rows.append({"model": model, "seed": r.seed,
                         "log2_mean_scale": r.log2_scale_mean,
                         "as_power_of_two": 2.0 ** round(r.log2_scale_mean),
                         "static_baseline": float(static[1:])})
    return pd.DataFrame(rows)


def main(results):
    runs, layers = runs_and_layers(results)
    if runs.empty:
        eu.write_tables(results, {"runs": runs})
        return 0
    per = ss.per_variant(runs.assign(key=runs.model + "-" + runs.variant),
                         [m for m in METRICS if m in runs], by="key")
    lt = layers.groupby(["model", "variant", "layer", "index", "gemm"],
                        sort=False).agg(
        seeds=("seed", "count"),
        dinput_to_zero=("dinput_to_zero", "mean"),
        dinput_to_zero_sd=("dinput_to_zero", "std"),
        underflow_zhao=("underflow_zhao", "mean"),
        factor=("factor", "mean"),
        log2_scale=("log2_scale", "mean"),
        log2_scale_sd=("log2_scale", "std")).reset_index()
    eu.write_tables(results, {"runs": runs, "variants": per, "layers": lt,
                              "scales": scales(runs),
                              "findings": findings(runs),
                              "cumulative": cumulative(results, layers)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
