# experiments/tools/env.sh — the paths every experiment script agrees on,
# sourced by common.sh (an experiment's run.sh) and by runjobs.sh (which
# may run alone, e.g. as a Slurm array task).  The caller sets EXP (the
# experiment folder) and MODE (quick | full); this sets
#   ROOT      the repository
#   BUILD     the CMake build folder (EMU_BUILD, default $ROOT/build)
#   EMU       the emu program (EMU, default $BUILD/cli/emu)
#   PY        /usr/bin/python3 when it exists (Debian's numpy and pandas)
#   JOBS      runs at a time (EMU_EXP_JOBS, default 2: the machine's cores)
#   TOOLS     experiments/tools
#   NAME      the experiment's folder name, e.g. 04-bf16
#   RESULTS   $EXP/results (full, committed) or $EXP/results-quick (CI)
#   WORK      raw run folders: $EMU_EXP_WORK/<experiment>/<mode>, default
#             $EXP/work/<mode> (ignored by git; checkpoints live there)
#   JOBLIST   the experiment's job list, $EXP/jobs-<mode>.txt
# and, in quick mode, OPENBLAS_CORETYPE (below).
ROOT=$(cd "$EXP/../.." && pwd)
BUILD=${EMU_BUILD:-$ROOT/build}
EMU=${EMU:-$BUILD/cli/emu}
case $EMU in /*) ;; *) EMU=$PWD/$EMU ;; esac
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
JOBS=${EMU_EXP_JOBS:-2}
TOOLS=$ROOT/experiments/tools
NAME=$(basename "$EXP")
if [ "$MODE" = quick ]; then RESULTS=$EXP/results-quick; else RESULTS=$EXP/results; fi
WORK=${EMU_EXP_WORK:-$EXP/work}
case $WORK in /*) ;; *) WORK=$PWD/$WORK ;; esac
[ -n "${EMU_EXP_WORK:-}" ] && WORK=$WORK/$NAME
WORK=$WORK/$MODE
JOBLIST=$EXP/jobs-$MODE.txt
# Quick runs must reproduce their committed results on any x86-64 machine,
# but the `fast` accumulator's binary32 GEMMs (OpenBLAS sgemm) round
# differently with each CPU kernel OpenBLAS picks (Cooperlake, Haswell and
# Nehalem kernels gave three different fp32 runs): quick mode pins the
# SSE3 kernel every x86-64 CPU runs.  Full runs keep the fastest kernel.
if [ "$MODE" = quick ]; then export OPENBLAS_CORETYPE=Prescott; fi
