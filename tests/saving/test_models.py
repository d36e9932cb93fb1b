"""Whole-model round trips (Sequential, functional with several inputs and outputs,
subclassed with registration) and training that continues exactly after save/load.
Oracles: the original model's predictions and optimizer variables; an uninterrupted run."""

from __future__ import annotations

import json
import os
import zipfile

import h5py
import numpy as np
import pytest

import kiln
from kiln import layers
from kiln.layers.base import reset_names
from kiln.saving import FileFormatError, load_model, register_serializable, save_model

EXTS = [".keras", ".h5"]


def _data(n=24, d=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype("float32"), rng.integers(0, classes, size=(n,))


def _mlp(dropout=0.3):
    return kiln.Sequential([kiln.Input((6,)), layers.Dense(16, activation="relu"),
                            layers.Dropout(dropout), layers.Dense(3, activation="softmax")])


def _assert_same_state(a, b):
    assert len(a.weights) == len(b.weights)
    for wa, wb in zip(a.weights, b.weights):
        np.testing.assert_array_equal(wa.numpy(), wb.numpy())
    if a.optimizer is not None:
        assert type(a.optimizer) is type(b.optimizer)
        va, vb = a.optimizer.variables, b.optimizer.variables
        assert len(va) == len(vb)
        for x, y in zip(va, vb):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x.numpy(), y.numpy())
        assert np.float32(a.optimizer.learning_rate) == np.float32(b.optimizer.learning_rate)


@pytest.mark.parametrize("ext", EXTS)
def test_sequential_round_trip(tmp_path, ext):
    x, y = _data()
    model = _mlp()
    model.compile(kiln.optimizers.Adam(0.01), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    path = tmp_path / f"m{ext}"
    model.save(path)
    again = kiln.models.load_model(path)
    assert type(again) is kiln.Sequential
    _assert_same_state(model, again)
    np.testing.assert_array_equal(model.predict(x, verbose=0), again.predict(x, verbose=0))
    assert again._rng_seed == model._rng_seed and again._rng_counter == model._rng_counter
    assert [lay.name for lay in again.layers] == [lay.name for lay in model.layers]
    cfg = again.get_compile_config()
    assert cfg["loss"] == "sparse_categorical_crossentropy"
    assert np.isclose(again.evaluate(x, y, verbose=0)[0], model.evaluate(x, y, verbose=0)[0])


@pytest.mark.parametrize("ext", EXTS)
def test_functional_several_inputs_and_outputs(tmp_path, ext):
    a = kiln.Input((5,), name="a")
    b = kiln.Input((3,), name="b")
    h = layers.Dense(8, activation="relu")(layers.Concatenate()([a, b]))
    h = layers.BatchNormalization()(h)
    out1 = layers.Dense(2, name="reg")(h)
    out2 = layers.Dense(4, activation="softmax", name="cls")(layers.Add()([h, h]))
    model = kiln.Model([a, b], [out1, out2], name="multi")
    model.compile("rmsprop", loss=["mse", "sparse_categorical_crossentropy"],
                  loss_weights=[1.0, 0.5])
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(20, 5)).astype("float32"), rng.normal(size=(20, 3)).astype("float32")]
    ys = [rng.normal(size=(20, 2)).astype("float32"), rng.integers(0, 4, size=(20,))]
    model.fit(xs, ys, epochs=2, batch_size=5, verbose=0)
    path = tmp_path / f"multi{ext}"
    save_model(model, path)
    again = load_model(path)
    _assert_same_state(model, again)
    p1, p2 = model.predict(xs, verbose=0), again.predict(xs, verbose=0)
    for u, v in zip(p1, p2):
        np.testing.assert_array_equal(u, v)
    assert again.output_names == model.output_names
    assert again.get_compile_config()["loss_weights"] == [1.0, 0.5]


@register_serializable(package="SavingTests")
class Scale(layers.Layer):
    def __init__(self, init=2.0, **kwargs):
        super().__init__(**kwargs)
        self.init = init

    def build(self, input_shape):
        self.s = self.add_weight("s", (input_shape[-1],), initializer="ones")
        self.s.assign(np.full(self.s.shape, self.init))
        self.built = True

    def call(self, x):
        return x * self.s

    def get_config(self):
        return {**super().get_config(), "init": self.init}


@register_serializable(package="SavingTests")
class TinyNet(kiln.Model):
    def __init__(self, hidden=8, classes=3, **kwargs):
        super().__init__(**kwargs)
        self.hidden, self.classes = hidden, classes
        self.body = layers.Dense(hidden, activation="tanh")
        self.scale = Scale(0.5)
        self.head = layers.Dense(classes, activation="softmax")

    def call(self, x, training=None):
        return self.head(self.scale(self.body(x)))


@pytest.mark.parametrize("ext", EXTS)
def test_subclassed_registered_model_round_trip(tmp_path, ext):
    x, y = _data()
    model = TinyNet(hidden=7)
    model.compile(kiln.optimizers.SGD(0.1, momentum=0.9), "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=1, batch_size=6, verbose=0)
    path = tmp_path / f"tiny{ext}"
    model.save(path)
    again = load_model(path)  # no custom_objects: found through the registry
    assert type(again) is TinyNet and again.hidden == 7
    _assert_same_state(model, again)
    np.testing.assert_array_equal(model.predict(x, verbose=0), again.predict(x, verbose=0))
    with open(path, "rb") as f:
        head = f.read(4)
    if ext == ".keras":
        assert head == b"PK\x03\x04"
        with zipfile.ZipFile(path) as zf:
            cfg = json.loads(zf.read("config.json"))
        assert cfg["registered_name"] == "SavingTests>TinyNet"


def _train_twice(tmp_path, ext, save_between):
    kiln.utils.set_random_seed(7)
    reset_names()
    x, y = _data(40)
    model = _mlp(0.4)
    model.compile(kiln.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    if save_between:
        path = tmp_path / f"mid{ext}"
        model.save(path)
        model = load_model(path)
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    return model


@pytest.mark.parametrize("ext", EXTS)
def test_training_continues_exactly_after_save_and_load(tmp_path, ext):
    resumed = _train_twice(tmp_path, ext, True)
    straight = _train_twice(tmp_path, ext, False)
    _assert_same_state(straight, resumed)
    assert resumed._rng_counter == straight._rng_counter


def test_learning_rate_set_by_hand_is_restored(tmp_path):
    x, y = _data()
    model = _mlp()
    model.compile(kiln.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    model.optimizer.learning_rate = 0.00123  # e.g. ReduceLROnPlateau did this
    for ext in EXTS:
        again = load_model(_saved(model, tmp_path / f"lr{ext}"))
        assert np.float32(again.optimizer.learning_rate) == np.float32(0.00123)


def test_schedule_position_follows_iterations(tmp_path):
    x, y = _data()
    sched = kiln.optimizers.schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5)
    model = _mlp()
    model.compile(kiln.optimizers.SGD(sched), "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    for ext in EXTS:
        again = load_model(_saved(model, tmp_path / f"sched{ext}"))
        assert int(again.optimizer.iterations.numpy()) == 3
        assert np.isclose(again.optimizer.learning_rate, 0.1 * 0.5 ** 1.5)


def _saved(model, path):
    model.save(path)
    return path


def test_uncompiled_model_and_compile_false(tmp_path):
    x, _ = _data()
    model = _mlp()
    for ext in EXTS:
        again = load_model(_saved(model, tmp_path / f"u{ext}"))
        assert again.optimizer is None
        np.testing.assert_array_equal(model.predict(x, verbose=0), again.predict(x, verbose=0))
    model.compile("adam", "sparse_categorical_crossentropy")
    again = load_model(_saved(model, tmp_path / "c.keras"), compile=False)
    assert again.optimizer is None


def test_load_model_does_not_move_the_global_generator(tmp_path):
    path = _saved(_mlp(), tmp_path / "g.h5")
    kiln.utils.set_random_seed(3)
    load_model(path)
    after = kiln.random_state.numpy_rng().random()
    kiln.utils.set_random_seed(3)
    assert kiln.random_state.numpy_rng().random() == after


# ---- bad files ---------------------------------------------------------------------------------
def test_unknown_class_is_named(tmp_path):
    path = _saved(_mlp(), tmp_path / "m.keras")
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    cfg = json.loads(members["config.json"])
    cfg["config"]["layers"][1]["class_name"] = "FancyDenseThatDoesNotExist"
    members["config.json"] = json.dumps(cfg).encode()
    bad = tmp_path / "bad.keras"
    with zipfile.ZipFile(bad, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    with pytest.raises(ValueError, match="unknown class 'FancyDenseThatDoesNotExist'.*"
                                         "custom_objects"):
        load_model(bad)


def test_lambda_is_refused_under_safe_mode(tmp_path):
    model = kiln.Sequential([kiln.Input((4,)), layers.Lambda(lambda t: t * 2.0),
                             layers.Dense(2)])
    for ext in EXTS:
        with pytest.warns(UserWarning, match="Lambda"):
            path = _saved(model, tmp_path / f"lam{ext}")
        with pytest.raises(ValueError, match="Lambda layer.*safe_mode"):
            load_model(path)
        with pytest.raises(ValueError, match="never executes stored code"):
            load_model(path, safe_mode=False)


@pytest.mark.parametrize("ext", EXTS)
def test_not_a_model_file(tmp_path, ext):
    path = tmp_path / f"junk{ext}"
    path.write_bytes(b"\x00\x01 definitely not a model" * 20)
    with pytest.raises(FileFormatError):
        load_model(path)


@pytest.mark.parametrize("ext", EXTS)
def test_truncated_model_file(tmp_path, ext):
    model = _mlp()
    model.compile("adam", "sparse_categorical_crossentropy")
    path = _saved(model, tmp_path / f"t{ext}")
    data = path.read_bytes()
    bad = tmp_path / f"cut{ext}"
    bad.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(FileFormatError, match="truncated"):
        load_model(bad)


def test_weights_only_file_is_not_a_model(tmp_path):
    model = _mlp()
    model.save_weights(tmp_path / "w.weights.h5")
    with pytest.raises(FileFormatError, match="weights only"):
        load_model(tmp_path / "w.weights.h5")


def test_optimizer_mismatch_leaves_model_unchanged(tmp_path):
    x, y = _data()
    model = _mlp()
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    path = _saved(model, tmp_path / "m.h5")
    with h5py.File(path, "a") as f:  # corrupt one slot's shape
        del f["optimizer/3"]
        f["optimizer/3"] = np.zeros((2, 2), dtype="float32")
    with pytest.raises(ValueError, match=r"optimizer variable.*\(2, 2\)"):
        load_model(path)


def test_kiln_keras_file_layout(tmp_path):
    model = _mlp()
    model.compile("adam", "sparse_categorical_crossentropy")
    x, y = _data()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    path = _saved(model, tmp_path / "m.keras")
    with zipfile.ZipFile(path) as zf:
        assert sorted(zf.namelist()) == ["config.json", "metadata.json", "model.weights.h5"]
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
        cfg = json.loads(zf.read("config.json"))
        meta = json.loads(zf.read("metadata.json"))
        weights = zf.read("model.weights.h5")
    assert cfg["class_name"] == "Sequential" and cfg["module"] == "keras"
    assert {lay["class_name"] for lay in cfg["config"]["layers"]} >= {"Dense", "Dropout"}
    assert all(lay["module"] == "keras.layers" for lay in cfg["config"]["layers"])
    assert cfg["compile_config"]["optimizer"]["module"] == "keras.optimizers"
    assert "keras_version" in meta and "kiln" in meta
    tmp = tmp_path / "inner.h5"
    tmp.write_bytes(weights)
    with h5py.File(tmp, "r") as f:
        assert f["layers/dense/vars/0"].shape == (6, 16)
        assert f["layers/dense_1/vars/1"].shape == (3,)
        assert len(f["optimizer/vars"]) == 2 + 4 * 2  # iteration, lr, (m, v) x 4 weights
    assert os.path.getsize(path) > 0


def test_load_weights_builds_an_unbuilt_subclassed_model(tmp_path):
    x, _ = _data()
    model = TinyNet(hidden=5)
    model.predict(x, verbose=0)  # built by the first call
    model.save_weights(tmp_path / "tiny.weights.h5")
    fresh = TinyNet(hidden=5)
    assert not fresh.built and not fresh.weights
    fresh.load_weights(tmp_path / "tiny.weights.h5")  # no call needed first
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), model.predict(x, verbose=0))
