"""SpectralNormalization (issue 44): Keras live in training mode (weights copied by name),
a NumPy power iteration for Embedding (Keras 3.15 casts that output to the ids' int dtype),
the largest singular value after many iterations, fit updating ``vector_u``, Keras-written
and kiln-written ``.keras`` files."""

from __future__ import annotations

import os

import numpy as np
import pytest

import kiln
from kiln import layers as L
from kiln.saving import load_model

RNG = np.random.default_rng(21)


@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    return pytest.importorskip("keras")


def _copy_by_name(ours, theirs):
    by = {w.path.split("/")[-1]: np.asarray(w) for w in theirs.weights}
    for w in ours.weights:
        w.assign(by[w.name.split("/")[-1]])


@pytest.mark.parametrize("make,shape", [
    (lambda m: m.layers.Dense(4), (3, 5)),
    (lambda m: m.layers.Conv2D(3, 2), (2, 5, 5, 2)),
], ids=["Dense", "Conv2D"])
@pytest.mark.parametrize("iterations", [1, 3])
def test_training_call_matches_keras(make, shape, iterations, keras):
    x = RNG.normal(size=shape).astype("float32")
    theirs = keras.layers.SpectralNormalization(make(keras), power_iterations=iterations)
    theirs(x)
    for w in theirs.weights:
        w.assign(RNG.normal(size=w.shape).astype("float32"))
    ours = L.SpectralNormalization(make(kiln), power_iterations=iterations)
    ours(x)
    _copy_by_name(ours, theirs)
    want = np.asarray(theirs(x, training=True))
    np.testing.assert_allclose(ours(x, training=True), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.vector_u.numpy(), np.asarray(theirs.vector_u), rtol=1e-5,
                               atol=1e-6)


def _power(w, u, n):
    for _ in range(n):
        v = u @ w.T
        v = v / np.linalg.norm(v)
        u = v @ w
        u = u / np.linalg.norm(u)
    return u, (v @ w @ u.T).item()


def test_embedding_and_the_largest_singular_value():
    ids = RNG.integers(0, 10, size=(2, 3))
    layer = L.SpectralNormalization(L.Embedding(10, 4), power_iterations=50)
    layer(ids)
    e = RNG.normal(size=(10, 4)).astype("float32")
    u0 = RNG.normal(size=(1, 4)).astype("float32")
    layer.layer.embeddings.assign(e)
    layer.vector_u.assign(u0)
    u, sigma = _power(e.astype("float64"), u0.astype("float64"), 50)
    np.testing.assert_allclose(sigma, np.linalg.svd(e, compute_uv=False)[0], rtol=1e-4)
    np.testing.assert_allclose(layer(ids, training=True), (e / sigma)[ids], rtol=1e-4)
    np.testing.assert_allclose(layer.vector_u.numpy(), u, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(layer(ids, training=False), (e / sigma)[ids], rtol=1e-4)


def test_fit_updates_vector_u_and_trains_the_kernel(tmp_path):
    model = kiln.Sequential([kiln.Input((5,)), L.SpectralNormalization(L.Dense(3)),
                             L.Dense(1)])
    sn = model.layers[0]
    assert [w.name.split("/")[-1] for w in sn.weights] == ["kernel", "bias", "vector_u"]
    u0, k0 = sn.vector_u.numpy(), sn.layer.kernel.numpy()
    x = RNG.normal(size=(16, 5)).astype("float32")
    model.compile("sgd", "mse")
    model.fit(x, RNG.normal(size=(16, 1)).astype("float32"), epochs=2, verbose=0)
    assert not np.allclose(sn.vector_u.numpy(), u0)
    assert not np.allclose(sn.layer.kernel.numpy(), k0)
    want = model.predict(x, verbose=0)
    model.save(str(tmp_path / "s.keras"))
    loaded = load_model(str(tmp_path / "s.keras"))
    assert loaded.layers[0].get_config()["power_iterations"] == 1
    np.testing.assert_allclose(loaded.predict(x, verbose=0), want, rtol=1e-6)


def test_keras_written_file_loads(keras, tmp_path):
    inp = keras.Input((5,))
    km = keras.Model(inp, keras.layers.SpectralNormalization(keras.layers.Dense(4),
                                                             power_iterations=2)(inp))
    for w in km.weights:
        w.assign(RNG.normal(size=w.shape).astype("float32"))
    km.save(str(tmp_path / "k.keras"))
    ours = load_model(str(tmp_path / "k.keras"))
    sn = ours.layers[-1]
    np.testing.assert_array_equal(sn.vector_u.numpy(), np.asarray(km.layers[-1].vector_u))
    np.testing.assert_array_equal(sn.layer.kernel.numpy(),
                                  np.asarray(km.layers[-1].layer.kernel))


def test_errors():
    with pytest.raises(ValueError, match="power_iterations"):
        L.SpectralNormalization(L.Dense(2), power_iterations=0)
    with pytest.raises(ValueError, match="no attribute 'kernel' nor 'embeddings'"):
        L.SpectralNormalization(L.ReLU())(np.ones((2, 3), "float32"))
