"""Depthwise and separable convolution layers (channels-last): DepthwiseConv1D,
DepthwiseConv2D, SeparableConv1D, SeparableConv2D, with Keras 3's arguments, defaults and
weights.

A depthwise convolution is a grouped convolution with one group per input channel
(``kiln.ops.conv2d(..., groups=channels)``): Keras' kernel ``(kh, kw, channels,
depth_multiplier)`` reshaped to ``(kh, kw, 1, channels * depth_multiplier)`` puts output
channel ``c * depth_multiplier + m`` in group ``c``, which is Keras' output order. A separable
convolution is a depthwise convolution followed by a 1x1 (pointwise) convolution.
"""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln import activations, initializers, regularizers
from kiln.core import Node, format_shape
from kiln.layers._utils import (
    add_activity_loss,
    constraint_config,
    keras_args,
    normalize_data_format,
    normalize_padding,
    normalize_tuple,
    positive_int,
    set_constraints,
)
from kiln.layers.base import Layer, check_last_dim, check_rank


class _DepthwiseBase(Layer):
    """Shared body: argument checks, the depthwise convolution, bias, activation, config."""

    rank = 2
    separable = False

    def __init__(self, kernel_size: Any, strides: Any = 1, padding: str = "valid",
                 depth_multiplier: int = 1, data_format: str | None = None,
                 dilation_rate: Any = 1, activation: Any = None, use_bias: bool = True,
                 depthwise_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 depthwise_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, depthwise_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        cls = type(self).__name__
        set_constraints(self, depthwise_constraint=depthwise_constraint,
                        bias_constraint=bias_constraint)
        self.depth_multiplier = positive_int(cls, "depth_multiplier", depth_multiplier)
        self.kernel_size = normalize_tuple(cls, kernel_size, self.rank, "kernel_size")
        self.strides = normalize_tuple(cls, strides, self.rank, "strides")
        self.padding = normalize_padding(cls, padding)
        self.data_format = normalize_data_format(cls, data_format, channels_first=True)
        self.dilation_rate = normalize_tuple(cls, dilation_rate, self.rank, "dilation_rate")
        if any(s > 1 for s in self.strides) and any(d > 1 for d in self.dilation_rate):
            raise ValueError(f"{cls}: strides > 1 together with dilation_rate > 1 is not "
                             f"supported, received strides={self.strides}, "
                             f"dilation_rate={self.dilation_rate}")
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.depthwise_initializer = initializers.get(depthwise_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.depthwise_regularizer = regularizers.get(depthwise_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.activity_regularizer = regularizers.get(activity_regularizer)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, self.rank + 2)
            if self.built:
                check_last_dim(self, inputs, self._in_channels)

    def _channels(self, input_shape: Any) -> int:
        channels = input_shape[-1]
        if channels is None:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) needs a known number "
                             f"of channels (last axis), received input shape "
                             f"{format_shape(input_shape)}")
        self._in_channels = int(channels)
        return self._in_channels

    def _depthwise(self, inputs: Node, kernel: Node) -> Node:
        c, m = self._in_channels, self.depth_multiplier
        if self.rank == 1:
            w = K.reshape(kernel, (self.kernel_size[0], 1, c * m))
            return K.conv1d(inputs, w, strides=self.strides[0], padding=self.padding,
                            dilation_rate=self.dilation_rate[0], groups=c)
        w = K.reshape(kernel, self.kernel_size + (1, c * m))
        return K.conv2d(inputs, w, strides=self.strides, padding=self.padding,
                        dilation_rate=self.dilation_rate, groups=c)

    def _finish(self, out: Node) -> Node:
        if self.bias is not None:
            out = out + self.bias
        out = self.activation(out)
        add_activity_loss(self, self.activity_regularizer, out)
        return out

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "depth_multiplier": self.depth_multiplier,
            "data_format": self.data_format,
            "dilation_rate": self.dilation_rate,
            "activation": activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "depthwise_initializer": initializers.serialize(self.depthwise_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
            "depthwise_regularizer": regularizers.serialize(self.depthwise_regularizer),
            "bias_regularizer": regularizers.serialize(self.bias_regularizer),
            "activity_regularizer": regularizers.serialize(self.activity_regularizer),
            **constraint_config(self, "depthwise_constraint", "bias_constraint"),
        })
        return config


class DepthwiseConv2D(_DepthwiseBase):
    """Depthwise 2-D convolution: each input channel convolved with its own
    ``depth_multiplier`` filters, ``(batch, h, w, c)`` -> ``(batch, new_h, new_w, c *
    depth_multiplier)`` (output channel ``i * depth_multiplier + m`` from input channel ``i``).

    Weights: ``kernel`` ``(kh, kw, c, depth_multiplier)`` and ``bias`` ``(c *
    depth_multiplier,)``, as Keras 3 names and lays them out. Output sizes as in Conv2D.

    Args:
        kernel_size: int or pair.
        strides: int or pair (default 1).
        padding: "valid" (default) or "same".
        depth_multiplier: filters per input channel (default 1).
        data_format: None or "channels_last".
        dilation_rate: int or pair (default 1).
        activation, use_bias: as in Conv2D.
        depthwise_initializer: the kernel's initializer (default "glorot_uniform").
        bias_initializer, depthwise_regularizer, bias_regularizer, activity_regularizer:
            as in Conv2D.
        depthwise_constraint, bias_constraint: optional constraints (``kiln.constraints``).

    Example:
        >>> y = kiln.layers.DepthwiseConv2D(3, padding="same")(kiln.Input((8, 8, 16)))
    """

    rank = 2

    def __init__(self, kernel_size: Any, strides: Any = (1, 1), padding: str = "valid",
                 depth_multiplier: int = 1, data_format: str | None = None,
                 dilation_rate: Any = (1, 1), activation: Any = None, use_bias: bool = True,
                 depthwise_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 depthwise_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, depthwise_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any):
        super().__init__(**keras_args(locals()))

    def build(self, input_shape: Any) -> None:
        c = self._channels(input_shape)
        self.kernel = self.add_weight("kernel", self.kernel_size + (c, self.depth_multiplier),
                                      self.depthwise_initializer, self.depthwise_regularizer,
                                      constraint=self.depthwise_constraint)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight("bias", (c * self.depth_multiplier,),
                                        self.bias_initializer, self.bias_regularizer)
        self.built = True

    def call(self, inputs: Node) -> Node:
        return self._finish(self._depthwise(inputs, self.kernel))


class DepthwiseConv1D(DepthwiseConv2D):
    """Depthwise 1-D convolution over ``(batch, steps, c)`` -> ``(batch, new_steps, c *
    depth_multiplier)``; kernel ``(kernel_size, c, depth_multiplier)``. Arguments as
    DepthwiseConv2D, with ints for kernel_size, strides and dilation_rate.

    Example:
        >>> y = kiln.layers.DepthwiseConv1D(3, depth_multiplier=2)(kiln.Input((20, 4)))
    """

    rank = 1

    def __init__(self, kernel_size: Any, strides: Any = 1, padding: str = "valid",
                 depth_multiplier: int = 1, data_format: str | None = None,
                 dilation_rate: Any = 1, activation: Any = None, use_bias: bool = True,
                 depthwise_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 depthwise_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, depthwise_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any):
        super().__init__(**keras_args(locals()))


class SeparableConv2D(_DepthwiseBase):
    """Depthwise separable 2-D convolution: a depthwise convolution (``depth_multiplier``
    filters per input channel, with the strides and dilation) followed by a 1x1 convolution
    to ``filters`` channels, then bias and activation.

    Weights, as Keras 3: ``depthwise_kernel`` ``(kh, kw, c, depth_multiplier)``,
    ``pointwise_kernel`` ``(1, 1, c * depth_multiplier, filters)``, ``bias`` ``(filters,)``.

    Args:
        filters: number of output channels.
        kernel_size, strides, padding, data_format, dilation_rate, depth_multiplier,
        activation, use_bias: as in DepthwiseConv2D.
        depthwise_initializer, pointwise_initializer: default "glorot_uniform".
        bias_initializer: default "zeros".
        depthwise_regularizer, pointwise_regularizer, bias_regularizer,
        activity_regularizer: optional penalties.
        depthwise_constraint, pointwise_constraint, bias_constraint: optional constraints.

    Example:
        >>> y = kiln.layers.SeparableConv2D(32, 3)(kiln.Input((16, 16, 8)))  # (None,14,14,32)
    """

    rank = 2

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1),
                 padding: str = "valid", data_format: str | None = None,
                 dilation_rate: Any = (1, 1), depth_multiplier: int = 1, activation: Any = None,
                 use_bias: bool = True, depthwise_initializer: Any = "glorot_uniform",
                 pointwise_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 depthwise_regularizer: Any = None, pointwise_regularizer: Any = None,
                 bias_regularizer: Any = None, activity_regularizer: Any = None,
                 depthwise_constraint: Any = None, pointwise_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any):
        super().__init__(kernel_size, strides=strides, padding=padding,
                         depth_multiplier=depth_multiplier, data_format=data_format,
                         dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
                         depthwise_initializer=depthwise_initializer,
                         bias_initializer=bias_initializer,
                         depthwise_regularizer=depthwise_regularizer,
                         bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer,
                         depthwise_constraint=depthwise_constraint,
                         bias_constraint=bias_constraint, **kwargs)
        cls = type(self).__name__
        set_constraints(self, pointwise_constraint=pointwise_constraint)
        self.filters = positive_int(cls, "filters", filters)
        self.pointwise_initializer = initializers.get(pointwise_initializer)
        self.pointwise_regularizer = regularizers.get(pointwise_regularizer)

    def build(self, input_shape: Any) -> None:
        c = self._channels(input_shape)
        m = self.depth_multiplier
        self.depthwise_kernel = self.add_weight(
            "depthwise_kernel", self.kernel_size + (c, m), self.depthwise_initializer,
            self.depthwise_regularizer)
        self.pointwise_kernel = self.add_weight(
            "pointwise_kernel", (1,) * self.rank + (c * m, self.filters),
            self.pointwise_initializer, self.pointwise_regularizer)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.filters,), self.bias_initializer,
                                        self.bias_regularizer)
        self.built = True

    def call(self, inputs: Node) -> Node:
        y = self._depthwise(inputs, self.depthwise_kernel)
        if self.rank == 1:
            y = K.conv1d(y, self.pointwise_kernel)
        else:
            y = K.conv2d(y, self.pointwise_kernel)
        return self._finish(y)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "filters": self.filters,
            "pointwise_initializer": initializers.serialize(self.pointwise_initializer),
            "pointwise_regularizer": regularizers.serialize(self.pointwise_regularizer),
            **constraint_config(self, "pointwise_constraint"),
        })
        return config


class SeparableConv1D(SeparableConv2D):
    """Depthwise separable 1-D convolution over ``(batch, steps, c)``; weights
    ``depthwise_kernel`` ``(kernel_size, c, depth_multiplier)``, ``pointwise_kernel`` ``(1, c *
    depth_multiplier, filters)``, ``bias``. Arguments as SeparableConv2D, with ints.

    Example:
        >>> y = kiln.layers.SeparableConv1D(8, 3)(kiln.Input((20, 4)))   # (None, 18, 8)
    """

    rank = 1

    def __init__(self, filters: int, kernel_size: Any, strides: Any = 1,
                 padding: str = "valid", data_format: str | None = None,
                 dilation_rate: Any = 1, depth_multiplier: int = 1, activation: Any = None,
                 use_bias: bool = True, depthwise_initializer: Any = "glorot_uniform",
                 pointwise_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 depthwise_regularizer: Any = None, pointwise_regularizer: Any = None,
                 bias_regularizer: Any = None, activity_regularizer: Any = None,
                 depthwise_constraint: Any = None, pointwise_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any):
        super().__init__(**keras_args(locals()))
