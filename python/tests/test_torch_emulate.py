"""emu.torch.emulate: the dispatch mode that sends a model's ATen ops
through libemu.  fp32 changes nothing where the ops are PyTorch's own; a
binary16 linear layer equals emu.gemm with the policy's accumulator bit
for bit, forward and backward; sites are named by module path with the
roles of emu train; unknown ops are listed; results depend on the seed
and not on the thread counts."""

import os
import runpy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import emu
import emu.torch as et

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "python",
                       "resnet18_emulate.py")


def _bits(t):
    return t.detach().contiguous().view(torch.int32).numpy()


class Net(torch.nn.Module):
    """Convolutions (strided, grouped, with and without bias), batch norm,
    a residual add, pooling, a linear layer: ResNet's ops in small."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False)
        self.pool = torch.nn.AvgPool2d(2)
        self.fc = torch.nn.Linear(8 * 2 * 2, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = y + self.conv2(y)
        return self.fc(self.pool(y).flatten(1))


def _step(m, x, lossmul=1.0):
    m.zero_grad(set_to_none=True)
    y = m(x)
    loss = torch.nn.functional.cross_entropy(y, torch.arange(x.shape[0]) % 10)
    (loss * lossmul).backward()
    return y.detach().clone(), {n: p.grad.clone() for n, p in m.named_parameters()}


def _same(a, b):
    ya, ga = a
    yb, gb = b
    return torch.equal(ya, yb) and all(
        np.array_equal(_bits(ga[k]), _bits(gb[k])) for k in ga)


@pytest.fixture
def net():
    torch.manual_seed(0)
    return Net(), torch.randn(4, 3, 8, 8)


def test_fp32_with_torch_kernels_changes_nothing(net, tmp_path):
    # accum="torch": the GEMM-like ops are PyTorch's own kernels, every
    # other op PyTorch's too, rounded into binary32 (no change): the
    # outputs and every gradient are bit-identical to plain PyTorch
    m, x = net
    torch.set_num_threads(1)  # emulate runs torch's kernels on one thread
    plain = _step(m, x)
    with et.emulate("fp32", tmp_path, accum="torch") as em:
        emulated = _step(m, x)
    assert _same(plain, emulated)
    ops = em.stats()
    assert (ops["inexact"] == 0).all() and ops["results"].sum() > 0


def test_fp32_elementwise_model_with_libemu_gemm_changes_nothing():
    # the policy's own accumulator ("fast", libemu's sgemm) sums in another
    # order than torch's sgemm, so GEMM outputs may differ in the last bit;
    # a model without GEMMs is bit-identical under it
    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.BatchNorm2d(3), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                            torch.nn.LogSoftmax(1))
    x = torch.randn(4, 3, 6, 6, requires_grad=True)
    w = torch.randn(4, 27)

    def step():
        x.grad = None
        m.zero_grad(set_to_none=True)
        y = m(x)
        (y * w).sum().backward()
        return y.detach().clone(), {"x": x.grad.clone(),
                                    **{n: p.grad.clone() for n, p in m.named_parameters()}}
    torch.set_num_threads(1)
    plain = step()
    with et.emulate("fp32"):
        emulated = step()
    assert _same(plain, emulated)


@pytest.mark.parametrize("accum", ["fast", "sequential,acc=binary16",
                                   "fused,k=16,w=25"])
def test_binary16_linear_equals_emu_gemm(accum):
    torch.manual_seed(2)
    lin = torch.nn.Linear(48, 24)
    x = torch.randn(6, 48, requires_grad=True)
    c = emu.round(torch.randn(6, 24), "binary16")
    with et.emulate("fp16-mpt", accum=accum) as em:
        y = lin(x)
        (y * c).sum().backward()
    x16 = emu.round(x.detach(), "binary16")
    w16 = emu.round(lin.weight.detach(), "binary16")
    b16 = emu.round(lin.bias.detach(), "binary16")
    mm = emu.gemm(x16, w16, accum, fmt_out="binary16", trans_b=True)
    ref = emu.round(mm + b16, "binary16")
    assert np.array_equal(_bits(y), _bits(ref))
    # backward: dy = c exactly (binary16 already)
    dx = emu.gemm(c, w16, accum, fmt_out="binary16")
    dw = emu.gemm(c, x16, accum, fmt_out="binary16", trans_a=True)
    assert np.array_equal(_bits(x.grad), _bits(dx))
    assert np.array_equal(_bits(lin.weight.grad), _bits(dw))
    ops = em.stats().set_index(["site", "role"])
    assert ops.loc[("matmul", "activation"), "kind"] == "matmul"
    assert ops.loc[("dweight", "weight_grad"), "results"] == 24 * 48
    assert ops.loc[("dinput", "act_grad"), "results"] == 6 * 48


def test_conv_bias_is_a_term_of_the_accumulation():
    # emu train's convolution (emu_t_conv2d): each output one dot product
    # whose first term is the bias, rounded once; here with the exact
    # accumulator, against the exact sum (math.fsum's double plus the
    # Fraction remainder) rounded by the scalar choke point
    import math
    from fractions import Fraction
    torch.manual_seed(5)
    conv = torch.nn.Conv2d(2, 3, 3, padding=1)
    with torch.no_grad():
        conv.bias.mul_(64)  # a bias that matters against the products
    x = torch.randn(1, 2, 4, 4)
    with et.emulate("fp16-mpt", accum="exact") as em:
        y = conv(x)
    x16 = emu.round(x, "binary16").double().numpy()
    w16 = emu.round(conv.weight.detach(), "binary16").double().numpy()
    b16 = emu.round(conv.bias.detach(), "binary16").double().numpy()
    xp = np.pad(x16, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for co in range(3):
        for i in range(4):
            for j in range(4):
                terms = [float(b16[co])] + list(
                    (w16[co] * xp[0, :, i:i + 3, j:j + 3]).ravel())
                hi = math.fsum(terms)
                lo = float(sum(map(Fraction, terms)) - Fraction(hi))
                want = emu.round_scalar(hi, "binary16", lo=lo)[0]
                assert float(y[0, co, i, j]) == want, (co, i, j)
    sites = set(em.stats()["site"])
    assert "conv" in sites and "bias" not in sites  # the root module: path ""


def test_sites_and_roles_by_module_path(net, tmp_path):
    m, x = net
    with et.emulate("fp16-mpt", tmp_path) as em:
        _step(m, x)
    res = emu.read_results(tmp_path)
    ops = res["ops"]
    roles = {(s, r) for s, r in zip(ops["site"], ops["role"])}
    for want in [("conv.w.cast", "weight"), ("conv.conv", "activation"),
                 ("bn", "activation"), ("bn.mean", "other"), ("bn.var", "other"),
                 ("bn.xc", "activation"), ("bn.running_mean", "other"),
                 ("bn.running_var", "other"), ("bn.running_var.init", "other"),
                 ("conv2.conv", "activation"),
                 ("fc.matmul", "activation"), ("fc.bias", "activation"),
                 ("fc.dweight", "weight_grad"), ("fc.dbias", "weight_grad"),
                 ("fc.dinput", "act_grad"), ("conv2.dweight", "weight_grad"),
                 ("conv2.dinput", "act_grad"), ("conv.dweight.dbias", "weight_grad"),
                 ("input", "activation"), ("loss", "other"),
                 ("loss.dlogits", "act_grad"),
                 ("bn.dweight", "weight_grad"), ("bn.dbias", "weight_grad"),
                 ("bn.dinput", "act_grad"), ("add", "activation"),
                 ("pool", "activation"), ("pool.dinput", "act_grad"),
                 ("relu", "activation")]:
        assert want in roles, want
    # views are not roundings
    assert not any(s.endswith((".view", ".t", ".detach", "._reshape_alias"))
                   for s in ops["site"])
    # emu train's columns, every site binary16 but the binary32 weight casts' sources
    for col in ["site", "kind", "role", "format", "results", "inexact", "underflow",
                "to_zero", "overflow", "adds", "absorbed", "underflow_rate"]:
        assert col in ops.columns
    # every site binary16 but the loss's two steps (the loss class,
    # binary32), batch norm's statistics (norm_stats, binary32) and
    # running statistics (role other), and the parameters' initial
    # rounding into the binary32 master
    fmt = dict(zip(ops["site"], ops["format"]))
    assert {s for s, f in fmt.items() if f != "binary16"} == {
        "loss", "loss._log_softmax", "bn.mean", "bn.xc", "bn.var",
        "bn.running_mean", "bn.running_var"} | {
        s for s in fmt if s.endswith(".init")}
    assert fmt["loss"] == "binary32" and fmt["conv.w.init"] == "binary32"
    assert "hist" in res and "unhandled_ops" in res and "emulate_json" in res
    assert len(res["unhandled_ops"]) == 0
    # gradients really are binary16 values
    for p in m.parameters():
        assert torch.equal(p.grad, emu.round(p.grad, "binary16"))


def test_unhandled_ops_are_listed_and_passed_through(tmp_path):
    x = torch.linspace(0.1, 1.0, 100)
    with et.emulate("fp16-mpt", tmp_path) as em:
        y = torch.cumsum(x, 0)
        z = torch.exp(x)
    assert em.unhandled["cumsum"][0] == 1
    assert torch.equal(y, torch.cumsum(x, 0))  # unrounded
    assert torch.equal(z, emu.round(torch.exp(x), "binary16"))
    rows = emu.read_results(tmp_path)["unhandled_ops"]
    assert list(rows["op"]) == ["cumsum"] and list(rows["count"]) == [1]


def _run(seed, torch_threads=1, threads=1, policy="fp8-e5m2", **kw):
    torch.manual_seed(0)
    m, x = Net(), torch.randn(4, 3, 8, 8)
    torch.set_num_threads(torch_threads)
    try:
        with et.emulate(policy, seed=seed, threads=threads, **kw) as em:
            out = _step(m, x, lossmul=1024.0)
    finally:
        torch.set_num_threads(1)
    return out, em.stats()


def test_reproducible_by_seed():
    a, sa = _run(5)
    b, sb = _run(5)
    c, _ = _run(6)
    assert _same(a, b) and sa.equals(sb)
    assert not _same(a, c)  # stochastic rounding of the gradients


def test_measurement_settings_change_no_value(tmp_path):
    acc = "sequential,acc=binary16"
    a, sa = _run(3, accum=acc)
    b, sb = _run(3, hist=False, swamp=False, out=tmp_path, accum=acc)
    assert _same(a, b)
    assert list(sa["site"]) == list(sb["site"])
    assert list(sa["kind"]) == list(sb["kind"])
    for c in ("results", "inexact", "underflow", "overflow"):
        assert list(sa[c]) == list(sb[c]), c
    assert sa["adds"].sum() > 0 and sb["adds"].sum() == 0
    assert len(emu.read_results(tmp_path)["hist"]) == 0


def test_thread_counts_do_not_change_results():
    a, sa = _run(3, torch_threads=1, threads=1)
    b, sb = _run(3, torch_threads=2, threads=2)
    assert _same(a, b) and sa.equals(sb)


def test_remembered_input_is_never_another_tensor():
    # A model input's rounded copy is remembered for the backward pass.
    # A new tensor at a freed input's address (here a NumPy buffer a data
    # loader refills: same address, shape and version 0) is rounded anew,
    # and so is a transposed view of a square input (same address, shape
    # and version): each product equals a fresh context's.
    torch.manual_seed(4)
    lin = torch.nn.Linear(16, 4, bias=False)
    with torch.no_grad():
        lin.weight.mul_(3.0)
    buf = np.empty((16, 16), dtype=np.float32)
    xs = [torch.randn(16, 16) for _ in range(2)]

    def batch(i):
        buf[...] = xs[i].numpy()
        return torch.from_numpy(buf)
    with et.emulate("fp16-mpt"):
        x = batch(0)
        lin(x).sum().backward()
        del x
        x = batch(1)
        y = lin(x)
        z = lin(x.t())
    with et.emulate("fp16-mpt"):
        y_ref = lin(batch(1))
    with et.emulate("fp16-mpt"):
        z_ref = lin(batch(1).t())
    assert np.array_equal(_bits(y), _bits(y_ref))
    assert np.array_equal(_bits(z), _bits(z_ref))


def test_optimizer_step_rounds_the_updated_weights():
    torch.manual_seed(3)
    m, x = Net(), torch.randn(4, 3, 8, 8)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    with et.emulate("bf16-sr") as em:
        for _ in range(2):
            _step(m, x)
            opt.step()
    for p in m.parameters():  # bf16-sr: the weights are bfloat16 values
        assert torch.equal(p.detach(), emu.round(p.detach(), "bfloat16"))
    ops = em.stats()
    # bf16-sr keeps no master weights: the update writes the weights
    # themselves (role weight, as in emu train), which are never cast
    upd = ops[ops["site"] == "fc.w.update"]
    assert not ops["site"].str.endswith(".cast").any()
    assert list(upd["role"]) == ["weight"] and int(upd["results"].iloc[0]) == 2 * 10 * 32
    # SGD's momentum buffer: the parameter's update.v (from the second
    # step, the first being a copy of the gradient)
    mom = ops[ops["site"] == "fc.w.update.v"]
    assert list(mom["role"]) == ["opt_state"]
    assert int(mom["results"].iloc[0]) == 2 * 10 * 32  # mul_ and add_, one step
    assert (ops[ops["site"].str.startswith("optim.")]["role"] == "opt_state").all()


def test_resnet18_example_names_sites_by_module_path(tmp_path):
    pytest.importorskip("torchvision")
    mod = runpy.run_path(EXAMPLE)
    out, ops, em = mod["main"]("fp8-e5m2", str(tmp_path), batch=2, size=32,
                               quiet=True)
    sites = set(ops["site"])
    for s in ["conv1.conv", "layer1.0.conv1.conv", "layer1.0.conv1.dweight",
              "layer4.1.bn2", "layer4.1.bn2.mean", "layer4.1.bn2.dweight",
              "layer2.0.downsample.0.conv", "layer2.0.downsample.1.var",
              "fc.matmul", "fc.bias", "fc.dweight", "maxpool", "maxpool.dinput",
              "layer1.0.relu", "layer1.0.relu.dinput", "avgpool",
              "avgpool.dinput", "layer1.0.add", "layer1.0.grad_add"]:
        assert s in sites, s
    assert em.unhandled == {}
    # fp8-e5m2 exempts the first and last layer: binary16 there, e5m2 inside
    fmt = dict(zip(ops["site"], ops["format"]))
    assert fmt["conv1.conv"] == "binary16" and fmt["fc.matmul"] == "binary16"
    assert fmt["layer1.0.conv1.conv"] == "e5m2"
    assert ops["underflow"].sum() > 0


@pytest.mark.parametrize("policy", ["mxfp8", "nvfp4"])
def test_scaled_policy_quantizes_gemm_operands(policy):
    # the operands are block-quantized along the reduction axis; NVFP4's
    # binary32 tensor scales go into the GEMM's alpha, exactly
    torch.manual_seed(4)
    lin = torch.nn.Linear(64, 16, bias=False)
    x = torch.randn(8, 64)
    q = emu.policy(policy)["gemm_operands"]
    with et.emulate(policy, accum="exact"):
        y = lin(x)

    def qv(t, spec):
        v, codes = emu.quantize(t.double(), spec, axis=1, return_codes=True)
        g = codes["tensor_scale"]
        return (v / g).float(), g
    xq, gx = qv(x, q["activation"]["format"])
    wq, gw = qv(lin.weight.detach(), q["weight"]["format"])
    ref = emu.gemm(xq, wq, "exact", trans_b=True, alpha=gx * gw)
    assert np.array_equal(_bits(y), _bits(ref))
    assert not torch.equal(y, lin(x))
