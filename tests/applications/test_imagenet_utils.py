"""kiln.applications' preprocessing (closed forms; Keras' own preprocess_input when keras is
installed), decode_predictions, and weights="imagenet" read from Keras' cache folder only."""

import json

import numpy as np
import pytest

import kiln
from kiln import applications as apps
from kiln.applications import imagenet_utils as iu

MEAN_BGR = np.array([103.939, 116.779, 123.68])


def _images(seed=0, shape=(2, 4, 5, 3)):
    return np.random.default_rng(seed).uniform(0, 255, shape).astype(np.float32)


def test_preprocess_modes_closed_form():
    x = _images()
    np.testing.assert_allclose(iu.preprocess_input(x.copy(), mode="tf"), x / 127.5 - 1,
                               rtol=1e-6, atol=1e-6)
    torch = (x / 255 - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(iu.preprocess_input(x.copy(), mode="torch"), torch,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(iu.preprocess_input(x.copy(), mode="caffe"),
                               x[..., ::-1] - MEAN_BGR, rtol=1e-6, atol=1e-4)
    ints = iu.preprocess_input(np.full((1, 2, 2, 3), 255, np.uint8), mode="tf")
    assert ints.dtype == np.float32 and np.all(ints == 1.0)


def test_family_modes():
    x = _images()
    np.testing.assert_allclose(apps.resnet.preprocess_input(x.copy()), x[..., ::-1] - MEAN_BGR,
                               atol=1e-4)
    np.testing.assert_allclose(apps.vgg16.preprocess_input(x.copy()), x[..., ::-1] - MEAN_BGR,
                               atol=1e-4)
    for module in (apps.resnet_v2, apps.mobilenet, apps.mobilenet_v2):
        np.testing.assert_allclose(module.preprocess_input(x.copy()), x / 127.5 - 1, atol=1e-6)
    for module in (apps.mobilenet_v3, apps.efficientnet):
        assert module.preprocess_input(x) is x


@pytest.mark.parametrize("mode", ["caffe", "tf", "torch"])
def test_tensor_path_equals_numpy_path(mode):
    inputs = kiln.Input((4, 5, 3))
    model = kiln.Model(inputs, iu.preprocess_input(inputs, mode=mode))
    x = _images(1)
    want = iu.preprocess_input(x.copy(), mode=mode)
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode", ["caffe", "tf", "torch"])
def test_matches_keras(mode):
    pytest.importorskip("scipy")  # Keras' NumPy backend needs it; harmless otherwise
    keras = pytest.importorskip("keras")
    x = _images(2)
    want = keras.applications.imagenet_utils.preprocess_input(x.copy(), mode=mode)
    np.testing.assert_allclose(iu.preprocess_input(x.copy(), mode=mode), want, rtol=1e-6,
                               atol=1e-4)


def test_preprocess_errors():
    with pytest.raises(ValueError, match="mode to be one of 'caffe', 'tf' or 'torch'; received "
                                         "mode='pytorch'"):
        iu.preprocess_input(_images(), mode="pytorch")
    with pytest.raises(ValueError, match="channels_last"):
        iu.preprocess_input(_images(), data_format="channels_first")
    with pytest.raises(ValueError, match=r"3 channels last; received shape \(2, 4, 4\)"):
        iu.preprocess_input(np.zeros((2, 4, 4), np.float32))


@pytest.fixture
def keras_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setattr(iu, "_CLASS_INDEX", None)
    (tmp_path / "models").mkdir()
    return tmp_path / "models"


def test_decode_predictions_reads_keras_class_index(keras_home):
    index = {str(i): [f"n{i:08d}", f"class_{i}"] for i in range(1000)}
    (keras_home / "imagenet_class_index.json").write_text(json.dumps(index))
    preds = np.zeros((2, 1000), np.float32)
    preds[0, [3, 7, 500]] = [0.2, 0.5, 0.3]
    preds[1, 999] = 1.0
    out = apps.resnet50.decode_predictions(preds, top=3)
    assert [(c, d) for c, d, _ in out[0]] == [("n00000007", "class_7"), ("n00000500", "class_500"),
                                              ("n00000003", "class_3")]
    np.testing.assert_allclose([s for _, _, s in out[0]], [0.5, 0.3, 0.2])
    assert out[1][0][:2] == ("n00000999", "class_999") and len(out[1]) == 3


def test_decode_predictions_errors(keras_home):
    with pytest.raises(ValueError, match=r"shape \(samples, 1000\)\); received array with "
                                         r"shape \(2, 10\)"):
        iu.decode_predictions(np.zeros((2, 10)))
    with pytest.raises(FileNotFoundError, match="imagenet_class_index.json.*does not download"):
        iu.decode_predictions(np.zeros((1, 1000)))


def test_imagenet_weights_missing_names_the_file_and_folder(keras_home):
    with pytest.raises(FileNotFoundError) as err:
        apps.ResNet50(weights="imagenet", include_top=False)
    message = str(err.value)
    assert "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5" in message
    assert str(keras_home) in message
    assert "https://storage.googleapis.com/tensorflow/keras-applications/resnet/" in message


def test_imagenet_weights_load_from_keras_cache(keras_home):
    # a file put where Keras caches it (here written by kiln itself) is what "imagenet" loads
    source = apps.MobileNetV2(weights=None, include_top=False, input_shape=(96, 96, 3))
    rng = np.random.default_rng(3)
    for w in source.weights:
        w.assign(rng.normal(size=w.shape).astype(np.float32))
    fname = "mobilenet_v2_weights_tf_dim_ordering_tf_kernels_1.0_96_no_top.h5"
    source.save_weights(str(keras_home / "tmp.weights.h5"))
    (keras_home / "tmp.weights.h5").rename(keras_home / fname)
    loaded = apps.MobileNetV2(weights="imagenet", include_top=False, input_shape=(96, 96, 3))
    for a, b in zip(source.weights, loaded.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # a path given as weights loads the same way
    by_path = apps.MobileNetV2(weights=str(keras_home / fname), include_top=False,
                               input_shape=(96, 96, 3))
    np.testing.assert_array_equal(by_path.weights[0].numpy(), source.weights[0].numpy())


def test_correct_pad_matches_keras_rule():
    assert iu.correct_pad(kiln.Input((32, 32, 3)), 3) == ((0, 1), (0, 1))
    assert iu.correct_pad(kiln.Input((33, 33, 3)), 3) == ((1, 1), (1, 1))
    assert iu.correct_pad(kiln.Input((None, None, 3)), 5) == ((1, 2), (1, 2))
