#!/usr/bin/env python3
"""Holds README.md's "Using the library" excerpts to the compiled examples.

Every ```c block in that section must be preceded, in the prose since the
previous code block, by the path of the example it comes from
(examples/library/NAME.c), and must appear in that file verbatim: the same
consecutive lines, all shifted by one indentation (an excerpt from inside
main() may drop its leading spaces).  A line "/* ... */" in an excerpt
stands for lines left out: the parts around it must appear in that order.
Every example in examples/library/ must be quoted at least once.

Usage: readme_excerpts.py README.md   (the CTest example_readme)
"""
import glob
import os
import re
import sys

SECTION = "## Using the library"
PATH_RE = re.compile(r"examples/library/[A-Za-z0-9_]+\.c")
GAP = "/* ... */"


def section_lines(readme):
    """The lines of the section, with their line numbers in the file."""
    lines = readme.split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == SECTION)
    except StopIteration:
        sys.exit(f"readme_excerpts: no '{SECTION}' section in README.md")
    out = []
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("## "):
            break
        out.append((i + 1, lines[i]))
    return out


def excerpts(lines):
    """(line number, cited path or None, code lines) per ```c block."""
    cited, code, in_c, fence, start = None, [], False, None, 0
    for num, line in lines:
        if fence is None:
            m = re.match(r"^(```+)\s*(\w*)\s*$", line)
            if m:
                fence, in_c, start, code = m.group(1), m.group(2) == "c", num, []
                continue
            found = PATH_RE.findall(line)
            if found:
                cited = found[-1]
        elif line.strip() == fence:
            if in_c:
                yield start, cited, code
            fence, cited = None, None
        else:
            code.append(line.rstrip())


def find_part(part, text, start):
    """Index after which `part` matches text[i:] with one indentation
    shift, searching from `start`; -1 if nowhere."""
    first = part[0]
    for i in range(start, len(text) - len(part) + 1):
        if not text[i].endswith(first):
            continue
        indent = text[i][: len(text[i]) - len(first)]
        if indent.strip():
            continue
        if all((text[i + j] == indent + l) if l else not text[i + j].strip()
               for j, l in enumerate(part)):
            return i + len(part)
    return -1


def main():
    readme_path = sys.argv[1] if len(sys.argv) > 1 else "README.md"
    root = os.path.dirname(os.path.abspath(readme_path))
    with open(readme_path, encoding="utf-8") as f:
        readme = f.read()
    failures, checked, quoted = 0, 0, set()
    for num, cited, code in excerpts(section_lines(readme)):
        where = f"README.md:{num}"
        if not cited:
            print(f"FAIL {where}: a C excerpt that names no "
                  "examples/library/*.c file before it")
            failures += 1
            continue
        path = os.path.join(root, cited)
        try:
            with open(path, encoding="utf-8") as f:
                text = [l.rstrip() for l in f.read().split("\n")]
        except OSError as e:
            print(f"FAIL {where}: {cited}: {e.strerror}")
            failures += 1
            continue
        parts, cur = [], []
        for l in code:
            if l.strip() == GAP:
                parts.append(cur)
                cur = []
            else:
                cur.append(l)
        parts.append(cur)
        pos = 0
        for part in parts:
            while part and not part[0]:
                part = part[1:]
            if not part:
                continue
            pos = find_part(part, text, pos)
            if pos < 0:
                print(f"FAIL {where}: not verbatim in {cited}, from:\n    "
                      + part[0])
                failures += 1
                break
        checked += 1
        quoted.add(cited)
    for path in sorted(glob.glob(os.path.join(root, "examples/library/*.c"))):
        rel = os.path.relpath(path, root)
        if rel not in quoted:
            print(f"FAIL README.md: {rel} is never quoted in '{SECTION}'")
            failures += 1
    if failures:
        return 1
    print(f"readme_excerpts: {checked} excerpts verbatim in "
          f"{len(quoted)} examples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
