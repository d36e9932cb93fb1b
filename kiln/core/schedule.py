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
  value), and the short ones are computed just before the node that reads them;
* a split collective (``allreduce_start`` ... ``allreduce_wait``) overlaps with the kernels
  between them: every ``allreduce_wait``, with all that depends on it, runs after everything
  else (each start stays where the order computes it, as soon as its input is ready), so the
  sums of a data-parallel step travel while the rest of the backward pass runs.

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
    return _waits_last(order)


def _waits_last(order: list[Node]) -> list[Node]:
    """``order`` with each ``allreduce_wait`` and every kernel depending on it moved after the
    others (both parts keep their relative order, so inputs still come before users), then
    each ``allreduce_start``, with the kernels computing only its input, moved up to just after
    the last kernel it needs."""
    late: set[int] = set()
    for n in order:
        if n.op == "allreduce_wait" or any(id(i) in late for i in n.inputs):
            late.add(id(n))
    if not late:
        return order
    order = [n for n in order if id(n) not in late] + [n for n in order if id(n) in late]
    readers: dict[int, list[Node]] = {}
    for n in order:
        for i in n.inputs:
            readers.setdefault(id(i), []).append(n)
    early: set[int] = set()  # the starts and what only they read
    for n in reversed(order):
        users = readers.get(id(n), [])
        if n.op == "allreduce_start" or (users and all(id(u) in early for u in users)):
            early.add(id(n))
    # sort keys: a kept node's position; a moved node's key extends its latest input's, so it
    # sorts right after that input (and after the nodes moved there before it)
    key: dict[int, tuple[int, ...]] = {}
    count = 0
    for k, n in enumerate(order):
        if id(n) in early:
            count += 1
            key[id(n)] = max((key[id(i)] for i in n.inputs if id(i) in key),
                             default=(-1,)) + (count,)
        else:
            key[id(n)] = (k,)
    return sorted(order, key=lambda n: key[id(n)])


def _children(node: Node, depth: dict[int, int]) -> list[Node]:
    """Inputs to visit, deepest first (stable for equal depths)."""
    kids = [i for i in node.inputs if i.op not in _SOURCES]
    if len(kids) > 1:
        kids = sorted(kids, key=lambda n: -depth[id(n)])
    return kids
