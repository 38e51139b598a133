"""Formats, rounding, quantization, GEMM, sessions and policies over
libemu's C ABI (emu/ffi.h).  Nothing here rounds: every value comes from
the C library."""

import ctypes
import functools
import json
import os
import threading

import numpy as np

from . import _lib
from ._lib import EmuError, check, enc, lib
from ._arrays import as_input, as_output, ptr, _is_torch


def api_version():
    """The library's API version, major * 10000 + minor * 100 + patch."""
    return lib.emu_api_version()


__version__ = _lib._s(lib.emu_ffi_version_string())


# ---- formats -----------------------------------------------------------------

_FORMAT_KEYS = [(_lib._s(lib.emu_ffi_format_key(i)),
                 chr(lib.emu_ffi_format_key_type(i)))
                for i in range(64) if lib.emu_ffi_format_key(i) is not None]


class Format:
    """A validated floating-point format (emu_format), read-only.

    Attributes (from the C format, by name): name, spec (canonical inline
    spec), aliases, description, bits, exp_bits, man_bits, bias, precision
    (p = man_bits + 1), emin, emax, qmin, is_signed, subnormals, has_zero,
    specials ("ieee", "fn", "finite", "fnuz"), overflow ("inf",
    "saturate", "nan"), max, min_normal, min_subnormal, min_value,
    epsilon (2^(1-p)), unit_roundoff (2^-p), finite_count, has_inf,
    has_nan, fits_carrier (rounds binary32 arrays), fits_double."""

    def __init__(self, spec):
        h = ctypes.c_void_p()
        check(lib.emu_ffi_format_new(enc(spec), ctypes.byref(h)))
        self._h = h
        self._free = lib.emu_ffi_format_free
        v = {}
        for key, t in _FORMAT_KEYS:
            if t == "s":
                v[key] = _lib.get_str(lib.emu_ffi_format_get_str, h, enc(key))
            elif t == "u":
                u = ctypes.c_uint64()
                check(lib.emu_ffi_format_get_uint(h, enc(key), ctypes.byref(u)))
                v[key] = u.value
            elif t == "d":
                d = ctypes.c_double()
                check(lib.emu_ffi_format_get_real(h, enc(key), ctypes.byref(d)))
                v[key] = d.value
            else:
                i = ctypes.c_int64()
                check(lib.emu_ffi_format_get_int(h, enc(key), ctypes.byref(i)))
                v[key] = bool(i.value) if t == "b" else i.value
        self._v = v
        self.__dict__.update(v)

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None and h.value:
            self._free(h)
            self._h = None

    @property
    def bit_dtype(self):
        """The NumPy unsigned dtype that holds one bit pattern."""
        b = self.bits
        return (np.uint8 if b <= 8 else np.uint16 if b <= 16
                else np.uint32 if b <= 32 else np.uint64)

    def as_dict(self):
        return dict(self._v)

    def __repr__(self):
        return "emu.Format(%r: %s)" % (self.name, self.spec)

    def __eq__(self, other):
        return isinstance(other, Format) and self.spec == other.spec

    def __hash__(self):
        return hash(self.spec)


_format_cache = {}
_cache_lock = threading.Lock()


def format(spec):
    """A format by name ("binary16", "e4m3", every registered name or
    alias), inline spec ("e3m4,bias=5", "e4m3,saturate") or spec file
    (a path ending in .fmt).  Raises EmuError (code EMU_ESPEC with the
    key and position for a bad spec)."""
    if isinstance(spec, Format):
        return spec
    if not isinstance(spec, str):
        raise TypeError("emu.format: spec must be a str, not %s"
                        % type(spec).__name__)
    if spec.endswith(".fmt"):  # a file may change between calls
        return Format(spec)
    with _cache_lock:
        f = _format_cache.get(spec)
    if f is None:
        f = Format(spec)
        with _cache_lock:
            _format_cache[spec] = f
    return f


def formats():
    """Names of the registered formats (embedded formats/*.fmt and any
    loaded since)."""
    return _lib.names(lib.emu_ffi_format_count, lib.emu_ffi_format_name)


# ---- rounding ------------------------------------------------------------------

class _Rounding:
    def __init__(self, mode, saturate, tininess, profile):
        h = ctypes.c_void_p()
        s = -1 if saturate is None else (1 if saturate else 0)
        check(lib.emu_ffi_rounding_new(enc(mode), s, enc(tininess),
                                       enc(profile), ctypes.byref(h)))
        self._h = h
        self._free = lib.emu_ffi_rounding_free

    def __del__(self):
        if getattr(self, "_h", None) is not None and self._h.value:
            self._free(self._h)
            self._h = None


@functools.lru_cache(maxsize=256)
def _rounding(mode, saturate, tininess, profile):
    if not isinstance(mode, str):
        raise TypeError("emu: mode must be a str such as 'rne' or 'sr'")
    return _Rounding(mode, saturate, tininess, profile)


COUNT_NAMES = _lib.names(lib.emu_ffi_counts_count, lib.emu_ffi_counts_name)


class Counts:
    """What an array rounding did (emu_round_counts): n, inexact,
    underflow (tiny and inexact), to_zero, subnormal, overflow, nan,
    invalid, and flags (the OR of every element's EMU_FLAG_* bits)."""

    def __init__(self, values):
        self._v = dict(zip(COUNT_NAMES, (int(v) for v in values)))
        self.__dict__.update(self._v)

    def as_dict(self):
        return dict(self._v)

    def __getitem__(self, k):
        return self._v[k]

    def __eq__(self, other):
        return isinstance(other, Counts) and self._v == other._v

    def __repr__(self):
        return "emu.Counts(%s)" % ", ".join("%s=%d" % kv for kv in self._v.items())


def round(x, fmt, mode="rne", *, seed=0, saturate=None, out=None,
          counts=False, bits=False, stream=0, tininess="after",
          profile="ieee"):
    """x rounded into fmt, elementwise, by the C library's array rounding.

    x: a NumPy float32/float64 array or a torch CPU float32/float64 tensor
    (contiguous ones are read in place; others are copied once).  The
    result has x's type, dtype and shape, or is `out` (same dtype and
    shape, contiguous; may be x itself).  mode: rne rna rz ru rd ro sr
    srN (N = 1..64 random bits).  Stochastic modes: element i (flat,
    row-major) takes word emu_random64(seed, stream, i), so a result
    depends only on seed, never on threads or chunking.  saturate: None
    (the format's own overflow rule), True (overflow and ±inf give ±max,
    OCP saturation), False (never saturate).  bits=True returns the bit
    patterns instead (NumPy uint8/uint16/uint32/uint64 as the format's
    width needs; torch, which lacks wide unsigned types, gets
    uint8/int16/int32/int64 holding the same bits).  counts=True returns
    (result, Counts)."""
    f = format(fmt)
    w = as_input(x)
    r = _rounding(mode, saturate, tininess, profile)
    arr = w.arr
    n = arr.size
    cbuf = (ctypes.c_uint64 * len(COUNT_NAMES))() if counts else None
    f64 = arr.dtype == np.float64
    if bits:
        if out is not None:
            raise ValueError("emu.round: out= is not supported with bits=True")
        bd = f.bit_dtype
        res = np.empty(w.shape, dtype=bd)
        fn = lib.emu_ffi_round_f64_bits if f64 else lib.emu_ffi_round_f32_bits
        check(fn(f._h, r._h, seed, stream, 0, ptr(res), np.dtype(bd).itemsize,
                 ptr(arr), n, cbuf))
        if w.torch:
            import torch
            signed = {np.uint8: np.uint8, np.uint16: np.int16,
                      np.uint32: np.int32, np.uint64: np.int64}[bd]
            result = torch.from_numpy(res.view(signed))
        else:
            result = res
    else:
        if out is not None:
            o = as_output(out, arr.dtype.type, w.shape)
            result = out
        else:
            o = np.empty(w.shape, dtype=arr.dtype)
            result = w.back(o)
        fn = lib.emu_ffi_round_f64 if f64 else lib.emu_ffi_round_f32
        check(fn(f._h, r._h, seed, stream, 0, ptr(o), ptr(arr), n, cbuf))
    if counts:
        return result, Counts(cbuf)
    return result


def round_scalar(x, fmt, mode="rne", *, lo=0.0, seed=0, stream=0, index=0,
                 saturate=None, tininess="after", profile="ieee"):
    """The scalar choke point emu_round2 on the exact value x + lo (a
    stochastic mode takes word emu_random64(seed, stream, index)).
    Returns (value, ternary, flags): the reference emu.round's arrays are
    tested against."""
    f = format(fmt)
    r = _rounding(mode, saturate, tininess, profile)
    v = ctypes.c_double()
    t = ctypes.c_int()
    fl = ctypes.c_uint()
    check(lib.emu_ffi_round_scalar(f._h, r._h, float(x), float(lo), seed,
                                   stream, index, ctypes.byref(v),
                                   ctypes.byref(t), ctypes.byref(fl)))
    return v.value, t.value, fl.value


def decode(fmt, pattern):
    """The value of a bit pattern of fmt (a float; NaN for NaN patterns)."""
    f = format(fmt)
    v = ctypes.c_double()
    check(lib.emu_ffi_decode(f._h, int(pattern), ctypes.byref(v)))
    return v.value


def encode(fmt, value, profile="ieee"):
    """The bit pattern of a value of fmt (EmuError if fmt lacks it)."""
    f = format(fmt)
    r = _rounding("rne", None, "after", profile)
    b = ctypes.c_uint64()
    check(lib.emu_ffi_encode(f._h, r._h, float(value), ctypes.byref(b)))
    return b.value


# ---- accumulators and sessions ------------------------------------------------------

class _Accum:
    def __init__(self, spec):
        h = ctypes.c_void_p()
        check(lib.emu_ffi_accum_new(enc(spec), ctypes.byref(h)))
        self._h = h
        self._free = lib.emu_ffi_accum_free
        self.spec = _lib.get_str(lib.emu_ffi_accum_string, h)

    def __del__(self):
        if getattr(self, "_h", None) is not None and self._h.value:
            self._free(self._h)
            self._h = None


@functools.lru_cache(maxsize=256)
def _accum(spec):
    if not isinstance(spec, str):
        raise TypeError("emu: accum must be a spec string such as "
                        "'sequential,acc=binary16'")
    return _Accum(spec)


def accum_spec(spec):
    """The canonical spec of an accumulator model (emu_accum_parse)."""
    return _accum(spec).spec


COUNTER_NAMES = _lib.names(lib.emu_stats_counter_count,
                           lib.emu_stats_counter_name)
HIST_BINS = lib.emu_ffi_hist_bins()
# Counts (exact integers in the double the C look-up gives); the others
# are means, maxima and rates.
_INT_COUNTERS = frozenset(c for c in COUNTER_NAMES
                          if not c.endswith(("_mean", "_max", "_rate", "_sum")))


def hist_labels():
    """Labels of the log2 histogram bins: "zero", "below", "-149" ...
    "127", "above", "inf", "nan"."""
    buf = ctypes.create_string_buffer(32)
    return [_lib._s(lib.emu_hist_label(b, buf, 32)) for b in range(HIST_BINS)]


_SPANS = {"total": 0, "run": 0, "step": 1}


_torch = None


def _plain_f32(x):
    """x's element count if x is a plain (not a subclass, no autograd)
    contiguous float32 torch tensor on the CPU, else None."""
    global _torch
    if _torch is None:
        if not _is_torch(x):
            return None
        import torch
        _torch = torch
    t = _torch
    if (type(x) is not t.Tensor or x.dtype is not t.float32 or not x.is_cpu
            or x.layout is not t.strided or x.requires_grad
            or not x.is_contiguous()):
        return None
    return x.numel()


def _apart_f32(out, x, n):
    """Whether out is a plain contiguous float32 tensor of x's shape (n
    elements) whose memory does not overlap x's."""
    if out.shape != x.shape or _plain_f32(out) != n:
        return False
    o, i = out.data_ptr(), x.data_ptr()
    return o + 4 * n <= i or i + 4 * n <= o


def _torch_empty_like(x):
    # NumPy's memory, as the general path's: NumPy asks the kernel for
    # huge pages for large arrays (madvise), which fault in far faster
    # than torch.empty's (a parameter's cast copy: ~2x in one process)
    return _torch.from_numpy(np.empty(tuple(x.shape), dtype=np.float32))


class Session:
    """An emu_ctx with statistics: ops counted at named sites, as `emu
    train` counts them, written with the same C writers.

    Session(seed=0, ref_rate=0.0, threads=1, *, counts=True, hist=True,
    swamp=True): seed drives stochastic rounding (op k of the session
    takes RNG stream k, as in training); ref_rate is the fraction of
    outputs recomputed with MPFR (0..1); threads the worker threads of
    the big ops.  counts, hist, swamp: what is measured (emu_ctx's
    measure bits: counters per site, log2 histograms, swamping inside
    accumulators); each costs time, none changes a value, and with all
    off (and ref_rate 0) nothing is counted and the ops take their fast
    paths.  set_measure() changes them between ops.  Use as a context
    manager or call close(); the handle is also freed when
    garbage-collected.  A session may be used from one thread at a time
    (calls are serialised by a lock)."""

    def __init__(self, seed=0, ref_rate=0.0, threads=1, *, counts=True,
                 hist=True, swamp=True):
        h = ctypes.c_void_p()
        check(lib.emu_ffi_session_new(int(seed), float(ref_rate), int(threads),
                                      ctypes.byref(h)))
        self._h = h
        self._free = lib.emu_ffi_session_free
        self._lock = threading.Lock()
        self.seed, self.threads = seed, threads
        self.measure = {"counts": True, "hist": True, "swamp": True}
        self.ref_rate = ref_rate
        self.set_measure(counts=counts, hist=hist, swamp=swamp)

    def set_measure(self, *, counts=None, hist=None, swamp=None,
                    ref_rate=None):
        """Changes what the next ops measure (None keeps a setting); the
        settings are in .measure and .ref_rate."""
        m = dict(self.measure)
        for k, v in (("counts", counts), ("hist", hist), ("swamp", swamp)):
            if v is not None:
                m[k] = bool(v)
        r = self.ref_rate if ref_rate is None else float(ref_rate)
        bits = (1 if m["counts"] else 0) | (2 if m["hist"] else 0) | (
            4 if m["swamp"] else 0) | (8 if r > 0 else 0)
        with self._lock:
            check(lib.emu_ffi_session_measure(self._handle(), bits, r))
        self.measure, self.ref_rate = m, r

    def _handle(self):
        if self._h is None:
            raise ValueError("emu.Session: the session is closed")
        return self._h

    def close(self):
        """Frees the C context and its statistics (idempotent)."""
        with self._lock:
            if getattr(self, "_h", None) is not None:
                self._free(self._h)
                self._h = None

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None:
            self._free(h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def round(self, site, x, fmt, mode="rne", role="activation", out=None,
              *, kind=None, saturate=None, tininess="after", profile="ieee"):
        """x (float32) rounded into fmt through the choke point, counted
        at `site` under `role` (weight, master, activation, act_grad,
        weight_grad, opt_state, other) as an op of kind `kind` (ops.csv's
        kind column: "load" if None; emu train's kinds are relu,
        maxpool2d, add_bias, cast, sgd, ...; at most 23 characters).  A
        new array or tensor, or written into `out` (contiguous float32 of
        x's shape): out may be x itself (rounded in place, no copy);
        memory shared otherwise is read through a copy."""
        f = format(fmt)
        r = _rounding(mode, saturate, tininess, profile)
        n = _plain_f32(x)
        if n is not None and (out is None or out is x
                              or _apart_f32(out, x, n)):
            # a contiguous float32 CPU tensor, into a new tensor, in place
            # or into another such tensor of its shape that it does not
            # overlap: its pointer as is (what the general path below
            # does, without its NumPy views and checks; emulate's ops)
            result = out if out is not None else _torch_empty_like(x)
            if n:
                with self._lock:
                    check(lib.emu_ffi_session_round(
                        self._handle(), enc(site), enc(kind), enc(role),
                        f._h, r._h, result.data_ptr(), x.data_ptr(), n))
            return result
        w = as_input(x, (np.float32,))
        src = w.arr
        if out is not None:
            o = as_output(out, np.float32, w.shape)
            result = out
            if (o.ctypes.data != src.ctypes.data or o.size != src.size) and \
                    np.shares_memory(o, src):
                src = src.copy()  # partly overlapping: the op may not
        else:
            o = np.empty(w.shape, dtype=np.float32)
            result = w.back(o)
        if src.size == 0:
            return result
        with self._lock:
            check(lib.emu_ffi_session_round(self._handle(), enc(site),
                                            enc(kind), enc(role), f._h, r._h,
                                            ptr(o), ptr(src), src.size))
        return result

    def matmul(self, site, a, b, accum, *, fmt_out="binary32", mode="rne",
               role="activation", trans_a=False, trans_b=False, alpha=1.0,
               a_src=None, b_src=None, out=None, accumulate=False,
               saturate=None):
        """op(A) op(B) (float32, (M, N)) by the emulated GEMM
        (emu_t_matmul): each output one dot product under the accumulator
        model `accum` (an emu_accum_parse spec), rounded once into
        fmt_out under mode; counted at `site` (swamping, inexact, ...).
        A is (M, K), or (K, M) if trans_a; B (K, N), or (N, K) if trans_b.
        a_src, b_src: the unquantized sources of A and B (same layouts),
        for the MPFR error split when ref_rate > 0.  alpha scales each
        dot product without error before the rounding.  accumulate=True
        (with out, holding the initial values): out = out + alpha op(A)
        op(B), each accumulator starting at out / alpha (alpha a power of
        two), so a bias is a term of the accumulation, rounded once with
        it, as in a convolution of `emu train`."""
        acc = _accum(accum)
        f = format(fmt_out)
        r = _rounding(mode, saturate, "after", "ieee")
        wa = as_input(a, (np.float32,), "a")
        wb = as_input(b, (np.float32,), "b")
        if len(wa.shape) != 2 or len(wb.shape) != 2:
            raise ValueError("emu: matmul takes 2-d matrices, got shapes %s "
                             "and %s" % (wa.shape, wb.shape))
        m, k = wa.shape[::-1] if trans_a else wa.shape
        k2, n = wb.shape[::-1] if trans_b else wb.shape
        if k != k2:
            raise ValueError("emu: matmul shapes do not match: op(A) is "
                             "(%d, %d), op(B) is (%d, %d)" % (m, k, k2, n))
        srcs = []
        for s, wref, nm in ((a_src, wa, "a_src"), (b_src, wb, "b_src")):
            if s is None:
                srcs.append(None)
                continue
            ws = as_input(s, (np.float32,), nm)
            if ws.shape != wref.shape:
                raise ValueError("emu: %s has shape %s, not its operand's %s"
                                 % (nm, ws.shape, wref.shape))
            srcs.append(ws.arr)
        if out is not None:
            o = as_output(out, np.float32, (m, n))
            result = out
            for arr in (wa.arr, wb.arr):
                if np.shares_memory(o, arr):
                    raise ValueError("emu: matmul's out shares memory with "
                                     "an input")
        elif accumulate:
            raise ValueError("emu: matmul with accumulate=True needs out= "
                             "(the values the accumulators start from)")
        else:
            o = np.empty((m, n), dtype=np.float32)
            result = wa.back(o) if wa.torch else wb.back(o)
        if m == 0 or n == 0:
            return result
        if k == 0:
            raise ValueError("emu: matmul with K = 0")
        with self._lock:
            check(lib.emu_ffi_session_matmul(
                self._handle(), enc(site), enc(role), acc._h, f._h, r._h,
                ptr(o), ptr(wa.arr), ptr(wb.arr), m, k, n, int(bool(trans_a)),
                int(bool(trans_b)), float(alpha), int(bool(accumulate)),
                ptr(srcs[0]) if srcs[0] is not None else None,
                ptr(srcs[1]) if srcs[1] is not None else None))
        return result

    def quantize(self, site, x, spec, mode="rne", role="activation", *,
                 axis=-1, tensor_scale=0.0, counts=False, return_codes=False,
                 saturate=None, tininess="after", profile="ieee"):
        """emu.quantize as an op of the session (emu_t_quantize_scaled):
        x quantized into the block-scaled spec along `axis` and returned
        dequantized (x's type; float64 exact), counted at `site` under
        `role` as `emu train`'s scaled presets count their GEMM operands
        (`fc1.q.x`: kind quantize, the spec's name in the format column;
        the elements' inexact, underflow, overflow ..., the histograms of
        x, of the values and of the block scales, MPFR samples at the
        session's ref_rate).  Stochastic words come from the session's
        seed and op index, as for every session op.  counts=True adds the
        totals of emu.quantize (without per_block), return_codes=True its
        codes."""
        r = _rounding(mode, saturate, tininess, profile)

        def run(h, x32, cb, bb):
            with self._lock:
                check(lib.emu_ffi_session_quantize(
                    self._handle(), enc(site), enc(role), h, ptr(x32), r._h,
                    float(tensor_scale), ptr(cb) if cb is not None else None))
        return _quantize("emu.Session.quantize", x, spec, axis, counts,
                         return_codes, False, run)

    def begin_step(self, step):
        """Starts measuring step `step`: the step statistics restart, the
        rows of the step that ended are kept for ops_steps.csv."""
        with self._lock:
            check(lib.emu_ffi_session_begin_step(self._handle(), int(step)))

    def write(self, dir):
        """Writes dir/ops.csv, dir/hist.csv and dir/ops.json (and
        dir/ops_steps.csv once steps were begun) with the C writers `emu
        train` uses, each atomically; creates dir (and its parents) if
        missing."""
        dir = os.fspath(dir)
        os.makedirs(dir, exist_ok=True)  # parents too; C creates one level
        with self._lock:
            check(lib.emu_ffi_session_write(self._handle(), enc(dir)))

    def _sites(self):
        h = self._handle()
        out = []
        for i in range(lib.emu_ffi_session_site_count(h)):
            out.append(tuple(_lib.get_str(lib.emu_ffi_session_site_str, h, i,
                                          enc(k), size=128)
                             for k in ("name", "kind", "role", "format")))
        return out

    def counters(self, span="total"):
        """A list of dicts, one per (site, role): site, kind, role,
        format and every counter of ops.csv."""
        sp = _SPANS[span]
        rows = []
        with self._lock:
            h = self._handle()
            nc = len(COUNTER_NAMES)
            buf = (ctypes.c_double * nc)()
            for i, (name, kind, role, fmt) in enumerate(self._sites()):
                check(lib.emu_ffi_session_counters(h, i, sp, buf, nc))
                row = {"site": name, "kind": kind, "role": role, "format": fmt}
                row.update((k, int(v) if k in _INT_COUNTERS else v)
                           for k, v in zip(COUNTER_NAMES, buf))
                rows.append(row)
        return rows

    def stats(self, span="total"):
        """The per-site counters as a pandas DataFrame with ops.csv's
        columns (site, kind, role, format, results, inexact, ...);
        span "total" (the session) or "step" (since begin_step)."""
        import pandas as pd
        cols = ["site", "kind", "role", "format"] + COUNTER_NAMES
        df = pd.DataFrame(self.counters(span), columns=cols)
        for c in _INT_COUNTERS:  # as read_csv types ops.csv's columns
            df[c] = df[c].astype("int64")
        return df

    def hist(self, site_index, which="rounded", span="total"):
        """The log2 histogram (numpy uint64, HIST_BINS bins labelled by
        hist_labels()) of site number site_index."""
        out = np.zeros(HIST_BINS, dtype=np.uint64)
        with self._lock:
            check(lib.emu_ffi_session_hist(self._handle(), site_index,
                                           _SPANS[span], enc(which), ptr(out),
                                           HIST_BINS))
        return out


def gemm(a, b, accum, *, fmt_in=None, fmt_out="binary32", mode="rne", seed=0,
         stats=False, ref_rate=0.0, trans_a=False, trans_b=False, alpha=1.0):
    """C = A·B (2-d float32 arrays or tensors) by the emulated GEMM.

    accum: an accumulator spec ("sequential,acc=binary16", "fused,k=16,w=25",
    "blocked,acc=e5m2,block=128,wide=binary32", "kahan,acc=bfloat16",
    "pairwise", "exact", "fast"; see emu_accum_parse).  fmt_in: the inputs
    are first rounded into it (under mode); the originals are then the
    sources of the MPFR error split.  The result is rounded into fmt_out
    and returned as float32.  stats=True returns (C, dict) with the
    site's counters (adds, absorbed, inexact, underflow, overflow, ...,
    and with ref_rate > 0 the sampled error and its split into quant_*,
    accum_*, round_*)."""
    wa = as_input(a, (np.float32,), "a")
    wb = as_input(b, (np.float32,), "b")
    a_in, b_in, a_src, b_src = wa.arr, wb.arr, None, None
    if fmt_in is not None:
        a_in = round(wa.arr, fmt_in, mode, seed=seed, stream=1)
        b_in = round(wb.arr, fmt_in, mode, seed=seed, stream=2)
        a_src, b_src = wa.arr, wb.arr
    with Session(seed=seed, ref_rate=ref_rate) as s:
        c = s.matmul("gemm", a_in, b_in, accum, fmt_out=fmt_out, mode=mode,
                     trans_a=trans_a, trans_b=trans_b, alpha=alpha,
                     a_src=a_src, b_src=b_src)
        st = s.counters()[0] if stats else None
    if wa.torch or wb.torch:
        import torch
        c = torch.from_numpy(c)
    if stats:
        return c, st
    return c


# ---- block-scaled quantization ---------------------------------------------------------

QUANT_COUNT_NAMES = _lib.names(lib.emu_ffi_quant_counts_count,
                               lib.emu_ffi_quant_counts_name)
QUANT_BLOCK_NAMES = _lib.names(lib.emu_ffi_quant_block_count,
                               lib.emu_ffi_quant_block_name)


def scaled_presets():
    """Names of the block-scaled presets (mxfp8, mxfp4, nvfp4, ...)."""
    return _lib.null_terminated(lib.emu_scaled_preset_names())


def scaled_spec(spec):
    """The canonical keys of a block-scaled spec (a preset name or keys),
    as emu.policy() writes them."""
    shp = (ctypes.c_size_t * 2)(64, 64)
    h = ctypes.c_void_p()
    check(lib.emu_ffi_quant_new(enc(spec), 2, shp, -1, ctypes.byref(h)))
    try:
        return _lib.get_str(lib.emu_ffi_quant_spec, h)
    finally:
        lib.emu_ffi_quant_free(h)


def quantize(x, spec, mode="rne", *, seed=0, axis=-1, counts=False,
             return_codes=False, tensor_scale=0.0, stream=0):
    """Block-scaled quantization (emu_scaled_quantize) of x, returned
    dequantized: v_i = e_i * s_b(i) * g, x's type, dtype and shape
    (exact for float64; for float32 exact too unless a tensor scale g
    gives v_i more bits than binary32 holds: then v_i rounded to
    nearest-even binary32).

    spec: a preset (mxfp8, mxfp8-e5m2, mxfp6-e2m3, mxfp6-e3m2, mxfp4,
    mxint8, nvfp4) or keys (elem=FMT, scale=FMT|none, block=N|NxM,
    rule=floor|ceil|amax, tensor=yes|no, ...), e.g. per-tensor FP8
    "elem=e4m3,scale=none,tensor=yes".  Blocks run along `axis` (x has 1
    to 4 dimensions).  mode rounds the elements (stochastic element i
    takes word emu_random64(seed, stream, i)).  tensor_scale 0: current
    scaling; else the given g.  float64 input is first rounded to binary32
    (nearest-even, by the library) since the quantizer reads binary32.

    counts=True adds a dict: the totals (n, blocks, clipped, flushed,
    inexact, nonfinite_blocks, scale_clamped, err_sq, ref_sq, err_max)
    and "per_block": a dict of per-block NumPy arrays (amax, clipped,
    flushed, inexact, err_sq, ref_sq).  return_codes=True adds a dict:
    "elements" (e_i, float32, x's shape), "scales" (s_b per block,
    float32), "tensor_scale" (g), "packed" (uint8: emu_scaled_pack's
    layout: element codes, scale codes, g), "spec" (canonical), and
    "bits_per_element".  The return value is y, or a tuple (y, counts?,
    codes?) in that order."""
    def run(h, x32, cb, bb):
        check(lib.emu_ffi_quant_run(h, ptr(x32), enc(mode), int(seed),
                                    int(stream), float(tensor_scale),
                                    ptr(cb) if cb is not None else None,
                                    ptr(bb) if bb is not None else None))
    return _quantize("emu.quantize", x, spec, axis, counts, return_codes,
                     True, run)


def _quantize(who, x, spec, axis, counts, return_codes, per_block, run):
    """The quantizations' common part: x (binary32, through the library
    for float64) into a scaled tensor of spec by run(handle, x32, counts
    buffer, per-block buffer), then the values, counts and codes."""
    w = as_input(x)
    arr = w.arr
    f64 = arr.dtype == np.float64
    if f64:  # to binary32 by the library (no host narrowing under FTZ/DAZ)
        x32 = np.empty(arr.shape, dtype=np.float32)
        b32 = format("binary32")
        check(lib.emu_ffi_round_f64_to_f32(
            b32._h, _rounding("rne", None, "after", "ieee")._h, 0, 0, 0,
            ptr(x32), ptr(arr), arr.size, None))
    else:
        x32 = arr
    shape = w.shape if len(w.shape) else (1,)
    if not 1 <= len(shape) <= 4:
        raise ValueError("%s: x has %d dimensions; 1 to 4 are "
                         "supported" % (who, len(shape)))
    if x32.size == 0:
        raise ValueError("%s: x is empty" % who)
    shp = (ctypes.c_size_t * len(shape))(*shape)
    h = ctypes.c_void_p()
    check(lib.emu_ffi_quant_new(enc(spec), len(shape), shp, int(axis),
                                ctypes.byref(h)))
    try:
        nb = lib.emu_ffi_quant_nblocks(h)
        cb = np.zeros(len(QUANT_COUNT_NAMES)) if counts else None
        bb = (np.zeros((nb, len(QUANT_BLOCK_NAMES)))
              if counts and per_block else None)
        run(h, x32, cb, bb)
        # The values e_i s_b g are exact in binary64; with a tensor scale
        # they may need more bits than binary32 has, so a float32 result
        # is their rounding to binary32 (nearest-even, by the library;
        # exact, and so the identity, for formats without a tensor scale).
        y = np.empty(w.shape, dtype=arr.dtype)
        fn = lib.emu_ffi_quant_values_f64 if f64 else lib.emu_ffi_quant_values_f32
        check(fn(h, ptr(y), y.size))
        extra = []
        if counts:
            d = {k: (int(v) if k not in ("err_sq", "ref_sq", "err_max") else
                     float(v)) for k, v in zip(QUANT_COUNT_NAMES, cb)}
            if per_block:
                d["per_block"] = {k: bb[:, i].copy()
                                  for i, k in enumerate(QUANT_BLOCK_NAMES)}
            extra.append(d)
        if return_codes:
            el = np.empty(w.shape, dtype=np.float32)
            check(lib.emu_ffi_quant_elements(h, ptr(el), el.size))
            sc = np.empty(nb, dtype=np.float32)
            check(lib.emu_ffi_quant_scales(h, ptr(sc), nb))
            pk = np.empty(lib.emu_ffi_quant_packed_size(h), dtype=np.uint8)
            check(lib.emu_ffi_quant_pack(h, ptr(pk), pk.size))
            extra.append({
                "elements": el, "scales": sc,
                "tensor_scale": lib.emu_ffi_quant_tensor_scale(h),
                "packed": pk,
                "spec": _lib.get_str(lib.emu_ffi_quant_spec, h),
                "bits_per_element": lib.emu_ffi_quant_bits_per_element(h),
            })
    finally:
        lib.emu_ffi_quant_free(h)
    y = w.back(y)
    if extra:
        return (y, *extra)
    return y


# ---- policies and results -----------------------------------------------------------------

def policies():
    """Names of the precision-policy presets (those of `emu train`)."""
    return _lib.null_terminated(lib.emu_policy_preset_names())


def policy(name, *assignments):
    """The preset `name` as a dict: exactly the JSON emu_policy_write_json
    writes into a run's meta.json (name, paper, roles weight, master,
    activation, act_grad, weight_grad, opt_state -> {"format", "mode",
    ...}, "accum", "update", "scaling", the q.* scaled operands, ...).
    assignments: "key=value" overrides as `emu train --set` takes them
    (e.g. "accum=exact")."""
    for a in assignments:
        if "\n" in a:
            raise ValueError("emu.policy: an assignment holds a newline")
    text = "\n".join(assignments) if assignments else None
    need = ctypes.c_size_t()
    size = 1 << 14
    while True:
        buf = ctypes.create_string_buffer(size)
        check(lib.emu_ffi_policy_json(enc(name), enc(text), buf, size,
                                      ctypes.byref(need)))
        if need.value < size:
            return json.loads(buf.value.decode("utf-8"))
        size = need.value + 1


def read_results(dir):
    """A results folder (of `emu train` or of Session.write) as a dict:
    every *.csv as a pandas DataFrame under its stem ("steps", "eval",
    "ops", "ops_steps", "layers_steps", "hist", ...) and every *.json as
    a dict ("meta", "ops_json" for ops.json).  Missing files are absent
    keys; an empty folder gives an empty dict."""
    import pandas as pd
    dir = os.fspath(dir)
    if not os.path.isdir(dir):
        raise FileNotFoundError("emu.read_results: no folder %r" % dir)
    out = {}
    for fn in sorted(os.listdir(dir)):
        path = os.path.join(dir, fn)
        if ".tmp-" in fn or not os.path.isfile(path):
            continue
        stem, ext = os.path.splitext(fn)
        if ext == ".csv":
            out[stem] = pd.read_csv(path)
        elif ext == ".json":
            with open(path) as fp:
                out[stem if stem == "meta" else stem + "_json"] = json.load(fp)
    return out
