#!/usr/bin/python3
"""lm_vs_torch.py — issue 13's performance table: the step time of the new
models (resnet:1, lstm, gpt at their default sizes) in `emu train` under
the presets fp32, fp16-mpt, bf16-sr, fp8-e5m2 and mxfp8, against PyTorch
fp32 on the same model, one thread on both sides, with peak memory.

What is compared is the time of one training step (forward, loss,
backward, update; libemu: steps.csv's per-step `seconds`, with its
default statistics on, no MPFR sampling; PyTorch: the same loop body),
as the median over the steps of a run after the first (warm-up): a
median resists the load spikes of a shared machine better than a sum.
Each run is a fresh process, so its peak RSS (os.wait4) is its own.
Runs are interleaved (rep by rep, column by column).

The same training on both sides, as far as step time goes:
  resnet:1  `--data synthetic` 28x28 grey images, SGD momentum 0.9, lr
            0.01, batch 64; PyTorch: torch_peer.py's ResNet (the peer
            test's definition, checked there gradient by gradient) on
            random images of the same shape;
  lstm      lstm:2-256, windows of 64 characters (`--data text`), batch
  gpt       16, AdamW lr 1e-3 weight decay 0.1; gpt:4-128-4-64 (context
            64); PyTorch: lstm_model_torch.py's LSTMLM and torch_peer.py's
            GPT (the peer tests' definitions, the same parameters and
            tied head), random windows over the 97-character vocabulary.
The values drawn do not change PyTorch's time; libemu's can depend on
them (subnormals, counts) and run on its real data.

A benchmark, never a test: --quick (small models, 3 steps, fp32 and one
emulated preset; ~17 s under a load average of 12) keeps the script
working (CTest bench_lm_vs_torch_quick; exit 77, skipped, without torch).

A preset can carry settings after '+', each passed as `--set`:
`fp8-e5m2+opt_state=binary32+exempt_format=binary32` is the fp8-e5m2
preset with Adam's moments and the exempt layers in binary32 (the preset
as it is diverges under Adam on the language models; README, Where the
targets stand).

Usage: /usr/bin/python3 bench/lm_vs_torch.py [--quick] [--steps N]
       [--reps N] [--models resnet:1,lstm,gpt] [--presets ...] [--json F]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1"}
PRESETS = ["fp32", "fp16-mpt", "bf16-sr", "fp8-e5m2", "mxfp8"]
MODELS = ["resnet:1", "lstm", "gpt"]
# --quick's stand-ins: the same kinds of layers, small.
QUICK = {"resnet:1": "resnet:1", "lstm": "lstm:1-32", "gpt": "gpt:1-32-4-16"}
VOCAB = 97


def die(msg):
    print("lm_vs_torch: " + msg, file=sys.stderr)
    sys.exit(1)


def is_lm(model):
    return model.startswith("gpt") or model.startswith("lstm")


def seq_len(model):
    """The window: gpt's context T (default 64), lstm's --seq-len 64."""
    if model.startswith("gpt"):
        rest = model.partition(":")[2] or "4-128-4-64"
        return int(rest.split("-")[3])
    return 64


# ---- the PyTorch side (a worker process) ------------------------------------

def load(path, name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def torch_worker(cfg):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(cfg["seed"])
    peer = load(os.path.join(ROOT, "tests", "torch_peer", "torch_peer.py"),
                "torch_peer")
    model, b = cfg["model"], cfg["batch"]
    if model.startswith("lstm"):
        lm = load(os.path.join(ROOT, "tests", "lstm_model_torch.py"),
                  "lstm_model_torch")
        rest = model.partition(":")[2] or "2-256"
        layers, width = (int(v) for v in rest.split("-"))
        net = lm.LSTMLM(VOCAB, width, layers)
    else:
        net = peer.build(model)
    if model.startswith("gpt"):
        # GPT-2's normal(0, 0.02) matrices and embeddings (PyTorch's
        # default N(0, 1) embedding, tied to the head, gives a first loss
        # of ~24 where libemu's initialisation gives ln 97).
        with torch.no_grad():
            for name, prm in net.named_parameters():
                if prm.dim() == 2:
                    prm.normal_(0.0, 0.02)
    if is_lm(model):
        T = cfg["seq_len"]
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.1)
        stream = torch.randint(0, VOCAB, (100000,))
    else:
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        images = torch.rand(b * 8, 1, 28, 28)
        labels = torch.randint(0, 10, (b * 8,))
    net.train()
    times, losses = [], []
    for k in range(cfg["steps"]):
        t0 = time.perf_counter()
        if is_lm(model):
            p = torch.randint(0, stream.numel() - T - 1, (b,))
            idx = p[:, None] + torch.arange(T + 1)[None, :]
            w = stream[idx]
            x, y = w[:, :T], w[:, 1:].reshape(-1)
            logits = net(x).reshape(-1, VOCAB)
        else:
            sel = torch.randint(0, images.shape[0], (b,))
            x, y = images[sel], labels[sel]
            logits = net(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss))  # libemu reads its loss every step
        times.append(time.perf_counter() - t0)
    print(json.dumps({"times": times, "loss": losses[-1],
                      "torch": torch.__version__}))


# ---- running and measuring ----------------------------------------------------

def run_measured(cmd):
    env = dict(os.environ, **THREAD_ENV)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    out.seek(0)
    err.seek(0)
    return (out.read().decode(errors="replace"),
            err.read().decode(errors="replace"), rc, wall,
            ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0)


def step_time(times):
    """Median step time after the first (warm-up) step."""
    return statistics.median(times[1:] if len(times) > 1 else times)


def run_torch(a, model, seed):
    cfg = {"model": model, "seed": seed, "steps": a.steps,
           "batch": a.lm_batch if is_lm(model) else a.batch,
           "seq_len": seq_len(model)}
    out, err, rc, wall, cpu, rss = run_measured(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(cfg)])
    if rc:
        die("PyTorch %s failed, exit %d:\n%s" % (model, rc, err.strip()))
    r = json.loads(out.strip().splitlines()[-1])
    return {"step_s": step_time(r["times"]), "steps": len(r["times"]),
            "loss": r["loss"], "wall_s": wall, "cpu_s": cpu, "rss_mib": rss,
            "torch": r["torch"]}


def run_emu(a, model, preset, seed, tmp):
    out_dir = os.path.join(tmp, "%s-%d-%d" % (model.replace(":", "_"),
                                              a.presets_idx[preset], seed))
    name, *sets = preset.split("+")
    cmd = [a.emu, "train", "--preset", name, "--model", model,
           "--steps", str(a.steps), "--seed", str(seed), "--threads", "1",
           "--ref-rate", "0", "--checkpoint-every", "0", "--quiet",
           "--force", "--out", out_dir]
    for kv in sets:
        cmd += ["--set", kv]
    if is_lm(model):
        cmd += ["--data", "text", "--batch", str(a.lm_batch),
                "--seq-len", str(seq_len(model)), "--optimizer", "adam",
                "--lr", "1e-3", "--weight-decay", "0.1",
                "--train-examples", "200000", "--test-examples", "20000",
                "--eval-windows", "16"]
    else:
        cmd += ["--data", "synthetic", "--batch", str(a.batch),
                "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9",
                "--train-examples", str(a.batch * max(a.steps, 8)),
                "--test-examples", str(a.batch)]
    out, err, rc, wall, cpu, rss = run_measured(cmd)
    if rc:
        die("emu train %s %s failed, exit %d:\n  %s\n%s" %
            (model, preset, rc, " ".join(cmd), err.strip()))
    with open(os.path.join(out_dir, "steps.csv")) as f:
        lines = f.read().strip().splitlines()
    head = lines[0].split(",")
    rows = [dict(zip(head, ln.split(","))) for ln in lines[1:]]
    shutil.rmtree(out_dir)
    return {"step_s": step_time([float(r["seconds"]) for r in rows]),
            "steps": len(rows), "loss": float(rows[-1]["loss"]),
            "wall_s": wall, "cpu_s": cpu, "rss_mib": rss}


def fmt_s(v):
    return "%.0f ms" % (v * 1e3) if v >= 0.1 else "%.1f ms" % (v * 1e3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--emu", default=os.path.join(ROOT, "build/cli/emu"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--steps", type=int, default=12,
                    help="steps per run (the first is not timed)")
    ap.add_argument("--reps", type=int, default=1,
                    help="runs per column (seeds 1..N; medians)")
    ap.add_argument("--batch", type=int, default=64, help="resnet's batch")
    ap.add_argument("--lm-batch", type=int, default=16,
                    help="windows per step of lstm and gpt")
    ap.add_argument("--quick", action="store_true",
                    help="small models, 3 steps, fp32 and bf16-sr, batch 4")
    ap.add_argument("--json", help="also write every run's figures here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(json.loads(a.worker))
        return 0
    models = [m for m in a.models.split(",") if m]
    presets = [p for p in a.presets.split(",") if p]
    a.presets_idx = {p: i for i, p in enumerate(presets)}
    if a.quick:
        models = [QUICK.get(m, m) for m in models]
        presets = [p for p in presets if p in ("fp32", "bf16-sr")]
        a.steps, a.reps, a.batch, a.lm_batch = 3, 1, 4, 2
    if a.steps < 2 or a.reps < 1:
        die("--steps must be >= 2 (the first is not timed), --reps >= 1")
    if not os.access(a.emu, os.X_OK):
        die("no emu program at %s (build it, or give --emu)" % a.emu)
    p = subprocess.run([sys.executable, "-c", "import torch"],
                       stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode and a.quick:  # CTest's smoke run: skipped, not failed
        print("SKIP: cannot import torch with %s" % sys.executable)
        return 77
    if p.returncode:
        die("cannot import torch with %s (Debian's python3-torch):\n%s"
            % (sys.executable, p.stderr.strip()))

    cols = [("torch", "fp32")] + [("emu", p) for p in presets]
    res, runs = {}, []
    tmp = tempfile.mkdtemp(prefix="emu-lm-vs-torch-")
    load0 = os.getloadavg()
    try:
        n, i = len(models) * a.reps * len(cols), 0
        for m in models:
            for seed in range(1, a.reps + 1):
                for side, prec in cols:
                    i += 1
                    r = (run_torch(a, m, seed) if side == "torch"
                         else run_emu(a, m, prec, seed, tmp))
                    if r["steps"] != a.steps:
                        die("%s %s %s: %d steps, expected %d" %
                            (m, side, prec, r["steps"], a.steps))
                    r.update(model=m, side=side, prec=prec, seed=seed)
                    res.setdefault((m, side, prec), []).append(r)
                    runs.append(r)
                    print("[%d/%d] %s %s %s: step %s, %.0f MiB, loss %.4f"
                          % (i, n, m, side, prec, fmt_s(r["step_s"]),
                             r["rss_mib"], r["loss"]), file=sys.stderr,
                          flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()

    heads = ["model", "PyTorch fp32"] + ["libemu " + presets[0]] + presets[1:]
    def tab(what, fmt):
        lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        for m in models:
            ref = statistics.median(r[what] for r in res[(m, "torch", "fp32")])
            cells = [m, fmt(ref)]
            for prec in presets:
                v = statistics.median(r[what] for r in res[(m, "emu", prec)])
                cells.append("%s (%.2gx)" % (fmt(v), v / ref))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)
    tv = next(r["torch"] for r in runs if r["side"] == "torch")
    print("Step time (median over steps 2..%d, median of %d run(s)), one "
          "thread, PyTorch %s; resnet batch %d, lstm/gpt batch %d windows; "
          "load average %.1f at the start, %.1f at the end:\n"
          % (a.steps, a.reps, tv, a.batch, a.lm_batch, load0[0], load1[0]))
    print(tab("step_s", fmt_s))
    print("\nPeak memory (max RSS of the process):\n")
    print(tab("rss_mib", lambda v: "%.0f MiB" % v))
    # A step's time says little of a run whose loss went to NaN: show
    # libemu's losses (PyTorch's trains on random windows: not comparable).
    print("\nlibemu's loss after the last step, one per run (nan: the run "
          "diverged):\n")
    lines = ["| " + " | ".join(["model"] + presets) + " |",
             "|" + "---|" * (len(presets) + 1)]
    for m in models:
        lines.append("| " + " | ".join([m] + [
            " / ".join("%.3f" % r["loss"] for r in res[(m, "emu", prec)])
            for prec in presets]) + " |")
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"load": [load0, load1], "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
