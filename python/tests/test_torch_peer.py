"""A peer check: torch's own float16 and bfloat16 casts (round to nearest
even, implemented independently of libemu) agree with emu.round on every
binary32 input class: normals, subnormals of the target and of binary32,
exact ties (both parities), values that overflow and the overflow tie,
infinities, NaN and both zeros.  Finite results must be the same bits;
NaN inputs must give NaN (the NaN's payload convention is each
library's own).  Also the torch side of the binding: tensors in and out,
zero copies, dtypes, devices."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import emu  # noqa: E402


def classes(fmt):
    """float32 inputs of every class for the target format."""
    f = emu.format(fmt)
    rng = np.random.default_rng(123)
    p = f.precision
    v = []
    # normals of the target, random significands over its binades
    e = rng.integers(f.emin, f.emax + 1, 4000)
    v += (np.ldexp(1 + rng.random(4000), e)).tolist()
    # subnormals of the target and tiny values around its smallest one
    v += (rng.random(2000) * f.min_normal).tolist()
    v += [f.min_subnormal * k / 4 for k in range(1, 13)]
    # exact ties between neighbours, both parities, normal and subnormal
    for k in range(200):
        m = int(rng.integers(2 ** (p - 1), 2 ** p))
        ex = int(rng.integers(f.emin, f.emax + 1))
        v.append(np.ldexp(m + 0.5, ex - (p - 1)))
        v.append(np.ldexp(int(rng.integers(0, 2 ** (p - 1))) + 0.5, f.qmin))
    # overflow: max, the tie above it, beyond, float32's own extremes
    v += [f.max, f.max + np.ldexp(1.0, f.emax - p), f.max * 1.5, 3.4e38,
          float(np.finfo(np.float32).max)]
    # binary32 subnormals
    v += [1e-45, 1e-40, 1.1754942e-38]
    with np.errstate(over="ignore"):  # bfloat16's overflow tie: inf
        x = np.array(v, dtype=np.float32)
    x = np.concatenate([x, -x, np.array([np.inf, -np.inf, np.nan, 0.0, -0.0],
                                        dtype=np.float32)])
    return torch.from_numpy(x)


@pytest.mark.parametrize("fmt,cast,view", [
    ("binary16", lambda t: t.half(), torch.int16),
    ("bfloat16", lambda t: t.bfloat16(), torch.int16),
])
def test_torch_casts_agree(fmt, cast, view):
    t = classes(fmt)
    ours = emu.round(t, fmt, "rne", bits=True)
    assert isinstance(ours, torch.Tensor) and ours.dtype == torch.int16
    theirs = cast(t).view(view)
    nan = torch.isnan(t)
    assert nan.sum() >= 1
    mism = (ours != theirs) & ~nan
    assert not mism.any(), "first mismatch: x=%r emu=%#x torch=%#x" % (
        t[mism][0].item(), ours[mism][0].item() & 0xffff,
        theirs[mism][0].item() & 0xffff)
    # NaN in, NaN out, on both sides
    back = emu.round(t, fmt, "rne")
    assert torch.isnan(back[nan]).all()
    # the value form agrees with torch's cast back to float32
    finite = ~nan
    assert torch.equal(back[finite], cast(t).float()[finite])


def test_torch_in_out_zero_copy():
    t = torch.randn(1000)
    y = emu.round(t, "e4m3")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    assert y.shape == t.shape
    out = torch.empty_like(t)
    r = emu.round(t, "e4m3", out=out)
    assert r is out and torch.equal(out, y)
    # in place: out is x
    u = t.clone()
    emu.round(u, "e4m3", out=u)
    assert torch.equal(u, y)
    d = torch.randn(64, dtype=torch.float64)
    assert emu.round(d, "binary16").dtype == torch.float64
    # requires_grad inputs are read (detached); the result has no history
    g = torch.randn(8, requires_grad=True)
    assert not emu.round(g, "binary16").requires_grad


def test_torch_errors():
    with pytest.raises(TypeError, match="dtype"):
        emu.round(torch.zeros(4, dtype=torch.float16), "e4m3")
    with pytest.raises(TypeError, match="dtype"):
        emu.round(torch.zeros(4, dtype=torch.int32), "e4m3")
    with pytest.raises(ValueError, match="meta"):
        emu.round(torch.empty(4, device="meta"), "e4m3")
    with pytest.raises(ValueError, match="contiguous"):
        emu.round(torch.zeros(4, 4), "e4m3", out=torch.zeros(4, 4).t())
    # a non-contiguous input is copied (documented): same values, shape
    t = torch.randn(6, 5)
    assert torch.equal(emu.round(t.t(), "e5m2"), emu.round(t.t().contiguous(), "e5m2"))
