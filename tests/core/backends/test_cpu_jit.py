"""The CPU JIT layer: numba's disk cache across processes, no recompilation for a new batch size,
and KILN_JIT=0 (same generated source, run as Python). The loader itself (keys, files, a
damaged cache) is tested in tests/core/test_jit_loader.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends.cpu.codegen import jit

SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    import kiln, kiln.ops as K
    from kiln.core.backends.cpu.codegen import jit
    x = kiln.placeholder((None, 8))
    f = kiln.function([x], K.tanh(x) * 2.0 + 1.0, backend="cpu")
    out = f(np.linspace(-1, 1, 32, dtype="float32").reshape(4, 8))
    print(json.dumps({"stats": jit.stats, "sum": float(out.sum()),
                      "dir": jit.kernel_dir()}))
""")


def _run_script(cache_dir: str, **env: str) -> dict:
    full = dict(os.environ, KILN_CACHE_DIR=cache_dir, **env)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=full, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("native,suffix", [("1", ".o"), ("0", ".py")])
def test_second_process_loads_kernels_from_the_disk_cache(tmp_path, native, suffix):
    # native loops (object files, kiln/core/backends/cpu/codegen/native.py) and numba's kernels
    cache = str(tmp_path / "cache")
    first = _run_script(cache, KILN_NATIVE=native)
    assert first["stats"]["compiled"] >= 1
    assert first["dir"].startswith(cache)
    sources = sorted(os.listdir(first["dir"]))
    assert any(name.endswith(suffix) for name in sources)
    second = _run_script(cache, KILN_NATIVE=native)
    assert second["stats"]["compiled"] == 0, second
    assert second["stats"]["cache_hits"] >= 1
    assert second["stats"]["sources_written"] == 0
    assert second["sum"] == first["sum"]
    assert sorted(os.listdir(first["dir"])) == sources  # same keys: no new files


def test_kiln_jit_0_runs_the_same_source_as_python(tmp_path):
    cache = str(tmp_path / "cache")
    jitted = _run_script(cache)
    plain = _run_script(cache, KILN_JIT="0")
    assert plain["stats"]["compiled"] == 0 and plain["stats"]["cache_hits"] == 0
    np.testing.assert_allclose(plain["sum"], jitted["sum"], rtol=1e-6)


def _mlp_step():
    rng = np.random.default_rng(0)
    x = kiln.placeholder((None, 6))
    y = kiln.placeholder((None,), "int32")
    w1 = kiln.Variable(rng.normal(size=(6, 8)) * 0.3)
    b1 = kiln.Variable(np.zeros(8))
    w2 = kiln.Variable(rng.normal(size=(8, 3)) * 0.3)
    loss = K.mean(K.sparse_softmax_cross_entropy(K.relu(x @ w1 + b1) @ w2, y))
    params = [w1, b1, w2]
    grads = kiln.grad(loss, params)
    return kiln.function([x, y], loss, updates=[(p, p - 0.1 * g) for p, g in zip(params, grads)],
                         backend="cpu")


@pytest.mark.nojit
def test_new_batch_size_costs_a_plan_but_no_compilation():
    step = _mlp_step()
    rng = np.random.default_rng(1)
    # a batch under 128 rows and one over: Dense products of 128 rows or more may run on
    # kiln's own kernel (native_matmul.suits), compiled once for their columns
    for batch in (16, 300):
        step(rng.normal(size=(batch, 6)).astype("float32"),
             rng.integers(0, 3, batch).astype("int32"))
    before = dict(jit.stats)
    for batch in (9, 64, 2, 1, 200, 129):
        loss = step(rng.normal(size=(batch, 6)).astype("float32"),
                    rng.integers(0, 3, batch).astype("int32"))
        assert np.isfinite(loss)
    assert jit.stats["compiled"] == before["compiled"]
    assert jit.stats["cache_hits"] == before["cache_hits"]
    assert jit.stats["modules_loaded"] == before["modules_loaded"]
    assert len(step.program._plans) == 8


def test_load_writes_source_to_the_cache_dir_and_counts_compilations(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    src = "def add_one(o, a):\n    for i in range(a.shape[0]):\n        o[i] = a[i] + 1\n"
    kernel = jit.load(src, "add_one", signature="test")
    assert kernel.path.startswith(str(tmp_path))
    with open(kernel.path) as f:
        assert src in f.read()
    assert jit.load(src, "add_one", signature="test") is kernel
    a = np.arange(4.0)
    o = np.empty_like(a)
    before = jit.stats["compiled"] + jit.stats["cache_hits"]
    fn = kernel.specialize((o, a))
    fn(o, a)
    np.testing.assert_array_equal(o, a + 1)
    assert jit.stats["compiled"] + jit.stats["cache_hits"] == before + 1
    assert kernel.specialize((o, a)) is fn  # same types: no new compilation
    assert jit.stats["compiled"] + jit.stats["cache_hits"] == before + 1


def test_kiln_jit_0_in_process_gives_python_kernels(monkeypatch):
    x = kiln.placeholder((None, 3))
    outs = [K.softmax(x * 2.0), K.sum(K.exp(x), axis=0)]
    xv = np.random.default_rng(2).normal(size=(5, 3)).astype("float32")
    jitted = kiln.function([x], outs, backend="cpu")(xv)
    monkeypatch.setenv("KILN_JIT", "0")
    f = kiln.function([x], outs, backend="cpu")
    plain = f(xv)
    plan = f.program.plan([xv])
    assert all(not type(s.fn).__name__.startswith("CPUDispatcher") for s in plan.steps)
    assert any(getattr(s.fn, "__code__", None) is not None for s in plan.steps)
    for a, b in zip(plain, jitted):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_a_kernel_source_changed_under_the_process_is_an_error_not_another_function(
        tmp_path, monkeypatch):
    """inspect reads a function's file as it is now at the line numbers of the import: with
    lines added above it, numba would compile the function before it (a wrong kernel, no
    error). jit.function_source checks the text against the imported code."""
    import importlib
    import linecache

    mod = tmp_path / "kiln_probe_kernels.py"
    body = "def first(o, x):\n    o[0] = x[0] + 1.0\n\n\ndef second(o, x):\n    o[0] = x[0] * 2.0\n"
    mod.write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module("kiln_probe_kernels")
    assert "x[0] * 2.0" in jit.function_source(probe.second)
    scale = 3.0

    def closure(o, x):  # its free name is a global in its text alone: the same function
        o[0] = x[0] * scale

    assert "x[0] * scale" in jit.function_source(closure)
    mod.write_text("\n" * 4 + body)  # second's old first line is now first's
    linecache.checkcache(str(mod))
    with pytest.raises(RuntimeError, match="kiln_probe_kernels.second.*restart Python"):
        jit.function_source(probe.second)
