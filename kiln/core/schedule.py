"""Kernel scheduling: the order in which a backend runs a graph's kernels.

API (used by the memory planner and the backends)::

    schedule(graph) -> list[Node]

returns every *kernel* of ``graph`` (each node that is not a placeholder, param or constant;
a fused node is one kernel) exactly once, inputs before users.

The order is a depth-first, demand-driven one that tends to free memory early:

* the graph outputs are visited in order of increasing depth (longest path from a source),
  so in a training step the loss comes first, then the update of the LAST layer (whose
  gradient is ready first), then the layer before it, ...: each weight gradient is consumed
  by its update right after it is computed, instead of all gradients living until the end;
* below a node, its inputs are visited deepest first, so a long chain (the back-propagated
  gradient) runs before short ones (a transpose of a saved activation, a rematerialized
  value), and the short ones are computed just before the node that reads them.

Example:
    >>> order = schedule(graph)
    >>> [n.op for n in order][:3]
    ['matmul', 'fused', 'matmul']
"""

from __future__ import annotations

from kiln.core.ir import Graph, Node

_SOURCES = ("constant", "placeholder", "param")


def depths(graph: Graph) -> dict[int, int]:
    """Longest path (in kernels) from any source to each node; sources have depth 0."""
    depth: dict[int, int] = {}
    for n in graph.nodes:
        if n.op in _SOURCES:
            depth[id(n)] = 0
        else:
            depth[id(n)] = 1 + max((depth[id(i)] for i in n.inputs), default=0)
    return depth


def schedule(graph: Graph) -> list[Node]:
    """The graph's kernels in execution order (see the module docstring)."""
    depth = depths(graph)
    position = {id(n): k for k, n in enumerate(graph.nodes)}
    roots: list[Node] = []
    seen_roots: set[int] = set()
    for o in graph.outputs:
        if id(o) not in seen_roots:
            seen_roots.add(id(o))
            roots.append(o)
    roots.sort(key=lambda n: (depth[id(n)], position[id(n)]))

    order: list[Node] = []
    done: set[int] = set()
    for root in roots:
        if id(root) in done:
            continue
        stack: list[tuple[Node, list[Node], int]] = [(root, _children(root, depth), 0)]
        while stack:
            node, kids, i = stack[-1]
            if i < len(kids):
                stack[-1] = (node, kids, i + 1)
                child = kids[i]
                if id(child) not in done:
                    stack.append((child, _children(child, depth), 0))
                continue
            stack.pop()
            if id(node) in done:
                continue
            done.add(id(node))
            if node.op not in _SOURCES:
                order.append(node)
    return order


def _children(node: Node, depth: dict[int, int]) -> list[Node]:
    """Inputs to visit, deepest first (stable for equal depths)."""
    kids = [i for i in node.inputs if i.op not in _SOURCES]
    if len(kids) > 1:
        kids = sorted(kids, key=lambda n: -depth[id(n)])
    return kids
