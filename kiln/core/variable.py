"""Variables: persistent tensors (weights, optimizer slots) that graphs read and update."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from kiln.core.ir import Node, canonical_dtype

_counter = itertools.count()


class Variable:
    """A persistent, mutable tensor usable wherever a symbolic tensor is.

    In a graph a Variable appears as a ``param`` node; compiled functions read its current
    value on every call and may update it in place (``kiln.function(..., updates=...)``).

    Args:
        value: initial value (array-like); float values default to float32.
        name: optional name.
        trainable: the initial value of :attr:`trainable`.
        dtype: optional dtype; otherwise float32 for floats, the array's dtype for the rest.

    Example:
        >>> w = kiln.Variable(np.zeros((3, 2)), name="w")
        >>> y = x @ w
        >>> w.assign(np.ones((3, 2)))
    """

    # Device backends (kiln.core.backends.cuda) keep copies of the value: `_version` counts
    # host-side writes (assign, the executor's update writes); `_device_pull`, while set, copies
    # a newer device value back into `_value` before the host buffer is read.
    _version: int = 0
    _device_pull: Any = None

    def __init__(self, value: Any, name: str | None = None, trainable: bool = True,
                 dtype: str | None = None):
        arr = np.asarray(value)
        if dtype is None:
            dtype = "float32" if arr.dtype.kind == "f" else canonical_dtype(arr.dtype)
        self.dtype = canonical_dtype(dtype)
        # C order always: compiled programs read a Variable through its flat buffer
        self._value = np.array(arr, dtype=self.dtype, copy=True, order="C")
        self.name = name or f"variable_{next(_counter)}"
        self.trainable = trainable
        self._node: Node | None = None

    @property
    def trainable(self) -> bool:
        """Whether training updates this variable (default True); settable.

        ``Layer.add_weight(..., trainable=...)`` sets it. A layer's ``trainable_weights`` are
        its weights with ``trainable`` set (while the layer itself is trainable), and Keras'
        weight layout stores them first. ``Layer.trainable = False`` freezes a whole layer
        without changing this flag."""
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self._trainable = bool(value)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.shape

    @property
    def ndim(self) -> int:
        return self._value.ndim

    @property
    def value(self) -> np.ndarray:
        """The live host buffer (compiled functions update it in place); do not resize it.

        A newer copy on a device is copied back first. Write through :meth:`assign` (which
        bumps ``_version``) so that device copies see the change."""
        if self._device_pull is not None:
            self._device_pull(self)
        return self._value

    def numpy(self) -> np.ndarray:
        """A copy of the current value."""
        return self.value.copy()

    def assign(self, value: Any) -> Variable:
        """Overwrites the value in place; the shape must match."""
        arr = np.asarray(value, dtype=self.dtype)
        if arr.shape != self._value.shape:
            arr = np.broadcast_to(arr, self._value.shape) if arr.ndim == 0 else arr
            if arr.shape != self._value.shape:
                raise ValueError(f"Variable {self.name!r}: cannot assign a value of shape "
                                 f"{arr.shape} to a variable of shape {self._value.shape}")
        self._device_pull = None  # the host value now wins over any device copy
        self._value[...] = arr
        self._version += 1
        return self

    def __kiln_node__(self) -> Node:
        if self._node is None:
            from kiln.core.ops.source import param_node

            self._node = param_node(self, self._value.shape, self.dtype, self.name)
        return self._node

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self.value
        return value if dtype is None else value.astype(dtype)

    def __repr__(self) -> str:
        return f"<kiln.Variable {self.name!r} shape={self.shape} dtype={self.dtype}>"

    # Arithmetic works like on the param node (operators are attached by kiln.core.ops).
