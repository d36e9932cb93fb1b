"""Recurrent cells, Keras 3 names, arguments, defaults and weight layouts: ``SimpleRNNCell``,
``LSTMCell`` (gates i, f, c, o), ``GRUCell`` (gates z, r, h; ``reset_after=True``: a bias of
two rows). A cell computes ONE step: ``call(inputs, states) -> (output, new_states)``; the
``RNN`` layer runs it over a sequence as one loop in the graph (``kiln.ops.scan``).

Dropout masks (``dropout`` on the inputs, ``recurrent_dropout`` on the state) are drawn once
per sequence, as in Keras, outside the loop: ``RNN`` calls :meth:`DropoutCell.prepare_masks`
before it traces the step; a cell called on its own draws them in its call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln import activations, initializers, regularizers
from kiln.core import Node, format_shape
from kiln.layers._utils import (
    constraint_config,
    keras_args,
    positive_int,
    random_stream,
    set_constraints,
)
from kiln.layers.base import Layer
from kiln.layers.context import current, in_training


def _rate(cls: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise ValueError(f"{cls}: {name} must be a float in [0, 1), received {name}={value!r}")
    return float(value)


class DropoutCell(Layer):
    """What the cells share: units, initializers, regularizers and per-sequence dropout."""

    gates = 1

    def __init__(self, units: int, activation: Any = "tanh", use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform",
                 recurrent_initializer: Any = "orthogonal", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, recurrent_regularizer: Any = None,
                 bias_regularizer: Any = None, kernel_constraint: Any = None,
                 recurrent_constraint: Any = None, bias_constraint: Any = None,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0, seed: int | None = None,
                 **kwargs: Any):
        cls = type(self).__name__
        kwargs.pop("implementation", None)  # Keras 2 configs: one implementation here
        super().__init__(**kwargs)
        set_constraints(self, kernel_constraint=kernel_constraint,
                        recurrent_constraint=recurrent_constraint,
                        bias_constraint=bias_constraint)
        self.units = positive_int(cls, "units", units)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.recurrent_regularizer = regularizers.get(recurrent_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.dropout = _rate(cls, "dropout", dropout)
        self.recurrent_dropout = _rate(cls, "recurrent_dropout", recurrent_dropout)
        self.seed = None if seed is None else int(seed)
        # the stream of its dropout masks: the seed, or one drawn from kiln's seeded generator
        self._stream = random_stream(self.seed, self.dropout > 0 or self.recurrent_dropout > 0)
        self._masks: tuple[Node | None, Node | None] | None = None

    @property
    def state_size(self) -> Any:
        return self.units

    @property
    def output_size(self) -> int:
        return self.units

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node) and self.built:
            d = self.kernel.shape[0]
            if inputs.ndim != 2 or inputs.shape[-1] not in (None, d):
                raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) expects inputs "
                                 f"of shape (batch, {d}), received {format_shape(inputs.shape)}")

    def build(self, input_shape: Any) -> None:
        in_dim = input_shape[-1]
        if in_dim is None:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) needs a known "
                             f"feature dimension, received input shape "
                             f"{format_shape(input_shape)}")
        n = self.gates * self.units
        self.kernel = self.add_weight("kernel", (in_dim, n), self.kernel_initializer,
                                      self.kernel_regularizer)
        self.recurrent_kernel = self.add_weight("recurrent_kernel", (self.units, n),
                                                self.recurrent_initializer,
                                                self.recurrent_regularizer)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight("bias", self._bias_shape(), self._bias_init(),
                                        self.bias_regularizer)
        self.built = True

    def _bias_shape(self) -> tuple[int, ...]:
        return (self.gates * self.units,)

    def _bias_init(self) -> Any:
        return self.bias_initializer

    # ---- dropout --------------------------------------------------------------------------
    def _salt(self, k: int) -> int:
        return ((self._stream or 0) + 7919 * k) % (2**32)

    def _mask(self, like: Node, rate: float, k: int) -> Node | None:
        ctx = current()
        if rate == 0.0 or ctx is None or ctx.rng_key is None:
            return None
        return K.dropout(K.ones_like(like), rate, ctx.rng_key, self._salt(k))

    def prepare_masks(self, first_input: Node, first_state: Node, training: Any) -> None:
        """Draws this sequence's dropout masks (called by ``RNN`` before the loop)."""
        if not in_training(training):
            self._masks = (None, None)
            return
        self._masks = (self._mask(first_input, self.dropout, 0),
                       self._mask(first_state, self.recurrent_dropout, 1))

    def reset_masks(self) -> None:
        self._masks = None

    def _dropped(self, x: Node, h: Node, training: Any) -> tuple[Node, Node]:
        masks = self._masks
        if masks is None:  # called on its own, not by RNN
            masks = ((self._mask(x, self.dropout, 0), self._mask(h, self.recurrent_dropout, 1))
                     if in_training(training) else (None, None))
        dx, dh = masks
        return (x if dx is None else x * dx), (h if dh is None else h * dh)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "units": self.units,
            "activation": activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": initializers.serialize(self.kernel_initializer),
            "recurrent_initializer": initializers.serialize(self.recurrent_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
            "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
            "recurrent_regularizer": regularizers.serialize(self.recurrent_regularizer),
            "bias_regularizer": regularizers.serialize(self.bias_regularizer),
            **constraint_config(self, "kernel_constraint", "recurrent_constraint",
                                "bias_constraint"),
            "dropout": self.dropout,
            "recurrent_dropout": self.recurrent_dropout,
            "seed": self.seed if self.seed is not None else self._stream,
        })
        return config


def _split(z: Node, n: int, units: int) -> list[Node]:
    """The ``n`` gate blocks of ``z`` (last axis), as views."""
    lead = [(None, None, 1)] * (z.ndim - 1)
    return [K.slice(z, lead + [(k * units, (k + 1) * units, 1)], None) for k in range(n)]


class SimpleRNNCell(DropoutCell):
    """One step of a fully connected RNN: ``h = activation(x @ kernel + h @ recurrent_kernel
    + bias)``.

    Args:
        units: size of the state and output. Other arguments as Keras 3 (activation "tanh",
            kernel "glorot_uniform", recurrent kernel "orthogonal", dropout, recurrent_dropout,
            seed); constraints must be None.
    """

    def call(self, inputs: Node, states: Any, training: Any = None) -> tuple[Node, Any]:
        h = states[0] if isinstance(states, list | tuple) else states
        x, hd = self._dropped(inputs, h, training)
        z = K.matmul(x, self.kernel)
        if self.bias is not None:
            z = z + self.bias
        out = self.activation(z + K.matmul(hd, self.recurrent_kernel))
        return out, ([out] if isinstance(states, list | tuple) else out)


class LSTMCell(DropoutCell):
    """One step of a long short-term memory cell (Hochreiter 1997), Keras' gate order
    ``i, f, c, o`` in the kernel's columns::

        z = x @ kernel + h @ recurrent_kernel + bias
        c = f * c + i * activation(g);  h = o * activation(c)   (i, f, o: recurrent_activation)

    Args:
        units: size of ``h`` and ``c``.
        recurrent_activation: default "sigmoid".
        unit_forget_bias: default True: the forget gate's bias starts at 1 (the bias
            initializer fills the other gates).
        Other arguments as :class:`SimpleRNNCell`.
    """

    gates = 4

    def __init__(self, units: int, activation: Any = "tanh",
                 recurrent_activation: Any = "sigmoid", use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform",
                 recurrent_initializer: Any = "orthogonal", bias_initializer: Any = "zeros",
                 unit_forget_bias: bool = True, kernel_regularizer: Any = None,
                 recurrent_regularizer: Any = None,
                 bias_regularizer: Any = None, kernel_constraint: Any = None,
                 recurrent_constraint: Any = None, bias_constraint: Any = None,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0,
                 seed: int | None = None, **kwargs: Any):
        super().__init__(**keras_args(locals(), ("recurrent_activation", "unit_forget_bias")))
        self.recurrent_activation = activations.get(recurrent_activation)
        self.unit_forget_bias = bool(unit_forget_bias)

    @property
    def state_size(self) -> list[int]:
        return [self.units, self.units]

    def _bias_init(self) -> Any:
        if not self.unit_forget_bias:
            return self.bias_initializer
        init, units = self.bias_initializer, self.units

        def forget_bias(shape: Any, dtype: Any = None) -> Any:
            values = np.asarray(init((units,), dtype=dtype))
            ones = np.ones((units,), dtype=values.dtype)
            return np.concatenate([values, ones, np.asarray(init((2 * units,), dtype=dtype))])

        return forget_bias

    def call(self, inputs: Node, states: Any, training: Any = None) -> tuple[Node, list[Node]]:
        h, c = states[0], states[1]
        x, hd = self._dropped(inputs, h, training)
        z = K.matmul(x, self.kernel)
        if self.bias is not None:
            z = z + self.bias
        z = z + K.matmul(hd, self.recurrent_kernel)
        i, f, g, o = _split(z, 4, self.units)
        ra = self.recurrent_activation
        c = ra(f) * c + ra(i) * self.activation(g)
        h = ra(o) * self.activation(c)
        return h, [h, c]

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"recurrent_activation": activations.serialize(self.recurrent_activation),
                       "unit_forget_bias": self.unit_forget_bias})
        return config


class GRUCell(DropoutCell):
    """One step of a gated recurrent unit (Cho et al. 2014), Keras' gate order ``z, r, h``::

        z = ra(x Wz + h Uz + b),  r = ra(x Wr + h Ur + b)
        reset_after=True (default, cuDNN's):  hh = act(x Wh + bx + r * (h Uh + bh))
        reset_after=False:                    hh = act(x Wh + b + (r * h) Uh)
        h = z * h + (1 - z) * hh

    With ``reset_after=True`` the bias has two rows (input and recurrent), shape (2, 3*units).

    Args:
        units: size of the state and output.
        recurrent_activation: default "sigmoid".
        reset_after: default True.
        Other arguments as :class:`SimpleRNNCell`.
    """

    gates = 3

    def __init__(self, units: int, activation: Any = "tanh",
                 recurrent_activation: Any = "sigmoid", use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform",
                 recurrent_initializer: Any = "orthogonal", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, recurrent_regularizer: Any = None,
                 bias_regularizer: Any = None, kernel_constraint: Any = None,
                 recurrent_constraint: Any = None, bias_constraint: Any = None,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0, reset_after: bool = True,
                 seed: int | None = None, **kwargs: Any):
        super().__init__(**keras_args(locals(), ("recurrent_activation", "reset_after")))
        self.recurrent_activation = activations.get(recurrent_activation)
        self.reset_after = bool(reset_after)

    def _bias_shape(self) -> tuple[int, ...]:
        return (2, 3 * self.units) if self.reset_after else (3 * self.units,)

    def call(self, inputs: Node, states: Any, training: Any = None) -> tuple[Node, Any]:
        h = states[0] if isinstance(states, list | tuple) else states
        x, hd = self._dropped(inputs, h, training)
        u, ra, act = self.units, self.recurrent_activation, self.activation
        mx = K.matmul(x, self.kernel)
        if self.reset_after:
            if self.bias is not None:
                mx = mx + K.slice(self.bias, [(0, 1, 1), (None, None, 1)], None)
            mh = K.matmul(hd, self.recurrent_kernel)
            if self.bias is not None:
                mh = mh + K.slice(self.bias, [(1, 2, 1), (None, None, 1)], None)
            xz, xr, xh = _split(mx, 3, u)
            hz, hr, hh = _split(mh, 3, u)
            z = ra(xz + hz)
            r = ra(xr + hr)
            cand = act(xh + r * hh)
        else:
            if self.bias is not None:
                mx = mx + self.bias
            xz, xr, xh = _split(mx, 3, u)
            uz, ur, uh = _split(self.recurrent_kernel, 3, u)
            z = ra(xz + K.matmul(hd, uz))
            r = ra(xr + K.matmul(hd, ur))
            cand = act(xh + K.matmul(r * hd, uh))
        out = z * h + (1.0 - z) * cand
        return out, ([out] if isinstance(states, list | tuple) else out)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"recurrent_activation": activations.serialize(self.recurrent_activation),
                       "reset_after": self.reset_after})
        return config
