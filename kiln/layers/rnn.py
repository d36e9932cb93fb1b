"""Recurrent layers, Keras 3 names, arguments and defaults: the generic ``RNN(cell)`` and
``SimpleRNN``, ``LSTM``, ``GRU``.

A recurrent layer is ONE loop in the graph (``kiln.ops.scan``, docs/architecture.md "Loops"):
the cell's step is traced once; the loop hoists the input projection ``x_t @ kernel + bias``
of every step out as one matmul over the whole sequence, and its gradient is a reverse loop.
The sequence length may be unknown until run time (no recompile per length).

Masks (from ``Embedding(mask_zero=True)``, ``Masking`` or the ``mask`` argument, shaped
``(batch, steps)``): on a masked step the states keep their values and the output repeats
the previous one (the initial state ``h`` before the first unmasked step, as Keras), so a
padded batch gives each sequence what it gives alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln import regularizers
from kiln.core import Node, format_shape
from kiln.layers._utils import add_activity_loss, check_mask, deserialize_layer, serialize_layer
from kiln.layers.base import Layer, snake_case
from kiln.layers.rnn_cells import GRUCell, LSTMCell, SimpleRNNCell, keras_args


def _sizes(cell: Any) -> list[int]:
    size = cell.state_size
    return [int(s) for s in size] if isinstance(size, list | tuple) else [int(size)]


def _check_steps_and_mask(layer: Layer, inputs: Any, mask: Any) -> None:
    """Raises ValueError naming ``layer`` for inputs of zero time steps (Keras' TensorFlow
    backend fails inside its loop there) and for a mask whose known batch size or steps
    differ from the inputs' (before anything is built or any state changes)."""
    shape = getattr(inputs, "shape", None)
    if shape is None or len(shape) != 3:
        return  # not one (batch, steps, features) tensor: _check_inputs says so
    if shape[1] == 0:
        raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}) received inputs of "
                         f"shape {format_shape(tuple(shape))}: a sequence of 0 time steps "
                         f"has no output; pass at least one step")
    if isinstance(mask, list | tuple):
        mask = mask[0] if mask else None
    m_shape = getattr(mask, "shape", None)
    if m_shape is None:
        return
    if len(m_shape) != 2 or any(a is not None and b is not None and a != b
                                for a, b in zip(m_shape, shape[:2])):
        raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}): the mask has shape "
                         f"{format_shape(tuple(m_shape))}, expected (batch, steps) = "
                         f"{format_shape(tuple(shape[:2]))} for inputs of shape "
                         f"{format_shape(tuple(shape))}")


class RNN(Layer):
    """Runs a cell over the time axis of ``(batch, steps, features)`` inputs.

    Args:
        cell: a layer with ``state_size`` (an int or a list of ints), optionally
            ``output_size``, and ``call(inputs, states[, training]) -> (output, new_states)``
            computing one step (``states`` is a list). Kiln's cells or your own.
        return_sequences: return the output of every step ``(batch, steps, units)`` instead of
            the last one.
        return_state: also return the final states (``[output, *states]``).
        go_backwards: process the sequence from its end (the returned sequence is in the
            order processed, as in Keras).
        stateful: must be False (not supported).
        unroll: accepted for compatibility; the loop is compiled either way.
        zero_output_for_mask: output zeros on masked steps instead of repeating the last
            output (default False).

    Call arguments: ``inputs``, ``initial_state`` (a tensor or list of tensors),
    ``mask`` (``(batch, steps)`` bool), ``training``.

    Example:
        >>> y = kiln.layers.RNN(kiln.layers.LSTMCell(32), return_sequences=True)(x)
    """

    supports_masking = True

    def __init__(self, cell: Any, return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, stateful: bool = False, unroll: bool = False,
                 zero_output_for_mask: bool = False, **kwargs: Any):
        activity_regularizer = kwargs.pop("activity_regularizer", None)
        if kwargs.get("dtype") is None and isinstance(getattr(cell, "dtype", None), str):
            kwargs["dtype"] = cell.dtype  # no autocast in kiln: compute in the cell's dtype
        super().__init__(**kwargs)
        if isinstance(cell, list | tuple):  # Keras: a list of cells is one StackedRNNCells
            from kiln.layers.rnn_more import StackedRNNCells
            cell = StackedRNNCells(cell)
        if not hasattr(cell, "state_size") or not callable(getattr(cell, "call", None)):
            raise ValueError(f"{type(self).__name__}: cell must be a layer with a `state_size` "
                             f"and a `call(inputs, states)`, received {cell!r}")
        if stateful:
            raise ValueError(f"{type(self).__name__}: stateful=True is not supported by kiln "
                             "(pass initial_state and return_state=True instead)")
        self.cell = cell
        self.return_sequences = bool(return_sequences)
        self.return_state = bool(return_state)
        self.go_backwards = bool(go_backwards)
        self.stateful = False
        self.unroll = bool(unroll)
        self.zero_output_for_mask = bool(zero_output_for_mask)
        self.activity_regularizer = regularizers.get(activity_regularizer)

    @property
    def state_size(self) -> Any:
        return self.cell.state_size

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        # checked on the shapes as given, before the eager path traces them with an unknown
        # batch size (where a mask of another batch would fail inside the loop)
        _check_steps_and_mask(self, inputs, kwargs.get("mask"))
        return super().__call__(inputs, *args, **kwargs)

    def _check_inputs(self, inputs: Any) -> None:
        _check_steps_and_mask(self, inputs, None)
        if not isinstance(inputs, Node):
            raise TypeError(f"Layer '{self.name}' ({type(self).__name__}) takes one tensor "
                            f"(batch, steps, features), received {type(inputs).__name__}")
        if inputs.ndim != 3:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) expects inputs of "
                             f"shape (batch, steps, features), received "
                             f"{format_shape(inputs.shape)}")
        kernel = getattr(self.cell, "kernel", None)
        if self.built and kernel is not None and inputs.shape[-1] not in (None, kernel.shape[0]):
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) was built for "
                             f"{kernel.shape[0]} features, received inputs of shape "
                             f"{format_shape(inputs.shape)}")

    def build(self, input_shape: Any) -> None:
        if not self.cell.built:
            step_shape = (input_shape[0], input_shape[-1])
            self.cell.build(step_shape)
            self.cell.build_input_shape = step_shape
            self.cell.built = True
        self.built = True

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        if isinstance(mask, list | tuple):
            mask = mask[0]
        out = mask if self.return_sequences else None
        if self.return_state:
            return [out] + [None] * len(_sizes(self.cell))
        return out

    def _initial_states(self, inputs: Node, initial_state: Any) -> list[Node]:
        sizes = _sizes(self.cell)
        if initial_state is None:
            return _zero_states(K.transpose(inputs, (1, 0, 2)), sizes)
        states = list(initial_state) if isinstance(initial_state, list | tuple) else \
            [initial_state]
        if len(states) != len(sizes):
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) expects "
                             f"{len(sizes)} initial state(s), received {len(states)}")
        result = []
        for k, (s, size) in enumerate(zip(states, sizes)):
            s = K.cast(s, inputs.dtype) if isinstance(s, Node) and s.dtype != inputs.dtype \
                else s
            if not isinstance(s, Node) or s.ndim != 2 or s.shape[-1] not in (None, size):
                shape = format_shape(s.shape) if isinstance(s, Node) else type(s).__name__
                raise ValueError(f"Layer '{self.name}' ({type(self).__name__}): initial state "
                                 f"{k} must have shape (batch, {size}), received {shape}")
            result.append(s)
        return result

    def call(self, inputs: Node, initial_state: Any = None, mask: Any = None,
             training: Any = None) -> Any:
        if isinstance(mask, list | tuple):
            mask = mask[0]
        if mask is not None:
            check_mask(self, inputs, mask)
        states0 = self._initial_states(inputs, initial_state)
        cell = self.cell
        seq = K.transpose(inputs, (1, 0, 2))  # time-major (a view)
        prepare = getattr(cell, "prepare_masks", None)
        if prepare is not None:
            prepare(_first_step(seq), states0[0], training)
        takes_training = cell._call_accepts("training") if hasattr(cell, "_call_accepts") \
            else False
        masked = mask is not None
        out_size = getattr(cell, "output_size", _sizes(cell)[0])
        carry_out = masked and not self.zero_output_for_mask

        def step(carry: list[Node], x: Any) -> tuple[list[Node], Node]:
            xt, mt = (x[0], x[1]) if masked else (x, None)
            states = carry[:len(states0)]
            kwargs = {"training": training} if takes_training else {}
            # cell.call, not cell(...): a functional-API record of the traced step would
            # keep the loop body's placeholders in the model's layer graph
            out, new = cell.call(xt, states, **kwargs)
            new = list(new) if isinstance(new, list | tuple) else [new]
            if mt is None:
                # the last output only, and it is the first state (LSTM, GRU, SimpleRNN): no
                # per-step outputs at all, the final carry is the output
                return new, (None if not self.return_sequences and out is new[0] else out)
            keep = K.expand_dims(mt, -1)
            new = [K.where(keep, n, s) for n, s in zip(new, states)]
            if carry_out:
                out = K.where(keep, out, carry[-1])
                return new + [out], out
            return new, K.where(keep, out, K.zeros_like(out))

        init = list(states0)
        if carry_out:
            # Keras (its scan loop) repeats the first state on masked steps: the previous
            # output, or the initial state before the first unmasked step
            same = int(out_size) == _sizes(cell)[0]
            init.append(states0[0] if same else _zero_states(seq, [int(out_size)])[0])
        xs = [seq, K.transpose(mask, (1, 0))] if masked else seq
        final, ys = K.scan(step, init, xs, reverse=self.go_backwards, name=self.name)
        if prepare is not None:
            cell.reset_masks()
        states = list(final[:len(states0)])
        if self.return_sequences:
            if self.go_backwards:
                ys = K.flip(ys, 0)  # Keras returns the sequence in the order processed
            output = K.transpose(ys, (1, 0, 2))
        else:
            output = final[-1] if carry_out else (final[0] if ys is None else
                                                  _last(ys, self.go_backwards))
        if self.activity_regularizer is not None:
            add_activity_loss(self, self.activity_regularizer, output)
        if self.return_state:
            return [output] + states
        return output

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "return_sequences": self.return_sequences,
            "return_state": self.return_state,
            "go_backwards": self.go_backwards,
            "stateful": False,
            "unroll": self.unroll,
            "zero_output_for_mask": self.zero_output_for_mask,
        })
        if type(self) is RNN:
            config["cell"] = serialize_layer(self.cell)
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects: Any = None) -> Layer:
        config = dict(config)
        if cls is RNN:
            config["cell"] = deserialize_layer(config["cell"], custom_objects)
        return cls(**config)


# Both read the time-major sequence (the transpose the loop runs on), so that no other
# layout of the input has to be computed (an embedding gathers time-major directly).
def _first_step(seq: Node) -> Node:
    """``seq[0]`` of a time-major sequence: one step's input (for the dropout masks' shape)."""
    return K.reshape(K.slice(seq, [(0, 1, 1), (None, None, 1), (None, None, 1)], None),
                     (-1, seq.shape[-1]))


def _last(ys: Node, backwards: bool) -> Node:
    """The output of the last step processed (``ys`` is in time order)."""
    spec = [(0, 1, 1) if backwards else (-1, None, 1), (None, None, 1), (None, None, 1)]
    t = K.slice(ys, spec, None)
    return K.reshape(t, (-1, ys.shape[-1]))


def _zero_states(seq: Node, sizes: list[int]) -> list[Node]:
    """Zero states ``(batch, size)``, the batch taken from the time-major ``seq``."""
    col = K.zeros_like(K.slice(seq, [(0, 1, 1), (None, None, 1), (0, 1, 1)], None))
    col = K.reshape(col, (-1, 1))
    return [col + K.constant(np.zeros(s), seq.dtype) for s in sizes]


class _CellRNN(RNN):
    """A recurrent layer owning its cell (``SimpleRNN``, ``LSTM``, ``GRU``): the cell's
    arguments are the layer's, and so is its config (Keras' layout)."""

    cell_class: Any = None
    cell_args: tuple[str, ...] = ()

    def __init__(self, units: int, return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, stateful: bool = False, unroll: bool = False,
                 **kwargs: Any):
        kwargs.pop("use_cudnn", None)  # Keras 3: one implementation here
        kwargs.pop("time_major", None)
        cell_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in self.cell_args}
        # Keras names the cell after its class, the same in every layer ("lstm_cell"): the
        # weight paths in its files read "lstm/lstm_cell/kernel"
        cell = self.cell_class(units, name=snake_case(self.cell_class.__name__),
                               dtype=kwargs.get("dtype"), **cell_kwargs)
        super().__init__(cell, return_sequences=return_sequences, return_state=return_state,
                         go_backwards=go_backwards, stateful=stateful, unroll=unroll, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in ("units", "activation", "recurrent_activation", "use_bias", "dropout",
                    "recurrent_dropout", "reset_after", "unit_forget_bias", "seed"):
            return getattr(self.__dict__["cell"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def get_config(self) -> dict:
        config = super().get_config()
        cell_config = self.cell.get_config()
        for k in ("name", "trainable", "dtype"):
            cell_config.pop(k, None)
        config.update(cell_config)
        return config


_COMMON = ("activation", "use_bias", "kernel_initializer", "recurrent_initializer",
           "bias_initializer", "kernel_regularizer", "recurrent_regularizer",
           "bias_regularizer", "kernel_constraint", "recurrent_constraint", "bias_constraint",
           "dropout", "recurrent_dropout", "seed", "implementation")


class SimpleRNN(_CellRNN):
    """A fully connected RNN: ``h_t = activation(x_t @ kernel + h_{t-1} @ recurrent_kernel +
    bias)``; arguments as :class:`SimpleRNNCell` plus those of :class:`RNN`.

    Example:
        >>> y = kiln.layers.SimpleRNN(32)(kiln.Input((None, 8)))   # (None, 32)
    """

    cell_class = SimpleRNNCell
    cell_args = _COMMON

    def __init__(self, units: int, activation: Any = "tanh", use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform",
                 recurrent_initializer: Any = "orthogonal", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, recurrent_regularizer: Any = None,
                 bias_regularizer: Any = None, activity_regularizer: Any = None,
                 kernel_constraint: Any = None, recurrent_constraint: Any = None,
                 bias_constraint: Any = None, dropout: float = 0.0,
                 recurrent_dropout: float = 0.0, return_sequences: bool = False,
                 return_state: bool = False, go_backwards: bool = False, stateful: bool = False,
                 unroll: bool = False, seed: int | None = None, **kwargs: Any):
        super().__init__(**keras_args(locals()))


class LSTM(_CellRNN):
    """Long short-term memory (Hochreiter 1997); arguments as :class:`LSTMCell` plus those of
    :class:`RNN`. Weights as Keras: ``kernel (features, 4*units)``, ``recurrent_kernel
    (units, 4*units)``, ``bias (4*units,)``, gates ``i, f, c, o``.

    Example:
        >>> seq, h, c = kiln.layers.LSTM(64, return_sequences=True, return_state=True)(x)
    """

    cell_class = LSTMCell
    cell_args = _COMMON + ("recurrent_activation", "unit_forget_bias")

    def __init__(self, units: int, activation: Any = "tanh", recurrent_activation: Any = "sigmoid",
                 use_bias: bool = True, kernel_initializer: Any = "glorot_uniform",
                 recurrent_initializer: Any = "orthogonal", bias_initializer: Any = "zeros",
                 unit_forget_bias: bool = True, kernel_regularizer: Any = None,
                 recurrent_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 recurrent_constraint: Any = None, bias_constraint: Any = None,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0, seed: int | None = None,
                 return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, stateful: bool = False, unroll: bool = False,
                 use_cudnn: Any = "auto", **kwargs: Any):
        super().__init__(**keras_args(locals()))


class GRU(_CellRNN):
    """Gated recurrent unit (Cho et al. 2014); arguments as :class:`GRUCell` (``reset_after=
    True`` by default: bias ``(2, 3*units)``) plus those of :class:`RNN`.

    Example:
        >>> y = kiln.layers.GRU(64)(x)
    """

    cell_class = GRUCell
    cell_args = _COMMON + ("recurrent_activation", "reset_after")

    def __init__(self, units: int, activation: Any = "tanh", recurrent_activation: Any = "sigmoid",
                 use_bias: bool = True, kernel_initializer: Any = "glorot_uniform",
                 recurrent_initializer: Any = "orthogonal", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, recurrent_regularizer: Any = None,
                 bias_regularizer: Any = None, activity_regularizer: Any = None,
                 kernel_constraint: Any = None, recurrent_constraint: Any = None,
                 bias_constraint: Any = None, dropout: float = 0.0,
                 recurrent_dropout: float = 0.0, seed: int | None = None,
                 return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, stateful: bool = False, unroll: bool = False,
                 reset_after: bool = True, use_cudnn: Any = "auto", **kwargs: Any):
        super().__init__(**keras_args(locals()))

