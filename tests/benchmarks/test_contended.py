"""benchmarks/contended.py (``bench_suite.py --contended``): the work of copies running at once,
counted over the window they all run in. Oracles: hand-computed windows and rates."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
try:
    import contended
finally:
    sys.path.pop(0)


def test_an_epoch_cut_by_the_window_counts_in_proportion():
    spans = [[0.0, 1.0], [1.0, 2.0], [2.0, 4.0]]
    assert contended.work_in(spans, 100, 0.0, 4.0) == 300
    assert contended.work_in(spans, 100, 0.5, 1.5) == 100  # half of each of the first two
    assert contended.work_in(spans, 100, 3.0, 9.0) == 50   # half of the last
    assert contended.work_in(spans, 100, 5.0, 6.0) == 0


def test_total_rate_over_the_window_all_copies_run_in():
    runs = [{"spans": [[0.0, 2.0]], "samples": 100},   # 50 samples/s
            {"spans": [[1.0, 2.0], [2.0, 3.0]], "samples": 30}]  # 30 samples/s
    rate, window = contended.total_rate(runs)
    assert window == 1.0  # from the last start (1.0) to the first end (2.0)
    assert rate == pytest.approx(80.0)


def test_the_ratio_splits_into_work_per_cpu_second_and_cpus_used():
    """One copy alone: 300 samples in 1 s on 1.5 CPU-s (spinning included); four together:
    300 samples each over 2 s on 1 CPU-s each (4 CPU-s in 2 s: 2 CPUs). Per CPU-s 300 / 200
    = 1.5x, CPUs 2 / 1.5; their product is the rate's ratio, 600 / 300."""
    alone = {"spans": [[0.0, 0.5], [0.5, 1.0]], "samples": 150, "cpu": 1.5}
    together = [{"spans": [[0.0, 1.0], [1.0, 2.0]], "samples": 150, "cpu": 1.0}] * 4
    per_cpu, cpus = contended.split(alone, together)
    assert per_cpu == pytest.approx(1.5) and cpus == pytest.approx(4 / 3)
    rate, _ = contended.total_rate(together)
    assert per_cpu * cpus == pytest.approx(rate / 300)


def test_copies_that_never_overlap_are_an_error():
    runs = [{"spans": [[0.0, 1.0]], "samples": 10}, {"spans": [[2.0, 3.0]], "samples": 10}]
    with pytest.raises(ValueError, match="the copies did not run at the same time"):
        contended.total_rate(runs)


def test_a_baseline_worker_imports_kiln_from_the_baseline_tree(tmp_path, monkeypatch):
    """``kiln@base`` workers (harness.worker_env) import kiln from $KILN_BENCH_BASELINE: before
    KILN_BENCH_TREE, bench_cpu.py put this tree first on sys.path and they ran this tree."""
    import subprocess

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import harness
    finally:
        sys.path.pop(0)
    old = tmp_path / "old"
    (old / "kiln").mkdir(parents=True)
    (old / "kiln" / "__init__.py").write_text("WHERE = 'the baseline tree'\n")
    monkeypatch.setenv("KILN_BENCH_BASELINE", str(old))
    env = harness.worker_env("kiln@base")
    assert env is not None and env["KILN_BENCH_TREE"] == str(old)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import bench_cpu, kiln; "
            "print(kiln.WHERE)")
    out = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "benchmarks")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "the baseline tree", out.stderr[-1000:]
    assert harness.worker_env("kiln") is None
