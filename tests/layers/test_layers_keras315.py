"""ActivityRegularization, AlphaDropout, RMSNormalization, InputSpec, Wrapper, Pipeline and
the foreign-framework layers (issue 44): NumPy / Keras oracles, closed-form statistics for
AlphaDropout, the standard layer checks and ``.keras`` round trips."""

from __future__ import annotations

import os

import numpy as np
import pytest
from fd_oracle import numeric_grad
from layer_helpers import run_layer_test
from test_more_layers_saving import test_keras_file_round_trip as _round_trip

import kiln
import kiln.ops as K
from kiln import layers as L
from kiln.layers.context import trace
from kiln.saving import load_model

RNG = np.random.default_rng(315)

CASES = [
    (L.RMSNormalization, {}, (2, 3, 5), (2, 3, 5), 5, [(5,)]),
    (L.RMSNormalization, {"axis": [1, 2], "epsilon": 1e-3}, (2, 3, 4), (2, 3, 4), 12,
     [(3, 4)]),
    (L.RMSNormalization, {"axis": 1}, (2, 3, 4), (2, 3, 4), 3, [(3,)]),
    (L.ActivityRegularization, {"l1": 0.01, "l2": 0.1}, (2, 5), (2, 5), 0, []),
    (L.AlphaDropout, {"rate": 0.2, "seed": 3}, (2, 5), (2, 5), 0, []),
    (L.AlphaDropout, {"rate": 0.2, "noise_shape": [None, 1, 4]}, (2, 3, 4), (2, 3, 4), 0, []),
]
IDS = [f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_standard_layer_checks(case):
    cls, kwargs, in_shape, out_shape, params, _ = case
    run_layer_test(cls, kwargs, in_shape, out_shape, params)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_keras_file_round_trip(case, tmp_path):
    _round_trip(case, tmp_path)


@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    return pytest.importorskip("keras")


@pytest.mark.parametrize("kwargs", [{}, {"axis": [1, 2], "epsilon": 1e-3}])
def test_rms_normalization_matches_keras(kwargs, keras):
    x = RNG.normal(size=(2, 3, 4)).astype("float32")
    theirs = keras.layers.RMSNormalization(**kwargs)
    theirs(x)
    scale = RNG.normal(size=theirs.scale.shape).astype("float32")
    theirs.scale.assign(scale)
    ours = L.RMSNormalization(**kwargs)
    ours(x)
    ours.set_weights([scale])
    np.testing.assert_allclose(ours(x), np.asarray(theirs(x)), rtol=1e-5, atol=1e-6)


def test_rms_normalization_on_a_middle_axis_matches_numpy():
    """axis=1 of a rank-3 input: the scale broadcasts along that axis (Keras 3.15's own
    layer fails to broadcast it there, so NumPy is the oracle)."""
    x = RNG.normal(size=(2, 3, 4))
    layer = L.RMSNormalization(axis=1, dtype="float64")
    layer(x)
    scale = RNG.normal(size=(3,))
    layer.set_weights([scale])
    want = x / np.sqrt(np.mean(x**2, axis=1, keepdims=True) + 1e-6) * scale[:, None]
    np.testing.assert_allclose(layer(x), want, rtol=1e-12)


def test_rms_normalization_gradient_matches_finite_differences():
    x = RNG.normal(size=(3, 4))
    layer = L.RMSNormalization(dtype="float64")
    layer(x)
    layer.set_weights([RNG.normal(size=(4,))])
    xp = kiln.placeholder(x.shape, "float64")
    ct = RNG.normal(size=x.shape)
    loss = K.sum(layer(xp) * K.constant(ct))
    f = kiln.function([xp], [loss] + kiln.grad(loss, [xp, layer.scale]))
    gx, gs = f(x)[1:]
    np.testing.assert_allclose(gx, numeric_grad(lambda: float(f(x)[0]), x), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(gs, numeric_grad(lambda: float(f(x)[0]), layer.scale.value),
                               rtol=1e-6, atol=1e-8)


def test_activity_regularization_adds_the_l1_l2_penalty_over_the_batch():
    layer = L.ActivityRegularization(l1=0.01, l2=0.1)
    x = kiln.placeholder((None, 3))
    with trace(training=True) as ctx:
        y = layer(x)
    data = RNG.normal(size=(5, 3)).astype("float32")
    out, penalty = kiln.function([x], [y, ctx.losses[0]], backend="reference")(data)
    np.testing.assert_array_equal(out, data)
    want = (0.01 * np.abs(data).sum() + 0.1 * np.square(data).sum()) / 5
    np.testing.assert_allclose(penalty, want, rtol=1e-5)
    assert L.ActivityRegularization.from_config(layer.get_config()).l2 == 0.1
    assert "activity_regularizer" not in layer.get_config()


def test_alpha_dropout_keeps_selu_mean_and_variance():
    """Keras' affine correction: for standard-normal inputs the output keeps mean 0 and
    variance 1 (the fixed point of SELU networks); dropped values all equal a*alpha_p + b."""
    rate = 0.3
    x = RNG.normal(size=(200, 500)).astype("float64")
    layer = L.AlphaDropout(rate, seed=7, dtype="float64")
    y = np.asarray(layer(x, training=True))
    assert abs(y.mean()) < 0.02 and abs(y.var() - 1.0) < 0.03
    alpha_p = -1.6732632423543772848170429916717 * 1.0507009873554804934193349852946
    a = ((1 - rate) * (1 + rate * alpha_p**2)) ** -0.5
    b = -a * alpha_p * rate
    dropped = np.isclose(y, a * alpha_p + b)
    assert abs(dropped.mean() - rate) < 0.01
    np.testing.assert_allclose(y[~dropped], a * x[~dropped] + b, rtol=1e-12)
    np.testing.assert_array_equal(layer(x, training=False), x)


def test_alpha_dropout_is_reproducible_under_set_random_seed():
    x = RNG.normal(size=(4, 50))
    runs = []
    for _ in range(2):
        kiln.utils.set_random_seed(11)
        runs.append(np.asarray(L.AlphaDropout(0.4, seed=5, dtype="float64")(x, training=True)))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], x)


def test_alpha_dropout_rate_errors():
    with pytest.raises(ValueError, match="between 0 and 1"):
        L.AlphaDropout(1.5)


def test_input_spec_checks_inputs_with_keras_messages():
    class Needs3(L.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.input_spec = L.InputSpec(ndim=3, axes={-1: 4})

        def call(self, x):
            return x

    layer = Needs3(name="needs3")
    assert layer(kiln.Input((2, 4))).shape == (None, 2, 4)
    with pytest.raises(ValueError, match='Input 0 of layer "needs3" is incompatible with the '
                       'layer: expected ndim=3, found ndim=2'):
        layer(kiln.Input((4,)))
    with pytest.raises(ValueError, match="expected axis -1 of input shape to have value 4"):
        layer(kiln.Input((2, 5)))
    spec = L.InputSpec(shape=(None, 28, 28), dtype="float32")
    assert spec.ndim == 3 and repr(spec) == "InputSpec(dtype=float32, shape=(None, 28, 28), " \
        "ndim=3)"
    assert L.InputSpec.from_config(spec.get_config()).get_config() == spec.get_config()
    with pytest.raises(TypeError, match="integer keys"):
        L.InputSpec(axes={"a": 1})


class Doubled(L.Wrapper):
    def call(self, x):
        return 2.0 * self.layer(x)


def test_wrapper_builds_and_serializes_its_layer():
    x = RNG.normal(size=(2, 3)).astype("float32")
    inner = L.Dense(4)
    w = Doubled(inner)
    y = w(x)
    np.testing.assert_allclose(y, 2.0 * np.asarray(inner(x)), rtol=1e-6)
    assert [v.name.split("/")[-1] for v in w.weights] == ["kernel", "bias"]
    again = Doubled.from_config(w.get_config())
    assert again.layer.get_config()["units"] == 4
    plain = L.Wrapper(L.Dense(2))
    assert plain(x).shape == (2, 2)
    with pytest.raises(ValueError, match="isn't a supported layer type"):
        L.Wrapper("dense")


def test_pipeline_applies_in_order_and_round_trips(tmp_path):
    x = RNG.normal(size=(4, 3)).astype("float32")
    pipe = L.Pipeline([L.Rescaling(2.0, offset=1.0), L.Dense(2), L.ReLU()])
    want = np.maximum(np.asarray(pipe.layers[1](2.0 * x + 1.0)), 0)
    np.testing.assert_allclose(pipe(x), want, rtol=1e-6)
    model = kiln.Sequential([kiln.Input((3,)), pipe])
    model.save(str(tmp_path / "p.keras"))
    loaded = load_model(str(tmp_path / "p.keras"))
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6)
    assert [type(la).__name__ for la in loaded.layers[-1].layers] == ["Rescaling", "Dense",
                                                                       "ReLU"]
    with pytest.raises(ValueError, match="layers"):
        L.Pipeline.from_config({"name": "p"})


@pytest.mark.parametrize("cls,framework", [(L.JaxLayer, "JAX"), (L.FlaxLayer, "Flax"),
                                           (L.TorchModuleWrapper, "PyTorch"),
                                           (L.TFSMLayer, "TensorFlow SavedModel")])
def test_foreign_framework_layers_explain_that_kiln_cannot_host_them(cls, framework):
    with pytest.raises(NotImplementedError, match=f"{cls.__name__}: kiln cannot host "
                       f"{framework} code"):
        cls(lambda x: x)
    with pytest.raises(NotImplementedError, match="cannot host"):
        L.deserialize({"class_name": cls.__name__, "config": {}})
