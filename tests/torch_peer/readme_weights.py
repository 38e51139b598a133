#!/usr/bin/python3
"""README's Python snippets for weights files, run as they are printed
(section "Weights files"): the reader on the final weights of a short
run, its values held against `emu weights show` (an independent reader,
in C); the writer on those tensors, doubled, read back by `emu weights
show` and started from by `emu train --init-from`.

Usage: readme_weights.py --emu PATH --root REPOSITORY (its README.md)
Exit status 0 pass, 1 fail, 77 skipped (no torch).
"""
import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout

try:
    import torch  # noqa: F401 (the snippets import it themselves)
except ImportError as e:
    print(f'SKIP: {e}')
    sys.exit(77)

RUN_PATH = 'runs/latest/weights.safetensors'


def snippets(readme):
    text = open(readme, encoding='utf-8').read()
    start = text.index('### Weights files')
    end = text.index('\n## ', start)
    blocks = re.findall(r'```python\n(.*?)```', text[start:end], re.S)
    if len(blocks) != 2:
        raise SystemExit(f'FAIL: {len(blocks)} python blocks under "Weights files", expected 2')
    return blocks


def show(emu, path):
    """name -> (min, max, mean) from `emu weights show`."""
    out = subprocess.run([emu, 'weights', 'show', path], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if line.startswith('#') or f[0] == 'name':
            continue
        rows[f[0]] = tuple(float(v) for v in f[4:7])
    return rows


def close(a, b):
    # emu weights show prints 6 significant digits (%.6g): each printed
    # value is within 5e-6 of the truth, relatively; two of them (the
    # doubled check) within 1e-5 of each other.
    return abs(a - b) <= 1.1e-5 * max(abs(a), abs(b), 1e-30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--emu', required=True)
    ap.add_argument('--root', required=True)
    args = ap.parse_args()
    emu = os.path.abspath(args.emu)
    read_block, write_block = snippets(os.path.join(args.root, 'README.md'))
    if RUN_PATH not in read_block:
        raise SystemExit(f'FAIL: the reading snippet no longer reads {RUN_PATH}')
    tmp = tempfile.mkdtemp(prefix='emu_readme_weights_')
    fails = 0
    try:
        os.chdir(tmp)
        subprocess.run([emu, 'train', '--preset', 'fp16-mpt', '--model', 'mlp:784-16-10',
                        '--steps', '2', '--batch', '16', '--train-examples', '64',
                        '--test-examples', '16', '--quiet', '--out', 'runs/latest'],
                       check=True)
        ns = {}
        buf = io.StringIO()
        with redirect_stdout(buf):
            exec(read_block, ns)
        printed = buf.getvalue().strip()
        want = ("mlp:784-16-10 2 {'fc1.weight': (16, 784), 'fc1.bias': (16,), "
                "'fc2.weight': (10, 16), 'fc2.bias': (10,)}")
        if printed != want:
            print(f'FAIL: the reading snippet printed {printed!r}, expected {want!r}')
            fails += 1
        ref = show(emu, RUN_PATH)
        for k, t in ns['state'].items():
            got = (t.min().item(), t.max().item(), t.double().mean().item())
            if not all(close(a, b) for a, b in zip(got, ref[k])):
                print(f'FAIL: {k}: snippet min/max/mean {got}, emu weights show {ref[k]}')
                fails += 1
        # The writer, on the tensors doubled.
        ns['state'] = {k: 2 * t for k, t in ns['state'].items()}
        exec(write_block, ns)
        mine = show(emu, 'mine.safetensors')
        for k in ref:
            if not all(close(2 * a, b) for a, b in zip(ref[k], mine[k])):
                print(f'FAIL: {k}: written back doubled {mine[k]}, expected twice {ref[k]}')
                fails += 1
        r = subprocess.run([emu, 'train', '--preset', 'fp32', '--model', 'mlp:784-16-10',
                            '--init-from', 'mine.safetensors', '--steps', '1', '--batch', '16',
                            '--train-examples', '64', '--test-examples', '16', '--quiet',
                            '--out', 'runs/mine'], stderr=subprocess.PIPE,
                           universal_newlines=True)
        if r.returncode:
            print(f'FAIL: emu train --init-from the written file: {r.stderr.strip()}')
            fails += 1
    finally:
        os.chdir('/')
        shutil.rmtree(tmp, ignore_errors=True)
    print('FAIL' if fails else 'README weights snippets: passed')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
