"""remat: rematerialization (recomputation) under a memory budget.

When the planned peak (``plan_memory(graph, batch_size=...).peak_bytes``) exceeds the budget,
the pass trades compute for memory, greedily:

1. schedule and plan the graph; find the step where the most bytes are alive;
2. candidates are values alive across that step, read before it but not at it (in a
   training step: forward activations waiting for the backward pass). A candidate's *late*
   uses are those after the peak step. Its recomputation is the candidate plus every
   ancestor that is no longer alive at its first late use, down to values that are
   (checkpoints), sources and constants;
3. the candidate with the best bytes-freed per recomputed element (cheap elementwise
   producers first, then chains through matmuls) that does not raise the memory in use at
   its late use above the current peak is chosen; its recomputation is cloned and its late
   uses read the clone. The demand-driven scheduler runs the clone just before those uses;
   Several candidates with disjoint chains are applied per round, about as many as the
   excess over the budget needs;
4. repeat until the plan fits, or raise ``ValueError`` naming the smallest peak reached
   (when no candidate is left, or :data:`PATIENCE` rounds bring no smaller peak).

The clones run the same ops on the same values, so results are bit-identical. To keep a
clone from being merged back into the original by hash-consing, the first node of each
cloned chain reads one input through ``remat_barrier(x, tag)`` (see barrier.py): inside the
fused program for elementwise, fused and reduction nodes (free: a copy in registers), as a
separate copy of the smallest input otherwise (a matmul copies its weight).

Example:
    >>> g = remat(graph, "64MB", batch_size=128)
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np

from kiln.core.ir import Graph, Node
from kiln.core.memory import MemoryPlan, plan_memory, type_nbytes
from kiln.core.ops.fused import fused, program_of
from kiln.core.ops.registry import ELEMENTWISE, FUSED, LINALG, REDUCE, get_op
from kiln.core.passes._util import build, is_source, rebuild, with_outputs
from kiln.core.passes.barrier import tag_node
from kiln.core.passes.fuse import REDUCTIONS

MAX_RECOMPUTE = 64  # nodes in one recomputed chain
PATIENCE = 16  # rounds without a smaller peak (arena or live) before giving up

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(value: Any) -> int:
    """A byte count from an int or a string such as ``"64MB"`` (decimal: kB, MB, GB, TB) or
    ``"1.5GiB"`` (binary: KiB, MiB, GiB, TiB); case-insensitive, spaces allowed.

    Example:
        >>> parse_bytes("1.5 KiB"), parse_bytes("2MB"), parse_bytes(100)
        (1536, 2000000, 100)
    """
    if isinstance(value, bool):
        raise TypeError(f"memory_budget: expected bytes (int) or a string like '64MB', "
                        f"received {value!r}")
    if isinstance(value, int | np.integer | float | np.floating):
        number, unit = float(value), ""
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(f"memory_budget: cannot parse {value!r}; use bytes or a number "
                             f"with a unit ({', '.join(k for k in _UNITS if k)})")
        number, unit = float(m.group(1)), m.group(2).lower()
    else:
        raise TypeError(f"memory_budget: expected bytes (int) or a string like '64MB', "
                        f"received {type(value).__name__}")
    result = int(number * _UNITS[unit])
    if result <= 0 or not np.isfinite(number):
        raise ValueError(f"memory_budget: must be a positive size, received {value!r}")
    return result


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _cost(node: Node, batch_size: int) -> float:
    """Rough work of recomputing ``node`` (elements touched; multiply-adds for matmul)."""
    elems = type_nbytes(node.type, batch_size) / max(np.dtype(node.dtype).itemsize, 1)
    kind = get_op(node.op).kind
    if kind == LINALG:
        a = node.inputs[0]
        k = a.shape[-1] if a.shape and a.shape[-1] is not None else batch_size
        return elems * k
    if kind == REDUCE:
        x = node.inputs[0]
        return type_nbytes(x.type, batch_size) / max(np.dtype(x.dtype).itemsize, 1)
    if kind == FUSED:
        return elems * len(node.attrs["program"])
    return elems


class _Choice:
    def __init__(self, value: Node, late: list[Node], chain: list[Node]):
        self.value, self.late, self.chain = value, late, chain


def _choose(graph: Graph, plan: MemoryPlan, tried: dict[int, Node],
            excess: int) -> list[_Choice]:
    """Recomputations to apply now: the best-scoring candidates at the peak step, as many as
    free about ``excess`` bytes, with disjoint chains (so they do not interfere)."""
    order, first, last, nbytes = plan.order, plan.first, plan.last, plan.nbytes
    if not order:
        return []
    live = plan.live_bytes
    peak_step = max(range(len(order)), key=lambda t: live[t])
    peak = live[peak_step]
    outputs = {id(o) for o in graph.outputs}
    users = graph.users()

    found: list[tuple[float, int, int, _Choice]] = []
    for v in order:
        vid = id(v)
        if not (first[vid] < peak_step < last[vid]) or vid in outputs or vid in tried:
            continue
        if any(first[id(u)] == peak_step for u in users[vid]):
            continue
        late = [u for u in users[vid] if first[id(u)] > peak_step]
        if len(late) == len(users[vid]):
            continue  # no use before the peak: recomputing would only move the value
        t_late = min(first[id(u)] for u in late)
        chain = _chain(v, t_late, plan, outputs)
        if chain is None:
            continue
        extra = sum(nbytes[id(n)] for n in chain if n is not v)
        head = chain[0]
        if get_op(head.op).kind not in (ELEMENTWISE, FUSED) and head.op not in REDUCTIONS:
            extra += min((type_nbytes(i.type, plan.batch_size) for i in head.inputs),
                         default=0)
        if live[t_late] + extra >= peak:
            continue  # would only move the peak to the late use
        cost = sum(_cost(n, plan.batch_size) for n in chain) + 1.0
        found.append((nbytes[vid] / cost, nbytes[vid], -first[vid], _Choice(v, late, chain)))
    found.sort(key=lambda f: f[:3], reverse=True)
    chosen: list[_Choice] = []
    touched: set[int] = set()
    freed = 0
    for _score, size, _pos, choice in found:
        near = {id(n) for n in choice.chain}
        near.update(id(i) for n in choice.chain for i in n.inputs)
        near.update(id(u) for u in choice.late)
        if near & touched:
            continue
        chosen.append(choice)
        touched |= near
        freed += size
        if freed >= excess:
            break
    return chosen


def _chain(v: Node, t_late: int, plan: MemoryPlan, outputs: set[int]) -> list[Node] | None:
    """``v`` and the ancestors that must be recomputed with it at step ``t_late`` (those not
    alive then), in topological order; None when too long."""
    first, last = plan.first, plan.last
    members: dict[int, Node] = {id(v): v}
    stack = [v]
    while stack:
        n = stack.pop()
        for i in n.inputs:
            if is_source(i) or id(i) in members:
                continue
            alive = first[id(i)] < t_late <= last[id(i)] or id(i) in outputs
            if alive:
                continue
            members[id(i)] = i
            if len(members) > MAX_RECOMPUTE:
                return None
            stack.append(i)
    return sorted(members.values(), key=lambda n: first[id(n)])


def _barriered(node: Node, tag: int) -> Node:
    """A node computing exactly what ``node`` computes, distinct from it."""
    kind = get_op(node.op).kind
    inputs = list(node.inputs)
    if kind in (ELEMENTWISE, FUSED) or node.op in REDUCTIONS:
        program = program_of(node)
        n_in = len(inputs)

        def shift(a: int) -> int:
            if a >= 0:
                return a + 1
            return 0 if a == -1 else a

        new_program: list[tuple[str, tuple[int, ...], tuple]] = [
            ("remat_barrier", (-1, -(n_in + 1)), ())]
        new_program += [(op, tuple(shift(a) for a in args), attrs)
                        for op, args, attrs in program]
        return fused(inputs + [tag_node(tag)], new_program)
    k = min(range(len(inputs)), key=lambda j: (type_nbytes(inputs[j].type), j))
    inputs[k] = build("remat_barrier", [inputs[k], tag_node(tag)])
    return rebuild(node, inputs)


def _apply(graph: Graph, choices: list[_Choice], tags: itertools.count) -> Graph:
    """Clones each choice's chain and points its late uses at the clone."""
    swap: dict[int, tuple[Node, Node, set[int]]] = {}  # id(value) -> (value, clone, late ids)
    for choice in choices:
        clone: dict[int, Node] = {}
        for n in choice.chain:
            if any(id(i) in clone for i in n.inputs):
                clone[id(n)] = rebuild(n, [clone.get(id(i), i) for i in n.inputs])
            else:
                clone[id(n)] = _barriered(n, next(tags))
        v = choice.value
        swap[id(v)] = (v, clone[id(v)], {id(u) for u in choice.late})
    new: dict[int, Node] = {}
    for n in graph.nodes:
        if is_source(n):
            new[id(n)] = n
            continue
        ins = []
        for i in n.inputs:
            s = swap.get(id(i))
            ins.append(s[1] if s is not None and id(n) in s[2] else new[id(i)])
        new[id(n)] = rebuild(n, ins)
    return with_outputs(graph, [new[id(o)] for o in graph.outputs])


def _first_tag(graph: Graph) -> int:
    tags = [int(n.inputs[1].attrs["value"].array) for n in graph.nodes
            if n.op == "remat_barrier" and n.inputs[1].op == "constant"]
    for n in graph.nodes:
        if n.op == "fused":
            for op, args, _ in n.attrs["program"]:
                if op == "remat_barrier" and args[1] < 0:
                    t = n.inputs[-args[1] - 1]
                    if t.op == "constant":
                        tags.append(int(t.attrs["value"].array))
    return max(tags, default=-1) + 1


def remat(graph: Graph, memory_budget: Any, batch_size: int = 1,
          max_rounds: int | None = None) -> Graph:
    """Recomputes values so that the planned peak fits ``memory_budget``.

    Args:
        graph: the graph (after fusion, normally).
        memory_budget: bytes (int) or a string like ``"64MB"`` / ``"1.5GiB"``.
        batch_size: the value of unknown (None) dimensions in the plan.
        max_rounds: most recomputations to try (default: scales with the graph).

    Returns:
        ``graph`` itself when it already fits, else a graph with recomputations.

    Raises:
        ValueError: when no sequence of recomputations the pass knows fits the budget; the
            message names the smallest planned peak it reached.
    """
    budget = parse_bytes(memory_budget)
    plan = plan_memory(graph, batch_size=batch_size)
    if plan.peak_bytes <= budget:
        return graph
    start = plan.peak_bytes
    best_peak, best_graph = plan.peak_bytes, graph
    tags = itertools.count(_first_tag(graph))
    tried: dict[int, Node] = {}
    rounds = max_rounds if max_rounds is not None else 4 * len(plan.order) + 16
    best_live, stale = plan.live_peak_bytes, 0
    for _ in range(rounds):
        if stale >= PATIENCE:
            break
        choices = _choose(graph, plan, tried, plan.peak_bytes - budget)
        if not choices:
            break
        graph = _apply(graph, choices, tags)
        for c in choices:
            tried[id(c.value)] = c.value
        plan = plan_memory(graph, batch_size=batch_size)
        stale += 1
        if plan.live_peak_bytes < best_live:
            best_live, stale = plan.live_peak_bytes, 0
        if plan.peak_bytes < best_peak:
            best_peak, best_graph, stale = plan.peak_bytes, graph, 0
        if plan.peak_bytes <= budget:
            return graph
    del best_graph
    raise ValueError(
        f"remat: cannot fit the memory budget of {budget} bytes ({format_bytes(budget)}) at "
        f"batch_size={batch_size}: the planned peak is {start} bytes without "
        f"rematerialization and the smallest peak reachable by recomputation is {best_peak} "
        f"bytes ({format_bytes(best_peak)})")
