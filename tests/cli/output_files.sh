#!/bin/sh
# emu gen -o / emu scaled quant --pack: what an output path can be.  A
# regular file is replaced atomically; a FIFO is written in place (not
# replaced by a regular file); a symlink keeps pointing where it did and
# its target gets the new bytes; a directory is refused; a run killed by
# SIGTERM or SIGINT leaves no FILE.tmp-* behind and FILE as it was.
# (A character device: output_device.sh, which needs root.)
# Usage: sh output_files.sh /path/to/emu
set -u
EMU=${1:?usage: output_files.sh /path/to/emu}
fail() { echo "FAIL output_files: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
GEN="$EMU gen --op add --format e4m3"

no_leftovers() {
    for f in "$@"; do
        [ -e "$f" ] && fail "a temporary file was left behind: $f"
    done
    return 0
}

# A regular file keeps its permission bits.
$GEN -o want.tv 2> /dev/null || fail "gen -o want.tv exited $?"
echo old > plain
chmod 640 plain
$GEN -o plain 2> /dev/null || fail "gen -o plain exited $?"
cmp -s plain want.tv || fail "plain: not the generated vectors"
[ "$(stat -c %a plain)" = 640 ] || fail "plain: mode $(stat -c %a plain), want 640"

# A FIFO: written in place, still a FIFO afterwards.
mkfifo fifo || fail "mkfifo failed"
cat fifo > from_fifo &
reader=$!
$GEN -o fifo 2> err || fail "gen -o fifo exited $?: $(cat err)"
if [ ! -p fifo ]; then
    kill $reader # still waiting for a writer that never came
    fail "fifo: replaced by a regular file"
fi
wait $reader
cmp -s from_fifo want.tv || fail "fifo: the reader did not get the vectors"
no_leftovers fifo.tmp-*

# /dev/fd/1 onto a pipe: a chain of links only the kernel can follow
# (to "pipe:[N]"), written in place.
$GEN -o /dev/fd/1 2> err | cat > from_pipe
cmp -s from_pipe want.tv || fail "-o /dev/fd/1 into a pipe: $(cat err)"

# A symlink (relative, from another directory): the link stays, its
# target is replaced.
mkdir sub
echo old > target
ln -s ../target sub/link
$GEN -o sub/link 2> err || fail "gen -o sub/link exited $?: $(cat err)"
[ -L sub/link ] || fail "sub/link: no longer a symlink"
[ "$(readlink sub/link)" = ../target ] || fail "sub/link: now points to $(readlink sub/link)"
cmp -s target want.tv || fail "target of sub/link: not the generated vectors"
no_leftovers sub/link.tmp-* target.tmp-*
# A dangling symlink: its target is created.
ln -s made dangling
$GEN -o dangling 2> err || fail "gen -o dangling exited $?: $(cat err)"
[ -L dangling ] && cmp -s made want.tv || fail "dangling: target not created through the link"
# --pack goes through the same writer.
echo old > packed
ln -s packed packlink
printf '1 2 3 4\n' > x.txt
"$EMU" scaled quant mxfp8 --shape 1x4 --pack packlink - < x.txt > /dev/null 2> err ||
    fail "scaled quant --pack packlink exited $?: $(cat err)"
[ -L packlink ] && [ "$(cat packed)" != old ] || fail "--pack through a symlink did not write its target"

# A directory is refused, naming it.
mkdir dir
$GEN -o dir > /dev/null 2> err
[ $? -eq 2 ] || fail "gen -o dir: exit $?, want 2"
grep -q 'dir: is a directory' err || fail "gen -o dir: message '$(cat err)'"

# Killed mid-write: no temporary left, the old file untouched.  The
# default action for SIGINT must be restored first: sh starts background
# jobs with SIGINT ignored (env --default-signal, coreutils 8.31; without
# it only SIGTERM is tried).
sigs=TERM
env --default-signal=INT true 2> /dev/null && sigs="TERM INT"
for sig in $sigs; do
    echo old > big.tv
    reset=
    [ $sig = INT ] && reset=--default-signal=INT
    env $reset $EMU gen --op convert --in binary32 --out bf16 \
        --count 200000000 -o big.tv 2> /dev/null &
    pid=$!
    n=0
    until ls big.tv.tmp-* > /dev/null 2>&1; do
        n=$((n + 1))
        [ $n -lt 500 ] || fail "SIG$sig: emu gen wrote no temporary file"
        sleep 0.01 2> /dev/null || sleep 1
    done
    sleep 0.2 2> /dev/null || sleep 1
    kill -$sig $pid
    wait $pid
    rc=$?
    [ $rc -gt 128 ] || fail "SIG$sig: emu gen exited $rc, not killed by the signal"
    no_leftovers big.tv.tmp-*
    [ "$(cat big.tv)" = old ] || fail "SIG$sig: big.tv changed"
done
echo "output_files: regular, FIFO, symlink, directory and killed writes behave"
