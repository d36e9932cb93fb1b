"""``kiln.ops.nn``: Keras 3's neural-network ops (graph and eager: see ``kiln.ops``).

Activations follow ``keras.ops`` (``gelu`` defaults to the tanh approximation there, unlike
the activation function); the crossentropies return per-sample values (no reduction) with
Keras' conventions: probabilities are clipped to [1e-7, 1 - 1e-7] (and normalized for the
categorical forms), logits go through the stable log-sigmoid / log-softmax.
"""

from __future__ import annotations

import math

import numpy as np

import kiln.config
from kiln.ops import _G, _dual

_N = _G.as_node
_EPS = 1e-7


def _c(value, like):
    return _G.constant(np.asarray(value, like.dtype))


def _float(x):
    x = _N(x)
    return x if x.dtype in ("float32", "float64") else _G.cast(x, "float32")


# ---- activations ---------------------------------------------------------------------------------
relu = _dual(_G.relu, "relu")
sigmoid = _dual(_G.sigmoid, "sigmoid")
tanh = _dual(_G.tanh, "tanh")
softplus = _dual(_G.softplus, "softplus")
softmax = _dual(_G.softmax, "softmax")
log_softmax = _dual(_G.log_softmax, "log_softmax")


def _relu6(x):
    x = _float(x)
    return _G.minimum(_G.relu(x), _c(6.0, x))


def _leaky_relu(x, negative_slope=0.2):
    x = _float(x)
    return _G.where(_G.greater_equal(x, _c(0.0, x)), x, x * _c(negative_slope, x))


def _elu(x, alpha=1.0):
    x = _float(x)
    # expm1 of min(x, 0): the unused branch never overflows, so its zero gradient is not NaN
    neg = _c(alpha, x) * _G.expm1(_G.minimum(x, _c(0.0, x)))
    return _G.where(_G.greater(x, _c(0.0, x)), x, neg)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _selu(x):
    x = _float(x)
    return _c(_SELU_SCALE, x) * _elu(x, _SELU_ALPHA)


def _gelu(x, approximate=True):
    x = _float(x)
    half, one = _c(0.5, x), _c(1.0, x)
    if approximate:
        inner = _c(math.sqrt(2.0 / math.pi), x) * (x + _c(0.044715, x) * x * x * x)
        return half * x * (one + _G.tanh(inner))
    return half * x * (one + _G.erf(x * _c(1.0 / math.sqrt(2.0), x)))


def _silu(x):
    x = _float(x)
    return x * _G.sigmoid(x)


def _softsign(x):
    x = _float(x)
    return x / (_G.abs(x) + _c(1.0, x))


def _hard_sigmoid(x):
    x = _float(x)
    return _G.clip(x * _c(1.0 / 6.0, x) + _c(0.5, x), _c(0.0, x), _c(1.0, x))


def _log_sigmoid(x):
    x = _float(x)
    return _G.neg(_G.softplus(_G.neg(x)))


relu6 = _dual(_relu6, "relu6")
relu6.__doc__ = "``min(max(x, 0), 6)``."
leaky_relu = _dual(_leaky_relu, "leaky_relu")
leaky_relu.__doc__ = "``x`` for ``x >= 0``, ``negative_slope * x`` below (default 0.2)."
elu = _dual(_elu, "elu")
elu.__doc__ = "``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise."
selu = _dual(_selu, "selu")
selu.__doc__ = "Scaled ELU with the self-normalizing constants."
gelu = _dual(_gelu, "gelu")
gelu.__doc__ = ("Gaussian error linear unit; ``approximate=True`` (keras.ops' default) is the "
                "tanh form, False the erf form.")
silu = swish = _dual(_silu, "silu")
silu.__doc__ = "``x * sigmoid(x)``."
softsign = _dual(_softsign, "softsign")
softsign.__doc__ = "``x / (|x| + 1)``."
hard_sigmoid = _dual(_hard_sigmoid, "hard_sigmoid")
hard_sigmoid.__doc__ = "``clip(x / 6 + 0.5, 0, 1)``."
log_sigmoid = _dual(_log_sigmoid, "log_sigmoid")
log_sigmoid.__doc__ = "``-softplus(-x)``."


# ---- one_hot and the crossentropies --------------------------------------------------------------
def _one_hot(x, num_classes, axis=-1, dtype=None, sparse=False):
    if isinstance(axis, str):  # kiln's older one_hot(indices, depth, dtype)
        axis, dtype = -1, axis
    n = int(num_classes)
    if sparse:
        raise ValueError("one_hot: sparse=True is not supported (kiln tensors are dense)")
    x = _N(x)
    dtype = dtype or "float32"
    if x.dtype in ("int32", "int64"):
        out = _G.one_hot(x, n, dtype)
    else:  # float labels: a row is hot where the label equals a class (non-integral: none)
        cls = _G.constant(np.arange(n, dtype=x.dtype if x.dtype != "bool" else "int32"))
        xx = x if x.dtype != "bool" else _G.cast(x, "int32")
        out = _G.cast(_G.equal(_G.expand_dims(xx, -1), cls), dtype)
    if axis not in (-1, x.ndim):
        out = _G.transpose(out, _axis_perm(x.ndim + 1, axis))
    return out


def _axis_perm(rank, axis):
    axis = axis % rank
    perm = list(range(rank - 1))
    perm.insert(axis, rank - 1)
    return perm


one_hot = _dual(_one_hot, "one_hot")
one_hot.__doc__ = ("One-hot encoding of the labels ``x`` in a new axis of size ``num_classes`` "
                   "(Keras' signature; float labels are hot where integral, a label outside "
                   "[0, num_classes) gives a row of zeros).")


def _clipped(p):
    eps = kiln.config.epsilon()  # Keras' backend.epsilon(), read when the graph is built
    return _G.clip(p, _c(eps, p), _c(1.0 - eps, p))


def _binary_crossentropy(target, output, from_logits=False):
    output = _float(output)
    target = _G.cast(_N(target), output.dtype)
    one = _c(1.0, output)
    if from_logits:
        return target * _G.softplus(_G.neg(output)) + (one - target) * _G.softplus(output)
    p = _clipped(output)
    return _G.neg(target * _G.log(p) + (one - target) * _G.log(one - p))


def _log_probs(output, from_logits, axis):
    if from_logits:
        return _G.log_softmax(output, axis=axis)
    p = output / _G.sum(output, axis=axis, keepdims=True)
    return _G.log(_clipped(p))


def _categorical_crossentropy(target, output, from_logits=False, axis=-1):
    output = _float(output)
    target = _G.cast(_N(target), output.dtype)
    if target.ndim != output.ndim:
        raise ValueError(f"categorical_crossentropy: target {target.shape} and output "
                         f"{output.shape} must have the same rank")
    return _G.neg(_G.sum(target * _log_probs(output, from_logits, axis), axis=axis))


def _sparse_categorical_crossentropy(target, output, from_logits=False, axis=-1):
    output = _float(output)
    target = _N(target)
    if target.ndim == output.ndim and target.shape[-1] == 1:
        target = _G.squeeze(target, -1)
    if target.ndim != output.ndim - 1:
        raise ValueError(f"sparse_categorical_crossentropy: target {target.shape} must have "
                         f"one axis fewer than output {output.shape}")
    ax = axis % output.ndim
    n = output.shape[ax]
    if n is None:
        raise ValueError(f"sparse_categorical_crossentropy: the class axis of {output.shape} "
                         "must have a known size")
    hot = _one_hot(target, n, axis=ax, dtype=output.dtype)
    return _G.neg(_G.sum(hot * _log_probs(output, from_logits, ax), axis=ax))


binary_crossentropy = _dual(_binary_crossentropy, "binary_crossentropy")
binary_crossentropy.__doc__ = "Elementwise binary crossentropy of ``target`` and ``output``."
categorical_crossentropy = _dual(_categorical_crossentropy, "categorical_crossentropy")
categorical_crossentropy.__doc__ = "Crossentropy of one-hot ``target`` along ``axis``."
sparse_categorical_crossentropy = _dual(_sparse_categorical_crossentropy,
                                        "sparse_categorical_crossentropy")
sparse_categorical_crossentropy.__doc__ = ("Crossentropy of integer labels ``target`` (a label "
                                           "outside the classes gives 0, as in Keras).")


def _moments(x, axes, keepdims=False, synchronized=False):
    x = _float(x)
    m = _G.mean(x, axis=axes, keepdims=True)
    v = _G.mean(_G.square(x - m), axis=axes, keepdims=keepdims)
    return (m if keepdims else _G.squeeze(m, axes)), v


moments = _dual(_moments, "moments")
moments.__doc__ = "``(mean, variance)`` of ``x`` over ``axes`` (population variance)."


# ---- convolution, pooling, attention -----------------------------------------------------------
def _channels_last(x, data_format):
    if data_format in (None, "channels_last"):
        return x, None
    if data_format != "channels_first":
        raise ValueError(f"data_format must be 'channels_last' or 'channels_first', received "
                         f"{data_format!r}")
    perm = [0] + list(range(2, x.ndim)) + [1]
    return _G.transpose(x, perm), [int(i) for i in np.argsort(perm)]


def _spatial(op, x, fns):
    rank = x.ndim - 2
    if rank not in fns:
        raise ValueError(f"{op}: expected inputs of rank 3 (1-D) or 4 (2-D), received "
                         f"{x.shape}")
    return fns[rank]


def _conv(inputs, kernel, strides=1, padding="valid", data_format=None, dilation_rate=1):
    x, back = _channels_last(_float(inputs), data_format)
    fn = _spatial("conv", x, {1: _G.conv1d, 2: _G.conv2d})
    y = fn(x, kernel, strides=strides, padding=padding, dilation_rate=dilation_rate)
    return y if back is None else _G.transpose(y, back)


def _depthwise_conv(inputs, kernel, strides=1, padding="valid", data_format=None,
                    dilation_rate=1):
    x, back = _channels_last(_float(inputs), data_format)
    k = _N(kernel, x.dtype)
    fn = _spatial("depthwise_conv", x, {1: _G.conv1d, 2: _G.conv2d})
    cin, mult = k.shape[-2], k.shape[-1]
    k = _G.reshape(k, k.shape[:-2] + (1, cin * mult))
    y = fn(x, k, strides=strides, padding=padding, dilation_rate=dilation_rate, groups=cin)
    return y if back is None else _G.transpose(y, back)


def _pool(op, fns):
    def f(inputs, pool_size, strides=None, padding="valid", data_format=None):
        x, back = _channels_last(_float(inputs), data_format)
        y = _spatial(op, x, fns)(x, pool_size, strides, padding)
        return y if back is None else _G.transpose(y, back)
    f.__name__ = op
    return f


conv = _dual(_conv, "conv")
conv.__doc__ = ("N-D convolution (1-D, 2-D), Keras' kernel layout (spatial..., in, out) and "
                "arguments.")
depthwise_conv = _dual(_depthwise_conv, "depthwise_conv")
depthwise_conv.__doc__ = "Depthwise convolution, kernel (spatial..., in, multiplier)."
max_pool = _dual(_pool("max_pool", {1: _G.max_pool1d, 2: _G.max_pool2d}), "max_pool")
max_pool.__doc__ = "Max pooling (1-D, 2-D) with Keras' arguments."
average_pool = _dual(_pool("average_pool", {1: _G.avg_pool1d, 2: _G.avg_pool2d}),
                     "average_pool")
average_pool.__doc__ = "Average pooling (1-D, 2-D) with Keras' arguments."


def _dot_product_attention(query, key, value, bias=None, mask=None, scale=None,
                           is_causal=False, flash_attention=None, attn_logits_soft_cap=None):
    if attn_logits_soft_cap is not None:
        raise ValueError("dot_product_attention: attn_logits_soft_cap is not supported")
    return _G.dot_product_attention(query, key, value, bias=bias, mask=mask, scale=scale,
                                    is_causal=is_causal)


dot_product_attention = _dual(_dot_product_attention, "dot_product_attention")
dot_product_attention.__doc__ = _G.dot_product_attention.__doc__

__all__ = ["relu", "relu6", "sigmoid", "tanh", "softplus", "softmax", "log_softmax",
           "leaky_relu", "elu", "selu", "gelu", "silu", "swish", "softsign", "hard_sigmoid",
           "log_sigmoid", "one_hot", "binary_crossentropy", "categorical_crossentropy",
           "sparse_categorical_crossentropy", "moments", "conv", "depthwise_conv", "max_pool",
           "average_pool", "dot_product_attention"]
