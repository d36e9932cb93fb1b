"""Graph rewrites the CPU backend applies before planning: ops expressed through others.

* ``logsumexp(x)`` -> ``m = max(x)``, ``m0 = where(m - m == 0, m, 0)`` (0 where m is not
  finite, like the reference), ``log(sum(exp(x - m0))) + m0``: two generated reductions and
  one elementwise kernel;
* a fused node whose reduction epilogue is ``logsumexp`` -> its elementwise prefix as a fused
  node, then the lowered logsumexp.
"""

from __future__ import annotations

import numpy as np

from kiln.core.ir import Graph, Node, rebuild
from kiln.core.ops.fused import fused
from kiln.core.ops.registry import apply
from kiln.core.ops.source import constant


def _logsumexp(x: Node, axis: tuple[int, ...], keepdims: bool) -> Node:
    zero = constant(np.asarray(0, dtype=x.dtype))
    m = apply("max", x, axis=axis, keepdims=True)
    finite = apply("equal", apply("sub", m, m), zero)
    m0 = apply("where", finite, m, zero)
    s = apply("sum", apply("exp", apply("sub", x, m0)), axis=axis, keepdims=True)
    out = apply("add", apply("log", s), m0)
    if not keepdims and axis:
        out = apply("squeeze", out, axis=axis)
    return out


def _lower_node(node: Node) -> Node | None:
    if node.op == "logsumexp":
        return _logsumexp(node.inputs[0], node.attrs["axis"], node.attrs["keepdims"])
    if node.op == "fused":
        program = node.attrs["program"]
        op, args, attrs = program[-1]
        if op != "logsumexp":
            return None
        src = args[0]
        x = node.inputs[-src - 1] if src < 0 else fused(node.inputs, program[:src + 1])
        a = dict(attrs)
        return _logsumexp(x, a["axis"], a["keepdims"])
    return None


def lower(graph: Graph) -> Graph:
    """``graph`` with the rewrites above applied (the same graph when nothing changes)."""
    if not any(_lowers(n) for n in graph.nodes):
        return graph
    new: dict[int, Node] = {}
    for node in graph.nodes:
        ins = [new[id(i)] for i in node.inputs]
        rebuilt = rebuild(node, ins) if node.inputs else node
        lowered = _lower_node(rebuilt)
        new[id(node)] = rebuilt if lowered is None else lowered
    return Graph(graph.inputs, [new[id(o)] for o in graph.outputs])


def _lowers(node: Node) -> bool:
    return node.op == "logsumexp" or (node.op == "fused"
                                      and node.attrs["program"][-1][0] == "logsumexp")
