"""pytest set-up: import the package from this source tree (python/emu),
and find the `emu` program of the build beside it for the tests that
compare against the command line.  EMU_LIBRARY (set by the CTest
python_pytest) chooses the shared library; without it the package finds
build/libemu/libemu.so itself."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
SRC = os.path.dirname(PYDIR)
sys.path.insert(0, PYDIR)


def _cli():
    env = os.environ.get("EMU_CLI")
    if env:
        return env
    lib = os.environ.get("EMU_LIBRARY")
    if lib:  # <build>/libemu/libemu.so -> <build>/cli/emu
        cand = os.path.join(os.path.dirname(os.path.dirname(lib)), "cli", "emu")
        if os.path.exists(cand):
            return cand
    return os.path.join(SRC, "build", "cli", "emu")


@pytest.fixture(scope="session")
def emu_cli():
    path = _cli()
    if not os.path.exists(path):
        pytest.skip("no emu program at %s (set EMU_CLI)" % path)
    return path


@pytest.fixture(scope="session")
def src_dir():
    return SRC
