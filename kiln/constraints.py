"""Weight constraints (Keras 3 names, defaults and formulas): ``MaxNorm``, ``MinMaxNorm``,
``NonNeg``, ``UnitNorm``, the ``Constraint`` base, ``get``/``serialize``/``deserialize``.

A constraint maps a weight to its projected value, as graph nodes. Layers take them as
``kernel_constraint=`` ... (stored on the weight's ``Variable.constraint`` by
``Layer.add_weight``); the optimizer applies them to the new value of each weight it updates,
inside the compiled train step, as Keras does after every optimizer step
(docs/features.md, "Constraints").

Example:
    >>> layer = kiln.layers.Dense(8, kernel_constraint=kiln.constraints.MaxNorm(2.0))
"""

from __future__ import annotations

import math
from typing import Any

import kiln.ops as K
from kiln.config import epsilon
from kiln.core import Node, convert_to_tensor
from kiln.registry import deserialize_object, serialize_object

EPSILON = 1e-7  # the default of kiln.config.epsilon(), which the constraints read


class Constraint:
    """Base class: ``__call__(w) -> projected w`` (graph nodes) and ``get_config``.

    Example:
        >>> class Clip(kiln.constraints.Constraint):
        ...     def __init__(self, c=1.0):
        ...         self.c = c
        ...     def __call__(self, w):
        ...         return kiln.ops.clip(w, -self.c, self.c)
        ...     def get_config(self):
        ...         return {"c": self.c}
    """

    def __call__(self, w: Any) -> Any:
        return w

    def get_config(self) -> dict:
        return {}

    @classmethod
    def from_config(cls, config: dict) -> Constraint:
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def _number(who: str, name: str, value: Any, low: float = 0.0) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value)
            or value < low):
        raise ValueError(f"{who}: {name} must be a number >= {low:g}, received {value!r}")
    return float(value)


def _axis(axis: Any) -> Any:
    return list(axis) if isinstance(axis, (list, tuple)) else int(axis)


def _norms(w: Node, axis: Any) -> Node:
    ax = tuple(axis) if isinstance(axis, list) else axis
    return K.sqrt(K.sum(K.square(w), axis=ax, keepdims=True))


def _c(value: float, like: Node) -> Node:
    return K.constant(value, like.dtype)


class MaxNorm(Constraint):
    """Rescales each slice along ``axis`` to a norm of at most ``max_value``:
    ``w * clip(n, 0, max_value) / (eps + n)``.

    Args:
        max_value: the largest norm (default 2).
        axis: the axis (or axes) the norms are taken over (default 0: the input axis of a
            Dense kernel; ``[0, 1, 2]`` for a Conv2D kernel).
    """

    def __init__(self, max_value: float = 2.0, axis: Any = 0):
        self.max_value = _number("MaxNorm", "max_value", max_value)
        self.axis = _axis(axis)

    def __call__(self, w: Any) -> Node:
        w = convert_to_tensor(w)
        norms = _norms(w, self.axis)
        desired = K.clip(norms, _c(0.0, w), _c(self.max_value, w))
        return w * (desired / (_c(epsilon(), w) + norms))

    def get_config(self) -> dict:
        return {"max_value": self.max_value, "axis": self.axis}


class MinMaxNorm(Constraint):
    """Moves each slice's norm toward ``[min_value, max_value]`` at ``rate``:
    ``desired = rate * clip(n, min, max) + (1 - rate) * n``, ``w * desired / (eps + n)``."""

    def __init__(self, min_value: float = 0.0, max_value: float = 1.0, rate: float = 1.0,
                 axis: Any = 0):
        self.min_value = _number("MinMaxNorm", "min_value", min_value)
        self.max_value = _number("MinMaxNorm", "max_value", max_value)
        if self.max_value < self.min_value:
            raise ValueError(f"MinMaxNorm: max_value ({max_value!r}) must be >= min_value "
                             f"({min_value!r})")
        self.rate = _number("MinMaxNorm", "rate", rate)
        self.axis = _axis(axis)

    def __call__(self, w: Any) -> Node:
        w = convert_to_tensor(w)
        norms = _norms(w, self.axis)
        clipped = K.clip(norms, _c(self.min_value, w), _c(self.max_value, w))
        desired = _c(self.rate, w) * clipped + _c(1.0 - self.rate, w) * norms
        return w * (desired / (_c(epsilon(), w) + norms))

    def get_config(self) -> dict:
        return {"min_value": self.min_value, "max_value": self.max_value, "rate": self.rate,
                "axis": self.axis}


class NonNeg(Constraint):
    """Zeroes the negative entries: ``w * (w >= 0)``."""

    def __call__(self, w: Any) -> Node:
        w = convert_to_tensor(w)
        return w * K.cast(w >= _c(0.0, w), w.dtype)


class UnitNorm(Constraint):
    """Scales each slice along ``axis`` to unit norm: ``w / (eps + n)``."""

    def __init__(self, axis: Any = 0):
        self.axis = _axis(axis)

    def __call__(self, w: Any) -> Node:
        w = convert_to_tensor(w)
        return w / (_c(epsilon(), w) + _norms(w, self.axis))

    def get_config(self) -> dict:
        return {"axis": self.axis}


_CLASSES: dict[str, type[Constraint]] = {"Constraint": Constraint, "MaxNorm": MaxNorm,
                                         "MinMaxNorm": MinMaxNorm, "NonNeg": NonNeg,
                                         "UnitNorm": UnitNorm}
_STRINGS: dict[str, type[Constraint]] = {"max_norm": MaxNorm, "min_max_norm": MinMaxNorm,
                                         "non_neg": NonNeg, "unit_norm": UnitNorm,
                                         "maxnorm": MaxNorm, "nonneg": NonNeg,
                                         "unitnorm": UnitNorm, **_CLASSES}
# Keras' lower-case aliases of the classes
max_norm, min_max_norm, non_neg, unit_norm = MaxNorm, MinMaxNorm, NonNeg, UnitNorm


def serialize(constraint: Constraint | None) -> dict | None:
    """Keras' serialized form ``{"module", "class_name", "config", "registered_name"}``
    (``None`` for ``None``)."""
    return serialize_object(constraint, Constraint, _CLASSES, "constraint")


def deserialize(config: Any, custom_objects: dict | None = None) -> Constraint | None:
    """Rebuilds a constraint from :func:`serialize`'s dict (or a name)."""
    return deserialize_object(config, _STRINGS, _CLASSES, "constraint", custom_objects)


def get(identifier: Any) -> Any:
    """Resolves a constraint: None, a name (``"non_neg"``, ``"MaxNorm"``), a config dict, a
    Constraint (class or instance) or a callable ``w -> w``.

    Raises:
        ValueError: for an unknown name; TypeError for anything else.
    """
    if identifier is None:
        return None
    if isinstance(identifier, (str, dict)):
        return deserialize(identifier)
    if isinstance(identifier, type) and issubclass(identifier, Constraint):
        return identifier()
    if callable(identifier):
        return identifier
    raise TypeError(f"Could not interpret constraint identifier {identifier!r} "
                    f"({type(identifier).__name__})")


__all__ = ["Constraint", "MaxNorm", "MinMaxNorm", "NonNeg", "UnitNorm", "max_norm",
           "min_max_norm", "non_neg", "unit_norm", "get", "serialize", "deserialize"]


def apply(var: Any, value: Node, who: str) -> Node:
    """``var.constraint(value)`` (the weight's constraint, set by ``Layer.add_weight``),
    checked to keep the variable's shape and cast to its dtype; ``value`` when it has none.
    The optimizers call it on each updated weight's new value."""
    constraint = getattr(var, "constraint", None)
    if constraint is None:
        return value
    out = convert_to_tensor(constraint(value))
    if tuple(out.shape) != tuple(var.shape):
        raise ValueError(f"{who}: the constraint {constraint!r} of {var.name!r} returned shape "
                         f"{tuple(out.shape)}, the variable has shape {tuple(var.shape)}")
    return out if out.dtype == var.dtype else K.cast(out, var.dtype)
