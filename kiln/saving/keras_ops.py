"""Keras 3 *operation* nodes of a functional config, mapped to kiln ops.

When a Keras 3 functional model applies a ``keras.ops`` function to symbolic tensors, its
config records the operation as a node of its own, next to the layers::

    {"module": "keras.src.ops.numpy", "class_name": "NotEqual", "registered_name": "NotEqual",
     "config": {"name": "not_equal"}, "name": "not_equal",
     "inbound_nodes": [{"args": [<ids tensor>, 0], "kwargs": {}}]}

The common case is a mask: ``Embedding(mask_zero=True)`` computes its mask as
``keras.ops.not_equal(ids, 0)`` (``Masking``: ``any(not_equal(x, v), axis=-1)``), and Keras
records that computation in the config and passes its output to the next layer as the
``mask=`` argument of that layer's call.

kiln reads such a node as a :class:`KerasOperation` layer: ONLY the operations listed in
:data:`OPERATIONS` (class name and Keras module must both match), each mapped to one kiln
op; their config keys are checked against the known arguments. Nothing named in a file is
imported or executed; any other operation is refused with a clear error before anything is
built. On saving, a ``KerasOperation`` is written back in Keras' own form, so the file loads
in Keras again.
"""

from __future__ import annotations

import copy
from typing import Any

import kiln.ops as K
from kiln.layers.base import Layer

_NUMPY = "keras.src.ops.numpy"
_CORE = "keras.src.ops.core"

# Keras class name -> (Keras module, number of tensor arguments, config keys besides "name").
OPERATIONS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "NotEqual": (_NUMPY, 2, ()),
    "Equal": (_NUMPY, 2, ()),
    "Greater": (_NUMPY, 2, ()),
    "GreaterEqual": (_NUMPY, 2, ()),
    "Less": (_NUMPY, 2, ()),
    "LessEqual": (_NUMPY, 2, ()),
    "LogicalAnd": (_NUMPY, 2, ()),
    "LogicalOr": (_NUMPY, 2, ()),
    "LogicalNot": (_NUMPY, 1, ()),
    "Any": (_NUMPY, 1, ("axis", "keepdims")),
    "All": (_NUMPY, 1, ("axis", "keepdims")),
    "Cast": (_CORE, 1, ("dtype",)),
}

_BINARY = {"NotEqual": K.not_equal, "Equal": K.equal, "Greater": K.greater,
           "GreaterEqual": K.greater_equal, "Less": K.less, "LessEqual": K.less_equal,
           "LogicalAnd": K.logical_and, "LogicalOr": K.logical_or}


def is_operation_entry(entry: Any, is_known_class: Any = None) -> bool:
    """True for a functional-config entry that is a Keras operation node (not a layer): its
    module is ``keras.src.ops.*``; or, in legacy ``.h5`` configs that have no module, its
    class is one of :data:`OPERATIONS` and ``is_known_class(name)`` (kiln's class lookup)
    knows no layer of that name."""
    if not isinstance(entry, dict):
        return False
    module = entry.get("module")
    if isinstance(module, str):
        return module.startswith("keras.src.ops.")
    name = entry.get("class_name")
    return module is None and isinstance(name, str) and name in OPERATIONS and \
        "inbound_nodes" in entry and not (is_known_class and is_known_class(name))


def check_operation_entry(entry: dict, source: str) -> None:
    """Refuses an operation node kiln does not know (before anything is built)."""
    op = entry.get("class_name")
    known = OPERATIONS.get(op) if isinstance(op, str) else None
    module = entry.get("module", known[0] if known else None)  # legacy .h5: no module
    name = (entry.get("config") or {}).get("name", entry.get("name", "?"))
    if known is None or known[0] != module:
        raise ValueError(
            f"{source}: the functional config applies the Keras operation {module}.{op} "
            f"(node {name!r}) between its layers; kiln maps only these operations to its own "
            f"ops: {sorted(OPERATIONS)}. Wrap the computation in a layer registered with "
            "@kiln.saving.register_serializable(), or rebuild the model in code and use "
            "load_weights")
    extra = set(entry.get("config") or {}) - {"name"} - set(known[2])
    if extra:
        raise ValueError(f"{source}: Keras operation {op} (node {name!r}) has unknown "
                         f"arguments {sorted(extra)}; kiln knows {list(known[2])}")


class KerasOperation(Layer):
    """One Keras 3 operation node of a functional model (``not_equal``, ``any`` ...), run as
    the matching kiln op. Created by the loader from a Keras config; it has no weights.

    Args:
        operation: the Keras class name (a key of :data:`OPERATIONS`).
        arguments: the operation's own arguments from Keras' config (``axis``, ``keepdims``,
            ``dtype``).
    """

    def __init__(self, operation: str, arguments: dict | None = None, **kwargs: Any):
        if operation not in OPERATIONS:
            raise ValueError(f"KerasOperation: unknown operation {operation!r}; known: "
                             f"{sorted(OPERATIONS)}")
        arguments = dict(arguments or {})
        extra = set(arguments) - set(OPERATIONS[operation][2])
        if extra:
            raise ValueError(f"KerasOperation {operation}: unknown arguments {sorted(extra)}")
        super().__init__(**kwargs)
        self.operation = operation
        self.arguments = arguments

    def call(self, inputs: Any, *args: Any) -> Any:
        op, n = self.operation, OPERATIONS[self.operation][1]
        if len(args) != n - 1:
            raise ValueError(f"Layer '{self.name}' (Keras operation {op}) takes {n} "
                             f"argument(s), received {1 + len(args)}")
        if op in _BINARY:
            return _BINARY[op](inputs, args[0])
        if op == "LogicalNot":
            return K.logical_not(inputs)
        if op == "Cast":
            return K.cast(inputs, _dtype_name(self.arguments["dtype"]))
        axis = self.arguments.get("axis")
        if isinstance(axis, list):
            axis = tuple(axis)
        keepdims = bool(self.arguments.get("keepdims", False))
        fn = K.any if op == "Any" else K.all
        return fn(inputs, axis=axis, keepdims=keepdims)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        return None

    def get_config(self) -> dict:
        return {"name": self.name, "operation": self.operation,
                "arguments": copy.deepcopy(self.arguments)}

    @classmethod
    def from_config(cls, config: dict) -> KerasOperation:
        return cls(**config)


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, dict):  # a serialized DTypePolicy
        dtype = (dtype.get("config") or {}).get("name", dtype)
    return str(dtype)


def to_kiln_entry(entry: dict) -> dict:
    """A Keras operation entry rewritten as a ``KerasOperation`` layer entry (name and
    inbound nodes kept)."""
    config = dict(entry.get("config") or {})
    name = config.pop("name", entry.get("name"))
    out = dict(entry)
    out.update({"module": "kiln.saving.keras_ops", "class_name": "KerasOperation",
                "registered_name": None,
                "config": {"name": name, "operation": entry["class_name"],
                           "arguments": config}})
    return out


def to_keras_entry(entry: dict) -> dict:
    """The inverse of :func:`to_kiln_entry`: a serialized ``KerasOperation`` as Keras'
    operation node."""
    cfg = entry.get("config") or {}
    op = cfg.get("operation")
    if op not in OPERATIONS:
        raise ValueError(f"KerasOperation: unknown operation {op!r}; known: "
                         f"{sorted(OPERATIONS)}")
    out = {k: v for k, v in entry.items() if k != "build_config"}  # Keras: ops have none
    out.update({"module": OPERATIONS[op][0], "class_name": op,
                "config": {"name": cfg.get("name", entry.get("name")),
                           **copy.deepcopy(cfg.get("arguments") or {})},
                "registered_name": op})
    return out
