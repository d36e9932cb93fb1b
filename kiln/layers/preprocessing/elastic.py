"""RandomElasticTransform (Keras 3.15's arguments, defaults and recipe): during training each
image is, with a probability drawn in ``factor``, warped by a smooth random displacement
field: two standard normal fields times ``sigma``, Gaussian-blurred with ``sigma``, times
``alpha``, where ``alpha = 0.1 * max(h, w) * s`` and ``sigma = 0.05 * min(h, w) * s`` with
``s`` drawn in ``scale`` once per batch; the warped image is sampled (bilinear or nearest)
with ``fill_mode`` outside, then clipped to ``value_range``. In the graph with any batch size
(the blur is a product with banded Gaussian matrices, so the random ``sigma`` needs no
static kernel: the band is as wide as the largest ``sigma`` asks), eager on arrays; the
identity in ``predict``/``evaluate``. kiln's random streams differ from Keras', so the
fields differ from Keras' own draws."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.layers.augment_color import _c, _col, keras_factor
from kiln.layers.preprocessing._base import RandomLayer, check_value_range

_FILL_MODES = ("constant", "nearest", "wrap", "mirror", "reflect")
_INTERPOLATIONS = ("nearest", "bilinear")


def _fix(i: Node, n: int, mode: str) -> tuple[Node, Node | None]:
    """Integer-valued float coordinates ``i`` mapped into ``[0, n)`` by ``mode``, and (for
    ``constant``) where they were inside."""
    top = _c(n - 1.0, i)
    if mode == "constant":
        ok = K.logical_and(K.greater_equal(i, _c(0.0, i)), K.less_equal(i, top))
        return K.clip(i, 0.0, n - 1.0), ok
    if mode == "nearest" or n == 1:
        return K.clip(i, 0.0, n - 1.0), None
    if mode == "wrap":
        return K.mod(i, _c(float(n), i)), None
    period = 2.0 * n if mode == "reflect" else 2.0 * n - 2.0
    m = K.mod(i, _c(period, i))
    return K.where(K.less(m, _c(float(n), i)), m, _c(period - 1.0 if mode == "reflect"
                                                       else period, i) - m), None


def _band(n: int, radius: int, sigma: Node) -> Node:
    """The (n, n) matrix of a 'same' Gaussian blur with zero padding: ``g(i - j)`` for
    ``|i - j| <= radius``, the taps normalized over ``[-radius, radius]``."""
    off = np.subtract.outer(np.arange(n), np.arange(n)).astype(sigma.dtype)
    inv = _c(-0.5, sigma) / (sigma * sigma)
    band = K.exp(K.constant(off ** 2) * inv) * K.constant(
        (np.abs(off) <= radius).astype(sigma.dtype))
    ks = np.arange(-radius, radius + 1, dtype=sigma.dtype)
    return band / K.sum(K.exp(K.constant(ks ** 2) * inv))


class RandomElasticTransform(RandomLayer):
    """Random elastic deformation of images (see the module docstring).

    Args:
        factor: the probability of transforming an image, a number ``f`` (drawn in
            ``[0, f]``) or a pair in [0, 1] (default 1.0).
        scale: the distortion's magnitude ``s``, a number (drawn in ``[0, s]``) or a pair in
            [0, 1] (default 1.0).
        interpolation: "bilinear" (default) or "nearest".
        fill_mode: "reflect" (default, ``d c b a | a b c d | d c b a``), "mirror"
            (``c d c b | a b c d | c b a b``), "constant", "nearest" or "wrap".
        fill_value: the value outside the image with ``fill_mode="constant"``.
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``); results are clipped
            to it.
        seed: optional int selecting the random stream.
        data_format: None or "channels_last".
    """

    def __init__(self, factor: Any = 1.0, scale: Any = 1.0, interpolation: str = "bilinear",
                 fill_mode: str = "reflect", fill_value: float = 0.0,
                 value_range: Any = (0, 255), seed: int | None = None, data_format: Any = None,
                 **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        name = "RandomElasticTransform"
        self.factor = keras_factor(name, factor, (0.0, 1.0))
        try:
            self.scale = keras_factor(name, scale, (0.0, 1.0))
        except ValueError:
            raise ValueError(f"{name}: the `scale` argument should be a number (or a list of "
                             f"two numbers) in the range [0, 1]. Received: scale={scale!r}"
                             ) from None
        if interpolation not in _INTERPOLATIONS:
            raise NotImplementedError(f"{name}: unknown `interpolation` {interpolation!r}. "
                                      f"Expected one of {_INTERPOLATIONS}.")
        if fill_mode not in _FILL_MODES:
            raise NotImplementedError(f"{name}: unknown `fill_mode` {fill_mode!r}. Expected "
                                      f"one of {_FILL_MODES}.")
        self.interpolation = interpolation
        self.fill_mode = fill_mode
        self.fill_value = float(fill_value)
        self.value_range = check_value_range(name, value_range)

    def _augment(self, x: Node, key: Node) -> Node:
        if self.scale[1] == 0 or self.factor[1] == 0:
            return x
        h, w = self._static_hw(x)
        p, t, s = self._uniform(key, x, 3, 0.0, 1.0)
        prob = p * _c(self.factor[1] - self.factor[0], x) + _c(self.factor[0], x)
        apply = K.less(_col(t), _col(prob))
        # one distortion factor per batch (Keras draws a scalar): the first image's draw
        s = K.reshape(K.slice(s, [(0, 1, 1), (None, None, 1)], None), ())
        s = s * _c(self.scale[1] - self.scale[0], x) + _c(self.scale[0], x)
        alpha = s * _c(0.1 * max(h, w), x)
        sigma = K.maximum(s * _c(0.05 * min(h, w), x), _c(1e-3, x))
        radius = (int(6 * 0.05 * min(h, w) * self.scale[1]) | 1) // 2
        bh, bw = _band(h, radius, sigma), K.transpose(_band(w, radius, sigma))
        plane = K.squeeze(K.slice(x, [(None, None, 1)] * 3 + [(0, 1, 1)], None), -1)
        fields = []
        for k in (1, 2):
            d = K.random_normal(key, plane, (self.salt + k) % 2**32) * sigma
            fields.append(K.matmul(K.matmul(bh, d), bw) * alpha)          # (B, h, w)
        gy, gx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        xs = K.constant(gx[None].astype(x.dtype)) + fields[0]
        ys = K.constant(gy[None].astype(x.dtype)) + fields[1]
        warped = self._sample(x, ys, xs)
        out = K.where(apply, warped, x)
        return K.clip(out, self.value_range[0], self.value_range[1])

    def _sample(self, x: Node, ys: Node, xs: Node) -> Node:
        """``x`` (B, h, w, C) at rows ``ys`` and columns ``xs`` (B, h, w), any batch size."""
        _, h, w, c = x.shape
        table = K.reshape(x, (-1, int(c)))
        row = K.cast(K.argsort(K.zeros_like(K.reshape(K.slice(
            xs, [(None, None, 1), (0, 1, 1), (0, 1, 1)], None), (-1,)))), "int32")
        base = K.reshape(row * K.constant(np.int32(h * w)), (-1, 1, 1))
        taps = []
        for coord in (ys, xs):
            if self.interpolation == "nearest":
                taps.append([(K.round(coord), None)])
            else:
                lo = K.floor(coord)
                frac = coord - lo
                taps.append([(lo, _c(1.0, frac) - frac), (lo + _c(1.0, lo), frac)])
        fill = _c(self.fill_value, x)
        out = None
        for (iy, wy), (ix, wx) in itertools.product(*taps):
            jy, oky = _fix(iy, int(h), self.fill_mode)
            jx, okx = _fix(ix, int(w), self.fill_mode)
            idx = K.cast(jy, "int32") * K.constant(np.int32(w)) + K.cast(jx, "int32") + base
            val = K.take(table, idx, axis=0)                               # (B, h, w, C)
            if oky is not None:
                val = K.where(K.expand_dims(K.logical_and(oky, okx), -1), val, fill)
            if wy is not None:
                val = val * K.expand_dims(wy * wx, -1)
            out = val if out is None else out + val
        return out

    def compute_output_shape(self, input_shape: Any) -> Any:
        return tuple(input_shape)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"factor": list(self.factor), "scale": list(self.scale),
                       "interpolation": self.interpolation, "fill_mode": self.fill_mode,
                       "fill_value": self.fill_value, "value_range": list(self.value_range)})
        return config
