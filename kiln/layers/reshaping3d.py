"""3-D reshaping and dropout layers: ZeroPadding3D, Cropping3D, UpSampling3D,
SpatialDropout3D (channels-last ``(batch, depth, height, width, channels)``), as Keras'."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.layers._utils import normalize_data_format, normalize_tuple
from kiln.layers.base import Layer, check_rank
from kiln.layers.noise import SpatialDropout2D
from kiln.layers.reshaping import _crop, _pair, repeat_axes


def _triple_pairs(who: str, arg: str, value: Any) -> tuple[tuple[int, int], ...]:
    """An int (all sides), a triple of ints (symmetric per axis) or three (before, after)
    pairs."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return (_pair(who, arg, value),) * 3
    if isinstance(value, list | tuple) and len(value) == 3:
        return tuple(_pair(who, arg, v) for v in value)
    raise ValueError(f"{who}: {arg} must be an int, a tuple of 3 ints or a tuple of 3 "
                     f"(before, after) pairs, received {arg}={value!r}")


class _Spatial3D(Layer):
    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, 5)


class ZeroPadding3D(_Spatial3D):
    """Pads volumes with zeros: ``(batch, d, h, w, c)`` -> ``(batch, d + pads, h + pads, w +
    pads, c)``.

    Args:
        padding: an int (all sides), a triple ``(pd, ph, pw)`` (symmetric) or three ``(before,
            after)`` pairs (default ``((1, 1), (1, 1), (1, 1))``).
        data_format: None or "channels_last".

    Example:
        >>> kiln.layers.ZeroPadding3D(1)(kiln.Input((4, 4, 4, 2))).shape
        (None, 6, 6, 6, 2)
    """

    def __init__(self, padding: Any = ((1, 1), (1, 1), (1, 1)), data_format: str | None = None,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.padding = _triple_pairs("ZeroPadding3D", "padding", padding)
        self.data_format = normalize_data_format("ZeroPadding3D", data_format, channels_first=True)

    def call(self, inputs: Node) -> Node:
        return K.pad(inputs, ((0, 0),) + self.padding + ((0, 0),))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"padding": self.padding, "data_format": self.data_format})
        return config


class Cropping3D(_Spatial3D):
    """Crops volumes along depth, height and width.

    Args:
        cropping: an int (all sides), a triple (symmetric per axis) or three ``(before,
            after)`` pairs (default ``((1, 1), (1, 1), (1, 1))``).
        data_format: None or "channels_last".

    Example:
        >>> kiln.layers.Cropping3D(((1, 0), (1, 1), (0, 2)))(kiln.Input((5, 5, 5, 1))).shape
        (None, 4, 3, 3, 1)
    """

    def __init__(self, cropping: Any = ((1, 1), (1, 1), (1, 1)), data_format: str | None = None,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.cropping = _triple_pairs("Cropping3D", "cropping", cropping)
        self.data_format = normalize_data_format("Cropping3D", data_format, channels_first=True)

    def call(self, inputs: Node) -> Node:
        return _crop(self, inputs, self.cropping)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"cropping": self.cropping, "data_format": self.data_format})
        return config


class UpSampling3D(_Spatial3D):
    """Repeats each voxel ``size`` times per axis (nearest neighbour): ``(batch, d, h, w, c)``
    -> ``(batch, d * s0, h * s1, w * s2, c)``; differentiable (a voxel's gradient is the sum
    over its copies).

    Args:
        size: an int or a triple (default ``(2, 2, 2)``).
        data_format: None or "channels_last".
    """

    def __init__(self, size: Any = (2, 2, 2), data_format: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.size = normalize_tuple("UpSampling3D", size, 3, "size")
        self.data_format = normalize_data_format("UpSampling3D", data_format, channels_first=True)

    def call(self, inputs: Node) -> Node:
        if None in inputs.shape[1:]:  # videos of any number of frames
            return repeat_axes(inputs, self.size)
        _, d, h, w, c = inputs.shape
        s0, s1, s2 = self.size
        x = K.reshape(inputs, (-1, d, 1, h, 1, w, 1, c))
        for axis, s in ((2, s0), (4, s1), (6, s2)):
            if s > 1:
                x = K.concatenate([x] * s, axis=axis)
        return K.reshape(x, (-1, d * s0, h * s1, w * s2, c))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"size": self.size, "data_format": self.data_format})
        return config


class SpatialDropout3D(SpatialDropout2D):
    """Dropout of whole feature volumes: one keep/drop draw per (sample, channel), shared by
    every voxel; input ``(batch, depth, height, width, channels)``.

    Args:
        rate: fraction of the channels to drop, in ``[0, 1)``.
        data_format: None or "channels_last".
        seed: optional int selecting the layer's random stream.
    """

    rank = 5

    def __init__(self, rate: float, data_format: str | None = None, seed: int | None = None,
                 name: str | None = None, dtype: Any = None, **kwargs: Any):
        normalize_data_format("SpatialDropout3D", data_format)
        super().__init__(rate, data_format=data_format, seed=seed, name=name, dtype=dtype,
                         **kwargs)
