"""Random graphs, the CPU backend against the reference backend (docs/features.md, "NaN,
extreme values and random streams").

Each seed draws a small graph: one to three inputs (the later ones broadcast along some axes),
a chain of elementwise ops reading earlier values, some of them kept as outputs (so that the
fusion pass forms multi-output loops), up to three reductions of recent values (sum, mean, max,
min, prod; shared or different axes, with and without keepdims), in float32 or float64; in
every third graph a NaN or an infinity in the first input; in the gradient cases the gradients
of a weighted sum of the outputs too. Reductions join their loops at any size and every loop
splits over the drawn number of threads (1-3), so that small graphs reach the paths that big
models take.

Oracle: the reference backend (NumPy, op by op, on the same graph) within float tolerance, and
every NaN or infinity that it gives is non-finite on the CPU too (more may be: nothing here
asks a compiled loop to keep an exact zero out of ``0 * inf``). Such a run found the
cancellation that LLVM's ``reassoc nsz`` allowed in ``sum(x + (-x))``
(test_nan_propagation.py)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends.cpu.runtime import threads

UNARY = [
    lambda a: a * 0.7 + 0.1, lambda a: K.exp(a * 0.3), K.relu, lambda a: K.abs(a) + 1.0, K.tanh,
    lambda a: a * a, lambda a: -a, K.sigmoid, lambda a: K.log(K.abs(a) + 0.5),
    lambda a: K.sqrt(K.abs(a)), lambda a: K.square(a) / (K.abs(a) + 1.0),
    lambda a: K.clip(a, -0.5, 0.8), K.softplus, lambda a: K.where(a > 0.2, a, a * 0.1),
    lambda a: K.cast(K.cast(a > 0, "int32"), a.dtype) * a, lambda a: K.minimum(a, 0.3),
    lambda a: K.sign(a) * a]
BINARY = [
    lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b, K.maximum, K.minimum,
    lambda a, b: a / (K.abs(b) + 1.0), lambda a, b: K.where(a > b, a, b * 2.0),
    lambda a, b: a * 0.5 - b]
REDUCTIONS = ["sum", "mean", "max", "min", "prod"]


def _axes(rng, rank):
    return tuple(sorted(rng.choice(rank, size=int(rng.integers(1, rank + 1)),
                                   replace=False).tolist()))


def draw(seed: int, grad: bool):
    """(a function building the graph's inputs and outputs, the feeds, the float dtype)."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 5))
    shape = [int(rng.choice([1, 2, 3, 5, 7, 16, 33, 64])) for _ in range(rank)]
    dtype = str(rng.choice(["float32", "float64"]))
    shapes = [tuple(shape)]
    for _ in range(int(rng.integers(0, 3))):
        s = [d if rng.random() < 0.5 else 1 for d in shape] if rng.random() < 0.5 else shape
        shapes.append(tuple(s))
    steps = [(int(rng.integers(0, 3)), int(rng.integers(0, len(UNARY))),
              int(rng.integers(0, len(BINARY))), int(rng.integers(0, 99)),
              int(rng.integers(0, 99))) for _ in range(int(rng.integers(1, 7)))]
    shared = _axes(rng, rank)
    same = rng.random() < 0.6
    reductions = []
    for _ in range(int(rng.integers(0, 4))):
        axes = None if rng.random() < 0.2 else shared if same else _axes(rng, rank)
        reductions.append((str(rng.choice(REDUCTIONS)), axes, bool(rng.random() < 0.3),
                           int(rng.integers(0, 99))))
    keep = int(rng.integers(2, 4))
    feeds = [rng.normal(size=s).astype(dtype) for s in shapes]
    if seed % 3 == 0 and feeds[0].size > 2:
        feeds[0].reshape(-1)[int(rng.integers(0, feeds[0].size))] = rng.choice(
            [np.nan, np.inf, -np.inf])

    def build():
        ins = [kiln.placeholder((None, *s[1:]) if s[0] > 1 else s, dtype) for s in shapes]
        values, outs = list(ins), []
        for kind, u, b, i, j in steps:
            a = values[i % len(values)]
            values.append(UNARY[u](a) if kind == 0 else BINARY[b](a, values[j % len(values)]))
            if i % keep == 0:
                outs.append(values[-1])
        outs.append(values[-1])
        recent = values[len(ins):] or values
        for op, axes, keepdims, pick in reductions:
            outs.append(getattr(K, op)(recent[-1 - pick % min(3, len(recent))], axis=axes,
                                       keepdims=keepdims))
        if grad:
            loss = sum(K.sum(o * (0.1 * (q + 1))) for q, o in enumerate(outs))
            outs += list(kiln.grad(loss, ins))
        return ins, outs

    return build, feeds, dtype


def _compare(seed: int, grad: bool) -> None:
    build, feeds, dtype = draw(seed, grad)
    results = []
    for backend in ("cpu", "reference"):
        ins, outs = build()
        fn = kiln.function(ins, outs, backend=backend)
        with np.errstate(all="ignore"):
            fn(*feeds)
            results.append(fn(*feeds))  # a second call: accumulators start over
    tol = 2e-4 if dtype == "float32" else 1e-9
    for q, (got, want) in enumerate(zip(*results)):
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape, (seed, q)
        lost = ~np.isfinite(want) & np.isfinite(got)
        assert not lost.any(), f"seed {seed} output {q}: NaN / inf lost at {np.argwhere(lost)[:3]}"
        finite = np.isfinite(got) & np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=tol, atol=10 * tol,
                                   err_msg=f"seed {seed} output {q}")


@pytest.fixture
def every_path(monkeypatch, pass_options, cpu_options, tmp_path):
    """Reductions join loops of any size; every loop splits over ``parts`` threads."""
    pass_options(fuse_tail_min_elements=0)
    cpu_options(parallel_min_bytes=0)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))

    def use(seed: int, native: str) -> None:
        monkeypatch.setattr(threads, "kernel_threads", lambda: 1 + seed % 3)
        monkeypatch.setenv("KILN_NATIVE", native)
    return use


@pytest.mark.parametrize("first", range(0, 120, 20))
def test_random_graphs_match_the_reference(every_path, first):
    for seed in range(first, first + 20):
        every_path(seed, "1")
        _compare(seed, grad=False)


@pytest.mark.parametrize("first", range(1000, 1060, 20))
def test_random_graphs_and_their_gradients_match_the_reference(every_path, first):
    for seed in range(first, first + 20):
        every_path(seed, "1")
        _compare(seed, grad=True)


def test_random_graphs_on_numba_loops_match_the_reference(every_path):
    for seed in range(2000, 2010):  # numba compiles 10-20x slower than the native loops
        every_path(seed, "0")
        _compare(seed, grad=seed % 2 == 1)


@pytest.mark.nojit
def test_random_graphs_as_python_match_the_reference(every_path):
    for seed in range(3000, 3012):
        every_path(seed, "1")
        _compare(seed, grad=seed % 2 == 1)
