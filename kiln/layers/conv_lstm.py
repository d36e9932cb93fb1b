"""Convolutional LSTMs: ConvLSTM1D, ConvLSTM2D, ConvLSTM3D (Keras 3 arguments, defaults and
weights). An LSTM whose input and recurrent transforms are convolutions; the loop is one
``kiln.ops.scan`` over the time axis, as the other recurrent layers."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln import activations, initializers, regularizers
from kiln.core import Node, format_shape
from kiln.layers._ops3d import conv3d
from kiln.layers._utils import (
    add_activity_loss,
    constraint_config,
    normalize_data_format,
    normalize_padding,
    normalize_tuple,
    positive_int,
    set_constraints,
)
from kiln.layers.base import Layer


def _conv(rank: int, x: Node, w: Any, strides: tuple, padding: str, dilation: tuple) -> Node:
    if rank == 1:
        return K.conv1d(x, w, strides=strides[0], padding=padding, dilation_rate=dilation[0])
    if rank == 2:
        return K.conv2d(x, w, strides=strides, padding=padding, dilation_rate=dilation)
    return conv3d("ConvLSTM3D", x, w, strides, padding, dilation)


class ConvLSTMCell(Layer):
    """One step of a ConvLSTM (its weights: ``kernel (k..., channels, 4 filters)``,
    ``recurrent_kernel (k..., filters, 4 filters)``, ``bias (4 filters,)``; gates in the order
    input, forget, cell, output, as Keras)."""

    def __init__(self, rank: int, filters: int, kernel_size: Any, strides: Any, padding: str,
                 dilation_rate: Any, activation: Any, recurrent_activation: Any,
                 use_bias: bool, kernel_initializer: Any, recurrent_initializer: Any,
                 bias_initializer: Any, unit_forget_bias: bool, kernel_regularizer: Any,
                 recurrent_regularizer: Any, bias_regularizer: Any, kernel_constraint: Any,
                 recurrent_constraint: Any, bias_constraint: Any, **kwargs: Any):
        super().__init__(**kwargs)
        who = f"ConvLSTM{rank}D"
        self.rank = rank
        self.filters = positive_int(who, "filters", filters)
        self.kernel_size = normalize_tuple(who, kernel_size, rank, "kernel_size")
        self.strides = normalize_tuple(who, strides, rank, "strides")
        self.padding = normalize_padding(who, padding)
        self.dilation_rate = normalize_tuple(who, dilation_rate, rank, "dilation_rate")
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            raise ValueError(f"{who}: specifying `strides > 1` is not compatible with "
                             f"`dilation_rate > 1`. Received: strides={self.strides} and "
                             f"dilation_rate={self.dilation_rate}")
        self.activation = activations.get(activation)
        self.recurrent_activation = activations.get(recurrent_activation)
        self.use_bias, self.unit_forget_bias = bool(use_bias), bool(unit_forget_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.recurrent_regularizer = regularizers.get(recurrent_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        set_constraints(self, kernel_constraint=kernel_constraint,
                        recurrent_constraint=recurrent_constraint,
                        bias_constraint=bias_constraint)

    def build(self, input_shape: Any) -> None:
        channels = input_shape[-1]
        f = self.filters
        self.kernel = self.add_weight("kernel", self.kernel_size + (channels, 4 * f),
                                      self.kernel_initializer, self.kernel_regularizer)
        self.recurrent_kernel = self.add_weight("recurrent_kernel", self.kernel_size + (f, 4 * f),
                                                self.recurrent_initializer,
                                                self.recurrent_regularizer)
        self.bias = None
        if self.use_bias:
            init = self.bias_initializer
            if self.unit_forget_bias:
                base = self.bias_initializer

                def init(shape: Any, dtype: Any = None) -> np.ndarray:
                    parts = [np.asarray(base((f,), dtype)), np.ones((f,), dtype),
                             np.asarray(base((2 * f,), dtype))]
                    return np.concatenate(parts).astype(dtype)
            self.bias = self.add_weight("bias", (4 * f,), init, self.bias_regularizer)
        self.built = True

    def input_part(self, x: Node) -> Node:
        """The input convolution of one step, all four gates ``(batch, out..., 4 filters)``."""
        y = _conv(self.rank, x, self.kernel, self.strides, self.padding, self.dilation_rate)
        return y + self.bias if self.bias is not None else y

    def call(self, x: Node, states: Any, training: Any = None) -> tuple[Node, list[Node]]:
        h, c = states
        z = self.input_part(x) + _conv(self.rank, h, self.recurrent_kernel, (1,) * self.rank,
                                       "same", (1,) * self.rank)
        zi, zf, zc, zo = K.split(z, 4, axis=-1)
        i, f = self.recurrent_activation(zi), self.recurrent_activation(zf)
        c = f * c + i * self.activation(zc)
        h = self.recurrent_activation(zo) * self.activation(c)
        return h, [h, c]


class _ConvLSTM(Layer):
    rank = 2

    def __init__(self, filters: int, kernel_size: Any, strides: Any = 1, padding: str = "valid",
                 data_format: str | None = None, dilation_rate: Any = 1,
                 activation: Any = "tanh", recurrent_activation: Any = "sigmoid",
                 use_bias: bool = True, kernel_initializer: Any = "glorot_uniform",
                 recurrent_initializer: Any = "orthogonal", bias_initializer: Any = "zeros",
                 unit_forget_bias: bool = True, kernel_regularizer: Any = None,
                 recurrent_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 recurrent_constraint: Any = None, bias_constraint: Any = None,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0, seed: int | None = None,
                 return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, stateful: bool = False, **kwargs: Any):
        kwargs.pop("unroll", None)  # accepted (the loop is compiled either way), as RNN
        who = type(self).__name__
        if kwargs.pop("zero_output_for_mask", False):
            raise ValueError(f"{who}: zero_output_for_mask=True is not supported (no masks)")
        super().__init__(**kwargs)
        if stateful:
            raise ValueError(f"{who}: stateful=True is not supported by kiln (pass "
                             "initial_state and return_state=True instead)")
        if dropout or recurrent_dropout:
            raise ValueError(f"{who}: dropout and recurrent_dropout are not supported by kiln "
                             f"yet (only 0.0), received dropout={dropout!r}, "
                             f"recurrent_dropout={recurrent_dropout!r}")
        self.data_format = normalize_data_format(who, data_format)
        self.cell = ConvLSTMCell(
            self.rank, filters, kernel_size, strides, padding, dilation_rate, activation,
            recurrent_activation, use_bias, kernel_initializer, recurrent_initializer,
            bias_initializer, unit_forget_bias, kernel_regularizer, recurrent_regularizer,
            bias_regularizer, kernel_constraint, recurrent_constraint, bias_constraint,
            dtype=self.dtype, name="cell")
        self.activity_regularizer = regularizers.get(activity_regularizer)
        self.dropout, self.recurrent_dropout = float(dropout), float(recurrent_dropout)
        self.seed = seed
        self.return_sequences, self.return_state = bool(return_sequences), bool(return_state)
        self.go_backwards, self.stateful = bool(go_backwards), False

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node):
            dims = inputs.shape[2:]
            if inputs.ndim != self.rank + 3 or any(d is None for d in dims):
                raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) expects inputs "
                                 f"(batch, time, {self.rank} known spatial dims, channels), "
                                 f"received {format_shape(inputs.shape)}")

    def build(self, input_shape: Any) -> None:
        step = (input_shape[0],) + tuple(input_shape[2:])
        if not self.cell.built:
            self.cell.build(step)
            self.cell.build_input_shape = step
        self.built = True

    def call(self, inputs: Node, initial_state: Any = None, training: Any = None,
             mask: Any = None) -> Any:
        if mask is not None:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) does not support "
                             "masks")
        perm = (1, 0) + tuple(range(2, inputs.ndim))
        seq = K.transpose(inputs, perm)  # time-major
        if initial_state is None:
            first = K.squeeze(K.slice(seq, [(0, 1, 1)] + [(None, None, 1)] * (seq.ndim - 1),
                                      None),
                              0)
            zero = K.zeros_like(K.split(K.stop_gradient(self.cell.input_part(first)), 4,
                                        axis=-1)[0])
            states0 = [zero, zero]
        else:
            states0 = list(initial_state)
            if len(states0) != 2:
                raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) expects 2 "
                                 f"initial states [h, c], received {len(states0)}")

        def step(carry: list[Node], x: Node) -> tuple[list[Node], Node]:
            h, new = self.cell.call(x, carry)
            return new, (h if self.return_sequences else None)

        final, ys = K.scan(step, states0, seq, reverse=self.go_backwards, name=self.name)
        if self.return_sequences:
            if self.go_backwards:
                ys = K.flip(ys, 0)  # the order processed, as Keras
            output = K.transpose(ys, perm)
        else:
            output = final[0]
        add_activity_loss(self, self.activity_regularizer, output)
        return [output] + list(final) if self.return_state else output

    def get_config(self) -> dict:
        config = super().get_config()
        c = self.cell
        config.update({
            "filters": c.filters, "kernel_size": c.kernel_size, "strides": c.strides,
            "padding": c.padding, "data_format": self.data_format,
            "dilation_rate": c.dilation_rate, "activation": activations.serialize(c.activation),
            "recurrent_activation": activations.serialize(c.recurrent_activation),
            "use_bias": c.use_bias,
            "kernel_initializer": initializers.serialize(c.kernel_initializer),
            "recurrent_initializer": initializers.serialize(c.recurrent_initializer),
            "bias_initializer": initializers.serialize(c.bias_initializer),
            "unit_forget_bias": c.unit_forget_bias,
            "kernel_regularizer": regularizers.serialize(c.kernel_regularizer),
            "recurrent_regularizer": regularizers.serialize(c.recurrent_regularizer),
            "bias_regularizer": regularizers.serialize(c.bias_regularizer),
            "activity_regularizer": regularizers.serialize(self.activity_regularizer),
            **constraint_config(c, "kernel_constraint", "recurrent_constraint",
                                "bias_constraint"),
            "dropout": self.dropout, "recurrent_dropout": self.recurrent_dropout,
            "seed": self.seed, "return_sequences": self.return_sequences,
            "return_state": self.return_state, "go_backwards": self.go_backwards,
            "stateful": False, "unroll": False, "zero_output_for_mask": False})
        return config


_DOC = """{rank}-D convolutional LSTM over ``(batch, time, {dims}, channels)`` (Keras'
    ``ConvLSTM{rank}D``): at each step the gates are ``conv(x_t, kernel) + conv(h, recurrent_
    kernel) + bias`` (input convolution with ``strides``/``padding``/``dilation_rate``, the
    recurrent one stride 1 and "same"); ``c = f c + i tanh(z_c)``, ``h = o tanh(c)``.

    Output: the last ``h`` ``(batch, {dims}', filters)``, or every step's with
    ``return_sequences``; ``return_state`` adds ``[h, c]``. Spatial dims must be known.

    Args:
        filters, kernel_size, strides=1, padding="valid", data_format=None, dilation_rate=1,
        activation="tanh", recurrent_activation="sigmoid", use_bias=True,
        kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
        bias_initializer="zeros", unit_forget_bias=True, kernel/recurrent/bias/activity
        regularizers and kernel/recurrent/bias constraints, dropout=0.0 and
        recurrent_dropout=0.0 (only 0 is supported), seed, return_sequences=False,
        return_state=False, go_backwards=False, stateful=False (only False).

    Weights (Keras' order): ``kernel``, ``recurrent_kernel``, ``bias``.
"""


class ConvLSTM1D(_ConvLSTM):
    __doc__ = _DOC.format(rank=1, dims="steps")
    rank = 1


class ConvLSTM2D(_ConvLSTM):
    __doc__ = _DOC.format(rank=2, dims="rows, cols")
    rank = 2


class ConvLSTM3D(_ConvLSTM):
    __doc__ = _DOC.format(rank=3, dims="depth, rows, cols")
    rank = 3
