"""More image augmentation (Keras 3.15 arguments, defaults and formulas): RandomErasing,
RandomGaussianBlur and Equalization. Like the other augmentation layers they are active in
training and when called on data, the identity in ``predict``/``evaluate``; the random ones
draw from the layer's stream (``kiln/layers/preprocessing/_base.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.layers.augment_color import _c, _col, keras_factor, to_range
from kiln.layers.base import is_symbolic
from kiln.layers.context import current, in_training
from kiln.layers.preprocessing._base import ImageLayer, RandomLayer, check_value_range


def _box_mask(x: Node, x0: Node, x1: Node, y0: Node, y1: Node) -> Node:
    """``(batch, h, w, 1)`` bool: the pixels with ``x0 <= col < x1`` and ``y0 <= row < y1``
    (each bound ``(batch, 1)``)."""
    h, w = int(x.shape[1]), int(x.shape[2])
    cols = K.constant(np.arange(w, dtype=x.dtype).reshape(1, 1, w, 1))
    rows = K.constant(np.arange(h, dtype=x.dtype).reshape(1, h, 1, 1))
    inside_x = K.logical_and(K.greater_equal(cols, _col(x0)), K.less(cols, _col(x1)))
    inside_y = K.logical_and(K.greater_equal(rows, _col(y0)), K.less(rows, _col(y1)))
    return K.logical_and(inside_x, inside_y)


class RandomErasing(RandomLayer):
    """Erases a random box of each image with probability drawn in ``factor`` during training
    (Keras' ``RandomErasing``): the box's sides are ``sqrt(s) * width`` and ``sqrt(s') *
    height`` with ``s, s'`` drawn in ``scale``, placed uniformly; erased pixels get
    ``fill_value`` (a number or 3 numbers), or, when it is None, Gaussian noise times
    ``value_range[1]``, clipped to ``value_range``.

    Args:
        factor: erase probability, a number or a pair in [0, 1] (default 1.0).
        scale: the range of the box's side fractions squared (default ``(0.02, 0.33)``).
        fill_value: None (noise), a number or 3 numbers.
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        seed: optional int selecting the random stream.
        data_format: None or "channels_last".
    """

    def __init__(self, factor: Any = 1.0, scale: Any = (0.02, 0.33), fill_value: Any = None,
                 value_range: Any = (0, 255), seed: int | None = None,
                 data_format: Any = None, **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.factor = keras_factor("RandomErasing", factor, (0.0, 1.0))
        self.scale = keras_factor("RandomErasing", scale, (0.0, 1.0))
        if fill_value is not None and not (
                isinstance(fill_value, int | float) and not isinstance(fill_value, bool)) and \
                not (isinstance(fill_value, list | tuple) and len(fill_value) == 3):
            raise ValueError("RandomErasing: the `fill_value` argument should be a number (or a "
                             f"list of three numbers). Received: fill_value={fill_value!r}")
        self.fill_value = list(fill_value) if isinstance(fill_value, tuple) else fill_value
        self.value_range = check_value_range("RandomErasing", value_range)

    def _augment(self, x: Node, key: Node) -> Node:
        h, w = self._static_hw(x)
        sx, sy, px, py, p, t = self._uniform(key, x, 6, 0.0, 1.0)
        lo, hi = self.scale
        bounds = []
        for s, pos, n in ((sx, px, w), (sy, py, h)):
            length = K.sqrt(s * _c(hi - lo, x) + _c(lo, x)) * _c(float(n), x)
            start = pos * (_c(float(n), x) - length)
            bounds += [start, start + length]
        mask = _box_mask(x, *bounds)
        if self.fill_value is None:
            fill = K.random_normal(key, x, (self.salt + 1) % 2**32) * _c(self.value_range[1], x)
        else:
            fill = K.zeros_like(x) + K.constant(np.asarray(self.fill_value, x.dtype))
        fill = K.clip(fill, self.value_range[0], self.value_range[1])
        prob = p * _c(self.factor[1] - self.factor[0], x) + _c(self.factor[0], x)
        apply = K.logical_and(mask, K.less(_col(t), _col(prob)))
        return K.where(apply, fill, x)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"factor": list(self.factor), "scale": list(self.scale),
                       "fill_value": self.fill_value, "value_range": list(self.value_range)})
        return config


def _gaussian_taps(n: int, sigma: Node) -> list[Node]:
    """The normalized weights ``exp(-(i - (n - 1) / 2)^2 / (2 sigma^2))`` of a 1-D kernel."""
    raw = [K.exp(_c(-0.5 * (i - (n - 1) / 2) ** 2, sigma) / K.square(sigma)) for i in range(n)]
    total = raw[0]
    for r in raw[1:]:
        total = total + r
    return [r / total for r in raw]


class RandomGaussianBlur(RandomLayer):
    """Blurs each image with probability drawn in ``factor`` during training (Keras'
    ``RandomGaussianBlur``): a ``kernel_size`` Gaussian with ``(sigma_x, sigma_y)`` drawn once
    per batch in ``sigma``, zero padding ("same"), clipped to ``value_range``.

    Args:
        factor: blur probability, a number or a pair in [0, 1] (default 1.0).
        kernel_size: odd int or pair ``(width, height)`` (default 3).
        sigma: a number or pair in [0, 1], the range of the standard deviations (default 1.0).
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        data_format: None or "channels_last".
        seed: optional int selecting the random stream.
    """

    def __init__(self, factor: Any = 1.0, kernel_size: Any = 3, sigma: Any = 1.0,
                 value_range: Any = (0, 255), data_format: Any = None,
                 seed: int | None = None, **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.factor = keras_factor("RandomGaussianBlur", factor, (0.0, 1.0))
        sizes = list(kernel_size) if isinstance(kernel_size, list | tuple) else [kernel_size] * 2
        if len(sizes) != 2 or any(isinstance(k, bool) or not isinstance(k, int | np.integer)
                                  or k < 1 or k % 2 == 0 for k in sizes):
            raise ValueError("RandomGaussianBlur: `kernel_size` must be an odd positive int or "
                             f"a pair of them. Received: kernel_size={kernel_size!r}")
        self.kernel_size = (int(sizes[0]), int(sizes[1]))
        self.sigma = keras_factor("RandomGaussianBlur", sigma, (0.0, 1.0))
        self.value_range = check_value_range("RandomGaussianBlur", value_range)

    def _augment(self, x: Node, key: Node) -> Node:
        h, w = self._static_hw(x)
        s = K.random_uniform(key, (2,), (self.salt + 1) % 2**32, dtype=x.dtype)
        s = s * _c(self.sigma[1] - self.sigma[0], x) + _c(self.sigma[0] + 1e-6, x)
        sig_x = K.reshape(K.slice(s, [(0, 1, 1)], None), ())
        sig_y = K.reshape(K.slice(s, [(1, 2, 1)], None), ())
        kx, ky = self.kernel_size
        pads = ((0, 0), ((ky - 1) // 2, ky - 1 - (ky - 1) // 2),
                ((kx - 1) // 2, kx - 1 - (kx - 1) // 2), (0, 0))
        xp = K.pad(x, pads)
        full = (None, None, 1)
        rows = None
        for i, wt in enumerate(_gaussian_taps(kx, sig_x)):
            part = K.slice(xp, [full, full, (i, i + w, 1), full], None) * wt
            rows = part if rows is None else rows + part
        blur = None
        for j, wt in enumerate(_gaussian_taps(ky, sig_y)):
            part = K.slice(rows, [full, (j, j + h, 1), full, full], None) * wt
            blur = part if blur is None else blur + part
        p, t = self._uniform(key, x, 2, 0.0, 1.0)
        prob = p * _c(self.factor[1] - self.factor[0], x) + _c(self.factor[0], x)
        out = K.where(K.less(_col(t), _col(prob)), blur, x)
        return K.clip(out, self.value_range[0], self.value_range[1])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"factor": list(self.factor), "kernel_size": list(self.kernel_size),
                       "sigma": list(self.sigma), "value_range": list(self.value_range)})
        return config


class Equalization(ImageLayer):
    """Histogram equalization of each channel during training (Keras' ``Equalization``): on
    the [0, 255] scale, the channel's ``bins``-bin histogram over the whole batch (as Keras
    computes it), its cumulative counts mapped to ``round((cdf - cdf_min) * 255 / (total -
    cdf_min))``, each pixel replaced by its bin's value; a channel with one occupied bin is
    unchanged. Not random; the identity in ``predict``/``evaluate``.

    Args:
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        bins: the number of histogram bins (default 256).
        data_format: None or "channels_last".
    """

    def __init__(self, value_range: Any = (0, 255), bins: int = 256, data_format: Any = None,
                 **kwargs: Any):
        super().__init__(data_format=data_format, **kwargs)
        self.bins = int(bins)
        self.value_range = check_value_range("Equalization", value_range)

    def __call__(self, inputs: Any, *args: Any, training: bool | None = None,
                 **kwargs: Any) -> Any:
        if training is None and current() is None and not is_symbolic(inputs):
            training = True  # called on data: equalize, as Keras does
        return super().__call__(inputs, *args, training=training, **kwargs)

    def call(self, inputs: Node, training: bool | None = None) -> Node:
        x, added = self._images(inputs)
        if in_training(training):
            x = self._equalize(x)
        return K.squeeze(x, 0) if added else x

    def _equalize(self, x: Node) -> Node:
        nb = self.bins
        y = to_range(x, self.value_range, (0, 255))
        idx = K.cast(K.clip(K.floor(y * _c((nb - 1) / 255.0, y)), 0.0, nb - 1.0), "int32")
        hist = K.sum(K.one_hot(idx, nb, dtype=x.dtype), axis=(0, 1, 2))        # (C, bins)
        cdf = K.cumsum(hist, axis=-1)
        big = _c(float(np.finfo(np.float32).max), cdf)
        cdf_min = K.min(K.where(K.greater(cdf, _c(0.0, cdf)), cdf, big), axis=-1, keepdims=True)
        total = K.slice(cdf, [(None, None, 1), (nb - 1, nb, 1)], None)
        denom = total - cdf_min
        denom = K.where(K.equal(denom, _c(0.0, denom)), _c(1.0, denom), denom)
        lut = K.clip(K.round((cdf - cdf_min) * _c(255.0, cdf) / denom), 0.0, 255.0)  # (C, bins)
        c = int(x.shape[-1])
        flat = idx + K.constant(np.arange(c, dtype="int32") * nb)                  # (B,H,W,C)
        out = K.take(K.reshape(lut, (-1,)), flat)
        occupied = K.sum(K.cast(K.greater(hist, _c(0.0, hist)), x.dtype), axis=-1)  # (C,)
        out = K.where(K.less_equal(occupied, _c(1.0, x)), y, out)
        return to_range(out, (0, 255), self.value_range)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"bins": self.bins, "value_range": list(self.value_range)})
        return config
