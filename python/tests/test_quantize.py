"""Block-scaled quantization through Python agrees with the C library:
the packed bytes (element codes, scale codes, tensor scale) of
emu.quantize equal what the `emu scaled quant --pack` program writes for
the same binary32 data, shape, axis, mode and seed, and the OCP MX rule
recomputed here from emu.round (scale 2^(floor(log2 amax) - emax_elem),
elements rounded with saturation) gives the same values."""

import math
import subprocess

import numpy as np
import pytest

import emu


def cli_pack(cli, spec, x, axis, mode="rne", seed=0):
    text = "\n".join(float(v).hex() for v in x.reshape(-1).tolist())
    shape = "x".join(str(d) for d in x.shape)
    r = subprocess.run([cli, "scaled", "quant", spec, "--shape", shape,
                        "--axis", str(axis), "--mode", mode, "--seed",
                        str(seed), "--pack", "-", "-"],
                       input=text.encode(), capture_output=True, check=True)
    return np.frombuffer(r.stdout, dtype=np.uint8)


def data(shape, rng):
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-12, 8, shape))
    x = x.astype(np.float32)
    flat = x.reshape(-1)
    flat[::17] = 0.0
    flat[5] = 3e-40  # a binary32 subnormal
    return x


@pytest.mark.parametrize("spec", ["mxfp8", "mxfp8-e5m2", "mxfp4", "mxfp6-e2m3",
                                  "mxint8", "nvfp4",
                                  "elem=e4m3,scale=none,tensor=yes"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_packed_equals_cli(emu_cli, spec, axis):
    rng = np.random.default_rng(7)
    x = data((48, 40), rng)
    for mode, seed in (("rne", 0), ("sr", 3)):
        y, codes = emu.quantize(x, spec, mode, seed=seed, axis=axis,
                                return_codes=True)
        want = cli_pack(emu_cli, spec, x, axis, mode, seed)
        assert np.array_equal(codes["packed"], want), (spec, axis, mode)
        assert y.dtype == np.float32 and y.shape == x.shape
        # the values are e_i s_b g: exact in binary64, and their binary32
        # rounding in float32
        y64 = emu.quantize(x.astype(np.float64), spec, mode, seed=seed,
                           axis=axis)
        g = codes["tensor_scale"]
        el = codes["elements"].astype(np.float64)
        sc = codes["scales"].astype(np.float64)
        if sc.size == 1:
            assert np.array_equal(y64, el * sc[0] * g)
        assert np.array_equal(y, y64.astype(np.float32))


@pytest.mark.parametrize("spec,elem", [("mxfp8", "e4m3"), ("mxfp4", "e2m1"),
                                       ("mxfp8-e5m2", "e5m2")])
def test_mx_rule_recomputed(spec, elem):
    """OCP MX v1.0: blocks of 32 along the axis, s = 2^(floor(log2 amax) -
    emax_elem) as E8M0, e = round(x / s) saturating at ±max."""
    rng = np.random.default_rng(11)
    x = data((6, 96), rng)
    f = emu.format(elem)
    y, st, codes = emu.quantize(x, spec, counts=True, return_codes=True)
    assert st["blocks"] == 18 and st["n"] == x.size
    want = np.empty_like(x)
    for r in range(6):
        for b in range(3):
            blk = x[r, 32 * b:32 * b + 32].astype(np.float64)
            amax = np.abs(blk).max()
            e = math.floor(math.log2(amax)) - f.emax if amax > 0 else -127
            s = 2.0 ** max(e, -127)
            el = emu.round(blk / s, f, "rne", saturate=True)  # exact quotient
            want[r, 32 * b:32 * b + 32] = el * s
            assert codes["scales"][r * 3 + b] == s
            assert st["per_block"]["amax"][r * 3 + b] == np.float32(amax)
    assert np.array_equal(y, want)


def test_float64_and_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = data((4, 64), rng)
    y32 = emu.quantize(x, "mxfp8")
    y64 = emu.quantize(x.astype(np.float64), "mxfp8")
    assert y64.dtype == np.float64 and np.array_equal(y64, y32)
    t = emu.quantize(torch.from_numpy(x), "mxfp8")
    assert isinstance(t, torch.Tensor) and np.array_equal(t.numpy(), y32)


def test_quantize_errors():
    x = np.ones((4, 32), np.float32)
    with pytest.raises(emu.EmuError) as e:
        emu.quantize(x, "mxfp8,block=0")
    assert e.value.code == "EMU_ESPEC"
    with pytest.raises(emu.EmuError) as e:
        emu.quantize(x, "elem=e4m3,bogus=1")
    assert e.value.code == "EMU_ESPEC" and e.value.key == "bogus"
    with pytest.raises(emu.EmuError) as e:
        emu.quantize(x, "mxfp8", "nearest-odd")
    assert e.value.key == "mode"
    with pytest.raises(emu.EmuError):
        emu.quantize(x, "mxfp8", axis=5)
    with pytest.raises(TypeError):
        emu.quantize(x.astype(np.int32), "mxfp8")
