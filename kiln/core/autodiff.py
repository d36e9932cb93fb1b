"""Reverse-mode automatic differentiation on the graph.

``grad(y, xs)`` adds gradient nodes to the same graph: it walks the nodes between ``xs`` and
``y`` in reverse topological order, calls each op's VJP rule and sums fan-in. Two things live
only here: summing the cotangents of a node used several times, and un-broadcasting (summing
a cotangent back to the shape of the input it belongs to). Gradients are ordinary nodes, so
gradients of gradients work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.core.ir import FLOAT_DTYPES, Node, toposort
from kiln.core.ops._rules import as_node
from kiln.core.ops.registry import apply, get_op


def unbroadcast(g: Node, x: Node) -> Node:
    """Sums ``g`` over the axes along which ``x`` was broadcast, giving ``x``'s shape."""
    if g.shape == x.shape:
        return g
    lead = g.ndim - x.ndim
    if lead < 0:
        raise ValueError(f"autodiff: gradient of shape {g.shape} is smaller than its input "
                         f"{x.shape}")
    axes = list(range(lead))
    for i, d in enumerate(x.shape):
        gd = g.shape[lead + i]
        if d == 1 and gd != 1:
            axes.append(lead + i)
    if axes:
        g = apply("sum", g, axis=tuple(axes), keepdims=False)
        keep = [i for i, d in enumerate(x.shape) if d == 1 and (lead + i) in axes]
        if keep:
            g = apply("expand_dims", g, axis=tuple(keep))
    if g.dtype != x.dtype:
        g = apply("cast", g, dtype=x.dtype)
    return g


def _zeros_like(x: Node) -> Node:
    from kiln.core.ops.elementwise import zeros_like

    return zeros_like(x)


def grad(y: Any, xs: Sequence[Any] | Any, seed: Any = None) -> list[Node]:
    """Gradient nodes of ``sum(y)`` with respect to each of ``xs``.

    Args:
        y: the tensor to differentiate (a scalar loss, typically; non-scalars are summed,
            unless ``seed`` gives the cotangent).
        xs: a tensor/Variable or a list of them.
        seed: optional cotangent of ``y`` (same shape as ``y``): gives a vector-Jacobian
            product.

    Returns:
        A list with one gradient node per entry of ``xs``, each shaped like it; zeros for an
        entry ``y`` does not depend on.

    Example:
        >>> gw, gb = kiln.grad(loss, [w, b])
    """
    single = not isinstance(xs, list | tuple)
    xs_list = [as_node(x) for x in ([xs] if single else xs)]
    y = as_node(y)
    if y.dtype not in FLOAT_DTYPES:
        raise TypeError(f"grad: can only differentiate a float tensor, received {y.type}")
    for x in xs_list:
        if x.dtype not in FLOAT_DTYPES:
            raise TypeError(f"grad: cannot differentiate with respect to {x.type}")

    order = toposort([y])
    # Only nodes on a path from some x to y matter.
    targets = {id(x) for x in xs_list}
    on_path: set[int] = set()
    for n in order:
        if id(n) in targets or any(id(i) in on_path for i in n.inputs):
            on_path.add(id(n))

    cts: dict[int, list[Node]] = {}
    ct_y = as_node(seed, y.dtype) if seed is not None else None
    if ct_y is None:
        from kiln.core.ops.elementwise import ones_like

        ct_y = ones_like(y)
    cts[id(y)] = [ct_y]
    result: dict[int, Node] = {}

    for node in reversed(order):
        if id(node) not in on_path or id(node) not in cts:
            continue
        parts = cts.pop(id(node))
        ct = parts[0]
        for p in parts[1:]:
            ct = apply("add", ct, p)
        if id(node) in targets:
            result[id(node)] = ct
        if not node.inputs:
            continue
        op = get_op(node.op)
        if not op.differentiable:
            continue  # zero gradient (explicitly non-differentiable op)
        grads = op.vjp(ct, node, *node.inputs, **node.attrs)
        if len(grads) != len(node.inputs):
            raise RuntimeError(f"vjp of {node.op} returned {len(grads)} gradients for "
                               f"{len(node.inputs)} inputs")
        for inp, g in zip(node.inputs, grads):
            if g is None or id(inp) not in on_path or inp.dtype not in FLOAT_DTYPES:
                continue
            cts.setdefault(id(inp), []).append(unbroadcast(g, inp))

    return [result[id(x)] if id(x) in result else _zeros_like(x) for x in xs_list]
