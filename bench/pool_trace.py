#!/usr/bin/python3
"""Where a run on several threads loses to one: reads the job trace that
libemu's pool writes under EMU_POOL_TRACE=FILE (libemu/pool.c) and prints,
per part function and call site, the jobs' time, the parts' time on each
thread, the caller's wait for the last part, the worker's start latency
and the imbalance between the threads' shares; then the main thread's
time outside any job.

    EMU_POOL_TRACE=/tmp/t emu train ... --threads 2
    /usr/bin/python3 bench/pool_trace.py /tmp/t build/cli/emu [--skip N]

Times are wall clock (the monotonic clock) and, where said, the threads'
CPU clocks, which a busy machine disturbs far less: a part's CPU time is
the work it did, its wall time that plus the time the system ran someone
else.  The steps are told apart by the batch gather (gather_part), the
first job of an image model's step; --skip N leaves out the first N steps
(their pages fault in).  The evaluation's jobs after the last step's
gather are counted in its step: run with a small --test-examples.

--sequence adds a table of a step's jobs in their order (steps with the
most common job count), medians over the steps: the serial stretch before
each job (wall, and the main thread's CPU), its wall time and its parts'
CPU time, then the stretch after the last job.  It says which op a serial
stretch belongs to, where the per-function table sums them.
"""
import argparse
import bisect
import collections
import subprocess
import sys


def symbols(exe):
    """Sorted (address, name) of exe's functions."""
    out = subprocess.run(["nm", "-C", "--defined-only", exe],
                         capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1] in "tTwW":
            syms.append((int(parts[0], 16), parts[2]))
    syms.sort()
    return syms


class Resolver:
    def __init__(self, exe, anchor):
        self.exe = exe
        self.syms = symbols(exe)
        self.addrs = [a for a, _ in self.syms]
        base = dict((n, a) for a, n in self.syms)["emu_pool_run"]
        self.slide = anchor - base
        self.cache = {}

    def name(self, addr):
        a = addr - self.slide
        i = bisect.bisect_right(self.addrs, a) - 1
        return self.syms[i][1] if i >= 0 else hex(a)

    def site(self, addr):
        """The call site's function, with the functions inlined into it
        (innermost first), by addr2line."""
        if addr in self.cache:
            return self.cache[addr]
        a = addr - self.slide - 1  # the call, not the return address
        try:
            out = subprocess.run(["addr2line", "-f", "-i", "-C", "-s", "-e",
                                  self.exe, hex(a)], capture_output=True,
                                 text=True, check=True).stdout.split("\n")
            names = [out[i] for i in range(0, len(out) - 1, 2)]
            lines = [out[i] for i in range(1, len(out) - 1, 2)]
            s = "<".join(n for n in names[:2]) + " " + lines[0]
        except (OSError, subprocess.CalledProcessError, IndexError):
            s = self.name(addr)
        self.cache[addr] = s
        return s


def read(path):
    jobs = []
    anchor = None
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "#":
                anchor = int(w[-1], 16)
            elif w[0] == "J":
                jobs.append({"fn": int(w[1], 16), "site": int(w[2], 16),
                             "T": int(w[3]), "inline": int(w[4]),
                             "start": int(w[5]), "own_end": int(w[6]),
                             "end": int(w[7]), "cpu0": int(w[8]),
                             "cpu1": int(w[9]), "parts": []})
            elif w[0] == "P":
                jobs[-1]["parts"].append((int(w[1]), int(w[2]), int(w[3]),
                                          int(w[4])))
    return anchor, jobs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("exe")
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--sequence", action="store_true")
    a = ap.parse_args()
    anchor, jobs = read(a.trace)
    r = Resolver(a.exe, anchor)
    # the main thread's jobs: those not inside another (nested ones run
    # in a part, on whichever thread)
    top = []
    for j in jobs:
        if top and j["start"] < top[-1]["end"]:
            continue
        top.append(j)
    gathers = [i for i, j in enumerate(top) if r.name(j["fn"]) == "gather_part"]
    if len(gathers) <= a.skip + 1:
        sys.exit("pool_trace: too few steps in the trace")
    first, last = gathers[a.skip], gathers[-1]
    steps = len(gathers) - 1 - a.skip
    sel = top[first:last]
    ms = 1e-6 / steps
    window = sel[-1]["start"] - sel[0]["start"]
    # per function and site
    rows = collections.OrderedDict()
    gap_wall = gap_cpu = 0
    for k, j in enumerate(sel):
        key = (r.name(j["fn"]), r.site(j["site"]))
        row = rows.setdefault(key, collections.Counter())
        if k > 0:  # the main thread's time since the job before
            row["before"] += j["cpu0"] - sel[k - 1]["cpu1"]
            gap_wall += j["start"] - sel[k - 1]["end"]
            gap_cpu += j["cpu0"] - sel[k - 1]["cpu1"]
        row["jobs"] += 1
        row["T"] = max(row["T"], j["T"])
        row["wall"] += j["end"] - j["start"]
        row["cpu_main"] += j["cpu1"] - j["cpu0"]
        if j["T"] < 2 or j["inline"]:
            row["serial"] += j["end"] - j["start"]
            row["inline"] += 1 if j["T"] >= 2 else 0
            continue
        by = collections.Counter()
        cby = collections.Counter()
        for who, t0, t1, cpu in j["parts"]:
            by[who] += t1 - t0
            cby[who] += cpu
        row["part_wall"] += sum(by.values())
        row["part_cpu"] += sum(cby.values())
        row["caller_parts"] += by[0]
        row["wait"] += j["end"] - j["own_end"]
        wk = [t0 for who, t0, t1, cpu in j["parts"] if who != 0]
        if wk:
            row["latency"] += min(wk) - j["start"]
        else:
            row["alone"] += 1
        row["extra"] += sum(1 for t, p in enumerate(j["parts"])
                            if t > 0 and p[0] == 0)
        # the imbalance: the busier thread's CPU time over an even share
        if len(cby) > 1:
            row["imb_cpu"] += max(cby.values()) - sum(cby.values()) / len(cby)
        row["ideal"] += sum(by.values()) / max(1, min(j["T"], 2))
    tot = collections.Counter()
    for row in rows.values():
        tot.update(row)
    print("%d steps (after %d), %.3f ms a step on the main thread's clock: "
          "in pool jobs %.3f (of which one-part or run inline %.3f), outside "
          "any job %.3f ms wall / %.3f ms CPU" %
          (steps, a.skip, window * ms, tot["wall"] * ms, tot["serial"] * ms,
           gap_wall * ms, gap_cpu * ms))
    print("split jobs: %.3f ms wall, their parts %.3f ms wall / %.3f ms CPU "
          "(an even share on two threads %.3f), the caller's wait for the "
          "last part %.3f, worker start latency %.3f, CPU imbalance %.3f; "
          "%d parts the caller ran in a worker's place, %d jobs it ran alone"
          % ((tot["wall"] - tot["serial"]) * ms, tot["part_wall"] * ms,
             tot["part_cpu"] * ms, tot["ideal"] * ms, tot["wait"] * ms,
             tot["latency"] * ms, tot["imb_cpu"] * ms,
             tot["extra"], tot["alone"]))
    print()
    print("%-22s %-44s %6s %2s %8s %8s %8s %8s %8s %8s %8s %5s %8s" %
          ("part function", "call site", "jobs/st", "T", "wall", "serial",
           "partwall", "partcpu", "wait", "latency", "imb.cpu", "extra",
           "before"))
    order = sorted(rows.items(), key=lambda kv: -kv[1]["wall"])
    for (fn, site), row in order[:a.top]:
        print("%-22s %-44s %6.1f %2d %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f "
              "%8.3f %5d %8.3f" %
              (fn[:22], site[:44], row["jobs"] / steps, row["T"],
               row["wall"] * ms, row["serial"] * ms, row["part_wall"] * ms,
               row["part_cpu"] * ms, row["wait"] * ms, row["latency"] * ms,
               row["imb_cpu"] * ms, row["extra"], row["before"] * ms))
    print("(ms a step; serial: one-part jobs and jobs the caller ran alone "
          "in order; wait: the caller's, after its own parts; latency: from "
          "the job's start to a worker's first part; imb.cpu: the busier "
          "thread's part CPU over an even share; extra: parts the caller ran "
          "because no worker had claimed them; before: the main thread's CPU "
          "time outside any job since the job before)")
    if a.sequence:
        sequence(r, top, gathers[a.skip:])


def sequence(r, top, gathers):
    """The per-position table of --sequence."""
    import statistics
    steps = [top[g0:g1] for g0, g1 in zip(gathers, gathers[1:])]
    nxt = [top[g1] for g1 in gathers[1:]]
    n = collections.Counter(len(s) for s in steps).most_common(1)[0][0]
    keep = [(s, x) for s, x in zip(steps, nxt) if len(s) == n]
    us = 1e-3
    print()
    print("a step's %d jobs in order (medians over %d steps, us): the main "
          "thread's time before the job (wall, CPU), the job's wall time, "
          "its parts' CPU time" % (n, len(keep)))
    print("%3s %-22s %2s %9s %9s %9s %9s" % ("#", "part function", "T",
                                            "gap.wall", "gap.cpu", "wall",
                                            "partcpu"))
    for k in range(n):
        med = statistics.median
        gw = med(s[k]["start"] - s[k - 1]["end"] if k else 0 for s, _ in keep)
        gc = med(s[k]["cpu0"] - s[k - 1]["cpu1"] if k else 0 for s, _ in keep)
        w = med(s[k]["end"] - s[k]["start"] for s, _ in keep)
        pc = med(sum(p[3] for p in s[k]["parts"]) for s, _ in keep)
        print("%3d %-22s %2d %9.1f %9.1f %9.1f %9.1f" %
              (k, r.name(keep[0][0][k]["fn"])[:22], keep[0][0][k]["T"],
               gw * us, gc * us, w * us, pc * us))
    tw = statistics.median(x["start"] - s[-1]["end"] for s, x in keep)
    tc = statistics.median(x["cpu0"] - s[-1]["cpu1"] for s, x in keep)
    print("after the last job: %.1f us wall, %.1f CPU" % (tw * us, tc * us))


if __name__ == "__main__":
    main()
