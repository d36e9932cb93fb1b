"""The Keras 3 metrics and a Keras-style metric with variables under data parallelism
(``mpiexec -n 2``): their statistics are sums, so two ranks log what one process logs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")
MPIEXEC = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
if not os.path.exists(MPIEXEC):
    pytest.skip("mpiexec not found", allow_module_level=True)

pytestmark = pytest.mark.mpi
SCRIPT = Path(__file__).with_name("_dist_metrics_script.py")


def _run(tmp_path: Path, name: str, ranks: int) -> None:
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, str(SCRIPT), str(tmp_path / name)]
    if ranks > 1:
        cmd = [MPIEXEC, "-n", str(ranks)] + cmd + ["--distributed"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr


def _load(path: Path) -> dict:
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def test_two_ranks_log_what_one_process_logs(tmp_path):
    _run(tmp_path, "one", 1)
    _run(tmp_path, "two", 2)
    one = _load(tmp_path / "one.rank0.npz")
    r0, r1 = _load(tmp_path / "two.rank0.npz"), _load(tmp_path / "two.rank1.npz")
    assert sorted(one) == sorted(r0) and "wmae" in one and "f1_score" in one
    for key in one:
        np.testing.assert_array_equal(r0[key], r1[key], err_msg=key)
        np.testing.assert_allclose(r0[key], one[key], rtol=1e-10, err_msg=key)
