"""RandomShear (Keras 3.15 arguments, defaults and formula), on kiln's affine transform."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node
from kiln.layers.preprocessing._base import transform_rows
from kiln.layers.preprocessing.augment import _Geometric


def _shear_factor(name: str, factor: Any) -> tuple[float, float]:
    msg = (f"RandomShear: the `{name}` argument should be a number (or a list of two numbers) "
           f"in the range [0.0, 1.0]. Received: {name}={factor!r}")
    if isinstance(factor, list | tuple):
        # a pair may be negative (the config stores (-f, f); Keras 3.15 rejects its own)
        if len(factor) != 2 or any(isinstance(v, bool) or not isinstance(v, int | float)
                                   or not -1 <= v <= 1 for v in factor):
            raise ValueError(msg)
        lo, hi = sorted(float(v) for v in factor)
        return lo, hi
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 <= factor <= 1:
        raise ValueError(msg)
    return -abs(float(factor)), abs(float(factor))


class RandomShear(_Geometric):
    """Shears each image during training (Keras' ``RandomShear``): the output pixel ``(x,
    y)`` reads the input at ``(x + s_x y, s_y x + y)``, with ``s_x`` and ``s_y`` drawn per
    image in ``x_factor`` and ``y_factor`` and both negated with probability 1/2.

    Args:
        x_factor: a number ``f`` in [0, 1] (range ``[-f, f]``) or a pair in [-1, 1]
            (default 0.0).
        y_factor: likewise for the vertical shear (default 0.0).
        interpolation: "bilinear" (default) or "nearest".
        fill_mode: "reflect" (default), "wrap", "constant" or "nearest".
        fill_value: the value outside the image with ``fill_mode="constant"``.
        data_format: None or "channels_last".
        seed: optional int selecting the random stream.
    """

    def __init__(self, x_factor: Any = 0.0, y_factor: Any = 0.0,
                 interpolation: str = "bilinear", fill_mode: str = "reflect",
                 fill_value: float = 0.0, data_format: Any = None, seed: int | None = None,
                 **kwargs: Any):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.x_factor = _shear_factor("x_factor", x_factor)
        self.y_factor = _shear_factor("y_factor", y_factor)

    def _transforms(self, x: Node, key: Node, h: int, w: int) -> Node:
        flip, ux, uy = self._uniform(key, x, 3, 0.0, 1.0)
        sign = K.where(K.greater(flip, K.constant(0.5, x.dtype)), K.constant(-1.0, x.dtype),
                       K.constant(1.0, x.dtype))
        sx = (ux * K.constant(self.x_factor[1] - self.x_factor[0], x.dtype)
              + K.constant(self.x_factor[0], x.dtype)) * sign
        sy = (uy * K.constant(self.y_factor[1] - self.y_factor[0], x.dtype)
              + K.constant(self.y_factor[0], x.dtype)) * sign
        return transform_rows([1.0, sx, 0.0, sy, 1.0, 0.0, 0.0, 0.0], sx)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"x_factor": list(self.x_factor), "y_factor": list(self.y_factor)})
        return config
