"""Forward and gradient oracles for the activation, merging, reshaping, noise and
normalization layers added for issue 15 (item 4): NumPy formulas, float64 central finite
differences (tests/fd_oracle.py), torch's functional ops where torch has the op, closed-form
statistics for the noise layers, and the errors for bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
import kiln.ops as K
from kiln import layers as L
from kiln.layers.context import trace

TOL = {"rtol": 1e-10, "atol": 1e-12}
RNG = np.random.default_rng(4)


def _normal(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


def _fd_check(layer, x, wrt_weights=False):
    """The gradient of <layer(x), ct> in x (or in the layer's weights) against central finite
    differences, float64."""
    xp = kiln.placeholder(x.shape, "float64")
    ct = _normal(*layer.compute_output_shape(x.shape))
    loss = K.sum(layer(xp) * K.constant(ct))
    targets = list(layer.weights) if wrt_weights else [xp]
    grads = kiln.grad(loss, targets)
    f = kiln.function([xp], [loss] + grads)
    got = f(x)[1:]
    if wrt_weights:
        for w, g in zip(layer.weights, got):
            want = numeric_grad(lambda: float(f(x)[0]), w.value)
            np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)
    else:
        want = numeric_grad(lambda: float(f(x)[0]), x)
        np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-8)


# ---- activation layers --------------------------------------------------------------------------
def np_relu(x, max_value=None, negative_slope=0.0, threshold=0.0):
    y = np.where(x >= threshold, x, negative_slope * (x - threshold))
    return y if max_value is None else np.minimum(y, max_value)


@pytest.mark.parametrize("kwargs", [{}, {"max_value": 1.0}, {"negative_slope": 0.2},
                                    {"threshold": 0.5, "negative_slope": 0.1, "max_value": 2.}])
def test_relu_layer_matches_numpy_and_fd(kwargs):
    x = _normal(3, 5) * 2
    layer = L.ReLU(dtype="float64", **kwargs)
    np.testing.assert_allclose(layer(x), np_relu(x, **kwargs), **TOL)
    _fd_check(layer, x)


def test_leaky_relu_elu_match_numpy_with_keras3_defaults():
    x = _normal(4, 3)
    assert L.LeakyReLU().negative_slope == 0.3
    np.testing.assert_allclose(L.LeakyReLU(dtype="float64")(x), np.where(x >= 0, x, 0.3 * x),
                               **TOL)
    np.testing.assert_allclose(L.ELU(dtype="float64")(x), np.where(x > 0, x, np.expm1(x)),
                               **TOL)
    np.testing.assert_allclose(L.ELU(0.5, dtype="float64")(x),
                               np.where(x > 0, x, 0.5 * np.expm1(x)), **TOL)
    with pytest.warns(DeprecationWarning, match="alpha"):
        legacy = L.LeakyReLU(alpha=0.1)
    assert legacy.get_config()["negative_slope"] == 0.1
    _fd_check(L.ELU(0.7, dtype="float64"), x)


def test_prelu_matches_numpy_and_its_alpha_gradient_matches_fd():
    layer = L.PReLU(shared_axes=[1, 2], alpha_initializer="random_normal", dtype="float64")
    x = _normal(2, 3, 4, 5)
    y = layer(x)
    (alpha,) = layer.get_weights()
    assert alpha.shape == (1, 1, 5)
    np.testing.assert_allclose(y, np.where(x >= 0, x, alpha * x), **TOL)
    _fd_check(layer, x, wrt_weights=True)
    _fd_check(layer, x)


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.torch
def test_softmax_layer_matches_torch_and_multi_axis_numpy():
    torch = pytest.importorskip("torch")
    x = _normal(2, 3, 4)
    np.testing.assert_allclose(L.Softmax(axis=1, dtype="float64")(x),
                               torch.softmax(torch.from_numpy(x), dim=1).numpy(), **TOL)
    np.testing.assert_allclose(L.Softmax(axis=[1, 2], dtype="float64")(x),
                               np_softmax(x, (1, 2)), **TOL)
    _fd_check(L.Softmax(axis=[1, 2], dtype="float64"), x)


def test_softmax_mask_matches_keras3_formula():
    x = _normal(2, 5)
    mask = np.array([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0]], bool)
    y = L.Softmax(dtype="float64")(x, mask=mask)
    want = np_softmax(np.where(mask, x, -1e9), -1) * mask
    np.testing.assert_allclose(y, want, **TOL)
    assert np.all(y[1] == 0)  # a fully masked row gives zeros
    # a float mask keeps the entries > 0.5; a (batch, 1, steps) mask broadcasts
    fmask = np.array([[[0.9, 0.2, 0.7]]])
    x3 = _normal(2, 4, 3)
    np.testing.assert_allclose(L.Softmax(dtype="float64")(x3, mask=fmask),
                               np_softmax(np.where(fmask > 0.5, x3, -1e9), -1) * (fmask > 0.5),
                               **TOL)


def test_softmax_rejects_a_mask_that_does_not_broadcast():
    x = kiln.placeholder((None, 4, 3), "float32")
    m = kiln.placeholder((None, 4), "bool")
    with pytest.raises(ValueError, match=r"Softmax\): the mask of shape \(None, 4\) does not "
                                         r"broadcast to the input of shape \(None, 4, 3\)"):
        L.Softmax()(x, mask=m)


def test_identity_returns_its_input():
    x = _normal(3, 2)
    np.testing.assert_array_equal(L.Identity(dtype="float64")(x), x)


# ---- merging ------------------------------------------------------------------------------------
@pytest.mark.parametrize("sa,sb,axes,equation", [
    ((2, 5), (2, 5), 1, "bi,bi->b"),
    ((2, 3, 4), (2, 4, 5), (2, 1), "bij,bjk->bik"),
    ((2, 4, 3), (2, 4, 5), 1, "bji,bjk->bik"),
    ((2, 3, 4), (2, 4), -1, "bij,bj->bi"),
])
@pytest.mark.parametrize("normalize", [False, True])
def test_dot_matches_numpy_batch_dot(sa, sb, axes, equation, normalize):
    a, b = _normal(*sa), _normal(*sb)
    layer = L.Dot(axes=axes, normalize=normalize, dtype="float64")
    y = layer([a, b])
    pair = (axes, axes) if isinstance(axes, int) else axes
    if normalize:
        a = a / np.linalg.norm(a, axis=pair[0], keepdims=True)
        b = b / np.linalg.norm(b, axis=pair[1], keepdims=True)
    want = np.einsum(equation, a, b)
    np.testing.assert_allclose(y, want[:, None] if want.ndim == 1 else want, **TOL)


def test_dot_gradient_matches_fd():
    a, b = _normal(2, 3, 4), _normal(2, 4, 2)
    pa, pb = kiln.placeholder(a.shape, "float64"), kiln.placeholder(b.shape, "float64")
    layer = L.Dot(axes=(2, 1), normalize=True, dtype="float64")
    ct = _normal(2, 3, 2)
    loss = K.sum(layer([pa, pb]) * K.constant(ct))
    f = kiln.function([pa, pb], [loss] + kiln.grad(loss, [pa, pb]))
    _, ga, gb = f(a, b)
    np.testing.assert_allclose(ga, numeric_grad(lambda: float(f(a, b)[0]), a), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(gb, numeric_grad(lambda: float(f(a, b)[0]), b), rtol=1e-6,
                               atol=1e-8)


def test_dot_errors_name_the_layer_and_shapes():
    a = kiln.placeholder((None, 3), "float32")
    b = kiln.placeholder((None, 4), "float32")
    with pytest.raises(ValueError, match=r"Dot\): incompatible input shapes \[\(None, 3\), "
                                         r"\(None, 4\)\]"):
        L.Dot(axes=1)([a, b])
    with pytest.raises(ValueError, match="not a valid non-batch axis"):
        L.Dot(axes=0)([a, a])
    with pytest.raises(ValueError, match="exactly 2 inputs"):
        L.Dot(axes=1)([a, a, a])
    with pytest.raises(TypeError, match="axes must be an int or a list of 2 ints"):
        L.Dot(axes="x")


@pytest.mark.parametrize("fn,cls,ref", [
    (L.add, L.Add, lambda a, b: a + b), (L.subtract, L.Subtract, lambda a, b: a - b),
    (L.multiply, L.Multiply, lambda a, b: a * b), (L.average, L.Average,
                                                   lambda a, b: (a + b) / 2),
    (L.maximum, L.Maximum, np.maximum), (L.minimum, L.Minimum, np.minimum),
    (L.concatenate, L.Concatenate, lambda a, b: np.concatenate([a, b], -1)),
    (L.dot, L.Dot, lambda a, b: (a * b).sum(-1, keepdims=True)),
])
def test_lowercase_helpers_build_the_layer_and_call_it(fn, cls, ref):
    ia, ib = kiln.Input((4,)), kiln.Input((4,))
    out = fn([ia, ib], name=f"merge_{cls.__name__.lower()}", **(
        {"axes": 1} if cls is L.Dot else {}))
    model = kiln.Model([ia, ib], out)
    assert isinstance(model.layers[-1], cls)
    assert model.layers[-1].name == f"merge_{cls.__name__.lower()}"
    a, b = _normal(3, 4).astype("float32"), _normal(3, 4).astype("float32")
    np.testing.assert_allclose(model.predict([a, b], verbose=0), ref(a, b), rtol=1e-6,
                               atol=1e-6)


# ---- reshaping ----------------------------------------------------------------------------------
def test_cropping_padding_upsampling_match_numpy():
    x3, x4 = _normal(2, 6, 3), _normal(2, 5, 6, 2)
    np.testing.assert_array_equal(L.Cropping1D((1, 2), dtype="float64")(x3), x3[:, 1:4])
    np.testing.assert_array_equal(L.Cropping1D(2, dtype="float64")(x3), x3[:, 2:4])
    np.testing.assert_array_equal(L.Cropping2D(((1, 0), (2, 1)), dtype="float64")(x4),
                                  x4[:, 1:, 2:5])
    np.testing.assert_array_equal(L.Cropping2D((1, 2), dtype="float64")(x4), x4[:, 1:4, 2:4])
    np.testing.assert_array_equal(L.Cropping2D(1, dtype="float64")(x4), x4[:, 1:4, 1:5])
    np.testing.assert_array_equal(L.ZeroPadding1D((1, 2), dtype="float64")(x3),
                                  np.pad(x3, ((0, 0), (1, 2), (0, 0))))
    np.testing.assert_array_equal(L.ZeroPadding1D(dtype="float64")(x3),
                                  np.pad(x3, ((0, 0), (1, 1), (0, 0))))
    np.testing.assert_array_equal(L.UpSampling1D(3, dtype="float64")(x3),
                                  np.repeat(x3, 3, axis=1))
    _fd_check(L.UpSampling1D(2, dtype="float64"), x3)
    _fd_check(L.Cropping2D(((1, 0), (2, 1)), dtype="float64"), x4)


def test_cropping_errors_name_the_layer_and_shape():
    with pytest.raises(ValueError, match=r"Cropping1D\): cropping \(\(3, 3\),\) leaves nothing "
                                         r"of axis 1 of the input of shape \(None, 6, 3\)"):
        L.Cropping1D(3)(kiln.placeholder((None, 6, 3), "float32"))
    with pytest.raises(ValueError, match="cropping must be non-negative|non-negative"):
        L.Cropping1D((-1, 1))
    with pytest.raises(ValueError, match="expected ndim=4|rank"):
        L.Cropping2D(1)(kiln.placeholder((None, 6, 3), "float32"))


# ---- normalization ------------------------------------------------------------------------------
def test_unit_normalization_matches_numpy():
    x = _normal(3, 4, 5)
    np.testing.assert_allclose(L.UnitNormalization(dtype="float64")(x),
                               x / np.linalg.norm(x, axis=-1, keepdims=True), **TOL)
    np.testing.assert_allclose(L.UnitNormalization(axis=[1, 2], dtype="float64")(x),
                               x / np.sqrt((x ** 2).sum((1, 2), keepdims=True)), **TOL)
    _fd_check(L.UnitNormalization(dtype="float64"), x)


def np_group_norm(x, groups, gamma, beta, eps):
    n, *rest, c = x.shape
    g = x.reshape(n, *rest, groups, c // groups)
    axes = tuple(range(1, len(rest) + 1)) + (len(rest) + 2,)
    mean = g.mean(axis=axes, keepdims=True)
    var = g.var(axis=axes, keepdims=True)
    return ((g - mean) / np.sqrt(var + eps)).reshape(x.shape) * gamma + beta


@pytest.mark.torch
@pytest.mark.parametrize("groups", [1, 2, 4, -1])
def test_group_normalization_matches_numpy_and_torch(groups):
    torch = pytest.importorskip("torch")
    layer = L.GroupNormalization(groups=groups, gamma_initializer="random_normal",
                                 beta_initializer="random_normal", dtype="float64")
    x = _normal(2, 3, 5, 4)
    y = layer(x)
    gamma, beta = layer.get_weights()
    real = 4 if groups == -1 else groups
    assert layer.groups == real
    np.testing.assert_allclose(y, np_group_norm(x, real, gamma, beta, 1e-3), **TOL)
    want = torch.nn.functional.group_norm(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()),
                                          real, torch.from_numpy(gamma),
                                          torch.from_numpy(beta), eps=1e-3)
    np.testing.assert_allclose(y, want.numpy().transpose(0, 2, 3, 1), rtol=1e-9, atol=1e-9)


def test_group_normalization_gradients_match_fd():
    layer = L.GroupNormalization(groups=2, axis=1, gamma_initializer="random_normal",
                                 dtype="float64")
    x = _normal(2, 4, 3)
    np.testing.assert_allclose(
        layer(x), np_group_norm(x.transpose(0, 2, 1), 2, *layer.get_weights(),
                                1e-3).transpose(0, 2, 1), **TOL)
    _fd_check(layer, x)
    _fd_check(layer, x, wrt_weights=True)


def test_group_normalization_errors():
    with pytest.raises(ValueError, match=r"number of groups \(3\) must divide the number of "
                                         r"channels \(4\)"):
        L.GroupNormalization(groups=3)(kiln.placeholder((None, 2, 4), "float32"))
    with pytest.raises(ValueError, match=r"number of groups \(8\) cannot be more than the "
                                         r"number of channels \(4\)"):
        L.GroupNormalization(groups=8)(kiln.placeholder((None, 2, 4), "float32"))
    with pytest.raises(ValueError, match="groups must be a positive int or -1"):
        L.GroupNormalization(groups=0)


# ---- noise layers -------------------------------------------------------------------------------
def _train(layer, x, seed=7):
    """One training-mode evaluation with the random key [seed, 0]."""
    xp = kiln.placeholder(x.shape, "float64")
    key = kiln.placeholder((2,), "int64")
    with trace(training=True, rng_key=key):
        y = layer(xp)
    return kiln.function([xp, key], y)(x, np.array([seed, 0], np.int64))


@pytest.mark.parametrize("layer", [L.GaussianNoise(0.5, dtype="float64"),
                                   L.GaussianDropout(0.3, dtype="float64"),
                                   L.SpatialDropout1D(0.4, dtype="float64")])
def test_noise_layers_are_the_identity_in_inference(layer):
    x = _normal(4, 6, 3)
    np.testing.assert_array_equal(layer(x), x)
    np.testing.assert_array_equal(layer(x, training=False), x)


def test_gaussian_noise_statistics_and_seed():
    x = np.ones((200, 100))
    layer = L.GaussianNoise(0.5, seed=3, dtype="float64")
    noise = _train(layer, x) - x
    # 20000 draws: the sample mean is within 4 standard errors (0.5 / sqrt(20000)) of 0
    assert abs(noise.mean()) < 4 * 0.5 / np.sqrt(noise.size)
    assert abs(noise.std() - 0.5) < 0.02
    np.testing.assert_array_equal(_train(layer, x) - x, noise)     # same key: same noise
    assert not np.array_equal(_train(layer, x, seed=8) - x, noise)  # another key
    other = L.GaussianNoise(0.5, seed=4, dtype="float64")
    assert not np.array_equal(_train(other, x) - x, noise)          # another stream


def test_gaussian_dropout_statistics():
    x = np.full((200, 100), 2.0)
    factor = _train(L.GaussianDropout(0.2, seed=1, dtype="float64"), x) / x
    sd = np.sqrt(0.2 / 0.8)
    assert abs(factor.mean() - 1) < 4 * sd / np.sqrt(factor.size)
    assert abs(factor.std() - sd) < 0.02


@pytest.mark.parametrize("cls,shape", [(L.SpatialDropout1D, (50, 6, 8)),
                                       (L.SpatialDropout2D, (50, 3, 4, 8))])
def test_spatial_dropout_drops_whole_channels(cls, shape):
    x = _normal(*shape) + 5.0  # never zero
    y = _train(cls(0.4, seed=2, dtype="float64"), x)
    kept = y != 0
    spatial = tuple(range(1, len(shape) - 1))
    # each (sample, channel) is kept or dropped at every step / pixel together
    assert np.all(kept.all(axis=spatial) | (~kept).all(axis=spatial))
    np.testing.assert_allclose(y[kept], x[kept] / 0.6, rtol=1e-12)
    frac = 1 - kept.all(axis=spatial).mean()
    assert abs(frac - 0.4) < 4 * np.sqrt(0.4 * 0.6 / (shape[0] * shape[-1]))


def test_noise_layer_errors():
    with pytest.raises(ValueError, match=r"GaussianNoise: stddev must be a number >= 0"):
        L.GaussianNoise(-1.0)
    with pytest.raises(ValueError, match=r"GaussianDropout: rate must be a float in \[0, 1\)"):
        L.GaussianDropout(1.0)
    with pytest.raises(ValueError, match="expected ndim=3|rank"):
        L.SpatialDropout1D(0.2)(kiln.placeholder((None, 4, 4, 3), "float32"))
    with pytest.raises(ValueError, match=r"ReLU: max_value cannot be a negative value"):
        L.ReLU(max_value=-1.0)
