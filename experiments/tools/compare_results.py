#!/usr/bin/env python3
"""compare_results.py REFERENCE NEW — are two results folders the same,
bit for bit, apart from wall times?

Every CSV and JSON file below either folder must be in both, with the same
text in every cell and value, except:
  - wall times: CSV columns and JSON keys named in TIME_FIELDS;
  - run_info.json (the run's time, date and commit) and figures/ (the
    notebooks' PNGs, which depend on the matplotlib version).
Other files (e.g. .txt) are compared byte for byte.  CSV cells are compared
as written (no parsing into floats), so a change in the last printed digit
is a difference.  Prints each difference (at most 20) and exits 1 if there
is any, 0 otherwise.
"""
import csv
import json
import os
import sys

TIME_FIELDS = {"seconds"}
SKIP_FILES = {"run_info.json"}
SKIP_DIRS = {"figures"}


def files(top):
    out = set()
    for d, dirs, names in os.walk(top):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        for n in names:
            if n not in SKIP_FILES and not n.endswith(".png"):
                out.add(os.path.relpath(os.path.join(d, n), top))
    return out


def csv_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return rows
    keep = [i for i, c in enumerate(rows[0]) if c not in TIME_FIELDS]
    return [[r[i] if i < len(r) else None for i in keep] for r in rows]


def drop_times(v):
    if isinstance(v, dict):
        return {k: drop_times(x) for k, x in v.items() if k not in TIME_FIELDS}
    if isinstance(v, list):
        return [drop_times(x) for x in v]
    return v


def compare_file(a, b):
    """None when the same, else a short description of the first change."""
    if a.endswith(".csv"):
        ra, rb = csv_rows(a), csv_rows(b)
        if len(ra) != len(rb):
            return f"{len(ra)} rows before, {len(rb)} now"
        for i, (x, y) in enumerate(zip(ra, rb)):
            if x != y:
                cols = ra[0] if ra else []
                where = [cols[j] if j < len(cols) else str(j)
                         for j in range(max(len(x), len(y)))
                         if j >= len(x) or j >= len(y) or x[j] != y[j]]
                return f"row {i} differs in {', '.join(where[:5])}: {x} -> {y}"[:400]
        return None
    if a.endswith(".json"):
        with open(a) as f:
            ja = drop_times(json.load(f))
        with open(b) as f:
            jb = drop_times(json.load(f))
        return None if ja == jb else "values differ"
    with open(a, "rb") as f:
        ba = f.read()
    with open(b, "rb") as f:
        bb = f.read()
    return None if ba == bb else "bytes differ"


def compare(ref, new):
    """The list of differences between two results folders."""
    fa, fb = files(ref), files(new)
    diffs = [f"{p}: only in the reference" for p in sorted(fa - fb)]
    diffs += [f"{p}: only in the new results" for p in sorted(fb - fa)]
    for p in sorted(fa & fb):
        d = compare_file(os.path.join(ref, p), os.path.join(new, p))
        if d:
            diffs.append(f"{p}: {d}")
    return diffs


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    diffs = compare(argv[1], argv[2])
    for d in diffs[:20]:
        print("differs:", d)
    if len(diffs) > 20:
        print(f"... and {len(diffs) - 20} more")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
