"""The GEMM-like ATen ops of emu.torch.emulate: mm, addmm, bmm, baddbmm,
convolution and convolution_backward, through libemu's GEMM
(Session.matmul) with the policy's accumulator model, or through
PyTorch's own kernel on rounded operands for accum="torch".

A 2-d convolution is an im2col GEMM: rows are (image, output pixel),
K = C_in/groups * k_h * k_w (unfold's channel-major order), one GEMM per
group, its bias the first term of each dot product (the GEMM's
accumulate, each accumulator starting at the bias), as emu_t_conv2d
defines it.  Its weight gradient is one GEMM with K = batch * output pixels.
Its input gradient is the stride-1 convolution of the output gradient,
dilated by the stride (zeros between its values) and padded by
dilation*(k-1) - padding, with the weight transposed and flipped: every
input-gradient value is one dot product under the accumulator model (no
col2im additions outside it).  The im2col matrices (that input
gradient's too, without forming the dilated, padded gradient) and the
flipped weight are built in one C pass each (emu_ffi_im2col,
emu_ffi_conv_weight_flip), in the layout PyTorch's unfold + permute +
reshape would give, so that the GEMMs are called exactly as on those.
Transposed and non-2-d convolutions run
in PyTorch's kernel with their outputs rounded, and are listed in
unhandled_ops.csv.

Memory between passes (none of it changes a value): from a context's
second pass on, a convolution's forward im2col matrix is kept for its
weight gradient (which reads the same matrix; at most KEEP_COLS values)
and each weight's flipped copy until the parameter changes; other im2col
matrices and flipped weights come from a per-context pool of scratch
tensors they go back to once read (_take, _give): fresh memory costs the
kernel's page faults and zeroing, more than building the matrix."""

import ctypes

import numpy as np
import torch

from . import _core
from ._lib import check, lib


def _mat(t):
    """t (2-d) as (contiguous matrix, transposed flag) without a copy when
    t is a transposed contiguous matrix."""
    if t.is_contiguous():
        return t, False
    if t.t().is_contiguous():
        return t.t(), True
    return t.contiguous(), False


def _cols(x, c0, cg, kh, kw, ho, wo, stride, pad, dil, up=(1, 1), em=None):
    """The im2col matrix of channels c0 .. c0+cg-1 of x (n, c, h, w), as
    unfold's columns reshaped into a GEMM operand: (n*ho*wo, cg*kh*kw), a
    row per output pixel, x upsampled by `up` (zeros between its values)
    and padded by `pad` (top, left) first (emu_ffi_im2col).  Built in one
    pass in C, in the layout unfold + permute + reshape gives (a
    contiguous matrix, or with one image a transposed view of one), so
    that the GEMM is called exactly as on those (the same sgemm variant,
    hence the same bits).  With the context `em`, the matrix is taken
    from its pool of scratch matrices (_take; _give it back once read)."""
    n, c, h, w = x.shape
    rows, k = n * ho * wo, cg * kh * kw
    # the layout of unfold(...)[:, c0*kh*kw : ..., :].permute(0, 2, 1)
    # .reshape(rows, k), from strides alone (a meta tensor: no data)
    m = torch.empty(n, c * kh * kw, ho * wo, device="meta")
    m = m[:, c0 * kh * kw:c0 * kh * kw + k, :].permute(0, 2, 1).reshape(rows, k)
    trans = not m.is_contiguous() and m.t().is_contiguous()
    shape = (k, rows) if trans else (rows, k)
    out = _take(em, shape) if em is not None else torch.empty(shape)
    if out.numel() == 0:
        return out.t() if trans else out
    x = x.detach()
    if not x.is_contiguous():
        x = x.contiguous()
    geom = (ctypes.c_long * 9)(stride[0], stride[1], pad[0], pad[1], dil[0],
                               dil[1], up[0], up[1], int(trans))
    check(lib.emu_ffi_im2col(out.data_ptr(), x.data_ptr(), n, c, h, w, c0,
                             cg, kh, kw, ho, wo, geom))
    return out.t() if trans else out


def _flipped(w, groups, out=None):
    """The weight of an input gradient's convolution: w (co, cg, kh, kw)
    with each group's (out, in) channels swapped and its kernels flipped,
    (groups*cg, co/groups, kh, kw), in one C pass
    (emu_ffi_conv_weight_flip); into `out` (contiguous, that shape) if
    given."""
    co, cg, kh, kw = w.shape
    w = w.detach()
    if not w.is_contiguous():
        w = w.contiguous()
    if out is None:
        out = torch.empty(groups * cg, co // groups, kh, kw)
    if out.numel():
        check(lib.emu_ffi_conv_weight_flip(out.data_ptr(), w.data_ptr(), co,
                                           cg, kh, kw, groups))
    return out


def _take(em, shape):
    """A float32 tensor of `shape` whose values will all be written: one
    the context gave back (_give), or new memory.  Every pass of a
    model builds im2col matrices (and flipped weights) of the same
    shapes, and so do a pass's layers of one width: reusing them spares
    the kernel faulting in and zeroing fresh pages (which cost more than
    building the matrix)."""
    free = em._pool.get(shape)
    if free:
        return free.pop()
    # NumPy's memory: huge pages for large arrays, fewer faults
    return torch.from_numpy(np.empty(shape, dtype=np.float32))


def _give(em, a):
    """Gives a scratch tensor a (_take's, or the transposed view of one
    that _cols returns) back to the pool: nothing may read it any more."""
    if not a.is_contiguous():
        a = a.t()
    free = em._pool.setdefault(tuple(a.shape), [])
    if len(free) < 4:
        free.append(a)


# The most im2col values kept from a convolution's forward pass for its
# weight gradient (128 MiB): later convolutions beyond it are rebuilt.
KEEP_COLS = 1 << 25


def _cols_key(x, *geom):
    return (x.data_ptr(), tuple(x.shape), tuple(x.stride())) + geom


def _keep_cols(em, x, geom, a):
    """Keeps a forward convolution's im2col matrix a of x for the weight
    gradient's GEMM, which reads the same matrix (_reuse_cols): x is held
    (its memory cannot be reused meanwhile) and its version checked."""
    n = a.numel()
    if em._cols_kept + n > KEEP_COLS:
        return False
    em._cols[_cols_key(x, *geom)] = (x, x._version, a)
    em._cols_kept += n
    return True


def _reuse_cols(em, x, geom):
    """The forward pass's im2col matrix of x (same values, same layout)
    if kept and x unchanged since, else None; forgotten once read."""
    hit = em._cols.pop(_cols_key(x, *geom), None)
    if hit is None:
        return None
    em._cols_kept -= hit[2].numel()
    return hit[2] if hit[1] == x._version else None


def _flipped_cached(em, w, w2, groups):
    """_flipped(w2, groups) for parameter w read as w2 (its cast copy, or
    itself), kept until w2 is replaced or changes: passes that do not
    update the parameter flip it once; after an update the new flip is
    written over the old one (which only this cache holds: the GEMM
    that read it has returned), without new memory to fault in."""
    key = w.data_ptr()
    hit = em._flips.get(key)
    if hit is not None and hit[2] == groups and hit[0].shape == w2.shape:
        # the cast copy w2 may be rewritten in place for the parameter's
        # next version (Emulate._substitute): the parameter's version too
        if hit[0] is w2 and hit[1] == w2._version and hit[4] == w._version:
            return hit[3]
        wt = _flipped(w2, groups, out=hit[3])
    else:
        wt = _flipped(w2, groups)
    em._flips[key] = (w2, w2._version, groups, wt, w._version)
    return wt


_QROLE = {"x": "activation", "w": "weight", "dy": "act_grad"}


class _G:
    """One GEMM-like op's rounding and counting."""

    def __init__(self, em, ctx):
        self.em, self.ctx = em, ctx
        self.base = ctx.path + "." if ctx.path else ""

    def qsite(self, which, out_role):
        """emu train's site of a GEMM operand's quantization: q.x, q.w
        forward; q.dy.dw, q.x.dw for the weight gradient; q.dy, q.w.dx
        for the input gradient."""
        if out_role == "weight_grad":
            tag = which + ".dw"
        elif self.ctx.phase == "bwd" and which != "dy":
            tag = which + ".dx"
        else:
            tag = which
        return self.base + "q." + tag

    def q(self, t, which, axis, out_role):
        """The policy's block-scaled quantization of a GEMM operand along
        its reduction axis (gemm_operands), as (values, g): which is "x"
        (an activation), "w" (a weight) or "dy" (an activation gradient),
        out_role the GEMM's output role.  The operand is values * g, g the
        binary32 tensor scale of a spec with tensor=yes (NVFP4), else 1.
        values (element times block scale) are binary32 numbers, e * s * g
        may not be, so g goes into the GEMM's alpha, which scales each dot
        product without error.  Counted at qsite() by Session.quantize, as
        emu train counts its scaled operands; an exempt layer's operands
        are not quantized (emu train's rule)."""
        role = _QROLE[which]
        spec = self.em._q.get(role)
        if spec is None or self.ctx.exempt:
            return t, 1.0
        site = self.qsite(which, out_role)
        sess = self.em._sess
        if not spec[2]:
            return sess.quantize(site, t.detach().contiguous(), spec[0],
                                 spec[1], role, axis=axis), 1.0
        y, codes = sess.quantize(site, t.detach().double().contiguous(),
                                 spec[0], spec[1], role, axis=axis,
                                 return_codes=True)
        g = float(codes["tensor_scale"])
        # e * s * g is exact in binary64 and e * s a binary32 number, so
        # the quotient is exact
        return (y / g if g != 1.0 else y).float(), g

    def matmul(self, site, a, b, role, ra, rb, alpha=1.0, init=None):
        """op = a @ b (2-d), rounded into role's format at site; ra, rb
        what the operands are ("x", "w", "dy") for the block-scaled
        quantization.  init: None
        or a row (n,) added inside the accumulation (each accumulator
        starts at it: a convolution's bias, as emu_t_conv2d adds it) when
        no tensor scale multiplies the product; returns (result, whether
        init was added)."""
        a, ga = self.q(a, ra, 1, role)
        b, gb = self.q(b, rb, 0, role)
        alpha = alpha * ga * gb
        f, m = self.em._fmt(role, self.ctx.exempt)
        a, ta = _mat(a)
        b, tb = _mat(b)
        out = None
        if init is not None:
            assert alpha == 1.0, "a bias in the accumulation needs alpha 1"
            rows = a.shape[1] if ta else a.shape[0]
            out = init.detach().reshape(1, -1).expand(rows, -1).contiguous()
        y = self.em._mark(self.em._sess.matmul(
            site, a.detach(), b.detach(), self.em.accum, fmt_out=f, mode=m,
            role=role, trans_a=ta, trans_b=tb, alpha=float(alpha), out=out,
            accumulate=out is not None), f)
        return y, out is not None

    def round(self, site, t, role, kind=None):
        """t (a fresh result of this op: rounded in place) into role's
        format at site."""
        t = t if t.is_contiguous() else t.contiguous()
        return self.em._round(site, t, role, self.ctx.exempt, kind, True)

    def operand(self, site, t, role, new):
        return self.em._operand(site, t, role, self.ctx.exempt, new)

    def conv2d(self, site, x, w, stride, padding, dilation, groups, role,
               rx, rw, bias=None, up=(1, 1), out_hw=None, keep=False):
        """conv2d(x, w) (+ bias) by im2col GEMMs, rounded into role's
        format; x upsampled by `up` (zeros between its values) first, and
        padded by `padding` (top and left; the output's size out_hw, by
        default the symmetric padding's); returns (y, whether the bias
        was added inside the accumulation)."""
        n, c, h, wd = x.shape
        co, cg, kh, kw = w.shape
        if out_hw is None:
            ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
            wo = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        else:
            ho, wo = out_hw
        cog = co // groups
        # the bias inside the accumulation unless a tensor scale multiplies
        # the product (then emu train too adds it apart, at <layer>.bias)
        fold = bias is not None and not self.em._tensor_scaled
        outs = []
        k = cg * kh * kw
        for g in range(groups):
            a = _cols(x, g * cg, cg, kh, kw, ho, wo, stride, padding,
                      dilation, up, em=self.em)
            kept = keep and _keep_cols(self.em, x, (g * cg, cg, kh, kw, ho, wo,
                                                    tuple(stride), tuple(padding),
                                                    tuple(dilation)), a)
            wm = w[g * cog:(g + 1) * cog].reshape(cog, k)
            b = bias[g * cog:(g + 1) * cog] if fold else None
            outs.append(self.matmul(site, a, wm.t(), role, rx, rw, init=b)[0])
            if not kept:
                _give(self.em, a)
        y = outs[0] if groups == 1 else torch.cat(outs, 1)
        return y.reshape(n, ho, wo, co).permute(0, 3, 1, 2).contiguous(), fold


def _conv_plain(x, stride, padding, dilation, transposed, output_padding):
    return (x.dim() == 4 and not transposed
            and all(p == 0 for p in output_padding))


def run(em, name, func, args, kwargs, ctx):
    g = _G(em, ctx)
    base = g.base
    bwd = ctx.phase == "bwd"
    fast = em.accum == "torch"
    out_role = "act_grad" if bwd else "activation"

    def wrole(reads):
        """A backward GEMM's output role: weight_grad when its node feeds a
        parameter that it does not read."""
        if not bwd or not ctx.bound:
            return out_role
        ptrs = {p.data_ptr() for _, p in ctx.bound.values()}
        return "act_grad" if any(t.data_ptr() in ptrs for t in reads) else "weight_grad"

    def opnd(t):
        # parameters -> weight casts; a forward GEMM's other operands are
        # activations, rounded once if not yet in the format (at "input"
        # for a model input, else at <module>.xq, emu train's names)
        if t is None or not isinstance(t, torch.Tensor):
            return t
        return g.operand(base + "xq", t, "activation", not bwd)

    def oprole(t):
        # what a GEMM operand is, for its quantization: a parameter is a
        # weight, in a backward node a gradient flowing in is dY, other
        # tensors are activations (a node without hooks: its gradient)
        if t.data_ptr() in em._params:
            return "w"
        if bwd and (ctx.grads is None or t.data_ptr() in ctx.grads):
            return "dy"
        return "x"

    if name in ("mm", "bmm", "addmm", "baddbmm"):
        if name in ("addmm", "baddbmm"):
            bias, a, b = args[0], args[1], args[2]
            beta = kwargs.get("beta", args[3] if len(args) > 3 else 1)
            alpha = kwargs.get("alpha", args[4] if len(args) > 4 else 1)
        else:
            bias, (a, b), beta, alpha = None, args[:2], 0, 1
        role = wrole([a, b])
        # emu train's sites: <layer>.matmul, .dweight, .dinput
        site = base + (("dweight" if role == "weight_grad" else "dinput")
                       if bwd else "matmul" if name in ("mm", "addmm") else name)
        ra, rb = oprole(a), oprole(b)
        a2, b2 = opnd(a), opnd(b)
        if bias is not None:
            bias = g.em._substitute(bias, ctx)
        if fast:
            sc = 1.0
            if em._q and a2.dim() == 2:
                (a2, ga), (b2, gb) = g.q(a2, ra, 1, role), g.q(b2, rb, 0, role)
                sc = ga * gb
            if bias is not None:
                out = func(bias, a2, b2, beta=beta, alpha=alpha * sc)
            else:
                out = func(a2, b2)
                if sc != 1.0:  # one more binary32 rounding (documented)
                    out = out * sc
            return g.round(site, out, role, "matmul")
        if a2.dim() == 2:
            y = g.matmul(site, a2, b2, role, ra, rb, alpha)[0]
        else:
            y = torch.stack([g.matmul(site, a2[i], b2[i], role, ra, rb, alpha)[0]
                             for i in range(a2.shape[0])])
        if bias is not None and beta != 0:
            # emu train's <layer>.bias (add_bias), a rounding of its own
            y = g.round(base + "bias" if not bwd else site + ".bias",
                        y + (bias * beta if beta != 1 else bias), role,
                        "add_bias")
        return y

    if name == "convolution":
        x, w, bias, stride, padding, dilation, transposed, opad, groups = args[:9]
        site = base + "conv"
        x2 = opnd(x)
        w2 = em._substitute(w, ctx)
        if bias is not None:
            bias = em._substitute(bias, ctx)
        if fast or not _conv_plain(x, stride, padding, dilation, transposed, opad):
            if not fast:
                em._note("convolution (transposed or not 2-d)",
                         "computed by torch's kernel, output rounded")
            sc = 1.0
            if em._q:
                (x2, gx), (w2, gw_) = (g.q(x2, "x", 1, out_role),
                                       g.q(w2, "w", 1, out_role))
                sc = gx * gw_
            if sc == 1.0:
                out = func(x2, w2, bias, stride, padding, dilation, transposed,
                           opad, groups)
            else:  # one more binary32 rounding (documented)
                out = func(x2, w2, None, stride, padding, dilation, transposed,
                           opad, groups) * sc
                if bias is not None:
                    out = out + bias.view(1, -1, *([1] * (out.dim() - 2)))
            return g.round(site, out, out_role, "conv2d")
        # the im2col matrices kept for the weight gradient when one will
        # be asked for, from the context's second pass on (when the pool
        # has the memory: new memory to fault in for them costs what
        # rebuilding them saves)
        keep = (not bwd and em._passes > 0 and w.requires_grad
                and w.data_ptr() in em._params and torch.is_grad_enabled())
        y, folded = g.conv2d(site, x2, w2, stride, padding, dilation, groups,
                             out_role, "x", "w", bias, keep=keep)
        if bias is not None and not folded:
            y = g.round(base + "bias", y + bias.view(1, -1, 1, 1), out_role,
                        "add_bias")
        return y

    # convolution_backward
    (go, x, w, bias_sizes, stride, padding, dilation, transposed, opad,
     groups, mask) = args[:11]
    wparam = w.data_ptr() in em._params
    wg_role = "weight_grad" if wparam or not bwd else "act_grad"
    x2 = opnd(x)
    w2 = em._substitute(w, ctx)
    gi = gw = gb = None
    if fast or not _conv_plain(x, stride, padding, dilation, transposed, opad):
        if not fast:
            em._note("convolution_backward (transposed or not 2-d)",
                     "computed by torch's kernel, outputs rounded")
        gi, gw, gb = func(go, x2, w2, bias_sizes, stride, padding, dilation,
                          transposed, opad, groups, mask)
        if gi is not None:
            gi = g.round(base + "dinput", gi, "act_grad", "conv2d_bwd_data")
        if gw is not None:
            gw = g.round(base + "dweight", gw, wg_role, "conv2d_bwd_weights")
        if gb is not None:
            gb = g.round(base + "dweight.dbias", gb, wg_role, "conv2d_bwd_bias")
        return gi, gw, gb
    n, co, ho, wo = go.shape
    _, c, h, wd = x.shape
    _, cg, kh, kw = w.shape
    cog = co // groups
    if mask[2]:
        # emu train's site for a convolution's bias gradient
        gb = g.round(base + "dweight.dbias", go.sum((0, 2, 3)), wg_role,
                     "conv2d_bwd_bias")
    if mask[1]:
        parts = []
        for gi_ in range(groups):
            a = _reuse_cols(em, x2, (gi_ * cg, cg, kh, kw, ho, wo,
                                     tuple(stride), tuple(padding),
                                     tuple(dilation)))
            if a is None:
                a = _cols(x2, gi_ * cg, cg, kh, kw, ho, wo, stride, padding,
                          dilation, em=em)
            dy = go[:, gi_ * cog:(gi_ + 1) * cog].permute(0, 2, 3, 1).reshape(n * ho * wo, cog)
            parts.append(g.matmul(base + "dweight", dy.t(), a, wg_role,
                                  "dy", "x")[0])
            _give(em, a)
        gw = (parts[0] if groups == 1 else torch.cat(parts, 0)).reshape(co, cg, kh, kw)
    if mask[0]:
        # the stride-1 convolution of go dilated by the stride (zeros
        # between its values) and padded by dilation*(k-1) - padding at
        # the top and left (im2col reads that input without forming it)
        pads = [dl * (k_ - 1) - p for k_, p, dl in
                ((kh, padding[0], dilation[0]), (kw, padding[1], dilation[1]))]
        # kept per parameter from the context's second backward pass on
        # (a context used for one pass would only hold them); before,
        # scratch from the pool, given back once read
        keep = wparam and em._passes > 0
        wt = (_flipped_cached(em, w, w2, groups) if keep else
              _flipped(w2, groups, out=_take(em, (groups * cg, co // groups,
                                                  kh, kw))))
        gi = g.conv2d(base + "dinput", go, wt, (1, 1), pads, dilation, groups,
                      "act_grad", "dy", "w", up=tuple(stride),
                      out_hw=(h, wd))[0]
        if not keep:
            _give(em, wt)
        assert gi.shape == x.shape, (gi.shape, x.shape)
    return gi, gw, gb
