"""Grouped, depthwise, separable and 1-D transposed convolutions against torch's functional
convolutions (``groups=``), float64, forward and gradients; on the reference backend (the
layers) and on the CPU backend (the grouped kernels of
kiln/core/backends/cpu/kernels/conv/conv_groups.py);
a float64 finite-difference check; and the errors for bad group counts."""

from __future__ import annotations

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
import kiln.ops as K
from kiln import layers as L

TOL = {"rtol": 1e-10, "atol": 1e-10}
RNG = np.random.default_rng(15)


def _normal(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


def tf_pads(size: int, k: int, s: int, d: int, padding: str) -> tuple[int, int]:
    """(before, after) padding of one axis by TensorFlow's rule."""
    if padding == "valid":
        return 0, 0
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _t(torch, a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _torch_conv2d(torch, x, w, b, strides, padding, dilation, groups):
    """NHWC x, Keras kernel (kh, kw, cin / groups, cout) -> NHWC, through F.conv2d."""
    F = torch.nn.functional
    top, bottom = tf_pads(x.shape[1], w.shape[0], strides[0], dilation[0], padding)
    left, right = tf_pads(x.shape[2], w.shape[1], strides[1], dilation[1], padding)
    xt = F.pad(_t(torch, x.transpose(0, 3, 1, 2)), (left, right, top, bottom))
    y = F.conv2d(xt, _t(torch, w.transpose(3, 2, 0, 1)), None if b is None else _t(torch, b),
                 stride=strides, dilation=dilation, groups=groups)
    return y.numpy().transpose(0, 2, 3, 1)


GROUPED = [  # x shape, filters, kernel, strides, padding, dilation, groups
    ((2, 7, 6, 4), 6, (3, 2), (1, 1), "valid", (1, 1), 2),
    ((2, 7, 6, 6), 6, (3, 3), (2, 2), "same", (1, 1), 3),
    ((1, 8, 7, 4), 8, (2, 3), (1, 1), "same", (2, 1), 4),
]


@pytest.mark.torch
@pytest.mark.parametrize("shape,filters,kernel,strides,padding,dilation,groups", GROUPED)
def test_grouped_conv2d_layer_matches_torch(torch, shape, filters, kernel, strides, padding,
                                            dilation, groups):
    layer = L.Conv2D(filters, kernel, strides=strides, padding=padding, groups=groups,
                     dilation_rate=dilation, bias_initializer="random_normal",
                     dtype="float64")
    x = _normal(*shape)
    y = layer(x)
    w, b = layer.get_weights()
    assert w.shape == kernel + (shape[3] // groups, filters)
    np.testing.assert_allclose(y, _torch_conv2d(torch, x, w, b, strides, padding, dilation,
                                                groups), **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("shape,filters,kernel,strides,padding,dilation,groups", GROUPED + [
    ((2, 6, 5, 3), 6, (3, 3), (1, 2), "same", (1, 1), 3)])  # depthwise, multiplier 2
def test_grouped_conv2d_op_and_gradients_match_torch(torch, backend, shape, filters, kernel,
                                                     strides, padding, dilation, groups):
    x = _normal(*shape)
    w = _normal(*kernel, shape[3] // groups, filters)
    xp = kiln.placeholder(x.shape, "float64")
    wp = kiln.placeholder(w.shape, "float64")
    y = K.conv2d(xp, wp, strides=strides, padding=padding, dilation_rate=dilation,
                 groups=groups)
    ct = _normal(*y.shape)
    loss = K.sum(y * K.constant(ct))
    gx, gw = kiln.grad(loss, [xp, wp])
    # second order: the gradient of <gx, v> in w goes through conv2d_backprop_input's VJP
    v = _normal(*x.shape)
    (gww,) = kiln.grad(K.sum(gx * K.constant(v)), [wp])
    got = kiln.function([xp, wp], [y, gx, gw, gww], backend=backend)(x, w)

    xt = _t(torch, x).requires_grad_(True)
    wt = _t(torch, w).requires_grad_(True)
    F = torch.nn.functional
    top, bottom = tf_pads(shape[1], kernel[0], strides[0], dilation[0], padding)
    left, right = tf_pads(shape[2], kernel[1], strides[1], dilation[1], padding)
    yt = F.conv2d(F.pad(xt.permute(0, 3, 1, 2), (left, right, top, bottom)),
                  wt.permute(3, 2, 0, 1), stride=strides, dilation=dilation,
                  groups=groups).permute(0, 2, 3, 1)
    gxt, gwt = torch.autograd.grad((yt * _t(torch, ct)).sum(), [xt, wt], create_graph=True)
    (gwwt,) = torch.autograd.grad((gxt * _t(torch, v)).sum(), [wt])
    for a, b in zip(got, [yt, gxt, gwt, gwwt]):
        np.testing.assert_allclose(a, b.detach().numpy(), **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("padding,strides,causal", [("valid", 1, False), ("same", 2, False),
                                                    ("causal", 1, True)])
def test_grouped_conv1d_layer_matches_torch(torch, padding, strides, causal):
    F = torch.nn.functional
    layer = L.Conv1D(4, 3, strides=strides, padding=padding, groups=2,
                     bias_initializer="random_normal", dtype="float64")
    x = _normal(2, 9, 6)
    y = layer(x)
    w, b = layer.get_weights()
    pads = (2, 0) if causal else tf_pads(9, 3, strides, 1, padding)
    want = F.conv1d(F.pad(_t(torch, x.transpose(0, 2, 1)), pads),
                    _t(torch, w.transpose(2, 1, 0)), _t(torch, b), stride=strides, groups=2)
    np.testing.assert_allclose(y, want.numpy().transpose(0, 2, 1), **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("multiplier,strides,padding,dilation", [(1, 1, "valid", 1),
                                                                 (2, 2, "same", 1),
                                                                 (3, 1, "same", 2)])
def test_depthwise_conv2d_matches_torch(torch, multiplier, strides, padding, dilation):
    layer = L.DepthwiseConv2D(3, strides=strides, padding=padding, dilation_rate=dilation,
                              depth_multiplier=multiplier, bias_initializer="random_normal",
                              dtype="float64")
    x = _normal(2, 7, 6, 3)
    y = layer(x)
    w, b = layer.get_weights()
    assert w.shape == (3, 3, 3, multiplier) and b.shape == (3 * multiplier,)
    # Keras' (kh, kw, c, m) kernel is torch's (c * m, 1, kh, kw) with output c * m + j
    wk = w.reshape(3, 3, 1, 3 * multiplier)
    want = _torch_conv2d(torch, x, wk, b, (strides,) * 2, padding, (dilation,) * 2, 3)
    np.testing.assert_allclose(y, want, **TOL)


@pytest.mark.torch
def test_depthwise_conv1d_matches_torch(torch):
    F = torch.nn.functional
    layer = L.DepthwiseConv1D(3, depth_multiplier=2, padding="same",
                              bias_initializer="random_normal", dtype="float64")
    x = _normal(2, 8, 3)
    y = layer(x)
    w, b = layer.get_weights()
    want = F.conv1d(F.pad(_t(torch, x.transpose(0, 2, 1)), (1, 1)),
                    _t(torch, w.reshape(3, 6).T[:, None, :]), _t(torch, b), groups=3)
    np.testing.assert_allclose(y, want.numpy().transpose(0, 2, 1), **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("rank", [1, 2])
def test_separable_conv_matches_torch(torch, rank):
    F = torch.nn.functional
    cls = L.SeparableConv2D if rank == 2 else L.SeparableConv1D
    layer = cls(5, 3, strides=2, padding="same", depth_multiplier=2,
                bias_initializer="random_normal", dtype="float64")
    x = _normal(2, 7, 7, 3) if rank == 2 else _normal(2, 7, 3)
    y = layer(x)
    dw, pw, b = layer.get_weights()
    if rank == 1:
        x, dw, pw = x[:, None], dw[None], pw[None]
    mid = _torch_conv2d(torch, x, dw.reshape(*dw.shape[:2], 1, 6), None, (1, 2) if rank == 1
                        else (2, 2), "same", (1, 1), 3)
    want = F.conv2d(_t(torch, mid.transpose(0, 3, 1, 2)), _t(torch, pw.transpose(3, 2, 0, 1)),
                    _t(torch, b)).numpy().transpose(0, 2, 3, 1)
    np.testing.assert_allclose(y, want[:, 0] if rank == 1 else want, **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("strides,padding,output_padding,length", [(2, "valid", None, 9),
                                                                  (2, "same", None, 8),
                                                                  (3, "valid", 1, 13)])
def test_conv1d_transpose_matches_torch(torch, strides, padding, output_padding, length):
    F = torch.nn.functional
    layer = L.Conv1DTranspose(3, 3, strides=strides, padding=padding,
                              output_padding=output_padding,
                              bias_initializer="random_normal", dtype="float64")
    x = _normal(2, 4, 2)
    y = layer(x)
    w, b = layer.get_weights()
    assert w.shape == (3, 3, 2) and y.shape == (2, length, 3)
    # Keras' (k, filters, cin) kernel is torch's (cin, filters, k); the result is the
    # transpose of a conv of a `length`-long input: it starts at that conv's (TF) padding
    full = F.conv_transpose1d(_t(torch, x.transpose(0, 2, 1)), _t(torch, w.transpose(2, 1, 0)),
                              _t(torch, b), stride=strides,
                              output_padding=output_padding or 0).numpy().transpose(0, 2, 1)
    start = tf_pads(length, 3, strides, 1, padding)[0]
    want = full[:, start:start + length]
    np.testing.assert_allclose(y, want, **TOL)


def test_separable_conv2d_input_gradient_matches_finite_differences():
    layer = L.SeparableConv2D(2, 2, depth_multiplier=2, padding="same", dtype="float64")
    x = _normal(1, 4, 3, 2)
    layer(x)
    xp = kiln.placeholder(x.shape, "float64")
    ct = _normal(1, 4, 3, 2)
    loss = K.sum(layer(xp) * K.constant(ct))
    (g,) = kiln.grad(loss, [xp])
    f = kiln.function([xp], [loss, g])
    want = numeric_grad(lambda: float(f(x)[0]), x)
    np.testing.assert_allclose(f(x)[1], want, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("make,shape,message", [
    (lambda: L.Conv2D(5, 3, groups=2), None, "filters must be divisible"),
    (lambda: L.Conv2D(4, 3, groups=0), None, "groups must be a positive int"),
    (lambda: L.Conv2D(4, 3, groups=2), (None, 5, 5, 3), "divisible by the number of groups"),
    (lambda: L.DepthwiseConv2D(3, depth_multiplier=0), None, "depth_multiplier"),
    (lambda: L.Conv1DTranspose(2, 3, strides=2, output_padding=2), None,
     "output_padding"),
])
def test_bad_group_arguments_raise(make, shape, message):
    with pytest.raises(ValueError, match=message):
        layer = make()
        layer(kiln.placeholder(shape, "float32"))


def test_grouped_conv2d_op_rejects_mismatched_channels():
    x = kiln.placeholder((None, 5, 5, 6), "float32")
    with pytest.raises(ValueError, match=r"conv2d: input of shape .* has 6 channels but the "
                                         r"kernel of shape \(3, 3, 2, 4\) expects 4"):
        K.conv2d(x, kiln.placeholder((3, 3, 2, 4), "float32"), groups=2)
    with pytest.raises(ValueError, match="not a multiple of groups=4"):
        K.conv2d(x, kiln.placeholder((3, 3, 2, 6), "float32"), groups=4)
