"""emu.torch.emulate on torchvision's resnet18: one forward + backward pass
(batch 4x3x64x64, random initialisation) in plain PyTorch binary32 and
under emulate with a binary16 policy (fp16-mpt), with libemu's fastest
accumulator model ("fast": binary32 sgemm on the rounded operands) and
with accum="torch" (PyTorch's own kernels on the rounded operands), and
with the fast model without histograms (hist=False), in one run; then
where one emulated pass spends its time, with and without histograms;
then forward + backward passes in one context (no optimizer: the
parameters are rounded and cast once, in the warm-up pass), the issue's
measure; then a training loop's steady state: forward + backward + an SGD
update per step, all steps in one context, against the same plain steps.

    EMU_LIBRARY=build/libemu/libemu.so PYTHONPATH=python \
        /usr/bin/python3 bench/py_emulate.py [--repeat N] [--policy P] [--cpu] [--profile]

emulate runs PyTorch's own kernels on one thread (so that its results do
not depend on the thread count); the plain pass is timed on one thread
too (the fair ratio) and on torch's default thread count.  The plain and
emulated passes are timed in turn, `repeat` times, and the best of each
kept, so that a load that comes and goes weighs on both sides."""

import argparse
import cProfile
import io
import pstats
import time

import torch
import torchvision

import emu.torch as et


def step(model, x, labels):
    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), labels)
    loss.backward()
    return loss


CLOCK = time.perf_counter


def best(fn, repeat):
    ts = []
    for _ in range(repeat):
        t0 = CLOCK()
        fn()
        ts.append(CLOCK() - t0)
    return min(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--policy", default="fp16-mpt")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--cpu", action="store_true",
                    help="time by the process's CPU clock (a busy machine "
                    "disturbs it far less than the wall clock; every "
                    "emulated pass runs on one thread)")
    a = ap.parse_args()
    global CLOCK
    if a.cpu:
        CLOCK = time.process_time
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    x = torch.randn(a.batch, 3, a.size, a.size)
    labels = torch.arange(a.batch) % 10
    nthreads = torch.get_num_threads()
    step(model, x, labels)  # warm-up

    def emulated(accum, hist=True):
        def run():
            with et.emulate(a.policy, accum=accum, hist=hist):
                step(model, x, labels)
        return run

    def plain1():
        torch.set_num_threads(1)
        step(model, x, labels)
        torch.set_num_threads(nthreads)

    configs = (("fast", True), ("torch", True), ("fast", False))
    for accum, hist in configs:
        emulated(accum, hist)()  # warm-up
    # the plain and emulated passes in turn, each timed `repeat` times
    # and its best kept: a load that comes and goes on a shared machine
    # then weighs on both sides of the ratio alike
    runs = [plain1] + [emulated(ac, h) for ac, h in configs]
    ts = [[] for _ in runs]
    for _ in range(a.repeat):
        for i, fn in enumerate(runs):
            ts[i].append(best(fn, 1))
    t_plain1 = min(ts[0])
    t_plain = best(lambda: step(model, x, labels), a.repeat)
    rows = [("plain PyTorch fp32, 1 thread", t_plain1)]
    if nthreads != 1 and not a.cpu:  # CPU time would sum the threads
        rows.append(("plain PyTorch fp32, %d threads" % nthreads, t_plain))
    for (accum, hist), t in zip(configs, ts[1:]):
        rows.append(("emulate(%s, accum=%s%s)" % (a.policy, accum,
                                                  "" if hist else ", hist=False"),
                     min(t)))
    print("resnet18 forward+backward, batch %dx3x%dx%d, best of %d (%s)"
          % (a.batch, a.size, a.size, a.repeat,
             "CPU time" if a.cpu else "wall time"))
    for name, t in rows:
        print("  %-52s %8.1f ms   %5.2fx plain (1 thread)"
              % (name, 1e3 * t, t / t_plain1))
    # where the time goes: the session's counted roundings and GEMMs
    from emu import _core
    orig = {k: getattr(_core.Session, k) for k in ("round", "matmul")}
    for hist in (True, False):
        spent = {k: 0.0 for k in orig}
        elems = {k: 0 for k in orig}

        def timed(key):
            f = orig[key]

            def w(self, site, *args, **kw):
                t0 = CLOCK()
                r = f(self, site, *args, **kw)
                spent[key] += CLOCK() - t0
                elems[key] += r.numel()
                return r
            return w
        for k in orig:
            setattr(_core.Session, k, timed(k))
        t0 = CLOCK()
        emulated("fast", hist)()
        total = CLOCK() - t0
        for k, f in orig.items():
            setattr(_core.Session, k, f)
        print("one emulate(%s, accum=fast%s) pass: %.1f ms"
              % (a.policy, "" if hist else ", hist=False", 1e3 * total))
        for k in spent:
            print("  Session.%-8s %8.1f ms  %9d outputs (%.0f Melem/s)"
                  % (k, 1e3 * spent[k], elems[k],
                     elems[k] / max(spent[k], 1e-9) / 1e6))
        print("  %-16s %8.1f ms" % ("the rest", 1e3 * (total - sum(spent.values()))))
    def in_context(emulated_ctx, run, warmup):
        """Times run() a.repeat times after `warmup` untimed calls, all on
        one thread and, if emulated_ctx, inside one emulate context."""
        ts = []
        torch.set_num_threads(1)
        ctx = et.emulate(a.policy, accum="fast") if emulated_ctx else None
        if ctx is not None:
            ctx.__enter__()
        try:
            for i in range(a.repeat + warmup):
                t0 = CLOCK()
                run()
                if i >= warmup:
                    ts.append(CLOCK() - t0)
        finally:
            if ctx is not None:
                ctx.__exit__(None, None, None)
            torch.set_num_threads(nthreads)
        return ts

    def compare(title, make_run, warmup):
        """Plain and emulated runs in turn, twice each (as above), and the
        best of each with their ratio."""
        plain_t, emu_t = [], []
        for _ in range(2):
            plain_t += in_context(False, make_run(), warmup)
            emu_t += in_context(True, make_run(), warmup)
        print("%s, best of %d (%s)" % (title, len(plain_t),
                                       "CPU time" if a.cpu else "wall time"))
        print("  %-52s %8.1f ms   %5.2fx plain (1 thread)"
              % ("plain PyTorch fp32, 1 thread", 1e3 * min(plain_t), 1.0))
        print("  %-52s %8.1f ms   %5.2fx plain (1 thread)"
              % ("emulate(%s, accum=fast)" % a.policy, 1e3 * min(emu_t),
                 min(emu_t) / min(plain_t)))

    # The statement: forward+backward passes (no optimizer) in one
    # context, against the same plain passes.  The context's one-time work
    # (hooks, each parameter's .init and, the parameters not changing
    # without an optimizer, its .cast) falls in the warm-up pass; each
    # timed pass rounds every activation and gradient and runs every GEMM.
    compare("forward+backward passes in one context (no optimizer: the "
            "issue's measure)", lambda: lambda: step(model, x, labels), 1)

    # A training loop's steady state: one context for every step, each
    # step forward + backward + an SGD update with momentum (so every
    # parameter has a new version, and is cast again, at every step); the
    # context's one-time work (hooks, each parameter's .init) falls in the
    # warm-up steps.  Plain PyTorch runs the same steps, on its own model.
    def training_step():
        torch.manual_seed(1)
        m = torchvision.models.resnet18(weights=None, num_classes=10)
        opt = torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)

        def one():
            step(m, x, labels)
            opt.step()
        return one

    compare("training steps (forward+backward+SGD momentum) in one context, "
            "steady state", training_step, 2)
    nparam = sum(p.numel() for p in model.parameters())
    print("  (parameters: %d, rounded at .init, cast, and their gradients "
          "rounded, every pass)" % nparam)
    if a.profile:
        pr = cProfile.Profile()
        pr.enable()
        emulated("fast")()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15)
        print(s.getvalue())


if __name__ == "__main__":
    main()
