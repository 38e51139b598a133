"""emu.round equals the C library's scalar choke point bit for bit.

For every registered format and every shipped formats/*.fmt file, every
rounding mode (stochastic ones with their random words), both carriers
(float32 and float64 arrays), random and edge inputs: the array result
through the Python binding must be the scalar emu_round2 of each element
(called through the FFI, emu.round_scalar), its bit patterns
(bits=True) must be emu_encode of those values, and its counts the
recount of the scalar flags.  MPFR is the library's oracle (its own
suites check emu_round2 against MPFR); here the question is whether the
binding adds, drops or reorders anything."""

import glob
import math
import os

import numpy as np
import pytest

import emu

MODES = ["rne", "rna", "rz", "ru", "rd", "ro", "sr", "sr1", "sr4", "sr13",
         "sr64"]
F_INEXACT, F_UNDERFLOW, F_OVERFLOW, F_INVALID, F_SUBNORMAL = 1, 2, 4, 16, 32


def edge_values(f):
    """Values around every boundary of f: zeros, the subnormal range and
    its midpoints, min normal, ties at 1, max and the overflow tie,
    infinities, NaN; both signs."""
    sub = f.min_subnormal
    eps = f.epsilon
    v = [0.0, sub, sub / 2, sub * 1.5, sub * 0.75, sub / 4, f.min_normal,
         f.min_normal * (1 - eps / 4), f.min_normal - sub / 2, 1.0,
         1 + eps / 2, 1 + eps * 1.5, 1 + eps / 4, 3 + eps * 3, f.max,
         f.max * (1 + eps / 4), f.max * (1 + eps / 2), f.max * (1 + eps),
         f.max * 2, math.inf, 0.1, 1 / 3, 1e-45, 3.4e38, 1e-300, 1e300]
    return [s * x for x in v for s in (1.0, -1.0)] + [math.nan]


def random_values(f, n, rng):
    """Log-uniform magnitudes over the format's range and a bit beyond,
    random signs and significands."""
    lo = math.log2(f.min_subnormal) - 3
    hi = math.log2(f.max) + 2
    e = rng.uniform(lo, min(hi, 1023.5), n)
    s = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return (s * np.exp2(e)).tolist()


def inputs(f, dtype, rng, n=160):
    vals = edge_values(f) + random_values(f, n, rng)
    with np.errstate(over="ignore"):
        x = np.array(vals, dtype=dtype)
    return x


def scalar_reference(x, f, mode, seed, saturate=None, profile="ieee"):
    out, flags = [], []
    for i, v in enumerate(x.tolist()):
        r, _, fl = emu.round_scalar(v, f, mode, seed=seed, index=i,
                                    saturate=saturate, profile=profile)
        out.append(r)
        flags.append(fl)
    return out, flags


def same_bits(arr, ref, dtype):
    want = np.array(ref, dtype=np.float64).astype(dtype)
    it = np.uint32 if dtype == np.float32 else np.uint64
    return np.array_equal(arr.view(it), want.view(it)), want


def recount(x, out, flags):
    c = dict(n=len(out), inexact=0, underflow=0, to_zero=0, subnormal=0,
             overflow=0, nan=0, invalid=0, flags=0)
    for v, o, fl in zip(x.tolist(), out, flags):
        c["inexact"] += bool(fl & F_INEXACT)
        c["underflow"] += bool(fl & F_UNDERFLOW)
        c["to_zero"] += math.isfinite(v) and v != 0 and o == 0
        c["subnormal"] += bool(fl & F_SUBNORMAL)
        c["overflow"] += bool(fl & F_OVERFLOW)
        c["nan"] += math.isnan(o)
        c["invalid"] += bool(fl & F_INVALID)
        c["flags"] |= fl
    return c


REGISTRY = emu.formats()


@pytest.mark.parametrize("name", REGISTRY)
def test_every_mode_equals_scalar(name):
    f = emu.format(name)
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    dtypes = [np.float64] + ([np.float32] if f.fits_carrier else [])
    for dtype in dtypes:
        x = inputs(f, dtype, rng)
        for mode in MODES:
            for sat in (None, True):
                y, counts = emu.round(x, f, mode, seed=11, saturate=sat,
                                      counts=True)
                assert y.dtype == dtype and y.shape == x.shape
                ref, flags = scalar_reference(x, f, mode, 11, saturate=sat)
                ok, want = same_bits(y, ref, dtype)
                if not ok:
                    i = next(i for i in range(len(x))
                             if y[i].tobytes() != want[i].tobytes())
                    pytest.fail("%s %s %s sat=%s: x[%d]=%r gives %r, scalar "
                                "%r" % (name, np.dtype(dtype).name, mode, sat,
                                        i, x[i], y[i], ref[i]))
                assert counts.as_dict() == recount(x, ref, flags), (name, mode)
                # bit patterns: emu_encode of the scalar results
                if not f.has_nan and any(math.isnan(v) for v in ref):
                    with pytest.raises(emu.EmuError) as ei:
                        emu.round(x, f, mode, seed=11, saturate=sat, bits=True)
                    assert ei.value.code == "EMU_ERANGE"
                    assert "element %d" % ref.index(next(
                        v for v in ref if math.isnan(v))) in ei.value.message
                    continue
                b = emu.round(x, f, mode, seed=11, saturate=sat, bits=True)
                assert b.dtype == f.bit_dtype
                for i in range(0, len(x), 7):
                    if not math.isnan(ref[i]):
                        assert int(b[i]) == emu.encode(f, ref[i]), (name, i)
                    else:
                        assert math.isnan(emu.decode(f, int(b[i])))


@pytest.mark.parametrize("profile", ["ieee", "ocp", "riscv"])
@pytest.mark.parametrize("name", ["e4m3", "e5m2", "binary16", "e2m1"])
def test_profiles_equal_scalar(name, profile):
    f = emu.format(name)
    x = inputs(f, np.float32, np.random.default_rng(3), n=40)
    for mode in ("rne", "rz", "sr"):
        y = emu.round(x, f, mode, seed=5, profile=profile)
        ref, _ = scalar_reference(x, f, mode, 5, profile=profile)
        assert same_bits(y, ref, np.float32)[0], (name, profile, mode)


def test_saturate_false_overflows():
    f = emu.format("e4m3,saturate")
    assert f.overflow == "saturate"
    x = np.array([1000.0, -1000.0, 448.0], dtype=np.float32)
    assert emu.round(x, f).tolist() == [448.0, -448.0, 448.0]
    y = emu.round(x, f, saturate=False)
    assert np.isnan(y[:2]).all() and y[2] == 448.0
    assert emu.round(x, "e4m3", saturate=True).tolist() == [448.0, -448.0, 448.0]


def test_shipped_spec_files_match_registry(src_dir):
    files = sorted(glob.glob(os.path.join(src_dir, "formats", "*.fmt")))
    assert len(files) >= 10
    x = inputs(emu.format("binary16"), np.float64, np.random.default_rng(9))
    for path in files:
        ff = emu.format(path)
        reg = emu.format(ff.name)
        assert ff.spec == reg.spec, path
        for mode in ("rne", "sr4"):
            a = emu.round(x, ff, mode, seed=2)
            b = emu.round(x, reg, mode, seed=2)
            assert np.array_equal(a.view(np.uint64), b.view(np.uint64)), path


def test_format_attributes():
    f = emu.format("e4m3")
    assert (f.bits, f.exp_bits, f.man_bits, f.bias, f.precision) == (8, 4, 3, 7, 4)
    assert f.max == 448 and f.min_normal == 2**-6 and f.min_subnormal == 2**-9
    assert f.epsilon == 2**-3 and not f.has_inf and f.has_nan
    h = emu.format("binary16")
    assert h.max == 65504 and h.has_inf and h.has_nan and h.bit_dtype == np.uint16
    assert emu.format("bf16").name == "bfloat16"  # an alias
    assert emu.format("e4m3").finite_count == 254  # 256 less two NaNs
    assert emu.format("binary64").finite_count == 2**64 - 2**53
    assert emu.format("e3m4,bias=5").bias == 5
    assert set(["binary16", "bfloat16", "e4m3", "e5m2", "e2m1"]) <= set(emu.formats())


def test_stochastic_reproducible_and_seeded():
    x = np.random.default_rng(1).standard_normal(5000).astype(np.float32)
    a = emu.round(x, "bfloat16", "sr", seed=42)
    b = emu.round(x, "bfloat16", "sr", seed=42)
    c = emu.round(x, "bfloat16", "sr", seed=43)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert not np.array_equal(a, c)
    # element i's word depends on i only: a slice of the tensor rounded
    # on its own with stream/first index 0 is the prefix
    assert np.array_equal(emu.round(x[:1000], "bfloat16", "sr", seed=42),
                          a[:1000])


def test_threads_do_not_change_results():
    """Concurrent calls from Python threads (ctypes releases the GIL)
    give what sequential calls give, errors stay per thread."""
    import threading
    x = np.random.default_rng(2).standard_normal(1 << 16).astype(np.float32)
    want = {m: emu.round(x, "e5m2", m, seed=9) for m in ("rne", "sr", "sr3")}
    got, errs = {}, []

    def work(m):
        for _ in range(5):
            got[m] = emu.round(x, "e5m2", m, seed=9)
            try:
                emu.round(x, "e5m2", "bogus-" + m)
            except emu.EmuError as e:
                errs.append((m, e.message))
    ts = [threading.Thread(target=work, args=(m,)) for m in want]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for m in want:
        assert np.array_equal(got[m], want[m])
    assert len(errs) == 15 and all(("bogus-" + m) in msg for m, msg in errs)
