"""Data-parallel training over MPI (kiln.distribution), run under ``mpiexec -n 2``.

The oracle is the same script run as ONE process with the same global batch, seed and data:
two ranks must end with the same weights (rtol 1e-4), loss history and predictions, and the
two ranks' weights must be bit-identical.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")
MPIEXEC = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
if not os.path.exists(MPIEXEC):
    pytest.skip("mpiexec not found", allow_module_level=True)

pytestmark = pytest.mark.mpi
SCRIPT = Path(__file__).with_name("_train_script.py")


def _env() -> dict:
    env = dict(os.environ)
    # one thread per rank: two ranks on two cores
    env.update(NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return env


def run(tmp_path: Path, name: str, *args: str, ranks: int = 1, timeout: float = 240
        ) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), str(tmp_path / name), *args]
    if ranks > 1:
        cmd = [MPIEXEC, "-n", str(ranks)] + cmd + ["--distributed"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())


def load(tmp_path: Path, name: str, rank: int = 0) -> dict:
    with np.load(tmp_path / f"{name}.rank{rank}.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize("model", ["mlp", "conv", "syncbn"])
def test_two_ranks_match_one_process(tmp_path, model):
    """syncbn: BatchNormalization(synchronized=True) normalizes over the global batch, so it
    matches one process too (forward and backward). Its statistics are summed in another
    order than in one process, and Adam turns float32 round-off in near-zero gradients into
    visible steps, so it is checked in float64, to 1e-9."""
    extra = ("--float64",) if model == "syncbn" else ()
    rtol, atol = (1e-9, 1e-12) if extra else (1e-4, 1e-6)
    single = run(tmp_path, "single", "--model", model, *extra)
    assert single.returncode == 0, single.stderr
    two = run(tmp_path, "two", "--model", model, *extra, ranks=2)
    assert two.returncode == 0, two.stderr
    s, r0, r1 = load(tmp_path, "single"), load(tmp_path, "two", 0), load(tmp_path, "two", 1)
    assert sorted(s) == sorted(r0) == sorted(r1)
    for k in s:
        # the ranks agree bit for bit: weights, logs, evaluate, gathered predictions
        np.testing.assert_array_equal(r0[k], r1[k], err_msg=k)
        np.testing.assert_allclose(r0[k], s[k], rtol=rtol, atol=atol, err_msg=k)
    assert s["pred"].shape == (250, 3 if model == "mlp" else 2)
    assert len(s["h_loss"]) == 3 and s["h_loss"][-1] < s["h_loss"][0]  # it trained


@pytest.mark.parametrize("model", ["mlp", "bn"])
def test_bucketed_overlapped_sums_equal_one_allreduce(tmp_path, model):
    """DataParallel(bucket_bytes=64): the gradients (and losses, metric statistics, the
    BatchNormalization moving statistics) summed in many buckets, each started during the
    backward pass and waited for before the update, give the same bits on both ranks as one
    allreduce per step (each element is the same sum of the same two values); the MLP also
    matches one process on the global batch."""
    one = run(tmp_path, "one", "--model", model, ranks=2)
    bkt = run(tmp_path, "bkt", "--model", model, "--bucket-bytes", "64", ranks=2)
    assert one.returncode == 0 and bkt.returncode == 0, one.stderr + bkt.stderr
    for rank in (0, 1):
        a, b = load(tmp_path, "one", rank), load(tmp_path, "bkt", rank)
        assert sorted(a) == sorted(b)
        for k in a:
            np.testing.assert_array_equal(b[k], a[k], err_msg=f"rank {rank} {k}")
    if model == "mlp":
        single = run(tmp_path, "single", "--model", model)
        assert single.returncode == 0, single.stderr
        s, b = load(tmp_path, "single"), load(tmp_path, "bkt", 0)
        for k in s:
            np.testing.assert_allclose(b[k], s[k], rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.slow  # CI time: the core 2-rank checks above run in CI
def test_generator_batches_are_split_like_arrays(tmp_path):
    """Batches from a generator (the same on every rank) are sliced like array batches: the
    result equals one process fed the same generator."""
    single = run(tmp_path, "single", "--generator")
    two = run(tmp_path, "two", "--generator", ranks=2)
    assert single.returncode == 0 and two.returncode == 0, single.stderr + two.stderr
    s, r0, r1 = load(tmp_path, "single"), load(tmp_path, "two", 0), load(tmp_path, "two", 1)
    for k in s:
        np.testing.assert_array_equal(r0[k], r1[k], err_msg=k)
        np.testing.assert_allclose(r0[k], s[k], rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.slow  # CI time: the core 2-rank checks above run in CI
def test_per_replica_batch_norm_keeps_the_ranks_identical(tmp_path):
    """The Keras default: each rank normalizes its own slice (so it differs from one process),
    but the moving statistics are averaged: every weight stays identical across the ranks."""
    two = run(tmp_path, "two", "--model", "bn", ranks=2)
    assert two.returncode == 0, two.stderr
    r0, r1 = load(tmp_path, "two", 0), load(tmp_path, "two", 1)
    for k in r0:
        np.testing.assert_array_equal(r0[k], r1[k], err_msg=k)
    single = run(tmp_path, "single", "--model", "bn")
    assert single.returncode == 0, single.stderr
    s = load(tmp_path, "single")
    assert not np.allclose(s["w0"], r0["w0"], rtol=1e-4, atol=1e-6)  # per-replica statistics


@pytest.mark.parametrize("model", ["mlp", "syncbn"])
def test_uneven_and_tiny_batches(tmp_path, model):
    """A global batch of 3 over 2 ranks (2 + 1 rows) and a last batch of 1 row (one rank
    gets nothing: its sums, and its rows in synchronized statistics, are masked)."""
    args = ("--batch", "3", "--n", "13", "--epochs", "2", "--model", model, "--float64")
    single = run(tmp_path, "single", *args)
    two = run(tmp_path, "two", *args, ranks=2)
    assert single.returncode == 0 and two.returncode == 0, single.stderr + two.stderr
    s, r0, r1 = load(tmp_path, "single"), load(tmp_path, "two", 0), load(tmp_path, "two", 1)
    for k in s:
        np.testing.assert_array_equal(r0[k], r1[k], err_msg=k)
        np.testing.assert_allclose(r0[k], s[k], rtol=1e-9, atol=1e-12, err_msg=k)


def test_backup_and_restore_after_both_ranks_are_killed(tmp_path):
    """Kill both ranks mid-epoch (step 13 of 24; the last backup was at step 12), restart
    with mpiexec: the same final weights as an uninterrupted 2-rank run."""
    whole = run(tmp_path, "whole", ranks=2)
    assert whole.returncode == 0, whole.stderr
    backup = str(tmp_path / "backup")
    killed = run(tmp_path, "resumed", "--backup", backup, "--kill-at-step", "13", ranks=2)
    assert killed.returncode != 0
    assert not (tmp_path / "resumed.rank0.npz").exists()
    assert (tmp_path / "backup").is_dir()
    resumed = run(tmp_path, "resumed", "--backup", backup, ranks=2)
    assert resumed.returncode == 0, resumed.stderr
    w, r0, r1 = load(tmp_path, "whole"), load(tmp_path, "resumed", 0), load(tmp_path, "resumed", 1)
    for k in w:
        if k.startswith("w"):
            np.testing.assert_array_equal(r0[k], w[k], err_msg=k)
            np.testing.assert_array_equal(r1[k], w[k], err_msg=k)
    np.testing.assert_array_equal(r0["pred"], w["pred"])


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_failing_rank_stops_the_job(tmp_path, how):
    t0 = time.monotonic()
    res = run(tmp_path, "fail", "--fail-rank", "1", "--fail-how", how, ranks=2, timeout=120)
    elapsed = time.monotonic() - t0
    assert res.returncode != 0
    assert elapsed < 60, f"the job took {elapsed:.0f} s to stop"
    if how == "raise":
        assert "rank failed on purpose" in res.stderr
        assert "rank 1 failed; aborting all ranks" in res.stderr
    assert not (tmp_path / "fail.rank0.npz").exists()


def test_mismatched_models_are_named(tmp_path):
    res = run(tmp_path, "mismatch", "--mismatch", ranks=2, timeout=120)
    assert res.returncode != 0
    assert "DistributionError" in res.stderr
    assert "ranks [1] disagree with rank 0" in res.stderr
    assert "variables[0] ['dense/kernel', [12, 17], 'float32'] != ['dense/kernel', [12, 16]" \
        in res.stderr
