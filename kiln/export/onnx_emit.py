"""The ONNX emitter: one ONNX graph (the model's, or a loop body's) being written from kiln
nodes (docs/features.md, "Export to ONNX").

A *rule* (``onnx_rules.py``, ``onnx_rules_nn.py``, ``onnx_scan.py``) translates one kiln op:
``rule(ctx, call) -> name`` reads the op's attributes and its inputs' ONNX value names from
the :class:`Call` and returns the ONNX value name of the result, adding nodes with
:meth:`Emitter.op` and constants with :meth:`Emitter.const`. Names are unique across the
whole model (loop bodies included), so a body may read any outer value by its name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.core import Node, TensorType


class ExportError(ValueError):
    """A graph kiln cannot write as ONNX (the message names the op and, when known, the
    layer it came from)."""


def require_onnx() -> Any:
    """The ``onnx`` module, or an ImportError saying how to install it."""
    try:
        import onnx
    except ImportError as exc:
        raise ImportError('exporting to ONNX needs the onnx package: pip install '
                          '"kiln-nn[onnx]" (or pip install onnx onnxruntime)') from exc
    return onnx


#: kiln dtype -> onnx.TensorProto data type
ONNX_DTYPES = {"float32": 1, "float64": 11, "int32": 6, "int64": 7, "bool": 9}


@dataclass
class Call:
    """One op to translate: its name, attributes, input value names and types, result type,
    and the kiln node (None for an instruction of a ``fused`` program)."""

    op: str
    attrs: dict[str, Any]
    inputs: list[str]
    in_types: list[TensorType]
    type: TensorType
    node: Node | None = None

    @property
    def dtype(self) -> str:
        return self.type.dtype


Rule = Callable[["Emitter", Call], str]


class Names:
    """Unique value names for a whole model (graph inputs and outputs reserved first)."""

    def __init__(self, reserved: Iterable[str] = ()):
        self.used: set[str] = set(reserved)
        self._count = 0

    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_./:-]", "_", hint) or "v"
        name = base
        while name in self.used:
            self._count += 1
            name = f"{base}_{self._count}"
        self.used.add(name)
        return name


@dataclass
class Options:
    """Export settings the rules read."""

    opset: int
    unroll: int = 0  # unroll loops of static length up to this many steps (0: use Scan)
    origin: Mapping[Node, str] = field(default_factory=dict)  # kiln node -> layer name


class Emitter:
    """Collects the nodes (and, for the model's graph, the initializers) of one ONNX graph.

    Args:
        rules: op name -> rule.
        names: the model's name allocator (shared with every body).
        options: export settings.
        parent: the emitter of the enclosing graph (for a loop body), or None.
    """

    def __init__(self, rules: dict[str, Rule], names: Names, options: Options,
                 parent: Emitter | None = None):
        self.onnx = require_onnx()
        self.rules = rules
        self.names = names
        self.options = options
        self.parent = parent
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.multi: dict[int, list[str]] = {}  # id(scan node) -> its ONNX outputs
        self._known: dict[str, np.ndarray] = {}  # values known at export time
        self._consts: dict[tuple, str] = {}
        self._params: dict[int, str] = {}

    @property
    def opset(self) -> int:
        return self.options.opset

    def child(self) -> Emitter:
        """An emitter for a subgraph (a loop body) of this graph."""
        return Emitter(self.rules, self.names, self.options, parent=self)

    @property
    def root(self) -> Emitter:
        return self if self.parent is None else self.parent.root

    # ---- nodes ---------------------------------------------------------------------------
    def op(self, op_type: str, inputs: Sequence[str], *, n_out: int = 1, hint: str = "",
           **attrs: Any) -> Any:
        """Adds one ONNX node; returns its output name (a list when ``n_out != 1``)."""
        outs = [self.names.fresh(hint or op_type.lower()) for _ in range(n_out)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), outs,
                                                     name=f"{op_type}:{outs[0]}", **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value: Any, dtype: Any = None, hint: str = "const") -> str:
        """A constant value: an initializer of the model's graph, a ``Constant`` node in a
        body. Small constants are shared."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes()) if arr.size <= 1024 else None
        if key is not None and key in self._consts:
            return self._consts[key]
        name = self.names.fresh(hint)
        tensor = self.onnx.numpy_helper.from_array(np.asarray(arr, order="C"), name)
        if self.parent is None:
            self.initializers.append(tensor)
        else:
            self.nodes.append(self.onnx.helper.make_node("Constant", [], [name],
                                                         name=f"Constant:{name}", value=tensor))
        self._known[name] = arr
        if key is not None:
            self._consts[key] = name
        return name

    def ints(self, values: Iterable[int]) -> str:
        """A 1-D int64 constant (shapes, axes, pads)."""
        return self.const(np.asarray(list(values), dtype=np.int64), hint="ints")

    def scalar(self, value: float, dtype: str) -> str:
        return self.const(np.asarray(value, dtype=dtype), hint="scalar")

    def param(self, node: Node) -> str:
        """A Variable's current value as an initializer of the model's graph, named after it."""
        root = self.root
        var = node.attrs["var"]
        if id(var) not in root._params:
            name = self.names.fresh(node.attrs.get("name") or "weight")
            arr = np.asarray(var.value, dtype=node.dtype, order="C")
            root.initializers.append(self.onnx.numpy_helper.from_array(arr, name))
            root._known[name] = arr
            root._params[id(var)] = name
        return root._params[id(var)]

    def known(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is a constant or a weight of this graph or an
        enclosing one (so a rule can transform it at export time)."""
        e: Emitter | None = self
        while e is not None:
            if name in e._known:
                return e._known[name]
            e = e.parent
        return None

    # ---- helpers the rules share ---------------------------------------------------------
    def transpose(self, name: str, perm: Sequence[int]) -> str:
        """``Transpose``, done at export time for a constant or weight (the result is an
        initializer of the model's graph, which every body may read)."""
        perm = [int(p) for p in perm]
        if perm == sorted(perm):
            return name
        arr = self.known(name)
        if arr is not None:
            return self.root.const(np.transpose(arr, perm), hint=f"{name}_t")
        return self.op("Transpose", [name], perm=perm)

    def shape_of(self, name: str, t: TensorType) -> str:
        """The shape of a value of type ``t``: a constant when static, else ``Shape``."""
        if t.is_static:
            return self.ints(t.shape)
        return self.op("Shape", [name])

    def reduce(self, op_type: str, x: str, axes: Sequence[int] | None, keepdims: bool) -> str:
        """``Reduce*`` over ``axes`` (None: all); axes are an input from opset 18 (13 for
        ReduceSum), an attribute before."""
        keep = int(bool(keepdims))
        if axes is None:
            return self.op(op_type, [x], keepdims=keep)
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.op(op_type, [x, self.ints(axes)], keepdims=keep)
        return self.op(op_type, [x], axes=[int(a) for a in axes], keepdims=keep)

    # ---- emitting kiln nodes -------------------------------------------------------------
    def emit(self, nodes: Sequence[Node], env: dict[int, str]) -> None:
        """Translates ``nodes`` (a topological order) into this graph; ``env`` maps id(node)
        -> ONNX value name and holds the bound inputs on entry."""
        for n in nodes:
            if id(n) in env:
                continue
            rule = self.rules.get(n.op)
            if rule is None:
                raise ExportError(f"cannot export to ONNX: op {n.op!r}{self.layer_of(n)} has no "
                                  "ONNX translation")
            call = Call(n.op, dict(n.attrs), [env[id(i)] for i in n.inputs],
                        [i.type for i in n.inputs], n.type, n)
            env[id(n)] = rule(self, call)

    def layer_of(self, node: Node | None) -> str:
        """`` (from layer 'name')`` when the node's layer is known, else ``""``."""
        layer = self.options.origin.get(node) if node is not None else None
        return f" (from layer {layer!r})" if layer else ""


def value_info(onnx: Any, name: str, t: TensorType, dims: Sequence[Any] | None = None) -> Any:
    """A typed graph input/output; unknown dims stay unnamed unless ``dims`` names them."""
    shape = list(dims) if dims is not None else list(t.shape)
    return onnx.helper.make_tensor_value_info(name, ONNX_DTYPES[t.dtype], shape)


def prune(nodes: Sequence[Any], outputs: Iterable[str]) -> list[Any]:
    """The nodes some output needs (dead code removed); a node whose subgraph reads an outer
    value keeps that value alive."""
    needed = set(outputs)
    kept = []
    for n in reversed(nodes):
        if any(o in needed for o in n.output):
            kept.append(n)
            needed.update(n.input)
            needed.update(subgraph_reads(n))
    kept.reverse()
    return kept


def subgraph_reads(node: Any) -> set[str]:
    """Every name read inside the subgraphs (loop bodies) of ``node``, recursively."""
    out: set[str] = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.HasField("g") else list(attr.graphs)
        for g in graphs:
            for n in g.node:
                out.update(n.input)
                out.update(subgraph_reads(n))
            out.update(o.name for o in g.output)
    return out
