"""Convolution layers (channels-last): Conv1D, Conv2D (both with ``groups``), Conv1DTranspose,
Conv2DTranspose. Depthwise and separable convolutions: ``convolutional_depthwise.py``."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln import activations, initializers, regularizers
from kiln.core import Node, format_shape
from kiln.layers._utils import (
    add_activity_loss,
    constraint_config,
    drop_keras_extras,
    keras_args,
    normalize_data_format,
    normalize_padding,
    normalize_tuple,
    positive_int,
    set_constraints,
)
from kiln.layers.base import Layer, check_last_dim, check_rank


class _Conv(Layer):
    """Shared body of the convolution layers (``rank`` spatial dimensions)."""

    rank = 2
    paddings: tuple[str, ...] = ("valid", "same")
    transpose = False

    def __init__(self, filters: int, kernel_size: Any, strides: Any = 1, padding: str = "valid",
                 data_format: str | None = None, dilation_rate: Any = 1, groups: int = 1,
                 activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any):
        drop_keras_extras(type(self).__name__, kwargs)
        super().__init__(**kwargs)
        cls = type(self).__name__
        positive_int(cls, "filters", filters)
        positive_int(cls, "groups", groups)
        if filters % groups:
            raise ValueError(f"{cls}: the number of filters must be divisible by the number of "
                             f"groups, received filters={filters}, groups={groups}")
        set_constraints(self, kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
        self.filters = int(filters)
        self.kernel_size = normalize_tuple(cls, kernel_size, self.rank, "kernel_size")
        self.strides = normalize_tuple(cls, strides, self.rank, "strides")
        self.padding = normalize_padding(cls, padding, self.paddings)
        self.data_format = normalize_data_format(cls, data_format, channels_first=True)
        self.dilation_rate = normalize_tuple(cls, dilation_rate, self.rank, "dilation_rate")
        if any(s > 1 for s in self.strides) and any(d > 1 for d in self.dilation_rate):
            raise ValueError(f"{cls}: strides > 1 together with dilation_rate > 1 is not "
                             f"supported, received strides={self.strides}, "
                             f"dilation_rate={self.dilation_rate}")
        self.groups = int(groups)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.activity_regularizer = regularizers.get(activity_regularizer)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            check_rank(self, inputs, self.rank + 2)
            if self.built:
                check_last_dim(self, inputs, self._in_channels)

    def _kernel_shape(self, channels: int) -> tuple[int, ...]:
        return self.kernel_size + (channels // self.groups, self.filters)

    def build(self, input_shape: Any) -> None:
        channels = input_shape[-1]
        if channels is None:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) needs a known number "
                             f"of channels (last axis), received input shape "
                             f"{format_shape(input_shape)}")
        if channels % self.groups:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}): the number of input "
                             f"channels must be divisible by the number of groups, received "
                             f"groups={self.groups} and input shape "
                             f"{format_shape(input_shape)}")
        self._in_channels = int(channels)
        self.kernel = self.add_weight("kernel", self._kernel_shape(self._in_channels),
                                      self.kernel_initializer, self.kernel_regularizer)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.filters,), self.bias_initializer,
                                        self.bias_regularizer)
        self.built = True

    def convolution_op(self, inputs: Node, kernel: Any) -> Node:
        """The convolution of ``inputs`` with ``kernel`` (no bias, no activation): Keras 3's
        ``BaseConv.convolution_op``. ``call`` runs ``convolution_op(inputs, self.kernel)``, so a
        subclass customizes the convolution by overriding it (a standardized kernel, say), or
        calls it from its own ``call`` with a kernel of the layer's kernel shape."""
        raise NotImplementedError(f"{type(self).__name__} has no convolution_op (Keras' "
                                  "transposed convolutions have none either)")

    def _convolve(self, inputs: Node) -> Node:
        return self.convolution_op(inputs, self.kernel)

    def call(self, inputs: Node) -> Node:
        out = self._convolve(inputs)
        if self.bias is not None:
            out = out + self.bias
        out = self.activation(out)
        add_activity_loss(self, self.activity_regularizer, out)
        return out

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "data_format": self.data_format,
            "dilation_rate": self.dilation_rate,
            "groups": self.groups,
            "activation": activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": initializers.serialize(self.kernel_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
            "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": regularizers.serialize(self.bias_regularizer),
            "activity_regularizer": regularizers.serialize(self.activity_regularizer),
            **constraint_config(self, "kernel_constraint", "bias_constraint"),
        })
        return config


class Conv1D(_Conv):
    """1-D convolution over ``(batch, steps, channels)``.

    Output: ``(batch, new_steps, filters)`` with ``new_steps = (steps - k_eff) // stride + 1``
    for "valid", ``ceil(steps / stride)`` for "same", and ``steps`` for "causal" (stride 1),
    where ``k_eff = (kernel_size - 1) * dilation_rate + 1``. Kernel: ``(kernel_size,
    channels / groups, filters)``.

    Args:
        filters: number of output channels.
        kernel_size: int (or 1-tuple).
        strides: int (default 1).
        padding: "valid" (default), "same" or "causal" (left padding, for sequence models).
        data_format: None (kiln.config.image_data_format()), "channels_last" or
            "channels_first" (kiln/layers/channels_first.py).
        dilation_rate: int (default 1).
        groups: grouped convolution (default 1), as in Conv2D.
        activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer: as in Dense.

    Example:
        >>> y = kiln.layers.Conv1D(32, 3, padding="causal")(kiln.Input((100, 8)))
    """

    rank = 1
    paddings = ("valid", "same", "causal")

    def convolution_op(self, inputs: Node, kernel: Any) -> Node:
        return K.conv1d(inputs, kernel, strides=self.strides[0], padding=self.padding,
                        dilation_rate=self.dilation_rate[0], groups=self.groups)


class Conv2D(_Conv):
    """2-D convolution over ``(batch, height, width, channels)`` (cross-correlation, like
    Keras).

    Output: ``(batch, new_h, new_w, filters)`` with, per spatial axis, ``(n - k_eff) // stride
    + 1`` for "valid" and ``ceil(n / stride)`` for "same" (TensorFlow padding: the odd pixel
    goes bottom/right), where ``k_eff = (k - 1) * dilation + 1``. Kernel: ``(kh, kw,
    channels, filters)``; parameters ``kh * kw * channels * filters + filters``.

    Args:
        filters: number of output channels.
        kernel_size: int or pair.
        strides: int or pair (default 1).
        padding: "valid" (default) or "same".
        data_format: None (kiln.config.image_data_format()), "channels_last" or
            "channels_first" (kiln/layers/channels_first.py).
        dilation_rate: int or pair (default 1).
        groups: grouped convolution (default 1): the input channels and the filters split
            into ``groups`` blocks, filter block g sees only input block g; kernel ``(kh, kw,
            channels / groups, filters)``. Both counts must be divisible by it.
        activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer: as in Dense.

    Example:
        >>> y = kiln.layers.Conv2D(32, 3, activation="relu")(kiln.Input((28, 28, 1)))
        >>> y.shape
        (None, 26, 26, 32)
    """

    rank = 2

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1),
                 padding: str = "valid", data_format: str | None = None,
                 dilation_rate: Any = (1, 1), groups: int = 1, activation: Any = None,
                 use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any):
        super().__init__(**keras_args(locals()))

    def convolution_op(self, inputs: Node, kernel: Any) -> Node:
        return K.conv2d(inputs, kernel, strides=self.strides, padding=self.padding,
                        dilation_rate=self.dilation_rate, groups=self.groups)


class Conv2DTranspose(_Conv):
    """Transposed 2-D convolution (the gradient of Conv2D with respect to its input), as
    Keras' Conv2DTranspose.

    Output size per spatial axis, without ``output_padding``: ``n * stride + max(k_eff -
    stride, 0)`` for "valid" and ``n * stride`` for "same"; with it: ``(n - 1) * stride + k_eff
    - 2 * pad + output_padding`` (``pad = k_eff // 2`` for "same", 0 for "valid"). Kernel:
    ``(kh, kw, filters, channels)`` (Keras' layout). The input's height and width must be
    known.

    Args:
        filters: number of output channels.
        kernel_size: int or pair.
        strides: int or pair (default 1).
        padding: "valid" (default) or "same".
        output_padding: None (default), an int or a pair, each smaller than the stride.
        data_format: None or "channels_last".
        dilation_rate: int or pair (default 1).
        activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer: as in Dense.

    Example:
        >>> y = kiln.layers.Conv2DTranspose(16, 3, strides=2, padding="same")(
        ...     kiln.Input((7, 7, 32)))         # (None, 14, 14, 16)
    """

    rank = 2
    transpose = True

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1),
                 padding: str = "valid", output_padding: Any = None,
                 data_format: str | None = None, dilation_rate: Any = (1, 1),
                 activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any):
        kwargs.pop("groups", None)
        super().__init__(filters, kernel_size, strides=strides, padding=padding,
                         data_format=data_format, dilation_rate=dilation_rate,
                         activation=activation, use_bias=use_bias,
                         kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                         **kwargs)
        self.output_padding = transpose_output_padding("Conv2DTranspose", output_padding, 2,
                                                       self.strides)

    def _kernel_shape(self, channels: int) -> tuple[int, ...]:
        return self.kernel_size + (self.filters, channels)

    def _convolve(self, inputs: Node) -> Node:
        if inputs.shape[1] is None or inputs.shape[2] is None:
            raise ValueError(f"Layer '{self.name}' (Conv2DTranspose) needs a known height and "
                             f"width, received input shape {format_shape(inputs.shape)}")
        return K.conv2d_transpose(inputs, self.kernel, strides=self.strides,
                                  padding=self.padding, output_padding=self.output_padding,
                                  dilation_rate=self.dilation_rate)

    def get_config(self) -> dict:
        config = super().get_config()
        config.pop("groups", None)
        config["output_padding"] = self.output_padding
        return config


class Conv1DTranspose(_Conv):
    """Transposed 1-D convolution over ``(batch, steps, channels)``, as Keras'
    Conv1DTranspose (computed as a Conv2DTranspose over a height of 1).

    Output length without ``output_padding``: ``n * stride + max(k_eff - stride, 0)`` for
    "valid" and ``n * stride`` for "same"; with it: ``(n - 1) * stride + k_eff - 2 * pad +
    output_padding`` (``pad = k_eff // 2`` for "same", 0 for "valid"). Kernel:
    ``(kernel_size, filters, channels)`` (Keras' layout). The number of steps must be known.

    Args:
        filters: number of output channels.
        kernel_size: int (or 1-tuple).
        strides: int (default 1).
        padding: "valid" (default) or "same".
        output_padding: None (default) or an int smaller than the stride.
        data_format: None or "channels_last".
        dilation_rate: int (default 1).
        activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer: as in Dense.

    Example:
        >>> y = kiln.layers.Conv1DTranspose(8, 3, strides=2, padding="same")(
        ...     kiln.Input((10, 4)))            # (None, 20, 8)
    """

    rank = 1
    transpose = True

    def __init__(self, filters: int, kernel_size: Any, strides: Any = 1, padding: str = "valid",
                 output_padding: Any = None, data_format: str | None = None,
                 dilation_rate: Any = 1, activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any):
        kwargs.pop("groups", None)
        super().__init__(filters, kernel_size, strides=strides, padding=padding,
                         data_format=data_format, dilation_rate=dilation_rate,
                         activation=activation, use_bias=use_bias,
                         kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                         **kwargs)
        self.output_padding = None if output_padding is None else normalize_tuple(
            "Conv1DTranspose", output_padding, 1, "output_padding", allow_zero=True)
        if self.output_padding is not None and self.output_padding[0] >= self.strides[0]:
            raise ValueError(f"Conv1DTranspose: output_padding {self.output_padding} must be "
                             f"smaller than the strides {self.strides}")

    def _kernel_shape(self, channels: int) -> tuple[int, ...]:
        return self.kernel_size + (self.filters, channels)

    def _convolve(self, inputs: Node) -> Node:
        if inputs.shape[1] is None:
            raise ValueError(f"Layer '{self.name}' (Conv1DTranspose) needs a known number of "
                             f"steps, received input shape {format_shape(inputs.shape)}")
        opad = None if self.output_padding is None else (0, self.output_padding[0])
        y = K.conv2d_transpose(K.expand_dims(inputs, 1), K.expand_dims(self.kernel, 0),
                               strides=(1, self.strides[0]), padding=self.padding,
                               output_padding=opad, dilation_rate=(1, self.dilation_rate[0]))
        return K.squeeze(y, 1)

    def get_config(self) -> dict:
        config = super().get_config()
        config.pop("groups", None)
        config["output_padding"] = self.output_padding
        return config


def transpose_output_padding(layer: str, value: Any, rank: int,
                             strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """A transposed convolution's ``output_padding`` (None, or one int per spatial axis, each
    smaller than its stride), or ValueError naming the layer and both values."""
    if value is None:
        return None
    padding = normalize_tuple(layer, value, rank, "output_padding", allow_zero=True)
    if any(o >= s for o, s in zip(padding, strides)):
        raise ValueError(f"{layer}: output_padding {padding} must be smaller than the strides "
                         f"{strides}")
    return padding

