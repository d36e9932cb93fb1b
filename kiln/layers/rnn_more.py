"""StackedRNNCells (several cells as one, for ``RNN``) and ReversibleEmbedding (an embedding
that can also project back to logits), as Keras'."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln import initializers
from kiln.core import Node, format_shape
from kiln.layers._utils import deserialize_layer, serialize_layer
from kiln.layers.base import Layer
from kiln.layers.core import Embedding


def _flat_sizes(cell: Any) -> list[int]:
    size = cell.state_size
    return [int(s) for s in size] if isinstance(size, list | tuple) else [int(size)]


def _out_size(cell: Any) -> int:
    out = getattr(cell, "output_size", None)
    return int(out) if out is not None else _flat_sizes(cell)[0]


class StackedRNNCells(Layer):
    """Several RNN cells run as one cell: at each step cell ``i`` reads cell ``i - 1``'s
    output (Keras' ``StackedRNNCells``; ``RNN([cell1, cell2])`` makes one).

    kiln's ``RNN`` takes a flat list of states, so ``state_size`` is the cells' state sizes
    one after the other (Keras nests them per cell); the weights are the cells' weights in
    order, as Keras'.

    Args:
        cells: the cells, first to last (each with ``state_size`` and ``call``).

    Example:
        >>> cells = [kiln.layers.LSTMCell(32), kiln.layers.LSTMCell(16)]
        >>> y = kiln.layers.RNN(kiln.layers.StackedRNNCells(cells))(x)   # (None, 16)
    """

    def __init__(self, cells: list, **kwargs: Any):
        super().__init__(**kwargs)
        cells = list(cells)
        for cell in cells:
            if not callable(getattr(cell, "call", None)):
                raise ValueError("All cells must have a `call` method. Received cell without "
                                 f"a `call` method: {cell!r}")
            if not hasattr(cell, "state_size"):
                raise ValueError("All cells must have a `state_size` attribute. Received cell "
                                 f"without a `state_size`: {cell!r}")
        if not cells:
            raise ValueError("StackedRNNCells: `cells` must not be empty")
        self.cells = cells

    @property
    def state_size(self) -> list[int]:
        return [s for c in self.cells for s in _flat_sizes(c)]

    @property
    def output_size(self) -> int:
        return _out_size(self.cells[-1])

    def build(self, input_shape: Any) -> None:
        shape = tuple(input_shape)
        for cell in self.cells:
            if isinstance(cell, Layer) and not cell.built:
                cell.build(shape)
                cell.build_input_shape = shape
                cell.built = True
            shape = (shape[0], _out_size(cell))
        self.built = True

    def prepare_masks(self, first_input: Node, first_state: Node, training: Any) -> None:
        """Each cell's dropout masks (``RNN`` calls it before the loop)."""
        x = first_input
        col = K.zeros_like(K.slice(first_input, [(None, None, 1), (0, 1, 1)], None))
        for cell in self.cells:
            state = col + K.constant(np.zeros(_flat_sizes(cell)[0]), first_input.dtype)
            prepare = getattr(cell, "prepare_masks", None)
            if prepare is not None:
                prepare(x, state, training)
            x = col + K.constant(np.zeros(_out_size(cell)), first_input.dtype)

    def reset_masks(self) -> None:
        for cell in self.cells:
            reset = getattr(cell, "reset_masks", None)
            if reset is not None:
                reset()

    def call(self, inputs: Node, states: Any, training: Any = None) -> tuple[Node, list]:
        states = list(states) if isinstance(states, list | tuple) else [states]
        if len(states) != len(self.state_size):
            raise ValueError(f"Layer '{self.name}' (StackedRNNCells) expects "
                             f"{len(self.state_size)} states, received {len(states)}")
        new_states: list[Node] = []
        i = 0
        for cell in self.cells:
            n = len(_flat_sizes(cell))
            mine = states[i:i + n]
            i += n
            accepts = cell._call_accepts("training") if hasattr(cell, "_call_accepts") else False
            kwargs = {"training": training} if accepts else {}
            inputs, new = cell.call(inputs, mine if n > 1 or isinstance(
                cell.state_size, list | tuple) else mine, **kwargs)
            new_states += list(new) if isinstance(new, list | tuple) else [new]
        return inputs, new_states

    def get_config(self) -> dict:
        config = super().get_config()
        config["cells"] = [serialize_layer(c) for c in self.cells]
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects: Any = None) -> Layer:
        config = dict(config)
        cells = [deserialize_layer(c, custom_objects) for c in config.pop("cells")]
        return cls(cells, **config)


class ReversibleEmbedding(Embedding):
    """An Embedding that can also map vectors back to token logits (Keras'
    ``ReversibleEmbedding``): ``layer(ids)`` embeds; ``layer(x, reverse=True)`` is ``x @
    embeddings^T`` (tied, the default) or ``x @ reverse_embeddings`` (``tie_weights=False``,
    a second weight of shape ``(output_dim, input_dim)``), optionally soft-capped:
    ``tanh(logits / cap) * cap``.

    Args:
        input_dim, output_dim, embeddings_initializer, embeddings_regularizer,
        embeddings_constraint, mask_zero: as Embedding.
        tie_weights: share the embeddings with the reverse projection (default True).
        reverse_dtype: the dtype of the reverse projection (None: the layer's).
        logit_soft_cap: None, or the soft cap of the reverse logits.

    Example:
        >>> emb = kiln.layers.ReversibleEmbedding(1000, 64)
        >>> h = emb(ids)                       # (batch, steps, 64)
        >>> logits = emb(h, reverse=True)      # (batch, steps, 1000)
    """

    def __init__(self, input_dim: int, output_dim: int, tie_weights: bool = True,
                 embeddings_initializer: Any = "uniform", embeddings_regularizer: Any = None,
                 embeddings_constraint: Any = None, mask_zero: bool = False,
                 reverse_dtype: Any = None, logit_soft_cap: float | None = None,
                 **kwargs: Any):
        super().__init__(input_dim, output_dim, embeddings_initializer=embeddings_initializer,
                         embeddings_regularizer=embeddings_regularizer,
                         embeddings_constraint=embeddings_constraint, mask_zero=mask_zero,
                         **kwargs)
        self.tie_weights = bool(tie_weights)
        self.reverse_dtype = None if reverse_dtype is None else np.dtype(reverse_dtype).name
        self.logit_soft_cap = None if logit_soft_cap is None else float(logit_soft_cap)

    def build(self, input_shape: Any = None) -> None:
        super().build(input_shape)
        if not self.tie_weights:
            self.reverse_embeddings = self.add_weight(
                "reverse_embeddings", (self.output_dim, self.input_dim),
                initializers.get(self.embeddings_initializer))

    def __call__(self, inputs: Any, *args: Any, reverse: bool = False, **kwargs: Any) -> Any:
        if reverse:
            kwargs["reverse"] = True
        return super().__call__(inputs, *args, **kwargs)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        if isinstance(inputs, Node) and inputs.dtype.startswith("float"):
            return None  # the reverse projection carries no mask
        return super().compute_mask(inputs, mask)

    def call(self, inputs: Node, reverse: bool = False) -> Node:
        if not reverse:
            return super().call(inputs)
        if inputs.shape[-1] not in (None, self.output_dim):
            raise ValueError(f"Layer '{self.name}' (ReversibleEmbedding) reverse=True needs "
                             f"inputs with last dimension {self.output_dim}, received "
                             f"{format_shape(inputs.shape)}")
        kernel = K.transpose(self.embeddings) if self.tie_weights else self.reverse_embeddings
        if self.reverse_dtype is not None:
            inputs, kernel = K.cast(inputs, self.reverse_dtype), K.cast(kernel,
                                                                        self.reverse_dtype)
        logits = K.matmul(inputs, kernel)
        if self.logit_soft_cap is not None:
            cap = K.constant(self.logit_soft_cap, logits.dtype)
            logits = K.tanh(logits / cap) * cap
        return logits

    def get_config(self) -> dict:
        config = super().get_config()
        config.pop("activity_regularizer", None)
        config.update({"tie_weights": self.tie_weights, "reverse_dtype": self.reverse_dtype,
                       "logit_soft_cap": self.logit_soft_cap})
        return config
