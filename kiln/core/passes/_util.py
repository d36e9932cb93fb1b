"""Helpers shared by the passes: node classification, constant inspection, the bottom-up
rewrite engine and kernel counting.

:class:`PassOptions`: the passes' tuning thresholds (the graph-level counterpart of the CPU
backend's ``CpuOptions``; passes know no backend), scoped like it: :func:`options` is what the
passes read (what :func:`using` set in this thread, else the defaults).

The rewrite engine (:func:`rewrite`) rebuilds a graph from its inputs towards its outputs. At
every node (whose inputs are already rewritten) it applies a local ``rule`` until the rule has
nothing more to say; nodes created by a rule are themselves rewritten before they are used.
It is iterative (no recursion over the graph), so chains of 100,000 nodes are fine.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln.core.ir import Graph, Node, make_node
from kiln.core.ir import rebuild as _rebuild_checked
from kiln.core.ops.registry import COLLECTIVE, ELEMENTWISE, FUSED, RANDOM, REDUCE, get_op
from kiln.core.scoped import scoped

Rule = Callable[[Node], "Node | None"]

SOURCE_OPS = ("constant", "placeholder", "param")
COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum", "equal", "not_equal",
                         "logical_and", "logical_or"})
RESHAPES = frozenset({"reshape", "reshape_like", "expand_dims", "squeeze"})
BROADCASTS = frozenset({"broadcast_to", "broadcast_like"})
# ops that a backend may want to know are transcendental (never duplicated by fusion)
TRANSCENDENTAL = frozenset({"exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos",
                            "tanh", "sigmoid", "softplus", "erf", "pow"})


@dataclasses.dataclass(frozen=True)
class PassOptions:
    """The passes' thresholds (the measurements next to their readers, fuse.py and gemm.py)."""

    fuse_tail_min_elements: int = 1 << 18  # a multi-output loop ends with a reduction this large
    gemm_min_elements: int = 1 << 14  # a scaled product into a sum this large -> one BLAS gemm
    fuse_max_instructions: int = 64  # a fused group stops growing at this many instructions
    fuse_max_chain_instructions: int = 48  # instructions of one multi-output loop
    fold_affine_min_ratio: int = 4  # fold a scale into a kernel this many times smaller


_DEFAULT = PassOptions()
_scoped: contextvars.ContextVar[PassOptions | None] = contextvars.ContextVar(
    "kiln_pass_options", default=None)


def options() -> PassOptions:
    """The thresholds the passes read: :func:`using`'s in this thread, else the defaults."""
    return _scoped.get() or _DEFAULT


def using(opts: PassOptions) -> contextlib.AbstractContextManager[PassOptions]:
    """The passes in this thread read ``opts`` inside the block (restored after).

    Raises:
        TypeError: ``opts`` is not a :class:`PassOptions`.
    """
    return scoped(_scoped, opts, PassOptions, "passes")


def kind_of(node: Node) -> str:
    return get_op(node.op).kind


def is_source(node: Node) -> bool:
    return node.op in SOURCE_OPS


def is_const(node: Node) -> bool:
    return node.op == "constant"


def is_elementwise(node: Node) -> bool:
    return get_op(node.op).kind == ELEMENTWISE


def is_random(node: Node) -> bool:
    return get_op(node.op).kind == RANDOM


def is_collective(node: Node) -> bool:
    """A node computed together with other processes (``allreduce``): never folded."""
    return get_op(node.op).kind == COLLECTIVE


def is_reduce(node: Node) -> bool:
    return get_op(node.op).kind == REDUCE


def is_fused(node: Node) -> bool:
    return get_op(node.op).kind == FUSED


def broadcasts_smaller(operand: Node, node: Node) -> bool:
    """Whether ``operand`` broadcasts to ``node``'s shape from a known-smaller one (its
    dimensions, right-aligned, are 1 or equal, at least one of them 1 where ``node``'s is
    not, or it has fewer)."""
    a, b = operand.shape, node.shape
    if a is None or b is None or len(a) > len(b):
        return False
    smaller = len(a) < len(b)
    for x, y in zip(reversed(a), reversed(b)):
        if x == 1 and y != 1:
            smaller = True
        elif x is None or x != y:
            return False
    return smaller


def full_operand(node: Node) -> Node | None:
    """The one input of the elementwise ``node`` that has ``node``'s exact shape, every other
    one a constant or a known-smaller broadcast operand (:func:`broadcasts_smaller`), so
    that ``node``'s shape at run time is that input's; None otherwise."""
    if not is_elementwise(node) or is_source(node):
        return None
    full = None
    for i in node.inputs:
        if (is_const(i) and not i.shape) or broadcasts_smaller(i, node):
            continue
        if full is not None or i.shape != node.shape:
            return None
        full = i
    return full


def const_value(node: Node) -> np.ndarray:
    return node.attrs["value"].array


def uniform_value(node: Node) -> float | None:
    """The single value held by a constant whose elements are all equal, else None."""
    if not is_const(node):
        return None
    arr = const_value(node)
    if arr.size == 0:
        return None
    first = arr.reshape(-1)[0]
    if arr.size > 1 and not np.all(arr == first):
        return None
    value = first.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return value


def is_const_equal(node: Node, value: float) -> bool:
    """True for a constant whose every element equals ``value`` (0 matches -0.0 too)."""
    v = uniform_value(node)
    return v is not None and not isinstance(v, bool) and v == value


def build(op: str, inputs: Sequence[Node], **attrs: Any) -> Node:
    """``op(*inputs, **attrs)`` through the registry (type-checked, hash-consed)."""
    return make_node(op, tuple(inputs), attrs, get_op(op).infer)


def try_build(op: str, inputs: Sequence[Node], **attrs: Any) -> Node | None:
    """Like :func:`build`, but None when the op's shape rule rejects the arguments."""
    try:
        return build(op, inputs, **attrs)
    except (ValueError, TypeError):
        return None


def rebuild(node: Node, inputs: Sequence[Node]) -> Node:
    """``node`` with new inputs (same op and attributes).

    When every new input has the type of the input it replaces, the result has ``node``'s
    type (a shape rule is a function of the input types and attributes), so the rule is not
    run again: substituting deep in a 100,000-node graph rebuilds everything downstream, and
    re-running every shape rule would dominate the pass. Otherwise the op's rule checks.
    """
    if len(inputs) == len(node.inputs) and all(a is b for a, b in zip(inputs, node.inputs)):
        return node
    if len(inputs) == len(node.inputs) and all(
            a.type == b.type for a, b in zip(inputs, node.inputs)):
        known = node.type
        return make_node(node.op, inputs, dict(node.attrs), lambda *_a, **_k: known)
    return _rebuild_checked(node, inputs)


def same_type(a: Node | None, b: Node) -> bool:
    return a is not None and a.type == b.type


def num_kernels(graph: Graph) -> int:
    """Nodes that run as a kernel: everything but placeholders, params and constants (a fused
    node is one kernel; movement ops count as kernels)."""
    return sum(1 for n in graph.nodes if not is_source(n))


def with_outputs(graph: Graph, outputs: Sequence[Node]) -> Graph:
    """A graph with the same inputs as ``graph`` and new outputs (order and count kept)."""
    outputs = list(outputs)
    if len(outputs) != len(graph.outputs):
        raise RuntimeError("a pass changed the number of graph outputs")
    if all(a is b for a, b in zip(outputs, graph.outputs)):
        return graph
    return Graph(graph.inputs, outputs)


def map_graph(graph: Graph, fn: Callable[[Node], Node]) -> Graph:
    """Rebuilds ``graph`` in topological order: ``fn`` receives each node with its inputs
    already mapped and returns its replacement (one pass, no fixpoint)."""
    new: dict[int, Node] = {}
    for node in graph.nodes:
        if is_source(node):
            new[id(node)] = node
            continue
        ins = [new[id(i)] for i in node.inputs]
        new[id(node)] = fn(rebuild(node, ins))
    return with_outputs(graph, [new[id(o)] for o in graph.outputs])


def rewrite(graph: Graph, rule: Rule, max_steps: int = 64) -> Graph:
    """Applies ``rule`` bottom-up until no rule fires (see the module docstring).

    ``rule(node)`` returns a replacement node of the same type, or None. A replacement may be
    built from new nodes; those are rewritten too before the replacement is accepted.
    """
    done: dict[int, tuple[Node, Node]] = {}  # id(node) -> (node, result); keeps node alive

    def settle(root: Node) -> Node:
        """Rewrites every not-yet-seen node below ``root`` (iteratively) and returns the
        result for ``root``."""
        if id(root) in done:
            return done[id(root)][1]
        for node in _unseen_postorder(root, done):
            if is_source(node):
                done[id(node)] = (node, node)
                continue
            ins = [done[id(i)][1] for i in node.inputs]
            current = rebuild(node, ins)
            for _ in range(max_steps):
                if id(current) in done and done[id(current)][1] is current:
                    break
                out = rule(current)
                if out is None or out is current:
                    break
                if out.type != current.type:
                    raise RuntimeError(f"rewrite rule changed the type of {current.op}: "
                                       f"{current.type} -> {out.type}")
                current = settle(out)
            done[id(node)] = (node, current)
            done[id(current)] = (current, current)
        return done[id(root)][1]

    outputs = [settle(o) for o in graph.outputs]
    return with_outputs(graph, outputs)


def _unseen_postorder(root: Node, done: dict[int, tuple[Node, Node]]) -> list[Node]:
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, int]] = [(root, 0)]
    seen.add(id(root))
    while stack:
        node, i = stack[-1]
        if i < len(node.inputs):
            stack[-1] = (node, i + 1)
            child = node.inputs[i]
            if id(child) in done or id(child) in seen:
                continue
            seen.add(id(child))
            stack.append((child, 0))
        else:
            stack.pop()
            order.append(node)
    return order


def first_rule(*rules: Rule) -> Rule:
    """A rule that tries ``rules`` in order and returns the first replacement."""
    def rule(node: Node) -> Node | None:
        for r in rules:
            out = r(node)
            if out is not None and out is not node:
                return out
        return None
    return rule
