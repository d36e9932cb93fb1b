"""``ignore_class`` in sparse categorical cross-entropy: the loss object averages over the kept
entries (Keras' mask on the loss values), the function returns 0 for ignored entries, the
metric averages over all entries. Expected numbers computed once with Keras 3.15.1 (the same
on the numpy, jax and tensorflow backends):

    y = [0, 2, 1, 2, 0, 1]; p = P below; sw = [1, 2, 3, 1, .5, 2]
    keras.losses.SparseCategoricalCrossentropy(ignore_class=2)(y, p)  -> 0.4459477961063385
    ... (y, p, sample_weight=sw)  -> 0.7844541072845459
    keras.losses.SparseCategoricalCrossentropy(ignore_class=2, reduction="sum")
        -> 1.7837913036346436
    keras.losses.sparse_categorical_crossentropy(y, p, ignore_class=2)
        -> [0.35667494, 0, 0.69314718, 0, 0.51082557, 0.22314353]
    keras.metrics.SparseCategoricalCrossentropy(ignore_class=2): update(y, p)
        -> 0.2972985506057739
    ... update(y, p, sample_weight=sw)  -> 0.48274099826812744
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln

Y = np.array([0, 2, 1, 2, 0, 1], "int32")
P = np.array([[.7, .2, .1], [.1, .3, .6], [.2, .5, .3], [.3, .3, .4], [.6, .1, .3],
              [.1, .8, .1]], "float32")
SW = np.array([1, 2, 3, 1, .5, 2], "float32")


def test_loss_object_averages_over_kept_entries():
    loss = kiln.losses.SparseCategoricalCrossentropy(ignore_class=2)
    assert float(loss(Y, P)) == pytest.approx(0.4459477961063385, rel=1e-5)
    assert float(loss(Y, P, sample_weight=SW)) == pytest.approx(0.7844541072845459, rel=1e-5)
    total = kiln.losses.SparseCategoricalCrossentropy(ignore_class=2, reduction="sum")
    assert float(total(Y, P)) == pytest.approx(1.7837913036346436, rel=1e-5)
    # NumPy oracle for the mean: -log p[label] over the kept rows only
    kept = Y != 2
    want = -np.log(P[np.arange(6), Y])[kept].mean()
    assert float(loss(Y, P)) == pytest.approx(want, rel=1e-5)


def test_function_zeroes_ignored_entries():
    got = np.asarray(kiln.losses.sparse_categorical_crossentropy(Y, P, ignore_class=2))
    np.testing.assert_allclose(got, [0.35667494, 0, 0.69314718, 0, 0.51082557, 0.22314353],
                               rtol=1e-5, atol=1e-7)


def test_metric_averages_over_all_entries():
    m = kiln.metrics.SparseCategoricalCrossentropy(ignore_class=2)
    m.update_state(Y[:3], P[:3])
    m.update_state(Y[3:], P[3:])
    assert float(m.result()) == pytest.approx(0.2972985506057739, rel=1e-5)
    m = kiln.metrics.SparseCategoricalCrossentropy(ignore_class=2)
    m.update_state(Y, P, sample_weight=SW)
    assert float(m.result()) == pytest.approx(0.48274099826812744, rel=1e-5)
    assert m.get_config()["ignore_class"] == 2


def test_fit_loss_is_the_mean_over_kept_entries():
    # A model whose output is a fixed softmax of its input (Dense with identity kernel, no
    # bias, learning rate 0): the logged loss is the Keras loss of those predictions.
    logits = np.log(P)
    inputs = kiln.Input((3,))
    outputs = kiln.layers.Dense(3, use_bias=False, kernel_initializer="identity",
                                activation="softmax")(inputs)
    model = kiln.Model(inputs, outputs)
    model.compile(optimizer=kiln.optimizers.SGD(0.0),
                  loss=kiln.losses.SparseCategoricalCrossentropy(ignore_class=2))
    hist = model.fit(logits, Y, batch_size=6, epochs=1, verbose=0)
    assert hist.history["loss"][0] == pytest.approx(0.4459477961063385, rel=1e-4)


def test_functional_loss_in_compile_and_metric_in_fit():
    inputs = kiln.Input((3,))
    outputs = kiln.layers.Dense(3, use_bias=False, kernel_initializer="identity",
                                activation="softmax")(inputs)
    model = kiln.Model(inputs, outputs)
    model.compile(optimizer=kiln.optimizers.SGD(0.0),
                  loss=lambda t, p: kiln.losses.sparse_categorical_crossentropy(
                      t, p, ignore_class=2),
                  metrics=[kiln.metrics.SparseCategoricalCrossentropy(ignore_class=2)])
    loss, metric = model.evaluate(np.log(P), Y, batch_size=3, verbose=0)
    assert loss == pytest.approx(0.4459477961063385, rel=1e-5)
    assert metric == pytest.approx(0.2972985506057739, rel=1e-5)
