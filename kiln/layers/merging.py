"""Merging layers: Add, Subtract, Multiply, Average, Maximum, Minimum, Concatenate, Dot, and
Keras' lowercase functional helpers (``add([a, b])`` builds an Add layer and calls it).

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


class Dot(_Merge):
    """Dot product of two tensors along ``axes``, per sample (Keras' ``batch_dot``).

    For inputs ``x`` of shape ``(batch, *dx)`` and ``y`` of shape ``(batch, *dy)``, the
    output has ``x``'s remaining axes then ``y``'s: ``(batch, 3)`` and ``(batch, 3)`` with
    ``axes=1`` give ``(batch, 1)``; ``(batch, 4, 3)`` and ``(batch, 3, 5)`` with ``axes=(2,
    1)`` give ``(batch, 4, 5)``.

    Args:
        axes: an int (the same axis of both inputs) or a pair of ints; not the batch axis.
        normalize: L2-normalize both inputs along their ``axes`` first (the output is then
            the cosine similarity).

    Example:
        >>> sim = kiln.layers.Dot(axes=1, normalize=True)([a, b])   # (None, 1)
    """

    exact_inputs = 2

    def __init__(self, axes: Any, normalize: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        if isinstance(axes, int) and not isinstance(axes, bool):
            self.axes: Any = int(axes)
        elif isinstance(axes, list | tuple) and len(axes) == 2 and all(
                isinstance(a, int) and not isinstance(a, bool) for a in axes):
            self.axes = [int(a) for a in axes]
        else:
            raise TypeError(f"Dot: axes must be an int or a list of 2 ints, received "
                            f"axes={axes!r}")
        self.normalize = bool(normalize)

    def _resolve(self, inputs: list[Node]) -> tuple[int, int]:
        pair = self.axes if isinstance(self.axes, list) else [self.axes, self.axes]
        out = []
        for x, a in zip(inputs, pair):
            if not -x.ndim <= a < x.ndim or a % x.ndim == 0:
                raise ValueError(f"Layer '{self.name}' (Dot): axes {self.axes} is not a valid "
                                 f"non-batch axis for inputs of shapes {_shapes(inputs)}")
            out.append(a % x.ndim)
        return out[0], out[1]

    def _check_shapes(self, inputs: list[Node]) -> None:
        ax, ay = self._resolve(inputs)
        x, y = inputs
        if x.shape[ax] is not None and y.shape[ay] is not None and x.shape[ax] != y.shape[ay]:
            raise ValueError(f"Layer '{self.name}' (Dot): incompatible input shapes "
                             f"{_shapes(inputs)}: axis {ax} of the first ({x.shape[ax]}) and "
                             f"axis {ay} of the second ({y.shape[ay]}) differ")

    def _merge(self, inputs: list[Node]) -> Node:
        ax, ay = self._resolve(inputs)
        x, y = inputs
        if self.normalize:
            x, y = _l2_normalize(x, ax), _l2_normalize(y, ay)
        letters = iter("bcdefghijklmnopqrstuvwxyz")
        xs = ["a"] + [next(letters) for _ in range(1, x.ndim)]
        ys = ["a"] + [xs[ax] if i == ay else next(letters) for i in range(1, y.ndim)]
        out = [c for i, c in enumerate(xs) if i != ax] + [c for i, c in enumerate(ys)
                                                          if i not in (0, ay)]
        z = K.einsum(f"{''.join(xs)},{''.join(ys)}->{''.join(out)}", x, y)
        return K.expand_dims(z, -1) if z.ndim == 1 else z

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        return None

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"axes": self.axes, "normalize": self.normalize})
        return config


def _l2_normalize(x: Node, axis: int) -> Node:
    square_sum = K.sum(K.square(x), axis=axis, keepdims=True)
    return x * K.rsqrt(K.maximum(square_sum, K.constant(1e-12, x.dtype)))


# ---- Keras' lowercase functional helpers ---------------------------------------------------------
def add(inputs: list, **kwargs: Any) -> Any:
    """``Add(**kwargs)(inputs)``: the elementwise sum of a list of tensors."""
    return Add(**kwargs)(inputs)


def subtract(inputs: list, **kwargs: Any) -> Any:
    """``Subtract(**kwargs)(inputs)``: ``inputs[0] - inputs[1]``."""
    return Subtract(**kwargs)(inputs)


def multiply(inputs: list, **kwargs: Any) -> Any:
    """``Multiply(**kwargs)(inputs)``: the elementwise product of a list of tensors."""
    return Multiply(**kwargs)(inputs)


def average(inputs: list, **kwargs: Any) -> Any:
    """``Average(**kwargs)(inputs)``: the elementwise mean of a list of tensors."""
    return Average(**kwargs)(inputs)


def maximum(inputs: list, **kwargs: Any) -> Any:
    """``Maximum(**kwargs)(inputs)``: the elementwise maximum of a list of tensors."""
    return Maximum(**kwargs)(inputs)


def minimum(inputs: list, **kwargs: Any) -> Any:
    """``Minimum(**kwargs)(inputs)``: the elementwise minimum of a list of tensors."""
    return Minimum(**kwargs)(inputs)


def concatenate(inputs: list, axis: int = -1, **kwargs: Any) -> Any:
    """``Concatenate(axis=axis, **kwargs)(inputs)``.

    Example:
        >>> y = kiln.layers.concatenate([a, b])
    """
    return Concatenate(axis=axis, **kwargs)(inputs)


def dot(inputs: list, axes: Any = -1, **kwargs: Any) -> Any:
    """``Dot(axes=axes, **kwargs)(inputs)`` (``normalize=`` may be passed)."""
    return Dot(axes=axes, **kwargs)(inputs)
