"""The device-neutral planner: one graph, one feed signature -> shapes, layouts, storage,
lifetimes, buffer sharing and in-place updates. Every backend plans through it and adds only
its kernels and how to launch them (docs/architecture.md, "Planning").

Once per program (:func:`program_order`): the kernel order from :mod:`kiln.core.schedule`
with each update moved after the last kernel reading its Variable's old value, and the
multi-output groups of the fusion pass (:func:`kiln.core.passes.fuse.group_chains`).

Per feed signature (:class:`StaticPlan`):

1. static shapes: the placeholders' from the feeds, the params' from their Variables, every
   other node's from its op's shape rule;
2. layouts (:mod:`kiln.core.layout`): sources own their storage; an op with a view rule
   (``OpDef.view``) is a new layout of its input's storage; ops of kind SHAPE are constants of
   the plan (their reference run on shape-only stand-ins); everything else is a *kernel* that
   writes a fresh contiguous buffer;
3. lifetimes of each storage root (views extend them) in kernel steps, inputs that an op only
   reads the shape of (``OpDef.shape_only``) excluded;
4. buffers: the program-wide assignment of :func:`kiln.core.memory.plan_memory` (made at a
   fixed batch size, so that every signature shares buffers the same way and runs the same
   compiled kernels), kept where this signature's lifetimes allow it, else a private buffer;
5. in-place updates: an update computed by an elementwise kernel after the last read of its
   Variable's old value writes straight into the Variable's storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.core.ir import Graph, Node, TensorType
from kiln.core.layout import Layout
from kiln.core.memory import (
    PLANNER_BATCH,
    elementwise_output,
    overwritable_inputs,
    plan_memory,
)
from kiln.core.ops.registry import SHAPE, get_op
from kiln.core.passes.fuse import group_chains
from kiln.core.schedule import schedule

SOURCES = ("placeholder", "param", "constant")
END = 1 << 60  # the "last step" of a value that outlives the program (a graph output)


# ---- once per program ---------------------------------------------------------------------------
def is_view(node: Node) -> bool:
    """Whether ``node``'s op may run as a view of its input (no kernel)."""
    return get_op(node.op).view is not None


def sink_updates(graph: Graph, updates: Sequence[tuple[int, Any]],
                 order: list[Node]) -> list[Node]:
    """Moves each update kernel (with whatever depends on it) after the last kernel that
    reads the variable's old value, so that it can write into the variable's buffer.

    Views count as transparent: a kernel reading a transpose of a weight reads the weight.
    """
    users: dict[int, list[Node]] = {}
    for n in order:
        for i in n.inputs:
            users.setdefault(id(i), []).append(n)
    for k, var in updates:
        u = graph.outputs[k]
        if u.op in SOURCES:
            continue
        pos = {id(n): t for t, n in enumerate(order)}
        readers, stack = [], [var.__kiln_node__()]
        while stack:
            for user in users.get(id(stack.pop()), []):
                if is_view(user):
                    stack.append(user)
                elif user is not u:
                    readers.append(pos[id(user)])
        if id(u) not in pos or not readers or max(readers) < pos[id(u)]:
            continue
        last = max(readers)
        start = pos[id(u)]
        moved = {id(u)}
        for n in order[start + 1:last + 1]:
            if any(id(i) in moved for i in n.inputs):
                moved.add(id(n))
        if any(id(order[r]) in moved for r in readers):
            continue  # a reader depends on the update itself: cannot sink
        window = order[start:last + 1]
        order = (order[:start] + [n for n in window if id(n) not in moved]
                 + [n for n in window if id(n) in moved] + order[last + 1:])
    return order


def program_order(graph: Graph, updates: Sequence[tuple[int, Any]]
                  ) -> tuple[list[Node], dict[int, list[Node]]]:
    """The kernel order of a program (the scheduler's, with updates sunk, multi-output groups
    adjacent) and those groups (id(first member) -> members): see the module docstring."""
    order = sink_updates(graph, list(updates), schedule(graph))
    return group_chains(graph, list(updates), order)


def with_sources(graph: Graph, kernels_order: Sequence[Node]) -> list[Node]:
    """Every node a :class:`StaticPlan` plans, inputs before users: the placeholders fed but
    never read, the sources, then ``kernels_order``."""
    kernel_ids = {id(n) for n in kernels_order}
    sources = [n for n in graph.nodes if n.op in SOURCES and id(n) not in kernel_ids]
    seen = {id(n) for n in sources}
    unused = [p for p in graph.inputs if id(p) not in seen]
    return unused + sources + list(kernels_order)


# ---- per feed signature -------------------------------------------------------------------------
@dataclass
class Lifetimes:
    """Per kernel its step; per storage root the first and last step touching it and the
    layouts read at each step."""

    step: dict[int, int]
    first: dict[int, int]
    last: dict[int, int]
    reads: dict[int, list[tuple[int, Layout]]]


def _shape_stand_in(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """An array of ``shape`` that allocates nothing (for ops that read only shapes)."""
    return np.broadcast_to(np.zeros((), dtype), shape)


class StaticPlan:
    """Shapes, layouts, storage kinds and kernels of ``graph`` for one feed signature.

    Args:
        graph: the program's graph.
        order: every node to plan, inputs before users: unread placeholders, sources, then the
            kernels in execution order.
        feed_shapes: the shape of each ``graph.inputs`` array, in order.
        backend: a name for error messages.

    Attributes:
        shapes: id(node) -> its concrete shape.
        layouts: id(node) -> its :class:`Layout`; the root of a source or kernel result is
            ``id(node)`` itself, a view's root is the root it views.
        storage: id(node) -> "feed", "param", "const" (sources and plan constants), "view"
            or "buffer" (a kernel's result).
        kernels: the nodes that need a kernel, in execution order.
        consts: id(node) -> value of each plan constant (an op of kind SHAPE).
    """

    def __init__(self, graph: Graph, order: Sequence[Node], feed_shapes: Sequence[tuple],
                 backend: str = "backend"):
        self.graph = graph
        self.order = list(order)
        self.backend = backend
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.layouts: dict[int, Layout] = {}
        self.storage: dict[int, str] = {}
        self.kernels: list[Node] = []
        self.consts: dict[int, np.ndarray] = {}
        self._resolve_shapes([tuple(int(d) for d in s) for s in feed_shapes])
        self._assign_layouts()

    def type(self, node: Node) -> TensorType:
        return TensorType(self.shapes[id(node)], node.dtype)

    def is_kernel(self, node: Node) -> bool:
        return self.storage.get(id(node)) == "buffer"

    def _resolve_shapes(self, feed_shapes: list[tuple[int, ...]]) -> None:
        fed = {id(p): s for p, s in zip(self.graph.inputs, feed_shapes)}
        for n in self.order:
            shape: tuple[int | None, ...]
            if n.op == "placeholder":
                if id(n) not in fed:
                    raise ValueError(f"no value fed for placeholder {n.name or ''} {n.type}")
                shape = fed[id(n)]
            elif n.op == "param":
                shape = tuple(n.attrs["var"].shape)
            elif n.op == "constant":
                shape = n.attrs["value"].array.shape
            else:
                types = [self.type(i) for i in n.inputs]
                shape = get_op(n.op).infer(*types, **n.attrs).shape
                if any(d is None for d in shape):
                    raise ValueError(f"{self.backend} backend: cannot infer a static shape for "
                                     f"{n.op} from inputs {[t.shape for t in types]}")
            self.shapes[id(n)] = tuple(int(d) for d in shape if d is not None)  # all known

    def _assign_layouts(self) -> None:
        for n in self.order:
            key = id(n)
            shape = self.shapes[key]
            if n.op in SOURCES:
                self.storage[key] = {"placeholder": "feed", "param": "param",
                                     "constant": "const"}[n.op]
                self.layouts[key] = Layout.fresh(key, shape)
                continue
            op = get_op(n.op)
            if op.kind == SHAPE:
                stand_ins = [_shape_stand_in(self.shapes[id(i)], i.dtype) for i in n.inputs]
                value = op.ref(*stand_ins, **n.attrs)
                self.consts[key] = np.ascontiguousarray(value, dtype=n.dtype)
                self.storage[key] = "const"
                self.layouts[key] = Layout.fresh(key, shape)
                continue
            if op.view is not None:
                lay = op.view(n, [self.layouts[id(i)] for i in n.inputs], shape)
                if lay is not None:
                    self.layouts[key] = lay
                    self.storage[key] = "view"
                    continue
            self.layouts[key] = Layout.fresh(key, shape)
            self.storage[key] = "buffer"
            self.kernels.append(n)

    def nbytes(self, node: Node) -> int:
        return int(np.prod(self.shapes[id(node)], dtype=np.int64)) * np.dtype(node.dtype).itemsize

    # ---- lifetimes and buffers --------------------------------------------------------------
    def lifetimes(self, groups: dict[int, list[Node]] | None = None) -> Lifetimes:
        """Lifetimes in kernel steps; the members of a multi-output group (id(head) ->
        members) all run at the head's step."""
        step = {id(n): t for t, n in enumerate(self.kernels)}
        for members in (groups or {}).values():
            for m in members[1:]:
                step[id(m)] = step[id(members[0])]
        first = dict(step)
        last: dict[int, int] = dict(step)
        reads: dict[int, list[tuple[int, Layout]]] = {}
        for n in self.kernels:
            t = step[id(n)]
            for i in get_op(n.op).data_inputs(len(n.inputs)):
                lay = self.layouts[id(n.inputs[i])]
                reads.setdefault(lay.root, []).append((t, lay))
                if last.get(lay.root, -1) < t:
                    last[lay.root] = t
        for o in self.graph.outputs:
            last[self.layouts[id(o)].root] = END
        return Lifetimes(step, first, last, reads)

    def _overwrites_safely(self, node: Node, root: int, lt: Lifetimes) -> bool:
        """Whether ``node`` (at its step) may write its result over storage ``root`` that it
        also reads there: an elementwise kernel reading it with the same layout as its output
        (element k read before element k written), or a ``gemm`` reading it as ``c`` only."""
        t = lt.step[id(node)]
        out = self.layouts[id(node)]
        if node.op == "gemm":  # only through c: BLAS must not write what it multiplies
            a, b, c = node.inputs[:3]
            if (self.layouts[id(c)].root != root or not overwritable_inputs(node)
                    or any(self.layouts[id(i)].root == root for i in (a, b))):
                return False
        elif not (elementwise_output(node) or overwritable_inputs(node)):
            return False
        return all(lay.same_view(out) for s, lay in lt.reads.get(root, []) if s == t)

    def _may_share(self, prev: Node, nxt: Node, lt: Lifetimes) -> bool:
        """Whether ``nxt`` may take over the buffer of ``prev`` (prev's value is dead by then,
        or ``nxt`` overwrites it in place, element by element)."""
        last_prev = lt.last[id(prev)]
        t = lt.step[id(nxt)]
        if last_prev < t:
            return True
        if last_prev > t or prev.dtype != nxt.dtype:
            return False
        return self._overwrites_safely(nxt, id(prev), lt)

    def assign_buffers(self, planned: dict[int, int], lt: Lifetimes) -> tuple[dict[int, int],
                                                                              int]:
        """id(kernel node) -> buffer index: the program's ``planned`` assignment where this
        signature's lifetimes (which views extend) allow it, else a private buffer.

        Returns:
            The assignment and the number of kernels that could not keep their planned buffer.
        """
        occupant: dict[int, Node] = {}
        result: dict[int, int] = {}
        fresh = max(planned.values(), default=-1) + 1
        private = 0
        for n in self.kernels:
            b = planned.get(id(n))
            if b is not None:
                prev = occupant.get(b)
                if prev is None or self._may_share(prev, n, lt):
                    occupant[b] = n
                    result[id(n)] = b
                    continue
                private += 1
            result[id(n)] = fresh
            occupant[fresh] = n
            fresh += 1
        return result, private

    def inplace_updates(self, updates: Sequence[tuple[int, Any]], lt: Lifetimes
                        ) -> dict[int, Any]:
        """id(update value node) -> the Variable whose storage receives it directly (the
        kernel computing it writes there; the old value is dead by then)."""
        result: dict[int, Any] = {}
        taken: set[int] = set()
        out_roots = {self.layouts[id(o)].root for o in self.graph.outputs}
        count: dict[int, int] = {}
        for _, var in updates:
            count[id(var)] = count.get(id(var), 0) + 1
        for k, var in updates:
            if count[id(var)] > 1:
                continue  # the executor applies them in order: the last one must win
            u = self.graph.outputs[k]
            if id(u) in result or id(var) in taken or not self.is_kernel(u):
                continue
            if u.dtype != var.dtype or self.shapes[id(u)] != tuple(var.shape):
                continue
            proot = id(var.__kiln_node__())
            if proot in out_roots:
                continue  # an output shows the old value
            t = lt.step[id(u)]
            if any(s > t for s, _ in lt.reads.get(proot, [])):
                continue
            if any(s == t for s, _ in lt.reads.get(proot, [])) and not self._overwrites_safely(
                    u, proot, lt):
                continue
            result[id(u)] = var
            taken.add(id(var))
        return result


def planned_buffers(graph: Graph, kernels_order: Sequence[Node]) -> dict[int, int]:
    """The program-wide buffer assignment (id(kernel node) -> buffer index) of
    :func:`kiln.core.memory.plan_memory` at :data:`PLANNER_BATCH`."""
    mp = plan_memory(graph, order=list(kernels_order), batch_size=PLANNER_BATCH, inplace=True)
    return dict(mp.buffer)
