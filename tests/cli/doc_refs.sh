#!/bin/sh
# Every Markdown document that the sources, the tests and README cite by
# name exists in the repository: a comment that says "see notes/x.md"
# about a file nobody can open is a claim nothing backs.  (Takes the emu
# path like every CLI test, and does not need it.)
# Usage: sh doc_refs.sh [/path/to/emu]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
command -v git > /dev/null 2>&1 && [ -e .git ] || {
    echo "doc_refs: skipped: not a git checkout"
    exit 77
}
fails=0
known=$(git ls-files '*.md')
# path/name.md or name.md, as written in any tracked text file but the
# notebooks (their outputs quote whatever they printed) and this script.
for ref in $(git grep -ohE '[A-Za-z0-9_./-]*[A-Za-z0-9_-]+\.md\b' -- \
                 ':!*.ipynb' ':!*.tv' ':!*.csv' ':!tests/cli/doc_refs.sh' |
             sort -u); do
    ref=${ref#./}
    case $ref in
    */*) echo "$known" | grep -qx "$ref" || echo "$known" | grep -q "/$ref\$" ;;
    *) echo "$known" | grep -qE "(^|/)$ref\$" ;;
    esac || {
        echo "FAIL doc_refs: '$ref' is cited but no such document is in the repository:" >&2
        git grep -n -F "$ref" -- ':!*.ipynb' | head -3 >&2
        fails=$((fails + 1))
    }
done
[ "$fails" -eq 0 ] || exit 1
echo "doc_refs: ok"
