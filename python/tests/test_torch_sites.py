"""emu.torch.emulate names its sites as `emu train` does: emu train's
LeNet CNN and MLP, written in PyTorch with emu train's layer names and
trained 3 SGD steps under emulate("fp16-mpt"), report statistics at the
same (site, role) pairs as `emu train --preset fp16-mpt` on the same
model, but for the sites stated here that have no counterpart."""

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


def _train_emulated(model, out, steps=3, batch=64, policy="fp16-mpt"):
    torch.manual_seed(0)
    x = torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
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
    return emu.read_results(out)["ops"]


def _train_cli(cli, arch, out, policy="fp16-mpt"):
    subprocess.run([cli, "train", "--preset", policy, "--model", arch,
                    "--steps", "3", "--batch", "64", "--train-examples", "640",
                    "--test-examples", "64", "--out", str(out), "--quiet"],
                   check=True)
    return emu.read_results(out)["ops"]


def _pairs(ops):
    return {(s, r) for s, r in zip(ops["site"], ops["role"])}


def _kind_differs(site):
    """Sites whose op is another op than emu train's: a convolution and its
    gradients run as GEMMs (kind matmul, emu train's conv2d,
    conv2d_bwd_weights, conv2d_bwd_data), PyTorch's loss is nll_loss on
    log_softmax (emu train's cross_entropy and cross_entropy_grad)."""
    return (site.startswith("conv") and site.endswith((".conv", ".dweight",
                                                       ".dinput"))
            or site in ("loss", "loss.dlogits"))


@pytest.mark.parametrize("arch,make", [("cnn", cnn), ("mlp", mlp)])
def test_emulate_sites_equal_emu_train(emu_cli, tmp_path, arch, make):
    tops = _train_cli(emu_cli, arch, tmp_path / "train")
    eops = _train_emulated(make(), tmp_path / "emulate")
    train, emulated = _pairs(tops), _pairs(eops)
    missing = {p for p in train if p[0].endswith(TRAIN_ONLY)}
    assert missing  # the exception is real: emu train has those sites
    assert EMULATE_ONLY <= emulated
    assert emulated - EMULATE_ONLY == train - missing, (
        sorted(emulated - EMULATE_ONLY - train), sorted(train - missing - emulated))
    # the op kinds too, where the ops are the same
    tk = dict(zip(zip(tops["site"], tops["role"]), tops["kind"]))
    ek = dict(zip(zip(eops["site"], eops["role"]), eops["kind"]))
    same = [p for p in emulated & train if not _kind_differs(p[0])]
    assert len(same) > 20
    assert {p: ek[p] for p in same} == {p: tk[p] for p in same}
    assert ek[("loss", "other")] == "nll_loss"
    if arch == "cnn":
        assert ek[("conv2.dinput", "act_grad")] == "matmul"


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
