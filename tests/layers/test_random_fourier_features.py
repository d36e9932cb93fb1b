"""RandomFourierFeatures (tf.keras 2.x's experimental layer) against its closed form
``sqrt(2/D) cos(x W / scale + b)`` and against the kernels its features approximate (Rahimi
and Recht: Gaussian ``exp(-|x-y|^2 / (2 scale^2))``, Laplacian ``exp(-|x-y|_1 / scale)``);
and Conv's ``convolution_op`` (Keras 3's BaseConv hook) against a NumPy correlation."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln import layers as L


def _features(layer, x):
    return np.asarray(layer(x.astype("float32")), dtype=np.float64)


def test_forward_is_the_closed_form_and_weights_are_frozen():
    kiln.utils.set_random_seed(3)
    layer = L.RandomFourierFeatures(16, scale=2.5)
    x = np.random.default_rng(0).normal(size=(5, 6))
    y = _features(layer, x)
    w, b, s = (np.asarray(v, np.float64) for v in
               (layer.unscaled_kernel, layer.bias, layer.kernel_scale))
    np.testing.assert_allclose(y, math.sqrt(2 / 16) * np.cos(x @ (w / s) + b), atol=1e-5)
    assert w.shape == (6, 16) and b.shape == (16,) and s.tolist() == [2.5]
    assert b.min() >= 0 and b.max() < 2 * math.pi
    assert layer.trainable_weights == [] and len(layer.non_trainable_weights) == 3
    trainable = L.RandomFourierFeatures(4, trainable=True)
    trainable.build((None, 3))
    assert [v.name.split("/")[-1] for v in trainable.trainable_weights] == ["kernel_scale"]


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian"])
def test_feature_products_approximate_the_kernel(kernel):
    kiln.utils.set_random_seed(11)
    d, n_features, scale = 3, 20000, 1.5
    layer = L.RandomFourierFeatures(n_features, kernel_initializer=kernel, scale=scale)
    x = np.random.default_rng(1).normal(scale=0.6, size=(6, d))
    phi = _features(layer, x)
    diff = x[:, None, :] - x[None, :, :]
    exact = (np.exp(-np.sum(diff**2, -1) / (2 * scale**2)) if kernel == "gaussian"
             else np.exp(-np.sum(np.abs(diff), -1) / scale))
    # the error of a D-feature Monte Carlo estimate is about 1/sqrt(D) = 0.007
    np.testing.assert_allclose(phi @ phi.T, exact, atol=0.04)


def test_default_scale_config_and_errors():
    g, lap = L.RandomFourierFeatures(4), L.RandomFourierFeatures(4, "laplacian")
    g.build((None, 8))
    lap.build((None, 8))
    assert np.asarray(g.kernel_scale).tolist() == [2.0]  # sqrt(8 / 2)
    assert np.asarray(lap.kernel_scale).tolist() == [1.0]
    config = g.get_config()
    assert (config["output_dim"], config["kernel_initializer"], config["scale"],
            config["trainable"]) == (4, "gaussian", None, False)
    again = L.RandomFourierFeatures.from_config(config)
    assert again.output_dim == 4 and not again.trainable
    assert kiln.layers.RandomFourierFeatures(7)(kiln.Input((5,))).shape == (None, 7)
    with pytest.raises(ValueError, match="output_dim"):
        L.RandomFourierFeatures(0)
    with pytest.raises(ValueError, match="unsupported kernel type 'poly'"):
        L.RandomFourierFeatures(4, kernel_initializer="poly")
    with pytest.raises(ValueError, match=r"received input shape \(None, 4, 3\)"):
        L.RandomFourierFeatures(4)(kiln.Input((4, 3)))


def test_a_model_with_it_round_trips_through_a_keras_file(tmp_path):
    """Saved and loaded (.keras): the random weights and the scale come back, so the
    loaded model predicts the same numbers."""
    kiln.utils.set_random_seed(3)
    model = kiln.Sequential([kiln.Input((6,)), L.RandomFourierFeatures(16, scale=2.5),
                             L.Dense(2)])
    x = np.random.default_rng(0).normal(size=(5, 6)).astype("float32")
    want = model.predict(x, verbose=0)
    path = str(tmp_path / "rff.keras")
    model.save(path)
    again = kiln.models.load_model(path)
    layer = again.layers[0]
    assert isinstance(layer, L.RandomFourierFeatures) and layer.output_dim == 16
    np.testing.assert_array_equal(again.predict(x, verbose=0), want)


def _correlate2d(x, k):
    """'valid' cross-correlation, NHWC input, HWIO kernel."""
    kh, kw = k.shape[:2]
    out = np.zeros((x.shape[0], x.shape[1] - kh + 1, x.shape[2] - kw + 1, k.shape[3]))
    for i in range(out.shape[1]):
        for j in range(out.shape[2]):
            out[:, i, j] = np.einsum("nhwc,hwcf->nf", x[:, i:i + kh, j:j + kw], k)
    return out


class _Standardized(L.Conv2D):
    def convolution_op(self, inputs, kernel):
        mean, var = K.moments(kernel, axes=[0, 1, 2], keepdims=True)
        return super().convolution_op(inputs, (kernel - mean) / K.sqrt(var + 1e-10))


def test_convolution_op_is_the_hook_call_uses():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 6, 5, 3)).astype("float32")
    conv = L.Conv2D(4, 3, bias_initializer="ones")
    conv.build((None, 6, 5, 3))
    k = rng.normal(size=(3, 3, 3, 4)).astype("float32")
    np.testing.assert_allclose(np.asarray(conv.convolution_op(x, k)), _correlate2d(x, k),
                               rtol=1e-4, atol=1e-4)
    layer = _Standardized(4, 3, bias_initializer="ones")
    y = np.asarray(layer(x))
    w = np.asarray(layer.kernel, np.float64)
    w = (w - w.mean((0, 1, 2))) / np.sqrt(w.var((0, 1, 2)) + 1e-10)
    np.testing.assert_allclose(y, _correlate2d(x, w) + 1.0, rtol=1e-4, atol=1e-4)
    with pytest.raises(NotImplementedError, match="Conv2DTranspose has no convolution_op"):
        L.Conv2DTranspose(2, 3).convolution_op(x, k)
