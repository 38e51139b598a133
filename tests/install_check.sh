#!/bin/sh
# install_check.sh — installs a built tree into a temporary prefix and builds
# examples/consumer against the installed files, through pkg-config (shared
# and static) and through find_package(libemu) (shared and static), runs each
# build, and checks the outputs; builds a small program on the opt-in
# MPFR headers (emu/extend.h, emu/ref.h) with `pkg-config libemu mpfr`,
# and each examples/library/*.c with the pkg-config line its comment gives,
# and runs it; imports the installed Python package with Debian's python3
# and rounds an array.  Exits non-zero on any failure.
#
# Usage: tests/install_check.sh [build-dir]     (default: build)
# Needs cmake, a C compiler, make and pkg-config.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/emu-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
prefix=$tmp/prefix

fail() {
    echo "install_check: FAIL: $*" >&2
    exit 1
}

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "cmake --install"; }

# The pieces a user of the installed library relies on.
libdir=$(dirname "$(find "$prefix" -name libemu.pc | head -n 1)")
libdir=${libdir%/pkgconfig}
[ -f "$libdir/pkgconfig/libemu.pc" ] || fail "no libemu.pc installed"
for f in "$libdir/libemu.a" "$libdir/libemu.so" \
         "$libdir/cmake/libemu/libemuConfig.cmake" \
         "$libdir/cmake/libemu/libemuConfigVersion.cmake" \
         "$prefix/include/emu/emu.h" "$prefix/include/emu/version.h" \
         "$prefix/bin/emu" "$prefix/share/emu/emu_dpi.sv"; do
    [ -e "$f" ] || fail "not installed: ${f#"$prefix"/}"
done
for h in "$src"/libemu/include/emu/*.h; do
    [ -f "$prefix/include/emu/$(basename "$h")" ] ||
        fail "header not installed: emu/$(basename "$h")"
done
soname=$(objdump -p "$libdir/libemu.so" 2>/dev/null | awk '/SONAME/ { print $2 }')
case $soname in
libemu.so.[0-9]*) ;;
*) fail "libemu.so has no versioned SONAME (got '$soname')" ;;
esac
[ -e "$libdir/$soname" ] || fail "$soname (the SONAME) is not installed"
"$prefix/bin/emu" --help >/dev/null 2>&1 || "$prefix/bin/emu" help >/dev/null 2>&1 ||
    fail "installed emu does not run"

# 1. pkg-config, shared library (run path from the Makefile).
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pkg-config --exists --print-errors libemu || fail "pkg-config cannot use libemu.pc"
mkdir "$tmp/pc"
make -s -C "$tmp/pc" -f "$src/examples/consumer/Makefile" \
     SRCDIR="$src/examples/consumer" >"$tmp/pc.log" 2>&1 ||
    { cat "$tmp/pc.log" >&2; fail "pkg-config build"; }
"$tmp/pc/consumer" >"$tmp/out.pc" || fail "pkg-config build does not run"

# 2. pkg-config, static library: Requires.private and Libs.private must be
#    enough to link it.
cc -std=c11 $(pkg-config --cflags libemu) -o "$tmp/pc/consumer-static" \
   "$src/examples/consumer/main.c" "$libdir/libemu.a" \
   $(pkg-config --static --libs libemu | sed 's/ -lemu / /; s/^-lemu //; s/ -lemu$//') \
   >"$tmp/pcs.log" 2>&1 || { cat "$tmp/pcs.log" >&2; fail "static pkg-config build"; }
"$tmp/pc/consumer-static" >"$tmp/out.pcs" || fail "static pkg-config build does not run"

# 2b. The opt-in headers emu/extend.h and emu/ref.h include <mpfr.h> (emu.h
#     does not): a program that uses them adds MPFR to its own flags.
cat >"$tmp/pc/oracle.c" <<'EOT'
#include <stdio.h>
#include <emu/emu.h>
#include <emu/extend.h>
#include <emu/ref.h>
int main(void)
{
    mpfr_t x;
    emu_rounding rne = { 0 };
    emu_status st;
    mpfr_init2(x, 64);
    mpfr_set_d(x, 300.0, MPFR_RNDN);
    double y = emu_ref_round(emu_format_find("e4m3"), x, &rne, &st);
    mpfr_clear(x);
    printf("oracle rne(300) = %g, commit at %p\n", y, (void *)&emu_commit);
    return y != 288.0;
}
EOT
cc -std=c11 $(pkg-config --cflags libemu mpfr) -o "$tmp/pc/oracle" "$tmp/pc/oracle.c" \
   $(pkg-config --libs libemu mpfr) -Wl,-rpath,"$libdir" >"$tmp/oracle.log" 2>&1 ||
    { cat "$tmp/oracle.log" >&2; fail "build with emu/extend.h and emu/ref.h"; }
"$tmp/pc/oracle" >/dev/null || fail "the installed MPFR oracle does not round 300 to 288"

# 2c. The library examples (README's "Using the library") build with the
#     command line their header comments give, and pass their own checks.
mkdir "$tmp/ex"
for ex in "$src"/examples/library/*.c; do
    name=$(basename "$ex" .c)
    cc -std=c11 "$ex" $(pkg-config --cflags --libs libemu) -lm \
       -Wl,-rpath,"$libdir" -o "$tmp/ex/$name" >"$tmp/ex.log" 2>&1 ||
        { cat "$tmp/ex.log" >&2; fail "examples/library/$name.c does not build"; }
    (cd "$tmp/ex" && "./$name" >"$tmp/ex.log" 2>&1) ||
        { cat "$tmp/ex.log" >&2; fail "examples/library/$name.c fails its checks"; }
done

# 3. and 4. find_package, shared and static.
for kind in shared static; do
    static=OFF
    [ $kind = static ] && static=ON
    cmake -S "$src/examples/consumer" -B "$tmp/cm-$kind" \
          -DCMAKE_PREFIX_PATH="$prefix" -Dlibemu_USE_STATIC_LIBS=$static \
          >"$tmp/cm-$kind.log" 2>&1 &&
        cmake --build "$tmp/cm-$kind" >>"$tmp/cm-$kind.log" 2>&1 ||
        { cat "$tmp/cm-$kind.log" >&2; fail "find_package build ($kind)"; }
    "$tmp/cm-$kind/consumer" >"$tmp/out.cm-$kind" ||
        fail "find_package build ($kind) does not run"
done
ldd "$tmp/cm-shared/consumer" | grep -q "$libdir/libemu.so" ||
    fail "find_package shared build does not use the installed libemu.so"
if ldd "$tmp/cm-static/consumer" | grep -q "libemu.so"; then
    fail "find_package static build links libemu.so"
fi

# The four builds agree, and the output holds what the OCP FP8 spec says of
# E4M3 (max 448; 500 overflows to NaN, as E4M3 has no infinity) and the
# version of the tree that was installed.
for o in pcs cm-shared cm-static; do
    cmp -s "$tmp/out.pc" "$tmp/out.$o" ||
        { diff "$tmp/out.pc" "$tmp/out.$o" >&2; fail "outputs differ ($o)"; }
done
version=$(sed -n 's/^#define EMU_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/emu/version.h")
grep -qx "libemu $version" "$tmp/out.pc" || fail "version line missing"
grep -qx "API [0-9]*" "$tmp/out.pc" || fail "API version line missing"
grep -q "^e4m3: p = 4, emin = -6, emax = 8, max = 448," "$tmp/out.pc" ||
    fail "e4m3 constants wrong"
grep -q "^rne(500) = nan" "$tmp/out.pc" || fail "e4m3 overflow is not NaN"
grep -q "^rne(300) = 288 " "$tmp/out.pc" || fail "rne(300) in e4m3 is not 288"

# 5. The Python package: the installed emu loads the installed libemu.so
#    (not the build tree's, not EMU_LIBRARY) and rounds an array.
pkg=$(find "$prefix" -path '*/emu/_install.py' | head -n 1)
[ -n "$pkg" ] || fail "the Python package (emu/_install.py) is not installed"
pydir=$(dirname "$(dirname "$pkg")")
for f in __init__.py _lib.py _core.py _arrays.py; do
    [ -f "$pydir/emu/$f" ] || fail "not installed: emu/$f"
done
(cd "$tmp" && env -u EMU_LIBRARY PYTHONPATH="$pydir" /usr/bin/python3 - "$libdir" <<'EOT'
import os, sys
import numpy as np
import emu
libdir = os.path.realpath(sys.argv[1])
assert os.path.realpath(emu.LIBRARY_PATH).startswith(libdir + os.sep), \
    "loaded %s, not the installed library in %s" % (emu.LIBRARY_PATH, libdir)
y = emu.round(np.array([300.0, 500.0, 0.1], dtype=np.float32), "e4m3")
assert y[0] == 288.0 and np.isnan(y[1]) and y[2] == 0.1015625, y
print("python: emu %s (API %d) from %s: e4m3 rne(300) = %g"
      % (emu.__version__, emu.api_version(), emu.LIBRARY_PATH, y[0]))
EOT
) >"$tmp/py.log" 2>&1 || { cat "$tmp/py.log" >&2; fail "the installed Python package"; }

echo "install_check: OK ($prefix: pkg-config shared+static, find_package shared+static, examples/library, python)"
sed 's/^/  /' "$tmp/py.log"
sed 's/^/  /' "$tmp/out.pc"
