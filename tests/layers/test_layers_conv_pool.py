"""Conv1D / Conv2D / Conv2DTranspose and the pooling layers against NumPy loops written here
and against torch (TensorFlow "same" padding reproduced by explicit padding). Layers run in
float64 so that the comparisons are tight."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import layers as L

RNG = np.random.default_rng(0)
TOL = {"rtol": 1e-10, "atol": 1e-10}


def _normal(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


def tf_pads(size: int, k: int, s: int, d: int, padding: str) -> tuple[int, int]:
    """(before, after) padding of one axis by TensorFlow's rule."""
    keff = (k - 1) * d + 1
    if padding == "valid":
        return 0, 0
    out = -(-size // s)
    total = max((out - 1) * s + keff - size, 0)
    return total // 2, total - total // 2


# ---- NumPy oracles ------------------------------------------------------------------------------
def np_conv2d(x, w, strides, padding, dilation):
    (sh, sw), (dh, dw) = strides, dilation
    kh, kw, _, f = w.shape
    pads = [tf_pads(x.shape[1], kh, sh, dh, padding), tf_pads(x.shape[2], kw, sw, dw, padding)]
    xp = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    oh = (xp.shape[1] - (kh - 1) * dh - 1) // sh + 1
    ow = (xp.shape[2] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, f))
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    out[:, i, j] += xp[:, i * sh + a * dh, j * sw + b * dw] @ w[a, b]
    return out


def np_conv2d_transpose(x, w, strides, padding, out_hw, dilation=(1, 1)):
    """Scatter form: every input pixel adds its kernel-weighted copy, then TF's crop."""
    (sh, sw), (dh, dw) = strides, dilation
    kh, kw, f, _ = w.shape
    n, h, wd, _ = x.shape
    full = np.zeros((n, (h - 1) * sh + (kh - 1) * dh + 1 + sh,
                     (wd - 1) * sw + (kw - 1) * dw + 1 + sw, f))
    for i in range(h):
        for j in range(wd):
            for a in range(kh):
                for b in range(kw):
                    full[:, i * sh + a * dh, j * sw + b * dw] += x[:, i, j] @ w[a, b].T
    top = tf_pads(out_hw[0], kh, sh, dh, padding)[0]
    left = tf_pads(out_hw[1], kw, sw, dw, padding)[0]
    return full[:, top:top + out_hw[0], left:left + out_hw[1]]


def np_pool2d(x, pool, strides, padding, kind):
    (ph, pw), (sh, sw) = pool, strides
    pads = [tf_pads(x.shape[1], ph, sh, 1, padding), tf_pads(x.shape[2], pw, sw, 1, padding)]
    fill = -np.inf if kind == "max" else np.nan
    xp = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)), constant_values=fill)
    oh = (xp.shape[1] - ph) // sh + 1
    ow = (xp.shape[2] - pw) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i * sh:i * sh + ph, j * sw:j * sw + pw]
            out[:, i, j] = win.max(axis=(1, 2)) if kind == "max" else np.nanmean(win, axis=(1, 2))
    return out


# ---- forward against NumPy ----------------------------------------------------------------------
CONV2D = [  # kernel, strides, padding, dilation
    ((3, 3), (1, 1), "valid", (1, 1)),
    ((3, 2), (2, 2), "same", (1, 1)),
    ((2, 3), (2, 1), "valid", (1, 1)),
    ((3, 3), (1, 1), "same", (2, 2)),
    ((1, 1), (3, 3), "same", (1, 1)),
]


@pytest.mark.parametrize("kernel,strides,padding,dilation", CONV2D)
def test_conv2d_matches_numpy(kernel, strides, padding, dilation) -> None:
    layer = L.Conv2D(4, kernel, strides=strides, padding=padding, dilation_rate=dilation,
                     bias_initializer="random_normal", dtype="float64")
    x = _normal(2, 7, 6, 3)
    y = layer(x)
    w, b = layer.get_weights()
    np.testing.assert_allclose(y, np_conv2d(x, w, strides, padding, dilation) + b, **TOL)


@pytest.mark.parametrize("kernel,strides,padding,dilation",
                         [(3, 1, "valid", 1), (3, 2, "same", 1), (2, 1, "causal", 2),
                          (4, 3, "same", 1), (3, 1, "same", 2)])
def test_conv1d_matches_numpy(kernel, strides, padding, dilation) -> None:
    layer = L.Conv1D(3, kernel, strides=strides, padding=padding, dilation_rate=dilation,
                     activation="tanh", dtype="float64")
    x = _normal(2, 9, 2)
    y = layer(x)
    w, b = layer.get_weights()
    if padding == "causal":
        x = np.pad(x, ((0, 0), ((kernel - 1) * dilation, 0), (0, 0)))
        padding = "valid"
    want = np_conv2d(x[:, None], w[None], (1, strides), padding, (1, dilation))[:, 0]
    np.testing.assert_allclose(y, np.tanh(want + b), **TOL)


CONV_T = [  # kernel, strides, padding, output_padding, input hw, expected output hw
    ((3, 3), (2, 2), "same", None, (4, 5), (8, 10)),
    ((3, 3), (2, 2), "valid", None, (4, 5), (9, 11)),
    ((2, 2), (3, 3), "valid", None, (3, 2), (9, 6)),   # kernel smaller than the stride
    ((3, 2), (2, 2), "valid", (1, 1), (4, 3), (10, 7)),
    ((4, 4), (2, 2), "same", (1, 1), (3, 3), (5, 5)),
    ((3, 3), (2, 2), "same", (1, 0), (3, 3), (6, 5)),
    ((3, 3), (1, 1), "same", None, (4, 4), (4, 4)),
]


@pytest.mark.parametrize("kernel,strides,padding,output_padding,in_hw,out_hw", CONV_T)
def test_conv2d_transpose_matches_numpy(kernel, strides, padding, output_padding, in_hw,
                                        out_hw) -> None:
    layer = L.Conv2DTranspose(2, kernel, strides=strides, padding=padding,
                              output_padding=output_padding, dtype="float64",
                              bias_initializer="random_normal")
    x = _normal(2, *in_hw, 3)
    y = layer(x)
    assert y.shape == (2, *out_hw, 2)
    w, b = layer.get_weights()
    np.testing.assert_allclose(y, np_conv2d_transpose(x, w, strides, padding, out_hw) + b, **TOL)


POOL2D = [((2, 2), None, "valid"), ((3, 3), (2, 2), "same"), ((3, 2), (1, 2), "valid"),
          ((2, 2), (1, 1), "same"), ((3, 3), (3, 3), "same")]


@pytest.mark.parametrize("pool,strides,padding", POOL2D)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_matches_numpy(pool, strides, padding, kind) -> None:
    cls = L.MaxPooling2D if kind == "max" else L.AveragePooling2D
    x = _normal(2, 7, 6, 3)
    y = cls(pool, strides, padding, dtype="float64")(x)
    np.testing.assert_allclose(y, np_pool2d(x, pool, strides or pool, padding, kind), **TOL)


@pytest.mark.parametrize("pool,strides,padding", [(2, None, "valid"), (3, 2, "same"),
                                                  (3, 1, "valid")])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool1d_matches_numpy(pool, strides, padding, kind) -> None:
    cls = L.MaxPooling1D if kind == "max" else L.AveragePooling1D
    x = _normal(2, 9, 3)
    y = cls(pool, strides, padding, dtype="float64")(x)
    want = np_pool2d(x[:, None], (1, pool), (1, strides or pool), padding, kind)[:, 0]
    np.testing.assert_allclose(y, want, **TOL)


def test_global_pooling_matches_numpy() -> None:
    x3, x4 = _normal(2, 5, 3), _normal(2, 4, 6, 3)
    np.testing.assert_allclose(L.GlobalAveragePooling1D(dtype="float64")(x3), x3.mean(1), **TOL)
    np.testing.assert_allclose(L.GlobalMaxPooling1D(dtype="float64")(x3), x3.max(1), **TOL)
    np.testing.assert_allclose(L.GlobalAveragePooling2D(dtype="float64", keepdims=True)(x4),
                               x4.mean((1, 2), keepdims=True), **TOL)
    np.testing.assert_allclose(L.GlobalMaxPooling2D(dtype="float64")(x4), x4.max((1, 2)), **TOL)


# ---- torch oracles ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _nchw(torch, x):
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def _nhwc(t):
    return t.numpy().transpose(0, 2, 3, 1)


@pytest.mark.torch
@pytest.mark.parametrize("kernel,strides,padding,dilation", CONV2D)
def test_conv2d_matches_torch(torch, kernel, strides, padding, dilation) -> None:
    F = torch.nn.functional
    layer = L.Conv2D(5, kernel, strides=strides, padding=padding, dilation_rate=dilation,
                     bias_initializer="random_normal", dtype="float64")
    x = _normal(2, 8, 7, 3)
    w, b = (layer(x), layer.get_weights())[1]
    top, bottom = tf_pads(8, kernel[0], strides[0], dilation[0], padding)
    left, right = tf_pads(7, kernel[1], strides[1], dilation[1], padding)
    xt = F.pad(_nchw(torch, x), (left, right, top, bottom))
    want = F.conv2d(xt, torch.from_numpy(w.transpose(3, 2, 0, 1).copy()), torch.from_numpy(b),
                    stride=strides, dilation=dilation)
    np.testing.assert_allclose(layer(x), _nhwc(want), **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("kernel,strides,padding,dilation",
                         [(3, 1, "valid", 1), (3, 2, "same", 1), (3, 1, "causal", 2)])
def test_conv1d_matches_torch(torch, kernel, strides, padding, dilation) -> None:
    F = torch.nn.functional
    layer = L.Conv1D(4, kernel, strides=strides, padding=padding, dilation_rate=dilation,
                     bias_initializer="random_normal", dtype="float64")
    x = _normal(2, 10, 3)
    y = layer(x)
    w, b = layer.get_weights()
    if padding == "causal":
        pads = ((kernel - 1) * dilation, 0)
    else:
        pads = tf_pads(10, kernel, strides, dilation, padding)
    xt = F.pad(torch.from_numpy(x.transpose(0, 2, 1).copy()), pads)
    want = F.conv1d(xt, torch.from_numpy(w.transpose(2, 1, 0).copy()), torch.from_numpy(b),
                    stride=strides, dilation=dilation)
    np.testing.assert_allclose(y, want.numpy().transpose(0, 2, 1), **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("kernel,strides,padding,output_padding,in_hw,out_hw", CONV_T)
def test_conv2d_transpose_matches_torch(torch, kernel, strides, padding, output_padding, in_hw,
                                        out_hw) -> None:
    F = torch.nn.functional
    layer = L.Conv2DTranspose(3, kernel, strides=strides, padding=padding,
                              output_padding=output_padding, dtype="float64",
                              bias_initializer="random_normal")
    x = _normal(2, *in_hw, 2)
    y = layer(x)
    w, b = layer.get_weights()
    # torch's full transposed convolution (no padding), then TensorFlow's crop / zero fill
    full = F.conv_transpose2d(_nchw(torch, x), torch.from_numpy(w.transpose(3, 2, 0, 1).copy()),
                              stride=strides)
    full = F.pad(full, (0, strides[1], 0, strides[0]))
    top = tf_pads(out_hw[0], kernel[0], strides[0], 1, padding)[0]
    left = tf_pads(out_hw[1], kernel[1], strides[1], 1, padding)[0]
    want = _nhwc(full)[:, top:top + out_hw[0], left:left + out_hw[1]] + b
    np.testing.assert_allclose(y, want, **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("pool,strides,padding", POOL2D)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_matches_torch(torch, pool, strides, padding, kind) -> None:
    F = torch.nn.functional
    strides_ = strides or pool
    cls = L.MaxPooling2D if kind == "max" else L.AveragePooling2D
    x = _normal(2, 7, 6, 3)
    y = cls(pool, strides, padding, dtype="float64")(x)
    top, bottom = tf_pads(7, pool[0], strides_[0], 1, padding)
    left, right = tf_pads(6, pool[1], strides_[1], 1, padding)
    pads = (left, right, top, bottom)
    xt = _nchw(torch, x)
    if kind == "max":
        want = F.max_pool2d(F.pad(xt, pads, value=-np.inf), pool, strides_)
    else:  # mean over the real elements: window sums / window counts
        sums = F.avg_pool2d(F.pad(xt, pads), pool, strides_)
        counts = F.avg_pool2d(F.pad(torch.ones_like(xt), pads), pool, strides_)
        want = sums / counts
    np.testing.assert_allclose(y, _nhwc(want), **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool1d_matches_torch(torch, kind) -> None:
    F = torch.nn.functional
    x = _normal(2, 11, 3)
    cls = L.MaxPooling1D if kind == "max" else L.AveragePooling1D
    y = cls(3, 2, "valid", dtype="float64")(x)
    xt = torch.from_numpy(x.transpose(0, 2, 1).copy())
    want = F.max_pool1d(xt, 3, 2) if kind == "max" else F.avg_pool1d(xt, 3, 2)
    np.testing.assert_allclose(y, want.numpy().transpose(0, 2, 1), **TOL)


@pytest.mark.torch
def test_global_pooling_matches_torch(torch) -> None:
    F = torch.nn.functional
    x = _normal(2, 4, 5, 3)
    xt = _nchw(torch, x)
    np.testing.assert_allclose(L.GlobalAveragePooling2D(dtype="float64")(x),
                               F.adaptive_avg_pool2d(xt, 1).numpy()[:, :, 0, 0], **TOL)
    np.testing.assert_allclose(L.GlobalMaxPooling2D(dtype="float64", keepdims=True)(x),
                               _nhwc(F.adaptive_max_pool2d(xt, 1)), **TOL)
    s = _normal(2, 6, 3)
    st = torch.from_numpy(s.transpose(0, 2, 1).copy())
    np.testing.assert_allclose(L.GlobalAveragePooling1D(dtype="float64")(s),
                               F.adaptive_avg_pool1d(st, 1).numpy()[:, :, 0], **TOL)
    np.testing.assert_allclose(L.GlobalMaxPooling1D(dtype="float64")(s),
                               F.adaptive_max_pool1d(st, 1).numpy()[:, :, 0], **TOL)


@pytest.mark.torch
def test_conv2d_gradients_match_torch(torch) -> None:
    """The training step's gradients (kernel, bias, input) of a strided "same" Conv2D."""
    import kiln
    import kiln.ops as K

    F = torch.nn.functional
    layer = L.Conv2D(3, 3, strides=2, padding="same", dtype="float64")
    x = _normal(2, 6, 5, 2)
    ph = kiln.placeholder((None, 6, 5, 2), "float64")
    loss = K.sum(K.square(layer(ph)))
    grads = kiln.grad(loss, [layer.kernel, layer.bias, ph])
    gw, gb, gx = kiln.function([ph], grads, backend="reference")(x)
    w, b = layer.get_weights()
    wt = torch.from_numpy(w.transpose(3, 2, 0, 1).copy()).requires_grad_()
    bt = torch.from_numpy(b).requires_grad_()
    xt = _nchw(torch, x).requires_grad_()
    top, bottom = tf_pads(6, 3, 2, 1, "same")
    left, right = tf_pads(5, 3, 2, 1, "same")
    out = F.conv2d(F.pad(xt, (left, right, top, bottom)), wt, bt, stride=2)
    (out**2).sum().backward()
    np.testing.assert_allclose(gw, wt.grad.numpy().transpose(2, 3, 1, 0), **TOL)
    np.testing.assert_allclose(gb, bt.grad.numpy(), **TOL)
    np.testing.assert_allclose(gx, _nhwc(xt.grad), **TOL)
