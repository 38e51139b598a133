#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 7's numbers, from its result files.

Seven variants (fp32, fp8-delayed, mxfp8, mxfp4, mxfp4-rht, nvfp4,
nvfp4-rht), each run over the same seeds (folders VARIANT-seedN; see
run.sh).  Writes RESULTS_DIR/
  summary_gpt_runs.csv      one row per run: the final validation loss and
                            bits per character, the training loss over the
                            last 30 steps, the clipping and flush-to-zero
                            rates of the quantized GEMM operands (all of
                            them, and the weight gradient's dY and x, the
                            operands the transform acts on), loss NaNs,
                            seconds
  summary_gpt.csv           one row per variant: mean and sd over seeds, and
                            the difference of the validation loss to FP32
                            of the same seed (variant - FP32: positive is
                            worse)
  summary_gpt_findings.csv  one row per finding: the paired difference
                            variant - baseline of the validation loss (in
                            nats per character; two findings: of the weight
                            gradient's flush rate), its 95% t interval and
                            the verdict (tools/seedstats.py states the rule)
and prints them as Markdown tables (the README quotes them).  Exits non-zero
if a run's files are missing.
"""
import os
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tools"))
import exputil as eu  # noqa: E402
import seedstats as ss  # noqa: E402

VARIANTS = ["fp32", "fp8-delayed", "mxfp8", "mxfp4", "mxfp4-rht", "nvfp4",
            "nvfp4-rht"]
# (not the runs' seconds: wall times stay out of the per-variant table,
# which CI compares bit for bit in quick mode)
METRICS = ["val_loss", "val_bpc", "train_loss_last30", "clip_rate",
           "flush_rate", "wgrad_clip_rate", "wgrad_flush_rate",
           "nan_loss_steps"]
# The weight gradient's operands: the tags of its quantize sites.
WGRAD_TAGS = ("q.dy.dw", "q.x.dw")

# "Trains like FP32" is read as a validation loss within 1% of FP32's
# (NVIDIA's NVFP4 report keeps its relative loss gap to FP8 below about
# 1%; the MX paper calls MXFP8 a drop-in replacement): the band is set
# from the FP32 runs' mean loss when the table is made, and stated in it.
MATCH_REL = 0.01
FINDINGS = [
    # name, variant, baseline, claim ("match" or a Claim), paper[, metric
    # (default the validation loss)]
    ("FP8 with delayed per-tensor scaling trains like FP32", "fp8-delayed",
     "fp32", "match", "Micikevicius et al. 2022: matches 16-bit training"),
    ("MXFP8 trains like FP32", "mxfp8", "fp32", "match",
     "Rouhani et al. 2023: a drop-in replacement"),
    ("NVFP4 ends below MXFP4", "nvfp4", "mxfp4", ss.Claim("less", 0),
     "NVIDIA 2025: NVFP4 converges better than MXFP4"),
    ("NVFP4: the Hadamard transform on the weight gradient lowers the loss",
     "nvfp4-rht", "nvfp4", ss.Claim("less", 0),
     "NVIDIA 2025: the transform helps (at scale; small models may not need it)"),
    ("MXFP4: the Hadamard transform on the backward GEMMs lowers the loss",
     "mxfp4-rht", "mxfp4", ss.Claim("less", 0),
     "Tseng et al. 2025: the transform brings MXFP4 close to BF16"),
    ("NVFP4 with its transform trains like FP32", "nvfp4-rht", "fp32", "match",
     "NVIDIA 2025: within about 1% of the higher-precision loss"),
    ("MXFP4 with its transform trains like FP32", "mxfp4-rht", "fp32", "match",
     "Tseng et al. 2025: close to BF16"),
    # The mechanism: fewer of the weight gradient's operand elements flush
    # to zero once an outlier is spread over its block.
    ("NVFP4: the transform flushes fewer weight-gradient operand elements",
     "nvfp4-rht", "nvfp4", ss.Claim("less", 0), "the recipes' motivation",
     "wgrad_flush_rate"),
    ("MXFP4: the transform flushes fewer weight-gradient operand elements",
     "mxfp4-rht", "mxfp4", ss.Claim("less", 0), "the recipes' motivation",
     "wgrad_flush_rate"),
]


def rates(q):
    n = q["results"].sum()
    if not n:
        return float("nan"), float("nan")
    return q["overflow"].sum() / n, q["to_zero"].sum() / n


def measure(results, run):
    s = eu.steps(results, run)
    e = eu.evals(results, run)
    o = eu.ops(results, run)
    m = eu.meta(results, run)
    q = o[o["kind"] == "quantize"]
    wq = q[q["site"].str.endswith(WGRAD_TAGS)]
    clip, flush = rates(q)
    wclip, wflush = rates(wq)
    last = s.tail(30)
    return {"val_loss": e["test_loss"].iloc[-1],
            "val_bpc": e["test_bits_per_char"].iloc[-1],
            "train_loss_last30": last["loss"].mean(),
            "clip_rate": clip, "flush_rate": flush,
            "wgrad_clip_rate": wclip, "wgrad_flush_rate": wflush,
            "nan_loss_steps": int(s["loss"].isna().sum()),
            "seconds": m["seconds"]}


def check(results):
    missing = [f"{v}-seedN" for v in VARIANTS if not eu.seeds(results, v)]
    if missing:
        print("summarize.py: no runs of " + ", ".join(missing), file=sys.stderr)
        sys.exit(1)


def main(results):
    check(results)
    runs = eu.over_seeds(results, VARIANTS, lambda f: measure(results, f))
    fp32 = dict(zip(runs[runs["variant"] == "fp32"]["seed"],
                    runs[runs["variant"] == "fp32"]["val_loss"]))
    runs["val_loss_diff_to_fp32"] = [
        l - fp32.get(s, np.nan) for s, l in zip(runs["seed"], runs["val_loss"])]
    band = MATCH_REL * float(np.mean(list(fp32.values())))
    rows = []
    for name, variant, baseline, claim, paper, *metric in FINDINGS:
        if claim == "match":
            claim = ss.Claim("within", -band, band)
        rows.append(ss.finding(runs, name, metric[0] if metric else "val_loss",
                               variant, baseline, claim, paper))
    eu.write_tables(results, {
        "gpt_runs": runs,
        "gpt": ss.per_variant(runs, METRICS + ["val_loss_diff_to_fp32"]),
        "gpt_findings": pd.DataFrame(rows)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
