"""The order of a CPU program's kernels, decided once per program.

* :func:`schedule`: ``kiln.core.schedule`` (the passes' scheduler) when available;
* :func:`sink_updates`: each update moves after the last kernel that reads the variable's old
  value, so that it can be written straight into the variable's buffer;
* :func:`merge_chains`: chains of same-shape elementwise kernels (an optimizer's ``m``, ``v``
  and ``p`` updates; ``add`` + ``relu`` when the sum is needed later too) are made adjacent,
  to run as one loop with side outputs.
"""

from __future__ import annotations

from typing import Any

from kiln.core.backends.cpu.registry import BUILDERS, VIEWS
from kiln.core.ir import Graph, Node
from kiln.core.ops.registry import ELEMENTWISE, FUSED, get_op

SOURCES = ("placeholder", "param", "constant")
MAX_GROUP_INSTRUCTIONS = 48


def is_aligned_elementwise(node: Node) -> bool:
    """True when element k of the result depends only on element k of each input (read
    before written), so the result may overwrite an input with the same layout."""
    kind = get_op(node.op).kind
    if kind == ELEMENTWISE:
        return True
    if kind == FUSED:
        return get_op(node.attrs["program"][-1][0]).kind == ELEMENTWISE
    return False


def _program(node: Node) -> tuple:
    from kiln.core.ops.fused import program_of

    return program_of(node)


def _chainable(node: Node) -> bool:
    """A kernel that is a generated elementwise loop (may join a multi-output group)."""
    return (node.op not in SOURCES and node.op not in VIEWS and node.op not in BUILDERS
            and is_aligned_elementwise(node))


def _reads_any(nodes: list[Node], sources: list[Node], users: dict[int, list[Node]]) -> bool:
    """Whether any of ``nodes`` reads one of ``sources`` (through movement ops)."""
    targets = {id(n) for n in nodes}
    stack = list(sources)
    while stack:
        for u in users.get(id(stack.pop()), []):
            if id(u) in targets:
                return True
            if u.op in VIEWS:
                stack.append(u)
    return False



def schedule(graph: Graph) -> list[Node]:
    """The kernels in execution order: ``kiln.core.schedule`` when it exists and gives a valid
    order, else the graph's topological order."""
    kernels = [n for n in graph.nodes if n.op not in SOURCES]
    try:
        from kiln.core.schedule import schedule
    except ImportError:
        return kernels
    try:
        order = list(schedule(graph))
    except Exception:  # a scheduler bug must not stop the program
        return kernels
    pos = {id(n): k for k, n in enumerate(order)}
    if len(order) != len(kernels) or set(pos) != {id(n) for n in kernels}:
        return kernels
    for n in order:
        if any(id(i) in pos and pos[id(i)] >= pos[id(n)] for i in n.inputs):
            return kernels
    return order


def merge_chains(graph: Graph, updates: list[tuple[int, Any]],
                 order: list[Node]) -> tuple[list[Node], dict[int, list[Node]]]:
    """Groups same-shape elementwise kernels where each member after the first reads an
    earlier one (a momentum or Adam update: m, v, then p from both) into one loop with
    side outputs. The members are made adjacent: the producers' groups move down to the
    consumer when nothing in between reads them, or else the consumer moves up to its
    latest producer when nothing in between reads what it overwrites.

    Returns:
        The new order and the groups (id(first member) -> members, adjacent in the order).
    """
    group_of: dict[int, list[Node]] = {}
    updated: dict[int, list[Node]] = {}
    for k, var in updates:
        updated.setdefault(id(graph.outputs[k]), []).append(var.__kiln_node__())
    users: dict[int, list[Node]] = {}
    for n in order:
        for i in n.inputs:
            users.setdefault(id(i), []).append(n)
    for node in list(order):
        if not _chainable(node):
            continue
        pos = {id(n): t for t, n in enumerate(order)}
        groups: list[list[Node]] = []
        for i in node.inputs:
            if _chainable(i) and i.shape == node.shape and id(i) in pos:
                g = group_of.get(id(i), [i])
                if all(g is not h for h in groups) and all(m.shape == node.shape for m in g):
                    groups.append(g)
        if not groups:
            continue
        groups.sort(key=lambda g: pos[id(g[0])])
        if sum(len(_program(m)) for g in groups for m in g) > MAX_GROUP_INSTRUCTIONS:
            continue
        members = [m for g in groups for m in g]
        ids = {id(m) for m in members}
        first = pos[id(groups[0][0])]
        between = [n for n in order[first:pos[id(node)]] if id(n) not in ids]
        between_ids = {id(n) for n in between}
        if not any(id(u) in between_ids for m in members for u in users.get(id(m), [])):
            # move the producers' groups down, right before the node
            order = order[:first] + between + members + order[pos[id(node)]:]
            group = members
        elif len(groups) == 1:
            # move the node up, right after its producer's group
            group = groups[0]
            end = pos[id(group[-1])]
            gap = order[end + 1:pos[id(node)]]
            if any(i.op not in SOURCES and id(i) not in ids and pos[id(i)] > end
                   for i in node.inputs):
                continue
            if updated.get(id(node)) and _reads_any(gap, updated[id(node)], users):
                continue  # moving this update earlier would overwrite a value still read
            order = order[:end + 1] + [node] + [n for n in order[end + 1:] if n is not node]
            group = list(group)
        else:
            continue
        group.append(node)
        for m in group:
            group_of[id(m)] = group
    groups_out: dict[int, list[Node]] = {}
    pos = {id(n): t for t, n in enumerate(order)}
    for g in group_of.values():
        start = pos[id(g[0])]
        if len(g) > 1 and [id(n) for n in order[start:start + len(g)]] == [id(m) for m in g]:
            groups_out[id(g[0])] = g
    return order, groups_out


def sink_updates(graph: Graph, updates: list[tuple[int, Any]],
                 order: list[Node]) -> list[Node]:
    """Moves each update kernel (with whatever depends on it) after the last kernel that
    reads the variable's old value, so that it can write into the variable's buffer.

    Movement ops count as transparent: a kernel reading a transpose of a weight reads it.
    """
    users: dict[int, list[Node]] = {}
    for n in order:
        for i in n.inputs:
            users.setdefault(id(i), []).append(n)
    for k, var in updates:
        u = graph.outputs[k]
        if u.op in SOURCES:
            continue
        pos = {id(n): t for t, n in enumerate(order)}
        readers, stack = [], [var.__kiln_node__()]
        while stack:
            for user in users.get(id(stack.pop()), []):
                if user.op in VIEWS:
                    stack.append(user)
                elif user is not u:
                    readers.append(pos[id(user)])
        if id(u) not in pos or not readers or max(readers) < pos[id(u)]:
            continue
        last = max(readers)
        start = pos[id(u)]
        moved = {id(u)}
        for n in order[start + 1:last + 1]:
            if any(id(i) in moved for i in n.inputs):
                moved.add(id(n))
        if any(id(order[r]) in moved for r in readers):
            continue  # a reader depends on the update itself: cannot sink
        window = order[start:last + 1]
        order = (order[:start] + [n for n in window if id(n) not in moved]
                 + [n for n in window if id(n) in moved] + order[last + 1:])
    return order
