# train_common.sh — what the resume tests share, sourced by
# train_resume.sh and train_resume_edges.sh (which define EMU, tmp and
# fail() first), and by train_determinism.sh and train_threads.sh: the
# list of a run's files, killing a run between two whole checkpoints,
# comparing two runs but for their timing (and thread count), and
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

# ckpt_diffs A B T: the bytes in which checkpoints A and B differ besides
# those that may (libemu/nn_ckpt.h): the last 36 (the TIME section with
# the run's elapsed seconds, the trailer's crc32); with T > 0, B's run had
# T threads where A's had one, so also the one byte of the saved
# --threads setting (1 against T) and the crc32 of its section, CONF
# (bytes 41-44).  (cmp -l prints bytes in octal: T < 8.)
ckpt_diffs() {
    size=$(wc -c < "$1")
    cmp -l "$1" "$2" 2>/dev/null | awk -v t="$3" -v end=$((size - 36)) '
        $1 > end { next }
        t && $1 >= 41 && $1 <= 44 { next }
        t && !seen && $2 == 1 && $3 == t { seen = 1; next }
        { n++ }
        END { print n + 0 }'
}

# same_files A B LABEL T [eval-optional]: run folders A and B hold the
# same results: every file of FILES, but for the timing (steps.csv's last
# column, meta.json's "seconds", the checkpoint's TIME section) and, with
# T > 0, B's thread count (see ckpt_diffs).  With eval-optional, an
# eval.csv that neither run wrote is not missing.  Failures name LABEL.
same_files() {
    a=$1 b=$2 label=$3 t=$4 eval_opt=${5:-}
    for f in $FILES; do
        if [ "$f" = eval.csv ] && [ -n "$eval_opt" ] &&
           [ ! -e "$a/$f" ] && [ ! -e "$b/$f" ]; then
            continue
        fi
        [ -s "$a/$f" ] || { fail "$label: $f missing or empty in $a"; continue; }
        [ -s "$b/$f" ] || { fail "$label: $f missing or empty in $b"; continue; }
        case $f in
        steps.csv)
            sed 's/,[^,]*$//' "$a/$f" > "$tmp/x"
            sed 's/,[^,]*$//' "$b/$f" > "$tmp/y"
            ;;
        meta.json)
            grep -v '"seconds"' "$a/$f" > "$tmp/x"
            grep -v '"seconds"' "$b/$f" > "$tmp/y"
            if [ "$t" -gt 0 ]; then
                sed -i 's/"threads": [0-9]*/"threads": T/' "$tmp/x" "$tmp/y"
            fi
            ;;
        checkpoint.bin)
            [ "$(wc -c < "$a/$f")" -eq "$(wc -c < "$b/$f")" ] ||
                { fail "$label: checkpoints of different sizes"; continue; }
            n=$(ckpt_diffs "$a/$f" "$b/$f" "$t")
            [ "$n" -eq 0 ] ||
                fail "$label: checkpoint.bin differs in $n bytes besides the timing" \
                     "(first: $(cmp "$a/$f" "$b/$f"))"
            continue
            ;;
        *) cp "$a/$f" "$tmp/x"; cp "$b/$f" "$tmp/y" ;;
        esac
        cmp -s "$tmp/x" "$tmp/y" ||
            fail "$label: $f differs: $(diff "$tmp/x" "$tmp/y" | head -4)"
    done
}

# same_run A B: run B, resumed or stopped and continued, wrote what the
# uninterrupted run A wrote.
same_run() { same_files "$1" "$2" "$2 against the uninterrupted $1" 0; }

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
