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

import kiln.ops as K
from kiln.core import Node, convert_to_tensor


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


_CLASSES: dict[str, type[Regularizer]] = {"L1": L1, "L2": L2, "L1L2": L1L2}
_STRINGS: dict[str, Any] = {"l1": L1, "l2": L2, "l1_l2": lambda: L1L2(l1=0.01, l2=0.01),
                            "L1": L1, "L2": L2, "L1L2": L1L2}


def serialize(regularizer: Regularizer | None) -> dict | None:
    """Keras' serialized form ``{"module", "class_name", "config", "registered_name"}``
    (``None`` for ``None``)."""
    if regularizer is None:
        return None
    if not isinstance(regularizer, Regularizer):
        raise TypeError(f"regularizers.serialize: expected a Regularizer, received "
                        f"{regularizer!r} (plain functions cannot be stored in a config; "
                        "subclass kiln.regularizers.Regularizer)")
    cls = type(regularizer)
    builtin = _CLASSES.get(cls.__name__) is cls
    return {"module": "keras.regularizers" if builtin else cls.__module__,
            "class_name": cls.__name__, "config": regularizer.get_config(),
            "registered_name": None if builtin else cls.__name__}


def _unknown(name: Any) -> ValueError:
    return ValueError(f"Unknown regularizer {name!r}; valid names: {', '.join(sorted(_STRINGS))}")


def deserialize(config: Any, custom_objects: dict | None = None) -> Regularizer | None:
    """Rebuilds a regularizer from ``serialize``'s dict (or a name)."""
    if config is None:
        return None
    if isinstance(config, str):
        if config not in _STRINGS:
            raise _unknown(config)
        return _STRINGS[config]()
    if not isinstance(config, dict) or "class_name" not in config:
        raise TypeError(f"regularizers.deserialize: expected a dict with 'class_name', received "
                        f"{config!r}")
    name = config["class_name"]
    cls = (custom_objects or {}).get(name) or _CLASSES.get(name)
    if cls is None:
        raise _unknown(name)
    return cls.from_config(dict(config.get("config") or {}))


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


__all__ = ["Regularizer", "L1", "L2", "L1L2", "get", "serialize", "deserialize"]
