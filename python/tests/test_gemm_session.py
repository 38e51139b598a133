"""The GEMM and sessions through Python.

- gemm with the "exact" accumulator equals the exact dot product
  (Python's fractions) rounded once, to nearest-even, into the output
  format (rounded here by integer arithmetic, independently of libemu);
- the sequential binary16 accumulator equals the same loop written with
  emu.round_scalar (one rounding per addition);
- sessions count at their sites, split the sampled error, write the
  files emu train writes (same columns), and give the same results
  whatever the thread count;
- errors carry the library's code, where and key."""

import csv
import os
from fractions import Fraction

import numpy as np
import pytest

import emu


def round_fraction(q, p, emin, emax):
    """q rounded to nearest-even in a format of precision p, normal
    exponents emin..emax, subnormals, inf on overflow: exact integer
    arithmetic only."""
    if q == 0:
        return 0.0
    neg = q < 0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    quantum = max(e, emin) - (p - 1)
    scaled = q / Fraction(2) ** quantum
    m = scaled.numerator // scaled.denominator
    rest = scaled - m
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and m % 2):
        m += 1
    v = m * Fraction(2) ** quantum
    if v >= Fraction(2) ** (emax + 1):
        v = float("inf")
    v = float(v)
    return -v if neg else v


def rand_matrix(rng, shape, spread=20):
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape))
    return x.astype(np.float32)


@pytest.mark.parametrize("fmt_out", ["binary32", "binary16", "bfloat16"])
def test_exact_gemm_is_one_rounding(fmt_out):
    rng = np.random.default_rng(5)
    a = rand_matrix(rng, (5, 37))
    b = rand_matrix(rng, (37, 4))
    c = emu.gemm(a, b, "exact", fmt_out=fmt_out)
    f = emu.format(fmt_out)
    for i in range(5):
        for j in range(4):
            q = sum(Fraction(float(a[i, k])) * Fraction(float(b[k, j]))
                    for k in range(37))
            want = round_fraction(q, f.precision, f.emin, f.emax)
            assert c[i, j] == np.float32(want), (i, j, c[i, j], want)


@pytest.mark.parametrize("fmt_out", ["binary16", "bfloat16"])
def test_accumulate_starts_each_dot_product_at_out(fmt_out):
    # accumulate=True: out + A B, one rounding of the exact sum (exact
    # model), the initial values a term of it; alpha 4 divides them first
    rng = np.random.default_rng(6)
    a = rand_matrix(rng, (4, 21), 6)
    b = rand_matrix(rng, (21, 3), 6)
    c0 = rand_matrix(rng, (4, 3), 6)
    f = emu.format(fmt_out)
    for alpha in (1.0, 4.0):
        with emu.Session() as s:
            c = c0.copy()
            r = s.matmul("mm", a, b, "exact", fmt_out=fmt_out, out=c,
                         accumulate=True, alpha=alpha)
            assert r is c
        for i in range(4):
            for j in range(3):
                q = Fraction(float(c0[i, j])) + Fraction(alpha) * sum(
                    Fraction(float(a[i, k])) * Fraction(float(b[k, j]))
                    for k in range(21))
                want = round_fraction(q, f.precision, f.emin, f.emax)
                assert c[i, j] == np.float32(want), (alpha, i, j)
    with pytest.raises(ValueError, match="out="):
        emu.Session().matmul("mm", a, b, "exact", accumulate=True)


def test_sequential_binary16_accumulator():
    rng = np.random.default_rng(8)
    a = rand_matrix(rng, (3, 50), spread=4)
    b = rand_matrix(rng, (50, 2), spread=4)
    c, st = emu.gemm(a, b, "sequential,acc=binary16", stats=True)
    for i in range(3):
        for j in range(2):
            s = 0.0
            for k in range(50):
                t = float(a[i, k]) * float(b[k, j])  # exact in binary64
                s = emu.round_scalar(s + t, "binary16", lo=(s - (s + t)) + t
                                     if abs(s) >= abs(t) else (t - (s + t)) + s)[0]
            assert c[i, j] == np.float32(s)
    assert st["adds"] == 3 * 2 * 50 and st["results"] == 6


def test_gemm_torch_and_transposes():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    a = rand_matrix(rng, (7, 9), 3)
    b = rand_matrix(rng, (9, 6), 3)
    c = emu.gemm(a, b, "fast")
    assert np.allclose(c, a @ b, rtol=1e-5)
    ct = emu.gemm(torch.from_numpy(a.T.copy()), torch.from_numpy(b.T.copy()),
                  "exact", trans_a=True, trans_b=True)
    assert isinstance(ct, torch.Tensor)
    assert np.array_equal(ct.numpy(), emu.gemm(a, b, "exact"))


def test_error_split_with_ref_rate():
    rng = np.random.default_rng(3)
    a = rand_matrix(rng, (16, 64), 2)
    b = rand_matrix(rng, (64, 8), 2)
    c, st = emu.gemm(a, b, "sequential,acc=bfloat16", fmt_in="e4m3",
                     fmt_out="binary16", stats=True, ref_rate=1.0)
    assert st["ref_samples"] == 128 and st["dot_samples"] == 128
    assert st["quant_max"] > 0 and st["accum_max"] > 0 and st["round_max"] >= 0
    assert st["adds"] == 16 * 8 * 64


def test_session_sites_and_files(tmp_path):
    rng = np.random.default_rng(4)
    x = rand_matrix(rng, (8, 16), 30)
    w = rand_matrix(rng, (16, 4), 2)
    with emu.Session(seed=1, ref_rate=0.5) as s:
        s.begin_step(0)
        xr = s.round("in.cast", x, "e4m3", role="activation")
        assert np.array_equal(xr.view(np.uint32),
                              emu.round(x, "e4m3").view(np.uint32))
        y = s.matmul("fc.mm", xr, w, "sequential,acc=binary16",
                     fmt_out="binary16", role="activation")
        s.begin_step(1)
        s.round("w.cast", w, "bfloat16", "sr", role="weight")
        df = s.stats()
        s.write(tmp_path)
        step = s.stats("step")
    assert list(df["site"]) == ["in.cast", "fc.mm", "w.cast"]
    assert list(df["role"]) == ["activation", "activation", "weight"]
    assert df.loc[0, "results"] == x.size and df.loc[1, "adds"] == 8 * 4 * 16
    assert list(step["site"]) == ["in.cast", "fc.mm", "w.cast"]
    assert list(step["results"]) == [0, 0, w.size]
    c = emu.round(x, "e4m3", counts=True)[1]
    assert df.loc[0, "inexact"] == c.inexact and df.loc[0, "to_zero"] == c.to_zero
    files = sorted(os.listdir(tmp_path))
    assert files == ["hist.csv", "ops.csv", "ops.json", "ops_steps.csv"]
    r = emu.read_results(tmp_path)
    assert list(r["ops"].columns) == list(df.columns)
    assert (r["ops"]["results"] == df["results"]).all()
    assert list(r["ops_steps"]["step"]) == [0, 0, 1]
    assert set(r["hist"].columns) == {"site", "kind", "role", "format", "which",
                                      "bin", "log2_lower", "count"}
    assert y.shape == (8, 4)


@pytest.mark.parametrize("mode", ["rne", "sr"])
def test_session_round_in_place_kind_and_measure(mode):
    # in place (out is x): the values and every counter of rounding into a
    # new array (same seed, same op index); the kind is the caller's
    rng = np.random.default_rng(9)
    x = rand_matrix(rng, (64, 33), 30)
    with emu.Session(seed=4, ref_rate=1.0) as a, \
            emu.Session(seed=4, ref_rate=1.0) as b:
        want = a.round("r", x, "e4m3", mode, kind="relu")
        y = x.copy()
        assert b.round("r", y, "e4m3", mode, out=y, kind="relu") is y
        assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
        sa, sb = a.stats(), b.stats()
        assert sa.equals(sb)
        assert list(sb["kind"]) == ["relu"] and sb["ref_samples"][0] > 0
        # a view overlapping in part is read through a copy
        z = x.copy().ravel()
        b.round("p", z[1:], "e4m3", mode, out=z[:-1])
        assert b.stats()["kind"].tolist() == ["relu", "load"]
        with pytest.raises(emu.EmuError, match="23"):
            b.round("k", x, "e4m3", kind="x" * 24)
    # what is measured changes statistics, never values
    for kw, hist, counted in [(dict(hist=False), 0, True),
                              (dict(counts=False, hist=False, swamp=False),
                               0, False)]:
        with emu.Session(seed=4, **kw) as s:
            v = s.round("r", x, "e4m3", mode)
            assert np.array_equal(v.view(np.uint32), want.view(np.uint32))
            if counted:
                st = s.stats()
                assert st["results"][0] == x.size
                assert st["inexact"][0] == sa["inexact"][0]
                assert s.hist(0).sum() == hist
            else:
                assert len(s.stats()) == 0
    with emu.Session() as s:
        s.set_measure(hist=False)
        s.round("r", x, "binary16")
        s.set_measure(hist=True)
        s.round("r", x, "binary16")
        assert s.hist(0).sum() == x.size and s.stats()["results"][0] == 2 * x.size
        with pytest.raises(emu.EmuError):
            s.set_measure(ref_rate=2.0)


def test_session_columns_match_emu_train(emu_cli, tmp_path):
    """The same writers: ops.csv of a Session and of `emu train` have the
    same header; read_results reads both folders."""
    import subprocess
    run = tmp_path / "train"
    subprocess.run([emu_cli, "train", "--steps", "2", "--out", str(run),
                    "--quiet"], check=True, capture_output=True)
    ses = tmp_path / "ses"
    with emu.Session() as s:
        s.round("a", np.ones(4, np.float32), "binary16")
        s.write(ses)
    for name in ("ops.csv", "hist.csv"):
        with open(run / name) as f1, open(ses / name) as f2:
            assert next(csv.reader(f1)) == next(csv.reader(f2)), name
    r = emu.read_results(run)
    assert {"steps", "ops", "ops_steps", "hist", "meta"} <= set(r)
    assert isinstance(r["meta"], dict)


def test_threads_and_seeds_reproducible():
    rng = np.random.default_rng(6)
    a = rand_matrix(rng, (40, 70), 3)
    b = rand_matrix(rng, (70, 30), 3)
    outs = []
    for threads in (1, 2, 3):
        with emu.Session(seed=9, threads=threads) as s:
            outs.append(s.matmul("m", a, b, "sequential,acc=bfloat16,mode=sr",
                                 fmt_out="binary16", mode="sr"))
            outs.append(s.round("r", a, "e5m2", "sr"))
    for k in (2, 4):
        assert np.array_equal(outs[0], outs[k])
        assert np.array_equal(outs[1], outs[k + 1])
    with emu.Session(seed=10) as s:
        other = s.matmul("m", a, b, "sequential,acc=bfloat16,mode=sr",
                         fmt_out="binary16", mode="sr")
    assert not np.array_equal(other, outs[0])


def test_policy():
    assert {"fp32", "fp16-mpt", "bf16-sr", "fp8-e5m2", "mxfp8"} <= set(emu.policies())
    p = emu.policy("fp16-mpt")
    assert p["name"] == "fp16-mpt" and p["weight"]["format"] == "binary16"
    assert p["master"]["format"] == "binary32" and "accum" in p
    for name in emu.policies():
        q = emu.policy(name)
        assert q["name"] == name
        for role in ("weight", "activation", "act_grad", "weight_grad"):
            emu.format(q[role]["spec"])
        emu.accum_spec(q["accum"])
    assert emu.policy("fp16-mpt", "accum=exact")["accum"] == "exact"


def test_errors_carry_code_where_key():
    with pytest.raises(emu.EmuError) as e:
        emu.format("e4m3,bias=x")
    assert e.value.code == "EMU_ESPEC" and e.value.key == "bias"
    assert "e4m3,bias=x" in e.value.where
    with pytest.raises(emu.EmuError) as e:
        emu.format("e0m3")
    assert e.value.code == "EMU_ESPEC"
    with pytest.raises(emu.EmuError) as e:
        emu.gemm(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32),
                 "sequential,acc=nosuch")
    assert e.value.code == "EMU_ESPEC"
    with pytest.raises(emu.EmuError) as e:
        emu.policy("fp17")
    assert e.value.code == "EMU_ESPEC" and "fp16-mpt" in e.value.message
    with pytest.raises(emu.EmuError) as e:
        emu.round(np.ones(3, np.float32), "binary64")
    assert e.value.code == "EMU_EUNSUPPORTED"
    with pytest.raises(emu.EmuError) as e:
        emu.Session().round("s", np.ones(3, np.float32), "binary16",
                            role="gradient")
    assert e.value.key == "role"
    with pytest.raises(emu.EmuError) as e:
        emu.Session(ref_rate=2.0)
    assert e.value.key == "ref_rate"
    s = emu.Session()
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.round("s", np.ones(3, np.float32), "binary16")


def test_wrong_inputs_never_crash():
    with pytest.raises(TypeError):
        emu.round([1.0, 2.0], "binary16")
    with pytest.raises(TypeError):
        emu.round(np.ones(3, np.float16), "binary16")
    with pytest.raises(TypeError):
        emu.round(np.ones(3, np.int64), "binary16")
    with pytest.raises(TypeError):
        emu.round(np.ones(3, np.float32), 16)
    with pytest.raises(ValueError):
        emu.round(np.ones(3, np.float32), "binary16", out=np.ones(4, np.float32))
    with pytest.raises(TypeError):
        emu.round(np.ones(3, np.float32), "binary16", out=np.ones(3, np.float64))
    with pytest.raises(ValueError):
        emu.round(np.ones((3, 3), np.float32), "binary16",
                  out=np.ones((3, 3), np.float32).T)
    with pytest.raises(ValueError):
        emu.gemm(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), "exact")
    with pytest.raises(TypeError):
        emu.gemm(np.ones((2, 3)), np.ones((3, 2)), "exact")
    # non-contiguous input: a documented copy, same result as contiguous
    x = np.random.default_rng(0).standard_normal((9, 8)).astype(np.float32)
    assert np.array_equal(emu.round(x[:, ::2], "e4m3"),
                          emu.round(np.ascontiguousarray(x[:, ::2]), "e4m3"))
    assert emu.round(x[:, ::2], "e4m3").shape == (9, 4)
    # empty and 0-d arrays
    assert emu.round(np.zeros(0, np.float32), "e4m3").shape == (0,)
    assert emu.round(np.array(3.3, np.float32), "e4m3") == 3.25
    assert emu.round(np.float64(3.3), "e4m3").shape == ()
