"""Plans run in one native call (kiln/core/backends/cpu/runtime/native_plan.py). Oracles: the
same plan's Python loop (the same kernels on the same parts: the same bits), the float64
forward pass, and specific errors: which plans take it, feeds it cannot copy, a busy machine,
threads, a forked child, and ``model(x)``'s serving path."""

from __future__ import annotations

import os

import numpy as np
import pytest
from in_threads import run_in_threads
from test_spin_pool import _in_child

import kiln
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.runtime import cpus, spin_pool, threads

pytestmark = pytest.mark.skipif(not (native.enabled() and spin_pool.ENABLED),
                                reason="needs the native path and the spin workers (Linux "
                                       "x86-64, KILN_SPIN_POOL not 0)")


def _mlp(seed: int = 0) -> kiln.Model:
    kiln.utils.set_random_seed(seed)
    return kiln.Sequential([kiln.layers.Input((300,)),
                            kiln.layers.Dense(256, activation="relu"),
                            kiln.layers.Dense(64, activation="relu"),
                            kiln.layers.Dense(10, activation="softmax")])


def _forward(model: kiln.Model, x: np.ndarray) -> np.ndarray:
    h = x.astype(np.float64)
    for i, layer in enumerate(model.layers):
        w, bias = (v.numpy().astype(np.float64) for v in layer.weights)
        h = h @ w + bias
        if i < 2:
            h = np.maximum(h, 0.0)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _plan(model: kiln.Model, x: np.ndarray):
    model.predict_on_batch(x)
    return model.predict_function.program.plan([x])


def _python_loop(plan, x: np.ndarray) -> np.ndarray:
    native_plan, plan.native = plan.native, None
    try:
        return plan.run([x])[0].copy()
    finally:
        plan.native = native_plan


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("batch", [1, 2, 4])
def test_a_plan_of_native_kernels_gives_its_python_loops_bits(batch, split, cpu_options,
                                                              monkeypatch):
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    cpu_options(gemv_split_work=0 if split else 1 << 40)
    model = _mlp(batch)
    x = np.random.default_rng(batch).normal(size=(batch, 300)).astype(np.float32)
    plan = _plan(model, x)
    assert plan.native is not None and plan.info["native_plan"]
    labels = [s.label for s in plan.steps]
    assert ("matmul:gemv_parts" in labels) == split, labels
    got = model.predict_on_batch(x)
    np.testing.assert_allclose(got, _forward(model, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got, _python_loop(plan, x))
    np.testing.assert_array_equal(np.asarray(model(x)), got)


def test_feeds_it_cannot_copy_take_the_python_loop():
    model = _mlp(1)
    x = np.random.default_rng(1).normal(size=(2, 300)).astype(np.float32)
    plan = _plan(model, x)
    strided = np.random.default_rng(2).normal(size=(2, 600)).astype(np.float32)[:, ::2]
    assert plan.native is not None and plan.native.accepts([x])
    for feed in (strided, np.asfortranarray(x), x.astype(np.float64), x[:1]):
        assert not plan.native.accepts([feed])
    assert not plan.native.accepts([x, x])
    np.testing.assert_allclose(model.predict_on_batch(strided), _forward(model, strided),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(plan.run([strided])[0],
                                  plan.run([np.ascontiguousarray(strided)])[0])


def test_wrong_feeds_to_the_entry_raise():
    model = _mlp()
    x = np.zeros((1, 300), np.float32)
    native_plan = _plan(model, x).native
    with pytest.raises(TypeError, match="native plan: wrong number of feeds"):
        native_plan.entry(native_plan.schedule, x, x)


def test_a_busy_machine_runs_the_same_parts_in_order(cpu_options, monkeypatch):
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    cpu_options(gemv_split_work=0)
    model = _mlp(3)
    x = np.random.default_rng(3).normal(size=(1, 300)).astype(np.float32)
    plan = _plan(model, x)
    assert plan.native is not None and plan.native.workers == 1
    free = model.predict_on_batch(x)
    calls = []
    real = spin_pool.POOL.place
    monkeypatch.setattr(spin_pool.POOL, "place", lambda: (calls.append(1), real()))
    monkeypatch.setattr(cpus, "plan", lambda: cpus.Plan(threads=1, spin=False))
    busy = model.predict_on_batch(x)
    assert not calls  # the workers were not asked for
    np.testing.assert_array_equal(busy, free)


def test_plans_with_other_steps_keep_the_python_loop():
    # a gather whose kernel reports an index out of range: only its entry point raises
    x = kiln.placeholder((4, 3))
    i = kiln.placeholder((2,), "int32")
    f = kiln.function([x, i], kiln.ops.take(x, i, axis=0), backend="cpu")
    xv = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(f(xv, np.array([1, 0], np.int32)), xv[[1, 0]])
    assert f.program.plan([xv, np.array([1, 0], np.int32)]).native is None
    with pytest.raises(IndexError, match="take"):
        f(xv, np.array([5, 0], np.int32))
    # a batch of 64 rows: OpenBLAS's product, not a native kernel
    model = _mlp()
    big = np.random.default_rng(4).normal(size=(64, 300)).astype(np.float32)
    assert _plan(model, big).native is None
    np.testing.assert_allclose(model.predict_on_batch(big), _forward(model, big), rtol=1e-5,
                               atol=1e-6)


def test_threads_calling_at_once_get_their_own_answers(cpu_options, monkeypatch):
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    cpu_options(gemv_split_work=0)
    model = _mlp(5)
    xs = [np.random.default_rng(k).normal(size=(1, 300)).astype(np.float32) for k in range(4)]
    want = [model.predict_on_batch(x) for x in xs]
    errors: list[str] = []

    def serve(k: int) -> None:
        for _ in range(200):
            got = model(xs[k])
            if not np.array_equal(got, want[k]):
                errors.append(f"thread {k}: {got} != {want[k]}")
                return

    run_in_threads(serve)
    assert not errors, errors[:2]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_serves_with_its_own_workers(cpu_options, monkeypatch):
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    # two free CPUs whatever this host has (with one usable, the caller runs every part and
    # starts no worker: right there, but not what this test is about)
    monkeypatch.setattr(cpus, "plan", lambda: cpus.Plan(threads=2, spin=True))
    cpu_options(gemv_split_work=0)
    model = _mlp(6)
    x = np.random.default_rng(6).normal(size=(1, 300)).astype(np.float32)
    want = model.predict_on_batch(x)
    assert _plan(model, x).native.workers == 1

    def child() -> bool:  # no worker survived the fork: the plan's call starts one
        fresh = spin_pool.POOL.count == 0
        got = model.predict_on_batch(x)
        return fresh and spin_pool.POOL.count >= 1 and np.array_equal(got, want)

    _in_child(child, 60, "the forked child's native plan hung")
    np.testing.assert_array_equal(model.predict_on_batch(x), want)


def test_model_call_on_an_array_is_the_serving_call():
    model = kiln.Sequential([kiln.layers.Input((20,)), kiln.layers.Dense(8),
                             kiln.layers.Dropout(0.5)])
    x = np.random.default_rng(7).normal(size=(3, 20)).astype(np.float32)
    served = model.predict_on_batch(x)
    np.testing.assert_array_equal(np.asarray(model(x)), served)
    # training=True and a GradientTape take the general path: dropout, a recorded call
    dropped = np.asarray(model(x, training=True))
    assert (dropped == 0).sum() > 0 and not np.array_equal(dropped, served)
    with kiln.GradientTape() as tape:
        out = model(x)
        loss = kiln.ops.sum(out)
    grads = tape.gradient(loss, model.trainable_weights)
    assert all(g is not None for g in grads)
    np.testing.assert_allclose(np.asarray(out), served, rtol=1e-6, atol=1e-6)


def test_a_feed_read_in_place_keeps_the_python_loop():
    # from bind_min_bytes the Python loop reads a feed in place; one native call would copy it
    model = kiln.Sequential([kiln.layers.Input((300,)), kiln.layers.Dense(4)])
    big = np.random.default_rng(8).normal(size=(64, 300)).astype(np.float32)  # 76,800 bytes
    plan = _plan(model, big)
    assert any(plan.bindings) and plan.native is None
    w, b = (v.numpy().astype(np.float64) for v in model.layers[0].weights)
    np.testing.assert_allclose(model.predict_on_batch(big), big @ w + b, rtol=1e-5, atol=1e-5)
