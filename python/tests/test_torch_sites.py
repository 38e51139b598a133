"""emu.torch.emulate names its sites as `emu train` does: emu train's
LeNet CNN, MLP, resnet:1 and gpt:1-32-2-16, written in PyTorch with emu
train's layer names and trained 3 SGD steps under emulate("fp16-mpt"),
report statistics at the same (site, role) pairs as `emu train --preset
fp16-mpt` on the same model, but for the sites stated here that have no
counterpart, with emu train's op kinds (but where the op is another) and
formats.  The op classes (norm_stats, softmax, loss) put the same sites
in the same formats as emu train under fp16-mpt, bf16-sr and a policy
that changes all three, and the values are in those formats."""

import collections
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
import emu
import emu.torch as et

nn = torch.nn

# emu train's sites that a PyTorch training step has no op for: the
# weight gradient cast into the master format (`.grad` is a binary32
# tensor the optimizer reads as it is) and its division by the loss scale
# (emulate applies no loss scaling).
TRAIN_ONLY = (".gradm", ".unscale")
# emulate's sites that emu train has no counterpart for: PyTorch's
# cross entropy is log_softmax then nll_loss, two ops forward and two
# backward where emu train's is one op each way (at `loss` and
# `loss.dlogits`, which match).
EMULATE_ONLY = {("loss._log_softmax", "activation"),
                ("loss.nll_loss_backward", "act_grad")}
# gpt: PyTorch sums a tied weight's two gradients (the head's and the
# embedding's) in an add of its own, after the embedding's backward
# (autograd's sum of a tensor read twice, at emu train's grad_add name);
# emu train's embedding backward scatter-adds into the head's gradient,
# one op at wte.dweight, which matches.
EMULATE_ONLY_GPT = {("wte.grad_add", "weight_grad")}

# emu train's op kind -> emulate's where the op is another: convolutions
# and attention's products run as GEMMs, PyTorch's loss is nll_loss on
# log_softmax, a mean's backward is a division.
KIND = {"conv2d": "matmul", "conv2d_bwd_weights": "matmul",
        "conv2d_bwd_data": "matmul", "attention": "matmul",
        "attn_scores": "matmul", "attn_datt": "matmul", "attn_dv": "matmul",
        "attn_dq": "matmul", "attn_dk": "matmul", "cross_entropy": "nll_loss",
        "cross_entropy_grad": "_log_softmax_backward_d",
        "avgpool2d_bwd": "div"}


def cnn():
    """emu train's `cnn` (nn_model.c's parse_arch: conv5 6 channels with
    padding 2, relu, pool 2; conv5 16, relu, pool 2; 120, 84, 10)."""
    return nn.Sequential(collections.OrderedDict([
        ("conv1", nn.Conv2d(1, 6, 5, padding=2)), ("relu1", nn.ReLU()),
        ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(6, 16, 5)), ("relu2", nn.ReLU()),
        ("pool2", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(16 * 5 * 5, 120)), ("relu3", nn.ReLU()),
        ("fc2", nn.Linear(120, 84)), ("relu4", nn.ReLU()),
        ("fc3", nn.Linear(84, 10))]))


def mlp():
    """emu train's default `mlp` (784-256-128-10)."""
    return nn.Sequential(collections.OrderedDict([
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(784, 256)), ("relu1", nn.ReLU()),
        ("fc2", nn.Linear(256, 128)), ("relu2", nn.ReLU()),
        ("fc3", nn.Linear(128, 10))]))


class Add(nn.Module):
    """A residual addition as a module of its own, so that it counts at
    its name (emu train's `emb`, `h0.add1`)."""

    def forward(self, a, b):
        return a + b


class BasicBlock(nn.Module):
    """torchvision's BasicBlock with emu train's names (relu1, relu2, the
    shortcut computed after the main path, as emu train lists it)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu2 = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        s = x if self.downsample is None else self.downsample(x)
        return self.relu2(y + s)  # emu train's layerS.B.add


class ResNet(nn.Module):
    """emu train's resnet:N (nn_model.c's resnet_spec): conv1 3x3/16, bn1,
    relu; three stages of N blocks of 16, 32, 64 channels (stride 2 into
    stages 2 and 3); avgpool (global), fc."""

    def __init__(self, blocks=1, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        cin = 16
        for s in range(1, 4):
            ch = 16 << (s - 1)
            layers = []
            for b in range(blocks):
                layers.append(BasicBlock(cin, ch, 2 if s > 1 and b == 0 else 1))
                cin = ch
            setattr(self, "layer%d" % s, nn.Sequential(*layers))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class Attention(nn.Module):
    """Causal self-attention on (B*T, D) rows: qkv, the scores q k^T /
    sqrt(hs) as one product (baddbmm's alpha: emu train scales the dot
    product before its one rounding), softmax, att v, proj.  Keeps its
    last att for the tests."""

    def __init__(self, D, H, T):
        super().__init__()
        self.H = H
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.register_buffer("causal", torch.ones(T, T, dtype=torch.bool).tril(),
                             persistent=False)

    def forward(self, x, B, T):
        D = x.shape[1]
        H, hs = self.H, D // self.H
        q, k, v = (self.qkv(x).view(B, T, 3, H, hs).permute(2, 0, 3, 1, 4)
                   .reshape(3, B * H, T, hs))
        s = torch.baddbmm(q.new_empty(B * H, T, T), q, k.transpose(1, 2),
                          beta=0, alpha=hs ** -0.5)
        att = s.masked_fill(~self.causal[:T, :T], float("-inf")).softmax(-1)
        self.att = att.detach()
        y = torch.bmm(att, v).view(B, H, T, hs).permute(0, 2, 1, 3).reshape(B * T, D)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, D):
        super().__init__()
        self.fc, self.gelu, self.proj = nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D)

    def forward(self, x):
        return self.proj(self.gelu(self.fc(x)))


class GPTBlock(nn.Module):
    def __init__(self, D, H, T):
        super().__init__()
        self.ln1, self.attn, self.add1 = nn.LayerNorm(D), Attention(D, H, T), Add()
        self.ln2, self.mlp, self.add2 = nn.LayerNorm(D), MLP(D), Add()

    def forward(self, x, B, T):
        x = self.add1(self.attn(self.ln1(x), B, T), x)
        return self.add2(self.mlp(self.ln2(x)), x)


class GPT(nn.Module):
    """emu train's gpt:L-D-H-T (nn_model.c's gpt_spec): wte, wpe, emb;
    blocks h0.. (ln1, attn.qkv, attn, attn.proj, add1, ln2, mlp.fc,
    mlp.gelu, mlp.proj, add2); ln_f; lm_head tied to wte."""

    def __init__(self, L=1, D=32, H=2, T=16, V=97):
        super().__init__()
        self.wte, self.wpe, self.emb = nn.Embedding(V, D), nn.Embedding(T, D), Add()
        self.blocks = [GPTBlock(D, H, T) for _ in range(L)]
        for i, b in enumerate(self.blocks):
            setattr(self, "h%d" % i, b)
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        B, T = idx.shape
        # a position per row (emu train's wpe), not a broadcast
        x = self.emb(self.wte(idx.reshape(-1)), self.wpe(torch.arange(T).repeat(B)))
        for b in self.blocks:
            x = b(x, B, T)
        return self.lm_head(self.ln_f(x))


def gpt():
    return GPT(L=1, D=32, H=2, T=16, V=97)


def resnet():
    return ResNet(blocks=1)


# arch -> (model, batch, data): emu train's options and a batch like its
IMAGES = ["--train-examples", "640", "--test-examples", "64"]
MODELS = {"cnn": (cnn, 64, IMAGES), "mlp": (mlp, 64, IMAGES),
          "resnet:1": (resnet, 16, IMAGES),
          "gpt:1-32-2-16": (gpt, 4, ["--data", "text", "--train-examples",
                                     "4000", "--test-examples", "1000"])}


def _batch(arch, batch):
    torch.manual_seed(0)
    if arch.startswith("gpt"):
        return (torch.randint(0, 97, (batch, 16)),
                torch.randint(0, 97, (batch * 16,)))
    return torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))


def _train_emulated(model, out, steps=3, batch=64, policy="fp16-mpt",
                    arch="cnn", keep=False):
    x, y = _batch(arch, batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    with et.emulate(policy, out) as em:
        for _ in range(steps):
            # emu train writes each step's gradients afresh: no
            # accumulation into .grad
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    assert em.unhandled == {}
    ops = emu.read_results(out)["ops"]
    return (ops, loss.detach()) if keep else ops


def _train_cli(cli, arch, out, policy="fp16-mpt", sets=()):
    make, batch, data = MODELS.get(arch, (None, 64, IMAGES))
    subprocess.run([cli, "train", "--preset", policy, "--model", arch,
                    "--steps", "3", "--batch", str(batch)] + list(data)
                   + [a for kv in sets for a in ("--set", kv)]
                   + ["--out", str(out), "--quiet"], check=True)
    return emu.read_results(out)["ops"]


def _pairs(ops):
    return {(s, r) for s, r in zip(ops["site"], ops["role"])}


def _column(ops, col):
    return dict(zip(zip(ops["site"], ops["role"]), ops[col]))


def _compare(tops, eops, arch):
    """emulate's (site, role) pairs are emu train's but for the stated
    exceptions; at the common pairs, the kinds (KIND's where the op is
    another) and the formats are emu train's."""
    train, emulated = _pairs(tops), _pairs(eops)
    missing = {p for p in train if p[0].endswith(TRAIN_ONLY)}
    only = EMULATE_ONLY | (EMULATE_ONLY_GPT if arch.startswith("gpt") else set())
    assert only <= emulated
    assert emulated - only == train - missing, (
        sorted(emulated - only - train), sorted(train - missing - emulated))
    tk, ek = _column(tops, "kind"), _column(eops, "kind")
    common = emulated & train
    assert {p: ek[p] for p in common} == {p: KIND.get(tk[p], tk[p]) for p in common}
    tf, ef = _column(tops, "format"), _column(eops, "format")
    assert {p: ef[p] for p in common} == {p: tf[p] for p in common}
    return common


@pytest.mark.parametrize("arch", list(MODELS))
def test_emulate_sites_equal_emu_train(emu_cli, tmp_path, arch):
    make, batch, _ = MODELS[arch]
    tops = _train_cli(emu_cli, arch, tmp_path / "train")
    eops = _train_emulated(make(), tmp_path / "emulate", batch=batch, arch=arch)
    common = _compare(tops, eops, arch)
    assert len(common) > 20
    # the exception is real: emu train has those sites
    assert any(p[0].endswith(TRAIN_ONLY) for p in _pairs(tops))
    ek = _column(eops, "kind")
    assert ek[("loss", "other")] == "nll_loss"
    if arch == "cnn":
        assert ek[("conv2.dinput", "act_grad")] == "matmul"
    if arch.startswith("resnet"):
        for p in [("layer2.0.downsample.1.var", "other"),
                  ("layer2.0.bn1.xc", "activation"), ("layer2.0.add", "activation"),
                  ("layer2.0.grad_add", "act_grad"), ("avgpool", "activation"),
                  ("layer1.0.bn1.dweight", "weight_grad"),
                  ("bn1.running_var.init", "other")]:
            assert p in common, p
    if arch.startswith("gpt"):
        for p in [("h0.ln1.rstd", "other"), ("h0.attn.scores", "activation"),
                  ("h0.attn.softmax", "activation"), ("h0.attn", "activation"),
                  ("h0.attn.datt", "activation"), ("h0.attn.dscores", "activation"),
                  ("h0.attn.dq", "act_grad"), ("h0.attn.dk", "act_grad"),
                  ("h0.attn.dv", "act_grad"), ("h0.add1", "activation"),
                  ("h0.grad_add", "act_grad"), ("emb", "activation"),
                  ("wte", "activation"), ("wte.dweight", "weight_grad"),
                  ("lm_head.dweight", "weight_grad")]:
            assert p in common, p


@pytest.mark.parametrize("policy", ["mxfp8", "nvfp4"])
def test_scaled_operands_counted_at_emu_train_sites(emu_cli, tmp_path, policy):
    # the block-scaled GEMM operands: q.x, q.w forward, q.dy.dw, q.x.dw
    # for the weight gradient, q.dy, q.w.dx for the input gradient (none
    # for conv1, whose input needs no gradient), kind quantize, the
    # scaled format's name in the format column, as emu train writes them
    tops = _train_cli(emu_cli, "cnn", tmp_path / "train", policy)
    eops = _train_emulated(cnn(), tmp_path / "emulate", policy=policy)
    def q(ops):
        m = ops["site"].str.contains(r"\.q\.")
        return {(s, r, k, f) for s, r, k, f in
                zip(ops["site"][m], ops["role"][m], ops["kind"][m], ops["format"][m])}
    want = q(tops)
    assert len(want) == 4 + 4 * 6  # conv1: no input gradient
    assert q(eops) == want
    # and every other site as with fp16-mpt (nvfp4: a convolution's bias
    # apart at <layer>.bias, as emu train adds it under a tensor scale,
    # its gradient at dweight.dbias where emu train splits it in two)
    train, emulated = _pairs(tops), _pairs(eops)
    missing = {p for p in train if p[0].endswith(TRAIN_ONLY)}
    if policy == "nvfp4":
        missing |= {p for p in train if p[0].endswith((".dbias.space",))}
        missing |= {p for p in train if p[0].startswith("conv")
                    and p[0].endswith(".dbias")}
        emulated = {p for p in emulated if not (p[0].startswith("conv")
                    and p[0].endswith(".dweight.dbias"))}
    assert emulated - EMULATE_ONLY == train - missing, (
        sorted(emulated - EMULATE_ONLY - train), sorted(train - missing - emulated))


# fp16-mpt with every op class changed: statistics in bfloat16 (emulate
# then evaluates the normalisations itself), the softmax back in the
# activation format, the loss in binary16; emu train's --set of the same
CLASSES = dict(emu.policy("fp16-mpt"), name="fp16-mpt+classes",
               norm_stats={"format": "bfloat16", "mode": "rne"},
               softmax={"format": "activation"},
               loss={"format": "binary16", "mode": "rne"})
CLASSES_SET = ("norm_stats=bfloat16", "softmax=activation", "loss=binary16")
NORM_SITES = (".mean", ".var", ".xc", ".rstd")
SOFTMAX_SITES = (".scores", ".softmax", ".datt", ".dscores")


def _saved_stats(model, arch):
    """A hook keeping the statistics the first norm saved for its backward
    pass (batch norm's mean, layer norm's mean and 1/std)."""
    mod = model.bn1 if arch.startswith("resnet") else model.h0.ln1
    kept = {}

    def hook(m, inp, out):
        n = out.grad_fn
        kept["mean"] = n._saved_result1.clone()
        if arch.startswith("gpt"):
            kept["rstd"] = n._saved_result2.clone()
    mod.register_forward_hook(hook)
    return kept


@pytest.mark.parametrize("arch", ["resnet:1", "gpt:1-32-2-16"])
@pytest.mark.parametrize("policy", ["fp16-mpt", "bf16-sr", "classes"])
def test_op_classes_in_their_formats(emu_cli, tmp_path, arch, policy):
    pol = CLASSES if policy == "classes" else emu.policy(policy)
    tops = _train_cli(emu_cli, arch, tmp_path / "train",
                      "fp16-mpt" if policy == "classes" else policy,
                      CLASSES_SET if policy == "classes" else ())
    make, batch, _ = MODELS[arch]
    model = make()
    kept = _saved_stats(model, arch)
    eops, loss = _train_emulated(model, tmp_path / "emulate", batch=batch,
                                 arch=arch, policy=pol, keep=True)
    _compare(tops, eops, arch)  # the formats of every common site too
    act = pol["activation"]["format"]
    want = {c: pol[c]["format"] for c in ("norm_stats", "softmax", "loss")}
    if want["softmax"] == "activation":
        want["softmax"] = act
    got = {c: set() for c in want}
    for site, f in zip(eops["site"], eops["format"]):
        if site.endswith(NORM_SITES) and not site.endswith(".w.update.v"):
            got["norm_stats"].add(f)
        elif site.endswith(SOFTMAX_SITES):
            got["softmax"].add(f)
        elif site in ("loss", "loss._log_softmax"):
            got["loss"].add(f)
    assert got["norm_stats"] == {want["norm_stats"]}
    assert got["loss"] == {want["loss"]}
    assert got["softmax"] == ({want["softmax"]} if arch.startswith("gpt") else set())
    # the values: the loss, the statistics the backward pass reads, att
    def inside(t, f):
        return torch.equal(emu.round(t.reshape(-1).double(), f).float(),
                           t.reshape(-1).float())
    assert inside(loss.reshape(1), want["loss"])
    for t in kept.values():
        assert inside(t, want["norm_stats"])
        if want["norm_stats"] == "binary32":  # not rounded into the activation's
            assert not inside(t, act)
    if arch.startswith("gpt"):
        att = model.h0.attn.att
        assert inside(att, want["softmax"])
        if want["softmax"] == "binary32":
            assert not inside(att, act)


@pytest.mark.parametrize("arch", ["resnet:1", "gpt:1-32-2-16"])
def test_fp32_with_torch_kernels_is_plain_pytorch(arch):
    # the norms' kernels, attention's products (baddbmm's alpha folded
    # back as PyTorch applies it), the tied head: bit for bit PyTorch
    make, batch, _ = MODELS[arch]
    x, y = _batch(arch, batch)
    runs = []
    torch.set_num_threads(1)
    for emulated in (False, True):
        torch.manual_seed(1)
        model = make()
        opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
        em = et.emulate("fp32", accum="torch") if emulated else None
        if em:
            em.__enter__()
        try:
            for _ in range(2):
                opt.zero_grad(set_to_none=True)
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
        finally:
            if em:
                em.__exit__(None, None, None)
        runs.append([loss.detach()] + [p.detach().clone() for p in model.parameters()]
                    + [b.clone() for b in model.buffers()])
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    assert em.unhandled == {}
