"""Issue 44, keras.ops.nn: the new kiln.ops.nn names against Keras 3 (eager and compiled
graph), finite-difference gradients, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from more_oracle import check_grad, check_keras, keras_ops

import kiln.ops as K

rng = np.random.default_rng(3)
X = rng.normal(size=(3, 6)).astype("float32") * 2
IMG = rng.normal(size=(2, 4, 6, 8)).astype("float32")
IMG_NCHW = rng.normal(size=(2, 3, 7, 6)).astype("float32")
SEQ = rng.normal(size=(2, 9, 3)).astype("float32")



def _sparsemax(x):
    """Martins & Astudillo (2016), algorithm 1, along the last axis, row by row."""
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape[:-1]):
        z = np.sort(x[idx])[::-1]
        k = np.arange(1, z.size + 1)
        kz = k[1 + k * z > np.cumsum(z)].max()
        tau = (z[:kz].sum() - 1) / kz
        out[idx] = np.maximum(x[idx] - tau, 0)
    return out


# name: (kiln fn, keras fn name or callable taking keras.ops, inputs, differentiable)
CASES = {
    "celu": (K.celu, lambda ko: ko.celu, [X], True),
    "celu_alpha": (lambda x: K.celu(x, 0.5), lambda ko: lambda x: ko.celu(x, 0.5), [X], True),
    "glu": (K.glu, lambda ko: ko.glu, [X], True),
    "glu_axis0": (lambda x: K.glu(x, axis=0), lambda ko: lambda x: ko.glu(x, axis=0),
                  [X[:2]], True),
    "hard_shrink": (K.hard_shrink, lambda ko: ko.hard_shrink, [X], True),
    "hard_silu": (K.hard_silu, lambda ko: ko.hard_silu, [X], True),
    "hard_swish": (K.hard_swish, lambda ko: ko.hard_swish, [X], True),
    "hard_tanh": (K.hard_tanh, lambda ko: ko.hard_tanh, [X], True),
    "soft_shrink": (lambda x: K.soft_shrink(x, 0.7),
                    lambda ko: lambda x: ko.soft_shrink(x, 0.7), [X], True),
    "sparse_plus": (K.sparse_plus, lambda ko: ko.sparse_plus, [X], True),
    "sparse_sigmoid": (K.sparse_sigmoid, lambda ko: ko.sparse_sigmoid, [X], True),
    "squareplus": (K.squareplus, lambda ko: ko.squareplus, [X], True),
    "squareplus_b": (lambda x: K.squareplus(x, 1.5), lambda ko: lambda x: ko.squareplus(x, 1.5),
                     [X], True),
    "tanh_shrink": (K.tanh_shrink, lambda ko: ko.tanh_shrink, [X], True),
    "threshold": (lambda x: K.threshold(x, 0.3, -2.0),
                  lambda ko: lambda x: ko.threshold(x, 0.3, -2.0), [X], True),
    # the paper's sparsemax (Keras 3.15's backends sum the cumulative sums over the support,
    # which differs once two or more entries are kept; kiln follows Martins & Astudillo)
    "sparsemax": (K.sparsemax, lambda ko: _sparsemax, [X], True),
    "sparsemax_axis0": (lambda x: K.sparsemax(x, axis=0),
                        lambda ko: lambda x: _sparsemax(x.T).T, [X], True),
    "normalize": (K.normalize, lambda ko: ko.normalize, [X], True),
    "normalize_l1_axis0": (lambda x: K.normalize(x, axis=0, order=1),
                           lambda ko: lambda x: ko.normalize(x, axis=0, order=1), [X], True),
    "normalize_l3": (lambda x: K.normalize(x, order=3),
                     lambda ko: lambda x: ko.normalize(x, order=3), [X], True),
    "rms_normalization": (lambda x, s: K.rms_normalization(x, s),
                          lambda ko: lambda x, s: ko.rms_normalization(x, s),
                          [X, rng.normal(size=6).astype("float32")], True),
    "layer_normalization": (lambda x, g, b: K.layer_normalization(x, g, b),
                            lambda ko: lambda x, g, b: ko.layer_normalization(x, g, b),
                            [X, rng.normal(size=6).astype("float32"),
                             rng.normal(size=6).astype("float32")], True),
    "layer_normalization_axes": (lambda x: K.layer_normalization(x, axis=(1, 2)),
                                 lambda ko: lambda x: (x - x.mean((1, 2), keepdims=True)) / (
                                     np.sqrt(x.var((1, 2), keepdims=True) + 1e-7)),
                                 [IMG[..., :3]], True),
    "batch_normalization": (
        lambda x, m, v, o, s: K.batch_normalization(x, m, v, axis=1, offset=o, scale=s),
        lambda ko: lambda x, m, v, o, s: ko.batch_normalization(x, m, v, axis=1, offset=o,
                                                              scale=s),
        [IMG[..., 0], rng.normal(size=4).astype("float32"),
         rng.uniform(0.5, 2, size=4).astype("float32"), rng.normal(size=4).astype("float32"),
         rng.normal(size=4).astype("float32")], True),
    "multi_hot": (lambda i: K.multi_hot(i, 5), lambda ko: lambda i: ko.multi_hot(i, 5),
                  [np.array([[0, 3, 3], [1, 4, 2]], "int32")], False),
    "multi_hot_1d": (lambda i: K.multi_hot(i, 4), lambda ko: lambda i: ko.multi_hot(i, 4),
                     [np.array([1, 1, 3], "int32")], False),
    "psnr": (lambda a, b: K.psnr(a, b, 2.0), lambda ko: lambda a, b: ko.psnr(a, b, 2.0),
             [X, X + rng.normal(size=X.shape).astype("float32") * 0.1], True),
    "depth_to_space": (lambda x: K.depth_to_space(x, 2),
                       lambda ko: lambda x: ko.depth_to_space(x, 2), [IMG], True),
    "depth_to_space_nchw": (lambda x: K.depth_to_space(x, 2, "channels_first"),
                            lambda ko: lambda x: ko.depth_to_space(x, 2, "channels_first"),
                            [IMG.transpose(0, 3, 1, 2).copy()], True),
    "space_to_depth": (lambda x: K.space_to_depth(x, 2),
                       lambda ko: lambda x: ko.space_to_depth(x, 2), [IMG], True),
    "space_to_depth_nchw": (lambda x: K.space_to_depth(x, 2, "channels_first"),
                            lambda ko: lambda x: ko.space_to_depth(x, 2, "channels_first"),
                            [IMG.transpose(0, 3, 1, 2).copy()], True),
    # convolution family
    "conv_transpose_2d": (lambda x, k: K.conv_transpose(x, k, 2, "same"),
                          lambda ko: lambda x, k: ko.conv_transpose(x, k, 2, "same"),
                          [IMG[..., :3], rng.normal(size=(3, 3, 5, 3)).astype("float32")],
                          True),
    "conv_transpose_1d": (lambda x, k: K.conv_transpose(x, k, 2),
                          lambda ko: lambda x, k: ko.conv_transpose(x, k, 2),
                          [SEQ, rng.normal(size=(3, 4, 3)).astype("float32")], True),
    "separable_conv": (lambda x, d, p: K.separable_conv(x, d, p, padding="same"),
                       lambda ko: lambda x, d, p: ko.separable_conv(x, d, p, padding="same"),
                       [IMG[..., :3], rng.normal(size=(3, 3, 3, 2)).astype("float32"),
                        rng.normal(size=(1, 1, 6, 4)).astype("float32")], True),
    "adaptive_average_pool_2d": (lambda x: K.adaptive_average_pool(x, (3, 4)),
                                 lambda ko: lambda x: ko.adaptive_average_pool(x, (3, 4)),
                                 [rng.normal(size=(2, 7, 6, 3)).astype("float32")], True),
    "adaptive_max_pool_1d": (lambda x: K.adaptive_max_pool(x, 4),
                             lambda ko: lambda x: ko.adaptive_max_pool(x, 4), [SEQ], True),
    "adaptive_max_pool_nchw": (
        lambda x: K.adaptive_max_pool(x, (2, 3), "channels_first"),
        lambda ko: lambda x: ko.adaptive_max_pool(x, (2, 3), "channels_first"),
        [IMG_NCHW], True),
    "unfold": (lambda x: K.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
               lambda ko: lambda x: ko.unfold(x, (2, 3), dilation=(1, 2), padding=1,
                                            stride=(2, 1)), [IMG_NCHW], True),
    "fold": (lambda x: K.fold(x, (7, 6), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
             lambda ko: lambda x: ko.fold(x, (7, 6), (2, 3), dilation=(1, 2), padding=1,
                                        stride=(2, 1)),
             [rng.normal(size=(2, 18, 4 * 4)).astype("float32")], True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_keras(name):
    ko = keras_ops()
    fn, kfn, arrays, _ = CASES[name]
    check_keras(fn, kfn(ko), *arrays, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c[3]))
def test_gradient_matches_finite_differences(name):
    fn, _, arrays, _ = CASES[name]
    arrays = [a for a in arrays]
    # keep the inputs off the kinks of the piecewise ops (finite differences straddle them)
    x = arrays[0].astype("float64")
    if name in ("hard_shrink", "soft_shrink", "threshold", "sparse_plus", "sparse_sigmoid",
                "hard_tanh", "hard_silu", "hard_swish"):
        kinks = np.array([-3.0, -1.0, -0.7, -0.5, 0.3, 0.5, 0.7, 1.0, 3.0])
        near = np.min(np.abs(x[..., None] - kinks), axis=-1) < 0.05
        x = np.where(near, x + 0.13, x)
    arrays[0] = x
    check_grad(fn, *arrays)


def test_unfold_then_fold_counts_the_overlaps():
    """fold(unfold(ones)) counts how many blocks cover each pixel (PyTorch's documented
    identity), here against a direct count."""
    x = np.ones((1, 1, 5, 5), "float32")
    cols = K.unfold(x, 3, padding=1)
    back = K.fold(cols, 5, 3, padding=1)
    cover = np.zeros((7, 7))
    for i in range(5):
        for j in range(5):
            cover[i:i + 3, j:j + 3] += 1
    np.testing.assert_array_equal(back[0, 0], cover[1:6, 1:6])


def test_errors_name_the_op_and_shapes():
    with pytest.raises(ValueError, match=r"glu: axis -1 of \(3, 5\)"):
        K.glu(np.zeros((3, 5), "float32"))
    with pytest.raises(ValueError, match="normalize: order must be an int >= 1"):
        K.normalize(X, order=0)
    with pytest.raises(ValueError, match=r"depth_to_space: channels 6 .* block_size\*\*2 = 4"):
        K.depth_to_space(np.zeros((1, 2, 2, 6), "float32"), 2)
    with pytest.raises(ValueError, match=r"fold: expected an input \(N, C \* 2 \* 2, 16\)"):
        K.fold(np.zeros((1, 8, 3), "float32"), 5, 2)
    with pytest.raises(ValueError, match="adaptive_max_pool: expected a 1-D or 2-D input"):
        K.adaptive_max_pool(np.zeros((2, 3), "float32"), 2)


def test_keras_docs_examples():
    np.testing.assert_allclose(K.layer_normalization(np.arange(5, dtype="float32")),
                               [-1.4142135, -0.70710677, 0.0, 0.7071067, 1.4142135], rtol=1e-5)
    np.testing.assert_allclose(K.hard_tanh(np.array([-2.0, -0.5, 2.0])), [-1, -0.5, 1])
    np.testing.assert_allclose(K.sparsemax(np.array([-1.0, 0.0, 1.0])), [0.0, 0.0, 1.0])
    np.testing.assert_allclose(K.sparsemax(np.array([1.0, 1.0, 0.0])), [0.5, 0.5, 0.0])
    np.testing.assert_allclose(K.sparsemax(X).sum(-1), np.ones(3), rtol=1e-6)


def test_namespace():
    for name in ["celu", "glu", "fold", "unfold", "conv_transpose", "adaptive_max_pool"]:
        assert getattr(K.nn, name) is getattr(K, name)
        assert name in K.nn.__all__
