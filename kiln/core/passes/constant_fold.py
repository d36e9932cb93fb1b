"""constant_fold: nodes whose value is known before run time become constants.

A node whose inputs are all constants is evaluated with the op's own NumPy reference
(``get_op(name).ref``, the same code the reference backend runs), so folding never changes a
result on the reference backend. Shape arithmetic folds too: ``size_of`` over static axes, and
``broadcast_like`` / ``reshape_like`` of a constant to a static shape (the ``like`` operand's
values are never read).

Never folded: random ops (a draw is a function of the run-time key), collectives (the other
processes take part at run time), sources, and results with
more than :data:`MAX_ELEMENTS` elements (big constants bloat the graph and the kernel cache;
the backends compute them at run time instead).

Example:
    >>> n = kiln.ops.size_of(kiln.placeholder((None, 10)), axis=1)
    >>> constant_fold(Graph([], [n])).outputs[0].op
    'constant'
"""

from __future__ import annotations

import numpy as np

from kiln.core.ir import Graph, Node
from kiln.core.ops.registry import get_op
from kiln.core.ops.source import constant
from kiln.core.passes._util import is_collective, is_const, is_random, is_source, rewrite

MAX_ELEMENTS = 1024


def _static_size(shape: tuple) -> int | None:
    if any(d is None for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


def _make(value: np.ndarray, node: Node) -> Node | None:
    value = np.asarray(value)
    if value.dtype.name != node.dtype:
        value = value.astype(node.dtype)
    if value.shape != node.shape:
        return None  # a reference that disagrees with the shape rule: leave it to run time
    return constant(value)


def rule(node: Node, max_elements: int = MAX_ELEMENTS) -> Node | None:
    """The constant for ``node``, or None when it cannot (or should not) be folded."""
    if is_source(node) or is_random(node) or is_collective(node):
        return None
    size = _static_size(node.shape)
    if size is None or size > max_elements:
        return None
    op = node.op
    if op == "size_of":  # depends only on the (static) dims it counts
        x = node.inputs[0]
        dims = [x.shape[a] for a in node.attrs["axis"]]
        if any(d is None for d in dims):
            return None
        n = int(np.prod(dims, dtype=np.int64))
        return _make(np.asarray(n, dtype=node.dtype), node)
    args = node.inputs
    if op in ("broadcast_like", "reshape_like"):
        args = node.inputs[:1]  # the second operand contributes only its (static) shape
    if not all(is_const(i) for i in args):
        return None
    arrays = [i.attrs["value"].array for i in args]
    try:
        with np.errstate(all="ignore"):
            if op == "broadcast_like":
                value = np.broadcast_to(arrays[0], node.type.dims).copy()
            elif op == "reshape_like":
                value = np.reshape(arrays[0], node.type.dims)
            else:
                value = get_op(op).ref(*arrays, **node.attrs)
    except (ValueError, IndexError, ArithmeticError):
        # the op rejects these values (an out-of-range index, a bad shape for a reshape): it
        # must raise when the graph runs and reaches it, not when it is compiled (it may sit
        # on a branch that `where` discards). Any other exception is a bug and propagates.
        return None
    return _make(value, node)


def constant_fold(graph: Graph, max_elements: int = MAX_ELEMENTS) -> Graph:
    """Returns ``graph`` with every foldable node replaced by a constant.

    Args:
        graph: the graph.
        max_elements: largest constant (in elements) the pass may create.
    """
    return rewrite(graph, lambda n: rule(n, max_elements))
