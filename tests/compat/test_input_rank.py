"""A functional ``Input((28, 28, 1))`` takes ``(N, 28, 28)`` data, as Keras does
(``Functional._adjust_input_rank``: one rank short with a last input dimension of 1 gains the
axis; one rank over with a last dimension of 1 loses it): fit / evaluate / predict give what
the ``(N, 28, 28, 1)`` arrays give (the oracle)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

rng = np.random.default_rng(4)
X = rng.random((12, 28, 28)).astype("float32")
Y = np.arange(12) % 10


def _model():
    kiln.utils.set_random_seed(7)
    i = kiln.Input((28, 28, 1))
    h = kiln.layers.Conv2D(2, 3)(i)
    o = kiln.layers.Dense(10)(kiln.layers.Flatten()(h))
    model = kiln.Model(i, o)
    model.compile(kiln.optimizers.SGD(0.05), "sparse_categorical_crossentropy")
    return model


def _run(model, x):
    hist = model.fit(x, Y, batch_size=4, epochs=1, shuffle=False, verbose=0,
                     validation_data=(x, Y)).history
    return hist, model.evaluate(x, Y, verbose=0), model.predict(x, verbose=0)


@pytest.mark.parametrize("x", [X, X[..., None, None]], ids=["rank3", "rank5"])
def test_missing_or_extra_trailing_axis_of_one(x):
    want = _run(_model(), X[..., None])
    got = _run(_model(), x)
    for k in want[0]:
        np.testing.assert_allclose(got[0][k], want[0][k], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-6)


def test_symbolic_call_gains_the_axis():
    model = _model()
    t = kiln.Input((28, 28))
    out = model(t)
    assert out.shape == (None, 10)
    np.testing.assert_allclose(kiln.Model(t, out).predict(X, verbose=0),
                               model.predict(X[..., None], verbose=0), rtol=1e-6)


def test_other_ranks_are_refused():
    model = _model()
    with pytest.raises(ValueError, match=r"expects data of shape \(None, 28, 28, 1\), "
                                         r"received an array of shape \(12, 784\)"):
        model.predict(X.reshape(12, -1), verbose=0)
    with pytest.raises(ValueError, match=r"incompatible with the model: expected shape "
                                         r"\(None, 28, 28, 1\), received \(None, 784\)"):
        model(kiln.Input((784,)))


def test_sequential_symbolic_call_gains_the_axis():
    kiln.utils.set_random_seed(1)
    model = kiln.Sequential([kiln.Input((28, 28, 1)), kiln.layers.Conv2D(2, 3),
                             kiln.layers.Flatten()])
    t = kiln.Input((28, 28))
    out = model(t)
    assert out.shape == (None, 1352)
    np.testing.assert_allclose(kiln.Model(t, out).predict(X, verbose=0),
                               model.predict(X[..., None], verbose=0), rtol=1e-6)
