"""Tests of compare_results.py: wall times, run_info.json and figures are
ignored; any other change, down to a CSV cell's last digit or a missing
file, is a difference."""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import compare_results as cr  # noqa: E402


def make(top):
    os.makedirs(os.path.join(top, "run-s1", "figures"), exist_ok=True)
    with open(os.path.join(top, "run-s1", "steps.csv"), "w") as f:
        f.write("step,loss,seconds\n1,0.5,0.01\n2,0.25,0.02\n")
    with open(os.path.join(top, "run-s1", "meta.json"), "w") as f:
        json.dump({"steps": 2, "seconds": 1.5, "test_accuracy": 0.875}, f)
    with open(os.path.join(top, "run_info.json"), "w") as f:
        json.dump({"seconds": 3, "commit": "abc"}, f)
    with open(os.path.join(top, "figures.png"), "wb") as f:
        f.write(b"png1")


def test_times_info_and_figures_ignored(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    make(a)
    make(b)
    with open(os.path.join(b, "run-s1", "steps.csv"), "w") as f:
        f.write("step,loss,seconds\n1,0.5,0.03\n2,0.25,0.07\n")
    with open(os.path.join(b, "run-s1", "meta.json"), "w") as f:
        json.dump({"steps": 2, "seconds": 9.0, "test_accuracy": 0.875}, f)
    with open(os.path.join(b, "run_info.json"), "w") as f:
        json.dump({"seconds": 5, "commit": "def"}, f)
    with open(os.path.join(b, "figures.png"), "wb") as f:
        f.write(b"png2")
    assert cr.compare(a, b) == []
    assert cr.main(["compare_results.py", a, b]) == 0


def test_any_other_change_differs(tmp_path):
    a = str(tmp_path / "a")
    make(a)
    b = str(tmp_path / "b")
    shutil.copytree(a, b)
    with open(os.path.join(b, "run-s1", "steps.csv"), "w") as f:
        f.write("step,loss,seconds\n1,0.5,0.01\n2,0.250001,0.02\n")
    d = cr.compare(a, b)
    assert len(d) == 1 and "steps.csv" in d[0] and "loss" in d[0]

    shutil.rmtree(b)
    shutil.copytree(a, b)
    with open(os.path.join(b, "run-s1", "meta.json"), "w") as f:
        json.dump({"steps": 2, "seconds": 1.5, "test_accuracy": 0.8751}, f)
    assert len(cr.compare(a, b)) == 1

    shutil.rmtree(b)
    shutil.copytree(a, b)
    os.remove(os.path.join(b, "run-s1", "meta.json"))
    with open(os.path.join(b, "extra.csv"), "w") as f:
        f.write("x\n1\n")
    d = cr.compare(a, b)
    assert any("only in the reference" in x for x in d)
    assert any("only in the new" in x for x in d)
    assert cr.main(["compare_results.py", a, b]) == 1
