"""emu.torch — libemu inside PyTorch.

quantize(t, fmt, ...) / Quantizer(...): an autograd function that rounds a
tensor into a format (or a block-scaled spec) on the way forward and passes
the gradient straight through, or rounded into its own format, on the way
back: the QPyTorch-style building block, with libemu's rounding.

emulate(policy, out=DIR): a TorchDispatchMode under which every ATen op of
a model's forward and backward pass on CPU float32 tensors goes through
libemu: GEMM-like ops by libemu's GEMM with the policy's accumulator model,
every other op's output rounded into its role's format through the choke
point, counted per op site named by the module path, written to DIR with
the files and columns of `emu train`.  The machinery is in _torch_emulate.py.
"""

import torch

from . import _core


def _is_scaled(fmt):
    """True for a block-scaled spec (a preset such as mxfp8, or keys
    elem=..., scale=...), which goes through emu.quantize."""
    if isinstance(fmt, _core.Format):
        return False
    if not isinstance(fmt, str):
        raise TypeError("emu.torch: fmt must be a format name, spec or "
                        "emu.Format, not %s" % type(fmt).__name__)
    return "elem=" in fmt or fmt in _scaled_names()


_SCALED = None


def _scaled_names():
    global _SCALED
    if _SCALED is None:
        _SCALED = frozenset(_core.scaled_presets())
    return _SCALED


def _round_tensor(x, fmt, mode, seed, saturate, stream):
    """x (a CPU float32/float64 tensor) rounded into fmt: emu.round, or
    emu.quantize along the last axis for a block-scaled spec."""
    if _is_scaled(fmt):
        if saturate is not None:
            raise ValueError("emu.torch.quantize: saturate= does not apply "
                             "to a block-scaled spec (%s)" % fmt)
        if x.dim() == 0:
            return _core.quantize(x.reshape(1), fmt, mode, seed=seed,
                                  stream=stream).reshape(())
        return _core.quantize(x, fmt, mode, seed=seed, stream=stream)
    return _core.round(x, fmt, mode, seed=seed, saturate=saturate,
                       stream=stream)


def _seed_of(seed):
    """seed, or a fresh one from torch's default generator for seed=None
    (so that torch.manual_seed makes stochastic rounding reproducible
    while each call draws new random words)."""
    if seed is None:
        return int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())
    return int(seed)


class _Quantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, fmt, mode, seed, grad_fmt, grad_mode, saturate):
        ctx.grad = (grad_fmt, grad_mode or mode, seed, saturate)
        # stream 0 forward, stream 1 backward: independent random words
        return _round_tensor(t.detach(), fmt, mode, seed, saturate, 0)

    @staticmethod
    def backward(ctx, g):
        grad_fmt, grad_mode, seed, saturate = ctx.grad
        if grad_fmt is not None and g is not None:
            g = _round_tensor(g.contiguous(), grad_fmt, grad_mode, seed,
                              saturate, 1)
        return g, None, None, None, None, None, None


def quantize(t, fmt, mode="rne", *, seed=0, grad_fmt=None, grad_mode=None,
             saturate=None):
    """t rounded into fmt by libemu, as an autograd function.

    fmt: a format (name, inline spec, .fmt file, emu.Format) rounded by
    emu.round, or a block-scaled spec (mxfp8, mxfp4, nvfp4, "elem=e4m3,
    scale=e8m0,block=32", ...) quantized by emu.quantize along the last
    axis.  mode: rne rna rz ru rd ro sr srN.  seed: the stochastic
    rounding seed (element i takes word emu_random64(seed, 0, i), so a
    fixed seed gives the same random words every call; seed=None draws
    a seed from torch's default generator on each call).

    Backward: straight-through (the gradient unchanged) unless grad_fmt
    is given; then the gradient is rounded into grad_fmt under grad_mode
    (default: mode), with words from stream 1 of the same seed.
    saturate: None (the format's overflow rule), True or False, as in
    emu.round.  t: a CPU float32 or float64 tensor; the result has its
    dtype and shape (non-contiguous tensors are read through a copy)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("emu.torch.quantize: t must be a torch tensor, not %s"
                        % type(t).__name__)
    if grad_fmt is not None:
        _is_scaled(grad_fmt)  # type check now, not in the backward pass
    return _Quantize.apply(t, fmt, mode, _seed_of(seed), grad_fmt, grad_mode,
                           saturate)


class Quantizer(torch.nn.Module):
    """quantize() as a module: Quantizer("e4m3", "sr", grad_fmt="e5m2")
    rounds its input on the way forward and its gradient on the way back.

    With seed=None each call draws a fresh seed from torch's generator;
    with an integer seed every call uses it (reproducible, but the same
    random words each step)."""

    def __init__(self, fmt, mode="rne", *, seed=0, grad_fmt=None,
                 grad_mode=None, saturate=None):
        super().__init__()
        _is_scaled(fmt)
        if grad_fmt is not None:
            _is_scaled(grad_fmt)
        self.fmt, self.mode, self.seed = fmt, mode, seed
        self.grad_fmt, self.grad_mode, self.saturate = grad_fmt, grad_mode, saturate

    def forward(self, x):
        return quantize(x, self.fmt, self.mode, seed=self.seed,
                        grad_fmt=self.grad_fmt, grad_mode=self.grad_mode,
                        saturate=self.saturate)

    def extra_repr(self):
        s = "fmt=%r, mode=%r" % (str(self.fmt), self.mode)
        if self.grad_fmt is not None:
            s += ", grad_fmt=%r, grad_mode=%r" % (str(self.grad_fmt),
                                                 self.grad_mode or self.mode)
        return s


def emulate(policy, out=None, *, accum=None, seed=0, ref_rate=0.0, threads=1,
            hist=True, swamp=True):
    """See _torch_emulate.Emulate.  hist=False, swamp=False: no log2
    histograms, no swamping counts (faster; the values are the same)."""
    from ._torch_emulate import Emulate
    return Emulate(policy, out, accum=accum, seed=seed, ref_rate=ref_rate,
                   threads=threads, hist=hist, swamp=swamp)


__all__ = ["quantize", "Quantizer", "emulate"]
