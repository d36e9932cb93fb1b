"""Dropout called eagerly on arrays with training=True drops units (Keras behaviour).

Oracles: the binomial law of the number of dropped units, the scaling 1 / (1 - rate), and the
traced training graph of the same layer fed the key that kiln's global generator gives
(``[next_seed(), 0]``), evaluated by the reference backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers as L
from kiln.layers.context import trace
from kiln.random_state import next_seed


def _x(*shape: int) -> np.ndarray:
    """Values in [1, 2): a zero in the output can only come from a dropped unit."""
    return (1.0 + np.random.default_rng(0).random(shape)).astype(np.float32)


def _traced(layer: L.Dropout, x: np.ndarray, key: np.ndarray) -> np.ndarray:
    ph = kiln.placeholder((None,) + x.shape[1:])
    key_ph = kiln.placeholder((2,), "int64")
    with trace(training=True, rng_key=key_ph):
        y = layer(ph)
    return kiln.function([ph, key_ph], y, backend="reference")(x, key)


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.75])
def test_fraction_dropped_follows_the_binomial_law(rate):
    x = _x(200, 100)
    y = L.Dropout(rate)(x, training=True)
    n = x.size
    dropped = np.count_nonzero(y == 0)
    sigma = np.sqrt(n * rate * (1 - rate))
    assert abs(dropped - n * rate) < 5 * sigma


@pytest.mark.parametrize("rate", [0.5, 0.75])
def test_kept_values_are_scaled_exactly(rate):
    x = _x(50, 40)
    y = L.Dropout(rate)(x, training=True)
    kept = y != 0
    assert 0 < kept.mean() < 1
    # 1 / (1 - rate) is exact for these rates: x / (1 - rate) bit for bit
    np.testing.assert_array_equal(y[kept], x[kept] / np.float32(1 - rate))


def test_kept_values_scaled_for_any_rate():
    rate = 0.3
    x = _x(50, 40)
    y = L.Dropout(rate)(x, training=True)
    kept = y != 0
    # the dropout kernel multiplies by 1 / (1 - rate) in float32 (as in a training step)
    np.testing.assert_array_equal(y[kept], x[kept] * np.float32(1.0 / (1.0 - rate)))
    np.testing.assert_allclose(y[kept], x[kept] / (1.0 - rate), rtol=2e-7)


def test_two_calls_give_different_masks():
    layer = L.Dropout(0.5)
    x = _x(8, 64)
    a, b = layer(x, training=True), layer(x, training=True)
    assert not np.array_equal(a == 0, b == 0)


def test_sequence_is_reproducible_after_set_random_seed():
    x = _x(8, 64)
    layer = L.Dropout(0.5)
    runs = []
    for _ in range(2):
        kiln.utils.set_random_seed(42)
        runs.append([layer(x, training=True) for _ in range(3)])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    kiln.utils.set_random_seed(43)
    assert not np.array_equal(layer(x, training=True), runs[0][0])


def test_eager_call_equals_the_training_graph_with_a_fresh_global_key():
    layer = L.Dropout(0.4, seed=5)
    x = _x(16, 32)
    kiln.utils.set_random_seed(9)
    keys = [np.array([next_seed(), 0], np.int64) for _ in range(2)]
    kiln.utils.set_random_seed(9)
    for key in keys:
        np.testing.assert_array_equal(layer(x, training=True), _traced(layer, x, key))


def test_eager_noise_shape_shares_the_mask():
    layer = L.Dropout(0.5, noise_shape=(None, 1, 8))
    y = layer(np.ones((6, 5, 8), np.float32), training=True)
    assert np.all(y == y[:, :1, :])
    assert 0 < np.mean(y == 0) < 1
    np.testing.assert_array_equal(np.unique(y), [0.0, 2.0])


def test_identity_without_training():
    x = _x(4, 6)
    layer = L.Dropout(0.9)
    np.testing.assert_array_equal(layer(x), x)
    np.testing.assert_array_equal(layer(x, training=False), x)
    np.testing.assert_array_equal(layer(x, training=None), x)
    np.testing.assert_array_equal(L.Dropout(0.0)(x, training=True), x)


def test_identity_calls_do_not_draw_from_the_global_generator():
    x = _x(4, 6)
    kiln.utils.set_random_seed(3)
    L.Dropout(0.5)(x)
    L.Dropout(0.0)(x, training=True)
    after = next_seed()
    kiln.utils.set_random_seed(3)
    assert next_seed() == after


def test_eager_dropout_on_the_cpu_backend_matches_the_reference(monkeypatch):
    x = _x(32, 48)
    layer = L.Dropout(0.5)
    kiln.utils.set_random_seed(11)
    reference = layer(x, training=True)
    monkeypatch.setenv("KILN_BACKEND", "cpu")
    layer_cpu = L.Dropout.from_config(layer.get_config())  # the same stream (its seed)
    kiln.utils.set_random_seed(11)
    np.testing.assert_array_equal(layer_cpu(x, training=True), reference)
    assert [e.function.backend_name for e in layer._eager_cache.values()] == ["reference"]
    assert [e.function.backend_name for e in layer_cpu._eager_cache.values()] == ["cpu"]


def test_eager_training_call_of_a_whole_model_drops():
    """``model(x, training=True)`` feeds its training trace a fresh key too; the same model
    without training=True is deterministic and drops nothing."""
    model = kiln.Sequential([kiln.Input((32,)), L.Dense(64, kernel_initializer="ones"),
                             L.Dropout(0.5)])
    x = _x(16, 32)
    dense = x @ np.ones((32, 64), np.float32)
    kiln.utils.set_random_seed(3)
    a, b = model(x, training=True), model(x, training=True)
    assert not np.array_equal(a == 0, b == 0)
    for y in (a, b):
        assert 0.3 < np.mean(y == 0) < 0.7
        np.testing.assert_allclose(y[y != 0], (dense / 0.5)[y != 0], rtol=1e-6)
    kiln.utils.set_random_seed(3)
    np.testing.assert_array_equal(model(x, training=True), a)
    np.testing.assert_allclose(model(x), dense, rtol=1e-6)
