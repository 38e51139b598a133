# train_common.sh — what the resume tests share, sourced by
# train_resume.sh and train_resume_edges.sh (which define EMU, tmp and
# fail() first): the list of a run's files, killing a run between two
# whole checkpoints, comparing two runs but for their timing, and
# asserting that a refused command changed nothing.

FILES="meta.json steps.csv ops_steps.csv layers_steps.csv eval.csv ops.csv
       hist.csv ops.json summary.txt checkpoint.bin"

meta_steps() { sed -n 's/^ *"steps": \([0-9]*\),.*/\1/p' "$1/meta.json"; }
rows() { [ -f "$1/steps.csv" ] && echo $(($(wc -l < "$1/steps.csv") - 1)) || echo 0; }

# kill_mid_run DIR MIN CMD...: starts CMD (an emu train writing DIR) and
# kills it with SIGKILL once it has written a checkpoint beyond step MIN
# and before it ends.  It
# is stopped (SIGSTOP) while the folder is inspected: the kill must come
# after a whole checkpoint (meta.json, written last, counts the rows of
# steps.csv, written first), so that this test does not depend on where
# within the writing of a checkpoint a kill lands (train_resume_edges.sh
# looks at that).  Returns 1 if the run ended first.
kill_mid_run() {
    dir=$1 min=$2
    shift 2
    "$@" > /dev/null 2>&1 &
    pid=$!
    while kill -0 "$pid" 2> /dev/null; do
        if [ -f "$dir/checkpoint.bin" ] && kill -STOP "$pid" 2> /dev/null; then
            r=$(rows "$dir")
            if [ "$r" -gt "$min" ] && [ "$r" = "$(meta_steps "$dir")" ] &&
               grep -q '"completed": false' "$dir/meta.json"; then
                kill -KILL "$pid"
                wait "$pid" 2> /dev/null
                return 0
            fi
            kill -CONT "$pid"
        fi
        sleep 0.01 2> /dev/null || sleep 1
    done
    wait "$pid" 2> /dev/null
    return 1
}

# same_run A B: as in train_determinism.sh (same folder name "r").
same_run() {
    a=$1 b=$2
    for f in $FILES; do
        [ -s "$a/$f" ] && [ -s "$b/$f" ] || { fail "$f missing in $a or $b"; continue; }
        case $f in
        steps.csv)
            sed 's/,[^,]*$//' "$a/$f" > "$tmp/x"
            sed 's/,[^,]*$//' "$b/$f" > "$tmp/y"
            ;;
        meta.json)
            grep -v '"seconds"' "$a/$f" > "$tmp/x"
            grep -v '"seconds"' "$b/$f" > "$tmp/y"
            ;;
        checkpoint.bin)
            # All but the last 36 bytes: the TIME section (16 bytes of
            # section header, the elapsed time) and the trailer (12), which
            # differ by the timing alone (libemu/nn_ckpt.h).
            na=$(wc -c < "$a/$f") nb=$(wc -c < "$b/$f")
            head -c $((na - 36)) "$a/$f" > "$tmp/x"
            head -c $((nb - 36)) "$b/$f" > "$tmp/y"
            cmp -s "$tmp/x" "$tmp/y" ||
                fail "$b: checkpoint.bin differs from the uninterrupted run's" \
                     "besides the timing: $(cmp "$tmp/x" "$tmp/y")"
            continue
            ;;
        *) cp "$a/$f" "$tmp/x"; cp "$b/$f" "$tmp/y" ;;
        esac
        cmp -s "$tmp/x" "$tmp/y" ||
            fail "$b: $f differs from the uninterrupted run's: $(diff "$tmp/x" "$tmp/y" | head -4)"
    done
}

# snapshot DIR: a listing of every file's checksum, to show nothing changed.
snapshot() { (cd "$1" && cksum ./* 2> /dev/null); }

# expect_refusal WHAT DIR PATTERN ARGS...: emu ARGS fails (exit 2), its
# message matches PATTERN, and DIR is unchanged.
expect_refusal() {
    what=$1 dir=$2 pat=$3
    shift 3
    before=$(snapshot "$dir")
    "$EMU" "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] || fail "$what: exit $rc (want 2) for: emu $*"
    grep -q -- "$pat" "$tmp/err" || fail "$what: message lacks '$pat': $(cat "$tmp/err")"
    [ "$before" = "$(snapshot "$dir")" ] || fail "$what: $dir was modified"
}
