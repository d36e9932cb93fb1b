"""ContrastLimitedAdaptiveHistogramEqualization (CLAHE), Keras 3.15's algorithm step for step:
on the [0, 255] scale the image is padded (symmetric) to whole tiles, each tile's 256-bin
histogram of the truncated pixel values is clipped at ``clip_limit * tile_pixels / 256`` with
the excess spread evenly, its cumulative counts mapped to ``(cdf - cdf_min) * 255 /
(tile_pixels - cdf_min)``, and each pixel takes the bilinear blend of its four nearest tiles'
mappings. Deterministic: applied in training and inference alike (as Keras does), in the graph
(static height, width and channels; any batch) and eagerly on arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.layers.augment_color import _c, to_range
from kiln.layers.preprocessing._base import ImageLayer, check_value_range

_FULL = (None, None, 1)


def _symmetric(n: int, pad: int) -> np.ndarray:
    """Indices of NumPy's ``pad(mode="symmetric")`` of ``pad`` entries after ``n``."""
    k = np.arange(n + pad) % (2 * n)
    return np.where(k < n, k, 2 * n - 1 - k).astype("int32")


def _grid(size: int, tile: int, grid: int) -> tuple[np.ndarray, ...]:
    """Keras' tile coordinates of each padded row (column): neighbours and blend weight."""
    g = (np.arange(size * 1.0, dtype="float32") - tile / 2.0) / tile + 1.0
    lo = np.floor(g)
    wt = (g - lo).astype("float32")
    lo_i = np.clip(lo, 0, grid + 1).astype("int32")
    hi_i = np.clip(lo + 1.0, 0, grid + 1).astype("int32")
    return lo_i, hi_i, wt


class ContrastLimitedAdaptiveHistogramEqualization(ImageLayer):
    """Contrast Limited Adaptive Histogram Equalization (Keras' layer, see the module
    docstring): local histogram equalization per tile and channel, with the contrast
    amplification limited by ``clip_limit``, blended bilinearly between tiles.

    Args:
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        clip_limit: the histogram clip, in multiples of the mean bin count (default 4.0;
            0 or less: no clipping, plain adaptive equalization).
        tile_grid_size: ``(rows, columns)`` of tiles (default ``(8, 8)``).
        data_format: None or "channels_last".

    The per-tile histograms hold ``batch * height * width * channels * 256`` numbers (a
    one-hot count, as Keras computes them): mind the memory for large images.
    """

    def __init__(self, value_range: Any = (0, 255), clip_limit: float = 4.0,
                 tile_grid_size: Any = (8, 8), data_format: Any = None, **kwargs: Any):
        super().__init__(data_format=data_format, **kwargs)
        name = "ContrastLimitedAdaptiveHistogramEqualization"
        self.value_range = check_value_range(name, value_range)
        if isinstance(clip_limit, bool) or not isinstance(clip_limit, int | float):
            raise ValueError(f"{name}: clip_limit must be a number, received "
                             f"clip_limit={clip_limit!r}")
        self.clip_limit = float(clip_limit)
        if not (isinstance(tile_grid_size, list | tuple) and len(tile_grid_size) == 2
                and all(isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0
                        for v in tile_grid_size)):
            raise ValueError(f"{name}: tile_grid_size must be 2 positive ints (rows, columns), "
                             f"received tile_grid_size={tile_grid_size!r}")
        self.tile_grid_size = (int(tile_grid_size[0]), int(tile_grid_size[1]))

    def call(self, inputs: Node, training: bool | None = None) -> Node:
        x, added = self._images(inputs)
        x = to_range(self._clahe(to_range(x, self.value_range, (0, 255))), (0, 255),
                     self.value_range)
        return K.squeeze(x, 0) if added else x

    def _clahe(self, x: Node) -> Node:
        h, w = self._static_hw(x)
        c = x.shape[3]
        if c is None:
            raise ValueError(f"Layer '{self.name}' (ContrastLimitedAdaptiveHistogramEqualization)"
                             f" needs a known number of channels, received {x.shape}")
        c = int(c)
        gh, gw = self.tile_grid_size
        th, tw = -(-h // gh), -(-w // gw)
        hp, wp = th * gh, tw * gw
        if hp != h:
            x = K.take(x, K.constant(_symmetric(h, hp - h)), axis=1)
        if wp != w:
            x = K.take(x, K.constant(_symmetric(w, wp - w)), axis=2)
        tiles = K.transpose(K.reshape(x, (-1, gh, th, gw, tw, c)), (0, 1, 3, 5, 2, 4))
        pix = K.clip(K.cast(K.reshape(tiles, (-1, gh, gw, c, th * tw)), "int32"), 0, 255)
        hist = K.sum(K.one_hot(pix, 256, dtype=x.dtype), axis=-2)        # (B, gh, gw, C, 256)
        n = float(th * tw)
        if self.clip_limit > 0:
            clipped = K.clip(hist, 0.0, self.clip_limit * n / 256.0)
            excess = K.sum(hist - clipped, axis=-1, keepdims=True)
            hist = clipped + excess / _c(256.0, excess)
        cdf = K.cumsum(hist, axis=-1)
        cdf_min = K.min(cdf, axis=-1, keepdims=True)
        denom = _c(n, cdf) - cdf_min
        denom = K.where(K.equal(denom, _c(0.0, denom)), K.ones_like(denom), denom)
        lut = K.clip((cdf - cdf_min) * _c(255.0, cdf) / denom, 0.0, 255.0)
        # one tile of edge padding on every side of the grid
        lut = K.concatenate([K.slice(lut, [_FULL, (0, 1, 1)], None), lut,
                             K.slice(lut, [_FULL, (gh - 1, gh, 1)], None)], axis=1)
        lut = K.concatenate([K.slice(lut, [_FULL, _FULL, (0, 1, 1)], None), lut,
                             K.slice(lut, [_FULL, _FULL, (gw - 1, gw, 1)], None)], axis=2)
        lut = K.reshape(lut, (-1, (gh + 2) * (gw + 2) * c * 256))
        y0, y1, wy = _grid(hp, th, gh)
        x0, x1, wx = _grid(wp, tw, gw)
        sy, sx = (gw + 2) * c * 256, c * 256
        chan = (np.arange(c, dtype="int32") * 256)[None, None, :]
        pixels = K.clip(K.cast(x, "int32"), 0, 255)                      # (B, hp, wp, C)
        out = None
        for rows, ry in ((y0, 1.0 - wy), (y1, wy)):
            for cols, rx in ((x0, 1.0 - wx), (x1, wx)):
                base = rows[:, None, None] * sy + cols[None, :, None] * sx + chan
                idx = K.reshape(pixels + K.constant(base.astype("int32")), (-1, hp * wp * c))
                val = K.reshape(K.take_along_axis(lut, idx, axis=1), (-1, hp, wp, c))
                wgt = (ry[:, None] * rx[None, :])[None, :, :, None].astype(x.dtype)
                term = val * K.constant(wgt)
                out = term if out is None else out + term
        if (hp, wp) != (h, w):
            out = K.slice(out, [_FULL, (0, h, 1), (0, w, 1), _FULL], None)
        return out

    def compute_output_shape(self, input_shape: Any) -> Any:
        return tuple(input_shape)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"value_range": list(self.value_range), "clip_limit": self.clip_limit,
                       "tile_grid_size": list(self.tile_grid_size)})
        return config
