"""Faults of a 2-rank data-parallel job (kiln.distribution), run under ``mpiexec -n 2``:
ranks whose models or compile arguments differ are refused before the first step with the
difference named; a rank that raises, calls ``sys.exit`` or catches an error and goes on ends
the whole job non-zero within seconds (``os._exit(0)`` too, which skips every exit hook and
MPI_Finalize); layer random streams derive from rank 0's seed."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from test_data_parallel import MPIEXEC, _env, load, run

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("what,named", [
    ("activation", "model.layers[1].config.activation 'tanh' != 'relu'"),
    ("dropout", "model.layers[2].config.rate 0.3"),
    ("metric", "compile.metrics has 2 entries != 1"),
])
def test_ranks_whose_models_differ_are_refused_with_the_difference(tmp_path, what, named):
    res = run(tmp_path, "differ", "--differ", what, "--dropout", "0.2", ranks=2, timeout=120)
    assert res.returncode != 0
    assert "DistributionError" in res.stderr and "ranks [1] disagree with rank 0" in res.stderr
    assert named in res.stderr, res.stderr[-3000:]
    assert not (tmp_path / "differ.rank0.npz").exists()


@pytest.mark.parametrize("how,catch", [("exit", False), ("raise", True)])
def test_a_rank_that_exits_or_goes_on_after_an_error_stops_the_job_at_once(tmp_path, how,
                                                                          catch):
    """sys.exit(0) in a callback, or an error caught by the script which then calls
    evaluate: the other rank learns it at its next wait (no 60 s timeout) and every rank's
    later collective raises, so the job ends non-zero."""
    t0 = time.monotonic()
    res = run(tmp_path, "fail", "--fail-rank", "1", "--fail-how", how,
              *(["--catch"] if catch else []), ranks=2, timeout=120)
    elapsed = time.monotonic() - t0
    assert res.returncode != 0, res.stderr[-3000:]
    assert elapsed < 30, f"the job took {elapsed:.0f} s to stop"
    assert "rank 1 of 2" in res.stderr and "DistributionError" in res.stderr
    expected = "called sys.exit(0) in fit()" if how == "exit" else \
        "raised RuntimeError in fit(): rank failed on purpose"
    assert expected in res.stderr, res.stderr[-3000:]
    assert not (tmp_path / "fail.rank0.npz").exists()


def test_dropout_streams_come_from_rank_0_whatever_each_rank_seeded(tmp_path):
    """Two ranks seeded differently end exactly where two ranks seeded alike end."""
    alike = run(tmp_path, "alike", "--dropout", "0.3", ranks=2)
    apart = run(tmp_path, "apart", "--dropout", "0.3", "--rank-seeds", ranks=2)
    assert alike.returncode == 0 and apart.returncode == 0, alike.stderr + apart.stderr
    a, b = load(tmp_path, "alike"), load(tmp_path, "apart")
    for k in a:
        np.testing.assert_array_equal(b[k], a[k], err_msg=k)
    b1 = load(tmp_path, "apart", 1)
    for k in b:
        np.testing.assert_array_equal(b1[k], b[k], err_msg=k)


def test_a_rank_that_exits_between_calls_stops_the_others_next_collective(tmp_path):
    """Rank 1 leaves after fit (sys.exit(0)); rank 0's evaluate raises at once instead of
    waiting for the 60 s timeout, naming rank 1."""
    script = tmp_path / "exit_between.py"
    script.write_text(
        "import sys, numpy as np, kiln\n"
        "kiln.distribution.set_distribution(kiln.distribution.DataParallel(timeout=60))\n"
        "x = np.random.default_rng(0).standard_normal((64, 4)).astype('float32')\n"
        "y = (x[:, 0] > 0).astype('int32')\n"
        "m = kiln.Sequential([kiln.layers.Input((4,)), kiln.layers.Dense(2)])\n"
        "m.compile('adam', 'mse')\n"
        "m.fit(x, np.eye(2, dtype='float32')[y], batch_size=16, verbose=0)\n"
        "if kiln.distribution.rank() == 1:\n"
        "    sys.exit(0)\n"
        "m.evaluate(x, np.eye(2, dtype='float32')[y], verbose=0)\n"
        "print('rank 0 evaluated')\n")
    t0 = time.monotonic()
    res = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(script)], capture_output=True,
                         text=True, timeout=120, env=_env())
    assert time.monotonic() - t0 < 30
    assert res.returncode != 0
    assert "DistributionError: rank 1 of 2 exited" in res.stderr, res.stderr[-3000:]
    assert "rank 0 evaluated" not in res.stdout


def test_a_rank_that_calls_os_exit_0_mid_training_ends_the_job_non_zero(tmp_path):
    """os._exit(0) on rank 1 in a callback: mpiexec kills rank 0 mid-training and reported the
    exiting rank's 0; kiln makes that status 1 (and tells the other ranks first)."""
    t0 = time.monotonic()
    res = run(tmp_path, "fail", "--fail-rank", "1", "--fail-how", "os_exit", ranks=2,
              timeout=120)
    assert res.returncode != 0, res.stderr[-3000:]
    assert time.monotonic() - t0 < 30
    assert "rank 1 of 2 called os._exit(0) in a distributed job; exiting with status 1" in \
        res.stderr, res.stderr[-3000:]
    assert not (tmp_path / "fail.rank0.npz").exists()


def _os_exit_script(tmp_path, before_exit: str):
    script = tmp_path / "os_exit.py"
    script.write_text(
        "import os, numpy as np, kiln\n"
        "kiln.distribution.set_distribution(kiln.distribution.DataParallel(timeout=60))\n"
        "x = np.random.default_rng(0).standard_normal((64, 4)).astype('float32')\n"
        "m = kiln.Sequential([kiln.layers.Input((4,)), kiln.layers.Dense(2)])\n"
        "m.compile('sgd', 'mse')\n"
        "m.fit(x, x[:, :2], batch_size=16, verbose=0)\n"
        "kiln.distribution.barrier()\n"
        "if os.fork() == 0:\n"  # a forked child's os._exit(0) is its own business
        "    os._exit(0)\n"
        "assert os.wait()[1] == 0\n"
        f"{before_exit}"
        "os._exit(0)\n")
    return subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120, env=_env())


def test_os_exit_0_keeps_its_status_once_the_distribution_is_lifted(tmp_path):
    res = _os_exit_script(tmp_path, "kiln.distribution.set_distribution(None)\n")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "called os._exit" not in res.stderr
    res = _os_exit_script(tmp_path, "")
    assert res.returncode != 0
    assert "called os._exit(0) in a distributed job" in res.stderr, res.stderr[-3000:]
