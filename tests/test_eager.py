"""kiln.eager: the one eager path of layers, losses and metrics (compile, cache, call)."""

from __future__ import annotations

import copy
import threading

import numpy as np
import pytest

import kiln
from kiln import eager
from kiln import losses as L
from kiln import metrics as M


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _entries(key_head, arrays=None) -> list:
    """The SHARED entries compiled for ``key_head`` (the first part of eager.run's key), and
    for the signature of ``arrays`` when given."""
    sig = None if arrays is None else eager.signature(arrays)
    return [e for k, e in zip(eager.SHARED.keys(), eager.SHARED.values())
            if k[0] == key_head and (sig is None or k[2] == sig)]


# ---- signature and cache hits --------------------------------------------------------------
def test_signature_replaces_the_batch_dimension():
    a, b = np.zeros((3, 4), np.float32), np.zeros((7, 4), np.float32)
    assert eager.signature([a]) == eager.signature([b]) == (((None, 4), "<f4"),)
    assert eager.signature([a], batch=False) == (((3, 4), "<f4"),)
    assert eager.signature([np.zeros(())]) == (((), "<f8"),)
    with pytest.raises(TypeError, match="numeric"):
        eager.signature([np.array(["a"])], who="my_layer")


def test_layer_reuses_one_function_across_batch_sizes():
    layer = kiln.layers.Dense(3)
    rng = _rng()
    x1, x2 = rng.random((2, 4), np.float32), rng.random((5, 4), np.float32)
    y1 = layer(x1)
    entry = layer._eager_cache.values()[0]
    y2 = layer(x2)
    assert len(layer._eager_cache) == 1 and layer._eager_cache.values()[0] is entry
    assert entry.function.calls == 2
    w, b = layer.get_weights()
    np.testing.assert_allclose(y1, x1 @ w + b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y2, x2 @ w + b, rtol=1e-5, atol=1e-6)


def test_metric_and_loss_reuse_one_function_across_batch_sizes():
    rng = _rng(1)
    m = M.MeanSquaredError()
    m.update_state(rng.random((3, 5)), rng.random((3, 5)))
    m.update_state(rng.random((9, 5)), rng.random((9, 5)))
    found = _entries(m._graph_key(), [np.zeros((1, 5))] * 2)
    assert len(found) == 1 and found[0].function.calls >= 2
    loss = L.MeanAbsoluteError()
    loss(rng.random((3, 2)), rng.random((3, 2)))
    loss(rng.random((8, 2)), rng.random((8, 2)))
    found = _entries(loss._graph_key(), [np.zeros((1, 2))] * 2)
    assert len(found) == 1 and found[0].function.calls >= 2


def test_a_new_dtype_compiles_a_new_entry():
    layer = kiln.layers.Dense(2)
    layer(np.ones((2, 3), np.float32))
    layer(np.ones((4, 3), np.float32))
    assert len(layer._eager_cache) == 1
    layer(np.ones((2, 3), np.float64))
    assert len(layer._eager_cache) == 2
    m = M.SparseCategoricalAccuracy()
    pred = _rng(2).random((4, 3))
    m.update_state(np.array([0, 1, 2, 1], np.int32), pred)
    m.update_state(np.array([0, 1, 2, 1], np.int64), pred)
    assert len(_entries(m._graph_key(), [np.zeros(4, np.int32), pred])) == 1
    assert len(_entries(m._graph_key(), [np.zeros(4, np.int64), pred])) == 1
    assert m.result() == pytest.approx(np.mean(np.argmax(pred, -1) == [0, 1, 2, 1]))


def test_training_flag_and_arguments_are_part_of_the_key():
    layer = kiln.layers.Dropout(0.5)
    x = np.ones((4, 6), np.float32)
    layer(x)
    layer(x, training=True)
    assert len(layer._eager_cache) == 2


# ---- values --------------------------------------------------------------------------------
def test_losses_match_numpy():
    rng = _rng(3)
    y, p = rng.random((6, 4)), rng.random((6, 4))
    sw = rng.random(6)
    np.testing.assert_allclose(L.mean_squared_error(y, p), np.mean((y - p) ** 2, -1),
                               rtol=1e-5)
    np.testing.assert_allclose(L.MeanSquaredError()(y, p, sample_weight=sw),
                               np.mean(np.mean((y - p) ** 2, -1) * sw), rtol=1e-5)
    onehot = np.eye(4)[[0, 1, 2, 3, 1, 0]]
    q = p / p.sum(-1, keepdims=True)
    np.testing.assert_allclose(L.CategoricalCrossentropy()(onehot, p),
                               np.mean(-np.sum(onehot * np.log(q), -1)), rtol=1e-5)
    labels = np.array([0, 1, 2, 3, 1, 0])
    np.testing.assert_allclose(L.sparse_categorical_crossentropy(labels, p),
                               -np.log(q[np.arange(6), labels]), rtol=1e-5)
    assert L.mean_squared_error(y, p).dtype == np.float32


def test_losses_of_one_sample_keep_their_static_shape():
    """A lone rank-1 pair is one sample's classes: no batch dimension is assumed."""
    y, p = np.array([0.0, 1.0, 0.0]), np.array([0.2, 0.7, 0.1])
    smooth = y * 0.9 + 0.1 / 3
    np.testing.assert_allclose(L.categorical_crossentropy(y, p, label_smoothing=0.1),
                               -np.sum(smooth * np.log(p)), rtol=1e-5)
    np.testing.assert_allclose(L.sparse_categorical_crossentropy(1, p), -np.log(0.7),
                               rtol=1e-5)
    # a class axis in front cannot take an unknown size: that signature compiles statically
    y2, p2 = np.eye(3)[:, :2], np.full((3, 2), 1 / 3)
    np.testing.assert_allclose(
        L.categorical_crossentropy(y2, p2, label_smoothing=0.3, axis=0),
        -np.sum((y2 * 0.7 + 0.1) * np.log(p2), 0), rtol=1e-5)


def test_metrics_match_numpy():
    rng = _rng(4)
    y = (rng.random((40, 1)) > 0.5).astype(np.float32)
    p = rng.random((40, 1))
    m = M.Precision()
    m.update_state(y[:25], p[:25])
    m.update_state(y[25:], p[25:])
    pos = p > 0.5
    assert m.result() == pytest.approx(np.sum(pos & (y > 0)) / np.sum(pos))
    mae = M.MeanAbsoluteError()
    mae.update_state(y, p, sample_weight=np.arange(40.0))
    want = np.sum(np.abs(y - p)[:, 0] * np.arange(40.0)) / np.sum(np.arange(40.0))
    assert mae.result() == pytest.approx(want, rel=1e-5)


def test_user_losses_and_metrics_keep_their_own_cache():
    class Power(L.Loss):
        def __init__(self, power):
            super().__init__()
            self.power = power  # not in get_config: instances must not share a graph

        def call(self, y_true, y_pred):
            return kiln.ops.mean(kiln.ops.abs(y_pred - y_true) ** self.power, axis=-1)

    y, p = np.zeros((2, 3)), np.full((2, 3), 2.0)
    assert Power(2)(y, p) == pytest.approx(4.0)
    assert Power(3)(y, p) == pytest.approx(8.0)
    assert len(Power(1).__dict__.get("_eager_cache", ())) == 0


# ---- threads -------------------------------------------------------------------------------
def test_concurrent_calls_through_one_entry_give_each_caller_its_own_result():
    # two batch sizes, four threads each: without the entry's lock, threads running the same
    # plan would overwrite each other's buffers (this test then fails)
    rng = _rng(5)
    data = [(rng.random((200 + 37 * (i % 2), 16)), rng.random((200 + 37 * (i % 2), 16)))
            for i in range(8)]
    want_loss = [L.MeanSquaredError()(y, p) for y, p in data]  # sequential eager calls
    want_fn = [L.log_cosh(y, p) for y, p in data]
    metrics = [M.MeanAbsoluteError() for _ in data]  # a metric's state is per thread
    got: dict[int, list] = {i: [] for i in range(8)}
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        try:
            y, p = data[i]
            barrier.wait()
            for _ in range(10):
                got[i].append((L.MeanSquaredError()(y, p), L.log_cosh(y, p)))
                metrics[i].update_state(y, p)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, (y, p) in enumerate(data):
        for loss_value, per_sample in got[i]:
            np.testing.assert_array_equal(loss_value, want_loss[i])
            np.testing.assert_array_equal(per_sample, want_fn[i])
        np.testing.assert_allclose(want_loss[i], np.mean((y - p) ** 2), rtol=1e-5)
        assert metrics[i].result() == pytest.approx(np.mean(np.abs(y - p)), rel=1e-5)
    (entry,) = _entries(M.MeanAbsoluteError()._graph_key(), data[0])
    assert entry.function.calls >= 80  # one entry served all threads


def test_concurrent_layer_calls():
    """Same shapes in every thread: without the entry lock the threads would share buffers."""
    layer = kiln.layers.Dense(8, activation="tanh")
    rng = _rng(6)
    xs = [rng.random((64, 32), np.float32) for i in range(8)]
    want = [layer(x) for x in xs]
    out: list = [None] * 8

    def work(i: int) -> None:
        for _ in range(10):
            out[i] = layer(xs[i])
            np.testing.assert_array_equal(out[i], want[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(8):
        np.testing.assert_array_equal(out[i], want[i])
    assert len(layer._eager_cache) == 1


# ---- bounds and copies ---------------------------------------------------------------------
def _square_fn():
    x = kiln.ops.placeholder((None,))
    return kiln.core.function([x], x * x), "info"


def test_lru_bound():
    cache = eager.FunctionCache(maxsize=2)
    a = cache.lookup("a", _square_fn)
    cache.lookup("b", _square_fn)
    assert cache.lookup("a", _square_fn) is a  # a is now the most recent
    cache.lookup("c", _square_fn)  # drops b
    assert cache.keys() == ["a", "c"] and len(cache) == 2 and cache.misses == 3
    cache.lookup("b", _square_fn)
    assert cache.keys() == ["c", "b"] and cache.misses == 4
    np.testing.assert_array_equal(a(np.array([1.0, 2.0, 3.0], np.float32)), [1.0, 4.0, 9.0])
    with pytest.raises(ValueError, match="maxsize"):
        eager.FunctionCache(0)


def test_owner_cache_is_bounded():
    class Owner:
        pass

    owner = Owner()
    eager.cache_for(owner, maxsize=3)
    for n in range(1, 6):  # static shapes: a new length is a new signature
        out = eager.run("sq", lambda x: x * x, [np.arange(n, dtype=np.float32)], "float32",
                        owner=owner, batch=False)
        np.testing.assert_array_equal(out, np.arange(n) ** 2)
    assert len(eager.cache_for(owner)) == 3
    assert eager.SHARED is eager.cache_for(None)


def test_a_copied_cache_starts_empty():
    layer = kiln.layers.Dense(2)
    layer(np.ones((1, 3), np.float32))
    clone = copy.deepcopy(layer._eager_cache)
    assert len(layer._eager_cache) == 1 and len(clone) == 0
    assert clone.maxsize == layer._eager_cache.maxsize
