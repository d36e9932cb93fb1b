"""Pooling layers (channels-last): Max/AveragePooling1D/2D and the global poolings."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node
from kiln.layers._utils import (
    check_mask,
    normalize_data_format,
    normalize_padding,
    normalize_tuple,
)
from kiln.layers.base import Layer, check_rank


class _Pooling(Layer):
    rank = 2
    op: Any = None

    def __init__(self, pool_size: Any = 2, strides: Any = None, padding: str = "valid",
                 data_format: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        cls = type(self).__name__
        self.pool_size = normalize_tuple(cls, pool_size, self.rank, "pool_size")
        self.strides = self.pool_size if strides is None else normalize_tuple(
            cls, strides, self.rank, "strides")
        self.padding = normalize_padding(cls, padding)
        self.data_format = normalize_data_format(cls, data_format, channels_first=True)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, self.rank + 2)

    def call(self, inputs: Node) -> Node:
        fn = type(self).op
        if self.rank == 1:
            return fn(inputs, self.pool_size[0], self.strides[0], self.padding)
        return fn(inputs, self.pool_size, self.strides, self.padding)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"pool_size": self.pool_size, "padding": self.padding,
                       "strides": self.strides, "data_format": self.data_format})
        return config


_SHAPE_DOC = """
    Output length per spatial axis: ``(n - pool) // stride + 1`` for "valid",
    ``ceil(n / stride)`` for "same" (TensorFlow padding).

    Args:
        pool_size: int{pair} (default 2).
        strides: int{pair}; default ``pool_size``.
        padding: "valid" (default) or "same".
        data_format: None (kiln.config.image_data_format()), "channels_last" or
            "channels_first" (kiln/layers/channels_first.py).
"""


class MaxPooling1D(_Pooling):
    __doc__ = ("Max pooling over ``(batch, steps, channels)``.\n"
               + _SHAPE_DOC.format(pair=""))
    rank = 1
    op = staticmethod(K.max_pool1d)

    def __init__(self, pool_size: Any = 2, strides: Any = None, padding: str = "valid",
                 data_format: str | None = None, name: str | None = None, **kwargs: Any):
        super().__init__(pool_size, strides, padding, data_format, name=name, **kwargs)


class AveragePooling1D(_Pooling):
    __doc__ = ("Average pooling over ``(batch, steps, channels)``; with \"same\" the mean is "
               "over the real (unpadded) elements of each window.\n"
               + _SHAPE_DOC.format(pair=""))
    rank = 1
    op = staticmethod(K.avg_pool1d)

    def __init__(self, pool_size: Any, strides: Any = None, padding: str = "valid",
                 data_format: str | None = None, name: str | None = None, **kwargs: Any):
        super().__init__(pool_size, strides, padding, data_format, name=name, **kwargs)


class MaxPooling2D(_Pooling):
    __doc__ = ("Max pooling over ``(batch, height, width, channels)``.\n"
               + _SHAPE_DOC.format(pair=" or pair"))
    rank = 2
    op = staticmethod(K.max_pool2d)

    def __init__(self, pool_size: Any = (2, 2), strides: Any = None, padding: str = "valid",
                 data_format: str | None = None, name: str | None = None, **kwargs: Any):
        super().__init__(pool_size, strides, padding, data_format, name=name, **kwargs)


class AveragePooling2D(_Pooling):
    __doc__ = ("Average pooling over ``(batch, height, width, channels)``; with \"same\" the "
               "mean is over the real (unpadded) elements of each window.\n"
               + _SHAPE_DOC.format(pair=" or pair"))
    rank = 2
    op = staticmethod(K.avg_pool2d)

    def __init__(self, pool_size: Any, strides: Any = None, padding: str = "valid",
                 data_format: str | None = None, name: str | None = None, **kwargs: Any):
        super().__init__(pool_size, strides, padding, data_format, name=name, **kwargs)


class _GlobalPooling(Layer):
    rank = 2
    reduce: Any = None

    def __init__(self, data_format: str | None = None, keepdims: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.data_format = normalize_data_format(type(self).__name__, data_format,
                                                 channels_first=True)
        self.keepdims = bool(keepdims)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, self.rank + 2)

    def call(self, inputs: Node) -> Node:
        axes = tuple(range(1, self.rank + 1))
        return type(self).reduce(inputs, axis=axes, keepdims=self.keepdims)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"data_format": self.data_format, "keepdims": self.keepdims})
        return config


_GLOBAL_DOC = """
    Output: ``(batch, channels)``, or with ``keepdims=True`` ``(batch, {ones}channels)``.

    Args:
        data_format: None or "channels_last".
        keepdims: keep the reduced spatial axes with size 1 (default False).
"""


class GlobalAveragePooling1D(_GlobalPooling):
    __doc__ = ("Mean over the steps of ``(batch, steps, channels)``; with a mask (from "
               "``Embedding(mask_zero=True)``, ``Masking`` ...) the mean over the unmasked "
               "steps only.\n" + _GLOBAL_DOC.format(ones="1, "))
    rank = 1
    reduce = staticmethod(K.mean)
    supports_masking = True

    def call(self, inputs: Node, mask: Node | None = None) -> Node:
        if mask is None:
            return super().call(inputs)
        check_mask(self, inputs, mask)
        w = K.expand_dims(K.cast(mask, inputs.dtype), -1)
        total = K.sum(inputs * w, axis=1, keepdims=self.keepdims)
        count = K.sum(w, axis=1, keepdims=self.keepdims)
        return total / K.maximum(count, K.constant(1.0, inputs.dtype))

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        return None


class GlobalMaxPooling1D(_GlobalPooling):
    __doc__ = ("Maximum over the steps of ``(batch, steps, channels)``.\n"
               + _GLOBAL_DOC.format(ones="1, "))
    rank = 1
    reduce = staticmethod(K.max)


class GlobalAveragePooling2D(_GlobalPooling):
    __doc__ = ("Mean over height and width of ``(batch, height, width, channels)``.\n"
               + _GLOBAL_DOC.format(ones="1, 1, "))
    rank = 2
    reduce = staticmethod(K.mean)


class GlobalMaxPooling2D(_GlobalPooling):
    __doc__ = ("Maximum over height and width of ``(batch, height, width, channels)``.\n"
               + _GLOBAL_DOC.format(ones="1, 1, "))
    rank = 2
    reduce = staticmethod(K.max)


# Keras' aliases
MaxPool1D, MaxPool2D = MaxPooling1D, MaxPooling2D
AvgPool1D, AvgPool2D = AveragePooling1D, AveragePooling2D
GlobalAvgPool1D, GlobalAvgPool2D = GlobalAveragePooling1D, GlobalAveragePooling2D
GlobalMaxPool1D, GlobalMaxPool2D = GlobalMaxPooling1D, GlobalMaxPooling2D
