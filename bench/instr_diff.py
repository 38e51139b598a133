#!/usr/bin/python3
"""Per-step instructions by function from instr_step.sh's two callgrind
files: (Ir(S2 run) - Ir(S1 run)) / (S2 - S1) for each function, largest
first.  Usage: instr_diff.py DIR [S1 S2 [TOP]]"""
import re, subprocess, sys

def table(path):
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    t = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(\S+)", line)
        if m and m.group(2) != "PROGRAM":
            name = m.group(2).split(":")[-1]
            t[name] = t.get(name, 0) + int(m.group(1).replace(",", ""))
    return t

d = sys.argv[1]
s1, s2 = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (10, 20)
top = int(sys.argv[4]) if len(sys.argv) > 4 else 20
a, b = table(f"{d}/cg.{s1}"), table(f"{d}/cg.{s2}")
rows = sorted(((b.get(k, 0) - a.get(k, 0)) / (s2 - s1), k) for k in set(a) | set(b))
tot = sum(r[0] for r in rows)
print(f"# per step, by function (self): total {tot:,.0f}")
for v, k in sorted(rows, reverse=True)[:top]:
    print(f"{v:14,.0f} {100 * v / tot:5.1f}%  {k}")
