"""Regularization layers active only in training: GaussianNoise, GaussianDropout,
SpatialDropout1D, SpatialDropout2D (Keras 3's arguments and defaults).

Their random numbers come from kiln's counter-based random ops with the trace's ``rng_key``
and the layer's stream (its ``seed``), exactly as Dropout's (``kiln/layers/core.py``): active
in a training trace that carries a key and in an eager call with ``training=True``; the
identity otherwise.
"""

from __future__ import annotations

import math
from typing import Any

import kiln.ops as K
from kiln.core import Node
from kiln.layers._utils import normalize_data_format, random_stream
from kiln.layers.base import Layer, check_rank
from kiln.layers.context import current, in_training
from kiln.layers.core import Dropout


def _rate(who: str, rate: Any) -> float:
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate < 1:
        raise ValueError(f"{who}: rate must be a float in [0, 1), received rate={rate!r}")
    return float(rate)


class _Noise(Layer):
    supports_masking = True

    def __init__(self, seed: int | None = None, draws: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.seed = None if seed is None else int(seed)
        self._stream = random_stream(self.seed, draws)

    @property
    def salt(self) -> int:
        """This layer's random stream (see Dropout.salt)."""
        return 0 if self._stream is None else self._stream

    def _key(self, training: bool | None) -> Node | None:
        ctx = current()
        if not in_training(training) or ctx is None or ctx.rng_key is None:
            return None
        return ctx.rng_key

    def get_config(self) -> dict:
        config = super().get_config()
        config["seed"] = self.seed if self.seed is not None else self._stream
        return config


class GaussianNoise(_Noise):
    """Adds zero-mean Gaussian noise of standard deviation ``stddev`` in training.

    Args:
        stddev: the noise's standard deviation (>= 0).
        seed: optional int selecting the layer's random stream (as Dropout's).

    Example:
        >>> y = kiln.layers.GaussianNoise(0.1)(x)
    """

    def __init__(self, stddev: float, seed: int | None = None, **kwargs: Any):
        if isinstance(stddev, bool) or not isinstance(stddev, int | float) or stddev < 0:
            raise ValueError(f"GaussianNoise: stddev must be a number >= 0, received "
                             f"stddev={stddev!r}")
        super().__init__(seed=seed, draws=stddev > 0, **kwargs)
        self.stddev = float(stddev)

    def call(self, inputs: Node, training: bool | None = None) -> Node:
        key = self._key(training)
        if key is None or self.stddev == 0.0:
            return inputs
        noise = K.random_normal(key, inputs, self.salt)
        return inputs + noise * K.constant(self.stddev, inputs.dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config["stddev"] = self.stddev
        return config


class GaussianDropout(_Noise):
    """Multiplies the inputs by Gaussian noise of mean 1 and standard deviation
    ``sqrt(rate / (1 - rate))`` in training.

    Args:
        rate: the drop probability it emulates, in ``[0, 1)``.
        seed: optional int selecting the layer's random stream.

    Example:
        >>> y = kiln.layers.GaussianDropout(0.2)(x)
    """

    def __init__(self, rate: float, seed: int | None = None, **kwargs: Any):
        rate = _rate("GaussianDropout", rate)
        super().__init__(seed=seed, draws=rate > 0, **kwargs)
        self.rate = rate

    def call(self, inputs: Node, training: bool | None = None) -> Node:
        key = self._key(training)
        if key is None or self.rate == 0.0:
            return inputs
        stddev = math.sqrt(self.rate / (1.0 - self.rate))
        noise = K.random_normal(key, inputs, self.salt)
        return inputs * (noise * K.constant(stddev, inputs.dtype) + K.constant(1.0, inputs.dtype))

    def get_config(self) -> dict:
        config = super().get_config()
        config["rate"] = self.rate
        return config


class SpatialDropout1D(Dropout):
    """Dropout of whole channels of a sequence: one keep/drop draw per (sample, channel),
    shared by all steps; input ``(batch, steps, channels)``.

    Args:
        rate: fraction of the channels to drop, in ``[0, 1)``.
        seed: optional int selecting the layer's random stream.

    Example:
        >>> y = kiln.layers.SpatialDropout1D(0.2)(kiln.Input((20, 16)))
    """

    rank = 3

    def __init__(self, rate: float, seed: int | None = None, name: str | None = None,
                 dtype: Any = None, **kwargs: Any):
        kwargs.pop("noise_shape", None)
        super().__init__(rate, noise_shape=(None,) + (1,) * (self.rank - 2) + (None,),
                         seed=seed, name=name, dtype=dtype, **kwargs)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, self.rank)
        super()._check_inputs(inputs)

    def get_config(self) -> dict:
        config = super().get_config()
        config.pop("noise_shape", None)
        return config


class SpatialDropout2D(SpatialDropout1D):
    """Dropout of whole feature maps: one keep/drop draw per (sample, channel), shared by all
    pixels; input ``(batch, height, width, channels)``.

    Args:
        rate: fraction of the channels to drop, in ``[0, 1)``.
        data_format: None or "channels_last".
        seed: optional int selecting the layer's random stream.

    Example:
        >>> y = kiln.layers.SpatialDropout2D(0.2)(kiln.Input((8, 8, 16)))
    """

    rank = 4

    def __init__(self, rate: float, data_format: str | None = None, seed: int | None = None,
                 name: str | None = None, dtype: Any = None, **kwargs: Any):
        super().__init__(rate, seed=seed, name=name, dtype=dtype, **kwargs)
        self.data_format = normalize_data_format("SpatialDropout2D", data_format,
                                                 channels_first=True)

    def get_config(self) -> dict:
        config = super().get_config()
        config["data_format"] = self.data_format
        return config
