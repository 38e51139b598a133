"""The operands of emu.torch.emulate's convolution GEMMs, built in C
(emu_ffi_im2col, emu_ffi_conv_weight_flip), against the PyTorch
constructions they replace: unfold + permute + reshape of the input (or
of the output gradient dilated by the stride and padded, for an input
gradient), and each group's transposed, flipped weight concatenated.
Equal bit for bit, and in the same layout (the GEMM must be called
exactly as before: the same sgemm variant sums in the same order)."""

import itertools

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F

from emu import _torch_gemm as tg


def _bits(t):
    return t.contiguous().view(torch.int32)


def _layout(a):
    """(storage, transposed) as _torch_gemm._mat sees a GEMM operand."""
    if a.is_contiguous():
        return a, False
    if a.t().is_contiguous():
        return a.t(), True
    return a.contiguous(), False


def _data(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    x.view(-1)[::7] = 0.0
    x.view(-1)[3::11] = -0.0  # signed zeros must pass unchanged
    return x


GEOMS = list(itertools.product(
    (1, 2, 3),            # batch (1: unfold's view is transposed)
    (1, 2),               # groups
    ((1, 1), (3, 3), (3, 2)),  # kernel
    ((1, 1), (2, 3)),     # stride
    ((0, 0), (1, 2), (3, 0)),  # padding
    ((1, 1), (2, 1)),     # dilation
))


@pytest.mark.parametrize("n,groups,k,stride,pad,dil", GEOMS)
def test_im2col_is_unfold(n, groups, k, stride, pad, dil):
    cg, h, w = 3, 7, 6
    x = _data((n, groups * cg, h, w), 1)
    ho = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) // stride[0] + 1
    wo = (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) // stride[1] + 1
    if ho < 1 or wo < 1:
        pytest.skip("empty output")
    cols = F.unfold(x, k, dilation=dil, padding=pad, stride=stride)
    kk = cg * k[0] * k[1]
    for g in range(groups):
        ref = cols[:, g * kk:(g + 1) * kk, :].permute(0, 2, 1).reshape(n * ho * wo, kk)
        got = tg._cols(x, g * cg, cg, k[0], k[1], ho, wo, stride, pad, dil)
        rs, rt = _layout(ref)
        gs, gt = _layout(got)
        assert rt == gt and rs.shape == gs.shape
        assert torch.equal(_bits(rs), _bits(gs))


@pytest.mark.parametrize("n,k,stride,pad,dil", itertools.product(
    (1, 2), ((3, 3), (1, 1), (5, 4)), ((1, 1), (2, 2), (3, 2)),
    ((0, 0), (1, 2), (4, 4)), ((1, 1), (2, 1))))
def test_im2col_of_dilated_gradient(n, k, stride, pad, dil):
    """An input gradient's matrix: the output gradient dilated by the
    stride and padded by dilation*(k-1) - padding (negative: cropped), as
    the PyTorch path formed it, then unfold."""
    c, h, w = 4, 9, 8
    ho = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) // stride[0] + 1
    wo = (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) // stride[1] + 1
    if ho < 1 or wo < 1:
        pytest.skip("empty output")
    go = _data((n, c, ho, wo), 2)
    z = go.new_zeros(n, c, (ho - 1) * stride[0] + 1, (wo - 1) * stride[1] + 1)
    z[:, :, ::stride[0], ::stride[1]] = go
    pads = []
    for d, (size, k_, s, p, dl) in enumerate(((h, k[0], stride[0], pad[0], dil[0]),
                                              (w, k[1], stride[1], pad[1], dil[1]))):
        lo = dl * (k_ - 1) - p
        full = ((ho, wo)[d] - 1) * s - 2 * p + dl * (k_ - 1) + 1
        pads.append((lo, lo + size - full))
    z = F.pad(z, (pads[1][0], pads[1][1], pads[0][0], pads[0][1]))
    cols = F.unfold(z, k, dilation=dil)
    kk = c * k[0] * k[1]
    ref = cols.permute(0, 2, 1).reshape(n * h * w, kk)
    got = tg._cols(go, 0, c, k[0], k[1], h, w, (1, 1),
                   (pads[0][0], pads[1][0]), dil, up=stride)
    rs, rt = _layout(ref)
    gs, gt = _layout(got)
    assert rt == gt and rs.shape == gs.shape
    assert torch.equal(_bits(rs), _bits(gs))


@pytest.mark.parametrize("groups,k,cg", itertools.product(
    (1, 2, 3), ((3, 3), (1, 1), (2, 5)), (5, 37)))
def test_flipped_weight(groups, k, cg):
    cog = 4
    w = _data((groups * cog, cg, k[0], k[1]), 3)
    ref = torch.cat([w[i * cog:(i + 1) * cog].transpose(0, 1).flip(2, 3)
                     for i in range(groups)], 0)
    got = tg._flipped(w, groups)
    assert got.is_contiguous() and got.shape == ref.shape
    assert torch.equal(_bits(ref), _bits(got))
