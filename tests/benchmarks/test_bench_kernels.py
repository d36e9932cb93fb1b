"""benchmarks/bench_kernels.py runs every case on small rows, kiln's results agreeing with
NumPy's (the script checks that before it times anything)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_kernels  # noqa: E402


def test_every_case_runs_and_agrees_with_numpy(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    results = bench_kernels.run(rows=3, cols=19, repeat=1)
    assert [r["case"] for r in results] == [*bench_kernels.CASES, "sparse_xent"]
    assert all(r["kiln_us"] > 0 and r["numpy_us"] > 0 for r in results)
