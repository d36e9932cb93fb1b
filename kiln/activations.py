"""Activation functions (Keras 3 names and defaults), built from ``kiln.ops``.

Each function takes a tensor: on a symbolic node or a Variable (or inside a traced step) it
returns a symbolic node; on a NumPy array (or a number) it returns a NumPy array, computed by
the same graph compiled once per signature (:mod:`kiln.eager`). ``get`` resolves a name
(``"relu"``), ``None`` (linear) or a callable; ``serialize`` gives the name stored in layer
configs.

Example:
    >>> act = kiln.activations.get("gelu")
    >>> y = act(x)
    >>> kiln.activations.serialize(act)
    'gelu'
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

import kiln.config
import kiln.ops as K
from kiln import eager as eager_path
from kiln.core import Node, convert_to_tensor
from kiln.registry import get_registered_name, get_registered_object


def _eager(fn: Callable[..., Node]) -> Callable[..., Any]:
    """``fn`` on a symbolic tensor as it is; on an array, computed eagerly (float64 stays
    float64, other floats and bools compute in floatx)."""
    @functools.wraps(fn)
    def activation(x: Any, *args: Any, **kwargs: Any) -> Any:
        if K.is_symbolic(x):
            return fn(x, *args, **kwargs)
        arr = np.asarray(x)
        dtype = "float64" if arr.dtype == np.float64 else kiln.config.floatx()
        if arr.dtype.kind in "iu":
            arr = arr.astype(dtype)
        key = ("activation", fn, repr(args), repr(sorted(kwargs.items())))
        return eager_path.run(key, lambda t: fn(t, *args, **kwargs), [arr], dtype, batch=False,
                              name=f"activations.{fn.__name__}",
                              who=f"activations.{fn.__name__}")
    return activation


def _c(value: float, x: Node) -> Node:
    return K.constant(value, x.dtype)


@_eager
def relu(x: Any, negative_slope: float = 0.0, max_value: float | None = None,
         threshold: float = 0.0) -> Node:
    """Rectified linear unit: ``max(x, 0)``, with Keras' optional extras.

    Args:
        x: input tensor.
        negative_slope: slope for values below ``threshold`` (default 0).
        max_value: saturation value (default: none).
        threshold: values below it are damped or zeroed (default 0).

    Returns:
        ``x`` for ``threshold <= x < max_value``; ``negative_slope * (x - threshold)`` below.

    Example:
        >>> kiln.activations.relu(x, max_value=6.0)   # relu6
    """
    x = convert_to_tensor(x)
    if negative_slope == 0.0 and max_value is None and threshold == 0.0:
        return K.relu(x)
    if threshold != 0.0:
        # where(x < threshold, ...): NaN fails the test and stays NaN (as every activation
        # propagates it); a zero slope gives 0 below, also at -inf (0 * -inf would be NaN)
        below = (negative_slope * (x - _c(threshold, x)) if negative_slope != 0.0
                 else _c(0.0, x))
        y = K.where(K.less(x, _c(threshold, x)), below, x)
    elif negative_slope != 0.0:
        y = K.where(K.greater_equal(x, _c(0.0, x)), x, x * _c(negative_slope, x))
    else:
        y = K.relu(x)
    if max_value is not None:
        y = K.minimum(y, _c(max_value, x))
    return y


@_eager
def relu6(x: Any) -> Node:
    """``min(max(x, 0), 6)``."""
    return relu(x, max_value=6.0)


@_eager
def leaky_relu(x: Any, negative_slope: float = 0.2) -> Node:
    """``x`` for ``x >= 0``, ``negative_slope * x`` below (Keras 3 default slope 0.2)."""
    x = convert_to_tensor(x)
    return K.where(K.greater_equal(x, _c(0.0, x)), x, x * _c(negative_slope, x))


@_eager
def sigmoid(x: Any) -> Node:
    """``1 / (1 + exp(-x))`` (numerically stable)."""
    return K.sigmoid(x)


@_eager
def tanh(x: Any) -> Node:
    """Hyperbolic tangent."""
    return K.tanh(x)


@_eager
def softmax(x: Any, axis: int = -1) -> Node:
    """``exp(x) / sum(exp(x))`` along ``axis`` (numerically stable)."""
    return K.softmax(x, axis=axis)


@_eager
def log_softmax(x: Any, axis: int = -1) -> Node:
    """``x - logsumexp(x)`` along ``axis`` (numerically stable)."""
    return K.log_softmax(x, axis=axis)


@_eager
def linear(x: Any) -> Node:
    """The identity (the activation of a layer given ``activation=None``)."""
    return convert_to_tensor(x)


@_eager
def elu(x: Any, alpha: float = 1.0) -> Node:
    """``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise."""
    x = convert_to_tensor(x)
    # expm1 of min(x, 0): the unused branch never overflows, so its zero gradient is not NaN.
    neg = _c(alpha, x) * K.expm1(K.minimum(x, _c(0.0, x)))
    return K.where(K.greater(x, _c(0.0, x)), x, neg)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@_eager
def selu(x: Any) -> Node:
    """Scaled ELU: ``scale * elu(x, alpha)`` with the self-normalizing constants."""
    x = convert_to_tensor(x)
    return _c(_SELU_SCALE, x) * elu(x, _SELU_ALPHA)


@_eager
def gelu(x: Any, approximate: bool = False) -> Node:
    """Gaussian error linear unit.

    Args:
        x: input tensor.
        approximate: False (Keras' default for the activation): ``0.5 x (1 + erf(x / sqrt 2))``;
            True: the tanh form ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.
    """
    x = convert_to_tensor(x)
    half, one = _c(0.5, x), _c(1.0, x)
    if approximate:
        inner = _c(math.sqrt(2.0 / math.pi), x) * (x + _c(0.044715, x) * x * x * x)
        return half * x * (one + K.tanh(inner))
    return half * x * (one + K.erf(x * _c(1.0 / math.sqrt(2.0), x)))


@_eager
def silu(x: Any) -> Node:
    """``x * sigmoid(x)`` (also called swish)."""
    x = convert_to_tensor(x)
    return x * K.sigmoid(x)


swish = silu


@_eager
def hard_silu(x: Any) -> Node:
    """``x * hard_sigmoid(x)`` (also called hard_swish)."""
    x = convert_to_tensor(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


@_eager
def softplus(x: Any) -> Node:
    """``log(1 + exp(x))`` (numerically stable)."""
    return K.softplus(x)


@_eager
def softsign(x: Any) -> Node:
    """``x / (|x| + 1)``."""
    x = convert_to_tensor(x)
    return x / (K.abs(x) + _c(1.0, x))


@_eager
def mish(x: Any) -> Node:
    """``x * tanh(softplus(x))``."""
    x = convert_to_tensor(x)
    return x * K.tanh(K.softplus(x))


@_eager
def log_sigmoid(x: Any) -> Node:
    """``log(sigmoid(x)) = -softplus(-x)`` (numerically stable)."""
    x = convert_to_tensor(x)
    return -K.softplus(-x)


@_eager
def exponential(x: Any) -> Node:
    """``exp(x)``."""
    return K.exp(x)


@_eager
def hard_sigmoid(x: Any) -> Node:
    """Piecewise-linear sigmoid, as in Keras 3: ``relu6(x + 3) / 6 = clip(x / 6 + 0.5, 0, 1)``."""
    x = convert_to_tensor(x)
    return K.clip(x * _c(1.0 / 6.0, x) + _c(0.5, x), _c(0.0, x), _c(1.0, x))


def _op(name: str, doc: str) -> Callable[..., Any]:
    """The activation ``name`` of Keras 3.15, built on the op ``kiln.ops.<name>``."""
    op = getattr(K, name)

    def fn(x: Any, *args: Any, **kwargs: Any) -> Node:
        return op(convert_to_tensor(x), *args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    fn.__signature__ = __import__("inspect").signature(op)  # type: ignore[attr-defined]
    return _eager(fn)


celu = _op("celu", "Continuously-differentiable ELU: ``max(x, 0) + min(0, alpha * "
           "(exp(x / alpha) - 1))``.")
glu = _op("glu", "Gated linear unit: ``a * sigmoid(b)`` for the halves ``a, b`` of ``x`` "
          "along ``axis`` (its size must be even).")
hard_shrink = _op("hard_shrink", "``x`` where ``|x| > threshold``, else 0.")
hard_tanh = _op("hard_tanh", "``clip(x, -1, 1)``.")
soft_shrink = _op("soft_shrink", "``x - threshold`` above ``threshold``, ``x + threshold`` "
                  "below ``-threshold``, else 0.")
sparse_plus = _op("sparse_plus", "0 for ``x <= -1``, ``(x + 1)**2 / 4`` for ``|x| < 1``, "
                  "``x`` for ``x >= 1``.")
sparse_sigmoid = _op("sparse_sigmoid", "0 for ``x <= -1``, ``(x + 1) / 2`` for ``|x| < 1``, "
                     "1 for ``x >= 1``.")
sparsemax = _op("sparsemax", "Sparsemax along ``axis``: the Euclidean projection of ``x`` "
                "onto the probability simplex.")
squareplus = _op("squareplus", "``(x + sqrt(x**2 + b)) / 2``.")
tanh_shrink = _op("tanh_shrink", "``x - tanh(x)``.")
threshold = _op("threshold", "``x`` where ``x > threshold``, else ``default_value``.")


_ALL: dict[str, Callable[..., Node]] = {
    "relu": relu, "relu6": relu6, "leaky_relu": leaky_relu, "sigmoid": sigmoid, "tanh": tanh,
    "softmax": softmax, "log_softmax": log_softmax, "linear": linear, "elu": elu, "selu": selu,
    "gelu": gelu, "silu": silu, "swish": swish, "hard_silu": hard_silu, "hard_swish": hard_swish,
    "softplus": softplus, "softsign": softsign, "mish": mish, "log_sigmoid": log_sigmoid,
    "exponential": exponential, "hard_sigmoid": hard_sigmoid, "celu": celu, "glu": glu,
    "hard_shrink": hard_shrink, "hard_tanh": hard_tanh, "soft_shrink": soft_shrink,
    "sparse_plus": sparse_plus, "sparse_sigmoid": sparse_sigmoid, "sparsemax": sparsemax,
    "squareplus": squareplus, "tanh_shrink": tanh_shrink, "threshold": threshold,
}


def serialize(activation: Callable[..., Any] | None) -> str:
    """The name under which ``activation`` is stored in a layer config (``"relu"``).

    Aliases serialize to their canonical name (``swish`` -> ``"silu"``). A custom callable
    serializes to its ``__name__``; loading such a config fails with a clear error unless the
    name is a built-in one.
    """
    if activation is None:
        return "linear"
    for name, fn in _ALL.items():  # first (canonical) name wins
        if fn is activation:
            return name
    registered = get_registered_name(activation)  # register_keras_serializable
    if registered is not None:
        return registered
    return getattr(activation, "__name__", type(activation).__name__)


def deserialize(config: Any, custom_objects: dict | None = None) -> Callable[..., Node]:
    """The activation function named by ``config`` (a name or Keras' function dict): a
    built-in, or a function registered with ``register_keras_serializable`` / passed in
    ``custom_objects`` (never imported from a module named in a file)."""
    if isinstance(config, dict):
        config = config.get("config", config.get("class_name"))
    if not isinstance(config, str):
        raise TypeError(f"activations.deserialize: expected a name or a dict, received "
                        f"{type(config).__name__}")
    if config in _ALL:
        return _ALL[config]
    found = get_registered_object(config, custom_objects)
    if callable(found):
        return found
    raise ValueError(f"Unknown activation {config!r}; valid names: "
                     f"{', '.join(sorted(_ALL))} (or register the function with "
                     "kiln.saving.register_keras_serializable)")


def get(identifier: Any) -> Callable[..., Node]:
    """Resolves an activation: ``None`` -> ``linear``, a name -> the function, a callable ->
    itself.

    Raises:
        ValueError: for an unknown name (the message lists the valid names).
        TypeError: for anything else.

    Example:
        >>> kiln.activations.get("relu") is kiln.activations.relu
        True
    """
    if identifier is None:
        return linear
    if isinstance(identifier, str | dict):
        return deserialize(identifier)
    if callable(identifier):
        return identifier
    raise TypeError(f"Could not interpret activation identifier {identifier!r} (expected a "
                    f"name, None or a callable)")


__all__ = [*_ALL, "get", "serialize", "deserialize"]
