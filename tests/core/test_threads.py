"""Compiled functions and models called from several threads give the serial results
(docs/architecture.md, "Threads").

A program computes in preallocated buffers with kernels that release the GIL: before each
call owned its buffers, threads calling one function overwrote each other's intermediate
values (softmax outputs off by more than 1). The oracle is the serial result of the same
computation (itself checked against NumPy); the switch interval is made tiny so that the
threads interleave as much as they can.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln import layers


@pytest.fixture(autouse=True)
def _interleave():
    """Switch threads as often as possible (every 10 us instead of 5 ms)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def _in_threads(n: int, work: Callable[[int], None]) -> None:
    """Runs ``work(k)`` for k < n in n threads started together; re-raises the first error."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(k: int) -> None:
        try:
            barrier.wait()
            work(k)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ---- kiln.core.function ------------------------------------------------------------------------
def _graph(w: np.ndarray) -> tuple:
    x = kiln.placeholder((None, w.shape[0]), name="x")
    wv = kiln.Variable(w)
    h = K.tanh(x @ wv) * 2.0 + 0.5
    return [x], [K.softmax(h), K.sum(h * h, axis=1)]


def _reference(x: np.ndarray, w: np.ndarray) -> list[np.ndarray]:
    h = np.tanh(x.astype(np.float64) @ w.astype(np.float64)) * 2.0 + 0.5
    return [_softmax(h), (h * h).sum(axis=1)]


def test_a_function_called_from_threads_gives_the_serial_results():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(24, 10)).astype(np.float32) * 0.3
    # batch sizes the function has never seen: the threads also build plans concurrently
    xs = [rng.normal(size=(40 + 7 * (i % 4), 24)).astype(np.float32) for i in range(8)]
    serial_fn = kiln.function(*_graph(w))
    want = [serial_fn(x) for x in xs]
    for x, (p, s) in zip(xs, want):
        ref_p, ref_s = _reference(x, w)
        np.testing.assert_allclose(p, ref_p, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(s, ref_s, rtol=1e-4)
    fn = kiln.function(*_graph(w))
    got: dict[int, list] = {k: [] for k in range(4)}

    def work(k: int) -> None:
        for j in range(60):
            i = (j + 3 * k) % len(xs)
            got[k].append((i, fn(xs[i])))

    _in_threads(4, work)
    for k in range(4):
        for i, (p, s) in got[k]:
            np.testing.assert_allclose(p, want[i][0], rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(s, want[i][1], rtol=1e-6)
    assert fn.calls == 240


def test_a_function_with_updates_runs_one_call_at_a_time():
    # each call returns the counter and adds one after some work: serial calls return
    # 0, 1, 2 ... once each
    counter = kiln.Variable(np.zeros(()), dtype="float64")
    m = kiln.Variable(np.eye(96) * 0.5, dtype="float64")
    x = kiln.placeholder((None, 96), "float64")
    work = K.sum(K.tanh(K.tanh(x @ m) @ m))
    fn = kiln.function([x], [counter + K.sum(x) * 0.0, work],
                       updates=[(counter, counter + 1.0 + work * 0.0)])
    xs = [np.full((300 + 10 * k, 96), 0.5) for k in range(4)]
    seen: dict[int, list[float]] = {k: [] for k in range(4)}
    # the oracle before the threads: NumPy GEMMs outside kiln's GEMM lock, run at once with
    # kiln's, can hang OpenBLAS <= 0.3.33 (products.matmul)
    wants = [np.tanh(np.tanh(x @ m.numpy()) @ m.numpy()).sum() for x in xs]

    def run(k: int) -> None:
        want = wants[k]
        for _ in range(50):
            value, total = fn(xs[k])
            assert total == pytest.approx(want)
            seen[k].append(float(value))

    _in_threads(4, run)
    values = sorted(v for k in seen for v in seen[k])
    assert values == [float(i) for i in range(200)]
    assert float(counter.numpy()) == 200.0


def test_an_assigned_variable_is_read_by_every_plan():
    # threads make spare plans; a new value assigned between calls reaches all of them
    w = kiln.Variable(np.ones((8, 3), np.float32))
    x = kiln.placeholder((None, 8))
    fn = kiln.function([x], x @ w)
    xv = np.ones((50, 8), np.float32)
    _in_threads(4, lambda k: [fn(xv) for _ in range(30)])
    w.assign(np.full((8, 3), 2.0, np.float32))
    outs: list[np.ndarray] = []
    _in_threads(4, lambda k: outs.extend(fn(xv) for _ in range(10)))
    assert len(outs) == 40
    for out in outs:
        np.testing.assert_array_equal(out, np.full((50, 3), 16.0, np.float32))


# ---- models ------------------------------------------------------------------------------------
def _model(seed: int, units: int = 32) -> kiln.Model:
    kiln.utils.set_random_seed(seed)
    model = kiln.Sequential([layers.Input((12,)), layers.Dense(units, activation="relu"),
                             layers.Dense(5, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _data(seed: int, n: int = 6) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(33 + 5 * i, 12)).astype(np.float32) for i in range(n)]
    ys = [rng.integers(0, 5, len(x)) for x in xs]
    return xs, ys


def _numpy_predict(model: kiln.Model, x: np.ndarray) -> np.ndarray:
    w1, b1, w2, b2 = (np.asarray(v, np.float64) for v in model.get_weights())
    return _softmax(np.maximum(x @ w1 + b1, 0.0) @ w2 + b2)


def test_predict_predict_on_batch_call_and_evaluate_from_threads_give_the_serial_results():
    model = _model(1)
    xs, ys = _data(2)
    want_p = [model.predict(x, verbose=0) for x in xs]
    want_b = [model.predict_on_batch(x) for x in xs]
    want_e = [model.evaluate(x, y, verbose=0) for x, y in zip(xs, ys)]
    for x, p in zip(xs, want_p):
        np.testing.assert_allclose(p, _numpy_predict(model, x), rtol=1e-4, atol=1e-6)
    calls = [
        (lambda i: model.predict(xs[i], verbose=0), want_p),
        (lambda i: model.predict_on_batch(xs[i]), want_b),
        (lambda i: model(xs[i]), want_b),
        (lambda i: model.evaluate(xs[i], ys[i], verbose=0), want_e),
    ]
    got: list[tuple[int, int, object]] = []

    def work(k: int) -> None:
        for j in range(24):
            i = (j + k) % len(xs)
            c = (j + 2 * k) % len(calls)
            got.append((c, i, calls[c][0](i)))

    _in_threads(4, work)
    assert len(got) == 96
    for c, i, out in got:
        np.testing.assert_allclose(np.asarray(out), np.asarray(calls[c][1][i]), rtol=1e-6,
                                   atol=1e-7)


def test_two_models_predicting_at_once_give_their_serial_results():
    models = [_model(3, units=16), _model(4, units=24)]
    xs, _ = _data(5)
    want = [[m.predict_on_batch(x) for x in xs] for m in models]
    for m, outs in zip(models, want):
        np.testing.assert_allclose(outs[0], _numpy_predict(m, xs[0]), rtol=1e-4, atol=1e-6)
    got: list[tuple[int, int, np.ndarray]] = []

    def work(k: int) -> None:
        m = k % 2
        for j in range(40):
            i = (j + k) % len(xs)
            got.append((m, i, models[m].predict(xs[i], verbose=0, batch_size=16)))

    _in_threads(4, work)
    for m, i, out in got:
        np.testing.assert_allclose(out, want[m][i], rtol=1e-6, atol=1e-7)


def test_fit_in_one_thread_while_others_predict():
    xs, ys = _data(6, n=1)
    x, y = np.concatenate([xs[0]] * 4), np.concatenate([ys[0]] * 4)
    alone = _model(7)
    alone.fit(x, y, epochs=3, batch_size=16, verbose=0, shuffle=False)
    model = _model(7)
    done = threading.Event()
    outs: list[np.ndarray] = []

    def work(k: int) -> None:
        if k == 0:
            try:
                model.fit(x, y, epochs=3, batch_size=16, verbose=0, shuffle=False)
            finally:
                done.set()
            return
        while not done.is_set():
            outs.append(model.predict_on_batch(xs[0]))

    _in_threads(3, work)
    # predicting reads the weights, never writes them: training is unaffected
    for a, b in zip(model.get_weights(), alone.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert outs
    for out in outs:  # weights in the middle of a step, but every output a distribution
        assert out.shape == (len(xs[0]), 5) and np.isfinite(out).all()
        np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)


# what the subprocess scripts below start with: run work(k) for k < n in n threads at once
IN_THREADS = textwrap.dedent("""
    import threading
    def in_threads(work, n):
        threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
""")


SPLIT_FROM_THREADS = IN_THREADS + textwrap.dedent("""
    import numpy as np
    import kiln, kiln.ops as K
    from numba.np.ufunc import parallel
    x = kiln.placeholder((512, 4096))
    f = kiln.function([x], K.tanh(x) * 2.0 + 1.0)  # 16 MB moved: split on kiln's threads
    xs = [np.full((512, 4096), 0.1 * k, np.float32) for k in range(4)]
    f(xs[0])
    plan = next(iter(f.program._plans.values()))
    bad = []
    def work(k):
        for _ in range(20):
            if not np.allclose(f(xs[k]), np.tanh(xs[k]) * 2.0 + 1.0, rtol=1e-6):
                bad.append(k)
    in_threads(work, 4)
    print(type(plan.steps[0].fn).__name__, parallel._is_initialized, len(bad))
""")


def test_split_kernels_called_from_threads_and_numbas_pool_never_starts(tmp_path):
    # kernels are serial; the ones that pay for threads run on kiln's pool, so numba's
    # threading layer (whose "workqueue" variant aborts when two threads enter parallel
    # regions at once, and whose OpenMP threads spin against BLAS) is never started
    env = dict(os.environ, KILN_NUM_THREADS="2", NUMBA_THREADING_LAYER="workqueue",
               KILN_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", SPLIT_FROM_THREADS], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["SplitCall", "False", "0"]


CONV_FROM_THREADS = IN_THREADS + textwrap.dedent("""
    import numpy as np
    import kiln, kiln.ops as K
    from numba.np.ufunc import parallel
    x = kiln.placeholder((None, 12, 12, 3))
    w = np.random.default_rng(0).normal(size=(3, 3, 3, 8)).astype(np.float32)
    y = K.max_pool2d(K.conv2d(x, w), 2)
    f = kiln.function([x], [y, kiln.grad(K.sum(y * y), [x])[0]])
    r = kiln.function([x], [y, kiln.grad(K.sum(y * y), [x])[0]], backend="reference")
    xs = [np.random.default_rng(k).random((16, 12, 12, 3), np.float32) for k in range(4)]
    f(xs[0])
    wants = [r(x) for x in xs]
    bad = []
    def work(k):
        want = wants[k]
        for _ in range(20):
            if not all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(f(xs[k]), want)):
                bad.append(k)
    in_threads(work, 4)
    print(parallel._is_initialized, len(bad))
""")


@pytest.mark.slow  # compiles the convolution kernels in a fresh process (~5-20 s)
def test_convolution_kernels_from_threads_under_numbas_workqueue_layer(tmp_path):
    # the convolution and pooling kernels split over kiln's threads (conv._call), not numba's
    # parallel regions (the workqueue layer aborts when two threads enter them at once)
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue",
               KILN_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", CONV_FROM_THREADS], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False", "0"]


GEMMS_FROM_THREADS = IN_THREADS + textwrap.dedent("""
    import numpy as np
    import kiln, kiln.ops as K
    from kiln.core.backends.cpu.gemm import products
    rng = np.random.default_rng(0)
    x = kiln.placeholder((None, 300), "float64")
    w = kiln.Variable(rng.normal(size=(300, 200)) * 0.05, dtype="float64")
    loss = K.sum(K.tanh(x @ w) ** 2)
    predict = kiln.function([x], K.tanh(x @ w))                # x @ W: an NN GEMM
    grads = kiln.function([x], kiln.grad(loss, [x, w]))        # g @ W.T and x.T @ g: NT, TN
    xs = [rng.normal(size=(256, 300)) for _ in range(4)]
    want_p = [predict(v) for v in xs]
    want_g = [grads(v) for v in xs]
    gemms = {s.fn for f in (predict, grads) for p in f.program._plans.values()
             for s in p.steps if "matmul" in s.label}
    bad = []
    def work(k):
        for j in range(40):
            v = (j + k) % 4
            if (j + k) % 2:
                ok = np.allclose(predict(xs[v]), want_p[v], rtol=1e-12, atol=1e-12)
            else:
                ok = all(np.allclose(a, b, rtol=1e-12, atol=1e-12)
                         for a, b in zip(grads(xs[v]), want_g[v]))
            if not ok:
                bad.append((k, j))
    in_threads(work, 4)
    print(all(isinstance(g, products.MatmulCall) for g in gemms), len(bad))
""")


def test_gemms_of_different_transposes_from_threads_take_turns(tmp_path):
    # OpenBLAS <= 0.3.33 corrupts its state (wrong results or a hang) when GEMMs of
    # different transpose variants run at once: every GEMM of a kiln plan goes through
    # products.MatmulCall's lock (a subprocess: a hang fails here instead of stalling the suite)
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", GEMMS_FROM_THREADS], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True", "0"]
