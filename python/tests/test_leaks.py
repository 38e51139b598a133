"""No leak over 1,000 calls: Python-side allocations (tracemalloc) and
the process's resident memory (C-side handles, buffers, sessions) must
not grow with the number of calls.  A warm-up round first fills the
caches (formats, roundings, accumulators) and the allocator's pools."""

import gc
import os
import tracemalloc

import numpy as np

import emu


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def calls(x, a, b, q):
    y, c = emu.round(x, "e4m3", "sr", seed=1, counts=True)
    emu.round(x, "bfloat16", bits=True)
    emu.quantize(q, "mxfp8", counts=True, return_codes=True)
    emu.gemm(a, b, "sequential,acc=binary16", stats=True)
    with emu.Session(seed=2) as s:
        s.round("x", x, "binary16")
        s.matmul("m", a, b, "exact")
        s.counters()
    s2 = emu.Session()  # freed by garbage collection, not close()
    s2.round("y", x, "e5m2")
    del s2
    emu.policy("bf16-sr")
    emu.format("e3m4,bias=5")
    try:
        emu.format("e4m3,nosuchkey")
    except emu.EmuError:
        pass


def test_no_leak_over_1000_calls(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(256).astype(np.float32)
    a = rng.standard_normal((8, 64)).astype(np.float32)
    b = rng.standard_normal((64, 8)).astype(np.float32)
    q = rng.standard_normal((64, 64)).astype(np.float32)  # 16 kB per tensor
    for _ in range(100):
        calls(x, a, b, q)
    gc.collect()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    rss0 = rss_bytes()
    for _ in range(1000):
        calls(x, a, b, q)
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    rss1 = rss_bytes()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    assert grown < 256 * 1024, "Python allocations grew by %d bytes" % grown
    # A leaked session (emu_stats with its sites, ~30 kB) or one leaked
    # quantized tensor (16 kB of elements) per call would pass 8 MB over
    # 1,000 calls (checked by making the _free functions do nothing).
    assert rss1 - rss0 < 8 << 20, "RSS grew by %d bytes" % (rss1 - rss0)
