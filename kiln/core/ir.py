"""The graph IR: tensor types, frozen hash-consed nodes, graphs.

A :class:`Node` is one value computed by one op from input nodes and hashable attributes.
Nodes are immutable and deduplicated: building the same op on the same inputs with the same
attributes twice returns the same object (hash-consing), so equal subexpressions are shared
from the start and common-subexpression elimination comes almost free.

A :class:`Graph` is a set of output nodes (plus the input placeholders they depend on); its
topological order is computed iteratively, so graphs of 100,000+ nodes are fine.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

DTYPES = ("float32", "float64", "int32", "int64", "bool")
FLOAT_DTYPES = ("float32", "float64")
INT_DTYPES = ("int32", "int64")

Dim = int | None
Shape = tuple[Dim, ...]


def canonical_dtype(dtype: Any) -> str:
    """Returns kiln's name for a dtype given as a string, NumPy dtype or type."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise TypeError(f"unknown dtype {dtype!r}; kiln supports {', '.join(DTYPES)}") from exc
    if name not in DTYPES:
        raise TypeError(f"unsupported dtype {name!r}; kiln supports {', '.join(DTYPES)}")
    return name


@dataclass(frozen=True)
class TensorType:
    """The static type of a tensor: a shape (``None`` for unknown dims) and a dtype."""

    shape: Shape
    dtype: str = "float32"

    def __post_init__(self) -> None:
        shape = tuple(None if d is None else int(d) for d in self.shape)
        for d in shape:
            if d is not None and d < 0:
                raise ValueError(f"TensorType: negative dimension in shape {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    @property
    def size(self) -> int | None:
        """Number of elements, or None when a dimension is unknown."""
        if not self.is_static:
            return None
        return int(np.prod(self.dims, dtype=np.int64))

    @property
    def dims(self) -> tuple[int, ...]:
        """The shape of a static type as ints (kernels and plans see only static shapes).

        Raises:
            ValueError: a dimension is unknown (``None``).
        """
        if not self.is_static:
            raise ValueError(f"TensorType {self}: a static shape is needed here")
        return tuple(int(d) for d in self.shape if d is not None)

    def __str__(self) -> str:
        dims = ", ".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"


class HashableArray:
    """A read-only NumPy array usable as a node attribute (hash of dtype, shape and bytes)."""

    __slots__ = ("array", "_hash")

    def __init__(self, value: Any, dtype: str | None = None):
        arr = np.array(value, dtype=dtype, copy=True)
        arr.setflags(write=False)
        self.array = arr
        self._hash = hash((arr.dtype.str, arr.shape, arr.tobytes()))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HashableArray):
            return NotImplemented
        a, b = self.array, other.array
        return (
            self._hash == other._hash
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()
        )

    def __repr__(self) -> str:
        if self.array.size <= 8:
            return np.array2string(self.array, separator=",").replace("\n", "")
        return f"<array {self.array.dtype}{list(self.array.shape)}>"


def _freeze(value: Any) -> Any:
    """Makes an attribute value hashable: lists become tuples, arrays HashableArray."""
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        return HashableArray(value)
    if isinstance(value, np.generic):
        return value.item()
    hash(value)  # raises TypeError for unhashable attributes, as it should
    return value


_node_cache: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _key_part(value: Any) -> Any:
    """An attribute as part of a cache key. Objects hashed by identity (a Variable behind a
    param node) enter by id, so the cache never keeps them alive: the node holds them, and the
    node's entry disappears with the node."""
    if type(value).__hash__ is object.__hash__:
        return ("__id__", id(value))
    return value


class WeakIdentityDict(MutableMapping):
    """A mapping with weak keys compared by identity: ``weakref.WeakKeyDictionary`` for keys
    whose ``==`` is not a truth value (a symbolic tensor's ``==`` is elementwise, and the weak
    dictionary compares its keys' weak references with ``==``). An entry disappears with its
    key.

    Example:
        >>> d = WeakIdentityDict(); d[x] = "dense"; d[x]
        'dense'
    """

    def __init__(self, items: Any = None):
        self._data: dict[int, tuple[weakref.ref, Any]] = {}
        if items is not None:
            self.update(items)

    def __setitem__(self, key: Any, value: Any) -> None:
        k = id(key)
        data = self._data

        def _gone(ref: weakref.ref, k: int = k, data: dict = data) -> None:
            entry = data.get(k)
            if entry is not None and entry[0] is ref:
                del data[k]

        entry = data.get(k)
        if entry is not None and entry[0]() is key:
            data[k] = (entry[0], value)
        else:
            data[k] = (weakref.ref(key, _gone), value)

    def __getitem__(self, key: Any) -> Any:
        entry = self._data.get(id(key))
        if entry is None or entry[0]() is not key:
            raise KeyError(key)
        return entry[1]

    def __delitem__(self, key: Any) -> None:
        self[key]  # noqa: B018  (KeyError when absent)
        del self._data[id(key)]

    def __contains__(self, key: object) -> bool:
        entry = self._data.get(id(key))
        return entry is not None and entry[0]() is key

    def __iter__(self) -> Iterator[Any]:
        for ref, _ in list(self._data.values()):
            key = ref()
            if key is not None:
                yield key

    def __len__(self) -> int:
        return sum(1 for ref, _ in list(self._data.values()) if ref() is not None)


class NodeAttrTable(WeakIdentityDict):
    """A :class:`WeakIdentityDict` that keeps the value of a :class:`Node` key on the node
    itself (in its slot ``attr``), so the value dies with the node, in the same garbage
    collection: a weak-key table whose value reaches its key (a layer holding its output
    tensor) is never freed, and one whose value holds other cycles (a mask holding its input
    tensor) frees them one collection late. Other keys use the weak table."""

    def __init__(self, attr: str):
        super().__init__()
        self._attr = attr

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, Node):
            object.__setattr__(key, self._attr, value)
        else:
            super().__setitem__(key, value)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, Node):
            try:
                return getattr(key, self._attr)
            except AttributeError:
                raise KeyError(key) from None
        return super().__getitem__(key)

    def __delitem__(self, key: Any) -> None:
        if isinstance(key, Node):
            self[key]  # noqa: B018  (KeyError when absent)
            object.__delattr__(key, self._attr)
        else:
            super().__delitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, Node):
            return hasattr(key, self._attr)
        return super().__contains__(key)

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("a NodeAttrTable keeps its entries on the nodes: it cannot be iterated")

    def __len__(self) -> int:
        raise TypeError("a NodeAttrTable keeps its entries on the nodes: it has no length")


# Symbolic tensor -> its Keras mask (a bool tensor): what Keras keeps in
# ``tensor._keras_mask``. Layers set it (kiln/layers/base.py, docs/architecture.md "Masking");
# kept on the node, so a mask lives as long as its tensor.
TENSOR_MASKS: WeakIdentityDict = NodeAttrTable("_mask")


class Node:
    """One value in the graph: ``op(inputs, **attrs)`` with a static :class:`TensorType`.

    Do not construct directly; use :func:`make_node` (or the builders in ``kiln.ops``), which
    checks types with the op's shape rule and returns the existing node for equal arguments.
    """

    # ``_mask`` and ``_history``: entries of the side tables ``TENSOR_MASKS`` and
    # the layers' ``HISTORY`` (:class:`NodeAttrTable`), kept on the node to die with it.
    __slots__ = ("op", "inputs", "attrs", "type", "_key", "_mask", "_history", "__weakref__")

    op: str
    inputs: tuple[Node, ...]
    attrs: dict[str, Any]
    type: TensorType

    def __init__(self, op: str, inputs: tuple[Node, ...], attrs: dict[str, Any],
                 type_: TensorType, key: tuple):
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "attrs", attrs)
        object.__setattr__(self, "type", type_)
        object.__setattr__(self, "_key", key)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("kiln graph nodes are immutable")

    # --- type access -------------------------------------------------------------------
    @property
    def _keras_mask(self) -> Node | None:
        """The Keras mask this tensor carries (set by the layer that computed it; None when
        it carries none): Keras' ``tensor._keras_mask``."""
        return TENSOR_MASKS.get(self)

    @property
    def shape(self) -> Shape:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return self.type.ndim

    @property
    def name(self) -> str | None:
        return self.attrs.get("name")

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<kiln.Tensor {self.op}{label} {self.type}>"

    def __len__(self) -> int:
        if not self.shape or self.shape[0] is None:
            raise TypeError(f"len() of a tensor with unknown leading dimension: {self.type}")
        return self.shape[0]

    def __bool__(self) -> bool:
        raise TypeError(
            "the truth value of a symbolic kiln tensor is unknown until the graph runs; "
            "use kiln.ops.where / kiln.ops.logical_and instead of `if`/`and`"
        )

    __hash__ = object.__hash__  # identity hash: nodes are unique by construction

    # Operator overloads are attached by kiln.core.ops (see ops/_overloads.py) to keep this
    # module free of op definitions; declared here for the type checker only. (``==``/``!=``
    # are attached too, but typed as object's, which a Node keeps when compared to a
    # non-tensor.)
    if TYPE_CHECKING:
        def __add__(self, other: Any) -> Node: ...
        def __radd__(self, other: Any) -> Node: ...
        def __sub__(self, other: Any) -> Node: ...
        def __rsub__(self, other: Any) -> Node: ...
        def __mul__(self, other: Any) -> Node: ...
        def __rmul__(self, other: Any) -> Node: ...
        def __truediv__(self, other: Any) -> Node: ...
        def __rtruediv__(self, other: Any) -> Node: ...
        def __pow__(self, other: Any) -> Node: ...
        def __rpow__(self, other: Any) -> Node: ...
        def __matmul__(self, other: Any) -> Node: ...
        def __rmatmul__(self, other: Any) -> Node: ...
        def __lt__(self, other: Any) -> Node: ...
        def __le__(self, other: Any) -> Node: ...
        def __gt__(self, other: Any) -> Node: ...
        def __ge__(self, other: Any) -> Node: ...
        def __neg__(self) -> Node: ...
        def __abs__(self) -> Node: ...
        def __getitem__(self, key: Any) -> Node: ...
        @property
        def T(self) -> Node: ...  # noqa: N802 (Keras' name)


def make_node(op: str, inputs: Sequence[Node], attrs: dict[str, Any] | None,
              infer: Callable[..., TensorType]) -> Node:
    """Returns the unique node for ``op(inputs, **attrs)``, checking types with ``infer``."""
    attrs = {k: _freeze(v) for k, v in (attrs or {}).items()}
    inputs = tuple(inputs)
    key = (op, tuple(id(i) for i in inputs),
           tuple(sorted((k, _key_part(v)) for k, v in attrs.items())))
    try:
        found = _node_cache.get(key)
    except TypeError as exc:
        raise TypeError(f"{op}: attributes must be hashable, received {attrs}") from exc
    if found is not None:
        return found
    type_ = infer(*[i.type for i in inputs], **attrs)
    node = Node(op, inputs, attrs, type_, key)
    _node_cache[key] = node
    return node


_uid = itertools.count(1)


def fresh_uid() -> int:
    """A process-unique integer for source nodes that must never be merged."""
    return next(_uid)


def depends_on(outputs: Iterable[Node], node: Node) -> bool:
    """Whether ``node`` is reachable from ``outputs`` (e.g. a step reads its random key)."""
    return any(n is node for n in toposort(outputs))


def toposort(outputs: Iterable[Node]) -> list[Node]:
    """All nodes reachable from ``outputs``, inputs before users (iterative, no recursion)."""
    order: list[Node] = []
    done: set[int] = set()
    for root in outputs:
        if id(root) in done:
            continue
        stack: list[tuple[Node, int]] = [(root, 0)]
        on_stack = {id(root)}
        while stack:
            node, i = stack[-1]
            if i < len(node.inputs):
                stack[-1] = (node, i + 1)
                child = node.inputs[i]
                if id(child) in done:
                    continue
                if id(child) in on_stack:
                    raise ValueError(f"graph has a cycle through {child!r}")
                stack.append((child, 0))
                on_stack.add(id(child))
            else:
                stack.pop()
                on_stack.discard(id(node))
                done.add(id(node))
                order.append(node)
    return order


def rebuild(node: Node, inputs: Sequence[Node]) -> Node:
    """``node`` with new inputs (same op and attributes), type-checked by the op's rule."""
    if all(a is b for a, b in zip(inputs, node.inputs)) and len(inputs) == len(node.inputs):
        return node
    from kiln.core.ops.registry import get_op  # local: the registry imports this module

    return make_node(node.op, inputs, dict(node.attrs), get_op(node.op).infer_fn)


def substitute(outputs: Sequence[Node], mapping: dict[Node, Node]) -> list[Node]:
    """Rebuilds ``outputs`` with every node in ``mapping`` replaced by its value."""
    new: dict[int, Node] = {id(k): v for k, v in mapping.items()}
    for node in toposort(outputs):
        if id(node) in new:
            continue
        ins = [new.get(id(i), i) for i in node.inputs]
        new[id(node)] = rebuild(node, ins)
    return [new.get(id(o), o) for o in outputs]


class Graph:
    """A computation: placeholder inputs and output nodes (everything between is implied).

    Args:
        inputs: the placeholder nodes fed at run time, in call order.
        outputs: the nodes computed.

    Example:
        >>> g = Graph([x], [kiln.ops.relu(x)])
        >>> print(g.dump())
    """

    def __init__(self, inputs: Sequence[Node], outputs: Sequence[Node]):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self._order: list[Node] | None = None

    @property
    def nodes(self) -> list[Node]:
        """Topological order (inputs before users)."""
        if self._order is None:
            self._order = toposort(self.outputs)
        return self._order

    def __len__(self) -> int:
        return len(self.nodes)

    def users(self) -> dict[int, list[Node]]:
        """Maps id(node) -> the nodes that use it."""
        result: dict[int, list[Node]] = {id(n): [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                result[id(i)].append(n)
        return result

    def substitute(self, mapping: dict[Node, Node]) -> Graph:
        """A new graph with nodes replaced (inputs that are replaced are kept as they were)."""
        return Graph(self.inputs, substitute(self.outputs, mapping))

    def params(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "param"]

    def count_ops(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def dump(self) -> str:
        """A readable listing: one line per node, ``%i = op(%a, %b) {attrs} : type``."""
        names: dict[int, str] = {}
        lines = []
        for i, n in enumerate(self.nodes):
            names[id(n)] = f"%{i}"
            args = ", ".join(names[id(x)] for x in n.inputs)
            attrs = {k: v for k, v in n.attrs.items() if k not in ("uid",)}
            attr_s = ""
            if attrs:
                attr_s = " {" + ", ".join(f"{k}={_short(v)}" for k, v in attrs.items()) + "}"
            marks = []
            if any(n is x for x in self.inputs):
                marks.append("input")
            if any(n is o for o in self.outputs):
                marks.append("output " + str([j for j, o in enumerate(self.outputs) if o is n]))
            tail = f"   # {', '.join(marks)}" if marks else ""
            lines.append(f"%{i} = {n.op}({args}){attr_s} : {n.type}{tail}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.dump()


def _short(v: Any) -> str:
    s = repr(v) if not hasattr(v, "name") or not isinstance(v.name, str) else v.name
    return s if len(s) <= 60 else s[:57] + "..."
