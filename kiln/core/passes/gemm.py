"""gemm: a matrix product scaled into a sum with a tensor of its shape -> one ``gemm`` node.

BLAS computes ``C = alpha * (A @ B) + beta * C`` in the pass over ``C`` that a product makes
anyway, so the sum costs nothing and the product is never written on its own. The sums this
finds are an optimizer's updates of a Dense kernel (SGD with momentum: ``v = m * v - lr * g``
with ``g = x.T @ dy``; plain SGD: ``w - lr * g``) and the sums of products of recurrent cells
(``x @ Wx + h @ Wh``). The update is then written into the Variable's storage by the GEMM
itself (the planner's in-place rule covers ``gemm``'s ``c``: kiln/core/memory.py), instead of
a product written, read back and combined by an elementwise kernel (docs/architecture.md,
"Passes"; MLP training step with SGD momentum: see benchmarks/bench_suite.py).

Rewrites, for ``p = matmul(a, b)`` of two matrices (float32 / float64) that nothing else
reads (not a graph output), ``s`` and ``t`` scalars (0-d) of its dtype, ``c`` a tensor of
the product's type that is a Variable or a kernel's result read by nothing else (where the
result can take its storage: see ``_accumulator``), of at least ``gemm_min_elements`` elements:

    add(t * c, s * p), add(s * p, t * c)  -> gemm(a, b, c, s, t)
    sub(t * c, s * p)                     -> gemm(a, b, c, -s, t)
    sub(s * p, t * c)                     -> gemm(a, b, c, s, -t)

where a missing scale is 1 (``c + p``) and a scaling ``mul`` must have no other reader either
(otherwise its value is needed anyway). A negated constant scale is folded; a negated
run-time one (a learning-rate Variable) is a ``neg`` of one element.

Example:
    >>> g = gemm(Graph([x, dy], [v * 0.9 - kiln.ops.matmul(x.T, dy) * 0.01]))
    >>> g.outputs[0].op
    'gemm'
"""

from __future__ import annotations

import numpy as np

from kiln.core.ir import Graph, Node
from kiln.core.memory import planned_elements
from kiln.core.ops.registry import get_op
from kiln.core.ops.source import constant
from kiln.core.passes._util import (
    build,
    const_value,
    is_const,
    is_source,
    options,
    rebuild,
    with_outputs,
)

DTYPES = ("float32", "float64")
# Smaller sums stay a matmul and an elementwise kernel: a BLAS call with alpha and beta costs a
# fixed ~10-20 us more on the CPU (a ctypes call and OpenBLAS's beta pass), more than a small
# elementwise pass (bench_cpu.py's tiny_train, 32-64-64-1 MLP with SGD momentum: its step took
# 2x the time with its three kernels' updates, of 2048 / 4096 / 64 elements, as gemms; the
# 784-512-256-10 MLP's 256 x 10 kernel: 28 us as a gemm against 14 + 1 for matmul and update).
# _util.PassOptions.gemm_min_elements (unknown dims counted as kiln.core.memory.PLANNER_BATCH)


def _scalar(node: Node, dtype: str) -> bool:
    return node.shape == () and node.dtype == dtype


def _split_scale(node: Node, single: set[int], dtype: str) -> tuple[Node, Node | None]:
    """(x, s) for ``node = x * s`` or ``s * x`` (``s`` a scalar, the mul read only once),
    else (node, None)."""
    if node.op == "mul" and id(node) in single:
        x, y = node.inputs
        if _scalar(y, dtype) and x.type == node.type:
            return x, y
        if _scalar(x, dtype) and y.type == node.type:
            return y, x
    return node, None


def _accumulator(c: Node, single: set[int]) -> bool:
    """Whether the sum pays as a ``gemm`` into ``c``: ``c`` is a Variable (an update, written
    in place once its other readers are done) or a kernel's result read by nothing else (the
    planner gives the result its buffer); a fed or constant ``c``, or a view (a time step of
    a sequence), would be copied into the result first, where the elementwise sum it replaces
    reads it once anyway."""
    if c.op == "param":
        return True
    return id(c) in single and not is_source(c) and get_op(c.op).view is None


def _product(node: Node, single: set[int], dtype: str) -> tuple[Node, Node | None] | None:
    """(matmul, scale or None) when ``node`` is a product ``p`` or ``s * p`` as the module
    docstring describes, else None."""
    p, s = _split_scale(node, single, dtype)
    if (p.op == "matmul" and id(p) in single and p.ndim == 2
            and all(i.ndim == 2 for i in p.inputs)):
        return p, s
    return None


def _match(node: Node, single: set[int]
           ) -> tuple[Node, Node, int, Node | None, int, Node | None] | None:
    """(matmul, c, sign of s, s, sign of t, t) for a sum the pass rewrites, else None."""
    if node.op not in ("add", "sub") or node.dtype not in DTYPES or node.ndim != 2:
        return None
    if planned_elements(node.shape) < options().gemm_min_elements:
        return None
    x, y = node.inputs
    sub = node.op == "sub"
    for prod_side, other, sign_s, sign_t in ((y, x, -1 if sub else 1, 1),
                                             (x, y, 1, -1 if sub else 1)):
        found = _product(prod_side, single, node.dtype)
        if found is None:
            continue
        c, t = _split_scale(other, single, node.dtype)
        if c.type != node.type or found[0].type != node.type or not _accumulator(c, single):
            continue
        return found[0], c, sign_s, found[1], sign_t, t
    return None


def _scale(node: Node | None, sign: int, dtype: str) -> Node:
    """``sign * node`` (``node`` None: 1), folded when constant."""
    if node is None:
        return constant(np.asarray(sign, dtype))
    if sign == 1:
        return node
    if is_const(node):
        return constant(np.asarray(-const_value(node), dtype))
    return build("neg", [node])


def gemm(graph: Graph) -> Graph:
    """Returns ``graph`` with the sums of the module docstring as ``gemm`` nodes."""
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    single = {k for k, us in users.items() if len(us) == 1 and k not in outputs}
    new: dict[int, Node] = {}
    changed = False
    for node in graph.nodes:
        ins = [new[id(i)] for i in node.inputs]
        found = _match(node, single)
        if found is None:
            new[id(node)] = rebuild(node, ins) if node.inputs else node
            continue
        p, c, sign_s, s, sign_t, t = found
        a, b = (new[id(i)] for i in p.inputs)
        alpha = _scale(None if s is None else new[id(s)], sign_s, node.dtype)
        beta = _scale(None if t is None else new[id(t)], sign_t, node.dtype)
        out = build("gemm", [a, b, new[id(c)], alpha, beta])
        if out.type != node.type:
            new[id(node)] = rebuild(node, ins)
            continue
        new[id(node)] = out
        changed = True
    if not changed:
        return graph
    return with_outputs(graph, [new[id(o)] for o in graph.outputs])
