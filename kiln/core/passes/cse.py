"""cse: common-subexpression elimination beyond hash-consing.

Hash-consing already merges nodes with the same op, the same input objects and equal
attributes. This pass adds global value numbering: every node gets a number; a node's key is
``(op, attributes, input numbers)``, with the input numbers sorted for commutative ops (add,
mul, maximum, minimum, equal, not_equal, logical_and, logical_or), and constants are keyed by
dtype, shape and bytes. Two nodes with equal keys are the same value, so ``add(a, b)`` and
``add(b, a)`` become one node, and so does everything computed from them.

Operand order after the pass: constants last, the rest by value number (deterministic for a
given graph). IEEE addition, multiplication, max and min are commutative bit for bit.

Example:
    >>> g = cse(Graph([a, b], [a + b, b + a]))
    >>> g.outputs[0] is g.outputs[1]
    True
"""

from __future__ import annotations

from typing import Any

from kiln.core.ir import Graph, Node
from kiln.core.passes._util import COMMUTATIVE, is_const, rebuild, with_outputs


def _attr_key(node: Node) -> tuple[Any, ...]:
    return tuple(sorted(node.attrs.items()))


def cse(graph: Graph) -> Graph:
    """Returns ``graph`` with equal values merged (see the module docstring)."""
    number: dict[int, int] = {}  # id(new node) -> value number
    by_key: dict[Any, Node] = {}
    new: dict[int, Node] = {}
    keep: list[Node] = []  # keeps the new nodes alive while ids are in use
    for node in graph.nodes:
        ins = [new[id(i)] for i in node.inputs]
        if node.op in COMMUTATIVE and len(ins) == 2:
            ins.sort(key=lambda n: (is_const(n), number[id(n)]))
        if node.op == "constant":
            arr = node.attrs["value"].array
            key: Any = ("constant", arr.dtype.str, arr.shape, arr.tobytes())
        elif node.op in ("placeholder", "param"):
            key = ("source", id(node))
        else:
            key = (node.op, _attr_key(node), tuple(number[id(i)] for i in ins))
        found = by_key.get(key)
        if found is None:
            found = node if node.op in ("placeholder", "param") else rebuild(node, ins)
            by_key[key] = found
            if id(found) not in number:
                number[id(found)] = len(number)
                keep.append(found)
        new[id(node)] = found
    return with_outputs(graph, [new[id(o)] for o in graph.outputs])
