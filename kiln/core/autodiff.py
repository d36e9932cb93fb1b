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

    ct_y = as_node(seed, y.dtype) if seed is not None else None
    if ct_y is None:
        from kiln.core.ops.elementwise import ones_like

        ct_y = ones_like(y)
    grads = vjp_graph([y], [ct_y], xs_list)
    return [g if g is not None else _zeros_like(x) for g, x in zip(grads, xs_list)]


def vjp_graph(ys: Sequence[Node], cts: Sequence[Node], xs: Sequence[Node]) -> list[Node | None]:
    """The vector-Jacobian product: gradient nodes of ``sum_k <ys[k], cts[k]>`` with respect to
    each of ``xs`` (None where no path leads from it to any ``ys``).

    A ``projection`` node (``scan_output``) passes its cotangent to its multi-output input
    (``scan``), whose VJP receives ``(ct of the packed buffer or None, {index: ct})``. In reverse
    topological order the loop node comes after all its projections and their users, so its
    cotangents are complete when it is reached.
    """
    order = toposort(ys)
    # Only nodes on a path from some x to some y matter.
    targets = {id(x) for x in xs}
    on_path: set[int] = set()
    for n in order:
        if id(n) in targets or any(id(i) in on_path for i in n.inputs):
            on_path.add(id(n))

    parts_of: dict[int, list[Node]] = {}
    picked: dict[int, dict[int, list[Node]]] = {}  # id(multi-output node) -> index -> cts
    for y, ct0 in zip(ys, cts):
        parts_of.setdefault(id(y), []).append(ct0)
    result: dict[int, Node] = {}

    for node in reversed(order):
        if id(node) not in on_path or id(node) not in parts_of:
            continue
        parts = parts_of.pop(id(node))
        ct = _sum(parts)
        if id(node) in targets and ct is not None:
            result[id(node)] = ct
        if not node.inputs:
            continue
        op = get_op(node.op)
        if op.projection:
            parent = node.inputs[0]
            if not get_op(parent.op).multi_output:
                raise NotImplementedError(f"autodiff: cannot differentiate {node.op} of a "
                                          f"{parent.op} node (a second derivative of a loop)")
            if ct is not None:
                picked.setdefault(id(parent), {}).setdefault(node.attrs["index"], []).append(ct)
            parts_of.setdefault(id(parent), [])
            continue
        if op.multi_output:
            assert op.vjp is not None  # OpDef checks that differentiable ops have one
            per = {k: _sum(v) for k, v in picked.pop(id(node), {}).items()}
            grads = op.vjp((ct, per), node, *node.inputs, **node.attrs)
        elif not op.differentiable or ct is None or op.vjp is None:
            continue  # zero gradient (explicitly non-differentiable op)
        else:
            grads = op.vjp(ct, node, *node.inputs, **node.attrs)
        if len(grads) != len(node.inputs):
            raise RuntimeError(f"vjp of {node.op} returned {len(grads)} gradients for "
                               f"{len(node.inputs)} inputs")
        for inp, g in zip(node.inputs, grads):
            if g is None or id(inp) not in on_path or inp.dtype not in FLOAT_DTYPES:
                continue
            parts_of.setdefault(id(inp), []).append(unbroadcast(g, inp))

    return [result.get(id(x)) for x in xs]


def _sum(parts: Sequence[Node]) -> Node | None:
    if not parts:
        return None
    ct = parts[0]
    for p in parts[1:]:
        ct = apply("add", ct, p)
    return ct
