"""3-D pooling (Max/AveragePooling3D, GlobalAverage/GlobalMaxPooling3D) and adaptive pooling
(AdaptiveAverage/AdaptiveMaxPooling1D/2D/3D), channels-last, as Keras'."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.layers._ops3d import adaptive_bounds, pool3d
from kiln.layers._utils import check_static, normalize_data_format
from kiln.layers.base import Layer, check_rank
from kiln.layers.pooling import _GLOBAL_DOC, _SHAPE_DOC, _GlobalPooling, _Pooling


class MaxPooling3D(_Pooling):
    __doc__ = ("Max pooling over ``(batch, depth, height, width, channels)`` (depth, height and "
               "width known).\n" + _SHAPE_DOC.format(pair=" or triple"))
    rank = 3

    def __init__(self, pool_size: Any = (2, 2, 2), strides: Any = None, padding: str = "valid",
                 data_format: str | None = None, name: str | None = None, **kwargs: Any):
        super().__init__(pool_size, strides, padding, data_format, name=name, **kwargs)

    def call(self, inputs: Node) -> Node:
        return pool3d(f"Layer '{self.name}' ({type(self).__name__})", "max", inputs,
                      self.pool_size, self.strides, self.padding)


class AveragePooling3D(_Pooling):
    __doc__ = ("Average pooling over ``(batch, depth, height, width, channels)``; with "
               "\"same\" the mean is over the real (unpadded) elements of each window.\n"
               + _SHAPE_DOC.format(pair=" or triple"))
    rank = 3

    def __init__(self, pool_size: Any, strides: Any = None, padding: str = "valid",
                 data_format: str | None = None, name: str | None = None, **kwargs: Any):
        super().__init__(pool_size, strides, padding, data_format, name=name, **kwargs)

    def call(self, inputs: Node) -> Node:
        return pool3d(f"Layer '{self.name}' ({type(self).__name__})", "avg", inputs,
                      self.pool_size, self.strides, self.padding)


class GlobalAveragePooling3D(_GlobalPooling):
    __doc__ = ("Mean over depth, height and width of ``(batch, d, h, w, channels)``.\n"
               + _GLOBAL_DOC.format(ones="1, 1, 1, "))
    rank = 3
    reduce = staticmethod(K.mean)


class GlobalMaxPooling3D(_GlobalPooling):
    __doc__ = ("Maximum over depth, height and width of ``(batch, d, h, w, channels)``.\n"
               + _GLOBAL_DOC.format(ones="1, 1, 1, "))
    rank = 3
    reduce = staticmethod(K.max)


class _AdaptivePooling(Layer):
    """Pools to a fixed ``output_size``: output index ``i`` of an axis of length ``n`` covers
    the inputs ``[floor(i n / out), ceil((i + 1) n / out))`` (Keras' and PyTorch's windows)."""

    rank = 2
    reduce: Any = None

    def __init__(self, output_size: Any, data_format: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        cls = type(self).__name__
        if isinstance(output_size, int | np.integer) and not isinstance(output_size, bool):
            sizes = (int(output_size),) * self.rank
        elif isinstance(output_size, list | tuple) and len(output_size) == self.rank:
            sizes = tuple(int(v) for v in output_size)
        else:
            raise TypeError(f"{cls}: `output_size` must be an integer or a tuple of "
                            f"{self.rank} integers, received {output_size!r}")
        if any(v < 1 for v in sizes):
            raise ValueError(f"{cls}: `output_size` must be positive, received {output_size!r}")
        self.output_size = sizes
        self.data_format = normalize_data_format(cls, data_format, channels_first=True)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, self.rank + 2)

    def call(self, inputs: Node) -> Node:
        check_static(self, inputs, range(1, self.rank + 1), "spatial size")
        x = inputs
        for axis, out in enumerate(self.output_size, start=1):
            n = int(x.shape[axis])
            parts = []
            for lo, hi in adaptive_bounds(n, out):
                spec = [(None, None, 1)] * x.ndim
                spec[axis] = (lo, hi, 1)
                parts.append(type(self).reduce(K.slice(x, spec, None), axis=axis, keepdims=True))
            x = K.concatenate(parts, axis=axis) if len(parts) > 1 else parts[0]
        return x

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"output_size": self.output_size, "data_format": self.data_format})
        return config


_ADAPTIVE_DOC = """{what} pooling to a fixed size over ``(batch, {axes}, channels)``
    (Keras' ``Adaptive{name}Pooling{r}D``): output index ``i`` of an axis of length ``n`` pools
    the inputs ``[floor(i n / out), ceil((i + 1) n / out))``; the spatial size must be known.

    Args:
        output_size: int or tuple of {r} ints, the output's spatial size.
        data_format: None or "channels_last".
"""


def _adaptive(name: str, rank: int, kind: str) -> type:
    axes = {1: "steps", 2: "height, width", 3: "depth, height, width"}[rank]
    what = "Average" if kind == "Average" else "Max"
    doc = _ADAPTIVE_DOC.format(what=what, axes=axes, name=kind, r=rank)
    return type(name, (_AdaptivePooling,), {
        "__doc__": doc, "rank": rank, "__module__": __name__,
        "reduce": staticmethod(K.mean if kind == "Average" else K.max)})


AdaptiveAveragePooling1D = _adaptive("AdaptiveAveragePooling1D", 1, "Average")
AdaptiveAveragePooling2D = _adaptive("AdaptiveAveragePooling2D", 2, "Average")
AdaptiveAveragePooling3D = _adaptive("AdaptiveAveragePooling3D", 3, "Average")
AdaptiveMaxPooling1D = _adaptive("AdaptiveMaxPooling1D", 1, "Max")
AdaptiveMaxPooling2D = _adaptive("AdaptiveMaxPooling2D", 2, "Max")
AdaptiveMaxPooling3D = _adaptive("AdaptiveMaxPooling3D", 3, "Max")

MaxPool3D, AvgPool3D = MaxPooling3D, AveragePooling3D
GlobalAvgPool3D, GlobalMaxPool3D = GlobalAveragePooling3D, GlobalMaxPooling3D
