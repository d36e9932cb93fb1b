"""Colour augmentation layers (Keras 3.15 arguments, defaults and formulas): RandomGrayscale,
RandomInvert, RandomPosterization, Solarization, RandomColorDegeneration, RandomSaturation,
RandomHue, RandomColorJitter, RandomSharpness, and the deterministic AutoContrast.

Each random layer draws its per-image numbers from its stream (``RandomLayer``: ``seed``, or
one drawn from kiln's seeded generator) and is the identity outside training (a model's
``predict``/``evaluate``); called on data it is active, as Keras' are. AutoContrast is
applied in training and inference alike, as in Keras. Images are channels-last, a batch
``(batch, h, w, c)`` or one ``(h, w, c)``; the RGB ones need 3 channels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers.preprocessing._base import ImageLayer, RandomLayer, check_value_range
from kiln.layers.preprocessing.augment import RandomBrightness, RandomContrast

_GRAY = (0.2989, 0.5870, 0.1140)
_EPS = 1e-7  # Keras' backend.epsilon()


def keras_factor(who: str, factor: Any, bounds: tuple[float, float]) -> tuple[float, float]:
    """Keras' ``_set_factor``: a number ``f`` in ``bounds`` is ``(max(-|f|, low), |f|)``, a
    pair is sorted (and must overlap ``bounds``)."""
    msg = (f"{who}: the `factor` argument should be a number (or a list of two numbers) in the "
           f"range [{bounds[0]}, {bounds[1]}]. Received: factor={factor!r}")
    if isinstance(factor, list | tuple):
        if len(factor) != 2 or factor[0] > bounds[1] or factor[1] < bounds[0]:
            raise ValueError(msg)
        lo, hi = sorted(float(v) for v in factor)
        return lo, hi
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not (
            bounds[0] <= factor <= bounds[1]):
        raise ValueError(msg)
    f = abs(float(factor))
    return max(-f, bounds[0]), f


def _col(u: Node) -> Node:
    """A ``(batch, 1)`` draw as ``(batch, 1, 1, 1)``."""
    return K.reshape(u, (-1, 1, 1, 1))


def _c(v: float, x: Node) -> Node:
    return K.constant(v, x.dtype)


def to_range(x: Node, src: tuple, dst: tuple) -> Node:
    """Keras' ``_transform_value_range``: affine map of ``src`` onto ``dst``."""
    if tuple(src) == tuple(dst):
        return x
    scale = (dst[1] - dst[0]) / (src[1] - src[0])
    return (x - _c(src[0], x)) * _c(scale, x) + _c(dst[0], x)


def grayscale(x: Node) -> Node:
    """``0.2989 R + 0.587 G + 0.114 B`` with the channel axis kept (size 1)."""
    r, g, b = (K.slice(x, [(None, None, 1)] * 3 + [(i, i + 1, 1)], None) for i in range(3))
    return r * _c(_GRAY[0], x) + g * _c(_GRAY[1], x) + b * _c(_GRAY[2], x)


def rgb_to_hsv(x: Node) -> tuple[Node, Node, Node]:
    """TensorFlow's ``rgb_to_hsv`` on the last axis: hue in [0, 1), saturation ``C / V``,
    value ``max(R, G, B)``; each ``(..., 1)``."""
    r, g, b = (K.slice(x, [(None, None, 1)] * 3 + [(i, i + 1, 1)], None) for i in range(3))
    v = K.maximum(K.maximum(r, g), b)
    c = v - K.minimum(K.minimum(r, g), b)
    zero = _c(0.0, x)
    safe_c = K.where(K.greater(c, zero), c, _c(1.0, x))
    s = K.where(K.greater(v, zero), c / K.where(K.greater(v, zero), v, _c(1.0, x)), zero)
    h = K.where(K.equal(v, r), (g - b) / safe_c,
                K.where(K.equal(v, g), (b - r) / safe_c + _c(2.0, x),
                        (r - g) / safe_c + _c(4.0, x)))
    h = K.where(K.greater(c, zero), h / _c(6.0, x), zero)
    h = K.where(K.less(h, zero), h + _c(1.0, x), h)
    return h, s, v


def hsv_to_rgb(h: Node, s: Node, v: Node) -> Node:
    """The inverse of :func:`rgb_to_hsv`: channel ``n`` in (5, 3, 1) for (R, G, B) is ``v - v
    s clip(min(k, 4 - k), 0, 1)`` with ``k = (n + 6 h) mod 6``."""
    out = []
    for n in (5.0, 3.0, 1.0):
        k = h * _c(6.0, h) + _c(n, h)
        k = k - _c(6.0, h) * K.floor(k / _c(6.0, h))
        w = K.clip(K.minimum(k, _c(4.0, h) - k), 0.0, 1.0)
        out.append(v - v * s * w)
    return K.concatenate(out, axis=-1)


def _need_rgb(layer: Any, x: Node) -> None:
    if x.shape[-1] != 3:
        raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}) needs RGB images (3 "
                         f"channels), received images of shape {format_shape(x.shape)}")


class RandomGrayscale(RandomLayer):
    """Turns each image to grayscale with probability ``factor`` during training (Keras'
    ``RandomGrayscale``): ``0.2989 R + 0.587 G + 0.114 B``, repeated on the 3 channels.

    Args:
        factor: probability in [0, 1] (default 0.5).
        data_format: None or "channels_last".
        seed: optional int selecting the random stream.
    """

    def __init__(self, factor: float = 0.5, data_format: Any = None, seed: int | None = None,
                 **kwargs: Any):
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not (
                0 <= factor <= 1):
            raise ValueError("RandomGrayscale: `factor` should be between 0 and 1. Received: "
                             f"factor={factor!r}")
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.factor = float(factor)

    def _augment(self, x: Node, key: Node) -> Node:
        _need_rgb(self, x)
        (u,) = self._uniform(key, x, 1, 0.0, 1.0)
        gray = grayscale(x) + K.zeros_like(x)
        return K.where(K.less(_col(u), _c(self.factor, x)), gray, x)

    def get_config(self) -> dict:
        config = super().get_config()
        config["factor"] = self.factor
        return config


class _ValueRange(RandomLayer):
    """A random colour layer with Keras' ``factor`` and ``value_range``."""

    bounds: tuple[float, float] = (-1.0, 1.0)

    def __init__(self, factor: Any, value_range: Any = (0, 255), data_format: Any = None,
                 seed: int | None = None, **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        who = type(self).__name__
        self.factor = keras_factor(who, factor, self.bounds)
        self.value_range = check_value_range(who, value_range)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"factor": list(self.factor), "value_range": list(self.value_range)})
        return config


class RandomInvert(_ValueRange):
    """Inverts each image (``high - x``) with a probability drawn in ``factor`` during
    training (Keras' ``RandomInvert``).

    Args:
        factor: a probability or a range of probabilities in [0, 1] (default 1.0: the
            probability is drawn in [0, 1] per image).
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        seed: optional int selecting the random stream.
        data_format: None or "channels_last".
    """

    bounds = (0.0, 1.0)

    def __init__(self, factor: Any = 1.0, value_range: Any = (0, 255), seed: int | None = None,
                 data_format: Any = None, **kwargs: Any):
        super().__init__(factor, value_range, data_format=data_format, seed=seed, **kwargs)

    def _augment(self, x: Node, key: Node) -> Node:
        p, t = self._uniform(key, x, 2, 0.0, 1.0)
        p = p * _c(self.factor[1] - self.factor[0], x) + _c(self.factor[0], x)
        return K.where(K.less(_col(t), _col(p)), _c(self.value_range[1], x) - x, x)


class RandomPosterization(_ValueRange):
    """Keeps the ``bits`` most significant bits of each 8-bit pixel during training (Keras'
    ``RandomPosterization``): pixels are mapped to [0, 255], truncated to integers,
    ``floor(x / 2^(8 - bits)) * 2^(8 - bits)``, and mapped back; ``bits`` is drawn per image
    from the integers in ``[factor[0], factor[1])`` (or is ``factor``).

    Args:
        factor: int or pair of ints in [1, 8].
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        data_format: None or "channels_last".
        seed: optional int selecting the random stream.
    """

    bounds = (1.0, 8.0)

    def __init__(self, factor: Any, value_range: Any = (0, 255), data_format: Any = None,
                 seed: int | None = None, **kwargs: Any):
        super().__init__(factor, value_range, data_format=data_format, seed=seed, **kwargs)
        self.factor = (max(int(self.factor[0]), 1), int(self.factor[1]))

    def _augment(self, x: Node, key: Node) -> Node:
        lo, hi = self.factor
        if lo != hi:
            (u,) = self._uniform(key, x, 1, float(lo), float(hi))
            bits = _col(K.floor(u))
        else:
            bits = _c(float(lo), x)
        step = K.power(_c(2.0, x), _c(8.0, x) - bits)
        y = K.floor(K.clip(to_range(x, self.value_range, (0, 255)), 0.0, 255.0))
        y = K.floor(y / step) * step
        return to_range(y, (0, 255), self.value_range)


class Solarization(RandomLayer):
    """Adds a random amount and inverts the pixels above a random threshold during training
    (Keras' ``Solarization``): on the [0, 255] scale ``y = clip(x + add, 0, 255)``, then ``y``
    where ``y < threshold`` and ``255 - y`` elsewhere; ``add`` and ``threshold`` are drawn
    per image in ``[lo, hi * 255)`` of their factor.

    Args:
        addition_factor: a number ``f`` (range ``[0, f]``) or pair in [0, 1] (default 0).
        threshold_factor: likewise for the threshold (default 0: every pixel inverted).
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        seed: optional int selecting the random stream.
    """

    def __init__(self, addition_factor: Any = 0.0, threshold_factor: Any = 0.0,
                 value_range: Any = (0, 255), seed: int | None = None, **kwargs: Any):
        super().__init__(seed=seed, **kwargs)
        self.addition_factor = self._factor("addition_factor", addition_factor)
        self.threshold_factor = self._factor("threshold_factor", threshold_factor)
        self.value_range = check_value_range("Solarization", value_range)

    @staticmethod
    def _factor(name: str, factor: Any) -> tuple[float, float]:
        if isinstance(factor, list | tuple):
            vals = [float(v) for v in factor]
        elif isinstance(factor, int | float) and not isinstance(factor, bool):
            vals = [0.0, float(factor)]
        else:
            vals = []
        if len(vals) != 2 or any(v < 0 or v > 1 for v in vals):
            raise ValueError(f"Solarization: the `{name}` argument should be a number (or a "
                             f"list of two numbers) in the range [0, 1]. Received: "
                             f"{name}={factor!r}")
        lo, hi = sorted(vals)
        return lo, hi

    def _augment(self, x: Node, key: Node) -> Node:
        a, t = self._uniform(key, x, 2, 0.0, 1.0)
        (alo, ahi), (tlo, thi) = self.addition_factor, self.threshold_factor
        add = _col(a * _c(ahi * 255 - alo, x) + _c(alo, x))
        thr = _col(t * _c(thi * 255 - tlo, x) + _c(tlo, x))
        y = K.clip(to_range(x, self.value_range, (0, 255)) + add, 0.0, 255.0)
        y = K.where(K.less(y, thr), y, _c(255.0, x) - y)
        return to_range(y, (0, 255), self.value_range)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"addition_factor": list(self.addition_factor),
                       "threshold_factor": list(self.threshold_factor),
                       "value_range": list(self.value_range)})
        return config


class RandomColorDegeneration(_ValueRange):
    """Blends each image with its grayscale version during training (Keras'
    ``RandomColorDegeneration``): ``x + f (gray - x)`` clipped to ``value_range``, ``f`` drawn
    per image in ``factor`` (a number ``f`` means ``[0, f]``... as Keras, ``[max(-f, -1),
    f]``).

    Args:
        factor: a number or pair in [-1, 1].
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        data_format: None or "channels_last".
        seed: optional int selecting the random stream.
    """

    def _augment(self, x: Node, key: Node) -> Node:
        _need_rgb(self, x)
        (f,) = self._uniform(key, x, 1, *self.factor)
        y = x + _col(f) * (grayscale(x) - x)
        return K.clip(y, self.value_range[0], self.value_range[1])


class RandomSaturation(_ValueRange):
    """Scales each image's HSV saturation during training (Keras' ``RandomSaturation``): ``f``
    is drawn per image in ``factor``, the saturation multiplied by ``f / (1 - f + 1e-7)``
    (0.5: unchanged; 0: gray; 1: fully saturated) and clipped to ``value_range``.

    Args:
        factor: a number or pair in [-1, 1] (as Keras' range check).
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        data_format: None or "channels_last".
        seed: optional int selecting the random stream.
    """

    def _augment(self, x: Node, key: Node) -> Node:
        _need_rgb(self, x)
        (f,) = self._uniform(key, x, 1, *self.factor)
        f = _col(f / (_c(1.0 + _EPS, x) - f))
        h, s, v = rgb_to_hsv(x)
        s = K.clip(s * f, self.value_range[0], self.value_range[1])
        return hsv_to_rgb(h, s, v)


class RandomHue(_ValueRange):
    """Shifts each image's hue during training (Keras' ``RandomHue``): a shift of ``± f / 2``
    turns (sign and ``f`` in ``factor`` drawn per image), wrapped to [0, 1), on the image
    mapped to [0, 1]; the result is clipped and mapped back to ``value_range``.

    Args:
        factor: a number or pair in [0, 1].
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        data_format: None or "channels_last".
        seed: optional int selecting the random stream.
    """

    bounds = (0.0, 1.0)

    def _augment(self, x: Node, key: Node) -> Node:
        _need_rgb(self, x)
        sign, f = self._uniform(key, x, 2, 0.0, 1.0)
        f = f * _c(self.factor[1] - self.factor[0], x) + _c(self.factor[0], x)
        sign = K.where(K.greater(sign, _c(0.5, x)), _c(-1.0, x), _c(1.0, x))
        shift = _col(sign * f * _c(0.5, x))
        h, s, v = rgb_to_hsv(to_range(x, self.value_range, (0, 1)))
        h = h + shift
        h = K.where(K.greater(h, _c(1.0, x)), h - _c(1.0, x), h)
        h = K.where(K.less(h, _c(0.0, x)), h + _c(1.0, x), h)
        y = K.clip(hsv_to_rgb(h, s, v), 0.0, 1.0)
        return to_range(y, (0, 1), self.value_range)


class RandomSharpness(_ValueRange):
    """Blends each image with a 3x3 smoothed copy during training (Keras'
    ``RandomSharpness``): ``x + (1 - 2 f) (smooth - x)``, clipped to ``value_range``; the
    smoothing kernel is ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13`` with zero "same" padding,
    ``f`` drawn per image in ``factor`` (0.5: unchanged; 0: smoothed; 1: sharpened).

    Args:
        factor: a number or pair in [0, 1].
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        data_format: None or "channels_last".
        seed: optional int selecting the random stream.
    """

    bounds = (0.0, 1.0)

    def _augment(self, x: Node, key: Node) -> Node:
        (f,) = self._uniform(key, x, 1, *self.factor)
        c = int(x.shape[-1])
        a, b = 1.0 / 13.0, 5.0 / 13.0
        kernel = np.tile(np.array([[a, a, a], [a, b, a], [a, a, a]])[:, :, None, None],
                         (1, 1, c, 1)).astype(x.dtype)
        smooth = K.depthwise_conv(x, K.constant(kernel), strides=1, padding="same")
        y = x + (_c(1.0, x) - _col(f) * _c(2.0, x)) * (smooth - x)
        return K.clip(y, self.value_range[0], self.value_range[1])


class RandomColorJitter(RandomLayer):
    """RandomBrightness, RandomContrast, RandomSaturation and RandomHue in that order, each
    only when its factor is given (Keras' ``RandomColorJitter``); each draws from its own
    stream derived from ``seed``.

    Args:
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        brightness_factor, contrast_factor, saturation_factor, hue_factor: the factors of
            the four layers (None skips one).
        seed: optional int selecting the random stream.
        data_format: None or "channels_last".
    """

    def __init__(self, value_range: Any = (0, 255), brightness_factor: Any = None,
                 contrast_factor: Any = None, saturation_factor: Any = None,
                 hue_factor: Any = None, seed: int | None = None, data_format: Any = None,
                 **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.value_range = check_value_range("RandomColorJitter", value_range)
        def listed(f: Any) -> Any:
            return list(f) if isinstance(f, list | tuple) else f

        self.brightness_factor = listed(brightness_factor)
        self.contrast_factor = listed(contrast_factor)
        self.saturation_factor = listed(saturation_factor)
        self.hue_factor = listed(hue_factor)
        vr = self.value_range
        seeds = [(self.salt + 7919 * (i + 1)) % 2**32 for i in range(4)]
        self._steps = [
            RandomBrightness(brightness_factor, value_range=vr, seed=seeds[0], dtype=self.dtype)
            if brightness_factor is not None else None,
            RandomContrast(contrast_factor, value_range=vr, seed=seeds[1], dtype=self.dtype)
            if contrast_factor is not None else None,
            RandomSaturation(saturation_factor, value_range=vr, seed=seeds[2], dtype=self.dtype)
            if saturation_factor is not None else None,
            RandomHue(hue_factor, value_range=vr, seed=seeds[3], dtype=self.dtype)
            if hue_factor is not None else None]

    def _sublayers(self) -> list:
        return []

    def _augment(self, x: Node, key: Node) -> Node:
        for step in self._steps:
            if step is not None:
                x = step._augment(x, key)
        return x

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"value_range": list(self.value_range),
                       "brightness_factor": self.brightness_factor,
                       "contrast_factor": self.contrast_factor,
                       "saturation_factor": self.saturation_factor,
                       "hue_factor": self.hue_factor})
        return config


class AutoContrast(ImageLayer):
    """Stretches each channel of each image to the full ``value_range`` (Keras'
    ``AutoContrast``): on the [0, 255] scale ``(x - min) * 255 / (max - min)`` per image and
    channel, clipped; a constant channel (``max == min``) is left unchanged. Applied in
    training and inference alike.

    Args:
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
    """

    def __init__(self, value_range: Any = (0, 255), **kwargs: Any):
        super().__init__(**kwargs)
        self.value_range = check_value_range("AutoContrast", value_range)

    def call(self, inputs: Node) -> Node:
        x, added = self._images(inputs)
        y = to_range(x, self.value_range, (0, 255))
        low = K.min(y, axis=(1, 2), keepdims=True)
        high = K.max(y, axis=(1, 2), keepdims=True)
        span = high - low
        flat = K.equal(span, _c(0.0, x))
        scale = _c(255.0, x) / K.where(flat, _c(1.0, x), span)
        out = to_range(K.clip((y - low) * scale, 0.0, 255.0), (0, 255), self.value_range)
        out = K.where(K.logical_or(flat, K.isnan(out)), x, out)
        return K.squeeze(out, 0) if added else out

    def get_config(self) -> dict:
        config = super().get_config()
        config["value_range"] = list(self.value_range)
        return config
