"""Convolution and pooling: torch oracles (forward, gradients, second derivatives), closed forms
without torch, and the shape rules' errors.

All oracle comparisons run in float64 through ``kiln.function(..., backend="reference")``;
TensorFlow's "same" padding is reproduced in torch by padding explicitly.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import kiln
import kiln.ops as K

TOL = {"rtol": 1e-9, "atol": 1e-10}


def _tf_pads(size: int, k: int, s: int, d: int, padding: str) -> tuple[int, int, int]:
    """(out, before, after) by TensorFlow's rule (written out here, independently of kiln)."""
    keff = (k - 1) * d + 1
    if padding == "valid":
        return (size - keff) // s + 1, 0, 0
    out = -(-size // s)
    total = max((out - 1) * s + keff - size, 0)
    return out, total // 2, total - total // 2


def _run(inputs, outputs, *values):
    return kiln.function(inputs, outputs, backend="reference")(*values)


def _distinct(rng, shape):
    """Distinct values (no ties in any pooling window)."""
    n = int(np.prod(shape))
    return rng.permutation(n).reshape(shape) * 0.37 - 0.1 * n + rng.uniform(0, 0.01, shape)


# ---- torch helpers ------------------------------------------------------------------------------
def _t(a, grad=True):
    torch = pytest.importorskip("torch")
    t = torch.tensor(np.ascontiguousarray(a), dtype=torch.float64)
    return t.requires_grad_(grad)


def _nchw(t):
    return t.permute(0, 3, 1, 2)


def _nhwc(t):
    return t.permute(0, 2, 3, 1)


def _torch_conv2d(x, w, strides, padding, dilation):
    """NHWC torch tensors in and out; kernel (kh, kw, cin, cout); TF padding."""
    import torch.nn.functional as F

    (kh, kw), (sh, sw), (dh, dw) = w.shape[:2], strides, dilation
    _, pt, pb = _tf_pads(x.shape[1], kh, sh, dh, padding)
    _, pl, pr = _tf_pads(x.shape[2], kw, sw, dw, padding)
    xp = F.pad(_nchw(x), (pl, pr, pt, pb))
    y = F.conv2d(xp, w.permute(3, 2, 0, 1), stride=strides, dilation=dilation)
    return _nhwc(y)


# ---- conv2d vs torch ----------------------------------------------------------------------------
CONV_CASES = list(itertools.product([1, 2], [1, 2], ["valid", "same"], [(3, 2), (2, 3)]))


@pytest.mark.torch
@pytest.mark.parametrize("stride,dilation,padding,ksize", CONV_CASES)
def test_conv2d_forward_and_gradients_match_torch(stride, dilation, padding, ksize):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(2, 7, 6, 3))
    wv = rng.normal(size=ksize + (3, 4))
    x = kiln.placeholder((None, 7, 6, 3), "float64")
    w = kiln.placeholder(wv.shape, "float64")
    y = K.conv2d(x, w, strides=stride, padding=padding, dilation_rate=dilation)

    tx, tw = _t(xv), _t(wv)
    ty = _torch_conv2d(tx, tw, (stride,) * 2, padding, (dilation,) * 2)
    assert y.shape == (None,) + tuple(ty.shape[1:])
    ctv = rng.normal(size=tuple(ty.shape))
    gx, gw = kiln.grad(K.sum(y * K.constant(ctv)), [x, w])
    got_y, got_gx, got_gw = _run([x, w], [y, gx, gw], xv, wv)
    tgx, tgw = torch.autograd.grad(ty, (tx, tw), grad_outputs=_t(ctv, False))
    np.testing.assert_allclose(got_y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(got_gx, tgx.numpy(), **TOL)
    np.testing.assert_allclose(got_gw, tgw.numpy(), **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("stride,dilation,padding", [(1, 1, "valid"), (2, 1, "same"),
                                                     (1, 2, "same"), (2, 2, "valid"),
                                                     (2, 1, "valid")])
def test_conv2d_second_derivatives_match_torch(stride, dilation, padding):
    """Gradients of gradients exercise the VJPs of both backprop ops."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    xv, wv = rng.normal(size=(2, 6, 5, 2)), rng.normal(size=(3, 2, 2, 3))
    tx, tw = _t(xv), _t(wv)
    ty = _torch_conv2d(tx, tw, (stride,) * 2, padding, (dilation,) * 2)
    ctv = rng.normal(size=tuple(ty.shape))
    r1, r2 = rng.normal(size=xv.shape), rng.normal(size=wv.shape)

    x = kiln.placeholder(xv.shape, "float64")
    w = kiln.placeholder(wv.shape, "float64")
    ct = kiln.placeholder(ctv.shape, "float64")
    y = K.conv2d(x, w, strides=stride, padding=padding, dilation_rate=dilation)
    gx, gw = kiln.grad(K.sum(y * ct), [x, w])
    loss2 = K.sum(gx * K.constant(r1)) + K.sum(gw * K.constant(r2))
    got = _run([x, w, ct], kiln.grad(loss2, [x, w, ct]), xv, wv, ctv)

    tct = _t(ctv)
    tgx, tgw = torch.autograd.grad(ty, (tx, tw), grad_outputs=tct, create_graph=True)
    tl2 = (tgx * _t(r1, False)).sum() + (tgw * _t(r2, False)).sum()
    want = torch.autograd.grad(tl2, (tx, tw, tct))
    for g, t in zip(got, want):
        np.testing.assert_allclose(g, t.numpy(), **TOL)


# ---- conv1d vs torch ----------------------------------------------------------------------------
@pytest.mark.torch
@pytest.mark.parametrize("stride,dilation,padding",
                         list(itertools.product([1, 2], [1, 2], ["valid", "same", "causal"])))
def test_conv1d_matches_torch(stride, dilation, padding):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = np.random.default_rng(2)
    xv, wv = rng.normal(size=(2, 9, 3)), rng.normal(size=(3, 3, 4))
    x = kiln.placeholder((None, 9, 3), "float64")
    w = kiln.placeholder(wv.shape, "float64")
    y = K.conv1d(x, w, strides=stride, padding=padding, dilation_rate=dilation)

    tx, tw = _t(xv), _t(wv)
    if padding == "causal":
        pads = (2 * dilation, 0)
    else:
        pads = _tf_pads(9, 3, stride, dilation, padding)[1:]
    ty = F.conv1d(F.pad(tx.permute(0, 2, 1), pads), tw.permute(2, 1, 0), stride=stride,
                  dilation=dilation).permute(0, 2, 1)
    assert y.shape == (None,) + tuple(ty.shape[1:])
    ctv = rng.normal(size=tuple(ty.shape))
    gx, gw = kiln.grad(K.sum(y * K.constant(ctv)), [x, w])
    got = _run([x, w], [y, gx, gw], xv, wv)
    want = [ty.detach()] + list(torch.autograd.grad(ty, (tx, tw), grad_outputs=_t(ctv, False)))
    for g, t in zip(got, want):
        np.testing.assert_allclose(g, t.numpy(), **TOL)


# ---- conv2d_transpose vs torch ------------------------------------------------------------------
def _keras_transpose_length(size, k, s, d, padding, output_padding):
    """Keras' compute_conv_transpose_output_length, written out independently."""
    keff = k + (k - 1) * (d - 1)
    if output_padding is None:
        return size * s + max(keff - s, 0) if padding == "valid" else size * s
    pad = keff // 2 if padding == "same" else 0
    return (size - 1) * s + keff - 2 * pad + output_padding


TRANSPOSE_CASES = [  # kernel (kh, kw), stride, padding, output_padding, dilation
    ((3, 3), 1, "valid", None, 1),
    ((3, 3), 1, "same", None, 1),
    ((3, 2), 2, "valid", None, 1),
    ((3, 2), 2, "same", None, 1),
    ((3, 3), 2, "same", 1, 1),
    ((3, 3), 2, "same", 0, 1),
    ((2, 3), 2, "valid", 1, 1),
    ((3, 3), 3, "valid", None, 1),
    ((2, 2), 1, "same", None, 2),
    ((3, 2), 1, "valid", None, 2),
]


@pytest.mark.torch
@pytest.mark.parametrize("ksize,stride,padding,output_padding,dilation", TRANSPOSE_CASES)
def test_conv2d_transpose_matches_torch(ksize, stride, padding, output_padding, dilation):
    """TF/Keras semantics: the input-gradient of a conv2d whose input has Keras' output size."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = np.random.default_rng(3)
    xv = rng.normal(size=(2, 4, 3, 3))
    wv = rng.normal(size=ksize + (2, 3))  # Keras layout (kh, kw, out_channels, in_channels)
    x = kiln.placeholder((None, 4, 3, 3), "float64")
    w = kiln.placeholder(wv.shape, "float64")
    y = K.conv2d_transpose(x, w, strides=stride, padding=padding,
                           output_padding=output_padding, dilation_rate=dilation)
    out_hw = [_keras_transpose_length(n, k, stride, dilation, padding, output_padding)
              for n, k in zip((4, 3), ksize)]
    assert y.shape == (None, *out_hw, 2)

    tx, tw = _t(xv), _t(wv)
    full = F.conv_transpose2d(_nchw(tx), tw.permute(3, 2, 0, 1), stride=stride,
                              dilation=dilation)
    crops = []
    for axis, (n, k) in enumerate(zip(out_hw, ksize)):
        _, before, _ = _tf_pads(n, k, stride, dilation, padding)
        crops.append((before, max(before + n - full.shape[2 + axis], 0)))
    full = F.pad(full, (0, crops[1][1], 0, crops[0][1]))
    ty = _nhwc(full[:, :, crops[0][0]:crops[0][0] + out_hw[0],
                    crops[1][0]:crops[1][0] + out_hw[1]])
    ctv = rng.normal(size=tuple(ty.shape))
    gx, gw = kiln.grad(K.sum(y * K.constant(ctv)), [x, w])
    got = _run([x, w], [y, gx, gw], xv, wv)
    want = [ty.detach()] + list(torch.autograd.grad(ty, (tx, tw), grad_outputs=_t(ctv, False)))
    for g, t in zip(got, want):
        np.testing.assert_allclose(g, t.numpy(), **TOL)


@pytest.mark.torch
def test_conv2d_transpose_valid_matches_torch_output_padding_directly():
    """Where Keras and torch agree on the arithmetic (no padding), compare with torch as is."""
    pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = np.random.default_rng(4)
    xv, wv = rng.normal(size=(2, 3, 4, 2)), rng.normal(size=(3, 3, 5, 2))
    y = K.conv2d_transpose(K.constant(xv), K.constant(wv), strides=2, padding="valid",
                           output_padding=1)
    ty = F.conv_transpose2d(_nchw(_t(xv, False)), _t(wv, False).permute(3, 2, 0, 1), stride=2,
                            output_padding=1)
    np.testing.assert_allclose(_run([], y), _nhwc(ty).numpy(), **TOL)


# ---- pooling vs torch ---------------------------------------------------------------------------
POOL_CASES = [  # pool_size, strides, padding
    (2, None, "valid"), (2, None, "same"), (3, 2, "valid"), (3, 2, "same"), ((3, 2), 1, "same"),
    ((2, 3), (1, 2), "valid"), (3, 1, "same"), (2, 3, "same"),
]


def _torch_pool(kind, x, pool, strides, padding):
    import torch
    import torch.nn.functional as F

    pool = (pool, pool) if isinstance(pool, int) else pool
    strides = pool if strides is None else (strides, strides) if isinstance(strides, int) \
        else strides
    pads = [_tf_pads(x.shape[1 + i], pool[i], strides[i], 1, padding)[1:] for i in range(2)]
    torch_pads = (*pads[1], *pads[0])
    xc = _nchw(x)
    if kind == "max":
        y = F.max_pool2d(F.pad(xc, torch_pads, value=-np.inf), pool, strides)
    else:  # average over the real elements only
        sums = F.avg_pool2d(F.pad(xc, torch_pads), pool, strides, divisor_override=1)
        ones = torch.ones((1, 1) + tuple(x.shape[1:3]), dtype=x.dtype)
        counts = F.avg_pool2d(F.pad(ones, torch_pads), pool, strides, divisor_override=1)
        y = sums / counts
    return _nhwc(y)


@pytest.mark.torch
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("pool,strides,padding", POOL_CASES)
def test_pool2d_matches_torch(kind, pool, strides, padding):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    xv = _distinct(rng, (2, 7, 6, 3))
    x = kiln.placeholder((None, 7, 6, 3), "float64")
    builder = K.max_pool2d if kind == "max" else K.avg_pool2d
    y = builder(x, pool, strides=strides, padding=padding)
    tx = _t(xv)
    ty = _torch_pool(kind, tx, pool, strides, padding)
    assert y.shape == (None,) + tuple(ty.shape[1:])
    ctv = rng.normal(size=tuple(ty.shape))
    (gx,) = kiln.grad(K.sum(y * K.constant(ctv)), [x])
    got_y, got_gx = _run([x], [y, gx], xv)
    (tgx,) = torch.autograd.grad(ty, (tx,), grad_outputs=_t(ctv, False))
    np.testing.assert_allclose(got_y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(got_gx, tgx.numpy(), **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("pool,strides,padding", [(2, None, "valid"), (3, 2, "same"),
                                                  (3, 1, "same"), (2, 3, "valid")])
def test_pool1d_matches_torch(kind, pool, strides, padding):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    xv = _distinct(rng, (2, 9, 3))
    x = kiln.placeholder((None, 9, 3), "float64")
    builder = K.max_pool1d if kind == "max" else K.avg_pool1d
    y = builder(x, pool, strides=strides, padding=padding)
    tx = _t(xv)
    ty = _torch_pool(kind, tx[:, None], (1, pool), None if strides is None else (1, strides),
                     padding)[:, 0]
    assert y.shape == (None,) + tuple(ty.shape[1:])
    ctv = rng.normal(size=tuple(ty.shape))
    (gx,) = kiln.grad(K.sum(y * K.constant(ctv)), [x])
    got_y, got_gx = _run([x], [y, gx], xv)
    (tgx,) = torch.autograd.grad(ty, (tx,), grad_outputs=_t(ctv, False))
    np.testing.assert_allclose(got_y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(got_gx, tgx.numpy(), **TOL)


@pytest.mark.torch
@pytest.mark.parametrize("pool,strides,padding", [(2, None, "valid"), (3, 2, "same")])
def test_avg_pool2d_second_derivative_matches_torch(pool, strides, padding):
    """avg_pool2d_grad is differentiable (its VJP is avg_pool2d)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    xv = rng.normal(size=(2, 5, 5, 2))
    tx = _t(xv)
    ty = _torch_pool("avg", tx, pool, strides, padding)
    ctv = rng.normal(size=tuple(ty.shape))
    rv = rng.normal(size=xv.shape)
    tct = _t(ctv)
    (tgx,) = torch.autograd.grad(ty, (tx,), grad_outputs=tct, create_graph=True)
    (want,) = torch.autograd.grad((tgx * _t(rv, False)).sum(), (tct,))

    x = kiln.placeholder(xv.shape, "float64")
    ct = kiln.placeholder(ctv.shape, "float64")
    (gx,) = kiln.grad(K.sum(K.avg_pool2d(x, pool, strides, padding) * ct), [x])
    (got,) = _run([x, ct], kiln.grad(K.sum(gx * K.constant(rv)), [ct]), xv, ctv)
    np.testing.assert_allclose(got, want.numpy(), **TOL)


# ---- closed forms (no torch) --------------------------------------------------------------------
def test_1x1_conv_is_a_matmul():
    rng = np.random.default_rng(8)
    xv, wv = rng.normal(size=(2, 4, 5, 3)), rng.normal(size=(1, 1, 3, 2))
    y1 = K.conv2d(K.constant(xv), K.constant(wv))
    y2 = K.conv2d(K.constant(xv), K.constant(wv), strides=2, padding="same")
    got1, got2 = _run([], [y1, y2])
    np.testing.assert_allclose(got1, xv @ wv[0, 0], **TOL)
    np.testing.assert_allclose(got2, xv[:, ::2, ::2] @ wv[0, 0], **TOL)


@pytest.mark.parametrize("a,b", [(0, 0), (1, 1), (2, 0), (0, 2)])
def test_delta_kernel_shifts_the_image(a, b):
    """With "same" 3x3 (one pixel of padding each side), a delta at (a, b) reads x[i+a-1, j+b-1]."""
    xv = np.arange(30.0).reshape(1, 5, 6, 1)
    wv = np.zeros((3, 3, 1, 1))
    wv[a, b] = 1.0
    got = _run([], K.conv2d(K.constant(xv), K.constant(wv), padding="same"))
    padded = np.pad(xv, ((0, 0), (1, 1), (1, 1), (0, 0)))
    np.testing.assert_array_equal(got, padded[:, a:a + 5, b:b + 6])


def test_dilated_delta_kernel_and_valid_output_size():
    xv = np.arange(49.0).reshape(1, 7, 7, 1)
    wv = np.zeros((3, 3, 1, 1))
    wv[2, 1] = 1.0
    got = _run([], K.conv2d(K.constant(xv), K.constant(wv), dilation_rate=2))  # keff = 5
    np.testing.assert_array_equal(got, xv[:, 4:7, 2:5])


def test_conv2d_transpose_of_1x1_kernel_inserts_zeros():
    rng = np.random.default_rng(9)
    xv, wv = rng.normal(size=(2, 3, 4, 3)), rng.normal(size=(1, 1, 2, 3))
    got = _run([], K.conv2d_transpose(K.constant(xv), K.constant(wv), strides=2))
    want = np.zeros((2, 6, 8, 2))
    want[:, ::2, ::2] = xv @ wv[0, 0].T
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("pool,strides,padding", POOL_CASES)
def test_avg_pool_of_a_constant_image_is_the_constant(pool, strides, padding):
    xv = np.full((2, 7, 6, 3), 2.5)
    got = _run([], K.avg_pool2d(K.constant(xv), pool, strides, padding))
    np.testing.assert_allclose(got, np.full(got.shape, 2.5), **TOL)


def test_max_pool_gradient_routes_to_the_max():
    xv = np.zeros((1, 4, 4, 1))
    xv[0, 1, 0, 0] = 5.0
    xv[0, 0, 3, 0] = 1.0
    xv[0, 3, 3, 0] = 2.0
    xv[0, 2, 2, 0] = 3.0  # window (1, 1): the 3 beats the 2
    x = kiln.placeholder(xv.shape, "float64")
    y = K.max_pool2d(x, 2)
    (gx,) = kiln.grad(K.sum(y * K.constant(np.array([[1.0, 2.0], [3.0, 4.0]])[None, :, :,
                                                                                  None])), [x])
    got_y, got_gx = _run([x], [y, gx], xv)
    np.testing.assert_array_equal(got_y[0, :, :, 0], [[5.0, 1.0], [0.0, 3.0]])
    want = np.zeros((4, 4))
    want[1, 0], want[0, 3], want[2, 2] = 1.0, 2.0, 4.0
    want[2, 0] = 3.0  # window (1, 0) is all zeros: the first element gets it
    np.testing.assert_array_equal(got_gx[0, :, :, 0], want)


def test_max_pool_gradient_ties_go_to_the_first_max_of_each_window():
    xv = np.ones((1, 3, 3, 1))
    x = kiln.placeholder(xv.shape, "float64")
    (gx,) = kiln.grad(K.sum(K.max_pool2d(x, 2, strides=1)), [x])
    got = _run([x], gx, xv)
    want = np.zeros((3, 3))
    want[:2, :2] = 1.0  # each of the four overlapping windows picks its top-left element
    np.testing.assert_array_equal(got[0, :, :, 0], want)


def test_avg_pool_gradient_closed_form():
    xv = np.zeros((1, 4, 6, 2))
    x = kiln.placeholder(xv.shape, "float64")
    (gx,) = kiln.grad(K.sum(K.avg_pool2d(x, 2)), [x])
    np.testing.assert_allclose(_run([x], gx, xv), np.full(xv.shape, 0.25), **TOL)
    # "same" 2x2 on 3x3: the last row/column windows hold 2 (or 1) real elements
    (gs,) = kiln.grad(K.sum(K.avg_pool2d(x[:, :3, :3], 2, padding="same")), [x])
    want = np.array([[1 / 4, 1 / 4, 1 / 2], [1 / 4, 1 / 4, 1 / 2], [1 / 2, 1 / 2, 1]])
    np.testing.assert_allclose(_run([x], gs, xv)[0, :3, :3, 0], want, **TOL)


def test_float32_is_preserved_and_batch_stays_unknown():
    x = kiln.placeholder((None, 8, 8, 3))
    w = kiln.Variable(np.ones((3, 3, 3, 4), np.float32))
    y = K.max_pool2d(K.conv2d(x, w, padding="same"), 2)
    assert y.shape == (None, 4, 4, 4) and y.dtype == "float32"
    gx, gw = kiln.grad(K.sum(y), [x, w])
    assert gx.shape == (None, 8, 8, 3) and gw.shape == (3, 3, 3, 4)
    out = kiln.function([x], [y, gx, gw], backend="reference")(np.ones((5, 8, 8, 3)))
    assert [o.dtype for o in out] == [np.float32] * 3
    assert out[0].shape == (5, 4, 4, 4) and out[1].shape == (5, 8, 8, 3)


def test_builders_normalize_attributes_so_equal_nodes_are_shared():
    x = kiln.placeholder((None, 8, 8, 3))
    w = K.constant(np.ones((3, 3, 3, 4), np.float32))
    a = K.conv2d(x, w, strides=2, padding="SAME", dilation_rate=[1, 1])
    b = K.conv2d(x, w, strides=(2, 2), padding="same")
    assert a is b
    assert a.attrs == {"strides": (2, 2), "padding": "same", "dilation": (1, 1)}
    assert K.max_pool2d(x, 2) is K.max_pool2d(x, (2, 2), strides=2)


# ---- shape-rule errors --------------------------------------------------------------------------
def test_channel_mismatch_names_op_and_both_shapes():
    x = kiln.placeholder((None, 8, 8, 3))
    w = K.constant(np.ones((3, 3, 2, 4), np.float32))
    with pytest.raises(ValueError, match=r"conv2d.*\(None, 8, 8, 3\).*\(3, 3, 2, 4\)"):
        K.conv2d(x, w)


def test_kernel_larger_than_valid_input():
    x = kiln.placeholder((None, 4, 8, 3))
    w = K.constant(np.ones((5, 3, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"conv2d: kernel size 5 is larger than the input "
                                         r"size 4.*\(None, 4, 8, 3\).*\(5, 3, 3, 4\)"):
        K.conv2d(x, w)
    K.conv2d(x, w, padding="same")  # fine with padding
    w3 = K.constant(np.ones((3, 3, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"dilated to 5"):
        K.conv2d(x, w3, dilation_rate=2)
    with pytest.raises(ValueError, match=r"max_pool2d: pool size 5 is larger"):
        K.max_pool2d(x, 5)


def test_bad_arguments_raise_clear_errors():
    x = kiln.placeholder((None, 8, 8, 3))
    w = K.constant(np.ones((3, 3, 3, 4), np.float32))
    with pytest.raises(ValueError, match="conv2d: padding must be one of 'valid', 'same'"):
        K.conv2d(x, w, padding="full")
    with pytest.raises(ValueError, match="conv2d: strides"):
        K.conv2d(x, w, strides=0)
    with pytest.raises(ValueError, match="conv2d: strides"):
        K.conv2d(x, w, strides=(1, 2, 3))
    with pytest.raises(ValueError, match=r"conv2d: input must have rank 4, received shape "
                                         r"\(None, 8, 3\)"):
        K.conv2d(kiln.placeholder((None, 8, 3)), w)
    with pytest.raises(TypeError, match="conv2d"):
        K.conv2d(x, K.constant(np.ones((3, 3, 3, 4), np.float64)))
    with pytest.raises(TypeError, match="conv2d: expected a float tensor"):
        K.conv2d(kiln.placeholder((None, 8, 8, 3), "int32"), np.ones((3, 3, 3, 4), np.int32))
    with pytest.raises(ValueError, match="conv1d: input must have rank 3"):
        K.conv1d(x, np.ones((3, 3, 4), np.float32))
    with pytest.raises(ValueError, match="max_pool1d: input must have rank 3"):
        K.max_pool1d(x, 2)
    with pytest.raises(ValueError, match="avg_pool2d: padding"):
        K.avg_pool2d(x, 2, padding="causal")


def test_conv2d_transpose_errors():
    x = kiln.placeholder((None, 4, 4, 3))
    w = K.constant(np.ones((3, 3, 2, 3), np.float32))
    with pytest.raises(ValueError, match="output_padding .* smaller than the strides"):
        K.conv2d_transpose(x, w, strides=2, output_padding=2)
    with pytest.raises(ValueError, match=r"conv2d_transpose: input of shape \(None, 4, 4, 3\) "
                                         r"has 3 channels"):
        K.conv2d_transpose(x, K.constant(np.ones((3, 3, 3, 2), np.float32)))
    w2 = K.constant(np.ones((2, 2, 2, 3), np.float32))
    with pytest.raises(ValueError, match="does not convolve back"):
        K.conv2d_transpose(x, w2, strides=2, padding="same", output_padding=0)
    assert K.conv2d_transpose(x, w2, strides=2, padding="same").shape == (None, 8, 8, 2)


def test_backprop_op_rules_check_the_cotangent():
    from kiln.core.ops.registry import apply

    ct = kiln.placeholder((None, 3, 3, 4))
    w = K.constant(np.ones((3, 3, 2, 4), np.float32))
    attrs = {"strides": (1, 1), "padding": "valid", "dilation": (1, 1)}
    assert apply("conv2d_backprop_input", ct, w, input_shape=(5, 5, 2), **attrs).shape == \
        (None, 5, 5, 2)
    with pytest.raises(ValueError, match="conv2d_backprop_input: .* spatial size \\(4, 4\\)"):
        apply("conv2d_backprop_input", ct, w, input_shape=(6, 6, 2), **attrs)
    with pytest.raises(ValueError, match="conv2d_backprop_input: input_shape .* 3 channels"):
        apply("conv2d_backprop_input", ct, w, input_shape=(5, 5, 3), **attrs)
    x = kiln.placeholder((None, 6, 5, 2))
    with pytest.raises(ValueError, match="conv2d_backprop_filter: .* spatial size \\(4, 3\\)"):
        apply("conv2d_backprop_filter", x, ct, kernel_size=(3, 3), **attrs)
