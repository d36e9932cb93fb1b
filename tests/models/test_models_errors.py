"""Errors are raised before any weight changes, name what was wrong and what was received."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import blobs, weights_equal

import kiln
from kiln import layers


@pytest.fixture
def model():
    m = kiln.Sequential([kiln.Input((8,), name="features"), layers.Dense(16, activation="relu"),
                         layers.Dense(10, activation="softmax")])
    m.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def _unchanged(model, fn):
    """Runs ``fn`` (expected to raise, inside ``pytest.raises``) and checks, whether it raised
    or not, that the weights and the optimizer state did not change."""
    before = model.get_weights()
    opt_before = [v.numpy() for v in model.optimizer.variables] if model.optimizer else []
    try:
        fn()
    finally:
        assert weights_equal(model.get_weights(), before)
        if model.optimizer:
            assert weights_equal([v.numpy() for v in model.optimizer.variables], opt_before)


def test_fit_before_compile():
    m = kiln.Sequential([kiln.Input((8,)), layers.Dense(2)])
    x, y = blobs(16)
    before = m.get_weights()
    with pytest.raises(ValueError, match="compile"):
        m.fit(x, y, verbose=0)
    with pytest.raises(ValueError, match="compile"):
        m.evaluate(x, y, verbose=0)
    assert weights_equal(m.get_weights(), before)


def test_x_and_y_of_different_lengths(model):
    x, y = blobs(32)
    with pytest.raises(ValueError, match=r"cardinality.*32.*31"):
        _unchanged(model, lambda: model.fit(x, y[:31], verbose=0))


def test_features_of_the_wrong_shape(model):
    x, y = blobs(32)
    bad = np.concatenate([x, x[:, :1]], axis=1)
    with pytest.raises(ValueError, match=r"'features'.*\(None, 8\).*\(32, 9\)"):
        _unchanged(model, lambda: model.fit(bad, y, verbose=0))
    with pytest.raises(ValueError, match="features"):
        model.predict(bad, verbose=0)


def test_sparse_label_out_of_range(model):
    x, y = blobs(32)
    y = y.copy()
    y[5] = 10
    with pytest.raises(ValueError, match=r"label value of 10.*10 classes"):
        _unchanged(model, lambda: model.fit(x, y, verbose=0))
    y[5] = -1
    with pytest.raises(ValueError, match="label value of -1"):
        _unchanged(model, lambda: model.fit(x, y, verbose=0))


def test_sparse_label_out_of_range_in_a_generator(model):
    x, y = blobs(64)
    y = y.copy()
    y[40] = 12

    def gen():
        for i in range(0, 64, 16):
            yield x[i:i + 16], y[i:i + 16]
    with pytest.raises(ValueError, match="label value of 12"):
        model.fit(gen(), verbose=0)


def test_unknown_names_list_the_valid_ones():
    m = kiln.Sequential([kiln.Input((8,)), layers.Dense(2)])
    with pytest.raises(ValueError, match=r"Unknown loss 'mse2'.*mean_squared_error"):
        m.compile("adam", "mse2")
    with pytest.raises(ValueError, match=r"Unknown metric 'acuracy'.*accuracy"):
        m.compile("adam", "mse", metrics=["acuracy"])
    with pytest.raises(ValueError, match=r"unknown optimizer 'adamm'.*adam"):
        m.compile("adamm", "mse")
    with pytest.raises(TypeError):
        m.compile("adam", 3)
    assert not m.compiled


def test_validation_split_outside_range(model):
    x, y = blobs(32)
    for bad in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="validation_split"):
            _unchanged(model, lambda b=bad: model.fit(x, y, validation_split=b, verbose=0))


def test_wrong_target_shape_names_the_loss(model):
    x, y = blobs(32)
    onehot = np.eye(10)[y][:, :7]
    with pytest.raises(ValueError, match="sparse_categorical_crossentropy"):
        _unchanged(model, lambda: model.fit(x, onehot, verbose=0))


def test_bad_types_and_values(model):
    x, y = blobs(32)
    with pytest.raises(TypeError, match="numeric"):
        model.fit(np.array([["a"] * 8] * 32), y, verbose=0)
    with pytest.raises(ValueError, match="batch_size"):
        model.fit(x, y, batch_size=0, verbose=0)
    with pytest.raises(ValueError, match="epochs"):
        model.fit(x, y, epochs=-1, verbose=0)
    with pytest.raises(ValueError, match="verbose"):
        model.fit(x, y, verbose=3)
    with pytest.raises(ValueError, match="1 input, but x is a list of 2 arrays"):
        model.fit([x, x], y, verbose=0)
    with pytest.raises(ValueError, match="targets"):
        model.fit(x, verbose=0)


def test_on_batch_fast_path_still_checks(model):
    x, y = blobs(32)
    model.train_on_batch(x, y)
    model.train_on_batch(x.astype(np.float64), y)  # same signature again: the fast path
    bad = y.copy()
    bad[0] = 10
    with pytest.raises(ValueError, match="label value of 10"):
        _unchanged(model, lambda: model.train_on_batch(x, bad))
    with pytest.raises(ValueError, match="cardinality"):
        _unchanged(model, lambda: model.train_on_batch(x, y[:31]))
    with pytest.raises(ValueError, match="features"):
        _unchanged(model, lambda: model.train_on_batch(x[:, :7], y))
