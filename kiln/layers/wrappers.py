"""Layer wrappers, Keras 3 names and arguments: ``Bidirectional`` and ``TimeDistributed``."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers._utils import deserialize_layer, serialize_layer
from kiln.layers.base import Layer, flatten

MERGE_MODES = ("concat", "sum", "mul", "ave", None)


class Bidirectional(Layer):
    """Runs a recurrent layer forwards and a copy of it backwards over the sequence and merges
    the two outputs (Keras 3's layout: weights of the forward layer, then the backward one).

    Args:
        layer: an ``RNN`` (``LSTM``, ``GRU``, ``SimpleRNN``, ``RNN(cell)``).
        merge_mode: "concat" (default), "sum", "mul", "ave", or None (a list of both).
        backward_layer: optional layer for the backward direction (``go_backwards=True``);
            by default a copy of ``layer`` from its config with ``go_backwards`` flipped.

    With ``return_sequences`` the backward sequence is re-reversed, so step ``t`` of both
    directions lines up, and masked steps output zeros in both directions (Keras forces
    ``zero_output_for_mask = return_sequences`` on both layers). With ``return_state`` the
    forward states follow the output, then the backward states. A mask reaches both
    directions.

    Example:
        >>> y = kiln.layers.Bidirectional(kiln.layers.LSTM(64))(x)      # (None, 128)
    """

    supports_masking = True

    def __init__(self, layer: Layer, merge_mode: str | None = "concat", weights: Any = None,
                 backward_layer: Layer | None = None, **kwargs: Any):
        if not isinstance(layer, Layer) or not hasattr(layer, "go_backwards"):
            raise ValueError(f"Bidirectional: layer must be a recurrent layer (RNN, LSTM, GRU, "
                             f"SimpleRNN), received {layer!r}")
        if merge_mode not in MERGE_MODES:
            raise ValueError(f"Bidirectional: merge_mode must be one of {MERGE_MODES}, "
                             f"received {merge_mode!r}")
        if kwargs.get("dtype") is None:  # no autocast in kiln: compute in the layer's dtype
            kwargs["dtype"] = layer.dtype
        super().__init__(**kwargs)
        # Keras' names: a config already saying "forward_lstm" stays "forward_lstm"
        self.forward_layer = _renamed(layer, f"forward_{layer.name.removeprefix('forward_')}",
                                      layer.go_backwards)
        if backward_layer is None:
            backward_layer = _renamed(layer, f"backward_{layer.name.removeprefix('backward_')}",
                                      not layer.go_backwards)
        elif backward_layer.go_backwards == layer.go_backwards:
            raise ValueError("Bidirectional: backward_layer.go_backwards must differ from "
                             "layer.go_backwards")
        self.backward_layer = backward_layer
        for attr in ("return_sequences", "return_state"):
            if getattr(self.forward_layer, attr) != getattr(self.backward_layer, attr):
                raise ValueError(f"Bidirectional: {attr} differs between the forward and the "
                                 "backward layer")
        for rnn in (self.forward_layer, self.backward_layer):
            # Keras: a returned sequence is zero on masked steps in both directions (else the
            # forward direction would repeat its last output where the backward one is zero)
            if hasattr(rnn, "zero_output_for_mask"):
                rnn.zero_output_for_mask = rnn.return_sequences
        self.merge_mode = merge_mode
        self.return_sequences = self.forward_layer.return_sequences
        self.return_state = self.forward_layer.return_state
        self._initial_weights = weights

    def _check_inputs(self, inputs: Any) -> None:
        self.forward_layer._check_inputs(inputs)

    def build(self, input_shape: Any) -> None:
        for layer in (self.forward_layer, self.backward_layer):
            if not layer.built:
                layer.build(input_shape)
                layer.build_input_shape = input_shape
                layer.built = True
        self.built = True
        if self._initial_weights is not None:
            self.set_weights(self._initial_weights)
            self._initial_weights = None

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        if isinstance(mask, list | tuple):
            mask = mask[0]
        out = mask if self.return_sequences else None
        if self.merge_mode is None:
            out = [out, out]
        if self.return_state:
            n = len(flatten(self.forward_layer.cell.state_size)) * 2
            return (out if isinstance(out, list) else [out]) + [None] * n
        return out

    def call(self, inputs: Node, initial_state: Any = None, mask: Any = None,
             training: Any = None) -> Any:
        fwd_state = bwd_state = None
        if initial_state is not None:
            states = list(initial_state)
            if len(states) % 2:
                raise ValueError(f"Layer '{self.name}' (Bidirectional): initial_state needs the "
                                 f"forward then the backward states, received {len(states)}")
            half = len(states) // 2
            fwd_state, bwd_state = states[:half], states[half:]
        y = self.forward_layer.call(inputs, initial_state=fwd_state, mask=mask,
                                    training=training)
        y_rev = self.backward_layer.call(inputs, initial_state=bwd_state, mask=mask,
                                         training=training)
        states: list[Node] = []
        if self.return_state:
            states = list(y[1:]) + list(y_rev[1:])
            y, y_rev = y[0], y_rev[0]
        if self.return_sequences:
            y_rev = K.flip(y_rev, 1)  # align step t of both directions
        if self.merge_mode == "concat":
            out: Any = K.concatenate([y, y_rev], axis=-1)
        elif self.merge_mode == "sum":
            out = y + y_rev
        elif self.merge_mode == "ave":
            out = (y + y_rev) * 0.5
        elif self.merge_mode == "mul":
            out = y * y_rev
        else:
            out = [y, y_rev]
        if self.return_state:
            return (out if isinstance(out, list) else [out]) + states
        return out

    def get_config(self) -> dict:
        config = super().get_config()
        config["merge_mode"] = self.merge_mode
        config["layer"] = serialize_layer(self.forward_layer)
        config["backward_layer"] = serialize_layer(self.backward_layer)
        config["layer"]["config"]["name"] = config["layer"]["config"]["name"].removeprefix(
            "forward_")
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects: Any = None) -> Layer:
        config = dict(config)
        config["layer"] = deserialize_layer(config["layer"], custom_objects)
        if config.get("backward_layer") is not None:
            config["backward_layer"] = deserialize_layer(config["backward_layer"],
                                                         custom_objects)
        return cls(**config)


def _renamed(layer: Layer, name: str, go_backwards: bool) -> Layer:
    """A fresh copy of ``layer`` (from its config) named ``name``."""
    config = copy.deepcopy(layer.get_config())
    config["name"] = name
    config["go_backwards"] = go_backwards
    return type(layer).from_config(config)


class TimeDistributed(Layer):
    """Applies ``layer`` to every time step of ``(batch, steps, ...)`` inputs (the same
    weights for every step): the steps are folded into the batch, the layer runs once, and
    the result is unfolded.

    Args:
        layer: the layer to apply (``Dense``, ``Conv2D`` ...).

    Example:
        >>> y = kiln.layers.TimeDistributed(kiln.layers.Dense(8))(x)   # (None, 10, 8)
    """

    supports_masking = True

    def __init__(self, layer: Layer, **kwargs: Any):
        if not isinstance(layer, Layer):
            raise ValueError(f"TimeDistributed: layer must be a Layer, received {layer!r}")
        if kwargs.get("dtype") is None:  # no autocast in kiln: compute in the layer's dtype
            kwargs["dtype"] = layer.dtype
        super().__init__(**kwargs)
        self.layer = layer

    def _check_inputs(self, inputs: Any) -> None:
        if not isinstance(inputs, Node) or inputs.ndim < 3:
            shape = format_shape(inputs.shape) if isinstance(inputs, Node) else \
                type(inputs).__name__
            raise ValueError(f"Layer '{self.name}' (TimeDistributed) expects inputs of rank "
                             f">= 3 (batch, steps, ...), received {shape}")

    def build(self, input_shape: Any) -> None:
        inner = (None,) + tuple(input_shape[2:])
        if not self.layer.built:
            self.layer.build(inner)
            self.layer.build_input_shape = inner
            self.layer.built = True
        self.built = True

    def call(self, inputs: Node, training: Any = None, mask: Any = None) -> Node:
        steps = inputs.shape[1]
        kwargs = {"training": training} if self.layer._call_accepts("training") else {}
        folded = K.reshape(inputs, (-1,) + tuple(inputs.shape[2:]))
        out = self.layer.call(folded, **kwargs)
        if steps is not None:
            return K.reshape(out, (-1, steps) + tuple(out.shape[1:]))
        # an unknown number of steps: unfold to the shape of a (batch, steps, *out) template
        # (zeros from the input's first feature: only its shape is read)
        col = K.slice(inputs, [(None, None, 1), (None, None, 1)] + [(0, 1, 1)] * (
            inputs.ndim - 2), None)
        col = K.squeeze(col, tuple(range(2, inputs.ndim))) if inputs.ndim > 2 else col
        for _ in range(out.ndim - 1):
            col = K.expand_dims(col, -1)
        template = K.zeros_like(col) + K.constant(np.zeros(out.shape[1:]), out.dtype)
        return K.reshape_like(out, template)
    def get_config(self) -> dict:
        config = super().get_config()
        config["layer"] = serialize_layer(self.layer)
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects: Any = None) -> Layer:
        config = dict(config)
        config["layer"] = deserialize_layer(config["layer"], custom_objects)
        return cls(**config)
