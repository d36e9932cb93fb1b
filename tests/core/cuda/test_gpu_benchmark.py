"""benchmarks/gpu.py runs end to end in its --sim --tiny mode (the CUDA simulator, tiny models)
and reports every case; the real numbers need a GPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba_cuda")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


@pytest.mark.slow  # ~30 s on 2 cores: CI time (the CUDA op and training tests stay in CI)
def test_gpu_benchmark_script_in_simulator_mode():
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"), "--sim", "--tiny",
           "--epochs", "1", "--strict", "--frameworks", "kiln"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = [json.loads(line[5:]) for line in proc.stdout.splitlines()
               if line.startswith("JSON ")]
    assert {(r["framework"], r["workload"]) for r in results} == {
        ("kiln", "mlp_train"), ("kiln", "convnet_train")}
    for r in results:
        assert "error" not in r, r
        assert r["samples_per_s"] > 0 and r["tiny"]
        assert r["first_loss"] == r["first_loss"] and r["last_loss"] == r["last_loss"]
        assert r["simulator"] and r["device"] == "CUDA simulator"
        assert "host_fallbacks" not in r, r
        assert r["kernels_per_step"] > 10
    assert "samples/s" in proc.stdout and "convnet_train" in proc.stdout


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize("workload", ["mlp_train", "convnet_train"])
def test_gpu_benchmark_torch_side_runs(workload):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import gpu
    finally:
        sys.path.pop(0)
    r = gpu.run_case("torch", workload, 1, True, "cpu")
    assert r["samples_per_s"] > 0 and r["device"] == "cpu" and "torch" in r
    gpu.print_table([r, dict(r, framework="kiln")])
