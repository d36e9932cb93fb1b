"""fit / evaluate / predict / *_on_batch accept arrays of other libraries (anything with
``__array__``: pandas DataFrame/Series, torch, JAX): each gives exactly what the same data as
NumPy arrays gives (the oracle), validation_split included; a dict of pandas columns feeds a
multi-input model."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

rng = np.random.default_rng(3)
X = rng.normal(size=(40, 3)).astype("float32")
Y = (X.sum(1) > 0).astype("int32")


def _model(seed=1):
    kiln.utils.set_random_seed(seed)
    inp = kiln.Input((3,))
    model = kiln.Model(inp, kiln.layers.Dense(2)(inp))
    model.compile(kiln.optimizers.SGD(0.1), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def _run(model, x, y):
    hist = model.fit(x, y, epochs=2, batch_size=8, shuffle=False, validation_split=0.25,
                     verbose=0).history
    return (hist, model.evaluate(x, y, verbose=0), model.predict(x, verbose=0),
            model.train_on_batch(x, y), model.test_on_batch(x, y),
            model.predict_on_batch(x))


def _same(got, want):
    hist, ev, pred, tob, teb, pob = got
    assert hist.keys() == want[0].keys()
    for k in hist:
        np.testing.assert_allclose(hist[k], want[0][k], rtol=1e-6)
    np.testing.assert_allclose(ev, want[1], rtol=1e-6)
    np.testing.assert_allclose(pred, want[2], rtol=1e-6)
    np.testing.assert_allclose(tob, want[3], rtol=1e-6)
    np.testing.assert_allclose(teb, want[4], rtol=1e-6)
    np.testing.assert_allclose(pob, want[5], rtol=1e-6)


def test_pandas_dataframe_and_series():
    pd = pytest.importorskip("pandas")
    want = _run(_model(), X, Y)
    got = _run(_model(), pd.DataFrame(X, columns=["a", "b", "c"]), pd.Series(Y))
    assert want[0]["val_loss"]  # validation ran
    _same(got, want)


def test_torch_tensors_including_requires_grad():
    torch = pytest.importorskip("torch")
    want = _run(_model(), X, Y)
    got = _run(_model(), torch.tensor(X, requires_grad=True), torch.tensor(Y))
    _same(got, want)


def test_jax_arrays():
    jnp = pytest.importorskip("jax.numpy")
    want = _run(_model(), X, Y)
    _same(_run(_model(), jnp.asarray(X), jnp.asarray(Y)), want)


def test_dict_of_pandas_columns_feeds_a_multi_input_model():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(X, columns=["a", "b", "c"])

    def build():
        kiln.utils.set_random_seed(2)
        ins = [kiln.Input((1,), name=n) for n in "abc"]
        out = kiln.layers.Dense(2)(kiln.layers.Concatenate()(ins))
        model = kiln.Model(ins, out)
        model.compile(kiln.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
        return model

    want = build().fit({n: X[:, i:i + 1] for i, n in enumerate("abc")}, Y, epochs=1,
                       batch_size=8, shuffle=False, verbose=0).history["loss"]
    # pandas Series are 1-D: Keras (and kiln) add the missing trailing axis of 1
    got = build().fit({n: df[n] for n in "abc"}, pd.Series(Y), epochs=1, batch_size=8,
                      shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tensorflow_tensors():
    tf = pytest.importorskip("tensorflow")
    want = _run(_model(), X, Y)
    _same(_run(_model(), tf.constant(X), tf.constant(Y)), want)


def test_a_generator_is_still_iterated():
    model = _model()

    def batches():
        for i in range(0, 40, 8):
            yield X[i:i + 8], Y[i:i + 8]

    hist = model.fit(batches(), epochs=1, verbose=0).history
    assert len(hist["loss"]) == 1
    with pytest.raises(ValueError, match="when x is a generator/iterable, y must be None"):
        model.fit(batches(), Y, verbose=0)
