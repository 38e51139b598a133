#!/bin/sh
# build.sh — builds the example testbench (tb_hw.sv and its units) with
# Verilator 5 into OUTDIR/Vtb_hw, linked with libemu for the DPI-C golden
# model.  Used by tests/hw/rtl.sh and by hand:
#
#   sh examples/hw/build.sh /tmp/hw                   # an installed libemu
#   sh examples/hw/build.sh /tmp/hw -Lbuild/libemu -lemu -Wl,-rpath,$PWD/build/libemu
#   /tmp/hw/Vtb_hw                                     # runs every check
#
# Linker flags default to `pkg-config --libs libemu`.  EMU_DPI_SV names the
# package of DPI declarations (default: the installed share/emu/emu_dpi.sv
# if pkg-config knows libemu, else this source tree's).
set -eu
OUT=${1:?usage: build.sh OUTDIR [linker flags for libemu]}
shift
HERE=$(cd "$(dirname "$0")" && pwd)
if [ $# -eq 0 ]; then
    set -- $(pkg-config --libs libemu)
    : "${EMU_DPI_SV:=$(pkg-config --variable=prefix libemu)/share/emu/emu_dpi.sv}"
fi
: "${EMU_DPI_SV:=$HERE/../../libemu/dpi/emu_dpi.sv}"
verilator --binary -j 2 -Wall --top-module tb_hw -Mdir "$OUT" -LDFLAGS "$*" \
    "$EMU_DPI_SV" "$HERE/fp8_pkg.sv" "$HERE/fp8_mul.sv" "$HERE/fp8_dot4.sv" \
    "$HERE/tb_hw.sv" > "$OUT.log" 2>&1 || { cat "$OUT.log" >&2; exit 1; }
