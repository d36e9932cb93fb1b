"""Weight regularizers (Keras 3 names and defaults): ``L1``, ``L2``, ``L1L2``.

A regularizer is called with a weight (a Variable or tensor) and returns a scalar graph node,
the penalty that joins the training loss (``Layer.regularization_losses``).

String identifiers use Keras' default factors: ``"l1"`` -> ``L1(0.01)``, ``"l2"`` ->
``L2(0.01)``, ``"l1_l2"`` -> ``L1L2(l1=0.01, l2=0.01)``. (The class ``L1L2()`` itself defaults
to zero factors, as in Keras.)

Example:
    >>> reg = kiln.regularizers.get("l2")
    >>> penalty = reg(layer.kernel)          # 0.01 * sum(kernel ** 2), a scalar node
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, convert_to_tensor
from kiln.registry import deserialize_object, serialize_object


def _factor(value: Any, name: str) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or math.isinf(value) or math.isnan(value) or value < 0):
        raise ValueError(f"Invalid value for argument {name}: expected a non-negative float, "
                         f"received {name}={value!r}")
    return float(value)


class Regularizer:
    """Base class: ``__call__(w) -> scalar node`` and ``get_config``."""

    def __call__(self, x: Any) -> Node:
        return K.constant(0.0, convert_to_tensor(x).dtype)

    def get_config(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_config()")

    @classmethod
    def from_config(cls, config: dict) -> Regularizer:
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class L1(Regularizer):
    """``l1 * sum(|w|)``.

    Args:
        l1: the factor (default 0.01).
    """

    def __init__(self, l1: float = 0.01):
        self.l1 = _factor(0.01 if l1 is None else l1, "l1")

    def __call__(self, x: Any) -> Node:
        x = convert_to_tensor(x)
        return K.constant(self.l1, x.dtype) * K.sum(K.abs(x))

    def get_config(self) -> dict:
        return {"l1": self.l1}


class L2(Regularizer):
    """``l2 * sum(w ** 2)``.

    Args:
        l2: the factor (default 0.01).
    """

    def __init__(self, l2: float = 0.01):
        self.l2 = _factor(0.01 if l2 is None else l2, "l2")

    def __call__(self, x: Any) -> Node:
        x = convert_to_tensor(x)
        return K.constant(self.l2, x.dtype) * K.sum(K.square(x))

    def get_config(self) -> dict:
        return {"l2": self.l2}


class L1L2(Regularizer):
    """``l1 * sum(|w|) + l2 * sum(w ** 2)``.

    Args:
        l1: the L1 factor (default 0.0).
        l2: the L2 factor (default 0.0).
    """

    def __init__(self, l1: float = 0.0, l2: float = 0.0):
        self.l1 = _factor(0.0 if l1 is None else l1, "l1")
        self.l2 = _factor(0.0 if l2 is None else l2, "l2")

    def __call__(self, x: Any) -> Node:
        x = convert_to_tensor(x)
        out = K.constant(0.0, x.dtype)
        if self.l1:
            out = out + K.constant(self.l1, x.dtype) * K.sum(K.abs(x))
        if self.l2:
            out = out + K.constant(self.l2, x.dtype) * K.sum(K.square(x))
        return out

    def get_config(self) -> dict:
        return {"l1": self.l1, "l2": self.l2}


class OrthogonalRegularizer(Regularizer):
    """Penalizes non-orthogonal rows (or columns) of a rank-2 weight:
    ``factor * 0.5 * sum(|P - diag(P)|) / (n (n - 1) / 2)`` with ``P`` the Gram matrix of the
    L2-normalized rows (``mode="rows"``) or columns (``"columns"``), Keras 3's formula.

    Args:
        factor: the factor (default 0.01).
        mode: ``"rows"`` or ``"columns"``.
    """

    def __init__(self, factor: float = 0.01, mode: str = "rows"):
        self.factor = _factor(factor, "factor")
        if mode not in ("rows", "columns"):
            raise ValueError(f"Invalid value for argument mode. Expected one of {{'rows', "
                             f"'columns'}}. Received: mode={mode!r}")
        self.mode = mode

    def __call__(self, x: Any) -> Node:
        x = convert_to_tensor(x)
        if x.ndim != 2:
            raise ValueError("Inputs to OrthogonalRegularizer must have rank 2. Received: "
                             f"inputs.shape={tuple(x.shape)}")
        axis = 1 if self.mode == "rows" else 0
        sq = K.sum(K.square(x), axis=axis, keepdims=True)
        unit = x * K.rsqrt(K.maximum(sq, K.constant(1e-12, x.dtype)))
        product = unit @ K.transpose(unit) if axis == 1 else K.transpose(unit) @ unit
        size = int(x.shape[1 - axis])
        if size < 2:
            return K.constant(0.0, x.dtype)
        off = K.constant(1.0 - np.eye(size), x.dtype)
        pairs = size * (size - 1) / 2.0
        return K.constant(self.factor * 0.5 / pairs, x.dtype) * K.sum(K.abs(product * off))

    def get_config(self) -> dict:
        return {"factor": self.factor, "mode": self.mode}


# Keras' lower-case aliases of the classes: ``l2(0.01)`` is ``L2(0.01)``
l1, l2, l1_l2, orthogonal_regularizer = L1, L2, L1L2, OrthogonalRegularizer

_CLASSES: dict[str, type[Regularizer]] = {"L1": L1, "L2": L2, "L1L2": L1L2,
                                          "OrthogonalRegularizer": OrthogonalRegularizer}
_STRINGS: dict[str, Any] = {"l1": L1, "l2": L2, "l1_l2": lambda: L1L2(l1=0.01, l2=0.01),
                            "L1": L1, "L2": L2, "L1L2": L1L2,
                            "orthogonal_regularizer": OrthogonalRegularizer,
                            "OrthogonalRegularizer": OrthogonalRegularizer}


def serialize(regularizer: Regularizer | None) -> dict | None:
    """Keras' serialized form ``{"module", "class_name", "config", "registered_name"}``
    (``None`` for ``None``)."""
    return serialize_object(regularizer, Regularizer, _CLASSES, "regularizer")


def deserialize(config: Any, custom_objects: dict | None = None) -> Regularizer | None:
    """Rebuilds a regularizer from :func:`serialize`'s dict (or a name)."""
    return deserialize_object(config, _STRINGS, _CLASSES, "regularizer", custom_objects)


def get(identifier: Any) -> Any:
    """Resolves a regularizer: ``None``, a name (``"l2"``), a config dict, a Regularizer or a
    callable ``w -> scalar tensor``.

    Raises:
        ValueError: for an unknown name (the message lists the valid names).
    """
    if identifier is None:
        return None
    if isinstance(identifier, str | dict):
        return deserialize(identifier)
    if isinstance(identifier, type):
        return identifier()
    if callable(identifier):
        return identifier
    raise TypeError(f"Could not interpret regularizer identifier {identifier!r}")


__all__ = ["Regularizer", "L1", "L2", "L1L2", "OrthogonalRegularizer", "l1", "l2", "l1_l2",
           "orthogonal_regularizer", "get", "serialize", "deserialize"]
