"""Merging layers: Add, Subtract, Multiply, Average, Maximum, Minimum, Concatenate.

Each takes a list of tensors. The elementwise ones need shapes that are equal or broadcast
(a dimension of 1 stretches); Concatenate needs equal shapes except along ``axis``.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers.base import Layer


def _shapes(inputs: list[Node]) -> str:
    return "[" + ", ".join(format_shape(x.shape) for x in inputs) + "]"


class _Merge(Layer):
    exact_inputs: int | None = None

    def _check_inputs(self, inputs: Any) -> None:
        name = f"Layer '{self.name}' ({type(self).__name__})"
        if not isinstance(inputs, list | tuple):
            raise ValueError(f"{name} expects a list of tensors, received a single "
                             f"{type(inputs).__name__}"
                             + (f" of shape {format_shape(inputs.shape)}"
                                if isinstance(inputs, Node) else ""))
        n = len(inputs)
        if self.exact_inputs is not None and n != self.exact_inputs:
            raise ValueError(f"{name} expects exactly {self.exact_inputs} inputs, received {n}")
        if n < 2:
            raise ValueError(f"{name} expects a list of at least 2 tensors, received {n}")
        if not all(isinstance(x, Node) for x in inputs):
            return  # eager call: checked again on the placeholders
        self._check_shapes(list(inputs))

    def _check_shapes(self, inputs: list[Node]) -> None:
        ranks = {x.ndim for x in inputs}
        bad = len(ranks) > 1
        if not bad:
            for dims in zip(*(x.shape for x in inputs)):
                known = {d for d in dims if d is not None and d != 1}
                bad = bad or len(known) > 1
        if bad:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}): inputs have "
                             f"incompatible shapes. Received shapes {_shapes(inputs)}")

    def _merge(self, inputs: list[Node]) -> Node:
        raise NotImplementedError

    def call(self, inputs: Any) -> Node:
        return self._merge(list(inputs))

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """As Keras: a step is kept when every input that carries a mask keeps it."""
        masks = [m for m in (mask if isinstance(mask, list | tuple) else [mask])
                 if m is not None]
        return reduce(K.logical_and, masks) if masks else None


class Add(_Merge):
    """Elementwise sum of a list of tensors.

    Example:
        >>> y = kiln.layers.Add()([a, b])
    """

    def _merge(self, inputs: list[Node]) -> Node:
        return reduce(K.add, inputs)


class Subtract(_Merge):
    """Elementwise difference ``inputs[0] - inputs[1]`` (exactly two tensors)."""

    exact_inputs = 2

    def _merge(self, inputs: list[Node]) -> Node:
        return K.subtract(inputs[0], inputs[1])


class Multiply(_Merge):
    """Elementwise product of a list of tensors."""

    def _merge(self, inputs: list[Node]) -> Node:
        return reduce(K.multiply, inputs)


class Average(_Merge):
    """Elementwise mean of a list of tensors."""

    def _merge(self, inputs: list[Node]) -> Node:
        total = reduce(K.add, inputs)
        return total * K.constant(1.0 / len(inputs), total.dtype)


class Maximum(_Merge):
    """Elementwise maximum of a list of tensors."""

    def _merge(self, inputs: list[Node]) -> Node:
        return reduce(K.maximum, inputs)


class Minimum(_Merge):
    """Elementwise minimum of a list of tensors."""

    def _merge(self, inputs: list[Node]) -> Node:
        return reduce(K.minimum, inputs)


class Concatenate(_Merge):
    """Joins a list of tensors along ``axis`` (default -1); the other dimensions must match.

    Args:
        axis: the concatenation axis (not the batch axis).

    Example:
        >>> y = kiln.layers.Concatenate()([a, b])     # (None, 3), (None, 5) -> (None, 8)
    """

    def __init__(self, axis: int = -1, **kwargs: Any):
        super().__init__(**kwargs)
        self.axis = int(axis)

    def _check_shapes(self, inputs: list[Node]) -> None:
        ranks = {x.ndim for x in inputs}
        bad = len(ranks) > 1
        ndim = inputs[0].ndim
        if not bad:
            if not -ndim <= self.axis < ndim or self.axis % ndim == 0:
                raise ValueError(f"Layer '{self.name}' (Concatenate): axis {self.axis} is not a "
                                 f"valid non-batch axis for inputs of shapes {_shapes(inputs)}")
            axis = self.axis % ndim
            for i, dims in enumerate(zip(*(x.shape for x in inputs))):
                known = {d for d in dims if d is not None}
                bad = bad or (i != axis and len(known) > 1)
        if bad:
            raise ValueError(f"Layer '{self.name}' (Concatenate) requires inputs with matching "
                             f"shapes except for the concatenation axis {self.axis}. Received "
                             f"shapes {_shapes(inputs)}")

    def _merge(self, inputs: list[Node]) -> Node:
        return K.concatenate(inputs, axis=self.axis)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        if isinstance(inputs, list | tuple) and inputs and isinstance(inputs[0], Node) and \
                self.axis % inputs[0].ndim != inputs[0].ndim - 1:
            return None  # joined along the steps: no per-step mask carries over
        return super().compute_mask(inputs, mask)

    def get_config(self) -> dict:
        config = super().get_config()
        config["axis"] = self.axis
        return config
