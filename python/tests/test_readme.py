"""README.md's "From Python" section: every ```python block runs, in
order, in one namespace, in a scratch folder (as a reader would paste
them), and a printed line whose code carries a comment "# => ..." must
print exactly that."""

import contextlib
import io
import os
import re

SECTION = "## From Python"


def python_blocks(readme):
    lines = readme.split("\n")
    start = lines.index(SECTION)
    blocks, cur, inside = [], None, False
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("```"):
            if inside:
                blocks.append("\n".join(cur))
                inside = False
            elif line.strip() == "```python":
                cur, inside = [], True
            continue
        if inside:
            cur.append(line)
    return blocks


def test_readme_python_blocks(src_dir, tmp_path, monkeypatch):
    with open(os.path.join(src_dir, "README.md")) as f:
        blocks = python_blocks(f.read())
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__readme__"}
    for i, code in enumerate(blocks):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md python block %d" % (i + 1), "exec"), ns)
        got = [l.rstrip() for l in out.getvalue().split("\n")]
        want = [m.group(1) for m in
                (re.match(r"^print\(.*\)\s*# => (.*)$", l.strip())
                 for l in code.split("\n")) if m]
        for w in want:
            assert w in got, "README python block %d: %r not printed; it " \
                "printed:\n%s" % (i + 1, w, "\n".join(got))
