"""ConvLSTM1D/2D/3D (issue 44): Keras live as the oracle (weights copied over, every output
and state), float64 finite differences, the standard layer checks, kiln's and Keras'
``.keras`` files."""

from __future__ import annotations

import os

import numpy as np
import pytest
from fd_oracle import numeric_grad
from layer_helpers import run_layer_test

import kiln
import kiln.ops as K
from kiln import layers as L
from kiln.saving import load_model

RNG = np.random.default_rng(12)

CASES = [
    ("ConvLSTM1D", {"filters": 3, "kernel_size": 2, "return_sequences": True}, (2, 4, 6, 2)),
    ("ConvLSTM2D", {"filters": 2, "kernel_size": 3, "padding": "same", "return_state": True},
     (2, 3, 5, 4, 2)),
    ("ConvLSTM2D", {"filters": 2, "kernel_size": 2, "strides": 2, "go_backwards": True,
                    "return_sequences": True}, (2, 3, 5, 4, 2)),
    ("ConvLSTM2D", {"filters": 2, "kernel_size": 2, "dilation_rate": 2, "use_bias": False,
                    "unit_forget_bias": False}, (2, 3, 5, 5, 1)),
    ("ConvLSTM3D", {"filters": 2, "kernel_size": 2}, (1, 3, 3, 3, 3, 2)),
]
IDS = [f"{n}-{i}" for i, (n, _, _) in enumerate(CASES)]


@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    return pytest.importorskip("keras")


@pytest.mark.parametrize("name,kwargs,shape", CASES, ids=IDS)
def test_matches_keras(name, kwargs, shape, keras):
    x = RNG.normal(size=shape).astype("float32")
    theirs = getattr(keras.layers, name)(**kwargs)
    want = theirs(x)
    ours = getattr(L, name)(**kwargs)
    ours(x)
    assert [tuple(w.shape) for w in ours.weights] == [tuple(w.shape) for w in theirs.weights]
    ours.set_weights([np.asarray(w) for w in theirs.weights])
    got = ours(x)
    want = want if isinstance(want, list | tuple) else [want]
    got = got if isinstance(got, list | tuple) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-6)


def test_unit_forget_bias_initializes_the_forget_gate_to_one():
    layer = L.ConvLSTM1D(3, 2)
    layer(np.zeros((1, 2, 4, 1), "float32"))
    np.testing.assert_array_equal(layer.weights[2].numpy(), [0] * 3 + [1] * 3 + [0] * 6)


def test_gradient_matches_finite_differences():
    x = RNG.normal(size=(1, 3, 4, 2))
    layer = L.ConvLSTM1D(2, 2, padding="same", return_sequences=True, dtype="float64")
    layer(x)
    layer.set_weights([RNG.normal(size=w.shape) * 0.5 for w in layer.weights])
    xp = kiln.placeholder(x.shape, "float64")
    ct = RNG.normal(size=(1, 3, 4, 2))
    loss = K.sum(layer(xp) * K.constant(ct))
    f = kiln.function([xp], [loss] + kiln.grad(loss, [xp] + list(layer.weights)))
    got = f(x)[1:]
    np.testing.assert_allclose(got[0], numeric_grad(lambda: float(f(x)[0]), x), rtol=1e-6,
                               atol=1e-8)
    for w, g in zip(layer.weights, got[1:]):
        np.testing.assert_allclose(g, numeric_grad(lambda: float(f(x)[0]), w.value),
                                   rtol=1e-6, atol=1e-8)


def test_standard_layer_checks():
    run_layer_test(L.ConvLSTM2D, {"filters": 2, "kernel_size": 2}, (2, 3, 4, 4, 1),
                   (2, 3, 3, 2), 2 * 2 * 1 * 8 + 2 * 2 * 2 * 8 + 8)


@pytest.mark.parametrize("writer", ["kiln", "keras"])
def test_keras_files_round_trip(writer, tmp_path, request):
    x = RNG.normal(size=(2, 3, 5, 4, 2)).astype("float32")
    kwargs = {"filters": 2, "kernel_size": 3, "padding": "same", "return_sequences": True}
    if writer == "keras":
        keras = request.getfixturevalue("keras")
        inp = keras.Input(x.shape[1:])
        model = keras.Model(inp, keras.layers.ConvLSTM2D(**kwargs)(inp))
    else:
        model = kiln.Sequential([kiln.Input(x.shape[1:]), L.ConvLSTM2D(**kwargs)])
    for w in model.weights:
        w.assign(RNG.normal(size=w.shape).astype("float32") * 0.3)
    want = np.asarray(model.predict(x, verbose=0))
    model.save(str(tmp_path / "c.keras"))
    loaded = load_model(str(tmp_path / "c.keras"))
    layer = loaded.layers[-1]
    assert type(layer) is L.ConvLSTM2D and layer.get_config()["kernel_size"] == (3, 3)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make,match", [
    (lambda: L.ConvLSTM2D(2, 3, dropout=0.1), "dropout"),
    (lambda: L.ConvLSTM2D(2, 3, stateful=True), "stateful"),
    (lambda: L.ConvLSTM2D(2, 3, strides=2, dilation_rate=2), "dilation_rate > 1"),
    (lambda: L.ConvLSTM2D(2, 3)(kiln.Input((3, None, 4, 1))), "known spatial"),
])
def test_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()
