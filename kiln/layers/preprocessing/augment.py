"""Random image augmentation: RandomFlip, RandomRotation, RandomZoom, RandomTranslation,
RandomContrast, RandomBrightness, RandomCrop (Keras 3 arguments and defaults).

Each draws one set of parameters per image from its random stream (``_base.RandomLayer``) and
is the identity outside training (RandomCrop then center-crops and resizes, as Keras does).
The geometric ones build one transform row per image for ``kiln.ops.affine_transform``
(``[a0, a1, a2, b0, b1, b2, c0, c1]``: the output pixel ``(x, y)`` reads the input at
``(a0 x + a1 y + a2, b0 x + b1 y + b2)``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.layers.context import in_training
from kiln.layers.preprocessing._base import (
    RandomLayer,
    check_choice,
    check_size,
    check_value_range,
    factor_range,
    transform_rows,
)
from kiln.layers.preprocessing.image import smart_resize

FILL_MODES = ("reflect", "wrap", "constant", "nearest")
INTERPOLATIONS = ("nearest", "bilinear")
FLIP_MODES = ("horizontal", "vertical", "horizontal_and_vertical")


class RandomFlip(RandomLayer):
    """Flips each image with probability 1/2 during training (Keras' ``RandomFlip``).

    Args:
        mode: ``"horizontal"`` (left-right), ``"vertical"`` (up-down) or
            ``"horizontal_and_vertical"`` (default; one draw per image flips both axes, as
            Keras does).
        seed: optional int selecting the random stream.
        data_format: ``"channels_last"`` or None.

    Example:
        >>> augment = kiln.Sequential([kiln.layers.RandomFlip("horizontal"),
        ...                            kiln.layers.RandomRotation(0.1)])
    """

    def __init__(self, mode: str = "horizontal_and_vertical", seed: int | None = None,
                 data_format: Any = None, **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.mode = check_choice("RandomFlip", "mode", mode, FLIP_MODES)

    def _augment(self, x: Node, key: Node) -> Node:
        (u,) = self._uniform(key, x, 1, 0.0, 1.0)
        flip = K.less_equal(K.reshape(u, (-1, 1, 1, 1)), K.constant(0.5, x.dtype))
        if self.mode in ("horizontal", "horizontal_and_vertical"):
            x = K.where(flip, K.flip(x, axis=2), x)
        if self.mode in ("vertical", "horizontal_and_vertical"):
            x = K.where(flip, K.flip(x, axis=1), x)
        return x

    def get_config(self) -> dict:
        config = super().get_config()
        config["mode"] = self.mode
        return config


class _Geometric(RandomLayer):
    """A random affine transform per image, sampled with ``kiln.ops.affine_transform``."""

    def __init__(self, fill_mode: str = "reflect", interpolation: str = "bilinear",
                 seed: int | None = None, fill_value: float = 0.0, data_format: Any = None,
                 **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        who = type(self).__name__
        self.fill_mode = check_choice(who, "fill_mode", fill_mode, FILL_MODES)
        self.interpolation = check_choice(who, "interpolation", interpolation, INTERPOLATIONS)
        self.fill_value = float(fill_value)

    def _augment(self, x: Node, key: Node) -> Node:
        h, w = self._static_hw(x)
        rows = self._transforms(x, key, h, w)
        return K.affine_transform(x, rows, self.interpolation, self.fill_mode, self.fill_value)

    def _transforms(self, x: Node, key: Node, h: int, w: int) -> Node:
        raise NotImplementedError

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"fill_mode": self.fill_mode, "interpolation": self.interpolation,
                       "fill_value": self.fill_value})
        return config


class RandomRotation(_Geometric):
    """Rotates each image by a random angle about its center during training (Keras'
    ``RandomRotation``).

    Args:
        factor: a fraction of a full turn: a number ``f`` draws angles in ``[-f, f] * 360``
            degrees, a pair ``(lo, hi)`` in ``[lo, hi] * 360`` (values in ``[-1, 1]``;
            positive angles turn counter-clockwise).
        fill_mode: how points outside the image are read: ``"reflect"`` (default),
            ``"wrap"``, ``"constant"`` or ``"nearest"``.
        interpolation: ``"bilinear"`` (default) or ``"nearest"``.
        seed: optional int selecting the random stream.
        fill_value: the value outside the image with ``fill_mode="constant"``.
        data_format: ``"channels_last"`` or None.

    Example:
        >>> y = kiln.layers.RandomRotation(0.1, fill_mode="constant")(images)
    """

    def __init__(self, factor: Any, fill_mode: str = "reflect", interpolation: str = "bilinear",
                 seed: int | None = None, fill_value: float = 0.0, data_format: Any = None,
                 **kwargs: Any):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.factor = factor_range("RandomRotation", "factor", factor, -1.0, 1.0)

    def _transforms(self, x: Node, key: Node, h: int, w: int) -> Node:
        lo, hi = self.factor
        (deg,) = self._uniform(key, x, 1, lo * 360.0, hi * 360.0)
        rad = deg * K.constant(math.pi / 180.0, x.dtype)
        cos, sin = K.cos(rad), K.sin(rad)
        cx, cy = 0.5 * (w - 1), 0.5 * (h - 1)
        a2 = K.constant(cx, x.dtype) - cos * K.constant(cx, x.dtype) + sin * K.constant(
            cy, x.dtype)
        b2 = K.constant(cy, x.dtype) - sin * K.constant(cx, x.dtype) - cos * K.constant(
            cy, x.dtype)
        return transform_rows([cos, -sin, a2, sin, cos, b2, 0.0, 0.0], cos)

    def get_config(self) -> dict:
        config = super().get_config()
        config["factor"] = list(self.factor)
        return config


class RandomZoom(_Geometric):
    """Zooms each image in or out about its center by a random factor during training
    (Keras' ``RandomZoom``).

    Args:
        height_factor: a number ``f`` zooms the height by a factor in ``1 + [-f, f]``; a pair
            ``(lo, hi)`` in ``1 + [lo, hi]`` (values in ``(-1, 1]``). Positive values zoom
            out (the image shrinks), negative ones zoom in.
        width_factor: the same for the width; None (default) keeps the aspect ratio (the
            width uses the height's factor).
        fill_mode, interpolation, seed, fill_value, data_format: as in ``RandomRotation``.

    Example:
        >>> y = kiln.layers.RandomZoom(0.2)(images)
    """

    def __init__(self, height_factor: Any, width_factor: Any = None,
                 fill_mode: str = "reflect", interpolation: str = "bilinear",
                 seed: int | None = None, fill_value: float = 0.0, data_format: Any = None,
                 **kwargs: Any):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.height_factor = factor_range("RandomZoom", "height_factor", height_factor, -1.0,
                                          1.0, low_open=True)
        self.width_factor = None if width_factor is None else factor_range(
            "RandomZoom", "width_factor", width_factor, -1.0, 1.0, low_open=True)

    def _transforms(self, x: Node, key: Node, h: int, w: int) -> Node:
        hl, hu = self.height_factor
        wl, wu = self.width_factor or (0.0, 0.0)
        u_h, u_w = self._uniform(key, x, 2, 0.0, 1.0)
        zh = u_h * K.constant(hu - hl, x.dtype) + K.constant(1.0 + hl, x.dtype)
        zw = zh if self.width_factor is None else (
            u_w * K.constant(wu - wl, x.dtype) + K.constant(1.0 + wl, x.dtype))
        one = K.constant(1.0, x.dtype)
        x_off = (one - zw) * K.constant((w - 1) / 2.0, x.dtype)
        y_off = (one - zh) * K.constant((h - 1) / 2.0, x.dtype)
        return transform_rows([zw, 0.0, x_off, 0.0, zh, y_off, 0.0, 0.0], zh)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"height_factor": list(self.height_factor),
                       "width_factor": None if self.width_factor is None else
                       list(self.width_factor)})
        return config


class RandomTranslation(_Geometric):
    """Shifts each image by a random fraction of its size during training (Keras'
    ``RandomTranslation``).

    Args:
        height_factor: a number ``f`` shifts vertically by ``[-f, f] * height`` pixels, a pair
            ``(lo, hi)`` by ``[lo, hi] * height`` (values in ``[-1, 1]``; positive moves the
            content down).
        width_factor: the same horizontally (positive moves the content right).
        fill_mode, interpolation, seed, fill_value, data_format: as in ``RandomRotation``.

    Example:
        >>> y = kiln.layers.RandomTranslation(0.1, 0.1)(images)
    """

    def __init__(self, height_factor: Any, width_factor: Any, fill_mode: str = "reflect",
                 interpolation: str = "bilinear", seed: int | None = None,
                 fill_value: float = 0.0, data_format: Any = None, **kwargs: Any):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.height_factor = factor_range("RandomTranslation", "height_factor", height_factor,
                                          -1.0, 1.0)
        self.width_factor = factor_range("RandomTranslation", "width_factor", width_factor,
                                         -1.0, 1.0)

    def _transforms(self, x: Node, key: Node, h: int, w: int) -> Node:
        (hl, hu), (wl, wu) = self.height_factor, self.width_factor
        u_h, u_w = self._uniform(key, x, 2, 0.0, 1.0)
        dy = (u_h * K.constant(hu - hl, x.dtype) + K.constant(hl, x.dtype)) * K.constant(
            float(h), x.dtype)
        dx = (u_w * K.constant(wu - wl, x.dtype) + K.constant(wl, x.dtype)) * K.constant(
            float(w), x.dtype)
        return transform_rows([1.0, 0.0, -dx, 0.0, 1.0, -dy, 0.0, 0.0], dy)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"height_factor": list(self.height_factor),
                       "width_factor": list(self.width_factor)})
        return config


class RandomContrast(RandomLayer):
    """Scales each image's deviation from its per-channel mean by a random factor during
    training, then clips to ``value_range`` (Keras' ``RandomContrast``):
    ``clip((x - mean) * f + mean)``, ``f`` uniform in ``[1 - lower, 1 + upper]``.

    Args:
        factor: a number ``f`` (``lower = upper = f``) or a pair ``(lower, upper)``, in
            ``[0, 1]``.
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        seed: optional int selecting the random stream.

    Example:
        >>> y = kiln.layers.RandomContrast(0.2, value_range=(0, 1))(images)
    """

    def __init__(self, factor: Any, value_range: Any = (0, 255), seed: int | None = None,
                 **kwargs: Any):
        super().__init__(seed=seed, **kwargs)
        if isinstance(factor, list | tuple):
            lo, hi = factor_range("RandomContrast", "factor", factor, 0.0, 1.0)
            self.factor = (lo, hi)
        else:
            self.factor = factor_range("RandomContrast", "factor", factor, 0.0, 1.0,
                                       symmetric=False)
        self.value_range = check_value_range("RandomContrast", value_range)

    def _augment(self, x: Node, key: Node) -> Node:
        lower, upper = self.factor
        (f,) = self._uniform(key, x, 1, 1.0 - lower, 1.0 + upper)
        f = K.reshape(f, (-1, 1, 1, 1))
        mean = K.mean(x, axis=(1, 2), keepdims=True)
        out = (x - mean) * f + mean
        return K.clip(out, self.value_range[0], self.value_range[1])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"factor": list(self.factor), "value_range": list(self.value_range)})
        return config


class RandomBrightness(RandomLayer):
    """Adds a random offset to each image during training, then clips to ``value_range``
    (Keras' ``RandomBrightness``): ``clip(x + d * (high - low))``, ``d`` uniform in the
    factor's range.

    Args:
        factor: a number ``f`` draws ``d`` in ``[-f, f]``, a pair ``(lo, hi)`` in ``[lo, hi]``
            (values in ``[-1, 1]``).
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        seed: optional int selecting the random stream.

    Example:
        >>> y = kiln.layers.RandomBrightness(0.2)(images)
    """

    def __init__(self, factor: Any, value_range: Any = (0, 255), seed: int | None = None,
                 **kwargs: Any):
        super().__init__(seed=seed, **kwargs)
        self.factor = factor_range("RandomBrightness", "factor", factor, -1.0, 1.0)
        self.value_range = check_value_range("RandomBrightness", value_range)

    def _augment(self, x: Node, key: Node) -> Node:
        lo, hi = self.factor
        span = self.value_range[1] - self.value_range[0]
        (d,) = self._uniform(key, x, 1, lo * span, hi * span)
        out = x + K.reshape(d, (-1, 1, 1, 1))
        return K.clip(out, self.value_range[0], self.value_range[1])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"factor": list(self.factor), "value_range": list(self.value_range)})
        return config


class RandomCrop(RandomLayer):
    """Crops a random ``(height, width)`` window during training, one offset per batch
    (Keras' ``RandomCrop``). Outside training, and in training when the images are not
    larger than the target in both dimensions, it crops the largest centered window with
    the target aspect ratio and resizes it (bilinear) to ``(height, width)``.

    Args:
        height, width: the output size.
        seed: optional int selecting the random stream.
        data_format: ``"channels_last"`` or None.

    Example:
        >>> y = kiln.layers.RandomCrop(24, 24)(images)     # from (None, 32, 32, 3)
    """

    def __init__(self, height: int, width: int, seed: int | None = None,
                 data_format: Any = None, name: str | None = None, **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, name=name, **kwargs)
        self.height = check_size("RandomCrop", "height", height)
        self.width = check_size("RandomCrop", "width", width)

    def call(self, inputs: Node, training: bool | None = None) -> Node:
        x, added = self._images(inputs)
        h, w = self._static_hw(x)
        key = self._key(training) if in_training(training) else None
        if key is not None and h > self.height and w > self.width:
            u = K.random_uniform(key, (2,), self.salt, dtype=x.dtype)
            starts = K.cast(K.floor(u * K.constant(np.array(
                [h - self.height + 1, w - self.width + 1], np.float64), x.dtype)), "int32")
            rows = K.slice(starts, [(0, 1, 1)], None) + K.constant(np.arange(self.height), "int32")
            cols = K.slice(starts, [(1, 2, 1)], None) + K.constant(np.arange(self.width), "int32")
            x = K.take(K.take(x, rows, axis=1), cols, axis=2)
        else:
            x = smart_resize(x, h, w, self.height, self.width, "bilinear")
        return K.squeeze(x, 0) if added else x

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"height": self.height, "width": self.width})
        return config
