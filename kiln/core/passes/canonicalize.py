"""canonicalize: one spelling per computation, so that later passes match fewer forms.

* ``stop_gradient(x) -> x`` (the pipeline runs after autodiff; the op is an identity);
* ``broadcast_like(x, like)`` with a static result -> ``broadcast_to(x, shape)``, and
  ``reshape_like(x, like)`` with at most one unknown dim -> ``reshape(x, shape)``; the
  ``shape`` of a reshape is spelled with the known dims (``-1`` only for the unknown one);
* commutative ops (add, mul, maximum, minimum, equal, not_equal, logical_and/or) take a
  constant operand on the right;
* ``x * -1 -> neg(x)`` (bit-identical in IEEE arithmetic);
* the operand that only lends its shape (``broadcast_like``'s ``like``, ``size_of``'s input) is
  the earliest node of the same run-time shape along elementwise ops (:func:`full_operand`):
  the gradient of ``mean(square(x - m))`` then reads the shape of ``x``, not of the square,
  which the fusion pass can fold into the reduction (BatchNormalization's variance) instead of
  materializing it for its shape.

Example:
    >>> g2 = canonicalize(Graph([x], [kiln.ops.stop_gradient(2 * x)]))   # -> mul(x, 2)
"""

from __future__ import annotations

from kiln.core.ir import Graph, Node
from kiln.core.passes._util import (
    COMMUTATIVE,
    build,
    full_operand,
    is_const,
    is_const_equal,
    rewrite,
    try_build,
)


def _target_shape(node: Node) -> tuple[int, ...] | None:
    """``node.shape`` as a reshape target (None dims as -1), or None if 2+ dims unknown."""
    if sum(1 for d in node.shape if d is None) > 1:
        return None
    return tuple(-1 if d is None else d for d in node.shape)


def _shape_source(node: Node) -> Node:
    """The earliest node with ``node``'s run-time shape and dtype along elementwise ops (the
    dtype too: ``size_of`` counts in its input's)."""
    while True:
        up = full_operand(node)
        if up is None or up.dtype != node.dtype:
            return node
        node = up


def rule(node: Node) -> Node | None:
    op = node.op
    if op == "stop_gradient":
        return node.inputs[0]
    if op in ("broadcast_like", "size_of"):
        k = 1 if op == "broadcast_like" else 0
        like = _shape_source(node.inputs[k])
        if like is not node.inputs[k]:
            inputs = list(node.inputs)
            inputs[k] = like
            return build(op, inputs, **node.attrs)
    if op == "broadcast_like" and node.type.is_static:
        x = node.inputs[0]
        if x.type == node.type:
            return x
        return try_build("broadcast_to", [x], shape=node.shape)  # None if x has unknown dims
    if op == "reshape_like":
        target = _target_shape(node)
        if target is not None:
            return build("reshape", [node.inputs[0]], shape=target)
    if op == "reshape":
        target = _target_shape(node)
        if target is not None and target != node.attrs["shape"]:
            return build("reshape", [node.inputs[0]], shape=target)
    if op in COMMUTATIVE and len(node.inputs) == 2:
        a, b = node.inputs
        if is_const(a) and not is_const(b):
            return build(op, [b, a], **node.attrs)
    if op == "mul":
        a, b = node.inputs
        if is_const_equal(b, -1) and a.type == node.type:
            return build("neg", [a])
    return None


def canonicalize(graph: Graph) -> Graph:
    """Returns ``graph`` with the canonical spellings described in the module docstring."""
    return rewrite(graph, rule)
