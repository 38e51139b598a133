"""emu — libemu from Python: bit-exact rounding of NumPy arrays and torch
CPU tensors into any floating-point format, block-scaled quantization,
the emulated GEMM with its accumulator models, measured sessions, and
results folders as pandas DataFrames.

A binding through ctypes to the C library's FFI (emu/ffi.h); every value
comes from libemu itself.  See README.md, "From Python"."""

from ._lib import EmuError, LIBRARY_PATH
from ._core import (
    COUNTER_NAMES,
    COUNT_NAMES,
    Counts,
    Format,
    HIST_BINS,
    QUANT_BLOCK_NAMES,
    QUANT_COUNT_NAMES,
    Session,
    __version__,
    accum_spec,
    api_version,
    decode,
    encode,
    format,
    formats,
    gemm,
    hist_labels,
    policies,
    policy,
    quantize,
    read_results,
    round,
    round_scalar,
    scaled_presets,
)

__all__ = [
    "EmuError", "Format", "Counts", "Session", "api_version", "format",
    "formats", "round", "round_scalar", "decode", "encode", "quantize",
    "scaled_presets", "gemm", "accum_spec", "policy", "policies",
    "read_results", "hist_labels", "__version__",
]
