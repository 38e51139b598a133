#!/usr/bin/env bash
# The data of notebooks/formats.ipynb: every registered format's parameters
# and the value of every bit pattern of each 8-bit (and smaller) format,
# straight from `emu formats --csv` and `emu values FORMAT --csv`.
# Takes a second; --quick writes the same files to results-quick/.
EXP=$(cd "$(dirname "$0")" && pwd)
. "$EXP/../common.sh"
if [ $LIST_ONLY = 1 ]; then
    echo "$NAME: no job list (a second of emu formats and emu values)"
    exit 0
fi

"$EMU" formats --csv > "$RESULTS/formats.csv"
# Formats of at most 8 bits (column 3 of the CSV is the width in bits;
# the aliases column is quoted and may hold commas, so let Python parse).
"$PY" - "$RESULTS/formats.csv" > "$WORK/small.txt" <<'PYEOF'
import sys
import pandas as pd
f = pd.read_csv(sys.argv[1])
print("\n".join(f.loc[f["bits"] <= 8, "name"]))
PYEOF
rm -f "$RESULTS"/values_*.csv
while read -r fmt; do
    "$EMU" values "$fmt" --csv > "$RESULTS/values_$fmt.csv"
done < "$WORK/small.txt"
finish
