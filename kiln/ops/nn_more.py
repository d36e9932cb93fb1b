"""More of ``keras.ops.nn``: activations, normalizations, encodings and layout ops, each a
composite of existing kiln ops (graph and eager: see ``kiln.ops``), so gradients and kernels
come from the primitives. Signatures and defaults are Keras 3's.

Not here: ``polar`` (complex results; kiln has no complex dtype) and 3-D convolution and
pooling (kiln's convolutions are 1-D and 2-D).
"""

from __future__ import annotations

import math

import numpy as np

from kiln.ops import _G, _dual
from kiln.ops import _numpy_shape as _S
from kiln.ops import nn as _nn
from kiln.ops import numpy as _np

_N = _G.as_node
_EPSILON = 1e-7  # keras.backend.epsilon()


def _c(value, like):
    return _G.constant(np.asarray(value, like.dtype))


def _float(x):
    x = _N(x)
    return x if x.dtype in ("float32", "float64") else _G.cast(x, "float32")


# ---- elementwise activations ---------------------------------------------------------------------
def _celu(x, alpha=1.0):
    x = _float(x)
    zero = _c(0.0, x)
    return _G.maximum(x, zero) + _c(alpha, x) * _G.expm1(_G.minimum(x, zero) / _c(alpha, x))


def _glu(x, axis=-1):
    x = _float(x)
    ax = axis % x.ndim
    if x.shape[ax] is None or x.shape[ax] % 2:
        raise ValueError(f"glu: axis {axis} of {x.shape} must have an even, known size")
    a, b = _S.split(x, 2, ax)
    return a * _G.sigmoid(b)


def _hard_shrink(x, threshold=0.5):
    x = _float(x)
    return _G.where(_G.greater(_G.abs(x), _c(threshold, x)), x, _c(0.0, x))


def _hard_silu(x):
    x = _float(x)
    return x * _G.clip(x + _c(3.0, x), _c(0.0, x), _c(6.0, x)) * _c(1.0 / 6.0, x)


def _hard_tanh(x):
    x = _float(x)
    return _G.clip(x, _c(-1.0, x), _c(1.0, x))


def _soft_shrink(x, threshold=0.5):
    x = _float(x)
    t = _c(threshold, x)
    return _G.where(_G.greater(x, t), x - t, _G.where(_G.less(x, _G.neg(t)), x + t,
                                                      _c(0.0, x)))


def _sparse_plus(x):
    x = _float(x)
    one = _c(1.0, x)
    mid = _c(0.25, x) * _G.square(x + one)
    return _G.where(_G.less_equal(x, _G.neg(one)), _c(0.0, x),
                    _G.where(_G.greater_equal(x, one), x, mid))


def _sparse_sigmoid(x):
    x = _float(x)
    return _G.clip(_c(0.5, x) * (x + _c(1.0, x)), _c(0.0, x), _c(1.0, x))


def _squareplus(x, b=4):
    x = _float(x)
    return (x + _G.sqrt(_G.square(x) + _c(b, x))) * _c(0.5, x)


def _tanh_shrink(x):
    x = _float(x)
    return x - _G.tanh(x)


def _threshold(x, threshold, default_value):
    x = _float(x)
    return _G.where(_G.greater(x, _c(threshold, x)), x, _c(default_value, x))


def _sparsemax(x, axis=-1):
    x = _float(x)
    ax = axis % x.ndim
    n = x.shape[ax]
    if n is None:
        raise ValueError(f"sparsemax: axis {axis} of {x.shape} must have a known size")
    z = _G.neg(_np.sort(_G.neg(x), axis=ax))  # descending
    shape = [1] * x.ndim
    shape[ax] = n
    k = _G.constant(np.arange(1, n + 1, dtype=x.dtype).reshape(shape))
    cum = _np.cumsum(z, axis=ax)
    support = _G.cast(_G.greater(_c(1.0, x) + k * z, cum), x.dtype)
    k_z = _G.sum(support, axis=ax, keepdims=True)
    tau = (_G.sum(support * z, axis=ax, keepdims=True) - _c(1.0, x)) / k_z
    return _G.maximum(x - tau, _c(0.0, x))


# ---- normalizations ------------------------------------------------------------------------------
def _axes(x, axis):
    axes = axis if isinstance(axis, list | tuple) else [axis]
    return tuple(sorted(int(a) % x.ndim for a in axes))


def _normalize(x, axis=-1, order=2, epsilon=None):
    if not isinstance(order, int) or order < 1:
        raise ValueError(f"normalize: order must be an int >= 1, received order={order!r}")
    x = _float(x)
    if x.ndim == 0:
        x = _G.expand_dims(x, 0)
    eps = _EPSILON if epsilon is None else epsilon
    ax = _axes(x, axis)
    if order == 2:
        inv = _G.rsqrt(_G.sum(_G.square(x), axis=ax, keepdims=True))
        return x * _G.minimum(inv, _c(1.0 / eps, x))
    if order == 1:
        norm = _G.sum(_G.abs(x), axis=ax, keepdims=True)
    else:
        p = _c(order, x)
        norm = _G.pow(_G.sum(_G.pow(_G.abs(x), p), axis=ax, keepdims=True), _c(1.0 / order, x))
    return x / _G.maximum(norm, _c(eps, x))


def _bshape(x, ax):
    return [x.shape[i] if i in ax else 1 for i in range(x.ndim)]


def _param(v, x, ax):
    v = _N(v, x.dtype)
    if v.dtype != x.dtype:
        v = _G.cast(v, x.dtype)
    if v.ndim != x.ndim and ax != (x.ndim - 1,):
        v = _G.reshape(v, tuple(_bshape(x, ax)))
    return v


def _rms_normalization(x, scale=None, axis=-1, epsilon=None):
    x = _float(x)
    if x.ndim == 0:
        x = _G.expand_dims(x, 0)
    eps = _EPSILON if epsilon is None else epsilon
    ax = _axes(x, axis)
    out = x * _G.rsqrt(_G.mean(_G.square(x), axis=ax, keepdims=True) + _c(eps, x))
    return out if scale is None else out * _N(scale, x.dtype)


def _layer_normalization(x, gamma=None, beta=None, axis=-1, epsilon=None, **kwargs):
    if kwargs.pop("rms_scaling", False):
        raise ValueError("layer_normalization: rms_scaling is deprecated in Keras and not "
                         "supported; use rms_normalization")
    if kwargs:
        raise TypeError(f"layer_normalization: unexpected arguments {sorted(kwargs)}")
    x = _float(x)
    eps = _EPSILON if epsilon is None else epsilon
    ax = _axes(x, axis)
    mean = _G.mean(x, axis=ax, keepdims=True)
    var = _G.mean(_G.square(x - mean), axis=ax, keepdims=True)
    out = (x - mean) * _G.rsqrt(var + _c(eps, x))
    if gamma is not None:
        out = out * _param(gamma, x, ax)
    if beta is not None:
        out = out + _param(beta, x, ax)
    return out


def _batch_normalization(x, mean, variance, axis, offset=None, scale=None, epsilon=1e-3):
    x = _float(x)
    ax = (int(axis) % x.ndim,)

    def p(v):
        v = _N(v, x.dtype)
        return _G.reshape(v, tuple(_bshape(x, ax))) if v.ndim == 1 and x.ndim > 1 else v
    inv = _G.rsqrt(p(variance) + _c(epsilon, x))
    if scale is not None:
        inv = inv * p(scale)
    out = (x - p(mean)) * inv
    return out if offset is None else out + p(offset)


# ---- encodings and metrics -----------------------------------------------------------------------
def _multi_hot(inputs, num_classes=None, axis=-1, dtype=None, sparse=False, **kwargs):
    if num_classes is None:
        num_classes = kwargs.pop("num_tokens", None)
    if num_classes is None:
        raise ValueError("multi_hot: num_classes is required")
    x = _N(inputs)
    reduction = 1 if x.ndim > 1 else 0
    hot = _nn._one_hot(x, num_classes, axis=axis, dtype=dtype, sparse=sparse)
    return _G.max(hot, axis=reduction)


def _psnr(x1, x2, max_val):
    x1 = _float(x1)
    x2 = _N(x2, x1.dtype)
    if x1.ndim != x2.ndim:
        raise ValueError(f"psnr: inputs must have the same rank, received {x1.shape} and "
                         f"{x2.shape}")
    mse = _G.mean(_G.square(x1 - _G.cast(x2, x1.dtype)))
    return _c(20.0 * math.log10(max_val), x1) - _c(10.0 / math.log(10.0), x1) * _G.log(mse)


# ---- layout ops ----------------------------------------------------------------------------------
def _first(data_format, op):
    if data_format in (None, "channels_last"):
        return False
    if data_format == "channels_first":
        return True
    raise ValueError(f"{op}: data_format must be 'channels_last' or 'channels_first', "
                     f"received {data_format!r}")


def _depth_to_space(x, block_size, data_format="channels_last"):
    x = _N(x)
    first = _first(data_format, "depth_to_space")
    if x.ndim != 4:
        raise ValueError(f"depth_to_space: expected a rank-4 input, received {x.shape}")
    b = int(block_size)
    if first:
        n, c, h, w = x.shape
    else:
        n, h, w, c = x.shape
    if c is None or c % (b * b):
        raise ValueError(f"depth_to_space: channels {c} of {x.shape} must be a multiple of "
                         f"block_size**2 = {b * b}")
    cc = c // (b * b)
    if first:
        y = _G.reshape(x, (-1, cc, b, b, h, w))  # Keras' channels-first order (C, bh, bw)
        y = _G.transpose(y, (0, 1, 4, 2, 5, 3))
        return _G.reshape(y, (-1, cc, h * b, w * b))
    y = _G.reshape(x, (-1, h, w, b, b, cc))
    y = _G.transpose(y, (0, 1, 3, 2, 4, 5))
    return _G.reshape(y, (-1, h * b, w * b, cc))


def _space_to_depth(x, block_size, data_format="channels_last"):
    x = _N(x)
    first = _first(data_format, "space_to_depth")
    if x.ndim != 4:
        raise ValueError(f"space_to_depth: expected a rank-4 input, received {x.shape}")
    b = int(block_size)
    if first:
        n, c, h, w = x.shape
    else:
        n, h, w, c = x.shape
    if h is None or w is None or h % b or w % b:
        raise ValueError(f"space_to_depth: spatial dims of {x.shape} must be multiples of "
                         f"block_size {b}")
    if first:
        y = _G.reshape(x, (-1, c, h // b, b, w // b, b))
        y = _G.transpose(y, (0, 1, 3, 5, 2, 4))
        return _G.reshape(y, (-1, c * b * b, h // b, w // b))
    y = _G.reshape(x, (-1, h // b, b, w // b, b, c))
    y = _G.transpose(y, (0, 1, 3, 2, 4, 5))
    return _G.reshape(y, (-1, h // b, w // b, c * b * b))


celu = _dual(_celu, "celu")
celu.__doc__ = "``max(0, x) + alpha * expm1(min(0, x) / alpha)``."
glu = _dual(_glu, "glu")
glu.__doc__ = "Gated linear unit: ``a * sigmoid(b)`` of ``x``'s two halves along ``axis``."
hard_shrink = _dual(_hard_shrink, "hard_shrink")
hard_shrink.__doc__ = "``x`` where ``|x| > threshold``, else 0."
hard_silu = hard_swish = _dual(_hard_silu, "hard_silu")
hard_silu.__doc__ = "``x * relu6(x + 3) / 6``."
hard_tanh = _dual(_hard_tanh, "hard_tanh")
hard_tanh.__doc__ = "``clip(x, -1, 1)``."
soft_shrink = _dual(_soft_shrink, "soft_shrink")
soft_shrink.__doc__ = "``x - threshold`` above, ``x + threshold`` below ``-threshold``, else 0."
sparse_plus = _dual(_sparse_plus, "sparse_plus")
sparse_plus.__doc__ = "0 for ``x <= -1``, ``(x + 1)**2 / 4`` on (-1, 1), ``x`` for ``x >= 1``."
sparse_sigmoid = _dual(_sparse_sigmoid, "sparse_sigmoid")
sparse_sigmoid.__doc__ = "``clip((x + 1) / 2, 0, 1)``."
squareplus = _dual(_squareplus, "squareplus")
squareplus.__doc__ = "``(x + sqrt(x**2 + b)) / 2``."
tanh_shrink = _dual(_tanh_shrink, "tanh_shrink")
tanh_shrink.__doc__ = "``x - tanh(x)``."
threshold = _dual(_threshold, "threshold")
threshold.__doc__ = "``x`` where ``x > threshold``, else ``default_value``."
sparsemax = _dual(_sparsemax, "sparsemax")
sparsemax.__doc__ = "Euclidean projection of ``x`` onto the simplex along ``axis``."
normalize = _dual(_normalize, "normalize")
normalize.__doc__ = "``x / max(norm(x, order), epsilon)`` along ``axis`` (Keras' rules)."
rms_normalization = _dual(_rms_normalization, "rms_normalization")
rms_normalization.__doc__ = "``x * rsqrt(mean(x**2) + epsilon) * scale`` along ``axis``."
layer_normalization = _dual(_layer_normalization, "layer_normalization")
layer_normalization.__doc__ = "``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over ``axis``."
batch_normalization = _dual(_batch_normalization, "batch_normalization")
batch_normalization.__doc__ = ("``(x - mean) / sqrt(variance + epsilon) * scale + offset`` with "
                               "the 1-D statistics along ``axis``.")
multi_hot = _dual(_multi_hot, "multi_hot")
multi_hot.__doc__ = "Multi-hot encoding of integer labels (one-hot, max over the label axis)."
psnr = _dual(_psnr, "psnr")
psnr.__doc__ = "Peak signal-to-noise ratio ``20 log10(max_val) - 10 log10(mse)``."
depth_to_space = _dual(_depth_to_space, "depth_to_space")
depth_to_space.__doc__ = "Pixel shuffle: channels into ``block_size`` x ``block_size`` blocks."
space_to_depth = _dual(_space_to_depth, "space_to_depth")
space_to_depth.__doc__ = "The inverse of ``depth_to_space``."

__all__ = ["celu", "glu", "hard_shrink", "hard_silu", "hard_swish", "hard_tanh", "soft_shrink",
           "sparse_plus", "sparse_sigmoid", "squareplus", "tanh_shrink", "threshold",
           "sparsemax", "normalize", "rms_normalization", "layer_normalization",
           "batch_normalization", "multi_hot", "psnr", "depth_to_space", "space_to_depth"]
