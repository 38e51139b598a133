#!/usr/bin/python3
"""py_round.py — what the Python binding costs: emu.round on a 2^24-element
torch tensor against the C library's own throughput, measured in the
same run, and against torch's .half() / .bfloat16() casts as a peer.

Rows, per format and mode (single thread everywhere: torch is set to one
thread, the library's array rounding is single-threaded):
  c_ffi        the C function emu_ffi_round_f32 called through ctypes on
               raw pointers in a loop, into a preallocated output, no
               Python wrapper: the C library's throughput;
  py_out       emu.round(t, fmt, mode, out=o): the wrapper, same output
               buffer (what the target ">= 90% of C" is about);
  py_alloc     emu.round(t, fmt, mode): the wrapper allocating its result
               (a fresh 64 MB tensor each call: page faults included);
  bench_round  build/bench/bench_round's figure for the same format and
               mode (its own data of the same shape, with counts), if the
               program is there (--bench-round PATH, or skip with "");
  torch        t.half() / t.bfloat16() (binary16 / bfloat16, rne only);
  session      Session.round(site, t, fmt, mode, out=o): the counted op
               through the choke point, every measurement on (counters,
               histograms; ref_rate 0);
  sess_nohist  the same, Session(hist=False): counters only;
  sess_none    the same, nothing measured (counts=hist=swamp=False).
Data as bench_round's: log2|x| normal (mean -12, sd 8), random signs, 5%
exact zeros.  Best of --reps repetitions, wall clock (--cpu: the
process's CPU clock, for a machine shared with others).

Usage: /usr/bin/python3 bench/py_round.py [--log2n 24] [--reps 7] [--cpu]
       [--formats binary16,bfloat16,e4m3] [--modes rne,sr] [--csv]
"""

import argparse
import csv
import ctypes
import io
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import emu  # noqa: E402
from emu import _core  # noqa: E402
from emu._lib import lib  # noqa: E402


def best(fn, reps, clock):
    t = []
    for _ in range(reps):
        t0 = clock()
        fn()
        t.append(clock() - t0)
    return min(t)


def data(n, seed=1):
    rng = np.random.default_rng(seed)
    e = rng.normal(-12.0, 8.0, n)
    x = np.exp2(e) * np.where(rng.random(n) < 0.5, -1.0, 1.0)
    x[rng.random(n) < 0.05] = 0.0
    with np.errstate(over="ignore", under="ignore"):
        return torch.from_numpy(x.astype(np.float32))


def bench_round_rows(path, log2n, reps, cpu):
    if not path or not os.path.exists(path):
        return {}
    cmd = [path, "--csv", "--log2n", str(log2n), "--reps", str(reps),
           "--no-guard-rows", "--mpfr-n", "1000"] + (["--cpu"] if cpu else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return {(r["format"], r["mode"]): float(r["melem_per_s"])
            for r in csv.DictReader(io.StringIO(out))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log2n", type=int, default=24)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--formats", default="binary16,bfloat16,e4m3")
    ap.add_argument("--modes", default="rne,sr")
    ap.add_argument("--csv", action="store_true")
    ap.add_argument("--bench-round", default=os.path.join(
        os.path.dirname(HERE), "build", "bench", "bench_round"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    clock = time.process_time if a.cpu else time.perf_counter
    n = 1 << a.log2n
    t = data(n)
    x = t.numpy()
    o = torch.empty_like(t)
    on = o.numpy()
    cpp = bench_round_rows(a.bench_round, a.log2n, a.reps, a.cpu)
    rows = []
    for fname in a.formats.split(","):
        f = emu.format(fname)
        for mode in a.modes.split(","):
            r = _core._rounding(mode, None, "after", "ieee")
            xp, op = x.ctypes.data, on.ctypes.data

            def c_ffi():
                rc = lib.emu_ffi_round_f32(f._h, r._h, 1, 0, 0, op, xp, n, None)
                assert rc == 0
            tc = best(c_ffi, a.reps, clock)
            tp = best(lambda: emu.round(t, f, mode, seed=1, out=o), a.reps, clock)
            ta = best(lambda: emu.round(t, f, mode, seed=1), a.reps, clock)
            row = {"format": fname, "mode": mode,
                   "c_ffi": n / tc / 1e6, "py_out": n / tp / 1e6,
                   "py_alloc": n / ta / 1e6,
                   "bench_round": cpp.get((fname, mode), float("nan")),
                   "torch": float("nan")}
            cast = {"binary16": torch.Tensor.half,
                    "bfloat16": torch.Tensor.bfloat16}.get(fname)
            if cast is not None and mode == "rne":
                row["torch"] = n / best(lambda: cast(t), a.reps, clock) / 1e6
            for key, kw in (("session", {}), ("sess_nohist", {"hist": False}),
                            ("sess_none", {"counts": False, "hist": False,
                                           "swamp": False})):
                with emu.Session(seed=1, **kw) as s:
                    row[key] = n / best(lambda: s.round("x", t, f, mode, out=o),
                                        a.reps, clock) / 1e6
            row["py_out_pct_of_c"] = 100 * row["py_out"] / row["c_ffi"]
            rows.append(row)
    cols = ["format", "mode", "c_ffi", "py_out", "py_alloc", "bench_round",
            "torch", "py_out_pct_of_c", "session", "sess_nohist", "sess_none"]
    if a.csv:
        w = csv.DictWriter(sys.stdout, fieldnames=cols)
        w.writeheader()
        for row in rows:
            w.writerow({k: ("%.1f" % v if isinstance(v, float) else v)
                        for k, v in row.items()})
        return
    print("emu.round on a 2^%d-element torch float32 tensor, Melem/s "
          "(best of %d, %s clock, 1 thread; kernels: %s)" % (
              a.log2n, a.reps, "CPU" if a.cpu else "wall",
              os.environ.get("EMU_ISA", "best available")))
    print("%-9s %-5s %9s %9s %9s %11s %9s %10s %9s %9s %9s" % (
        "format", "mode", "C (FFI)", "py out=", "py alloc", "bench_round",
        "torch", "py/C %", "session", "no hist", "unmeasrd"))
    for r in rows:
        print("%-9s %-5s %9.0f %9.0f %9.0f %11.0f %9.0f %9.1f%% %9.0f %9.0f %9.0f" % (
            r["format"], r["mode"], r["c_ffi"], r["py_out"], r["py_alloc"],
            r["bench_round"], r["torch"], r["py_out_pct_of_c"], r["session"],
            r["sess_nohist"], r["sess_none"]))


if __name__ == "__main__":
    main()
