"""User-facing ops: every function here builds graph nodes (see ``kiln.core.ops`` for the
definitions). Inputs may be symbolic tensors, Variables, NumPy arrays or Python numbers.

Example:
    >>> import kiln, kiln.ops as K
    >>> x = kiln.placeholder((None, 4))
    >>> y = K.relu(K.matmul(x, w) + b)
"""

from __future__ import annotations

# This module re-exports the op builders: unused-import warnings do not apply.
# ruff: noqa: F401
from kiln.core.autodiff import grad
from kiln.core.ops._rules import as_node as _as_node
from kiln.core.ops.attention import dot_product_attention
from kiln.core.ops.conv import conv1d, conv2d, conv2d_transpose
from kiln.core.ops.einsum import einsum
from kiln.core.ops.elementwise import BUILDERS as _EW
from kiln.core.ops.elementwise import cast, clip, identity, ones_like, where, zeros_like
from kiln.core.ops.linalg import matmul
from kiln.core.ops.movement import (
    broadcast_like,
    broadcast_to,
    concatenate,
    expand_dims,
    gather,
    one_hot,
    pad,
    reshape,
    split,
    squeeze,
    stack,
    take,
    transpose,
)
from kiln.core.ops.movement import slice_ as slice  # noqa: A001
from kiln.core.ops.nn import (
    log_softmax,
    softmax,
    softmax_cross_entropy,
    sparse_softmax_cross_entropy,
)
from kiln.core.ops.pool import avg_pool1d, avg_pool2d, max_pool1d, max_pool2d
from kiln.core.ops.random import dropout, random_normal, random_uniform
from kiln.core.ops.reduce import BUILDERS as _RED
from kiln.core.ops.reduce import size_of
from kiln.core.ops.registry import apply as _apply
from kiln.core.ops.scan import scan
from kiln.core.ops.source import constant, placeholder

neg = _EW["neg"]
abs = _EW["abs"]  # noqa: A001
sign = _EW["sign"]
exp = _EW["exp"]
expm1 = _EW["expm1"]
log = _EW["log"]
log1p = _EW["log1p"]
sqrt = _EW["sqrt"]
rsqrt = _EW["rsqrt"]
square = _EW["square"]
reciprocal = _EW["reciprocal"]
sin = _EW["sin"]
cos = _EW["cos"]
tanh = _EW["tanh"]
sigmoid = _EW["sigmoid"]
relu = _EW["relu"]
softplus = _EW["softplus"]
erf = _EW["erf"]
floor = _EW["floor"]
ceil = _EW["ceil"]
round = _EW["round"]  # noqa: A001
add = _EW["add"]
sub = subtract = _EW["sub"]
mul = multiply = _EW["mul"]
div = divide = _EW["div"]
pow = power = _EW["pow"]  # noqa: A001
maximum = _EW["maximum"]
minimum = _EW["minimum"]
equal = _EW["equal"]
not_equal = _EW["not_equal"]
less = _EW["less"]
less_equal = _EW["less_equal"]
greater = _EW["greater"]
greater_equal = _EW["greater_equal"]
logical_and = _EW["logical_and"]
logical_or = _EW["logical_or"]
logical_not = _EW["logical_not"]

sum = _RED["sum"]  # noqa: A001
mean = _RED["mean"]
max = _RED["max"]  # noqa: A001
min = _RED["min"]  # noqa: A001
prod = _RED["prod"]
logsumexp = _RED["logsumexp"]
argmax = _RED["argmax"]
argmin = _RED["argmin"]


def stop_gradient(x):
    """``x`` in the forward pass; no gradient flows through it."""
    return _apply("stop_gradient", _as_node(x))


def any(x, axis=None, keepdims=False):  # noqa: A001
    """Whether any element along ``axis`` is true (nonzero), as bool."""
    return greater(max(cast(_as_node(x), "float32"), axis=axis, keepdims=keepdims), 0.0)


def all(x, axis=None, keepdims=False):  # noqa: A001
    """Whether every element along ``axis`` is true (nonzero), as bool."""
    return greater(min(cast(_as_node(x), "float32"), axis=axis, keepdims=keepdims), 0.0)


def reshape_like(x, like):
    """``x`` reshaped to the (run-time) shape of ``like``; only ``like``'s shape is read."""
    return _apply("reshape_like", _as_node(x), _as_node(like))


def flip(x, axis=0):
    """``x`` reversed along ``axis`` (a view: no copy)."""
    x = _as_node(x)
    axis = axis % x.ndim
    return slice(x, [(None, None, -1) if a == axis else (None, None, 1) for a in range(x.ndim)])
