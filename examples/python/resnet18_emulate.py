"""torchvision's resnet18 (random initialisation, no download), one
forward and backward pass on a small batch under emu.torch.emulate, with
every ATen op through libemu; prints each module's underflow and overflow.

    EMU_LIBRARY=build/libemu/libemu.so PYTHONPATH=python \
        /usr/bin/python3 examples/python/resnet18_emulate.py [POLICY] [OUT]

POLICY defaults to fp8-e5m2, OUT to a temporary folder; the folder gets
ops.csv, hist.csv, ops.json (emu train's files and columns),
unhandled_ops.csv and emulate.json."""

import sys
import tempfile

import torch
import torchvision

import emu
import emu.torch as et


def main(policy="fp8-e5m2", out=None, batch=4, size=64, seed=0, quiet=False):
    out = out or tempfile.mkdtemp(prefix="emu-resnet18-")
    torch.manual_seed(seed)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    x = torch.randn(batch, 3, size, size)
    labels = torch.arange(batch) % 10
    with et.emulate(policy, out, seed=seed) as em:
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        loss.backward()
    ops = emu.read_results(out)["ops"]
    # per module: the longest module path that begins the site's name
    # (a parameter's cast, a GEMM's operand rounding and bias add, a
    # layer's own output `layer1.0.relu` and its gradients go with it)
    paths = {n for n, _ in model.named_modules() if n}

    def module_of(site):
        parts = site.split(".")
        for k in range(len(parts), 0, -1):
            if ".".join(parts[:k]) in paths:
                return ".".join(parts[:k])
        return "(top)"
    ops["module"] = ops["site"].map(module_of)
    per = ops.groupby(["module", "role"], sort=False)[
        ["results", "underflow", "to_zero", "overflow"]].sum()
    if not quiet:
        print("policy %s, loss %.4f, results in %s" % (policy, loss.item(), out))
        print(per.to_string())
        if em.unhandled:
            print("unhandled ops:", em.unhandled)
    return out, ops, em


if __name__ == "__main__":
    main(*sys.argv[1:3])
