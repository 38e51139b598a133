#!/usr/bin/python3
"""train_vs_torch.py — libemu's training against PyTorch, side by side.

Times the same training in `emu train` (every libemu preset in the table)
and in PyTorch (fp32, and bf16 under CPU autocast): same model, data,
initialisation scheme, optimizer, batch, number of steps and one thread on
both sides, and prints issue 12's table with each libemu column's ratio to
PyTorch fp32, the final test accuracies (so a reader sees it is the same
training) and the peak memory of each process.

What is timed, on both sides, is the training steps: batch gathering,
forward, loss, backward and update, with libemu's default statistics on
(per-op counters at every step, histograms and per-op rows at the default
--stats-every, no MPFR sampling); libemu's figure is the sum of its own per-step timer (the
`seconds` column of steps.csv).  Data loading, start-up (`import torch`),
the test-set evaluation and the files written at the end are not; they
appear, with the CPU time, in the whole-process table below the first.

Every run is a fresh process (PyTorch through this script's --worker
mode), so its peak RSS is its own (os.wait4).  Runs are interleaved
(seed by seed, column by column) so that a load change on a shared
machine touches every column alike; the table gives medians over seeds.

A benchmark, never a test: --quick (a few steps on a few examples) is
what tests/check.sh runs, to keep this script working; it fails (exit 1)
if any run fails or disagrees on its step count.

With --threads N (N >= 2) a last column times libemu fp32 with `emu train
--threads N`, its ratio taken to libemu fp32 on one thread (the same
training: its results are bit-identical), and the column before it
PyTorch fp32 on N threads (torch.set_num_threads(N), its ratio to PyTorch
on one), the scaling a second core gives the reference on the same
model; the whole-process table then shows whether the second thread had
a core (CPU seconds beside wall).

Usage: /usr/bin/python3 bench/train_vs_torch.py [--quick] [--steps N |
       --epochs N] [--reps N] [--models mlp,cnn,resnet:1] [--all-stats]
       [--threads N] ...
"""
import argparse
import gzip
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

# One thread everywhere: OpenBLAS (libemu's fast GEMMs), OpenMP and MKL
# (PyTorch's intra-op pools).  Set in the children's environment before
# anything is loaded.
# Set to the run's thread count in every child (1 but for the threads
# columns).
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
EMU_PRESETS = ["fp32", "fp16-mpt", "bf16-sr", "fp8-e5m2"]
TORCH_PRECS = ["fp32", "bf16"]
MODEL_LABEL = {"mlp": "MLP 784-256-128-10", "cnn": "LeNet CNN (`cnn`)",
               "resnet:1": "ResNet-8 (`resnet:1`)"}
DEFAULT_MODELS = "mlp,cnn"  # resnet:1 on request: 5-8x the CNN per step
IDX = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
       "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def die(msg):
    print("train_vs_torch: " + msg, file=sys.stderr)
    sys.exit(1)


# ---- the PyTorch side (runs in a worker process) ---------------------------

def load_idx(path, ndim):
    """An IDX file (gzip) as a uint8 array: magic 0x00000800 + ndim."""
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if raw[:3] != b"\0\0\x08" or raw[3] != ndim:
        raise ValueError("%s: not an IDX file of %d dimensions" % (path, ndim))
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_split(data_dir, split, limit):
    """Images as k / 255 in binary32, shape (n, 1, 28, 28), the values
    libemu's loader makes (libemu/data.c), and the labels."""
    import numpy as np
    x = load_idx(os.path.join(data_dir, IDX[split][0]), 3)
    y = load_idx(os.path.join(data_dir, IDX[split][1]), 1)
    if limit:
        x, y = x[:limit], y[:limit]
    x = (x.astype(np.float32) / np.float32(255.0))[:, None, :, :]
    return np.ascontiguousarray(x), y.astype(np.int64)


def torch_model(kind):
    """libemu's `mlp`, `cnn` and `resnet:1` (libemu/nn_model.c,
    parse_arch)."""
    import torch.nn as nn
    if kind == "resnet:1":
        # The PyTorch peer test's definition (the same layers and names as
        # libemu's, checked there gradient by gradient): one definition,
        # not a second copy to keep in step.
        import importlib.util
        path = os.path.join(ROOT, "tests", "torch_peer", "torch_peer.py")
        spec = importlib.util.spec_from_file_location("torch_peer", path)
        peer = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(peer)
        return peer.build(kind)
    if kind == "mlp":  # flatten, 784-256-128-10, ReLU between
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                             nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if kind == "cnn":  # conv5(6, pad 2) pool2, conv5(16) pool2, 120-84-10
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(),
                             nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(),
                             nn.Linear(400, 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU(),
                             nn.Linear(84, 10))
    raise ValueError("unknown model " + kind)


def he_uniform_(model, gen):
    """libemu's initialisation scheme (nn_model.c, init_param): weights
    U(-b, b) with b = sqrt(6 / fan_in), fan_in = inputs x kernel area;
    biases zero; batch norm's gamma 1 and beta 0 (PyTorch's own default).
    (PyTorch's default for the weights is b = sqrt(1 / fan_in).)"""
    import math
    import torch
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)):
                fan_in = m.weight[0].numel()
                b = math.sqrt(6.0 / fan_in)
                m.weight.uniform_(-b, b, generator=gen)
                if m.bias is not None:  # resnet's convolutions have none
                    m.bias.zero_()


def torch_worker(cfg):
    """Trains once; prints one JSON line."""
    t_start = time.perf_counter()
    import torch
    torch.set_num_threads(cfg.get("threads", 1))
    torch.set_num_interop_threads(1)
    xs, ys = load_split(cfg["data_dir"], "train", cfg["train_examples"])
    xt, yt = load_split(cfg["data_dir"], "test", cfg["test_examples"])
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)
    gen = torch.Generator().manual_seed(cfg["seed"])
    model = torch_model(cfg["model"])
    he_uniform_(model, gen)
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"],
                          momentum=cfg["momentum"])
    loss_fn = torch.nn.CrossEntropyLoss()  # mean over the batch, as libemu
    bf16 = cfg["prec"] == "bf16"
    b, steps = cfg["batch"], cfg["steps"]
    per_epoch = x.shape[0] // b
    done, right = 0, 0
    t0 = time.perf_counter()
    while done < steps:
        perm = torch.randperm(x.shape[0], generator=gen)
        for k in range(per_epoch):
            if done == steps:
                break
            idx = perm[k * b:(k + 1) * b]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = model(xb)
                loss = loss_fn(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            # libemu scores every step (loss and accuracy in steps.csv).
            right += int((out.argmax(1) == yb).sum())
            float(loss)
            done += 1
    train_s = time.perf_counter() - t0
    right = 0
    model.eval()  # batch norm on its running statistics, as libemu's eval
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16,
                                         enabled=bf16):
        xt, yt = torch.from_numpy(xt), torch.from_numpy(yt)
        for i in range(0, xt.shape[0], 1000):
            right += int((model(xt[i:i + 1000]).argmax(1) ==
                          yt[i:i + 1000]).sum())
    print(json.dumps({"steps": done, "train_s": train_s,
                      "acc": right / xt.shape[0],
                      "inner_wall_s": time.perf_counter() - t_start,
                      "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))


# ---- running one process and measuring it -----------------------------------

def run_measured(cmd, env):
    """Runs cmd; returns (stdout, stderr, rc, wall s, cpu s, max RSS MiB)."""
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    err.seek(0)
    return (out.read().decode(errors="replace"),
            err.read().decode(errors="replace"), p.returncode, wall,
            ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0)


def child_env(threads=1):
    env = dict(os.environ)
    env.update({k: str(threads) for k in THREAD_ENV})
    return env


def run_torch(a, model, prec, seed, steps, threads=1):
    cfg = {"model": model, "prec": prec, "seed": seed, "steps": steps,
           "batch": a.batch, "lr": a.lr, "momentum": a.momentum,
           "data_dir": a.data_dir, "train_examples": a.train_examples,
           "test_examples": a.test_examples, "threads": threads}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker",
           json.dumps(cfg)]
    out, err, rc, wall, cpu, rss = run_measured(cmd, child_env(threads))
    if rc != 0:
        die("PyTorch %s %s (seed %d) failed, exit %d:\n%s" %
            (model, prec, seed, rc, err.strip()))
    r = json.loads(out.strip().splitlines()[-1])
    r.update(wall_s=wall, cpu_s=cpu, rss_mib=rss)
    return r


def read_csv(path):
    with open(path) as f:
        lines = f.read().strip().splitlines()
    head = lines[0].split(",")
    return [dict(zip(head, ln.split(","))) for ln in lines[1:]]


def run_emu(a, model, preset, seed, steps, epochs, stats_every, tmp,
            threads=1):
    out_dir = os.path.join(tmp, "%s-%s-%d-%d-t%d" % (model, preset, seed,
                                                     stats_every, threads))
    cmd = [a.emu, "train", "--preset", preset, "--model", model,
           "--data", "fashion-mnist", "--data-dir", a.data_dir,
           "--epochs", str(epochs), "--steps", str(steps),
           "--batch", str(a.batch), "--optimizer", "sgd",
           "--lr", repr(a.lr), "--momentum", repr(a.momentum),
           "--seed", str(seed), "--threads", str(threads), "--ref-rate", "0",
           "--out", out_dir, "--quiet"]
    if stats_every:  # 0: emu's default
        cmd += ["--stats-every", str(stats_every)]
    if a.train_examples:
        cmd += ["--train-examples", str(a.train_examples)]
    if a.test_examples:
        cmd += ["--test-examples", str(a.test_examples)]
    out, err, rc, wall, cpu, rss = run_measured(cmd, child_env())
    if rc != 0:
        die("emu train %s %s (seed %d) failed, exit %d:\n  %s\n%s" %
            (model, preset, seed, rc, " ".join(cmd), err.strip()))
    rows = read_csv(os.path.join(out_dir, "steps.csv"))
    ev = read_csv(os.path.join(out_dir, "eval.csv"))
    shutil.rmtree(out_dir)
    return {"steps": len(rows), "train_s": sum(float(r["seconds"])
                                               for r in rows),
            "acc": float(ev[-1]["test_accuracy"]), "wall_s": wall,
            "cpu_s": cpu, "rss_mib": rss}


# ---- the benchmark ----------------------------------------------------------

def columns(a):
    """(key, runner label) for every column, in the order runs interleave."""
    cols = []
    if not a.emu_only:
        cols += [("torch", p) for p in TORCH_PRECS]
        if a.threads > 1:
            cols.insert(1, ("torch-mt", "fp32"))
    if not a.torch_only:
        cols += [("emu", p) for p in EMU_PRESETS]
        if a.threads > 1:  # right after its one-thread column
            cols.insert(cols.index(("emu", "fp32")) + 1, ("emu-mt", "fp32"))
        if a.all_stats:
            cols += [("emu-all", p) for p in EMU_PRESETS]
    return cols


def col_name(key):
    side, p = key
    if side == "torch":
        return "PyTorch fp32" if p == "fp32" else "PyTorch bf16 autocast"
    return "libemu " + p if p == "fp32" else p


def fmt_s(v):
    return "%.2f s" % v if v < 10 else "%.1f s" % v


def median_of(runs, what):
    return statistics.median(r[what] for r in runs)


def table(results, models, rows_of, cell, threads=1):
    """One markdown table: a row per model (and statistics setting), a
    column per side and precision; cell(runs, torch_fp32_runs) -> text.
    threads > 1: two last columns, PyTorch fp32 and libemu fp32 on that
    many threads, each with its ratio to its own one-thread column
    (default rows only)."""
    keys = [("torch", p) for p in TORCH_PRECS]
    heads = ["model"] + [col_name(k) for k in keys] + \
            [col_name(("emu", p)) for p in EMU_PRESETS]
    if threads > 1:
        heads.append("PyTorch fp32, %d threads (ratio to 1 thread)" % threads)
        heads.append("libemu fp32, %d threads (ratio to 1 thread)" % threads)
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for m in models:
        ref = results.get((m, ("torch", "fp32")))
        for emu_side, label in rows_of(m):
            cells = [label]
            for key in keys + [(emu_side, p) for p in EMU_PRESETS]:
                runs = results.get((m, key))
                cells.append(cell(runs, ref if key[0] != "torch" else None)
                             if runs else "–")
            for side in ("torch-mt", "emu-mt") if threads > 1 else ():
                runs = results.get((m, (side, "fp32")))
                one = results.get((m, (side[:-3], "fp32")))
                cells.append(cell(runs, one) if runs and emu_side == "emu"
                             else "–")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def with_ratio(what, unit_fmt):
    def cell(runs, ref):
        v = median_of(runs, what)
        if ref is None:
            return unit_fmt(v)
        return "%s (%.2gx)" % (unit_fmt(v), v / median_of(ref, what))
    return cell


def main():
    ap = argparse.ArgumentParser(
        description="libemu's `emu train` against PyTorch, same training "
        "(issue 12's table).")
    ap.add_argument("--emu", default=os.path.join(ROOT, "build/cli/emu"),
                    help="the emu program (default build/cli/emu)")
    ap.add_argument("--models", default=DEFAULT_MODELS,
                    help="comma-separated, of %s (default %s)" %
                    (",".join(MODEL_LABEL), DEFAULT_MODELS))
    ap.add_argument("--steps", type=int, default=0,
                    help="steps per run (default: --epochs epochs)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3,
                    help="runs per column, seeds --seed, --seed+1, ... "
                    "(the table gives medians)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", help="comma-separated seeds (overrides "
                    "--reps and --seed)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--train-examples", type=int, default=0,
                    help="first N training examples (default all 60000)")
    ap.add_argument("--test-examples", type=int, default=0,
                    help="first N test examples (default all 10000)")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--all-stats", action="store_true",
                    help="also a row per model with every statistic at "
                    "every step (--stats-every 1)")
    ap.add_argument("--stats-every", type=int, default=0,
                    help="libemu's --stats-every in the default rows "
                    "(default: emu's own default, not passed)")
    side = ap.add_mutually_exclusive_group()
    side.add_argument("--torch-only", action="store_true")
    side.add_argument("--emu-only", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="3 steps on 640 examples, one seed, every column "
                    "(2 threads in the last), the all-statistics row: "
                    "CI's check that this runs")
    ap.add_argument("--threads", type=int, default=1,
                    help="N >= 2: also libemu fp32 with `emu train "
                    "--threads N`, a last column with its ratio to one "
                    "thread (default 1: no such column)")
    ap.add_argument("--json", help="also write every run's figures here "
                    "(atomically)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker:
        torch_worker(json.loads(a.worker))
        return 0

    if a.quick:
        a.steps, a.reps, a.train_examples, a.test_examples = 3, 1, 640, 256
        a.all_stats, a.seeds = True, None
        a.threads = max(a.threads, 2)  # the threads column runs too
    models = [m for m in a.models.split(",") if m]
    for m in models:
        if m not in MODEL_LABEL:
            die("unknown model '%s' (%s)" % (m, ", ".join(MODEL_LABEL)))
    seeds = ([int(s) for s in a.seeds.split(",")] if a.seeds else
             list(range(a.seed, a.seed + a.reps)))
    if a.batch < 1 or a.reps < 1 or a.epochs < 1 or a.steps < 0 or \
            a.threads < 1:
        die("--batch, --reps, --epochs and --threads must be >= 1, "
            "--steps >= 0")
    for split in IDX.values():
        for f in split:
            if not os.path.exists(os.path.join(a.data_dir, f)):
                die("no %s in %s: install Debian's dataset-fashion-mnist "
                    "or give --data-dir" % (f, a.data_dir))
    train_n = a.train_examples or 60000
    test_n = a.test_examples or 10000
    per_epoch = train_n // a.batch
    if per_epoch < 1:
        die("fewer training examples than one batch")
    steps = a.steps or per_epoch * a.epochs
    epochs = -(-steps // per_epoch)

    torch_version = "-"
    if not a.emu_only:
        p = subprocess.run([sys.executable, "-c",
                            "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, env=child_env())
        if p.returncode != 0:
            die("cannot import torch with %s (install Debian's "
                "python3-torch, or run with --emu-only):\n%s" %
                (sys.executable, p.stderr.strip()))
        torch_version = p.stdout.strip()
    if not a.torch_only and not os.access(a.emu, os.X_OK):
        die("no emu program at %s (build it: cmake -B build && cmake "
            "--build build, or give --emu, or run with --torch-only)" % a.emu)

    cols = columns(a)
    results = {}
    runs = []
    tmp = tempfile.mkdtemp(prefix="emu-vs-torch-")
    try:
        total = len(models) * len(seeds) * len(cols)
        i = 0
        for m in models:
            for seed in seeds:
                for key in cols:
                    i += 1
                    side, p = key
                    t0 = time.perf_counter()
                    if side in ("torch", "torch-mt"):
                        r = run_torch(a, m, p, seed, steps,
                                      a.threads if side == "torch-mt" else 1)
                    else:
                        se = 1 if side == "emu-all" else a.stats_every
                        r = run_emu(a, m, p, seed, steps, epochs, se, tmp,
                                    a.threads if side == "emu-mt" else 1)
                    if r["steps"] != steps:
                        die("%s %s %s: %d steps, expected %d" %
                            (m, side, p, r["steps"], steps))
                    r.update(model=m, side=side, prec=p, seed=seed)
                    results.setdefault((m, key), []).append(r)
                    runs.append(r)
                    print("[%d/%d] %s %-7s %-9s seed %d: train %.2f s, acc "
                          "%.4f, wall %.1f s, %.0f MiB (%.0f s)" %
                          (i, total, m, side, p, seed, r["train_s"],
                           r["acc"], r["wall_s"], r["rss_mib"],
                           time.perf_counter() - t0), file=sys.stderr,
                          flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def default_rows(m):
        rows = [("emu", MODEL_LABEL[m])]
        if a.all_stats:
            rows.append(("emu-all", MODEL_LABEL[m] + ", every statistic "
                         "every step"))
        return rows

    print("Training time (the steps only; median of seeds %s), %d steps of "
          "batch %d on %d Fashion-MNIST examples, SGD lr %g momentum %g, one "
          "thread%s; PyTorch %s; libemu's default statistics%s:\n" %
          (",".join(map(str, seeds)), steps, a.batch, train_n, a.lr,
           a.momentum, " (the last column: %d)" % a.threads
           if a.threads > 1 else "", torch_version,
           " (--stats-every %d)" % a.stats_every if a.stats_every else "",))
    print(table(results, models, default_rows,
                with_ratio("train_s", fmt_s), a.threads))
    print("\nTest accuracy after training (%d test examples, median):\n" %
          test_n)
    print(table(results, models, default_rows,
                lambda runs, ref: "%.4f" % median_of(runs, "acc"), a.threads))
    print("\nPeak memory (max RSS of the process, median):\n")
    print(table(results, models, default_rows,
                with_ratio("rss_mib", lambda v: "%.0f MiB" % v), a.threads))
    print("\nWhole process (median wall / CPU seconds: start-up, data "
          "loading, training, test evaluation, output files):\n")
    print(table(results, models, default_rows,
                lambda runs, ref: "%s / %s" % (fmt_s(median_of(runs, "wall_s")),
                                               fmt_s(median_of(runs, "cpu_s"))),
                a.threads))

    if a.json:
        doc = {"settings": {"steps": steps, "batch": a.batch, "lr": a.lr,
                            "momentum": a.momentum, "seeds": seeds,
                            "train_examples": train_n,
                            "test_examples": test_n,
                            "stats_every": a.stats_every or None,
                            "threads": a.threads,
                            "emu": a.emu, "torch": torch_version},
               "runs": runs}
        d = os.path.dirname(os.path.abspath(a.json))
        fd, tmpf = tempfile.mkstemp(dir=d, prefix=".bench-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmpf, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
