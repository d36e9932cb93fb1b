"""The loop op's data: the :class:`Body` (a traced step), the types of a loop's outputs, the
packed buffer and its ``scan_output`` views, the NumPy reference of a loop (docs/architecture.md,
"Loops"; the op is built in :mod:`kiln.core.ops.scan`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.core.ir import Graph, Node, TensorType, make_node
from kiln.core.layout import Layout, contiguous_strides, prod
from kiln.core.ops._rules import fmt
from kiln.core.ops.registry import get_op


# ---- the body ----------------------------------------------------------------------------------
class Body:
    """A loop body: a graph from ``carries + xs + consts`` placeholders to ``new carries + ys``.

    Identity-hashed (a node attribute). ``base`` is the body this one augments with residual
    outputs for the gradient (see the module docstring).
    """

    def __init__(self, carries: Sequence[Node], xs: Sequence[Node], consts: Sequence[Node],
                 new_carries: Sequence[Node], ys: Sequence[Node], base: Body | None = None,
                 name: str = "scan"):
        self.carries, self.xs, self.consts = list(carries), list(xs), list(consts)
        self.new_carries, self.ys = list(new_carries), list(ys)
        self.graph = Graph(self.carries + self.xs + self.consts, self.new_carries + self.ys)
        self.base = base
        self.name = name
        self._types: dict[tuple, list[TensorType]] = {}
        self._grad: Any = None
        self.optimized = False  # set by the loops pass on the bodies it optimized
        self.report: Any = None  # that pass's report of this body

    @property
    def n_carry(self) -> int:
        return len(self.carries)

    @property
    def n_x(self) -> int:
        return len(self.xs)

    @property
    def n_y(self) -> int:
        return len(self.ys)

    def __repr__(self) -> str:
        return (f"<scan body {self.name}: {self.n_carry} carries, {self.n_x} xs, "
                f"{len(self.consts)} consts -> {self.n_y} ys, {len(self.graph)} nodes>")

    def output_types(self, in_types: Sequence[TensorType]) -> list[TensorType]:
        """The body's output types for these input types (shapes resolved through the body's
        ops, so concrete inputs give concrete outputs); cached."""
        key = tuple(in_types)
        hit = self._types.get(key)
        if hit is not None:
            return hit
        types: dict[int, TensorType] = {id(p): t for p, t in zip(self.graph.inputs, in_types)}
        for n in self.graph.nodes:
            if id(n) in types:
                continue
            if n.op == "placeholder":
                raise ValueError(f"{self.name}: body reads a placeholder it was not given")
            if not n.inputs:
                types[id(n)] = n.type
                continue
            types[id(n)] = get_op(n.op).infer(*[types[id(i)] for i in n.inputs], **n.attrs)
        out = [types[id(o)] for o in self.graph.outputs]
        self._types[key] = out
        return out


def _compatible(a: TensorType, b: TensorType) -> bool:
    return a.dtype == b.dtype and a.ndim == b.ndim and all(
        x is None or y is None or x == y for x, y in zip(a.shape, b.shape))


def _check_inputs(types: Sequence[TensorType], body: Body, length: int | None
                  ) -> tuple[int | None, list[TensorType]]:
    """Checks the scan's input types against the body's; returns (T, the body input types)."""
    nc, nx = body.n_carry, body.n_x
    if len(types) != len(body.graph.inputs):
        raise ValueError(f"{body.name}: expected {len(body.graph.inputs)} inputs, received "
                         f"{len(types)}")
    steps = {t.shape[0] for t in types[nc:nc + nx] if t.shape and t.shape[0] is not None}
    if length is not None:
        steps.add(int(length))
    if len(steps) > 1:
        raise ValueError(f"{body.name}: sequences of different lengths "
                         f"{[fmt(t.shape) for t in types[nc:nc + nx]]} (length={length})")
    T = steps.pop() if steps else None
    body_in: list[TensorType] = []
    for k, (t, ph) in enumerate(zip(types, body.graph.inputs)):
        if nc <= k < nc + nx:
            if t.ndim < 1:
                raise ValueError(f"{body.name}: sequence input {k - nc} must have a leading "
                                 f"time axis, received {t}")
            t = TensorType(t.shape[1:], t.dtype)
        if not _compatible(t, ph.type):
            raise ValueError(f"scan ({body.name}): input {k} has type {t}, the body was traced for "
                             f"{ph.type}")
        body_in.append(t)
    return T, body_in


def output_types(types: Sequence[TensorType], body: Body, length: int | None
                 ) -> list[TensorType]:
    """Types of the scan's outputs: final carries, then ys stacked along a leading time axis."""
    T, body_in = _check_inputs(types, body, length)
    outs = body.output_types(body_in)
    nc = body.n_carry
    result = []
    for k, t in enumerate(outs):
        if k < nc:
            want = body_in[k]
            if not _compatible(t, want):
                raise ValueError(f"{body.name}: the body returns carry {k} as {t}, it entered "
                                 f"as {want}; a carry must keep its shape and dtype")
            result.append(want if want.is_static or not t.is_static else t)
        else:
            result.append(TensorType((T,) + t.shape, t.dtype))
    return result


# ---- scan: the loop node -----------------------------------------------------------------------
def _packed_type(outs: Sequence[TensorType], name: str) -> TensorType:
    dtypes = {t.dtype for t in outs}
    if len(dtypes) > 1:
        raise TypeError(f"{name}: carries and per-step outputs must share one dtype, received "
                        f"{', '.join(str(t) for t in outs)}; use kiln.ops.cast")
    total: int | None = 0
    for t in outs:
        total = None if total is None or t.size is None else total + t.size
    return TensorType((total,), dtypes.pop() if dtypes else "float32")


def _scan_infer(*types: TensorType, body: Body, length: int | None, reverse: bool
                ) -> TensorType:
    return _packed_type(output_types(types, body, length), body.name)


def offsets(types: Sequence[TensorType]) -> list[int]:
    """Element offset of each output in the packed buffer (concrete types)."""
    result, acc = [], 0
    for t in types:
        result.append(acc)
        acc += prod(t.dims)
    return result


def evaluate(graph: Graph, values: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Runs ``graph`` with the NumPy references (the loop's specification)."""
    env: dict[int, Any] = {id(p): v for p, v in zip(graph.inputs, values)}
    for n in graph.nodes:
        if id(n) in env:
            continue
        if n.op == "param":
            env[id(n)] = n.attrs["var"].value
            continue
        value = np.asarray(get_op(n.op).ref(*[env[id(i)] for i in n.inputs], **n.attrs))
        env[id(n)] = value.astype(n.dtype, copy=False)
    return [env[id(o)] for o in graph.outputs]


def _scan_ref(*arrays: np.ndarray, body: Body, length: int | None, reverse: bool) -> np.ndarray:
    types = [TensorType(np.shape(a), np.asarray(a).dtype.name) for a in arrays]
    outs = output_types(types, body, length)
    T = outs[body.n_carry].dims[0] if body.n_y else _steps(types, body, length)
    nc, nx = body.n_carry, body.n_x
    carry = [np.asarray(a) for a in arrays[:nc]]
    xs, consts = arrays[nc:nc + nx], list(arrays[nc + nx:])
    ys = [np.zeros(t.dims, t.dtype) for t in outs[nc:]]
    with np.errstate(all="ignore"):
        for t in (range(T - 1, -1, -1) if reverse else range(T)):
            res = evaluate(body.graph, carry + [x[t] for x in xs] + consts)
            carry = res[:nc]
            for y, r in zip(ys, res[nc:]):
                y[t] = r
    flat = [np.asarray(c, dtype=outs[k].dtype).reshape(-1) for k, c in enumerate(carry)]
    packed = _packed_type(outs, body.name)
    return np.concatenate(flat + [y.reshape(-1) for y in ys]).astype(packed.dtype) \
        if outs else np.zeros(0, packed.dtype)


def _steps(types: Sequence[TensorType], body: Body, length: int | None) -> int:
    T, _ = _check_inputs(types, body, length)
    if T is None:
        raise ValueError(f"{body.name}: the number of steps is unknown (no sequences, no length)")
    return T


# ---- scan_output: a view of one output -----------------------------------------------------------
def _out_infer(packed: TensorType, *scan_in: TensorType, body: Body, length: int | None,
               index: int) -> TensorType:
    return output_types(scan_in, body, length)[index]


def _out_ref(packed: np.ndarray, *scan_in: np.ndarray, body: Body, length: int | None,
             index: int) -> np.ndarray:
    types = [TensorType(np.shape(a), np.asarray(a).dtype.name) for a in scan_in]
    outs = output_types(types, body, length)
    off = offsets(outs)[index]
    shape = outs[index].dims
    return np.asarray(packed).reshape(-1)[off:off + prod(shape)].reshape(shape)


def _out_view(node: Node, in_layouts: Sequence[Layout], out_shape: tuple) -> Layout | None:
    packed = in_layouts[0]
    if not packed.is_contiguous:
        return None
    types = [TensorType(lay.shape, i.dtype) for lay, i in zip(in_layouts[1:], node.inputs[1:])]
    outs = output_types(types, node.attrs["body"], node.attrs["length"])
    off = offsets(outs)[node.attrs["index"]]
    return Layout(packed.root, packed.offset + off, tuple(out_shape),
                  contiguous_strides(out_shape))


def scan_output(loop: Node, index: int) -> Node:
    """Output ``index`` of the scan node ``loop`` (final carries first, then stacked ys)."""
    return _pick(loop, loop.inputs, loop.attrs["body"], loop.attrs["length"], index)


def _pick(packed: Node, scan_inputs: Sequence[Node], body: Body, length: int | None,
          index: int) -> Node:
    """Output ``index`` of a packed buffer (a loop's, or a cotangent of one)."""
    attrs = {"body": body, "length": length, "index": int(index)}
    return make_node("scan_output", (packed, *scan_inputs), attrs, _out_infer)


def _scan_node(body: Body, inputs: Sequence[Node], length: int | None, reverse: bool) -> Node:
    return make_node("scan", tuple(inputs), {"body": body, "length": length,
                                             "reverse": bool(reverse)}, _scan_infer)
