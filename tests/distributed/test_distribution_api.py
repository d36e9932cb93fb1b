"""kiln.distribution in one process: the API, and one rank behaving exactly as no
distribution (the multi-rank behaviour is tested under mpiexec in test_data_parallel.py)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.models.distributed import _slice_bounds


def test_importing_kiln_never_imports_mpi4py():
    code = ("import sys, kiln, kiln.models, kiln.distribution; "
            "print('mpi4py' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_defaults_without_a_distribution():
    assert kiln.distribution.distribution() is None
    assert kiln.distribution.rank() == 0
    assert kiln.distribution.world_size() == 1
    assert kiln.distribution.is_chief()
    kiln.distribution.barrier()  # a no-op


@pytest.mark.parametrize("n,world", [(10, 2), (3, 2), (1, 2), (7, 3), (0, 2), (64, 4)])
def test_slices_cover_the_batch_once(n, world):
    bounds = [_slice_bounds(n, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    for (a, b), (c, _) in zip(bounds, bounds[1:]):
        assert b == c and a <= b
    sizes = [b - a for a, b in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_bad_arguments():
    with pytest.raises(TypeError, match="set_distribution: expects"):
        kiln.distribution.set_distribution("data_parallel")
    pytest.importorskip("mpi4py")
    with pytest.raises(ValueError, match="devices must be None"):
        kiln.distribution.DataParallel(devices=["cpu:0", "cpu:1"])
    with pytest.raises(ValueError, match="timeout must be > 0"):
        kiln.distribution.DataParallel(timeout=0)


def _train(seed: int = 3) -> list[np.ndarray]:
    kiln.utils.set_random_seed(seed)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 5)).astype("float32")
    y = rng.integers(0, 2, 40).astype("int32")
    model = kiln.Sequential([kiln.layers.Input((5,)), kiln.layers.Dense(4, "relu", name="d1"),
                             kiln.layers.Dropout(0.3, name="drop"),
                             kiln.layers.Dense(2, "softmax", name="d2")], name="m")
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    return model.get_weights() + [model.predict(x, verbose=0)]


@pytest.mark.mpi
def test_one_rank_is_exactly_one_process():
    pytest.importorskip("mpi4py")
    plain = _train()
    kiln.distribution.set_distribution(kiln.distribution.DataParallel())
    try:
        assert kiln.distribution.world_size() == 1
        assert kiln.distribution.active() is None
        one_rank = _train()
    finally:
        kiln.distribution.set_distribution(None)
    assert kiln.distribution.distribution() is None
    for a, b in zip(plain, one_rank):
        np.testing.assert_array_equal(a, b)
