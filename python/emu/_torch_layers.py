"""The ops of emu.torch.emulate that emu train computes as layers with
sites of their own: batch norm and layer norm (their statistics in the
policy's norm_stats class, at `<module>.mean`, `.xc`, `.var`, `.rstd`,
the output at `<module>`, the running statistics at
`<module>.running_mean`, `.running_var`) and attention's batched
products (`<module>.scores` and `<module>` forward, `.datt`, `.dv`,
`.dq`, `.dk` backward; the scores and att's gradient in the softmax
class), as ops_norm.c, ops_seq.c and ops_attn.c define them.

Normalisation.  When the statistics' format is binary32 (every preset),
PyTorch's own kernel computes the output and the statistics it saves for
the backward pass, so that the fp32 policy stays bit-identical to plain
PyTorch; the statistics are counted as they are (the mean, rstd) or
recomputed by torch for their sites (x - mean, the biased variance),
and the output is rounded into the activation format.  Under another
format the layer is evaluated as emu train evaluates it: the mean in
binary64 rounded into the format, the centred values and the variance
from the rounded mean, 1/sqrt(var + eps) and the output in binary64 from
the rounded statistics (each binary64 value reaches the format through
binary32, the carrier Session.round reads); the rounded mean and 1/std
are what the backward kernel reads.

Attention.  A batched product (bmm, baddbmm without a bias term) of two
tensors that are no parameters, run by a module's own forward (not by a
child's), is attention's: it reads the output of a softmax of the
module (`<module>`, att v, in the activation format) or it is the
scores (`<module>.scores`, q k^T, in the softmax class).  Its operands
are read as they are (emu train neither rounds nor quantizes them: att
is in the softmax class), and baddbmm's alpha (the 1/sqrt(d) scale)
multiplies each dot product exactly before the one rounding.  In the
backward pass the node of att v makes `.datt` (dY v^T, softmax class)
and `.dv` (att^T dY), the node of the scores `.dq` and `.dk`; PyTorch's
baddbmm backward multiplies each product by alpha in an op of its own,
which is folded into the product (one rounding, as emu train's)."""

import weakref

import torch

from ._torch_gemm import _mat


# ---- normalisation ---------------------------------------------------------------------

def _stats_fmt(em):
    return em._fmt("other", False, "norm_stats")[0]


def batch_norm(em, func, args, kwargs, ctx):
    """native_batch_norm(input, weight, bias, running_mean, running_var,
    training, momentum, eps) -> (out, save_mean, save_invstd)."""
    x, w, b, rm, rv, training, momentum, eps = args[:8]
    path = ctx.path
    base = path + "." if path else ""
    ex = ctx.exempt

    def rnd(site, t, role, kind, cls=None):
        return em._round(site, t, role, ex, kind, True, cls)

    if not training or x.dim() < 2 or x.numel() == 0:
        y, m, s = func(*args, **kwargs)
        return rnd(path, y.contiguous(), "activation", "batchnorm2d"), m, s
    dims = [0] + list(range(2, x.dim()))
    shape = [1, -1] + [1] * (x.dim() - 2)
    n = x.numel() // x.shape[1]
    if _stats_fmt(em) == "binary32":
        y, smean, sinv = func(*args, **kwargs)
        rnd(base + "mean", smean, "other", "bn_mean", "norm_stats")
        rnd(base + "xc", x - smean.view(shape), "activation", "bn_center",
            "norm_stats")
        rnd(base + "var", torch.var(x, dims, unbiased=False), "other",
            "bn_var", "norm_stats")
        y = rnd(path, y.contiguous(), "activation", "batchnorm2d")
    else:
        x64 = x.double()
        mean = rnd(base + "mean", x64.mean(dims).float(), "other", "bn_mean",
                   "norm_stats")
        xc = rnd(base + "xc", (x64 - mean.double().view(shape)).float(),
                 "activation", "bn_center", "norm_stats")
        xc64 = xc.double()
        var = rnd(base + "var", (xc64 * xc64).mean(dims).float(), "other",
                  "bn_var", "norm_stats")
        inv = 1.0 / torch.sqrt(var.double() + eps)
        y64 = xc64 * inv.view(shape)
        if w is not None:
            y64 = y64 * w.double().view(shape)
        if b is not None:
            y64 = y64 + b.double().view(shape)
        y = rnd(path, y64.float(), "activation", "batchnorm2d")
        smean, sinv = mean, inv.float()
        if rm is not None and rv is not None:
            with torch.no_grad():
                rm.copy_((1 - momentum) * rm.double() + momentum * mean.double())
                rv.copy_((1 - momentum) * rv.double()
                         + momentum * var.double() * (n / max(n - 1, 1)))
    for t, which in ((rm, "running_mean"), (rv, "running_var")):
        if t is not None and t.dtype == torch.float32 and t.is_contiguous():
            em._sess.round(base + which, t.detach(), "binary32", "rne", "other",
                           out=t.detach(), kind="bn_running")
    return y, smean, sinv


def layer_norm(em, func, args, kwargs, ctx):
    """native_layer_norm(input, normalized_shape, weight, bias, eps) ->
    (out, mean, rstd), mean and rstd of shape input.shape[:-k] + (1,)*k."""
    x, nshape, w, b, eps = args[:5]
    path = ctx.path
    base = path + "." if path else ""
    ex = ctx.exempt
    dims = tuple(range(-len(nshape), 0))

    def rnd(site, t, role, kind, cls=None):
        return em._round(site, t, role, ex, kind, True, cls)

    if x.numel() == 0:
        return func(*args, **kwargs)
    if _stats_fmt(em) == "binary32":
        y, mean, rstd = func(*args, **kwargs)
        rnd(base + "mean", mean, "other", "ln_mean", "norm_stats")
        rnd(base + "var", torch.var(x, dims, unbiased=False, keepdim=True),
            "other", "ln_var", "norm_stats")
        rnd(base + "rstd", rstd, "other", "ln_rstd", "norm_stats")
        return rnd(path, y.contiguous(), "activation", "layernorm"), mean, rstd
    x64 = x.double()
    mean = rnd(base + "mean", x64.mean(dims, keepdim=True).float(), "other",
               "ln_mean", "norm_stats")
    # the centred values in binary32, as a kernel holds them (ops_seq.c)
    c = (x64 - mean.double()).float().double()
    var = rnd(base + "var", (c * c).mean(dims, keepdim=True).float(), "other",
              "ln_var", "norm_stats")
    rstd = rnd(base + "rstd", (1.0 / torch.sqrt(var.double() + eps)).float(),
               "other", "ln_rstd", "norm_stats")
    y64 = (x64 - mean.double()) * rstd.double()
    if w is not None:
        y64 = y64 * w.double()
    if b is not None:
        y64 = y64 + b.double()
    return rnd(path, y64.float(), "activation", "layernorm"), mean, rstd


# ---- attention ---------------------------------------------------------------------------

def note_att(em, t):
    """Remembers t as a softmax's output (att) of a module's forward."""
    if len(em._att) > 1024:
        em._att = {k: v for k, v in em._att.items() if v() is not None}
    em._att[t.data_ptr()] = weakref.ref(t)


def is_att(em, t):
    hit = em._att.get(t.data_ptr())
    return hit is not None and hit() is not None


def node_kind(em, n):
    """("av" | "scores", alpha) for the backward node n of one of
    attention's products, from the tensors it saved; None otherwise."""
    name = n.name()
    try:
        if name == "BmmBackward0":
            first, alpha = n._saved_self, 1.0
        elif name == "BaddbmmBackward0":
            if float(n._saved_beta) != 0.0:
                return None
            first, alpha = n._saved_batch1, float(n._saved_alpha)
        else:
            return None
    except (AttributeError, RuntimeError, TypeError):
        return None
    if not isinstance(first, torch.Tensor):
        return None
    return ("av" if is_att(em, first) else "scores", alpha)


def gemm(em, name, func, args, kwargs, ctx):
    """One of attention's products, or None when the op is not one (the
    generic GEMM then runs it)."""
    if name == "bmm":
        a, b = args[0], args[1]
        beta, alpha = 0, 1.0
    else:
        a, b = args[1], args[2]
        beta = kwargs.get("beta", args[3] if len(args) > 3 else 1)
        alpha = kwargs.get("alpha", args[4] if len(args) > 4 else 1)
        if beta != 0:
            return None
    alpha = float(alpha)
    base = ctx.path + "." if ctx.path else ""
    ex = ctx.exempt
    fold = 1.0  # the alpha PyTorch multiplies by after the product
    if ctx.phase == "fwd":
        if (not ctx.path or a.data_ptr() in em._params
                or b.data_ptr() in em._params):
            return None
        em._attn_paths.add(ctx.path)
        if is_att(em, a):
            site, role, (f, m) = ctx.path, "activation", em._fmt("activation", ex)
        else:
            site, role = base + "scores", "activation"
            f, m = em._fmt("activation", ex, "softmax")
    elif ctx.phase == "bwd" and ctx.attn is not None and ctx.grads is not None:
        what, node_alpha = ctx.attn
        ga, gb = a.data_ptr() in ctx.grads, b.data_ptr() in ctx.grads
        if ga == gb:
            return None
        if what == "av" and ga:    # dY v^T: att's gradient, softmax class
            site, role = base + "datt", "activation"
            f, m = em._fmt("act_grad", ex, "softmax")
        elif what == "av":         # att^T dY
            site, role = base + "dv", "act_grad"
            f, m = em._fmt("act_grad", ex)
        else:
            site, role = base + ("dq" if ga else "dk"), "act_grad"
            f, m = em._fmt("act_grad", ex)
            fold = node_alpha
    else:
        return None
    if em.accum == "torch":
        y = func(*args, **kwargs)
        if fold != 1.0:
            y = y * fold  # PyTorch's own second rounding, then the format's
        y = y.contiguous()
        em._sess.round(site, y.detach(), f, m, role, out=y.detach(),
                       kind="matmul")
    else:
        outs = []
        for i in range(a.shape[0]):
            ai, ta = _mat(a[i].detach())
            bi, tb = _mat(b[i].detach())
            outs.append(em._sess.matmul(site, ai, bi, em.accum, fmt_out=f,
                                        mode=m, role=role, trans_a=ta,
                                        trans_b=tb, alpha=alpha * fold))
        y = torch.stack(outs)
    em._mark(y, f)
    if fold != 1.0:
        em._folded[id(y)] = (y, fold)
    return y


def folded_mul(em, args):
    """The tensor itself when `mul(t, alpha)` multiplies a backward product
    whose alpha was folded into it (see gemm), else None."""
    if len(args) != 2 or not isinstance(args[0], torch.Tensor):
        return None
    hit = em._folded.get(id(args[0]))
    if hit is None or hit[0] is not args[0]:
        return None
    s = args[1]
    if isinstance(s, torch.Tensor):
        if s.numel() != 1:
            return None
        s = s.item()
    if not isinstance(s, (int, float)) or float(s) != hit[1]:
        return None
    del em._folded[id(args[0])]
    return args[0]
