"""fuse: elementwise fusion into ``fused`` nodes (format: kiln/core/ops/fused.py).

Groups are grown backwards from a root, visiting candidate producers in decreasing
topological position (so every user of a candidate has been decided before the candidate):

* a root is an elementwise node, or a reduction (sum, mean, max, min, prod, logsumexp) whose
  input is absorbed: the reduction epilogue, always the last instruction;
* a producer joins the group when it is elementwise, not a graph output, has the group's
  iteration shape (the root's shape, or the reduced input's shape), and every one of its
  users is already in the group; so each group has exactly one output, its root;
* a *cheap* producer (one non-constant input, and a non-transcendental op: neg, abs, relu,
  cast, square, sign, floor, ceil, round, logical_not, or add/sub/mul/maximum/minimum with
  a constant or a smaller broadcast operand: BatchNormalization's ``x - mean``) with
  several users, all fusible and of its shape, is duplicated into each of its users' groups
  instead, and so is never materialized;
* broadcasts (``broadcast_to`` / ``broadcast_like``) stay outside, as producers: a group reads
  broadcast inputs through NumPy broadcasting in the generated loop, and simplify already
  removed the broadcasts that only fed elementwise ops. Smaller-shaped producers (a scalar
  learning-rate expression, a bias) are kept outside too, so they are computed once and not
  once per element of the loop;
* groups stop growing at ``PassOptions.fuse_max_instructions`` instructions.

No cycle can appear: a group's members other than its root have no users outside it (cheap
duplicates read their own input), so every external input of a group is an ancestor of its
root, as before. Groups of one op stay plain nodes (the backends run plain elementwise ops).

After scheduling, :func:`group_chains` finds the second kind of fusion, across kernels that
must stay separate values: chains of same-shape elementwise kernels where each reads an
earlier one (an optimizer's ``m``, ``v`` then ``p`` updates; ``add`` then ``relu`` when the sum
is needed later too; a residual sum after the normalization that produced one of its
inputs). It makes them adjacent in the kernel order, and a backend runs each chain
as ONE loop storing every member's value (:func:`kiln.core.ops.fused.combine` builds its
program, like :func:`build_fused` does for a fused node).

Example:
    >>> g = fuse(Graph([x], [kiln.ops.relu(x * 2.0 + 1.0)]))
    >>> g.outputs[0].op, len(g.outputs[0].attrs["program"])
    ('fused', 3)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from kiln.core.ir import Graph, Node
from kiln.core.memory import elementwise_output, planned_elements
from kiln.core.ops.fused import combine, fused, program_of, reduced_type
from kiln.core.ops.registry import get_op
from kiln.core.passes._util import (
    TRANSCENDENTAL,
    broadcasts_smaller,
    is_const,
    is_elementwise,
    is_source,
    options,
    rebuild,
    with_outputs,
)

REDUCTIONS = frozenset({"sum", "mean", "max", "min", "prod", "logsumexp"})
# reductions a multi-output loop may end with (the backends' generated reductions)
TAIL_REDUCTIONS = frozenset({"sum", "mean", "max", "min", "prod"})
# ... over at least this many elements (unknown dims counted as memory.PLANNER_BATCH): a
# loop whose data stays in the caches reads the stored value back nearly free, and the
# joined loop's accumulation in memory costs what the separate sum does (the MLP's ReLU
# gradient and bias sum, 128 x 512: 8.97 us joined against 5.18 + 4.04 us, in cache); past
# them one pass less is what counts (BatchNormalization's gradient over 16 MB: see
# docs/architecture.md, "Passes"): _util.PassOptions.fuse_tail_min_elements
CHEAP_UNARY = frozenset({"neg", "abs", "relu", "cast", "square", "sign", "floor", "ceil",
                         "round", "logical_not"})
CHEAP_BINARY = frozenset({"add", "sub", "mul", "maximum", "minimum"})


def is_cheap(node: Node) -> bool:
    """One cheap, non-transcendental op on a single non-constant input of the node's shape,
    the other (if any) a constant or a smaller broadcast operand (a batch mean, a bias)."""
    if node.op in TRANSCENDENTAL:
        return False
    if node.op in CHEAP_UNARY:
        return True
    if node.op not in CHEAP_BINARY:
        return False
    full = [i for i in node.inputs if not is_const(i) and not broadcasts_smaller(i, node)]
    return len(full) == 1


def _fusible(node: Node) -> bool:
    return not is_source(node) and is_elementwise(node)


def find_groups(graph: Graph) -> list[list[Node]]:
    """The fusion groups of ``graph``: lists of member nodes in topological order, the root
    last. Only groups of two or more instructions are returned."""
    nodes = graph.nodes
    index = {id(n): k for k, n in enumerate(nodes)}
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    assigned: set[int] = set()

    def consumer_ok(u: Node) -> bool:
        return _fusible(u) or (u.op in REDUCTIONS and _fusible(u.inputs[0]))

    inlinable = {id(n) for n in nodes
                 if _fusible(n) and is_cheap(n) and id(n) not in outputs
                 and len({id(u) for u in users[id(n)]}) > 1
                 and all(consumer_ok(u) and (u.shape == n.shape or u.op in REDUCTIONS)
                         for u in users[id(n)])}

    groups: list[list[Node]] = []
    for root in reversed(nodes):
        if id(root) in assigned or id(root) in inlinable:
            continue
        if _fusible(root):
            shape = root.shape
        elif root.op in REDUCTIONS and _fusible(root.inputs[0]):
            shape = root.inputs[0].shape
        else:
            continue
        assigned.add(id(root))
        members = {id(root): root}
        heap: list[tuple[int, int]] = []
        _push(heap, root, members, index)
        while heap and len(members) < options().fuse_max_instructions:
            neg_k, pid = heapq.heappop(heap)
            p = nodes[-neg_k]
            if pid in members or id(p) in assigned or not _fusible(p) or pid in outputs:
                continue
            if p.shape != shape:
                continue
            # internal: read only inside this group, and not by a duplicated cheap op (whose
            # copies in other groups would read it too)
            internal = all(id(u) in members and id(u) not in inlinable for u in users[pid])
            if not internal and pid not in inlinable:
                continue
            members[pid] = p
            if internal and pid not in inlinable:
                assigned.add(pid)
            _push(heap, p, members, index)
        if len(members) > 1:
            groups.append(sorted(members.values(), key=lambda n: index[id(n)]))
    return groups


def _push(heap: list[tuple[int, int]], node: Node, members: dict[int, Node],
          index: dict[int, int]) -> None:
    """Queues ``node``'s inputs as candidates, latest in topological order first."""
    for i in node.inputs:
        if id(i) not in members:
            heapq.heappush(heap, (-index[id(i)], id(i)))


def build_fused(members: list[Node], map_input: Callable[[Node], Node] | None = None) -> Node:
    """The fused node computing ``members`` (topological order, root last); ``map_input``
    gives the node to read for each external input (default: the input itself)."""
    externals, program, _ = combine(members)
    if map_input is not None:
        externals = [map_input(e) for e in externals]
    node = fused(externals, program)
    if node.type != members[-1].type:
        raise RuntimeError(f"fuse: fused group of {len(members)} ops has type {node.type}, "
                           f"its root {members[-1].op} has {members[-1].type}")
    return node


def fuse(graph: Graph) -> Graph:
    """Returns ``graph`` with maximal elementwise groups collapsed into ``fused`` nodes."""
    groups = find_groups(graph)
    if not groups:
        return graph
    root_of = {id(g[-1]): g for g in groups}
    internal = {id(m) for g in groups for m in g[:-1]}
    new: dict[int, Node] = {}
    for node in graph.nodes:
        group = root_of.get(id(node))
        if group is not None:
            new[id(node)] = build_fused(group, lambda e: _get(new, e))
        elif id(node) in internal:
            continue  # computed inside its group(s); rebuilt below only if still referenced
        elif is_source(node):
            new[id(node)] = node
        else:
            new[id(node)] = rebuild(node, [_get(new, i) for i in node.inputs])
    return with_outputs(graph, [_get(new, o) for o in graph.outputs])


def _get(new: dict[int, Node], node: Node) -> Node:
    """The rebuilt ``node``; internal members are rebuilt on demand (a cheap duplicate that
    some consumer still reads, e.g. through a group that hit the size limit)."""
    if id(node) in new:
        return new[id(node)]
    stack = [node]
    while stack:
        n = stack[-1]
        missing = [i for i in n.inputs if id(i) not in new]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        if id(n) not in new:
            new[id(n)] = rebuild(n, [new[id(i)] for i in n.inputs])
    return new[id(node)]


# ---- multi-output groups over a kernel order ----------------------------------------------------
def _chainable(node: Node) -> bool:
    """A kernel computed elementwise (may join a multi-output group)."""
    return not is_source(node) and get_op(node.op).view is None and elementwise_output(node)


def reduction_tail(node: Node) -> tuple | None:
    """The iteration shape of ``node`` where it may END a multi-output group: a generated
    reduction (plain, or a fused node whose program ends with one) over at least
    ``PassOptions.fuse_tail_min_elements`` elements; None otherwise."""
    if is_source(node) or (node.op != "fused" and node.op not in TAIL_REDUCTIONS):
        return None
    if program_of(node)[-1][0] not in TAIL_REDUCTIONS:
        return None
    t = reduced_type(node)
    if t is None or planned_elements(t.shape) < options().fuse_tail_min_elements:
        return None
    return t.shape


def _same_reduction(a: Node, b: Node) -> bool:
    """Whether two reduction tails reduce the same iteration space along the same axes to
    the same shape (their outputs then share one layout)."""
    attrs = [dict(program_of(n)[-1][2]) for n in (a, b)]
    return (a.shape == b.shape and reduction_tail(a) == reduction_tail(b)
            and all(attrs[0].get(k) == attrs[1].get(k) for k in ("axis", "keepdims")))


def _takes(group: list[Node], node: Node, shape: tuple) -> bool:
    """Whether ``group`` (members in order) may take ``node`` (iterating over ``shape``):
    an open group (its members elementwise, of that shape) takes an elementwise kernel or a
    reduction; a group ended by reductions takes only another reduction of the same axes
    that reads none of them (nothing in the loop reads an accumulator)."""
    stored = [m for m in group if _chainable(m)]
    if any(m.shape != shape for m in stored):
        return False
    if len(stored) == len(group):
        return True
    tails = [m for m in group if not _chainable(m)]
    return (reduction_tail(node) is not None and _same_reduction(tails[-1], node)
            and not any(i is t for i in node.inputs for t in tails))


def _reads_any(nodes: list[Node], sources: list[Node], users: dict[int, list[Node]]) -> bool:
    """Whether any of ``nodes`` reads one of ``sources`` (through views)."""
    targets = {id(n) for n in nodes}
    stack = list(sources)
    while stack:
        for u in users.get(id(stack.pop()), []):
            if id(u) in targets:
                return True
            if get_op(u.op).view is not None:
                stack.append(u)
    return False


def group_chains(graph: Graph, updates: list[tuple[int, Any]],
                 order: list[Node]) -> tuple[list[Node], dict[int, list[Node]]]:
    """Groups same-shape elementwise kernels where each member after the first reads an
    earlier one (a momentum or Adam update: m, v, then p from both), for one loop with side
    outputs. The members are made adjacent: the producers' groups move down to the consumer
    when nothing in between reads them, or else the consumer moves up to its latest producer
    when nothing in between reads what it overwrites (an update of a Variable).

    A reduction over the group's shape that reads a member may end the group
    (:func:`reduction_tail`): the loop then stores the members and accumulates the reduction
    in the same pass (a ReLU gradient and the bias gradient summed from it). After it only
    more reductions along the same axes join (BatchNormalization's gradient: the channel
    sums of ``dy`` and of ``dy * (x - mean)``), each into its own output (:func:`_takes`).

    Args:
        graph: the program's graph.
        updates: ``(output index, Variable)`` pairs: outputs that overwrite a Variable.
        order: the kernels in execution order.

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
        shape = node.shape if _chainable(node) else reduction_tail(node)
        if shape is None:
            continue
        pos = {id(n): t for t, n in enumerate(order)}
        groups: list[list[Node]] = []
        heads: set[int] = set()
        for i in node.inputs:  # an input read twice (x * x) is one producer
            if _chainable(i) and i.shape == shape and id(i) in pos:
                g = group_of.get(id(i), [i])
                if id(g[0]) not in heads and _takes(g, node, shape):
                    heads.add(id(g[0]))
                    groups.append(g)
        if not groups:
            continue
        groups.sort(key=lambda g: pos[id(g[0])])
        if (sum(len(program_of(m)) for g in groups for m in g)
                > options().fuse_max_chain_instructions):
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
        else:
            # move the node up, right after its latest producer's group, where every other
            # input comes before that group (a residual x + relu(bn): x computed long before
            # the normalization, which the sum then joins)
            group = groups[-1]
            gids = {id(m) for m in group}
            end = pos[id(group[-1])]
            gap = order[end + 1:pos[id(node)]]
            if any(not is_source(i) and id(i) not in gids and pos[id(i)] > end
                   for i in node.inputs):
                continue
            if updated.get(id(node)) and _reads_any(gap, updated[id(node)], users):
                continue  # moving this update earlier would overwrite a value still read
            order = order[:end + 1] + [node] + [n for n in order[end + 1:] if n is not node]
            group = list(group)
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
