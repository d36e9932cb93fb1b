"""kiln.applications: parameter counts against Keras' documented counts (the table at
keras.io/api/applications, the same numbers Keras 3.15's own models give), output shapes for
include_top True/False and every pooling mode, Keras' argument checks, one training step."""

import numpy as np
import pytest

import kiln
from kiln import applications as apps

# Keras 3.15, weights=None, default arguments (keras.io/api/applications; checked against
# keras.applications.<name>(weights=None).count_params())
KERAS_COUNTS = {
    "ResNet50": 25_636_712, "ResNet101": 44_707_176, "ResNet152": 60_419_944,
    "ResNet50V2": 25_613_800, "ResNet101V2": 44_675_560, "ResNet152V2": 60_380_648,
    "VGG16": 138_357_544, "VGG19": 143_667_240,
    "MobileNet": 4_253_864, "MobileNetV2": 3_538_984,
    "MobileNetV3Small": 2_554_968, "MobileNetV3Large": 5_507_432,
    "EfficientNetB0": 5_330_571, "EfficientNetB1": 7_856_239, "EfficientNetB2": 9_177_569,
    "EfficientNetB3": 12_320_535, "EfficientNetB4": 19_466_823,
    "EfficientNetB5": 30_562_527, "EfficientNetB6": 43_265_143,
    "EfficientNetB7": 66_658_687,
    "DenseNet121": 8_062_504, "DenseNet169": 14_307_880, "DenseNet201": 20_242_984,
    "Xception": 22_910_480, "InceptionV3": 23_851_784,
    "ConvNeXtTiny": 28_589_128, "ConvNeXtSmall": 50_223_688,
    "EfficientNetV2B0": 7_200_312, "EfficientNetV2B1": 8_212_124,
    "EfficientNetV2B2": 10_178_374, "EfficientNetV2B3": 14_467_622,
    "EfficientNetV2S": 21_612_360, "EfficientNetV2M": 54_431_388,
    "EfficientNetV2L": 119_027_848, "InceptionResNetV2": 55_873_736,
    "NASNetMobile": 5_326_716, "NASNetLarge": 88_949_818,
}
# the large ones take a while to allocate: run with -m slow
SLOW = {"ResNet101", "ResNet152", "ResNet101V2", "ResNet152V2", "VGG19", "EfficientNetB3",
        "EfficientNetB4", "EfficientNetB5", "EfficientNetB6", "EfficientNetB7",
        "DenseNet169", "DenseNet201", "ConvNeXtSmall", "EfficientNetV2B2", "EfficientNetV2B3",
        "EfficientNetV2S", "EfficientNetV2M", "EfficientNetV2L", "InceptionResNetV2",
        "NASNetLarge"}

# name -> (smallest input side, feature channels of the last conv layer)
FEATURES = {
    "ResNet50": (32, 2048), "ResNet50V2": (32, 2048), "VGG16": (32, 512),
    "MobileNet": (32, 1024), "MobileNetV2": (32, 1280), "MobileNetV3Small": (32, 576),
    "MobileNetV3Large": (32, 960), "EfficientNetB0": (32, 1280), "DenseNet121": (32, 1024),
    "Xception": (71, 2048), "ConvNeXtTiny": (32, 768), "InceptionV3": (75, 2048),
    "EfficientNetV2B0": (32, 1280),
}


def _params(name):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in name]


@pytest.mark.parametrize("name", _params(KERAS_COUNTS))
def test_parameter_count_equals_keras(name):
    model = getattr(apps, name)(weights=None)
    assert model.count_params() == KERAS_COUNTS[name]
    assert model.output.shape == (None, 1000)


@pytest.mark.parametrize("name", list(FEATURES))
def test_output_shapes(name):
    size, channels = FEATURES[name]
    fn = getattr(apps, name)
    top = fn(weights=None, input_shape=(size, size, 3), classes=7)
    assert top.output.shape == (None, 7)
    assert top.input.shape == (None, size, size, 3)
    for pooling in ("avg", "max"):
        pooled = fn(weights=None, include_top=False, pooling=pooling)
        assert pooled.output.shape == (None, channels)
    features = fn(weights=None, include_top=False, input_shape=(2 * size, 2 * size, 3))
    out = features.output.shape
    assert len(out) == 4 and out[-1] == channels and out[1] == out[2] and 1 <= out[1] <= 5
    # without a shape and without the top any image size is accepted
    free = fn(weights=None, include_top=False)
    assert free.input.shape == (None, None, None, 3)


def test_keras_layer_names_and_model_names():
    model = apps.ResNet50(weights=None, input_shape=(32, 32, 3), classes=5)
    names = [layer.name for layer in model.layers]
    assert model.name == "resnet50"
    assert names[1:5] == ["conv1_pad", "conv1_conv", "conv1_bn", "conv1_relu"]
    assert "conv5_block3_out" in names and names[-2:] == ["avg_pool", "predictions"]
    assert apps.MobileNetV2(weights=None, input_shape=(96, 96, 3)).name == "mobilenetv2_1.00_96"
    assert apps.MobileNet(weights=None, alpha=0.5).name == "mobilenet_0.50_224"
    assert apps.EfficientNetB1(weights=None, include_top=False).name == "efficientnetb1"


def test_module_aliases_and_lazy_loading():
    import kiln.applications.resnet as resnet

    assert kiln.applications is apps
    assert apps.resnet50 is resnet and apps.ResNet50 is resnet.ResNet50
    assert apps.vgg16.VGG16 is apps.VGG16 and apps.mobilenet_v2.MobileNetV2 is apps.MobileNetV2
    with pytest.raises(AttributeError, match="ResNeXt50"):
        apps.ResNeXt50  # noqa: B018


def test_input_tensor_is_used():
    inputs = kiln.Input((40, 40, 3))
    x = kiln.layers.Rescaling(1 / 255)(inputs)
    model = apps.MobileNetV2(weights=None, input_tensor=x, classes=3)
    assert model.inputs[0] is inputs  # the source input of input_tensor
    assert model.output.shape == (None, 3)


def test_alpha_and_minimalistic_variants():
    half = apps.MobileNet(weights=None, alpha=0.5, include_top=False, pooling="avg")
    assert half.output.shape == (None, 512)
    wide = apps.MobileNetV2(weights=None, alpha=1.4, include_top=False, pooling="avg")
    assert wide.output.shape == (None, 1792)
    mini = apps.MobileNetV3Small(weights=None, minimalistic=True, include_top=False,
                                 pooling="max")
    assert mini.output.shape == (None, 576)
    assert not any(type(lay).__name__ == "Multiply" for lay in mini.layers)


@pytest.mark.parametrize("call, message", [
    (lambda: apps.ResNet50(weights="nowhere.h5"), "weights argument should be either"),
    (lambda: apps.ResNet50(weights="imagenet", classes=10), "classes should be 1000"),
    (lambda: apps.VGG16(weights=None, input_shape=(16, 16, 3), include_top=False),
     r"at least 32x32; received input_shape=\(16, 16, 3\)"),
    (lambda: apps.ResNet50(weights=None, input_shape=(None, None, 3)),
     "should specify a static input_shape"),
    (lambda: apps.ResNet50(weights=None, input_shape=(32, 32)), "three integers"),
    (lambda: apps.ResNet50(weights=None, include_top=False, pooling="sum"),
     "pooling must be None, 'avg' or 'max'; received pooling='sum'"),
    (lambda: apps.MobileNet(weights="imagenet", alpha=0.3), "alpha must be one of"),
    (lambda: apps.MobileNetV3Large(weights=None, input_shape=(16, 16, 3)), "at least 32x32"),
    (lambda: apps.ResNet50(weights=None, input_tensor=np.zeros((1, 32, 32, 3))),
     "input_tensor must be a symbolic tensor"),
    (lambda: apps.ResNet50(weights="imagenet", input_shape=(200, 200, 3)),
     r"input_shape should be \(224, 224, 3\)"),
    (lambda: apps.ResNet50(weights="imagenet", classifier_activation="relu", include_top=True),
     "only None and 'softmax'"),
])
def test_keras_argument_checks(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_one_training_step_is_finite_and_moves_the_weights():
    model = apps.MobileNetV3Small(weights=None, input_shape=(32, 32, 3), classes=4,
                                  dropout_rate=0.0)
    model.compile(optimizer=kiln.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, (4, 32, 32, 3)).astype("float32")
    y = np.array([0, 1, 2, 3])
    before = [w.numpy().copy() for w in model.trainable_weights]
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    loss = history.history["loss"][0]
    assert np.isfinite(loss)
    after = [w.numpy().copy() for w in model.trainable_weights]
    assert all(np.isfinite(w).all() for w in after)
    assert sum(not np.array_equal(a, b) for a, b in zip(before, after, strict=True)) > 0.9 * len(
        before)
    out = model.predict(x, verbose=0)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)  # softmax classifier


@pytest.mark.parametrize("name, size", [("MobileNetV3Small", 32),
                                        pytest.param("ConvNeXtTiny", 32, marks=pytest.mark.slow),
                                        pytest.param("InceptionResNetV2", 75,
                                                     marks=pytest.mark.slow)])
def test_keras_file_round_trip_in_kiln(name, size, tmp_path):
    # the whole model (config and weights) saves and loads: no raw ops between layers
    model = getattr(apps, name)(weights=None, input_shape=(size, size, 3), classes=3)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = kiln.models.load_model(path)
    assert loaded.count_params() == model.count_params()
    x = np.random.default_rng(0).uniform(0, 255, (2, size, size, 3)).astype(np.float32)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6, atol=1e-6)
