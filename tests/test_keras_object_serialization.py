"""kiln.utils / kiln.saving ``serialize_keras_object`` / ``deserialize_keras_object``:
Keras' dict format, round trips with Keras' own serialize on the same objects, registration
and custom objects, and refusal of stored code."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
import kiln.saving as S
import kiln.utils as U


def _close(a, b):
    """Configs equal, floats compared in float32 (Keras stores learning rates as float32)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = (set(a) | set(b)) - {"dtype"}  # kiln keeps a policy name, Keras a dict
        return all(_close(a.get(k), b.get(k)) for k in keys)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return np.float32(a) == np.float32(b)
    return a == b


def _pairs(keras):
    return [
        (kiln.layers.Dense(3, activation="relu", name="d"),
         keras.layers.Dense(3, activation="relu", name="d")),
        (kiln.losses.MeanSquaredError(), keras.losses.MeanSquaredError()),
        (kiln.metrics.MeanAbsoluteError(), keras.metrics.MeanAbsoluteError()),
        (kiln.optimizers.Adam(0.01, name="opt"), keras.optimizers.Adam(0.01, name="opt")),
        (kiln.initializers.GlorotUniform(seed=1), keras.initializers.GlorotUniform(seed=1)),
        (kiln.regularizers.L2(0.1), keras.regularizers.L2(0.1)),
        (kiln.constraints.MaxNorm(2.0), keras.constraints.MaxNorm(2.0)),
        (kiln.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9),
         keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)),
    ]


def test_kiln_format_is_keras_format():
    keras = pytest.importorskip("keras")
    for ours, theirs in _pairs(keras):
        mine = json.loads(json.dumps(U.serialize_keras_object(ours)))
        ref = keras.saving.serialize_keras_object(theirs)
        assert {k: mine[k] for k in ("module", "class_name", "registered_name")} == \
            {k: ref[k] for k in ("module", "class_name", "registered_name")}, ref["class_name"]
        assert _close(mine["config"], ref["config"]), (mine, ref)


def test_round_trip_through_keras_both_ways():
    keras = pytest.importorskip("keras")
    for ours, theirs in _pairs(keras):
        # Keras' dict -> kiln object
        rebuilt = U.deserialize_keras_object(keras.saving.serialize_keras_object(theirs))
        assert type(rebuilt) is type(ours)
        assert _close(rebuilt.get_config(), ours.get_config())
        # kiln's dict -> Keras object
        back = keras.saving.deserialize_keras_object(
            json.loads(json.dumps(U.serialize_keras_object(ours))))
        assert type(back) is type(theirs)
        assert _close(back.get_config(), theirs.get_config())


def test_functions_round_trip_with_keras():
    keras = pytest.importorskip("keras")
    for ours, theirs in ((kiln.activations.relu, keras.activations.relu),
                         (kiln.losses.mean_squared_error, keras.losses.mean_squared_error)):
        assert U.serialize_keras_object(ours) == keras.saving.serialize_keras_object(theirs)
        assert U.deserialize_keras_object(keras.saving.serialize_keras_object(theirs)) is ours
        assert keras.saving.deserialize_keras_object(U.serialize_keras_object(ours)) is theirs


def test_round_trips_without_keras():
    for obj in (kiln.layers.Conv2D(4, 3, padding="same", name="c"), kiln.optimizers.SGD(0.5),
                kiln.losses.Huber(delta=2.0), kiln.metrics.AUC(num_thresholds=50),
                kiln.initializers.Constant(3.0), kiln.regularizers.L1L2(0.1, 0.2)):
        config = json.loads(json.dumps(S.serialize_keras_object(obj)))
        rebuilt = S.deserialize_keras_object(config)
        assert type(rebuilt) is type(obj) and rebuilt.get_config() == obj.get_config()
    assert U.deserialize_keras_object(U.serialize_keras_object(kiln.activations.gelu)) is \
        kiln.activations.gelu
    values = [1, "a", None, [1.5, (2, 3)], {"k": [True]}]
    assert U.deserialize_keras_object(U.serialize_keras_object(values)) == \
        [1, "a", None, [1.5, [2, 3]], {"k": [True]}]
    array = np.arange(6, dtype="int16").reshape(2, 3)
    entry = U.serialize_keras_object(array)
    assert entry == {"class_name": "__numpy__",
                     "config": {"value": [[0, 1, 2], [3, 4, 5]], "dtype": "int16"}}
    back = U.deserialize_keras_object(entry)
    assert back.dtype == np.int16 and np.array_equal(back, array)
    assert U.deserialize_keras_object(U.serialize_keras_object(b"\xc3\xa9")) == b"\xc3\xa9"
    assert U.deserialize_keras_object(U.serialize_keras_object(slice(1, None, 2))) == \
        slice(1, None, 2)


def test_a_functional_model_round_trips():
    inputs = kiln.Input((4,), name="x")
    model = kiln.Model(inputs, kiln.layers.Dense(2, name="out")(
        kiln.layers.Dense(3, activation="tanh", name="hidden")(inputs)), name="net")
    config = json.loads(json.dumps(U.serialize_keras_object(model)))
    assert config["class_name"] == "Functional" and config["module"] == \
        "keras.src.models.functional"
    rebuilt = U.deserialize_keras_object(config)
    assert [layer.name for layer in rebuilt.layers] == ["x", "hidden", "out"]
    rebuilt.set_weights(model.get_weights())
    x = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    np.testing.assert_allclose(rebuilt.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6)


@U.register_keras_serializable(package="names2_test")
class Scale(kiln.layers.Layer):
    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


class Unregistered(kiln.layers.Layer):
    def __init__(self, k=1, **kwargs):
        super().__init__(**kwargs)
        self.k = k

    def get_config(self):
        return {**super().get_config(), "k": self.k}


def test_registered_and_custom_objects():
    assert U.get_registered_name(Scale) == "names2_test>Scale"
    assert U.get_registered_object("names2_test>Scale") is Scale
    assert U.get_custom_objects()["names2_test>Scale"] is Scale
    config = U.serialize_keras_object(Scale(3.0, name="s"))
    assert config["registered_name"] == "names2_test>Scale"
    rebuilt = U.deserialize_keras_object(config)
    assert isinstance(rebuilt, Scale) and rebuilt.factor == 3.0 and rebuilt.name == "s"

    config = U.serialize_keras_object(Unregistered(k=5))
    config["module"] = "somewhere.never.imported"
    with pytest.raises(ValueError, match="unknown class 'Unregistered'.*custom_objects"):
        U.deserialize_keras_object(config)
    assert U.deserialize_keras_object(config, custom_objects={"Unregistered": Unregistered}).k \
        == 5
    with U.custom_object_scope({"Unregistered": Unregistered}):
        assert U.deserialize_keras_object(config).k == 5
    with S.CustomObjectScope({"Unregistered": Unregistered}) as scope:
        assert scope.custom_objects == {"Unregistered": Unregistered}
        assert U.get_registered_object("Unregistered") is Unregistered
    assert U.get_registered_object("Unregistered") is None
    with pytest.raises(TypeError, match="CustomObjectScope: expected a dict"):
        U.CustomObjectScope("Unregistered")


def test_stored_code_and_unknown_modules_are_refused():
    lam = {"class_name": "__lambda__", "config": {"value": "ZGVmIGYoKTogcGFzcw=="}}
    for safe_mode in (True, False):
        with pytest.raises(ValueError, match="never executes stored code"):
            U.deserialize_keras_object(lam, safe_mode=safe_mode)
    with pytest.raises(ValueError, match="unknown function 'system'"):
        U.deserialize_keras_object({"module": "os", "class_name": "function",
                                    "config": "system", "registered_name": "function"})
    with pytest.raises(ValueError, match="unknown class 'Popen'"):
        U.deserialize_keras_object({"module": "subprocess", "class_name": "Popen",
                                    "config": {}, "registered_name": None})
    with pytest.raises(ValueError, match="cannot serialize the lambda"):
        U.serialize_keras_object(lambda x: x)
    with pytest.raises(TypeError, match="it has no get_config"):
        U.serialize_keras_object(object())


def test_keras_file_editor_is_refused_with_a_reason():
    with pytest.raises(NotImplementedError, match="no weights editor.*load_model"):
        S.KerasFileEditor("model.keras")


def test_models_round_trip_with_keras():
    keras = pytest.importorskip("keras")
    theirs = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"),
                               keras.layers.Dense(1)])
    theirs.compile(optimizer="adam", loss="mse")
    ours = U.deserialize_keras_object(
        json.loads(json.dumps(keras.saving.serialize_keras_object(theirs))))
    assert type(ours) is kiln.Sequential and ours.compiled
    assert [layer.units for layer in ours.layers] == [3, 1]
    ours.set_weights([np.asarray(w) for w in theirs.get_weights()])
    x = np.random.default_rng(1).normal(size=(3, 4)).astype("float32")
    np.testing.assert_allclose(ours.predict(x, verbose=0), np.asarray(theirs(x)), rtol=1e-5,
                               atol=1e-6)
    inputs = kiln.Input((4,))
    model = kiln.Model(inputs, kiln.layers.Dense(2)(inputs))
    back = keras.saving.deserialize_keras_object(U.serialize_keras_object(model))
    assert isinstance(back, keras.Model) and tuple(back.outputs[0].shape) == (None, 2)


def test_built_layers_carry_their_build_config_both_ways():
    keras = pytest.importorskip("keras")
    theirs = keras.layers.Dense(2, name="d")
    theirs.build((None, 4))
    ours = U.deserialize_keras_object(keras.saving.serialize_keras_object(theirs))
    assert ours.built and [tuple(w.shape) for w in ours.weights] == [(4, 2), (2,)]
    layer = kiln.layers.Dense(2, name="d")
    layer(kiln.Input((4,)))
    config = json.loads(json.dumps(U.serialize_keras_object(layer)))
    assert config["build_config"] == {"input_shape": [None, 4]}
    back = keras.saving.deserialize_keras_object(config)
    assert back.built and [tuple(w.shape) for w in back.weights] == [(4, 2), (2,)]
