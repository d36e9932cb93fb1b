"""Every layer added for issue 15 (item 4) through the standard layer checks (shape, params,
eager call, get_config/from_config, a training step: ``run_layer_test``) and through a
``.keras`` file: a model holding it is saved, loaded, and predicts the same numbers with the
same weights (names, shapes and Keras' weight order)."""

from __future__ import annotations

import json
import re
import zipfile

import h5py
import numpy as np
import pytest
from layer_helpers import run_layer_test

import kiln
from kiln import layers as L
from kiln.saving import load_model

# (class, kwargs, input shape with batch, expected output shape, params, weight shapes)
CASES = [
    (L.Conv2D, {"filters": 6, "kernel_size": 3, "groups": 2}, (2, 5, 5, 4), (2, 3, 3, 6),
     3 * 3 * 2 * 6 + 6, [(3, 3, 2, 6), (6,)]),
    (L.Conv1D, {"filters": 4, "kernel_size": 2, "groups": 4, "padding": "causal"}, (2, 6, 4),
     (2, 6, 4), 2 * 1 * 4 + 4, [(2, 1, 4), (4,)]),
    (L.DepthwiseConv2D, {"kernel_size": 3, "depth_multiplier": 2, "padding": "same"},
     (2, 5, 5, 3), (2, 5, 5, 6), 3 * 3 * 3 * 2 + 6, [(3, 3, 3, 2), (6,)]),
    (L.DepthwiseConv1D, {"kernel_size": 3, "strides": 2}, (2, 7, 3), (2, 3, 3), 3 * 3 + 3,
     [(3, 3, 1), (3,)]),
    (L.SeparableConv2D, {"filters": 4, "kernel_size": 2, "depth_multiplier": 2},
     (2, 5, 5, 3), (2, 4, 4, 4), 2 * 2 * 3 * 2 + 6 * 4 + 4, [(2, 2, 3, 2), (1, 1, 6, 4), (4,)]),
    (L.SeparableConv1D, {"filters": 5, "kernel_size": 3, "padding": "same"}, (2, 6, 3),
     (2, 6, 5), 3 * 3 + 3 * 5 + 5, [(3, 3, 1), (1, 3, 5), (5,)]),
    (L.Conv1DTranspose, {"filters": 3, "kernel_size": 3, "strides": 2}, (2, 4, 2), (2, 9, 3),
     3 * 3 * 2 + 3, [(3, 3, 2), (3,)]),
    (L.ReLU, {"max_value": 1.5, "negative_slope": 0.1, "threshold": 0.2}, (2, 5), (2, 5), 0,
     []),
    (L.LeakyReLU, {"negative_slope": 0.2}, (2, 5), (2, 5), 0, []),
    (L.ELU, {"alpha": 0.7}, (2, 5), (2, 5), 0, []),
    (L.PReLU, {"shared_axes": [1], "alpha_initializer": "ones"}, (2, 4, 3), (2, 4, 3), 3,
     [(1, 3)]),
    (L.Softmax, {"axis": [1, 2]}, (2, 3, 4), (2, 3, 4), 0, []),
    (L.Identity, {}, (2, 5), (2, 5), 0, []),
    (L.Cropping1D, {"cropping": (1, 2)}, (2, 6, 3), (2, 3, 3), 0, []),
    (L.Cropping2D, {"cropping": ((1, 0), (1, 2))}, (2, 5, 6, 2), (2, 4, 3, 2), 0, []),
    (L.ZeroPadding1D, {"padding": (2, 1)}, (2, 4, 3), (2, 7, 3), 0, []),
    (L.UpSampling1D, {"size": 3}, (2, 4, 3), (2, 12, 3), 0, []),
    (L.GaussianNoise, {"stddev": 0.1, "seed": 3}, (2, 5), (2, 5), 0, []),
    (L.GaussianDropout, {"rate": 0.3, "seed": 4}, (2, 5), (2, 5), 0, []),
    (L.SpatialDropout1D, {"rate": 0.3, "seed": 5}, (2, 4, 3), (2, 4, 3), 0, []),
    (L.SpatialDropout2D, {"rate": 0.3}, (2, 4, 4, 3), (2, 4, 4, 3), 0, []),
    (L.UnitNormalization, {"axis": [1, 2]}, (2, 3, 4), (2, 3, 4), 0, []),
    (L.GroupNormalization, {"groups": 2, "epsilon": 1e-2}, (2, 3, 3, 4), (2, 3, 3, 4), 8,
     [(4,), (4,)]),
]
IDS = [c[0].__name__ for c in CASES]


def keras_snake_case(name: str) -> str:
    """Keras' ``naming.to_snake_case``: the key of a layer in a ``.weights.h5`` file."""
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_standard_layer_checks(case):
    cls, kwargs, in_shape, out_shape, params, _ = case
    run_layer_test(cls, kwargs, in_shape, out_shape, params)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_keras_file_round_trip(case, tmp_path):
    cls, kwargs, in_shape, _, _, weight_shapes = case
    layer = cls(**kwargs)
    model = kiln.Sequential([kiln.Input(in_shape[1:]), layer])
    rng = np.random.default_rng(0)
    # non-default weights, so that a load that kept the initial values would fail
    model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.weights])
    assert [tuple(w.shape) for w in layer.weights] == weight_shapes
    x = rng.normal(size=in_shape).astype("float32")
    want = model.predict(x, verbose=0)
    path = tmp_path / "m.keras"
    model.save(str(path))
    with zipfile.ZipFile(path) as zf:
        config = json.loads(zf.read("config.json"))
        entry = config["config"]["layers"][-1]
        assert entry["class_name"] == cls.__name__
        assert entry["module"] == "keras.layers"
        with zf.open("model.weights.h5") as f, h5py.File(f, "r") as h5:
            (key,) = [k for k in h5["layers"] if k != "input_layer"]
            assert key == keras_snake_case(cls.__name__)  # e.g. p_re_lu, depthwise_conv2d
            stored = h5["layers"][key]["vars"]
            assert sorted(stored, key=int) == [str(i) for i in range(len(weight_shapes))]
            for i, w in enumerate(layer.weights):
                np.testing.assert_array_equal(stored[str(i)][()], w.numpy())
    loaded = load_model(str(path))
    again = loaded.layers[-1]
    assert type(again) is cls
    assert again.get_config() == {**layer.get_config(), "name": again.name}
    np.testing.assert_allclose(loaded.predict(x, verbose=0), want, rtol=1e-6, atol=1e-6)


def test_dot_keras_file_round_trip(tmp_path):
    a, b = kiln.Input((3, 4), name="a"), kiln.Input((4, 5), name="b")
    model = kiln.Model([a, b], L.dot([a, b], axes=(2, 1), normalize=True))
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(2, 3, 4)).astype("float32"), rng.normal(size=(2, 4, 5)).astype(
        "float32")]
    want = model.predict(xs, verbose=0)
    model.save(str(tmp_path / "d.keras"))
    loaded = load_model(str(tmp_path / "d.keras"))
    dots = [la for la in loaded.layers if isinstance(la, L.Dot)]
    assert len(dots) == 1 and dots[0].axes == [2, 1] and dots[0].normalize
    np.testing.assert_allclose(loaded.predict(xs, verbose=0), want, rtol=1e-6, atol=1e-6)


def test_constraints_apply_after_each_step_and_survive_a_keras_file(tmp_path):
    model = kiln.Sequential([
        kiln.Input((5, 5, 2)),
        L.DepthwiseConv2D(3, depthwise_constraint="non_neg", bias_constraint="non_neg",
                          bias_initializer="random_normal"),
        L.SeparableConv2D(2, 2, pointwise_constraint="non_neg"),
        L.GroupNormalization(2, gamma_constraint="non_neg"),
        L.PReLU(alpha_constraint="non_neg"),
        L.Flatten(), L.Dense(1)])
    rng = np.random.default_rng(2)
    model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.weights])
    x = rng.normal(size=(8, 5, 5, 2)).astype("float32")
    constrained = [model.layers[0].kernel, model.layers[0].bias,
                   model.layers[1].pointwise_kernel, model.layers[2].gamma, model.layers[3].alpha]
    free = model.layers[1].depthwise_kernel
    for w in constrained + [free]:  # all negative: a small SGD step keeps them negative
        w.assign(-0.5 - np.abs(w.numpy()))
    model.compile(kiln.optimizers.SGD(1e-3), "mse")
    model.fit(x, rng.normal(size=(8, 1)).astype("float32"), epochs=1, batch_size=8, verbose=0)
    for w in constrained:  # NonNeg projects them to 0 after the update
        np.testing.assert_array_equal(w.numpy(), 0.0, err_msg=w.name)
    assert free.numpy().max() < 0  # unconstrained: updated, still negative
    model.save(str(tmp_path / "c.keras"))
    loaded = load_model(str(tmp_path / "c.keras"))
    for a, b in zip(model.layers, loaded.layers):
        assert a.get_config() == {**b.get_config(), "name": a.name}
    assert loaded.layers[0].get_config()["depthwise_constraint"]["class_name"] == "NonNeg"
