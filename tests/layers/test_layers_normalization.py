"""BatchNormalization and LayerNormalization against NumPy formulas and torch: training
(batch statistics, moving-statistics updates inside the compiled training step) and
inference (moving statistics)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers as L
from kiln.layers.context import trace

RNG = np.random.default_rng(0)
TOL = {"rtol": 1e-9, "atol": 1e-10}


def _normal(*shape: int, scale: float = 1.0, loc: float = 0.0) -> np.ndarray:
    return loc + scale * RNG.normal(size=shape)


def _bn_with_random_state(shape: tuple, **kwargs) -> L.BatchNormalization:
    layer = L.BatchNormalization(dtype="float64", **kwargs)
    layer(kiln.placeholder((None,) + shape[1:], "float64"))
    layer.set_weights([RNG.uniform(0.5, 2.0, size=w.shape) if "variance" in w.name
                       else RNG.normal(size=w.shape) for w in layer.weights])
    return layer


def _bn_training_step(layer: L.BatchNormalization, shape: tuple):
    """One compiled training-mode forward that applies the recorded moving-stat updates."""
    x = kiln.placeholder((None,) + shape[1:], "float64")
    with trace(training=True) as ctx:
        y = layer(x)
    assert [v for v, _ in ctx.updates] == [layer.moving_mean, layer.moving_variance]
    return kiln.function([x], y, updates=ctx.updates, backend="reference")


def np_batch_norm(x, gamma, beta, mean, var, eps, axis):
    shape = [1] * x.ndim
    shape[axis] = -1
    r = lambda v: v.reshape(shape)  # noqa: E731
    return r(gamma) * (x - r(mean)) / np.sqrt(r(var) + eps) + r(beta)


@pytest.mark.parametrize("shape,axis", [((6, 4), -1), ((5, 3, 4, 2), -1), ((4, 3, 5), 1)])
def test_batch_norm_training_and_inference_match_numpy(shape, axis) -> None:
    layer = _bn_with_random_state(shape, axis=axis, momentum=0.9, epsilon=1e-3)
    gamma, beta, mm, mv = layer.get_weights()
    x = _normal(*shape, scale=3.0, loc=1.0)
    ax = axis % len(shape)
    red = tuple(a for a in range(len(shape)) if a != ax)
    mean, var = x.mean(red), x.var(red)  # biased variance, as in Keras

    step = _bn_training_step(layer, shape)
    np.testing.assert_allclose(step(x), np_batch_norm(x, gamma, beta, mean, var, 1e-3, ax), **TOL)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.9 * mm + 0.1 * mean, **TOL)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.9 * mv + 0.1 * var, **TOL)

    # inference: moving statistics, and nothing is updated
    mm2, mv2 = layer.moving_mean.numpy(), layer.moving_variance.numpy()
    np.testing.assert_allclose(layer(x), np_batch_norm(x, gamma, beta, mm2, mv2, 1e-3, ax), **TOL)
    np.testing.assert_array_equal(layer.moving_mean.numpy(), mm2)


def test_batch_norm_eager_training_call_updates_moving_stats() -> None:
    layer = L.BatchNormalization(dtype="float64")
    x = _normal(8, 3, loc=2.0)
    y = layer(x, training=True)
    np.testing.assert_allclose(y, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3), **TOL)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.01 * x.mean(0), **TOL)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.99 + 0.01 * x.var(0), **TOL)


def test_batch_norm_not_trainable_runs_in_inference_mode() -> None:
    layer = _bn_with_random_state((6, 4))
    layer.trainable = False
    gamma, beta, mm, mv = layer.get_weights()
    x = _normal(6, 4)
    x_ph = kiln.placeholder((None, 4), "float64")
    with trace(training=True) as ctx:
        y = layer(x_ph)
    assert ctx.updates == [] and layer.trainable_weights == []
    got = kiln.function([x_ph], y, backend="reference")(x)
    np.testing.assert_allclose(got, np_batch_norm(x, gamma, beta, mm, mv, 1e-3, 1), **TOL)


def test_batch_norm_weights_order_like_keras() -> None:
    layer = L.BatchNormalization()
    layer(kiln.placeholder((None, 3)))
    assert [w.short_name for w in layer.weights] == ["gamma", "beta", "moving_mean",
                                                     "moving_variance"]
    assert [w.short_name for w in layer.non_trainable_weights] == ["moving_mean",
                                                                   "moving_variance"]


@pytest.mark.parametrize("axis,center,scale", [(-1, True, True), ([1, 2], True, False),
                                               (1, False, True)])
def test_layer_norm_matches_numpy(axis, center, scale) -> None:
    layer = L.LayerNormalization(axis=axis, center=center, scale=scale, epsilon=1e-5,
                                 beta_initializer="random_normal",
                                 gamma_initializer="random_normal", dtype="float64")
    x = _normal(3, 4, 5, scale=2.0, loc=-1.0)
    y = layer(x)
    axes = tuple(np.atleast_1d(axis) % 3)
    mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    want = (x - mean) / np.sqrt(var + 1e-5)
    shape = [1, 1, 1]
    for a in axes:
        shape[a] = x.shape[a]
    weights = layer.get_weights()
    if scale:
        want = want * weights.pop(0).reshape(shape)
    if center:
        want = want + weights.pop(0).reshape(shape)
    np.testing.assert_allclose(y, want, **TOL)
    # the same in a training trace (per-sample statistics)
    ph = kiln.placeholder((None, 4, 5), "float64")
    with trace(training=True) as ctx:
        out = layer(ph)
    assert ctx.updates == []
    np.testing.assert_allclose(kiln.function([ph], out, backend="reference")(x), want, **TOL)


def test_layer_norm_rms_scaling() -> None:
    layer = L.LayerNormalization(rms_scaling=True, dtype="float64")
    x = _normal(3, 6)
    np.testing.assert_allclose(layer(x), x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-3),
                               **TOL)


# ---- torch oracles ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.mark.torch
def test_batch_norm_matches_torch_training_and_inference(torch) -> None:
    F = torch.nn.functional
    shape = (6, 3, 4, 5)  # NHWC, 5 channels
    layer = _bn_with_random_state(shape, momentum=0.8, epsilon=1e-3)
    gamma, beta, mm, mv = (torch.from_numpy(w) for w in layer.get_weights())
    x = _normal(*shape, scale=2.0, loc=0.5)
    xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    run_mean, run_var = mm.clone(), mv.clone()
    want = F.batch_norm(xt, run_mean, run_var, gamma, beta, training=True, momentum=0.2,
                        eps=1e-3)
    got = _bn_training_step(layer, shape)(x)
    np.testing.assert_allclose(got, want.numpy().transpose(0, 2, 3, 1), **TOL)
    np.testing.assert_allclose(layer.moving_mean.numpy(), run_mean.numpy(), **TOL)
    # torch's running variance uses the unbiased batch variance, Keras' the biased one
    n = 6 * 3 * 4
    torch_batch_var = (run_var.numpy() - 0.8 * mv.numpy()) / 0.2
    np.testing.assert_allclose(layer.moving_variance.numpy(),
                               0.8 * mv.numpy() + 0.2 * torch_batch_var * (n - 1) / n, **TOL)
    # inference with the updated statistics
    want = F.batch_norm(xt, torch.from_numpy(layer.moving_mean.numpy()),
                        torch.from_numpy(layer.moving_variance.numpy()), gamma, beta,
                        training=False, eps=1e-3)
    np.testing.assert_allclose(layer(x), want.numpy().transpose(0, 2, 3, 1), **TOL)


@pytest.mark.torch
def test_layer_norm_matches_torch(torch) -> None:
    F = torch.nn.functional
    layer = L.LayerNormalization(epsilon=1e-5, gamma_initializer="random_normal",
                                 beta_initializer="random_normal", dtype="float64")
    x = _normal(4, 3, 8, scale=3.0)
    y = layer(x)
    gamma, beta = (torch.from_numpy(w) for w in layer.get_weights())
    want = F.layer_norm(torch.from_numpy(x), (8,), gamma, beta, eps=1e-5)
    np.testing.assert_allclose(y, want.numpy(), **TOL)
    layer2 = L.LayerNormalization(axis=[1, 2], epsilon=1e-5, dtype="float64",
                                  gamma_initializer="random_normal")
    y2 = layer2(x)
    gamma2, beta2 = (torch.from_numpy(w) for w in layer2.get_weights())
    want2 = F.layer_norm(torch.from_numpy(x), (3, 8), gamma2, beta2, eps=1e-5)
    np.testing.assert_allclose(y2, want2.numpy(), **TOL)


@pytest.mark.torch
def test_batch_norm_gradients_match_torch(torch) -> None:
    import kiln.ops as K

    F = torch.nn.functional
    layer = _bn_with_random_state((6, 4))
    gamma, beta, mm, mv = layer.get_weights()
    x = _normal(6, 4)
    ph = kiln.placeholder((None, 4), "float64")
    with trace(training=True):
        loss = K.sum(K.square(layer(ph)) * K.constant(np.arange(4.0)))
    grads = kiln.grad(loss, [layer.gamma, layer.beta, ph])
    got = kiln.function([ph], grads, backend="reference")(x)
    gt, bt, xt = (torch.from_numpy(a).requires_grad_() for a in (gamma, beta, x))
    out = F.batch_norm(xt, torch.from_numpy(mm), torch.from_numpy(mv), gt, bt, training=True,
                       eps=1e-3)
    (out**2 * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    for g, t in zip(got, (gt, bt, xt)):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-8, atol=1e-9)
