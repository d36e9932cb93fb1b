"""The one worker API (kiln/core/backends/cpu/runtime/parts.py): a kernel describes its work
in parts, the runtime splits it and picks the engine. Oracles: NumPy (float64 for sums), the
arguments each part received against the description, the same parts run serially (the same
bits on every engine), a concurrency handshake (a part that waits for another proves they ran
at once), and specific errors."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends.cpu import target
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import native_gemm
from kiln.core.backends.cpu.runtime import parts as workers
from kiln.core.backends.cpu.runtime import spin_pool
from kiln.core.backends.cpu.runtime.threads import ENGINES, SplitCall


class Builder:
    """A plan builder's ``add`` and ``node.op``: the steps it was handed."""

    class node:
        op = "test"

    def __init__(self) -> None:
        self.steps: list[tuple] = []

    def add(self, fn, args: tuple, label: str | None = None) -> None:
        self.steps.append((fn, args, label))

    def run(self) -> None:
        for fn, args, _ in self.steps:
            fn(*args)


def test_the_engine_is_chosen_once_and_named_by_the_compile_report():
    t = target.process()
    assert workers.engine() == ("spin" if t.spin_engine else "portable")
    assert workers.engine() == ("spin" if spin_pool.ENABLED else "portable")
    want = "workers: spin (x86-64 Linux)" if t.spin_engine else "workers: portable threads"
    assert want in t.describe()


def test_the_runtime_decides_the_parts(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "3")
    assert workers.count() == 3
    assert workers.count(work=99, min_work=100) == 1
    assert workers.split(10) == [(0, 4), (4, 7), (7, 10)]
    assert workers.split(2) == [(0, 1), (1, 2)]  # at most one part per item
    assert workers.split(10, work=5, min_work=6) == [(0, 10)]


@pytest.mark.parametrize("engine", [None, *ENGINES[:2]])
def test_each_part_gets_its_range_and_its_own_arguments(engine, monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "3")
    seen: dict[int, tuple] = {}
    lock = threading.Lock()

    def entry(x, out, own, tag, lo, hi):
        with lock:
            seen[lo] = (x.shape, own, tag, hi)
        out[lo:hi] = x.sum(axis=1)

    x = np.arange(40.0).reshape(10, 4)
    out = np.full(10, np.nan)
    b = Builder()
    ranges = workers.add_parts(b, entry, (x, out, None, "t", 0, 0), 10, engine=engine,
                               vary=lambda k, lo, hi: {2: f"own{k}", -2: lo, -1: hi},
                               sliced=(0,))
    assert ranges == [(0, 4), (4, 7), (7, 10)]
    (fn, args, label), = b.steps
    assert isinstance(fn, SplitCall) and fn.parts == 3 and fn.engine == engine
    b.run()
    # ``sliced``: part k reads the rows lo:hi of x (its own view at the call)
    assert seen == {0: ((4, 4), "own0", "t", 4), 4: ((3, 4), "own1", "t", 7),
                    7: ((3, 4), "own2", "t", 10)}
    np.testing.assert_array_equal(out[:4], x[:4].sum(axis=1))


def test_one_part_is_a_plain_step_with_its_arguments_changed(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    b = Builder()
    assert workers.add_parts(b, print, ("a", 0, 0), 7,
                             vary=lambda k, lo, hi: {1: lo, 2: hi}) == [(0, 7)]
    assert b.steps == [(print, ("a", 0, 7), None)]


def test_a_wrong_description_is_refused_naming_it():
    with pytest.raises(ValueError, match="engine 'gpu' is not one of"):
        workers.add_parts(Builder(), print, (), 4, engine="gpu")
    with pytest.raises(IndexError, match=r"add_parts\(k\): a part changes an argument out of 2"):
        workers.add_parts(Builder(), print, (1, 2), 4, ranges=[(0, 2), (2, 4)], label="k",
                          vary=lambda k, lo, hi: {5: 0})
    with pytest.raises(ValueError, match="parts.forced: engine 'fast'"):
        with workers.forced("fast"):
            pass


def test_the_portable_engine_runs_the_parts_at_once_whatever_the_load():
    # part 0 (on the caller) waits for part 1: it returns only where part 1 ran on a worker
    # meanwhile; forced, the step does so even where cpus.plan() says one thread
    other = threading.Event()
    got = {}

    def entry(k):
        if k == 0:
            got["waited"] = other.wait(120)
        else:
            got["worker"] = threading.get_ident()
            other.set()

    b = Builder()
    workers.add_parts(b, entry, (None,), ranges=[(0, 1), (1, 2)],
                      vary=lambda k, lo, hi: {0: k}, engine="portable")
    b.run()
    assert got["waited"] and got["worker"] != threading.get_ident()


def _transpose(engine: str | None, src: np.ndarray) -> tuple[np.ndarray, SplitCall]:
    """``src.T`` by native_gemm's transpose kernel in 2 parts of rows on ``engine`` (the spin
    pool, started by an earlier call of this process, may have one worker only)."""
    rows, cols = src.shape
    dst = np.full((cols, rows), np.nan, np.float32)
    b = Builder()
    assert workers.native_split(b, "dense_transpose_l8",
                                lambda s, d: native_gemm.transpose_ir(s, d, 8),
                                (dst.reshape(-1), src.reshape(-1)), [rows, cols],
                                ranges=[(0, 16), (16, rows)], engine=engine)
    (fn, args, _), = b.steps
    fn(*args)
    return dst, fn


@pytest.mark.skipif(not native.enabled(), reason="needs the native path")
@pytest.mark.parametrize("engine", ENGINES)
def test_a_native_kernel_in_parts_runs_on_each_engine(engine):
    if engine == "spin" and workers.engine() != "spin":
        pytest.skip("the spin engine is not this platform's (x86-64 Linux)")
    src = np.random.default_rng(0).standard_normal((40, 24)).astype(np.float32)
    dst, fn = _transpose(engine, src)
    np.testing.assert_array_equal(dst, src.T)
    assert fn.engine == engine
    assert (fn._native is not None) == (engine == "spin")  # bound to the spin workers


@pytest.mark.skipif(not native.enabled() or workers.engine() == "spin",
                    reason="needs the native path on a platform without the spin engine")
def test_the_spin_engine_forced_where_it_is_off_is_an_error():
    with pytest.raises(RuntimeError, match="the spin engine cannot run"):
        _transpose("spin", np.zeros((40, 24), np.float32))


def _sums(engine: str) -> list[np.ndarray]:
    """A column sum of relu(2x) (its split loop is the reduced one: one partial per part,
    added in part order) and the stored relu(2x), the plan built on ``engine``."""
    x = kiln.placeholder((4096, 1024), "float32")
    h = K.relu(x * 2.0)
    fn = kiln.function([x], [K.sum(h, axis=0), h * 3.0])
    feed = np.random.default_rng(3).standard_normal((4096, 1024)).astype(np.float32)
    with workers.forced(engine):
        got = fn(feed)
    plan = next(iter(fn.program._plans.values()))
    split = [s.fn for s in plan.steps if isinstance(s.fn, SplitCall)]
    assert split and all(f.engine == engine and f.parts == 2 for f in split), split
    assert all((f._native is not None) == (engine == "spin") for f in split)
    want = np.maximum(feed.astype(np.float64) * 2, 0)
    np.testing.assert_allclose(got[0], want.sum(axis=0), rtol=1e-5, atol=1e-3)
    np.testing.assert_array_equal(got[1], (want * 3).astype(np.float32))
    return got


def test_a_kernel_in_parts_gives_the_same_bits_on_every_engine(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    serial = _sums("serial")
    portable = _sums("portable")
    for a, b in zip(serial, portable):
        np.testing.assert_array_equal(a, b)
    if workers.engine() == "spin" and native.enabled():
        for a, b in zip(serial, _sums("spin")):
            np.testing.assert_array_equal(a, b)
