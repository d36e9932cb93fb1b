"""Compile batches (kiln/core/backends/cpu/codegen/compile_batch.py): the kernels a plan needs are
compiled together, in forked worker processes when several kernel files need compiling; the
entry points, the results and the cache files are the same as compiling them one by one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kiln import config
from kiln.core.backends.cpu.codegen import compile_batch, jit

pytestmark = pytest.mark.skipif(not config.jit_enabled(), reason="batches compile numba code")


def _kernels(tag: str, n: int = 3) -> list[jit.Kernel]:
    """``n`` distinct kernels (o = (k + 1) * a + tag-specific constant), new to this process
    and to the cache folder of the test."""
    out = []
    for k in range(n):
        src = (f"def scale_{tag}_{k}(o, a):\n    for i in range(a.size):\n"
               f"        o[i] = {k + 1} * a[i] + {len(tag)}\n")
        out.append(jit.load(src, f"scale_{tag}_{k}"))
    return out


def _oracle(tag: str, k: int, x: np.ndarray) -> np.ndarray:
    return ((k + 1) * x + len(tag)).astype(x.dtype)


def jit_typeof(a):
    from numba import typeof

    return typeof(a)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _run_batch(kernels, x):
    outs = [np.empty_like(x) for _ in kernels]
    with compile_batch.batch():
        fns = [k.specialize((o, x)) for k, o in zip(kernels, outs)]
        assert all(isinstance(f, compile_batch.Deferred) and f.entry is None for f in fns)
    for fn, o in zip(fns, outs):
        fn(o, x)
    return fns, outs


def test_a_batch_compiled_by_workers_gives_the_serial_entry_points_results(cache, monkeypatch):
    monkeypatch.setenv("KILN_COMPILE_WORKERS", "2")
    x = np.linspace(-2, 2, 17, dtype=np.float32)
    before = dict(jit.stats)
    kernels = _kernels("par")
    fns, outs = _run_batch(kernels, x)
    assert all(f.entry is not None for f in fns)
    for k, o in enumerate(outs):
        np.testing.assert_array_equal(o, _oracle("par", k, x))
    assert jit.stats["compiled"] - before["compiled"] == 3
    assert jit.stats["compiled_by_workers"] - before["compiled_by_workers"] >= 1
    assert all(k.cached((jit_typeof(o), jit_typeof(x))) for k, o in zip(kernels, outs))
    # a serial batch of the same kernels in another cache folder: the same results
    monkeypatch.setenv("KILN_CACHE_DIR", str(cache) + "-serial")
    monkeypatch.setenv("KILN_COMPILE_WORKERS", "1")
    before = dict(jit.stats)
    serial = _kernels("par")
    assert {k.key for k in serial} == {k.key for k in kernels}  # same text, same keys
    _, souts = _run_batch(serial, x)
    assert jit.stats["compiled_by_workers"] == before["compiled_by_workers"]
    for a, b in zip(outs, souts):
        np.testing.assert_array_equal(a, b)


def test_cached_entries_are_loaded_without_workers(cache, monkeypatch):
    monkeypatch.setenv("KILN_COMPILE_WORKERS", "2")
    x = np.arange(5, dtype=np.float64)
    kernels = _kernels("warm")
    _run_batch(kernels, x)
    for k in kernels:  # new dispatchers (as in a new process): they find them on disk
        del jit._kernels[(k.path, True)]
    kernels = _kernels("warm")
    forks = []
    monkeypatch.setattr(compile_batch, "_fork", lambda bins: forks.append(bins) or [])
    before = dict(jit.stats)
    _, outs = _run_batch(kernels, x)
    assert forks == []
    assert jit.stats["cache_hits"] - before["cache_hits"] == 3
    assert jit.stats["compiled"] == before["compiled"]
    for k, o in enumerate(outs):
        np.testing.assert_array_equal(o, _oracle("warm", k, x))


def test_a_failed_worker_leaves_its_kernels_to_the_parent(cache, monkeypatch):
    monkeypatch.setenv("KILN_COMPILE_WORKERS", "3")

    def failing_fork(bins):
        pids = []
        for _ in bins:
            pid = os.fork()
            if pid == 0:
                os._exit(3)  # dies without compiling anything
            pids.append(pid)
        return pids

    monkeypatch.setattr(compile_batch, "_fork", failing_fork)
    x = np.linspace(0, 1, 9, dtype=np.float32)
    before = dict(jit.stats)
    _, outs = _run_batch(_kernels("fail"), x)
    assert jit.stats["compiled"] - before["compiled"] == 3
    assert jit.stats["compiled_by_workers"] == before["compiled_by_workers"]
    for k, o in enumerate(outs):
        np.testing.assert_array_equal(o, _oracle("fail", k, x))


def test_a_deferred_call_before_its_batch_closes_compiles_on_the_spot(cache):
    x = np.ones(4, np.float32)
    o = np.empty_like(x)
    (kernel,) = _kernels("early", 1)
    with compile_batch.batch():
        fn = kernel.specialize((o, x))
        fn(o, x)
        assert fn.entry is not None
    np.testing.assert_array_equal(o, _oracle("early", 0, x))


def test_an_exception_inside_a_batch_compiles_nothing_and_closes_it(cache):
    x = np.ones(4, np.float32)
    (kernel,) = _kernels("raise", 1)
    with pytest.raises(RuntimeError, match="planned failure"):
        with compile_batch.batch():
            fn = kernel.specialize((np.empty_like(x), x))
            raise RuntimeError("planned failure")
    assert fn.entry is None
    assert compile_batch.defer(kernel, fn.sig) is None  # no batch left open


class _FakeKernel:
    def __init__(self, size, scalars=False):
        self.size, self.scalars = size, scalars


def test_units_are_ordered_largest_first_and_deterministic(monkeypatch, cpu_options):
    cpu_options(compile_kernel_base_cost=0)
    groups = {f"k{i}.py": [compile_batch.Deferred(_FakeKernel(s), ())]
              for i, s in enumerate([100, 90, 120, 10, 90])}
    units = compile_batch.units(groups)
    again = compile_batch.units(dict(reversed(list(groups.items()))))
    assert [[id(d) for d in u] for u in units] == [[id(d) for d in u] for u in again]
    assert [u[0].kernel.size for u in units] == [120, 100, 90, 90, 10]
    assert units[2][0] is groups["k1.py"][0]  # a tie: by file name


def test_kernels_calling_the_scalar_functions_compile_in_one_process(monkeypatch, cpu_options):
    # they share the compilation of those functions (once per process): one unit
    cpu_options(compile_kernel_base_cost=0)
    cpu_options(compile_scalars_cost=50)
    sizes = [(100, True), (90, False), (80, True), (200, False), (10, True)]
    groups = {f"k{i}.py": [compile_batch.Deferred(_FakeKernel(s, sc), ())]
              for i, (s, sc) in enumerate(sizes)}
    units = compile_batch.units(groups)
    assert [sorted(d.kernel.size for d in u) for u in units] == [[10, 80, 100], [200], [90]]


def test_the_processes_share_one_queue_of_units(cache, monkeypatch):
    # each process takes the next unit when done with its last: a worker slowed down (here
    # by 0.5 s per unit) takes fewer units; every unit is compiled exactly once
    import time

    monkeypatch.setenv("KILN_COMPILE_WORKERS", "2")
    real = compile_batch._compile_in_worker

    def slow(d):
        time.sleep(0.5)
        real(d)

    monkeypatch.setattr(compile_batch, "_compile_in_worker", slow)
    x = np.arange(7, dtype=np.float32)  # exact in float32 and float64
    before = dict(jit.stats)
    _, outs = _run_batch(_kernels("queue", 6), x)
    by_workers = jit.stats["compiled_by_workers"] - before["compiled_by_workers"]
    assert jit.stats["compiled"] - before["compiled"] == 6
    assert 1 <= by_workers <= 3
    for k, o in enumerate(outs):
        np.testing.assert_array_equal(o, _oracle("queue", k, x))


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_kiln_compile_workers_must_be_a_positive_integer(monkeypatch, value):
    monkeypatch.setenv("KILN_COMPILE_WORKERS", value)
    with pytest.raises(ValueError, match=f"KILN_COMPILE_WORKERS must be a positive integer, "
                                         f"got '{value}'"):
        compile_batch.workers()


SCRIPT = textwrap.dedent("""
    import json, os
    import numpy as np
    import kiln, kiln.ops as K
    from kiln.core.backends.cpu.codegen import jit
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(6, 5)).astype(np.float32)
    wv = rng.normal(size=(5, 3)).astype(np.float32)
    x = kiln.placeholder((None, 5))
    w = kiln.Variable(wv.copy())
    h = K.tanh(x @ w) * 0.5 + K.sigmoid(x @ w)
    loss = K.mean(h * h)
    (g,) = kiln.grad(loss, [w])
    f = kiln.function([x], [loss, h], updates=[(w, w - 0.1 * g)], backend="cpu")
    loss_v, h_v = f(xv)
    files = sorted(p for p in os.listdir(jit.kernel_dir()) if p.endswith(".py"))
    print(json.dumps({"stats": jit.stats, "h": h_v.tolist(), "loss": float(loss_v),
                      "w": w.numpy().tolist(), "files": files, "xv": xv.tolist(),
                      "wv": wv.tolist()}))
""")


def _run_script(cache_dir: str, workers: str) -> dict:
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir, KILN_COMPILE_WORKERS=workers)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_compiled_function_with_workers_matches_the_serial_one_bitwise(tmp_path):
    par = _run_script(str(tmp_path / "par"), "2")
    ser = _run_script(str(tmp_path / "ser"), "1")
    assert par["stats"]["compiled"] == ser["stats"]["compiled"] >= 2
    assert par["stats"]["compiled_by_workers"] >= 1
    assert ser["stats"]["compiled_by_workers"] == 0
    for key in ("h", "loss", "w", "files"):
        assert par[key] == ser[key], key
    # the oracle: NumPy in float64
    z = np.array(ser["xv"]) @ np.array(ser["wv"])
    np.testing.assert_allclose(ser["h"], np.tanh(z) * 0.5 + 1 / (1 + np.exp(-z)), rtol=1e-5,
                               atol=1e-6)
    warm = _run_script(str(tmp_path / "par"), "2")  # the workers' cache serves a new process
    assert warm["stats"]["compiled"] == 0 and warm["stats"]["cache_hits"] >= 2
    assert warm["h"] == par["h"] and warm["w"] == par["w"]


def test_units_left_out_of_a_full_queue_are_compiled_by_the_parent(cache, monkeypatch):
    # a pipe that takes only part of the indices (a one-page pipe, many units): the units
    # whose index did not fit whole are compiled by the parent after the workers
    monkeypatch.setenv("KILN_COMPILE_WORKERS", "2")
    real_write = os.write
    monkeypatch.setattr(compile_batch.os, "write", lambda fd, data: real_write(fd, data[:6]))
    x = np.arange(5, dtype=np.float32)
    before = dict(jit.stats)
    _, outs = _run_batch(_kernels("full", 4), x)
    monkeypatch.undo()
    assert jit.stats["compiled"] - before["compiled"] == 4
    for k, o in enumerate(outs):
        np.testing.assert_array_equal(o, _oracle("full", k, x))
