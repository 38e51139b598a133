#!/usr/bin/env python3
"""summarize.py RESULTS_DIR — experiment 1's numbers, from its result files.

Writes RESULTS_DIR/summary_scaling.csv, summary_shift.csv,
summary_master.csv and summary_rule.csv (the mechanism, from seed 1's runs:
exputil reads RUN-seed1, or the older single-seed folder RUN), and over
every seed summary_runs.csv (per run), summary_variants.csv (mean and sd
per run name) and summary_findings.csv (per finding of the paper: the
paired difference variant - baseline in accuracy points, its 95% t
interval and the verdict; tools/seedstats.py states the rule).  The LSTM
language model's runs (lstm-*) have their own tables, summary_lstm_*.csv:
hist (the FP32 gradient histogram per site), mult (what each loss
multiplier would put below FP16's range: the choice of the shifted loss),
scaling, master, runs, variants and findings (in validation bits per
character: variant - baseline, positive = worse).  Everything is printed
as Markdown tables (the README quotes them).  Called by run.sh after the
runs.
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


def grad_rates(results, run):
    """Per gradient role, the fractions of a run's results (ops.csv totals)
    that went to zero and that overflowed."""
    o = eu.ops(results, run)
    o = o[eu.is_grad_site(o)]
    row = {}
    for role in eu.GRAD_ROLES:
        d = o[o["role"] == role]
        row[f"{role}_to_zero"] = d["to_zero"].sum() / d["results"].sum()
        row[f"{role}_overflow"] = d["overflow"].sum() / d["results"].sum()
    return row


def measured(results, run):
    """What an FP16 run itself saw, over the whole run (ops.csv totals)."""
    m = eu.meta(results, run)
    row = {"test_accuracy": m["test_accuracy"], "skipped_steps": m["skipped_steps"],
           "final_train_loss": eu.final_loss(eu.steps(results, run))}
    row.update(grad_rates(results, run))
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


# --- the LSTM language model -------------------------------------------------

LM_SCALES = (1, 8, 1024)
LM_SHIFT = {"plain": 0, "shift8": -8}   # the loss multiplier, log2
# The LSTM's training runs (each over seeds).
LM_RUNS = (["lstm-fp32"]
           + [f"lstm-fp16-{v}-{s}" for v in LM_SHIFT
              for s in [f"s{x}" for x in LM_SCALES] + ["dynamic"]]
           + ["lstm-fp16-nomaster"])
# "Matches FP32" for the language model: within +-0.02 bits per character
# (1.4% of the per-character perplexity), fixed before the runs; the
# paper reports matching perplexities without a band.
LM_MATCH = 0.02
LM_FINDINGS = [
    ("unscaled FP16 is worse than FP32 (plain loss)", "lstm-fp16-plain-s1",
     "lstm-fp32", ss.Claim("greater", 0), "LMs: FP16 without scaling suffers"),
    ("loss scale 8 matches FP32 (plain loss)", "lstm-fp16-plain-s8", "lstm-fp32",
     ss.Claim("within", -LM_MATCH, LM_MATCH), "LMs: a loss scale matches FP32"),
    ("loss scale 2^10 matches FP32 (plain loss)", "lstm-fp16-plain-s1024",
     "lstm-fp32", ss.Claim("within", -LM_MATCH, LM_MATCH), "scaling matches FP32"),
    ("dynamic scaling matches FP32 (plain loss)", "lstm-fp16-plain-dynamic",
     "lstm-fp32", ss.Claim("within", -LM_MATCH, LM_MATCH), "scaling matches FP32"),
    ("unscaled FP16 is worse than FP32, loss x2^-8", "lstm-fp16-shift8-s1",
     "lstm-fp32", ss.Claim("greater", 0), "without scaling: diverges / worse"),
    ("loss scale 8 recovers FP32, loss x2^-8", "lstm-fp16-shift8-s8", "lstm-fp32",
     ss.Claim("within", -LM_MATCH, LM_MATCH), "SSD: scale 8 matches FP32"),
    ("loss scale 2^10 recovers FP32, loss x2^-8", "lstm-fp16-shift8-s1024",
     "lstm-fp32", ss.Claim("within", -LM_MATCH, LM_MATCH), "scaling recovers FP32"),
    ("dynamic scaling recovers FP32, loss x2^-8", "lstm-fp16-shift8-dynamic",
     "lstm-fp32", ss.Claim("within", -LM_MATCH, LM_MATCH), "scaling recovers FP32"),
    ("no master copy is worse (lr to 1e-4; vs lstm-fp16-plain-dynamic)",
     "lstm-fp16-nomaster", "lstm-fp16-plain-dynamic", ss.Claim("greater", 0),
     "speech: 80% relative accuracy lost"),
]


def lm_hist_table(results):
    """The FP32 LSTM's gradient values (seed 1, whole run) per site and per
    role: zeros, and the fractions of the non-zeros below 2^-24 (FP16's
    smallest subnormal) and below 2^-14 (its smallest normal)."""
    if not eu.have(results, "lstm-fp32"):
        return pd.DataFrame()
    h = eu.hist(results, "lstm-fp32")
    d = h[(h["which"] == "exact") & eu.is_grad_site(h)]
    rows = []
    groups = [(r, s) for r in eu.GRAD_ROLES
              for s in sorted(d.loc[d["role"] == r, "site"].unique())]
    for role, site in groups + [(r, "all") for r in eu.GRAD_ROLES]:
        zero, total, b = eu.binades(h, role, sites=None if site == "all" else [site])
        nz = max(1, total - zero)
        cum = b.cumsum() / nz
        rows.append({"role": role, "site": site, "values": int(total),
                     "zero": zero / total,
                     "nonzero_below_2^-24": b[b.index < -24].sum() / nz,
                     "nonzero_below_2^-14": b[b.index < -14].sum() / nz,
                     "nonzero_median_binade": int(b.index[np.searchsorted(cum.values, 0.5)]),
                     "max_binade": int(b.index.max())})
    return pd.DataFrame(rows)


def lm_mult_table(results):
    """Fraction of non-zero gradient values below 2^-24 if the loss were
    multiplied by 2^-k (the FP32 histogram shifted by k binades): the
    shifted loss's multiplier is the smallest k putting a clear majority of
    the activation gradients there (README)."""
    if not eu.have(results, "lstm-fp32"):
        return pd.DataFrame()
    h = eu.hist(results, "lstm-fp32")
    bz = {role: eu.binades(h, role) for role in eu.GRAD_ROLES}
    return pd.DataFrame([
        {"loss_multiplier": f"2^-{k}",
         **{f"{role}_nonzero_below_2^-24": eu.lost_fraction(
             bz[role], -k, FP16_LOST_LT24)["lost_of_nonzero"] for role in eu.GRAD_ROLES}}
        for k in range(0, 15)])


def lm_measure(results, run):
    m = eu.meta(results, run)
    return {"test_bits_per_char": m["test_bits_per_char"],
            "test_loss": m["test_loss"],
            "final_train_loss": eu.final_loss(eu.steps(results, run))}


def lm_scaling_table(results, per):
    """Per variant and loss scale: predicted losses (the FP32 histogram of
    seed 1 shifted), measured ones (the FP16 run of seed 1), and the
    validation bits per character over seeds."""
    if not eu.have(results, "lstm-fp32"):
        return pd.DataFrame()
    h = eu.hist(results, "lstm-fp32")
    bz = {role: eu.binades(h, role) for role in eu.GRAD_ROLES}
    bpc = per.set_index("variant") if not per.empty else None
    rows = []
    for variant, shift in LM_SHIFT.items():
        for scale in LM_SCALES + ("dynamic",):
            run = f"lstm-fp16-{variant}-" + (f"s{scale}" if scale != "dynamic" else "dynamic")
            row = {"variant": variant, "loss_scale": scale}
            for role in eu.GRAD_ROLES:
                if scale == "dynamic":
                    continue
                ls = int(np.log2(scale)) + shift
                rne = eu.lost_fraction(bz[role], ls, FP16_LOST_RNE, FP16_OVERFLOW)
                row[f"fp32hist_{role}_lost_rne"] = rne["lost"]
                row[f"fp32hist_{role}_overflow"] = rne["overflow"]
            if eu.have(results, run):
                row.update(grad_rates(results, run))
                row["skipped_steps"] = eu.meta(results, run)["skipped_steps"]
            if bpc is not None and run in bpc.index:
                row["seeds"] = bpc.loc[run, "seeds"]
                row["test_bpc_mean"] = bpc.loc[run, "test_bits_per_char_mean"]
                row["test_bpc_sd"] = bpc.loc[run, "test_bits_per_char_sd"]
            rows.append(row)
    if bpc is not None and "lstm-fp32" in bpc.index:
        for r in rows:
            r["fp32_test_bpc_mean"] = bpc.loc["lstm-fp32", "test_bits_per_char_mean"]
    return pd.DataFrame(rows)


def lm_master_table(results):
    """Updates that changed nothing (seed 1), with and without the FP32
    master copy, over the whole run and over its last tenth (where the
    cosine schedule's learning rate is smallest)."""
    rows = []
    for tag, run in (("master", "lstm-fp16-plain-dynamic"), ("nomaster", "lstm-fp16-nomaster")):
        if not eu.have(results, run):
            continue
        s = eu.steps(results, run)
        last = s.iloc[-max(1, len(s) // 10):]
        rows.append({"run": run, "absorbed": eu.absorbed_rate(s),
                     "absorbed_last_tenth": eu.absorbed_rate(last),
                     "test_bits_per_char": eu.meta(results, run)["test_bits_per_char"]})
    return pd.DataFrame(rows)


def lm_seed_tables(results):
    runs = eu.over_seeds(results, LM_RUNS, lambda f: lm_measure(results, f))
    if runs.empty:
        return runs, runs, runs
    per = ss.per_variant(runs, ["test_bits_per_char", "final_train_loss"])
    findings = pd.DataFrame([
        ss.finding(runs, name, "test_bits_per_char", variant, base, claim, paper)
        for name, variant, base, claim, paper in LM_FINDINGS
        if (runs.variant == variant).any() and (runs.variant == base).any()])
    return runs, per, findings


def main(results):
    runs, per, findings = seed_tables(results)
    lm_runs, lm_per, lm_findings = lm_seed_tables(results)
    eu.write_tables(results, {"scaling": scaling_table(results),
                              "shift": shift_table(results),
                              "master": master_table(results),
                              "rule": rule_table(results),
                              "runs": runs, "variants": per,
                              "findings": findings,
                              "lstm_hist": lm_hist_table(results),
                              "lstm_mult": lm_mult_table(results),
                              "lstm_scaling": lm_scaling_table(results, lm_per),
                              "lstm_master": lm_master_table(results),
                              "lstm_runs": lm_runs, "lstm_variants": lm_per,
                              "lstm_findings": lm_findings})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results"))
