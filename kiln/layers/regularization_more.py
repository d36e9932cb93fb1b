"""ActivityRegularization, AlphaDropout and RMSNormalization (Keras 3 arguments, defaults and
weights)."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers._utils import add_activity_loss, random_stream
from kiln.layers.base import Layer
from kiln.layers.context import current, in_training
from kiln.regularizers import L1L2

_ALPHA = 1.6732632423543772848170429916717
_SCALE = 1.0507009873554804934193349852946


class ActivityRegularization(Layer):
    """The identity, adding ``l1 * sum(|x|) + l2 * sum(x^2)`` (divided by the batch size, as
    Keras does) to the training loss.

    Args:
        l1: L1 factor (default 0).
        l2: L2 factor (default 0).

    Example:
        >>> y = kiln.layers.ActivityRegularization(l2=1e-3)(x)
    """

    supports_masking = True

    def __init__(self, l1: float = 0.0, l2: float = 0.0, **kwargs: Any):
        kwargs.pop("activity_regularizer", None)
        super().__init__(**kwargs)
        self.l1, self.l2 = float(l1), float(l2)
        self.activity_regularizer = L1L2(l1=self.l1, l2=self.l2)

    def call(self, inputs: Node) -> Node:
        add_activity_loss(self, self.activity_regularizer, inputs)
        return inputs

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"l1": self.l1, "l2": self.l2})
        return config


class AlphaDropout(Layer):
    """Dropout that keeps the mean and variance of SELU activations (Keras' AlphaDropout):
    in training each value is kept with probability ``1 - rate`` or set to ``-alpha * scale``
    (SELU's negative saturation), then ``a * x + b`` with ``a = ((1 - rate) (1 + rate
    alpha_p^2))^-1/2``, ``b = -a alpha_p rate``; the identity otherwise.

    Args:
        rate: drop probability in ``[0, 1]``.
        noise_shape: optional shape of the keep/drop mask (None entries: the input's size).
        seed: optional int selecting the layer's random stream.

    Example:
        >>> y = kiln.layers.AlphaDropout(0.1)(kiln.layers.Dense(64, activation="selu")(x))
    """

    supports_masking = True

    def __init__(self, rate: float, noise_shape: Any = None, seed: int | None = None,
                 **kwargs: Any):
        super().__init__(**kwargs)
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise ValueError("AlphaDropout: invalid value received for argument `rate`. Expected "
                             f"a float value between 0 and 1. Received: rate={rate!r}")
        self.rate = float(rate)
        self.noise_shape = None if noise_shape is None else tuple(
            None if d is None else int(d) for d in noise_shape)
        self.seed = None if seed is None else int(seed)
        self._stream = random_stream(self.seed, self.rate > 0)

    def _check_inputs(self, inputs: Any) -> None:
        if self.noise_shape is not None and isinstance(inputs, Node):
            ok = len(self.noise_shape) == inputs.ndim and all(
                n is None or n == 1 or n == d for n, d in zip(self.noise_shape, inputs.shape))
            if not ok:
                raise ValueError(f"Layer '{self.name}' (AlphaDropout): noise_shape "
                                 f"{self.noise_shape} does not broadcast to the input shape "
                                 f"{format_shape(inputs.shape)}")

    def call(self, inputs: Node, training: bool | None = None) -> Node:
        ctx = current()
        if not in_training(training) or self.rate == 0.0 or ctx is None or ctx.rng_key is None:
            return inputs
        like = inputs
        if self.noise_shape is not None:
            like = K.slice(inputs, [(0, 1, 1) if n == 1 and d != 1 else (None, None, 1)
                                    for n, d in zip(self.noise_shape, inputs.shape)], None)
        u = K.random_uniform(ctx.rng_key, like, int(self._stream or 0))
        keep = K.greater_equal(u, K.constant(self.rate, inputs.dtype))
        alpha_p = -_ALPHA * _SCALE
        a = ((1 - self.rate) * (1 + self.rate * alpha_p ** 2)) ** -0.5
        b = -a * alpha_p * self.rate
        x = K.where(keep, inputs, K.constant(alpha_p, inputs.dtype))
        return x * K.constant(a, inputs.dtype) + K.constant(b, inputs.dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"rate": self.rate,
                       "seed": self.seed if self.seed is not None else self._stream,
                       "noise_shape": None if self.noise_shape is None else
                       list(self.noise_shape)})
        return config


class RMSNormalization(Layer):
    """Root-mean-square normalization (Keras' RMSNormalization): ``x * rsqrt(mean(x^2, axis)
    + epsilon) * scale``, with one trainable ``scale`` (initialized to ones) per position of
    the normalized axes.

    Args:
        axis: int or list of ints, the axes normalized over (default -1).
        epsilon: added to the mean square (default 1e-6).

    Example:
        >>> y = kiln.layers.RMSNormalization()(kiln.Input((10, 64)))
    """

    def __init__(self, axis: Any = -1, epsilon: float = 1e-6, **kwargs: Any):
        super().__init__(**kwargs)
        self.axis = list(axis) if isinstance(axis, list | tuple) else int(axis)
        self.epsilon = float(epsilon)

    def _axes(self, ndim: int) -> list[int]:
        axes = self.axis if isinstance(self.axis, list) else [self.axis]
        for a in axes:
            if not -ndim <= a < ndim:
                raise ValueError(f"Layer '{self.name}' (RMSNormalization): axis {a} is out of "
                                 f"bounds for an input of rank {ndim}. Received: "
                                 f"axis={self.axis}")
        return sorted(a % ndim for a in axes)

    def build(self, input_shape: Any) -> None:
        axes = self._axes(len(input_shape))
        shape = tuple(input_shape[a] for a in axes)
        if any(d is None for d in shape):
            raise ValueError(f"Layer '{self.name}' (RMSNormalization) needs known sizes on the "
                             f"normalized axes {axes}, received input shape "
                             f"{format_shape(input_shape)}")
        self.scale = self.add_weight("scale", shape, "ones")
        self.built = True

    def call(self, inputs: Node) -> Node:
        axes = self._axes(inputs.ndim)
        ms = K.mean(K.square(inputs), axis=tuple(axes), keepdims=True)
        out = inputs * K.rsqrt(ms + K.constant(self.epsilon, inputs.dtype))
        scale = self.scale
        if axes != list(range(inputs.ndim - len(axes), inputs.ndim)):
            # broadcast the scale to the input's rank on the normalized axes
            shape = [1] * inputs.ndim
            for a in axes:
                shape[a] = inputs.shape[a]
            scale = K.reshape(scale, tuple(shape))
        return out * scale

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"axis": self.axis, "epsilon": self.epsilon})
        return config
