"""kiln.applications against Keras itself: the same architecture built by Keras (weights=None),
its weights randomized (BatchNormalization statistics included) and saved by Keras, loads by
name into kiln's model, and both predict the same (relative 1e-4) on the smallest input.
Skipped without keras."""

import re

import numpy as np
import pytest

from kiln import applications as apps
from kiln.saving.weights import keras_snake_case

keras = pytest.importorskip("keras")

# name -> (input side, extra arguments); the slow ones run with -m slow
CASES = {
    "ResNet50": (32, {}), "ResNet50V2": (32, {}), "VGG16": (32, {}), "MobileNet": (32, {}),
    "MobileNetV2": (32, {}), "MobileNetV3Small": (32, {}), "MobileNetV3Large": (32, {}),
    "EfficientNetB0": (32, {}), "DenseNet121": (32, {}), "Xception": (71, {}),
    "ConvNeXtTiny": (32, {}), "InceptionV3": (75, {}), "EfficientNetV2B0": (32, {}),
    "EfficientNetV2S": (32, {}), "InceptionResNetV2": (75, {}), "NASNetMobile": (32, {}),
}
FAST = {"ResNet50", "MobileNetV2", "MobileNetV3Small"}
SELF_SCALING = ("EfficientNet", "MobileNetV3", "ConvNeXt")  # they take pixels in [0, 255]


def _randomize(model, seed=1):
    """Keras' weights made distinct: variances and scales positive, the rest perturbed
    (mildly: deep random networks, EfficientNetV2's squeeze-and-excite chains above all,
    amplify float32 rounding differences exponentially when their activations explode)."""
    rng = np.random.default_rng(seed)
    values = []
    for var in model.weights:
        arr = np.asarray(var.numpy())
        if "variance" in var.path or "gamma" in var.path:
            arr = rng.uniform(0.8, 1.2, arr.shape)
        else:
            arr = arr + rng.normal(0.0, 0.02, arr.shape)
        values.append(arr.astype(np.float32))
    model.set_weights(values)


def _names(model):
    """(class, name) of the layers with weights; auto-generated names ("conv2d_7") as their
    class's stem, since their counters depend on what the process built before."""
    out = []
    for layer in model.layers:
        if layer.weights:
            stem = keras_snake_case(type(layer).__name__)
            auto = re.fullmatch(rf"{stem}(_\d+)?", layer.name)
            out.append((type(layer).__name__, stem if auto else layer.name))
    return out


def _compare(name, size, extra, path, include_top=True, pooling=None):
    kwargs = {"weights": None, "input_shape": (size, size, 3), "include_top": include_top,
              "pooling": pooling, **extra}
    if include_top:
        kwargs.update(classes=7, classifier_activation=None)
    theirs = getattr(keras.applications, name)(**kwargs)
    _randomize(theirs)
    if str(path).endswith((".keras", "_legacy.h5")):
        theirs.save(path)
    else:
        theirs.save_weights(path)
    ours = getattr(apps, name)(**kwargs)
    assert ours.count_params() == theirs.count_params()
    assert _names(ours) == _names(theirs)
    ours.load_weights(str(path))
    x = np.random.default_rng(0).uniform(0, 255 if name.startswith(SELF_SCALING) else 1,
                                         (2, size, size, 3)).astype(np.float32)
    want = np.asarray(theirs.predict(x, verbose=0))
    got = ours.predict(x, verbose=0)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in CASES])
def test_keras_weights_load_and_predict_the_same(name, tmp_path):
    size, extra = CASES[name]
    _compare(name, size, extra, tmp_path / "model.weights.h5")


def test_keras_file_without_top_and_pooling(tmp_path):
    _compare("MobileNetV2", 32, {}, tmp_path / "model.keras", include_top=False, pooling="avg")


@pytest.mark.slow
def test_legacy_h5_file_of_unnamed_layers(tmp_path):
    # Keras' ImageNet files are legacy HDF5; InceptionV3's layers are all auto-named
    _compare("InceptionV3", 75, {}, tmp_path / "model_legacy.h5")


def test_nested_sequential_in_keras_file(tmp_path):
    # Keras writes a Sequential nested in a functional model under "layers/<snake>": its
    # layers (here LayerNormalization before Conv2D, unlike their alphabetical order) load
    # in the Sequential's order
    import kiln

    def build(lib):
        inputs = lib.Input((8, 8, 3))
        inner = lib.Sequential([lib.layers.LayerNormalization(epsilon=1e-6),
                                lib.layers.Conv2D(4, 2, strides=2)], name="stage")
        return lib.Model(inputs, lib.layers.Dense(2)(inner(inputs)))

    theirs = build(keras)
    _randomize(theirs)
    theirs.save_weights(tmp_path / "nested.weights.h5")
    ours = build(kiln)
    ours.load_weights(str(tmp_path / "nested.weights.h5"))
    x = np.random.default_rng(4).normal(size=(2, 8, 8, 3)).astype(np.float32)
    np.testing.assert_allclose(ours.predict(x, verbose=0), theirs.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-5)


def test_every_keras_application_with_keras_signature():
    import inspect

    names = [n for n in dir(keras.applications) if not n.startswith("_")]
    assert len(names) > 40
    for name in names:
        theirs = getattr(keras.applications, name)
        ours = getattr(apps, name)  # AttributeError names what is missing
        if inspect.ismodule(theirs):
            public = [s for s in dir(theirs) if not s.startswith("_")]
            assert all(hasattr(ours, s) for s in public), (name, public)
            continue
        want, got = inspect.signature(theirs).parameters, inspect.signature(ours).parameters
        assert list(got) == list(want), name
        assert [p.default for p in got.values()] == [p.default for p in want.values()], name
