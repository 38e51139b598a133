"""Loading libemu.so and declaring the C ABI of emu/ffi.h for ctypes.

Only scalars, pointers, strings and opaque handles cross this interface
(see libemu/include/emu/ffi.h): no C struct is mirrored here, so this file
cannot drift from the library's structs.  Every call that returns -1 is
turned into EmuError carrying the library's code, where, key and message.

Where the library is looked for, in order:
  1. the environment variable EMU_LIBRARY (a path to libemu.so);
  2. the build tree beside the package, for tests from the source tree:
     <source>/build/libemu/libemu.so (the package is <source>/python/emu);
  3. the path recorded by `cmake --install` in emu/_install.py;
  4. ctypes.util.find_library("emu") (the system's library path).
"""

import ctypes
import ctypes.util
import os

c_int = ctypes.c_int
c_size = ctypes.c_size_t
c_u64 = ctypes.c_uint64
c_i64 = ctypes.c_int64
c_double = ctypes.c_double
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
c_unsigned = ctypes.c_uint


class EmuError(Exception):
    """A failure reported by libemu.

    Attributes: code (the emu_errcode's name, e.g. "EMU_ESPEC"), errno
    (its number), where (a file:line, a spec, an op's site), key (the
    offending key or argument, "" if none) and message (the library's
    text, unchanged)."""

    def __init__(self, code, where, key, message, errno=None):
        self.code = code
        self.where = where
        self.key = key
        self.message = message
        self.errno = errno
        text = where + ": " if where else ""
        if key:
            text += "key '%s': " % key
        super().__init__(text + message)


def _candidates():
    """(description, path) pairs in the order they are tried."""
    out = []
    env = os.environ.get("EMU_LIBRARY")
    if env:
        out.append(("EMU_LIBRARY", env))
        return out  # an explicit choice is never second-guessed
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.dirname(os.path.dirname(here))
    out.append(("build tree", os.path.join(src, "build", "libemu", "libemu.so")))
    try:
        from . import _install  # written by cmake --install
        out.append(("install prefix", _install.LIBRARY))
    except ImportError:
        pass
    found = ctypes.util.find_library("emu")
    out.append(("find_library('emu')", found))
    return out


def _load():
    tried = []
    for what, path in _candidates():
        if not path:
            tried.append("%s: not found" % what)
            continue
        if what != "find_library('emu')" and not os.path.exists(path):
            tried.append("%s: %s (no such file)" % (what, path))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s: %s (%s)" % (what, path, e))
    raise ImportError("emu: cannot load libemu.so; looked at:\n  " +
                      "\n  ".join(tried) +
                      "\nbuild it (cmake --build build) or set EMU_LIBRARY")


lib, LIBRARY_PATH = _load()

# name: (restype, argtypes); restype c_int means "0 or -1 with an error".
_PROTOS = {
    "emu_api_version": (c_int, []),
    "emu_ffi_error_code": (c_int, []),
    "emu_ffi_error_code_name": (c_char_p, []),
    "emu_ffi_error_where": (c_char_p, []),
    "emu_ffi_error_key": (c_char_p, []),
    "emu_ffi_error_message": (c_char_p, []),
    "emu_ffi_version_string": (c_char_p, []),
    "emu_ffi_format_count": (c_size, []),
    "emu_ffi_format_name": (c_char_p, [c_size]),
    "emu_ffi_format_new": (c_int, [c_char_p, ctypes.POINTER(c_void_p)]),
    "emu_ffi_format_free": (None, [c_void_p]),
    "emu_ffi_format_key": (c_char_p, [c_size]),
    "emu_ffi_format_key_type": (c_int, [c_size]),
    "emu_ffi_format_get_int": (c_int, [c_void_p, c_char_p, ctypes.POINTER(c_i64)]),
    "emu_ffi_format_get_uint": (c_int, [c_void_p, c_char_p, ctypes.POINTER(c_u64)]),
    "emu_ffi_format_get_real": (c_int, [c_void_p, c_char_p, ctypes.POINTER(c_double)]),
    "emu_ffi_format_get_str": (c_int, [c_void_p, c_char_p, c_char_p, c_size]),
    "emu_ffi_rounding_new": (c_int, [c_char_p, c_int, c_char_p, c_char_p,
                                     ctypes.POINTER(c_void_p)]),
    "emu_ffi_rounding_free": (None, [c_void_p]),
    "emu_ffi_counts_count": (c_size, []),
    "emu_ffi_counts_name": (c_char_p, [c_size]),
    "emu_ffi_round_f32": (c_int, [c_void_p, c_void_p, c_u64, c_u64, c_u64,
                                  c_void_p, c_void_p, c_size, c_void_p]),
    "emu_ffi_round_f64": (c_int, [c_void_p, c_void_p, c_u64, c_u64, c_u64,
                                  c_void_p, c_void_p, c_size, c_void_p]),
    "emu_ffi_round_f64_to_f32": (c_int, [c_void_p, c_void_p, c_u64, c_u64, c_u64,
                                         c_void_p, c_void_p, c_size, c_void_p]),
    "emu_ffi_round_f32_bits": (c_int, [c_void_p, c_void_p, c_u64, c_u64, c_u64,
                                       c_void_p, c_size, c_void_p, c_size,
                                       c_void_p]),
    "emu_ffi_round_f64_bits": (c_int, [c_void_p, c_void_p, c_u64, c_u64, c_u64,
                                       c_void_p, c_size, c_void_p, c_size,
                                       c_void_p]),
    "emu_ffi_round_scalar": (c_int, [c_void_p, c_void_p, c_double, c_double,
                                     c_u64, c_u64, c_u64,
                                     ctypes.POINTER(c_double),
                                     ctypes.POINTER(c_int),
                                     ctypes.POINTER(c_unsigned)]),
    "emu_ffi_decode": (c_int, [c_void_p, c_u64, ctypes.POINTER(c_double)]),
    "emu_ffi_encode": (c_int, [c_void_p, c_void_p, c_double, ctypes.POINTER(c_u64)]),
    "emu_ffi_accum_new": (c_int, [c_char_p, ctypes.POINTER(c_void_p)]),
    "emu_ffi_accum_free": (None, [c_void_p]),
    "emu_ffi_accum_string": (c_int, [c_void_p, c_char_p, c_size]),
    "emu_ffi_session_new": (c_int, [c_u64, c_double, c_int, ctypes.POINTER(c_void_p)]),
    "emu_ffi_session_free": (None, [c_void_p]),
    "emu_ffi_session_round": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p,
                                      c_void_p, c_void_p, c_void_p, c_void_p,
                                      c_size]),
    "emu_ffi_session_measure": (c_int, [c_void_p, ctypes.c_uint, c_double]),
    "emu_ffi_session_quantize": (c_int, [c_void_p, c_char_p, c_char_p, c_void_p,
                                         c_void_p, c_void_p, c_double,
                                         c_void_p]),
    "emu_ffi_session_matmul": (c_int, [c_void_p, c_char_p, c_char_p, c_void_p,
                                       c_void_p, c_void_p, c_void_p, c_void_p,
                                       c_void_p, c_size, c_size, c_size, c_int,
                                       c_int, c_double, c_int, c_void_p,
                                       c_void_p]),
    "emu_ffi_im2col": (c_int, [c_void_p, c_void_p, c_size, c_size, c_size,
                               c_size, c_size, c_size, c_size, c_size,
                               c_size, c_size, c_void_p]),
    "emu_ffi_conv_weight_flip": (c_int, [c_void_p, c_void_p, c_size, c_size,
                                         c_size, c_size, c_size]),
    "emu_ffi_session_begin_step": (c_int, [c_void_p, c_i64]),
    "emu_ffi_session_write": (c_int, [c_void_p, c_char_p]),
    "emu_ffi_session_site_count": (c_size, [c_void_p]),
    "emu_ffi_session_site_str": (c_int, [c_void_p, c_size, c_char_p, c_char_p, c_size]),
    "emu_ffi_session_counters": (c_int, [c_void_p, c_size, c_int, c_void_p, c_size]),
    "emu_ffi_session_hist": (c_int, [c_void_p, c_size, c_int, c_char_p, c_void_p, c_size]),
    "emu_ffi_hist_bins": (c_size, []),
    "emu_stats_counter_count": (c_size, []),
    "emu_stats_counter_name": (c_char_p, [c_size]),
    "emu_hist_label": (c_char_p, [c_int, c_char_p, c_size]),
    "emu_ffi_quant_new": (c_int, [c_char_p, c_int, c_void_p, c_int,
                                  ctypes.POINTER(c_void_p)]),
    "emu_ffi_quant_free": (None, [c_void_p]),
    "emu_ffi_quant_spec": (c_int, [c_void_p, c_char_p, c_size]),
    "emu_ffi_quant_nblocks": (c_size, [c_void_p]),
    "emu_ffi_quant_bits_per_element": (c_double, [c_void_p]),
    "emu_ffi_quant_counts_count": (c_size, []),
    "emu_ffi_quant_counts_name": (c_char_p, [c_size]),
    "emu_ffi_quant_block_count": (c_size, []),
    "emu_ffi_quant_block_name": (c_char_p, [c_size]),
    "emu_ffi_quant_run": (c_int, [c_void_p, c_void_p, c_char_p, c_u64, c_u64,
                                  c_double, c_void_p, c_void_p]),
    "emu_ffi_quant_values_f32": (c_int, [c_void_p, c_void_p, c_size]),
    "emu_ffi_quant_values_f64": (c_int, [c_void_p, c_void_p, c_size]),
    "emu_ffi_quant_elements": (c_int, [c_void_p, c_void_p, c_size]),
    "emu_ffi_quant_scales": (c_int, [c_void_p, c_void_p, c_size]),
    "emu_ffi_quant_tensor_scale": (c_double, [c_void_p]),
    "emu_ffi_quant_packed_size": (c_size, [c_void_p]),
    "emu_ffi_quant_pack": (c_int, [c_void_p, c_void_p, c_size]),
    "emu_ffi_policy_json": (c_int, [c_char_p, c_char_p, c_char_p, c_size,
                                    ctypes.POINTER(c_size)]),
    "emu_policy_preset_names": (ctypes.POINTER(c_char_p), []),
    "emu_scaled_preset_names": (ctypes.POINTER(c_char_p), []),
}

for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def _s(b):
    return b.decode("utf-8", "replace") if b is not None else ""


def last_error():
    """The calling thread's last libemu failure as an EmuError."""
    return EmuError(_s(lib.emu_ffi_error_code_name()),
                    _s(lib.emu_ffi_error_where()),
                    _s(lib.emu_ffi_error_key()),
                    _s(lib.emu_ffi_error_message()),
                    errno=lib.emu_ffi_error_code())


def check(rc):
    """Raises the thread's last error if a call returned -1."""
    if rc != 0:
        raise last_error()


def enc(s):
    return s.encode("utf-8") if isinstance(s, str) else s


def names(count_fn, name_fn):
    return [_s(name_fn(i)) for i in range(count_fn())]


def null_terminated(ptr):
    out = []
    i = 0
    while ptr[i] is not None:
        out.append(_s(ptr[i]))
        i += 1
    return out


def get_str(fn, *args, size=512):
    buf = ctypes.create_string_buffer(size)
    check(fn(*args, buf, size))
    return _s(buf.value)
