"""Memory planning: buffer lifetimes -> buffer reuse and in-place updates (an arena plan).

API (used by the CPU backend for its arena, and by the ``remat`` pass)::

    plan = plan_memory(graph, order=None, batch_size=1, inplace=True)

    plan.order          list[Node]: the kernels in execution order (``schedule(graph)`` unless
                        ``order`` is given)
    plan.buffer         dict id(node) -> buffer index, for every kernel's result. Placeholders,
                        params and constants have no arena buffer (their arrays are fed, owned
                        by a Variable, or held by the graph).
    plan.buffer_bytes   list[int]: the size of each buffer in bytes (the largest value it holds)
    plan.offsets        list[int]: each buffer's byte offset in one arena, 64-byte aligned
    plan.arena_bytes    int: size of that arena (sum of the aligned sizes)
    plan.peak_bytes     int: sum of ``buffer_bytes``, what an arena allocates
    plan.naive_bytes    int: sum of the sizes of all kernel results (no reuse at all)
    plan.live_peak_bytes  int: the largest total size of values alive at one step (a lower
                        bound for any reuse scheme)
    plan.live_bytes     list[int]: bytes alive at each step (in-place values counted once)
    plan.inplace        list[(node, input)]: ``node`` writes its result into the buffer of
                        ``input`` (same buffer index)
    plan.nbytes         dict id(node) -> size in bytes of the node's result
    plan.first, plan.last  dict id(node) -> step (index into ``order``) where the value is
                        produced / last read (``len(order)`` for graph outputs)
    plan.batch_size     the size given to every unknown (None) dimension

Rules:

* a value is alive from the step that computes it to the last step that reads it; graph
  outputs live to the end of the program (their buffers are never reused). Two values may
  share a buffer when their lifetimes do not overlap (the output of a step never shares
  with an input read at that step, except in place, below);
* buffers are assigned greedily by size (Pisarchyk & Lee, "Efficient memory management for
  deep neural net inference", 2020): the largest values first, each into the smallest
  existing buffer that is free for its whole lifetime, else into a new buffer. Big buffers
  are thus shared by big values and small values fill the gaps, instead of a small
  long-lived value pinning a big buffer. That search is quadratic in the worst case, so
  beyond ``GREEDY_LIMIT`` buffer records a linear scan in execution order is used instead
  (best fit among the free buffers at most twice the size needed, else a new buffer);
* in place (``inplace=True``): an elementwise kernel (an ELEMENTWISE op, or a fused node
  without a reduction epilogue), or a ``gemm`` into its ``c`` (:func:`overwritable_inputs`),
  writes into the buffer of an input that dies at that step,
  is a kernel result (not a source), is not a graph output, and has the same shape and
  dtype as the result (no broadcasting). Elementwise loops read element ``k`` of every input
  before writing element ``k`` of the result, so this is safe;
* every kernel result gets its own buffer (movement ops such as reshape are planned as copies;
  a backend that implements them as views can ignore their buffers).

Example:
    >>> plan = plan_memory(graph, batch_size=128)
    >>> plan.peak_bytes <= plan.naive_bytes
    True
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kiln.core.ir import Graph, Node, TensorType
from kiln.core.ops.registry import ELEMENTWISE, FUSED, get_op
from kiln.core.schedule import schedule

# The batch size the program-wide memory plan sizes unknown dims with, and that static choices
# count them as (threads or not, the gemm pass's size limit): a choice must not depend on the
# actual batch (see kiln.core.plan.StaticPlan.assign_buffers).
PLANNER_BATCH = 64


def planned_elements(shape: Sequence) -> int:
    """The elements of ``shape`` with every unknown dim counted as :data:`PLANNER_BATCH`."""
    return int(np.prod([PLANNER_BATCH if d is None else d for d in shape], dtype=np.int64))

ALIGN = 64
GREEDY_LIMIT = 2000  # records planned greedily by size; bigger graphs use a linear scan
_SOURCES = ("constant", "placeholder", "param")


def type_nbytes(t: TensorType, batch_size: int = 1) -> int:
    """Bytes of a tensor of type ``t``, with every None dimension taken as ``batch_size``."""
    n = 1
    for d in t.shape:
        n *= batch_size if d is None else d
    return int(n) * np.dtype(t.dtype).itemsize


@dataclass
class MemoryPlan:
    """The result of :func:`plan_memory` (fields are described in the module docstring)."""

    order: list[Node]
    buffer: dict[int, int]
    buffer_bytes: list[int]
    peak_bytes: int
    naive_bytes: int
    live_peak_bytes: int
    live_bytes: list[int]
    inplace: list[tuple[Node, Node]]
    nbytes: dict[int, int]
    first: dict[int, int]
    last: dict[int, int]
    batch_size: int
    offsets: list[int] = field(default_factory=list)
    arena_bytes: int = 0

    def __str__(self) -> str:
        return (f"MemoryPlan({len(self.order)} kernels, {len(self.buffer_bytes)} buffers, "
                f"peak {self.peak_bytes} B, naive {self.naive_bytes} B, "
                f"{len(self.inplace)} in place, batch_size={self.batch_size})")


def overwritable_inputs(node: Node) -> tuple[int, ...]:
    """Positions of the inputs whose buffer ``node``'s kernel may write its result into,
    reading element ``k`` before writing element ``k``: every input of an elementwise kernel;
    a ``gemm``'s ``c`` (BLAS reads and writes C element by element) when ``a`` and ``b`` are
    other values (it must not write what it still multiplies); the input of an
    ``allreduce_start``/``allreduce_wait`` (a copy, then a sum in place)."""
    if elementwise_output(node):
        return tuple(range(len(node.inputs)))
    if node.op in ("allreduce_start", "allreduce_wait"):
        return (0,)
    if node.op == "gemm" and all(node.inputs[2] is not i for i in node.inputs[:2]):
        return (2,)
    return ()


def elementwise_output(node: Node) -> bool:
    """True when ``node`` computes its result elementwise (in-place capable)."""
    kind = get_op(node.op).kind
    if kind == ELEMENTWISE:
        return True
    if kind == FUSED:
        last_op = node.attrs["program"][-1][0]
        return get_op(last_op).kind == ELEMENTWISE
    return False


def lifetimes(graph: Graph, order: Sequence[Node]) -> tuple[dict[int, int], dict[int, int]]:
    """(first, last): the step producing each kernel's value and the last step reading it
    (``len(order)`` for graph outputs; the producing step for unread values)."""
    first = {id(n): t for t, n in enumerate(order)}
    last = dict(first)
    end = len(order)
    for t, n in enumerate(order):
        for i in n.inputs:
            if id(i) in first and last[id(i)] < t:
                last[id(i)] = t
    for o in graph.outputs:
        if id(o) in first:
            last[id(o)] = end
    return first, last


def plan_memory(graph: Graph, order: Sequence[Node] | None = None, batch_size: int = 1,
                inplace: bool = True) -> MemoryPlan:
    """Assigns every kernel result of ``graph`` to an arena buffer (see the module docstring).

    Args:
        graph: the (optimized) graph.
        order: the kernels in execution order; default ``schedule(graph)``.
        batch_size: the value of every unknown (None) dimension.
        inplace: allow elementwise kernels to overwrite a dying input.

    Returns:
        A :class:`MemoryPlan`.
    """
    if batch_size < 1:
        raise ValueError(f"plan_memory: batch_size must be >= 1, received {batch_size}")
    order = list(schedule(graph) if order is None else order)
    kernels = [n for n in graph.nodes if n.op not in _SOURCES]
    if len(order) != len(kernels) or {id(n) for n in order} != {id(n) for n in kernels}:
        raise ValueError(f"plan_memory: the order lists {len(order)} nodes, the graph has "
                         f"{len(kernels)} kernels; pass every kernel exactly once")
    first, last = lifetimes(graph, order)
    for t, n in enumerate(order):
        for i in n.inputs:
            if id(i) in first and first[id(i)] >= t:
                raise ValueError(f"plan_memory: {n.op} at step {t} reads {i.op}, which the "
                                 f"order computes later (step {first[id(i)]})")
    outputs = {id(o) for o in graph.outputs}
    nbytes = {id(n): type_nbytes(n.type, batch_size) for n in order}

    # 1. in place: an elementwise kernel takes over the buffer of an input dying there.
    owner: dict[int, int] = {id(n): id(n) for n in order}  # value -> value owning its buffer
    pairs: list[tuple[Node, Node]] = []
    if inplace:
        taken: set[int] = set()
        for t, n in enumerate(order):
            for i in (n.inputs[k] for k in overwritable_inputs(n)):
                if (id(i) in first and last[id(i)] == t and id(i) not in outputs
                        and id(i) not in taken and i.type.shape == n.type.shape
                        and i.dtype == n.dtype):
                    taken.add(id(i))
                    owner[id(n)] = owner[id(i)]
                    pairs.append((n, i))
                    break
    # 2. one record per buffer owner: the union of its values' lifetimes, the largest size.
    span: dict[int, list[int]] = {}
    for n in order:
        o = owner[id(n)]
        rec = span.setdefault(o, [first[id(n)], last[id(n)], 0])
        rec[0] = min(rec[0], first[id(n)])
        rec[1] = max(rec[1], last[id(n)])
        rec[2] = max(rec[2], nbytes[id(n)])
    # 3. buffers for the records
    where, buffer_bytes = assign_intervals(span)
    buffer = {id(n): where[owner[id(n)]] for n in order}
    delta = [0] * (len(order) + 2)
    for _o, (start, stop, size) in span.items():
        delta[start] += size
        delta[stop + 1] -= size
    live_bytes = list(itertools.accumulate(delta[:len(order)]))
    live_peak = max(live_bytes, default=0)
    offsets, offset = [], 0
    for b in buffer_bytes:
        offsets.append(offset)
        offset += -(-b // ALIGN) * ALIGN
    return MemoryPlan(order=order, buffer=buffer, buffer_bytes=buffer_bytes,
                      peak_bytes=sum(buffer_bytes), naive_bytes=sum(nbytes.values()),
                      live_peak_bytes=live_peak, live_bytes=live_bytes, inplace=pairs,
                      nbytes=nbytes, first=first, last=last, batch_size=batch_size,
                      offsets=offsets, arena_bytes=offset)


def assign_intervals(span: dict[int, list[int]]) -> tuple[dict[int, int], list[int]]:
    """Buffers for values with lifetimes: ``span`` maps a key to ``[first step, last step,
    size]``; two keys share a buffer only when their lifetimes do not overlap.

    Returns:
        ``(where, sizes)``: key -> buffer index, and each buffer's size (the largest value it
        holds). Greedy by size up to :data:`GREEDY_LIMIT` records, a linear scan beyond (see
        the module docstring). Every backend assigns its buffers through this function.
    """
    if len(span) <= GREEDY_LIMIT:
        return _greedy_by_size(span)
    return _linear_scan(span)


def _greedy_by_size(span: dict[int, list[int]]) -> tuple[dict[int, int], list[int]]:
    """The biggest records first, each into the smallest buffer free for its whole lifetime,
    else a new buffer (quadratic in the worst case: used up to GREEDY_LIMIT records)."""
    records = sorted(span.items(), key=lambda kv: (-kv[1][2], kv[1][0]))
    buffer_bytes: list[int] = []
    busy: list[tuple[list[int], list[int]]] = []  # per buffer: sorted starts, matching ends
    by_size: list[tuple[int, int]] = []  # (size, buffer), ascending
    where: dict[int, int] = {}
    for o, (start, stop, size) in records:
        chosen = -1
        for _, b in by_size:
            starts, ends = busy[b]
            k = bisect.bisect_left(starts, start)
            if (k == 0 or ends[k - 1] < start) and (k == len(starts) or starts[k] > stop):
                chosen = b
                break
        if chosen < 0:
            chosen = len(buffer_bytes)
            buffer_bytes.append(size)
            busy.append(([], []))
            bisect.insort(by_size, (size, chosen))
        starts, ends = busy[chosen]
        k = bisect.bisect_left(starts, start)
        starts.insert(k, start)
        ends.insert(k, stop)
        where[o] = chosen
    return where, buffer_bytes


def _linear_scan(span: dict[int, list[int]]) -> tuple[dict[int, int], list[int]]:
    """In execution order: a record takes the smallest free buffer that fits and is at most
    twice its size, else a new buffer; buffers free again after the record's last step."""
    records = sorted(span.items(), key=lambda kv: kv[1][0])
    buffer_bytes: list[int] = []
    free: list[tuple[int, int]] = []  # (size, buffer), ascending
    ends: list[tuple[int, int]] = []  # heap of (last step, buffer)
    where: dict[int, int] = {}
    for o, (start, stop, size) in records:
        while ends and ends[0][0] < start:
            _, b = heapq.heappop(ends)
            bisect.insort(free, (buffer_bytes[b], b))
        k = bisect.bisect_left(free, (size, -1))
        if k < len(free) and free[k][0] <= 2 * size:
            chosen = free.pop(k)[1]
        else:
            chosen = len(buffer_bytes)
            buffer_bytes.append(size)
        heapq.heappush(ends, (stop, chosen))
        where[o] = chosen
    return where, buffer_bytes
