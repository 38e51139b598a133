"""emu.torch.quantize: the forward pass is emu.round (or emu.quantize for
a block-scaled spec) bit for bit, the backward pass is straight-through,
or the gradient rounded into grad_fmt."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import emu
import emu.torch as et


def _bits(t):
    return t.detach().contiguous().view(torch.int32).numpy()


def _data(n=4096, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-20, 20, (n,), generator=g).float())
    x[:4] = torch.tensor([0.0, -0.0, float("inf"), float("nan")])
    return x


@pytest.mark.parametrize("fmt,mode", [("binary16", "rne"), ("bfloat16", "rz"),
                                      ("e4m3", "rne"), ("e5m2", "sr"),
                                      ("e2m1", "sr8"), ("e3m4,bias=5", "ru")])
def test_forward_equals_round(fmt, mode):
    x = _data().requires_grad_(True)
    y = et.quantize(x, fmt, mode, seed=7)
    ref = emu.round(x.detach(), fmt, mode, seed=7)
    assert np.array_equal(_bits(y), _bits(ref))
    assert y.requires_grad and y.dtype == x.dtype and y.shape == x.shape


def test_forward_float64_and_noncontiguous():
    x = torch.randn(64, 32, dtype=torch.float64).t()
    y = et.quantize(x, "binary16")
    assert y.dtype == torch.float64 and y.shape == x.shape
    ref = emu.round(x.contiguous().numpy(), "binary16")
    assert np.array_equal(y.numpy(), ref)


def test_forward_scaled_equals_quantize():
    x = torch.randn(8, 64)
    y = et.quantize(x, "mxfp8")
    assert np.array_equal(_bits(y), _bits(emu.quantize(x, "mxfp8")))
    y4 = et.quantize(x, "elem=e2m1,scale=e8m0,block=32", "sr", seed=3)
    assert np.array_equal(_bits(y4), _bits(emu.quantize(
        x, "elem=e2m1,scale=e8m0,block=32", "sr", seed=3)))


def test_ste_backward_passes_gradient():
    x = torch.randn(100, requires_grad=True)
    w = torch.randn(100)
    (et.quantize(x, "e4m3") * w).sum().backward()
    assert torch.equal(x.grad, w)  # straight through: d/dx = w exactly


def test_grad_fmt_rounds_gradient():
    x = torch.randn(1000, requires_grad=True)
    w = torch.randn(1000) * 1e-3
    (et.quantize(x, "binary16", grad_fmt="e5m2", grad_mode="sr", seed=5) * w).sum().backward()
    ref = emu.round(w, "e5m2", "sr", seed=5, stream=1)
    assert np.array_equal(_bits(x.grad), _bits(ref))
    assert not torch.equal(x.grad, w)  # e5m2 cannot hold these gradients


def test_seed_reproducible_and_none_draws():
    x = torch.randn(4096)
    a = et.quantize(x, "e4m3", "sr", seed=11)
    b = et.quantize(x, "e4m3", "sr", seed=11)
    assert torch.equal(a, b)
    torch.manual_seed(0)
    c1 = et.quantize(x, "e4m3", "sr", seed=None)
    c2 = et.quantize(x, "e4m3", "sr", seed=None)
    torch.manual_seed(0)
    d1 = et.quantize(x, "e4m3", "sr", seed=None)
    assert torch.equal(c1, d1) and not torch.equal(c1, c2)


def test_quantizer_module_in_a_model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 8), et.Quantizer("e4m3", grad_fmt="e5m2"),
                            torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 16)
    h = m[0](x)
    y = m(x)
    y.sum().backward()
    assert np.array_equal(_bits(m[1](h)), _bits(emu.round(h.detach(), "e4m3")))
    assert m[0].weight.grad is not None
    assert "e5m2" in repr(m)


def test_bad_format_is_an_emu_error():
    with pytest.raises(emu.EmuError):
        et.quantize(torch.randn(4), "e9m99")
    with pytest.raises(TypeError):
        et.quantize([1.0], "binary16")
