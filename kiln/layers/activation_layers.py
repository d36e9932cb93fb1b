"""Activation layers with Keras 3's arguments and defaults: ReLU, LeakyReLU, ELU, PReLU,
Softmax; and Identity."""

from __future__ import annotations

import warnings
from typing import Any

import kiln.ops as K
from kiln import activations, initializers, regularizers
from kiln.core import Node, format_shape
from kiln.layers._utils import constraint_config, set_constraints
from kiln.layers.base import Layer


def _number(who: str, name: str, value: Any, minimum: float | None = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{who}: {name} must be a number, received {name}={value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{who}: {name} cannot be a negative value, received {name}={value!r}")
    return float(value)


class ReLU(Layer):
    """Rectified linear unit with Keras' options::

        f(x) = max_value                        for x >= max_value
             = x                                for threshold <= x < max_value
             = negative_slope * (x - threshold) otherwise

    Args:
        max_value: saturation value (default None: none); must be >= 0.
        negative_slope: slope below the threshold (default 0.0); must be >= 0.
        threshold: the threshold (default 0.0); must be >= 0.

    Example:
        >>> y = kiln.layers.ReLU(max_value=6.0)(x)     # relu6
    """

    supports_masking = True

    def __init__(self, max_value: float | None = None, negative_slope: float = 0.0,
                 threshold: float = 0.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.max_value = None if max_value is None else _number("ReLU", "max_value", max_value)
        self.negative_slope = _number("ReLU", "negative_slope", negative_slope)
        self.threshold = _number("ReLU", "threshold", threshold)

    def call(self, inputs: Node) -> Node:
        return activations.relu(inputs, negative_slope=self.negative_slope,
                                max_value=self.max_value, threshold=self.threshold)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"max_value": self.max_value, "negative_slope": self.negative_slope,
                       "threshold": self.threshold})
        return config


class LeakyReLU(Layer):
    """Leaky ReLU: ``x`` for ``x >= 0``, ``negative_slope * x`` below.

    Args:
        negative_slope: the slope below zero (Keras 3 default 0.3; the activation function
            ``kiln.activations.leaky_relu`` defaults to 0.2, as Keras'). The legacy name
            ``alpha`` is accepted, with a warning, as Keras 3 does.

    Example:
        >>> y = kiln.layers.LeakyReLU(negative_slope=0.1)(x)
    """

    supports_masking = True

    def __init__(self, negative_slope: float = 0.3, **kwargs: Any):
        if "alpha" in kwargs:
            negative_slope = kwargs.pop("alpha")
            warnings.warn("LeakyReLU: argument `alpha` is deprecated; use `negative_slope`",
                          DeprecationWarning, stacklevel=2)
        super().__init__(**kwargs)
        if negative_slope is None:
            raise ValueError("LeakyReLU: negative_slope must be a number >= 0, received None")
        self.negative_slope = _number("LeakyReLU", "negative_slope", negative_slope)

    def call(self, inputs: Node) -> Node:
        return activations.leaky_relu(inputs, negative_slope=self.negative_slope)

    def get_config(self) -> dict:
        config = super().get_config()
        config["negative_slope"] = self.negative_slope
        return config


class ELU(Layer):
    """Exponential linear unit: ``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise.

    Args:
        alpha: the scale of the negative part (default 1.0).

    Example:
        >>> y = kiln.layers.ELU(alpha=0.5)(x)
    """

    supports_masking = True

    def __init__(self, alpha: float = 1.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.alpha = _number("ELU", "alpha", alpha, minimum=None)

    def call(self, inputs: Node) -> Node:
        return activations.elu(inputs, alpha=self.alpha)

    def get_config(self) -> dict:
        config = super().get_config()
        config["alpha"] = self.alpha
        return config


class PReLU(Layer):
    """Parametric ReLU: ``x`` for ``x >= 0``, ``alpha * x`` below, with a learned ``alpha``.

    ``alpha`` has the shape of one sample (``input_shape[1:]``), with size 1 along each of
    ``shared_axes`` (1-indexed like Keras: the batch axis is 0), e.g. ``shared_axes=[1, 2]``
    for one slope per channel of an image.

    Args:
        alpha_initializer: default "zeros".
        alpha_regularizer: optional penalty.
        alpha_constraint: optional constraint (``kiln.constraints``).
        shared_axes: None, an int or a list of ints.

    Example:
        >>> y = kiln.layers.PReLU(shared_axes=[1, 2])(kiln.Input((8, 8, 3)))  # 3 weights
    """

    supports_masking = True

    def __init__(self, alpha_initializer: Any = "Zeros", alpha_regularizer: Any = None,
                 alpha_constraint: Any = None, shared_axes: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        set_constraints(self, alpha_constraint=alpha_constraint)
        self.alpha_initializer = initializers.get(alpha_initializer)
        self.alpha_regularizer = regularizers.get(alpha_regularizer)
        if shared_axes is None:
            self.shared_axes = None
        elif isinstance(shared_axes, int):
            self.shared_axes = [int(shared_axes)]
        else:
            self.shared_axes = [int(a) for a in shared_axes]

    def build(self, input_shape: Any) -> None:
        shape = list(input_shape[1:])
        for a in self.shared_axes or []:
            if not 1 <= a <= len(shape):
                raise ValueError(f"Layer '{self.name}' (PReLU): shared_axes {self.shared_axes} "
                                 f"must name axes 1..{len(shape)} of the input shape "
                                 f"{format_shape(input_shape)}")
            shape[a - 1] = 1
        if any(d is None for d in shape):
            raise ValueError(f"Layer '{self.name}' (PReLU) needs known dimensions outside "
                             f"shared_axes={self.shared_axes}, received input shape "
                             f"{format_shape(input_shape)}")
        self.alpha = self.add_weight("alpha", tuple(shape), self.alpha_initializer,
                                     self.alpha_regularizer)
        self.built = True

    def call(self, inputs: Node) -> Node:
        zero = K.constant(0.0, inputs.dtype)
        return K.maximum(inputs, zero) + self.alpha * K.minimum(inputs, zero)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "alpha_initializer": initializers.serialize(self.alpha_initializer),
            "alpha_regularizer": regularizers.serialize(self.alpha_regularizer),
            **constraint_config(self, "alpha_constraint"),
            "shared_axes": self.shared_axes,
        })
        return config


class Softmax(Layer):
    """Softmax along ``axis``, with Keras 3's optional mask.

    With ``mask`` (true or > 0.5 where kept; broadcast against the input), masked entries
    take ``-1e9`` before the softmax (``-3e4`` in float16) and 0 after it, so a fully masked
    row gives zeros, as in Keras 3.

    Args:
        axis: an int or a list of ints (default -1).

    Example:
        >>> p = kiln.layers.Softmax()(scores, mask=keep)
    """

    supports_masking = True

    def __init__(self, axis: Any = -1, **kwargs: Any):
        super().__init__(**kwargs)
        self.axis = int(axis) if isinstance(axis, int) else [int(a) for a in axis]

    def _check_mask(self, inputs: Node, mask: Node) -> None:
        ok = mask.ndim <= inputs.ndim and all(
            m is None or d is None or m in (1, d)
            for m, d in zip(reversed(mask.shape), reversed(inputs.shape)))
        if not ok:
            raise ValueError(f"Layer '{self.name}' (Softmax): the mask of shape "
                             f"{format_shape(mask.shape)} does not broadcast to the input of "
                             f"shape {format_shape(inputs.shape)}")

    def call(self, inputs: Node, mask: Any = None) -> Node:
        x = inputs
        if mask is not None:
            self._check_mask(inputs, mask)
            keep = mask if mask.dtype == "bool" else K.greater(
                mask, K.constant(0.5, mask.dtype))
            big = -3e4 if x.dtype == "float16" else -1e9
            x = K.where(keep, x, K.constant(big, x.dtype))
        if isinstance(self.axis, list) and len(self.axis) > 1:
            y = K.exp(x - K.logsumexp(x, axis=tuple(self.axis), keepdims=True))
        else:
            axis = self.axis[0] if isinstance(self.axis, list) else self.axis
            y = K.softmax(x, axis=axis)
        if mask is not None:
            y = y * K.cast(keep, y.dtype)
        return y

    def get_config(self) -> dict:
        config = super().get_config()
        config["axis"] = self.axis
        return config


class Identity(Layer):
    """Returns its input unchanged (a placeholder layer; it keeps the input's mask).

    Example:
        >>> y = kiln.layers.Identity()(x)
    """

    supports_masking = True

    def call(self, inputs: Any) -> Any:
        return inputs
