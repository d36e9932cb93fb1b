"""3-D convolution layers (channels-last): Conv3D and Conv3DTranspose, as Keras'.

Computed with kiln's 2-D convolution kernels (``kiln/layers/_ops3d.py`` says how), so their
gradients are the 2-D ops' gradients; depth, height and width must be known.
"""

from __future__ import annotations

from typing import Any

from kiln.core import Node
from kiln.layers._ops3d import conv3d, conv3d_transpose
from kiln.layers._utils import keras_args
from kiln.layers.convolutional import _Conv, transpose_output_padding


class Conv3D(_Conv):
    """3-D convolution over ``(batch, depth, height, width, channels)``.

    Output size per spatial axis: ``(n - k_eff) // stride + 1`` for "valid" and
    ``ceil(n / stride)`` for "same" (TensorFlow padding), ``k_eff = (k - 1) * dilation + 1``.
    Kernel: ``(kd, kh, kw, channels / groups, filters)`` (Keras' layout).

    Args:
        filters: number of output channels.
        kernel_size: int or triple.
        strides: int or triple (default 1).
        padding: "valid" (default) or "same".
        data_format: None (kiln.config.image_data_format()), "channels_last" or
            "channels_first" (kiln/layers/channels_first.py).
        dilation_rate: int or triple (default 1).
        groups: grouped convolution (default 1), as in Conv2D.
        activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint: as in
        Conv2D.

    Example:
        >>> kiln.layers.Conv3D(8, 3)(kiln.Input((10, 10, 10, 1))).shape
        (None, 8, 8, 8, 8)
    """

    rank = 3

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1, 1),
                 padding: str = "valid", data_format: str | None = None,
                 dilation_rate: Any = (1, 1, 1), groups: int = 1, activation: Any = None,
                 use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any):
        super().__init__(**keras_args(locals()))

    def convolution_op(self, inputs: Node, kernel: Any) -> Node:
        return conv3d(f"Layer '{self.name}' (Conv3D)", inputs, kernel, self.strides,
                      self.padding, self.dilation_rate, self.groups)


class Conv3DTranspose(_Conv):
    """Transposed 3-D convolution (the gradient of Conv3D with respect to its input), as
    Keras' Conv3DTranspose.

    Output size per spatial axis without ``output_padding``: ``n * stride + max(k_eff -
    stride, 0)`` for "valid" and ``n * stride`` for "same"; with it: ``(n - 1) * stride +
    k_eff - 2 * pad + output_padding`` (``pad = k_eff // 2`` for "same", 0 for "valid").
    Kernel: ``(kd, kh, kw, filters, channels)`` (Keras' layout).

    Args:
        filters: number of output channels.
        kernel_size: int or triple.
        strides: int or triple (default 1).
        padding: "valid" (default) or "same".
        data_format: None or "channels_last".
        output_padding: None (default), an int or a triple, each smaller than the stride.
        dilation_rate: int or triple (default 1).
        activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint: as in
        Conv2D.

    Example:
        >>> kiln.layers.Conv3DTranspose(4, 3, strides=2, padding="same")(
        ...     kiln.Input((4, 4, 4, 8))).shape
        (None, 8, 8, 8, 4)
    """

    rank = 3
    transpose = True

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1, 1),
                 padding: str = "valid", data_format: str | None = None,
                 output_padding: Any = None, dilation_rate: Any = (1, 1, 1),
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
        self.output_padding = transpose_output_padding("Conv3DTranspose", output_padding, 3,
                                                       self.strides)

    def _kernel_shape(self, channels: int) -> tuple[int, ...]:
        return self.kernel_size + (self.filters, channels)

    def _convolve(self, inputs: Node) -> Node:
        return conv3d_transpose(f"Layer '{self.name}' (Conv3DTranspose)", inputs, self.kernel,
                                self.strides, self.padding, self.output_padding,
                                self.dilation_rate)

    def get_config(self) -> dict:
        config = super().get_config()
        config.pop("groups", None)
        config["output_padding"] = self.output_padding
        return config


Convolution3D, Convolution3DTranspose = Conv3D, Conv3DTranspose
