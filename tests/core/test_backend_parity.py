"""The reference interpreter is the specification on every backend: every registered op's
examples run on every available backend and must match the op's NumPy reference (same dtype;
exact for integers and booleans, a per-dtype tolerance for floats).

Backends: ``reference``, ``cpu`` (generated loops compiled natively by llvmlite, the other
kernels by numba), ``cpu-numba`` (``KILN_NATIVE=0``: the generated loops compiled by numba, for
the ops that run as generated loops), ``cpu-nojit`` (the same generated kernels as plain
Python, ``KILN_JIT=0``) and ``cuda`` under numba-cuda's simulator (skipped, with the reason,
when numba-cuda is missing). Ops a backend runs through its documented host fallback count too.
Every example of every op, in float32 and float64, is small enough for the simulator: this file
runs in about 30 s once the CPU kernels are in the disk cache.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import kiln
from kiln.core.ops import all_ops
from kiln.core.ops.registry import ELEMENTWISE, REDUCE, apply

OPS = all_ops()
NAMES = sorted(n for n, op in OPS.items() if op.examples is not None)
BACKENDS = ["reference", "cpu", "cpu-nojit", "cuda"]
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


def _cuda_skip_reason() -> str | None:
    if importlib.util.find_spec("numba_cuda") is None:
        return "numba-cuda is not installed"
    from kiln.core.backends.cuda import is_available

    if not is_available():
        return "no CUDA device or simulator (set NUMBA_ENABLE_CUDASIM=1)"
    return None


def _use(backend: str, monkeypatch) -> str:
    """Selects ``backend``; returns the name kiln.function takes."""
    if backend == "cuda":
        reason = _cuda_skip_reason()
        if reason:
            pytest.skip(reason)
    if backend == "cpu-nojit":
        monkeypatch.setenv("KILN_JIT", "0")
        return "cpu"
    if backend == "cpu-numba":
        monkeypatch.setenv("KILN_NATIVE", "0")
        return "cpu"
    return backend


def _run(name: str, example, backend: str):
    phs = [kiln.placeholder(np.shape(a), np.asarray(a).dtype.name) for a in example.inputs]
    node = apply(name, *phs, **example.attrs)
    fn = kiln.function(phs, node, backend=backend, optimize=False)
    return node, fn(*example.inputs)


def _compare(name: str, example, node, got) -> None:
    expected = np.asarray(OPS[name].ref(*example.inputs, **example.attrs))
    where = f"{name} {example.attrs}"
    assert got.dtype == np.dtype(node.dtype), f"{where}: dtype {got.dtype}, expected {node.dtype}"
    assert got.shape == expected.shape, f"{where}: shape {got.shape}, expected {expected.shape}"
    expected = expected.astype(node.dtype)
    if got.dtype.kind in "fc":
        tol = TOLERANCE[got.dtype.name]
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol, err_msg=where)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=where)


# the ops that run as generated loops on the CPU: also with numba compiling them
LOOPS = sorted(n for n in NAMES if OPS[n].kind in (ELEMENTWISE, REDUCE))
CASES = [(n, b) for n in NAMES for b in BACKENDS] + [(n, "cpu-numba") for n in LOOPS]


@pytest.mark.parametrize("name,backend", CASES)
def test_every_example_matches_the_reference(name, backend, monkeypatch):
    selected = _use(backend, monkeypatch)
    for dtype in ("float32", "float64"):
        rng = np.random.default_rng(sum(map(ord, name)))  # the same inputs on every backend
        for example in OPS[name].examples(rng, dtype):
            node, got = _run(name, example, selected)
            _compare(name, example, node, got)


def _take_function(op: str, feeds: list[np.ndarray], backend: str):
    phs = [kiln.placeholder(a.shape, a.dtype.name) for a in feeds]
    return kiln.function(phs, apply(op, *phs, axis=0), backend=backend, optimize=False)


def _take_feeds(op: str, idx: np.ndarray) -> list[np.ndarray]:
    x = np.arange(12, dtype="float32").reshape(4, 3)
    if op == "take":
        return [x, idx]
    ct = np.arange(idx.size * 3, dtype="float32").reshape(idx.shape + (3,))
    return [ct, idx, x]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["take", "take_grad"])
def test_take_wraps_negative_indices_and_raises_out_of_range(op, backend, monkeypatch):
    selected = _use(backend, monkeypatch)
    good = np.array([-1, 0, -4, 3], np.int64)
    feeds = _take_feeds(op, good)
    fn = _take_function(op, feeds, selected)
    ref = OPS[op].ref(*feeds, axis=0)
    np.testing.assert_array_equal(fn(*feeds), ref)
    for bad in (4, -5):
        idx = np.array([0, bad, 1, 2], np.int64)
        message = "index" if backend == "reference" else f"{op}: index out of range"
        with pytest.raises(IndexError, match=message):
            fn(*_take_feeds(op, idx))
        np.testing.assert_array_equal(fn(*feeds), ref)  # the next run is clean
