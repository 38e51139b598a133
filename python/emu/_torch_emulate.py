"""emu.torch.emulate: every ATen op of a PyTorch model through libemu.

A TorchDispatchMode (torch 1.13's torch.utils._python_dispatch) sees each
ATen op below autograd, forward and backward.  For CPU float32 tensors:

- GEMM-like ops (mm, addmm, bmm, baddbmm, convolution and
  convolution_backward; linear and matmul decompose into these before
  dispatch) run through libemu's GEMM (Session.matmul) with the policy's
  accumulator model, their operands in their roles' formats, the result
  rounded once into the output role's format.  A 2-d convolution is an
  im2col GEMM (K = C_in k_h k_w); its input gradient is the convolution
  of the (stride-dilated, padded) output gradient with the flipped,
  transposed weight, so that each input-gradient value is one dot product
  too; its weight gradient is one GEMM with K = batch x output pixels.
  accum="torch" instead runs the op in PyTorch's own kernel on the
  rounded operands and rounds its output (no swamping counts): the
  fastest choice, and the one under which the fp32 policy is bit-exact
  PyTorch.
- batch norm, layer norm and attention's products are emu train's
  layers, their statistics, scores and probabilities in the policy's op
  classes (norm_stats, softmax): _torch_layers.
- every other known op is computed by PyTorch in binary32 and its float
  outputs rounded into the role's format, or its op class's (the
  softmax, the loss's two steps), through the choke point
  (Session.round).
- sites are emu train's where the op has a counterpart there
  (`conv1.conv`, `fc1.matmul`, `fc1.bias`, `relu1`, `pool1.dinput`,
  `fc1.dweight`, `conv1.dweight.dbias`, `conv1.w.cast`, `fc1.w.update`,
  `fc1.w.update.v`, `input`, `loss`, `loss.dlogits`, `layer1.0.bn1.var`,
  `layer1.0.add`, `layer1.0.grad_add`, `h0.attn.scores`, `wte`; see
  _role_site and README's table), `<module path>.<ATen op>` otherwise.
- views and metadata ops, creation ops and pure data movement (copies,
  cat, indexing, padding, max selection) pass through uncounted: their
  values are those of their (already rounded) inputs.
- any other op is computed by PyTorch, passed through unrounded and
  listed in unhandled_ops.csv with its count.

Roles.  Module forward pre/post hooks (global ones, installed for the
duration of the context) give the module path; the forward hook labels
every autograd node created inside the module with its path and puts a
pre-hook and a post-hook on it, so that the backward ops of a node are
named after the module that made it.  Parameters are weights: an op
reading a parameter reads its copy rounded into the weight format
(counted once per parameter version at `<param>.cast`), forward and
backward.  Forward outputs are activations.  In a backward node, an
output is a weight gradient when it flows (through view nodes) into a
parameter's AccumulateGrad and the op that makes it does not read that
parameter (convolution_backward and the normalisation backward ops by
output position); other backward outputs are activation gradients.
Ops under no_grad outside modules and backward are the optimizer's: an
in-place update of a parameter is `master` (`<param>.update`), a buffer
it reads (SGD's momentum) `opt_state` at `<param>.update.v`, anything
else `opt_state` (`optim.<op>`).  A parameter is first rounded in place
into the format the updates keep it in (`<param>.init`).
"""

import csv
import json
import os
import weakref

import torch
from torch.nn.modules import module as _nnmod
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import _core
from . import _torch_layers

_ROLES = ("weight", "activation", "act_grad", "weight_grad", "master",
          "opt_state", "other")

# ---- op tables -----------------------------------------------------------------------

# Views, metadata, creation and data movement: the values out are values in
# (or constants); not roundings, not counted.
_PASS = frozenset("""
view _reshape_alias reshape _unsafe_view t transpose transpose_ permute expand
expand_as detach detach_ alias squeeze squeeze_ unsqueeze unsqueeze_ as_strided
slice select split split_with_sizes unbind chunk narrow unfold diagonal view_as
flatten unflatten movedim numpy_T lift_fresh _to_copy to copy_ clone contiguous
empty empty_like empty_strided zeros zeros_like ones ones_like full full_like
new_empty new_empty_strided new_zeros new_ones new_full scalar_tensor arange
linspace fill fill_ zero_ _local_scalar_dense item cat stack index index_select
gather constant_pad_nd pad flip roll repeat masked_fill masked_fill_ where max
min amax amin sort topk argmax argmin eq ne lt le gt ge
logical_not logical_and logical_or isnan isinf isfinite sign
max_pool2d_with_indices_backward_unused set_ resize_ _index_put_impl_
index_put index_put_ scatter scatter_ bernoulli bernoulli_ rand rand_like
randn randn_like randint randint_like normal_ uniform_ random_ kaiming_uniform_
_has_compatible_shallow_copy_type is_same_size result_type
""".split())

_GEMM = frozenset("mm addmm bmm baddbmm convolution convolution_backward".split())

# Ops computed by PyTorch in binary32 whose float outputs are rounded.
_ROUND = frozenset("""
add sub rsub mul div neg abs relu threshold threshold_backward gelu
gelu_backward sigmoid sigmoid_backward tanh tanh_backward silu silu_backward
hardtanh hardtanh_backward leaky_relu leaky_relu_backward elu elu_backward
softplus softplus_backward exp exp2 expm1 log log2 log10 log1p sqrt rsqrt
reciprocal pow square clamp clamp_min clamp_max erf sin cos
_softmax _softmax_backward_data _log_softmax _log_softmax_backward_data
nll_loss_forward nll_loss_backward nll_loss2d_forward nll_loss2d_backward
mse_loss mse_loss_backward binary_cross_entropy binary_cross_entropy_backward
binary_cross_entropy_with_logits smooth_l1_loss smooth_l1_loss_backward
mean sum var std var_mean std_mean norm linalg_vector_norm prod
max_pool2d_with_indices max_pool2d_with_indices_backward avg_pool2d
avg_pool2d_backward _adaptive_avg_pool2d _adaptive_avg_pool2d_backward
adaptive_max_pool2d adaptive_max_pool2d_backward
native_batch_norm native_batch_norm_backward native_layer_norm
native_layer_norm_backward native_group_norm native_group_norm_backward
native_dropout native_dropout_backward addcmul addcdiv lerp maximum minimum
embedding embedding_dense_backward _foreach_add _foreach_mul
""".split())

# Which outputs of a multi-output op are model values (the rest, saved
# statistics and masks, are passed through uncounted).
_OUT_IDX = {"native_batch_norm": (0,), "native_layer_norm": (0,),
            "native_group_norm": (0,), "nll_loss_forward": (0,),
            "nll_loss2d_forward": (0,), "max_pool2d_with_indices": (0,),
            "adaptive_max_pool2d": (0,), "native_dropout": (0,),
            "var_mean": (0, 1), "std_mean": (0, 1)}

# Backward ops whose outputs 1 and 2 are the gradients of a weight and a
# bias passed as argument 2 (their output 0 is the input gradient).
_WB_BWD = frozenset("native_batch_norm_backward native_layer_norm_backward "
                    "native_group_norm_backward".split())

# Ops whose output is still att when their first input is (dropout:
# native_dropout, or on CPU a multiplication by a scaled mask)
_ATT_KEEP = frozenset(("native_dropout", "mul", "div"))

# The normalisations' forward ops in training, computed as emu train's
# layers (their statistics in the norm_stats class): _torch_layers.
_NORM_FWD = {"native_batch_norm": _torch_layers.batch_norm,
             "native_layer_norm": _torch_layers.layer_norm}


# Ops that are a whole layer of emu train's models: in a leaf module (one
# without children: nn.ReLU, nn.MaxPool2d, ...) their output is counted
# at the module's own path, as emu train counts `relu1` and `pool1`, with
# emu train's op kind; their backward ops at `<path>.dinput`.
_LAYER_FWD = {"relu": "relu", "gelu": "gelu", "tanh": "tanh",
              "sigmoid": "sigmoid", "max_pool2d_with_indices": "maxpool2d",
              # a module whose forward is `a + b` (a residual addition,
              # GPT's emb), a global average pool (nn.AdaptiveAvgPool2d(1)
              # is a mean over H, W), an nn.Embedding's row lookup
              "add": "add", "mean": "mean", "_adaptive_avg_pool2d": "avgpool2d",
              "avg_pool2d": "avgpool2d", "embedding": "embedding"}
# Backward ops of a leaf module without parameters are its `.dinput`
# whatever they are (a mean's backward is expand and div); these get
# emu train's kinds, others their ATen names.
_LAYER_BWD = {"threshold_backward": "relu_backward",
              "gelu_backward": "gelu_backward",
              "tanh_backward": "tanh_backward",
              "sigmoid_backward": "sigmoid_backward",
              "max_pool2d_with_indices_backward": "maxpool2d_bwd",
              "_adaptive_avg_pool2d_backward": "avgpool2d_bwd",
              "avg_pool2d_backward": "avgpool2d_bwd"}

# The normalisations' backward ops: output -> (site suffix, emu train's kind)
_NORM_BWD = {"native_batch_norm_backward": (("dinput", "batchnorm2d_backward"),
                                            ("dweight", "bn_dgamma"),
                                            ("dbias", "bn_dbeta")),
             "native_layer_norm_backward": (("dinput", "layernorm_backward"),
                                            ("dweight", "ln_dgamma"),
                                            ("dbias", "ln_dbeta"))}

# The cross-entropy loss outside any module, as emu train names it: the
# loss value at `loss` (role other), the gradient of the logits at
# `loss.dlogits`; the steps between keep their ATen names under `loss.`.
_LOSS_FWD = {"nll_loss_forward": ("other", "loss", "nll_loss"),
             "nll_loss2d_forward": ("other", "loss", "nll_loss"),
             "_log_softmax": ("activation", "loss._log_softmax", None)}
# Both forward steps are the policy's loss class (emu train forms the loss
# in binary64 and rounds it once into that format); the gradient stays in
# the act_grad format, as emu train's loss.dlogits.
_LOSS_BWD = {"_log_softmax_backward_data": ("loss.dlogits", None),
             "nll_loss_backward": ("loss.nll_loss_backward", None),
             "nll_loss2d_backward": ("loss.nll_loss2d_backward", None)}


def _short(name):
    """A parameter's site prefix as emu train spells it: `fc1.w`,
    `conv1.b` for `fc1.weight`, `conv1.bias`."""
    head, _, last = name.rpartition(".")
    last = {"weight": "w", "bias": "b"}.get(last, last)
    return head + "." + last if head else last


def _preset_form(spec):
    """A block-scaled spec's canonical keys (as a policy dict holds them)
    written as the preset they are, or the nearest preset with the same
    element format and the keys that differ ("nvfp4,block=16x16"), so
    that the format column of the quantize sites reads as emu train's
    (`nvfp4`, `nvfp4+`); the keys themselves if no preset is near."""
    kv = dict(x.split("=", 1) for x in spec.split(","))
    best = None
    for name in _core.scaled_presets():
        pk = dict(x.split("=", 1) for x in _core.scaled_spec(name).split(","))
        if set(pk) != set(kv) or pk.get("elem") != kv.get("elem"):
            continue
        diff = [k for k in kv if kv[k] != pk[k]]
        if best is None or len(diff) < len(best[1]):
            best = (name, diff)
    if best is None:
        return spec
    form = ",".join([best[0]] + ["%s=%s" % (k, kv[k]) for k in best[1]])
    return form if _core.scaled_spec(form) == spec else spec


_OPNAMES = {}


def _opname(func):
    """func's ATen name (its overload packet's), looked up once per
    overload."""
    name = _OPNAMES.get(func)
    if name is None:
        name = _OPNAMES[func] = func.overloadpacket.__name__
    return name


def _flat(tree, acc):
    """The leaves of nested lists, tuples and dicts (an op's arguments or
    outputs) appended to acc, in tree_flatten's order, as _unflatten_like
    and _map_tensors walk them."""
    for a in tree:
        if isinstance(a, (list, tuple)):
            _flat(a, acc)
        elif isinstance(a, dict):
            _flat(a.values(), acc)
        else:
            acc.append(a)
    return acc


def _is_f32(t):
    return (isinstance(t, torch.Tensor) and t.dtype == torch.float32
            and t.device.type == "cpu" and not t.is_sparse)


class _Ctx:
    """Where an op runs: phase (fwd, bwd, opt), module path, whether the
    module is exempt, and for a backward node the parameters its outputs
    feed: {output index: (param name, param)}."""

    __slots__ = ("phase", "path", "exempt", "bound", "grads", "between",
                 "attn")

    def __init__(self, phase, path, exempt=False, bound=None, grads=None,
                 between=False, attn=None):
        self.phase, self.path, self.exempt = phase, path, exempt
        self.bound = bound or {}
        # addresses of the gradients flowing into a backward node: a
        # backward GEMM's operand among them is dY (emu train's q.dy)
        self.grads = grads
        # backward, outside any node: autograd summing the gradients of a
        # tensor read twice (path: the node that ran last)
        self.between = between
        # a backward node of attention's products: ("av" | "scores", alpha)
        self.attn = attn


_VIEW_NODES = ("TBackward", "ViewBackward", "ReshapeAliasBackward",
               "UnsafeViewBackward", "PermuteBackward", "TransposeBackward",
               "SqueezeBackward", "UnsqueezeBackward", "ExpandBackward",
               "AsStridedBackward", "AliasBackward", "CloneBackward",
               "ToCopyBackward")


class Emulate(TorchDispatchMode):
    """The context manager emu.torch.emulate returns (see emu.torch and this
    module's docstring).  After the context: .stats() (a DataFrame with
    ops.csv's columns), .unhandled ({op: count}), .passthrough and .out."""

    def __init__(self, policy, out=None, *, accum=None, seed=0, ref_rate=0.0,
                 threads=1, hist=True, swamp=True):
        super().__init__()
        if isinstance(policy, str):
            pol = _core.policy(policy)
        elif isinstance(policy, dict):
            pol = dict(policy)
        else:
            raise TypeError("emu.torch.emulate: policy must be a preset name "
                            "or a dict like emu.policy()'s")
        self.policy = pol
        self.out = out
        self.accum = accum if accum is not None else pol.get("accum", "fast")
        if self.accum != "torch":
            _core.accum_spec(self.accum)  # a bad spec fails here, not mid-model
        self.seed, self.ref_rate, self.threads = int(seed), ref_rate, threads
        self.hist, self.swamp = bool(hist), bool(swamp)
        self._roles = {}
        for r in ("weight", "activation", "act_grad", "weight_grad",
                  "opt_state"):
            spec = pol.get(r, {"format": "binary32", "mode": "rne"})
            self._roles[r] = (spec["format"], spec.get("mode", "rne"))
        ex = pol.get("exempt_precision", {"format": "binary32", "mode": "rne"})
        self._exempt_fmt = ex["format"]
        m = pol.get("master", pol.get("weight"))
        # without master weights the weights themselves are updated (in
        # their own, or an exempt layer's, format), as in emu train, where
        # those sites' role is weight
        self._use_master = bool(pol.get("use_master", False))
        mfmt = m["format"] if self._use_master else self._roles["weight"][0]
        mmode = "sr" if pol.get("update") == "sr" else m.get("mode", "rne")
        self._roles["master"] = (mfmt, mmode)
        self._roles["other"] = ("binary32", "rne")
        for f, _ in self._roles.values():
            _core.format(f)
        # the op classes (README's table): normalisation statistics,
        # softmax, loss.  A dict without them means what emu train's
        # records without them mean: binary32 statistics and loss, the
        # softmax in the activation format (None: its role's format)
        self._cls = {}
        for c in ("norm_stats", "softmax", "loss"):
            spec = pol.get(c, {"format": "activation" if c == "softmax"
                               else "binary32"})
            if spec["format"] == "activation":
                if c != "softmax":
                    raise ValueError("emu.torch.emulate: only the softmax may "
                                     "follow the activation format")
                self._cls[c] = None
            else:
                _core.format(spec["format"])
                self._cls[c] = (spec["format"], spec.get("mode", "rne"))
        q = pol.get("gemm_operands", {})
        # role -> (spec, element mode, whether it has a tensor scale)
        self._q = {r: (_preset_form(q[r]["format"]), q[r].get("mode", "rne"),
                       "tensor=yes" in q[r]["format"])
                   for r in ("weight", "activation", "act_grad")
                   if r in q and q[r].get("format", "none") != "none"}
        # a tensor scale multiplies some GEMM's product (NVFP4): a
        # convolution's bias is then added apart, as emu train does
        self._tensor_scaled = any(t for _, _, t in self._q.values())
        self._exempt_which = set(str(pol.get("exempt", "none")).split("+")) - {"none"}
        self.unhandled = {}
        self.passthrough = {}
        self._active = False

    # ---- entering and leaving ----------------------------------------------------------

    def __enter__(self):
        if self._active:
            raise RuntimeError("emu.torch.emulate: this context is already active")
        self._sess = _core.Session(seed=self.seed, ref_rate=self.ref_rate,
                                   threads=self.threads, hist=self.hist,
                                   swamp=self.swamp)
        self._active = True
        self._names = {}        # id(module) -> path
        self._exempt_mods = set()
        self._params = {}       # data_ptr -> (name, param, exempt)
        self._casts = {}        # data_ptr -> (version, rounded copy)
        self._inputs = {}       # data_ptr -> (weakref, version, shape, strides, copy)
        self._fresh = {}        # data_ptr -> (weakref, format, version)
        self._leaves = set()    # paths of modules without children
        self._bare = set()      # ... and without parameters of their own
        self._state = {}        # data_ptr of an optimizer buffer -> param
        self._stack = []        # (path, exempt, input grad_fn ids)
        self._node = None       # _Ctx of the backward node running
        self._bwd = 0           # depth of torch.autograd.backward/grad calls
        self._last_path = ""
        self._last_ctx = None   # the _Ctx of the backward node that ran last
        self._bufs = set()      # data_ptrs of running_var buffers seen
        self._att = {}          # data_ptr -> weakref: softmax outputs (att)
        self._attn_paths = set()  # modules that ran attention's products
        self._folded = {}       # id -> (tensor, alpha): see _torch_layers.gemm
        self._cols = {}         # forward im2col matrices: see _torch_gemm
        self._cols_kept = 0     # ... and their values
        self._flips = {}        # param data_ptr -> flipped weight: _torch_gemm
        self._pool = {}         # shape -> scratch matrices: _torch_gemm._take
        self._passes = 0        # backward passes completed
        self._threads = torch.get_num_threads()
        torch.set_num_threads(1)  # torch's own kernels: thread-independent bits
        self._h = [_nnmod.register_module_forward_pre_hook(self._pre_hook),
                   _nnmod.register_module_forward_hook(self._post_hook)]
        self._orig = (torch.autograd.backward, torch.autograd.grad)
        torch.autograd.backward = self._wrap_bwd(self._orig[0])
        torch.autograd.grad = self._wrap_bwd(self._orig[1])
        return super().__enter__()

    def __exit__(self, exc_type, exc, tb):
        try:
            super().__exit__(exc_type, exc, tb)
        finally:
            self._active = False
            torch.autograd.backward, torch.autograd.grad = self._orig
            for h in self._h:
                h.remove()
            torch.set_num_threads(self._threads)
            self._casts.clear()
            self._inputs.clear()
            self._fresh.clear()
            self._drop_cols()
            self._flips.clear()
            self._pool.clear()
            if self.out is not None:
                self.write(self.out)
        return False

    def close(self):
        """Frees the session (and its statistics) before the garbage
        collector would."""
        self._sess.close()

    def _wrap_bwd(self, fn):
        def wrapped(*a, **k):
            if not self._active:
                return fn(*a, **k)
            self._bwd += 1
            self._last_path = ""
            self._last_ctx = None
            try:
                return fn(*a, **k)
            finally:
                self._bwd -= 1
                self._node = None
                if self._bwd == 0:
                    # im2col matrices a backward pass did not read (its
                    # inputs kept no graph to them) are not read later
                    self._drop_cols()
                    self._passes += 1
        wrapped.__wrapped__ = fn
        return wrapped

    def _drop_cols(self):
        self._cols.clear()
        self._cols_kept = 0

    def begin_step(self, step):
        """Starts step `step` of the statistics (ops_steps.csv)."""
        self._sess.begin_step(step)

    def stats(self):
        """Per-site statistics (ops.csv's columns) as a pandas DataFrame."""
        return self._sess.stats()

    def write(self, out):
        """Writes ops.csv, hist.csv, ops.json (Session.write, emu train's
        writers), unhandled_ops.csv and emulate.json into `out`."""
        self._sess.write(out)
        _atomic_csv(os.path.join(out, "unhandled_ops.csv"), ["op", "count", "note"],
                    [(k, n, note) for k, (n, note) in sorted(self.unhandled.items())])
        meta = {"tool": "emu.torch.emulate", "policy": self.policy,
                "accum": self.accum, "seed": self.seed,
                "ref_rate": self.ref_rate, "hist": self.hist,
                "swamp": self.swamp, "torch": torch.__version__,
                "libemu": _core.__version__,
                "unhandled": {k: n for k, (n, _) in self.unhandled.items()}}
        tmp = os.path.join(out, ".emulate.json.tmp")
        with open(tmp, "w") as f:
            json.dump(meta, f, indent=1)
        os.replace(tmp, os.path.join(out, "emulate.json"))

    # ---- module paths ----------------------------------------------------------------

    def _register_root(self, mod):
        gemm = []
        for name, m in mod.named_modules():
            self._names.setdefault(id(m), name)
            if not m._modules:
                self._leaves.add(name)
                if all(v is None for v in m._parameters.values()):
                    self._bare.add(name)
            w = m._parameters.get("weight") if hasattr(m, "_parameters") else None
            if w is not None and w.dim() >= 2:
                gemm.append(m)
        if gemm:
            if "first" in self._exempt_which:
                self._exempt_mods.add(id(gemm[0]))
            if "last" in self._exempt_which:
                self._exempt_mods.add(id(gemm[-1]))
        for mname, m in mod.named_modules():
            for pname, p in m.named_parameters(recurse=False):
                full = mname + "." + pname if mname else pname
                if p.data_ptr() in self._params:
                    continue
                rec = (_short(full), p, id(m) in self._exempt_mods)
                self._params[p.data_ptr()] = rec
                self._init(rec)
            # batch norm's running variance starts at 1: emu train counts
            # its initialisation (in `other`'s binary32); the mean's zeros
            # it does not
            rv = m._buffers.get("running_var") if hasattr(m, "_buffers") else None
            if (rv is not None and _is_f32(rv) and rv.is_contiguous()
                    and rv.data_ptr() not in self._bufs and rv.numel()):
                self._bufs.add(rv.data_ptr())
                with torch.no_grad():
                    f, m_ = self._roles["other"]
                    self._sess.round((mname + "." if mname else "")
                                     + "running_var.init", rv.detach(), f, m_,
                                     "other", out=rv.detach(), kind="load")

    def _init(self, rec):
        """A parameter first seen: its values rounded in place into the
        format the updates keep it in (the master format, or the weight
        format without master weights), counted at `<param>.init` as emu
        train counts its initialisation; binary32 masters are unchanged."""
        name, p, exempt = rec
        if not _is_f32(p) or not p.is_contiguous() or p.numel() == 0:
            return
        role = "master" if self._use_master else "weight"
        f, _ = self._fmt("master", exempt)
        with torch.no_grad():
            self._sess.round(name + ".init", p.detach(), f, "rne", role,
                         out=p.detach(), kind="load")

    def _pre_hook(self, mod, inputs):
        if not self._active:
            return None
        if not self._stack and id(mod) not in self._names:
            self._register_root(mod)
        path = self._names.get(id(mod))
        if path is None:
            parent = self._stack[-1][0] if self._stack else ""
            path = (parent + "." if parent else "") + type(mod).__name__.lower()
            self._names[id(mod)] = path
        # node wrappers are kept alive here: an id() alone could be reused
        stops = {id(n): n for n in (t.grad_fn for t in tree_flatten(inputs)[0]
                                    if isinstance(t, torch.Tensor))
                 if n is not None}
        self._stack.append((path, id(mod) in self._exempt_mods, stops))
        if self._bwd == 0:
            self._node = None
        return None

    def _post_hook(self, mod, inputs, output):
        if not self._active or not self._stack:
            return None
        path, exempt, stops = self._stack.pop()
        if not torch.is_grad_enabled():
            return None
        todo = [t.grad_fn for t in tree_flatten(output)[0]
                if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        seen = {}
        while todo:
            n = todo.pop()
            if n is None or id(n) in seen or id(n) in stops:
                continue
            seen[id(n)] = n
            md = n.metadata
            if md.get("emu_mode") is self:  # an inner module's: walk through
                todo.extend(f for f, _ in n.next_functions)
                continue
            if hasattr(n, "variable"):  # AccumulateGrad of a leaf
                rec = self._params.get(n.variable.data_ptr())
                if rec is not None:
                    md["emu_mode"] = self
                    self._hook_node(n, _Ctx("bwd", rec[0], rec[2],
                                            {0: (rec[0], rec[1])}))
                continue
            md["emu_mode"] = self
            self._hook_node(n, None, path, exempt)
            todo.extend(f for f, _ in n.next_functions)
        return None

    def _hook_node(self, n, ctx, path=None, exempt=False):
        def pre(grad_outputs):
            if self._active:
                c = ctx if ctx is not None else _Ctx(
                    "bwd", path, exempt, self._bound(n),
                    {g.data_ptr() for g in grad_outputs
                     if isinstance(g, torch.Tensor)},
                    attn=(_torch_layers.node_kind(self, n)
                          if path in self._attn_paths else None))
                self._node = c
            return None

        def post(grad_inputs, grad_outputs):
            if self._active and self._node is not None:
                self._last_path = self._node.path
                self._last_ctx = self._node
                self._node = None
                self._folded.clear()
            return None
        n.register_prehook(pre)
        n.register_hook(post)

    def _bound(self, n):
        """{output index: (param name, param)} for the outputs of node n
        that flow, through view nodes, into a parameter's AccumulateGrad."""
        out = {}
        for i, (f, _) in enumerate(n.next_functions):
            for _ in range(8):
                if f is None:
                    break
                if hasattr(f, "variable"):
                    rec = self._params.get(f.variable.data_ptr())
                    if rec is not None:
                        out[i] = (rec[0], rec[1])
                    break
                nf = [g for g, _ in f.next_functions if g is not None]
                if len(nf) != 1 or not f.name().startswith(_VIEW_NODES):
                    break
                f = nf[0]
        return out

    def _ctx(self):
        if self._node is not None:
            return self._node
        if self._bwd > 0:
            last = self._last_ctx
            return _Ctx("bwd", self._last_path, bound=last.bound if last else None,
                        between=True)
        if self._stack:
            return _Ctx("fwd", self._stack[-1][0], self._stack[-1][1])
        if torch.is_grad_enabled():
            return _Ctx("fwd", "")
        return _Ctx("opt", "optim")

    # ---- formats, sites, roundings -----------------------------------------------------

    def _fmt(self, role, exempt, cls=None):
        """(format, mode) of a value of `role`, or of op class `cls`
        (norm_stats, softmax, loss) when given and it has a format of its
        own (the softmax may follow its role's); cls may be a pair
        (class, role) naming the role whose format it follows instead."""
        if isinstance(cls, tuple):
            cls, role = cls
        if cls is not None and self._cls.get(cls) is not None:
            return self._cls[cls]
        if role == "master" and not self._use_master:
            return self._fmt("weight", exempt)[0], self._roles["master"][1]
        f, m = self._roles[role]
        if exempt and role in ("weight", "activation", "act_grad", "weight_grad"):
            f = self._exempt_fmt
        return f, m

    def _round(self, site, t, role, exempt=False, kind=None, inplace=False,
               cls=None):
        """t rounded into role's format (or op class cls's) through the
        choke point, counted at site (op kind `kind`, an ATen name cut to
        ops.csv's 23 characters); a new contiguous tensor, or t itself
        rounded in place if `inplace` (t contiguous, and no other
        tensor's values)."""
        f, m = self._fmt(role, exempt, cls)
        if role == "master" and not self._use_master:
            role = "weight"
        d = t.detach()
        r = self._sess.round(site, d, f, m, role, out=d if inplace else None,
                             kind=kind[:23] if kind else None)
        return self._mark(t if inplace else r, f)

    def _mark(self, t, f):
        """Remembers that t's values are in format f (until t changes or
        dies), so that a GEMM reading t does not check it again."""
        if len(self._fresh) > 4096:
            self._fresh = {k: v for k, v in self._fresh.items()
                           if v[0]() is not None}
        self._fresh[t.data_ptr()] = (weakref.ref(t), f, t._version)
        return t

    def _in_format(self, a, f):
        hit = self._fresh.get(a.data_ptr())
        if hit is None or hit[1] != f:
            return False
        base = hit[0]()
        return (base is not None and base._version == hit[2]
                and a._version == hit[2] and a.numel() <= base.numel())

    def _substitute(self, a, ctx):
        """A parameter (or a view of one at offset 0) as its copy in the
        weight format; a model input read by a GEMM as its rounded copy."""
        if not _is_f32(a):
            return a
        rec = self._params.get(a.data_ptr())
        if rec is None:
            return a
        name, p, exempt = rec
        if not self._use_master:
            return a  # kept in its format by .init and the updates: no cast
        if not p.is_contiguous() or a.storage_offset() != p.storage_offset():
            return a
        c = self._casts.get(p.data_ptr())
        if c is None or c[0] != p._version:
            if c is not None and c[1].shape == p.shape:
                # the parameter's new version cast into its previous copy,
                # which nothing outside this context holds (ops read it
                # below autograd, their outputs are new tensors): the
                # same values as into new memory, without its page faults
                f, m = self._fmt("weight", exempt)
                q = self._mark(self._sess.round(name + ".cast", p.detach(), f,
                                                m, "weight", out=c[1],
                                                kind="cast"), f)
            else:
                q = self._round(name + ".cast", p, "weight", exempt, "cast")
            self._casts[p.data_ptr()] = (p._version, q)
            c = (p._version, q)
        q = c[1]
        if a.shape == p.shape and a.stride() == p.stride():
            return q
        return q.as_strided(a.size(), a.stride(), 0)

    def _operand(self, site, a, role, exempt, new=True):
        """A GEMM operand in its role's format: parameters through the cast
        cache; another tensor that is not yet in the format (a model input)
        is rounded once, counted at `site`, and remembered by address and
        version so that the backward pass reads the same rounded copy.
        The tensor rounded is held by a weak reference, which PyTorch
        keeps alive as long as autograd holds the tensor: an entry whose
        tensor died is never taken for a new tensor at the same address
        (a later batch, an activation under no_grad), and the layout is
        compared, so that a transposed view of a square operand is not
        taken for it."""
        s = self._substitute(a, None)
        if s is not a or a.data_ptr() in self._params:
            return s
        key = a.data_ptr()
        hit = self._inputs.get(key)
        if (hit is not None and hit[0]() is not None and hit[1] == a._version
                and hit[2] == tuple(a.shape) and hit[3] == a.stride()):
            return hit[4]
        f, m = self._fmt(role, exempt)
        if not new:
            return a
        if a.grad_fn is None:
            # a leaf that is no parameter, a model input: always loaded
            # (and counted) once per version, as emu train loads its batch
            site = "input"
        else:
            if f == "binary32" or self._in_format(a, f):
                return a
            _, cnt = _core.round(a.detach().contiguous(), f, m, counts=True)
            if cnt.inexact == 0 and cnt.nan == 0:
                return a
        q = self._round(site, a, role, exempt, "load")
        if len(self._inputs) > 64:
            self._inputs.clear()
        self._inputs[key] = (weakref.ref(a), a._version, tuple(a.shape),
                             a.stride(), q)
        return q

    def _note(self, key, note):
        n, _ = self.unhandled.get(key, (0, note))
        self.unhandled[key] = (n + 1, note)

    # ---- the dispatch ----------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _opname(func)
        if name in _PASS or not self._active:
            return func(*args, **kwargs)
        tin = [a for a in _flat((args, kwargs), []) if isinstance(a, torch.Tensor)]
        if any(t.device.type != "cpu" for t in tin):
            self._note(name + " (not cpu)", "passed through unrounded")
            return func(*args, **kwargs)
        ctx = self._ctx()
        if name in _GEMM and all(t.dtype == torch.float32 for t in tin
                                 if t.is_floating_point()):
            return self._gemm(name, func, args, kwargs, ctx)
        if ctx.phase in ("fwd", "bwd") and any(
                t.data_ptr() in self._params for t in tin):
            args, kwargs = _map_tensors((args, kwargs),
                                        lambda a: self._substitute(a, ctx))
        if name in _NORM_FWD and ctx.phase == "fwd" and _is_f32(args[0]):
            return _NORM_FWD[name](self, func, args, kwargs, ctx)
        if name == "mul" and ctx.phase == "bwd" and self._folded:
            t = _torch_layers.folded_mul(self, args)
            if t is not None:
                return t
        out = func(*args, **kwargs)
        if out is None and name.endswith("_") and args:
            targets = _flat((args[0],), [])  # _foreach_add_ and the like
            if name.rstrip("_") in _ROUND:
                for t in targets:
                    if _is_f32(t):
                        role, site, kind, cls = self._role_site(name, ctx, 0, t, tin)
                        if t.is_contiguous():
                            self._round(site, t, role, ctx.exempt, kind, True, cls)
                        else:
                            t.copy_(self._round(site, t, role, ctx.exempt, kind,
                                                cls=cls))
            elif any(_is_f32(t) for t in targets):
                self._note(name, "passed through unrounded")
            return out
        flat_out = _flat((out,), [])
        fl = [t for t in flat_out if isinstance(t, torch.Tensor)
              and t.is_floating_point()]
        if not fl:
            return out
        if name not in _ROUND and name.rstrip("_") not in _ROUND:
            self._note(name, "passed through unrounded")
            return out
        if any(t.dtype != torch.float32 for t in fl):
            self._note(name + " (%s)" % fl[0].dtype, "passed through unrounded")
            return out
        keep = _OUT_IDX.get(name)
        ins = {id(t) for t in tin}
        in_ptrs = {t.data_ptr() for t in tin}
        res = []
        for i, t in enumerate(flat_out):
            if (not _is_f32(t) or (keep is not None and i not in keep)):
                res.append(t)
                continue
            role, site, kind, cls = self._role_site(name, ctx, i, t, tin)
            if t.is_contiguous() and (id(t) in ins or t.data_ptr() not in in_ptrs):
                # the op's own fresh output, or the tensor an in-place op
                # wrote: rounded where it is, without a copy
                r = self._round(site, t, role, ctx.exempt, kind, True, cls)
            else:
                r = self._round(site, t, role, ctx.exempt, kind, cls=cls)
                if id(t) in ins or not t.is_contiguous():
                    t.copy_(r)
                    r = self._mark(t, self._fmt(role, ctx.exempt, cls)[0])
            res.append(r)
            if ctx.phase == "fwd" and ctx.path and i == 0 and (
                    name == "_softmax" or (name in _ATT_KEEP and args
                                           and _torch_layers.is_att(self, args[0]))):
                # att (or att after dropout), which attention's product
                # with v reads
                _torch_layers.note_att(self, r)
        return _unflatten_like(out, res)

    def _role_site(self, name, ctx, i, t, tin):
        """(role, site, kind, op class) of output i (tensor t) of op
        `name`: emu train's site and kind where the op has a counterpart
        there, else `<module path>.<ATen op>` and the ATen name; the op
        class (for _fmt) or None."""
        base = ctx.path + "." if ctx.path else ""
        leaf = ctx.path in self._leaves
        if ctx.phase == "fwd":
            op = name.rstrip("_")
            if leaf and op in _LAYER_FWD and (op != "add" or ctx.path in self._bare):
                # (an addition only as a module's whole forward, not a
                # linear layer's bias added after matmul)
                return "activation", ctx.path, _LAYER_FWD[op], None
            if not ctx.path and name in _LOSS_FWD:
                role, site, kind = _LOSS_FWD[name]
                return role, site, kind or name, "loss"
            if name == "_softmax":
                # attention's probabilities (att), the softmax class
                return ("activation", base + "softmax" if ctx.path else name,
                        "attn_softmax", "softmax")
            # an in-place op at its out-of-place name's site (torchvision's
            # `out += identity` is emu train's `layer1.0.add`)
            return "activation", base + op, op, None
        if ctx.phase == "opt":
            return self._opt_site(name, t, tin) + (None,)
        # backward
        if ctx.between and name in ("add", "add_"):
            # autograd adding the two gradients of a tensor read twice,
            # after the node that ran last: emu train's
            # "<that layer's name up to its last '.'>.grad_add" (a
            # weight's, when that node's output feeding the weight has
            # the sum's shape: a tied weight's two gradients)
            p = ctx.path
            site = (p[:p.rfind(".")] if "." in p else p)
            site = site + ".grad_add" if site else "grad_add"
            wg = any(tuple(q.shape) == tuple(t.shape) for _, q in ctx.bound.values())
            return ("weight_grad" if wg else "act_grad"), site, "add", None
        if not ctx.path and name in _LOSS_BWD:
            return "act_grad", _LOSS_BWD[name][0], name, None
        if ctx.between:
            return "act_grad", base + name, name, None
        if name in _NORM_BWD:
            suffix, kind = _NORM_BWD[name][i]
            return ("weight_grad" if i in (1, 2) else "act_grad"), base + suffix, kind, None
        if name == "_softmax_backward_data":
            # att's gradient through the softmax: the softmax class (its
            # role is att's, as emu train's .dscores)
            return ("activation", base + "dscores" if ctx.path else name,
                    "attn_dscores", ("softmax", "act_grad"))
        if leaf and not ctx.bound:
            return "act_grad", base + "dinput", _LAYER_BWD.get(name, name), None
        if not ctx.bound:
            return "act_grad", base + name, name, None
        if ctx.bound.get(0, ("",))[0] == ctx.path and name in ("add", "add_"):
            # AccumulateGrad adding a new gradient into an existing .grad
            return "weight_grad", base + "grad." + name, name, None
        if name in _WB_BWD:
            return ("weight_grad" if i in (1, 2) else "act_grad"), base + name, name, None
        ptrs = {p.data_ptr() for _, p in ctx.bound.values()}
        if any(a.data_ptr() in ptrs for a in tin):
            return "act_grad", base + name, name, None
        ts = tuple(s for s in t.shape if s != 1)
        for _, p in ctx.bound.values():
            ps = tuple(s for s in p.shape if s != 1)
            if ts == ps or (len(ps) == 2 and ts == ps[::-1]):
                if name == "sum" and len(ps) == 1:
                    # a linear layer's bias gradient: emu train's .dbias
                    return "weight_grad", base + "dbias", "sum", None
                if name == "embedding_dense_backward":
                    return "weight_grad", base + "dweight", "embedding_backward", None
                return "weight_grad", base + name, name, None
        return "act_grad", base + name, name, None

    def _opt_site(self, name, t, tin):
        """The optimizer's ops: an in-place update of a parameter is its
        `<param>.update` (master; kind sgd for SGD's add_), and a buffer
        that such an update reads (SGD's momentum) is the parameter's
        `<param>.update.v` (opt_state, kind sgd_momentum) from then on;
        other tensors are `optim.<op>`."""
        rec = self._params.get(t.data_ptr())
        if rec is not None and rec[1].shape == t.shape:
            g = rec[1].grad
            for a in tin:
                if (a is not t and a.shape == t.shape and _is_f32(a)
                        and a.data_ptr() not in self._params
                        and (g is None or a.data_ptr() != g.data_ptr())):
                    self._state[a.data_ptr()] = rec[0]
            return "master", rec[0] + ".update", "sgd" if name == "add_" else name
        p = self._state.get(t.data_ptr())
        if p is not None:
            return "opt_state", p + ".update.v", "sgd_momentum"
        return "opt_state", "optim." + name, name

    # ---- GEMMs ---------------------------------------------------------------------------

    def _gemm(self, name, func, args, kwargs, ctx):
        from . import _torch_gemm
        if name in ("bmm", "baddbmm"):
            y = _torch_layers.gemm(self, name, func, args, kwargs, ctx)
            if y is not None:
                return y
        return _torch_gemm.run(self, name, func, args, kwargs, ctx)


def _map_tensors(tree, fn):
    args, kwargs = tree
    def m(a):
        if isinstance(a, torch.Tensor):
            return fn(a)
        if isinstance(a, (list, tuple)):
            return type(a)(m(x) for x in a)
        return a
    return tuple(m(a) for a in args), {k: m(v) for k, v in kwargs.items()}


def _unflatten_like(out, res):
    if isinstance(out, torch.Tensor):
        return res[0]
    it = iter(res)

    def rebuild(o):
        if isinstance(o, (list, tuple)):
            return type(o)(rebuild(x) for x in o)
        return next(it)
    return rebuild(out)


def _atomic_csv(path, header, rows):
    tmp = path + ".tmp-%d" % os.getpid()
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    os.replace(tmp, path)
