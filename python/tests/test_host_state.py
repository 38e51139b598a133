"""The host never decides a result: inside a PyTorch process that set
flush-to-zero and denormals-are-zero (torch.set_flush_denormal(True)),
every entry point of the package gives the bits it gives in the default
state, on data full of subnormals (of binary32 and of the targets)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import emu  # noqa: E402


def everything(x, x64, a, b):
    out = []
    for fmt, mode in (("binary16", "rne"), ("bfloat16", "sr"), ("e4m3", "rz"),
                      ("e5m2", "sr13")):
        out.append(emu.round(x, fmt, mode, seed=3).view(np.uint32))
        out.append(emu.round(x, fmt, mode, seed=3, bits=True).astype(np.uint64))
        out.append(emu.round(x64, fmt, mode, seed=3).view(np.uint64))
        out.append(np.array(list(emu.round(x, fmt, mode, counts=True)[1]
                                 .as_dict().values()), dtype=np.uint64))
    out.append(emu.quantize(a, "mxfp8").view(np.uint32))
    out.append(emu.quantize(a.astype(np.float64), "nvfp4").view(np.uint64))
    out.append(emu.gemm(a, b, "sequential,acc=binary16",
                        fmt_out="binary16").view(np.uint32))
    with emu.Session(seed=1, ref_rate=1.0) as s:
        out.append(s.round("r", x, "binary16").view(np.uint32))
        out.append(s.matmul("m", a, b, "exact", fmt_out="bfloat16").view(np.uint32))
        out.append(s.stats().drop(columns=["site", "kind", "role", "format"])
                   .to_numpy(dtype=np.float64).view(np.uint64))
    return out


def test_flush_denormal_changes_nothing():
    rng = np.random.default_rng(4)
    # binary32 subnormals, and the subnormal ranges of the targets
    e = rng.uniform(-149, -100, 3000).tolist() + rng.uniform(-30, 2, 3000).tolist()
    x = (np.exp2(e) * np.where(rng.random(6000) < 0.5, -1, 1)).astype(np.float32)
    x64 = np.exp2(rng.uniform(-1074, -1000, 1000)).tolist() + x.tolist()
    x64 = np.array(x64, dtype=np.float64)
    a = (rng.standard_normal((16, 64)) * 2.0 ** -130).astype(np.float32)
    a[:, :8] *= 2.0 ** 100
    b = (rng.standard_normal((64, 8)) * 2.0 ** -10).astype(np.float32)
    want = everything(x, x64, a, b)
    assert torch.set_flush_denormal(True), "this CPU has no FTZ/DAZ to set"
    try:
        got = everything(x, x64, a, b)
    finally:
        torch.set_flush_denormal(False)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(g, w), "result %d differs under FTZ/DAZ" % i
