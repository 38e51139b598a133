#!/bin/sh
# The experiments' Python tools (experiments/tools/tests: the statistics
# over seeds in seedstats.py, the bit-for-bit comparison of results in
# compare_results.py), with Debian's interpreter and its numpy, pandas and
# pytest.  Usage: sh exp_tools_pytest.sh [emu] (the emu argument, which
# every tests/cli script gets, is not used); exits 77 without them.
set -u
PY=/usr/bin/python3
TESTS=$(cd "$(dirname "$0")/../../experiments/tools/tests" && pwd)
[ -x "$PY" ] && "$PY" -c 'import numpy, pandas, pytest' 2>/dev/null ||
    { echo "exp_tools_pytest: no /usr/bin/python3 with numpy, pandas and pytest"; exit 77; }
exec "$PY" -m pytest -q -p no:cacheprovider "$TESTS"
