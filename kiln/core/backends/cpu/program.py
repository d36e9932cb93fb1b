"""The CPU executor: a graph -> per input signature, a plan of preallocated buffers and kernel
calls.

``CpuProgram.run(feeds)`` looks up the plan for the feeds' shapes (building it on first use)
and runs it: a Python loop calls each kernel with a precomputed argument tuple (compiled entry
points, flat storage roots and one int64 parameter array per generated kernel: no per-call
allocation, no type dispatch, no scalar arguments). Large C-contiguous feeds are read in place
(the arguments that view them are rebuilt around the fed array); small or strided ones are
copied into their buffer.

Once per program (``CpuProgram``; the ordering is in ``ordering.py``):

* the schedule (``kiln.core.schedule`` when available), with each update moved after the last
  kernel reading the variable's old value (so it can be written in place);
* chains of same-shape elementwise kernels (e.g. an optimizer's ``m``, ``v`` and ``p``
  updates, or ``add`` + ``relu`` when the sum is also needed later) made adjacent and run as
  one loop with side outputs;
* a buffer assignment from ``kiln.core.memory.plan_memory`` at a fixed batch size.

Per plan (``PlanBuilder``):

1. concrete shapes from the feeds (each op's shape rule on static types);
2. layouts: movement ops become views of their input's storage (reshape of a contiguous
   tensor, transpose, broadcast, slice, expand/squeeze); everything else is a kernel writing a
   fresh contiguous result;
3. memory: kernel results take their planned buffer where the lifetimes (which views extend)
   allow it, else a private one; an update computed by an elementwise kernel after the last
   read of the variable's old value is written straight into the Variable's buffer, and the
   program returns ``var.value`` itself so the executor skips the copy;
4. kernels: generated loops for elementwise / fused / reduction nodes, hand-written numba
   kernels or NumPy calls with ``out=`` for the rest (``registry.BUILDERS``), and the op's NumPy
   reference (with a one-time warning) for anything else.

``KILN_PROFILE=1`` (or ``program.profile(feeds)``) prints the time per kernel and per op kind.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln import config
from kiln.core.backends.cpu import layout as L
from kiln.core.backends.cpu.ordering import (
    is_aligned_elementwise,
    merge_chains,
    schedule,
    sink_updates,
)
from kiln.core.backends.cpu.registry import BUILDERS, VIEWS, data_inputs
from kiln.core.ir import Graph, Node, TensorType
from kiln.core.ops.registry import ELEMENTWISE, FUSED, REDUCE, get_op

SOURCES = ("placeholder", "param", "constant")
# The batch size the memory planner sizes unknown dims with (its choices must not depend on
# the actual batch: see CpuProgram.planned_buffers).
PLANNER_BATCH = 64
END = 1 << 60

_warned: set[str] = set()


def warn_fallback(op: str, reason: str = "") -> None:
    """Warns once per op that it runs on its NumPy reference."""
    if op in _warned:
        return
    _warned.add(op)
    why = f" ({reason})" if reason else ""
    warnings.warn(f"kiln cpu backend: no kernel for op {op!r}{why}; running its NumPy "
                  "reference (slow)", RuntimeWarning, stacklevel=3)


@dataclass
class Step:
    """One kernel call: ``fn(*args)``."""

    fn: Callable
    args: tuple
    label: str
    kind: str
    node: Node | None = None


@dataclass
class FeedBinding:
    """How the kernel arguments that read one feed are rebuilt around the fed array itself (no
    copy into the feed's buffer): per step, the argument positions and the (byte offset, shape,
    strides) of each view of the feed."""

    buffer: np.ndarray
    refs: dict[int, list[tuple[int, int, tuple, tuple]]]
    bound: bool = False


@dataclass
class Plan:
    """Everything one input signature needs to run."""

    steps: list[Step]
    feed_buffers: list[np.ndarray]
    outputs: list[np.ndarray]
    var_checks: list[tuple[Any, np.ndarray]]
    info: dict[str, Any] = field(default_factory=dict)
    bindings: list[FeedBinding | None] = field(default_factory=list)
    written: list[tuple[int, int]] = field(default_factory=list)  # in-place Variable buffers

    def __post_init__(self) -> None:
        self.calls = [(s.fn, s.args) for s in self.steps]

    def valid(self) -> bool:
        for var, arr in self.var_checks:
            if var.value is not arr:
                return False
        return True

    def _feed(self, feeds: Sequence[np.ndarray]) -> None:
        """Binds each feed: rebuilds the arguments that view it when it is C-contiguous with the
        planned dtype, else copies it into its buffer (and points the arguments back there)."""
        calls = self.calls
        for k, f in enumerate(feeds):
            bind = self.bindings[k] if self.bindings else None
            buf = self.feed_buffers[k]
            if (bind is not None and f.flags.c_contiguous and f.dtype == buf.dtype
                    and not self._overlaps_written(f)):
                src = f
                bind.bound = True
            else:
                np.copyto(buf, f, casting="unsafe")
                if bind is None or not bind.bound:
                    continue
                src = bind.buffer
                bind.bound = False
            dtype = buf.dtype
            for step, refs in bind.refs.items():
                fn, args = calls[step]
                args = list(args)
                for pos, offset, shape, strides in refs:
                    args[pos] = np.ndarray(shape, dtype, buffer=src, offset=offset,
                                           strides=strides)
                calls[step] = (fn, tuple(args))

    def _overlaps_written(self, f: np.ndarray) -> bool:
        """Whether a fed array lies in a Variable buffer that this plan writes in place (it
        must then be copied first, so that the kernels see its value before the updates)."""
        if not self.written:
            return False
        lo = f.__array_interface__["data"][0]
        hi = lo + f.nbytes
        return any(a < hi and lo < b for a, b in self.written)

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        self._feed(feeds)
        if self.info.get("python"):
            # KILN_JIT=0: the kernels' NumPy scalar math warns where compiled code is silent
            with np.errstate(all="ignore"):
                for fn, args in self.calls:
                    fn(*args)
        else:
            for fn, args in self.calls:
                fn(*args)
        return list(self.outputs)

    def run_profiled(self, feeds: Sequence[np.ndarray], times: list[float]) -> list[np.ndarray]:
        clock = time.perf_counter
        t0 = clock()
        self._feed(feeds)
        times[0] += clock() - t0
        with np.errstate(all="ignore" if self.info.get("python") else "warn"):
            for k, (fn, args) in enumerate(self.calls):
                t0 = clock()
                fn(*args)
                times[k + 1] += clock() - t0
        return list(self.outputs)


# Feeds smaller than this are copied into their buffer: cheaper than rebuilding the views.
BIND_MIN_BYTES = 32768


def feed_binding(steps: list[Step], buffer: np.ndarray,
                 outputs: list[np.ndarray]) -> FeedBinding | None:
    """The :class:`FeedBinding` of a feed buffer, or None when the feed is small, or some step
    reads it in a way that cannot be rebuilt (a closure), or an output shows it."""
    if buffer.nbytes < BIND_MIN_BYTES:
        return None
    base_ptr = buffer.__array_interface__["data"][0]
    lo, hi = base_ptr, base_ptr + buffer.nbytes

    def inside(a: np.ndarray) -> bool:
        ptr = a.__array_interface__["data"][0]
        return a.size > 0 and lo <= ptr < hi

    if any(isinstance(o, np.ndarray) and np.shares_memory(o, buffer) for o in outputs):
        return None
    refs: dict[int, list] = {}
    for k, step in enumerate(steps):
        for cell in getattr(step.fn, "__closure__", None) or ():
            value = cell.cell_contents
            if isinstance(value, np.ndarray) and np.shares_memory(value, buffer):
                return None
        for pos, a in enumerate(step.args):
            if not isinstance(a, np.ndarray) or not np.shares_memory(a, buffer):
                continue
            if not inside(a):
                return None
            offset = a.__array_interface__["data"][0] - base_ptr
            refs.setdefault(k, []).append((pos, offset, a.shape, a.strides))
    return FeedBinding(buffer, refs) if refs else None


class PlanBuilder:
    """Builds a :class:`Plan` for one input signature (see the module docstring).

    Kernel builders (``registry.BUILDERS``) use :meth:`shape`, :meth:`layout`, :meth:`array`,
    :meth:`flat`, :meth:`out` and :meth:`add`.
    """

    def __init__(self, program: CpuProgram, feeds: Sequence[np.ndarray]):
        self.program = program
        self.graph = program.graph
        self.order = program.order
        self.feeds = feeds
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.layouts: dict[int, L.Layout] = {}
        self.kernel_nodes: list[Node] = []
        self.storage_kind: dict[int, str] = {}
        self.consts: dict[int, np.ndarray] = {}
        self.flats: dict[int, np.ndarray] = {}      # root key -> flat array
        self.steps: list[Step] = []
        self.node: Node | None = None
        self.info: dict[str, Any] = {}
        self.cache: dict[Any, Any] = {}  # for builders: values shared by several kernels

    # ---- API for kernel builders ------------------------------------------------------------
    def shape(self, node: Node) -> tuple[int, ...]:
        return self.shapes[id(node)]

    def layout(self, node: Node) -> L.Layout:
        return self.layouts[id(node)]

    def flat(self, node: Node) -> np.ndarray:
        """The flat storage root that ``layout(node)`` indexes."""
        return self.flats[self.layouts[id(node)].root]

    def array(self, node: Node) -> np.ndarray:
        """A NumPy view of ``node``'s value."""
        lay = self.layouts[id(node)]
        return L.as_array(self.flats[lay.root], lay)

    def out(self, node: Node | None = None) -> np.ndarray:
        return self.array(self.node if node is None else node)

    def contiguous(self, node: Node) -> np.ndarray:
        """``node``'s value as a C-contiguous array (a view, or a scratch copy made by a
        step added here)."""
        lay = self.layouts[id(node)]
        arr = self.array(node)
        if lay.is_contiguous and arr.flags.c_contiguous:
            return arr
        scratch = np.empty(lay.shape, np.dtype(node.dtype))
        self.add(np.copyto, (scratch, arr), label=f"{node.op}(contiguous copy)")
        return scratch

    def add(self, fn: Callable, args: tuple, label: str | None = None) -> None:
        node = self.node
        self.steps.append(Step(fn, tuple(args), label or node.op, get_op(node.op).kind, node))

    # ---- phases -------------------------------------------------------------------------------
    def build(self) -> Plan:
        self._shapes()
        self._layouts()
        self._groups()
        lifetimes = self._lifetimes()
        buffers = self._assign_buffers(lifetimes)
        inplace = self._inplace_updates(lifetimes)
        self._allocate(buffers, inplace)
        for node in self.order:
            if node.op in SOURCES or self.storage_kind.get(id(node)) != "buffer":
                continue
            if id(node) in self.layouts and self.layouts[id(node)].root != id(node):
                continue  # a view
            if id(node) in self.grouped and id(node) not in self.active:
                continue  # computed by its group's loop
            self.node = node
            if id(node) in self.active:
                from kiln.core.backends.cpu.elementwise import build_group

                build_group(self, self.active[id(node)])
            else:
                self._build_node(node)
        self.node = None
        outputs = []
        upd = dict(self.program.updates)
        for k, o in enumerate(self.graph.outputs):
            var = upd.get(k)
            if var is not None and inplace.get(id(o)) is var:
                outputs.append(var.value)
            else:
                outputs.append(self.array(o))
        feed_bufs = [self.array(p) for p in self.graph.inputs]
        var_checks = [(n.attrs["var"], n.attrs["var"].value) for n in self.order
                      if n.op == "param"]
        bindings = [feed_binding(self.steps, buf, outputs) if self.program.bind_feeds else None
                    for buf in feed_bufs]
        self.info["kernels"] = len(self.steps)
        self.info["python"] = not config.jit_enabled()
        self.info["inplace_updates"] = len(inplace)
        self.info["merged_groups"] = len(self.active)
        self.info["bound_feeds"] = sum(b is not None for b in bindings)
        written = []
        for var in inplace.values():
            lo = var.value.__array_interface__["data"][0]
            written.append((lo, lo + var.value.nbytes))
        return Plan(self.steps, feed_bufs, outputs, var_checks, self.info, bindings, written)

    def _shapes(self) -> None:
        fed = {id(p): tuple(np.shape(f)) for p, f in zip(self.graph.inputs, self.feeds)}
        for n in self.order:
            if n.op == "placeholder":
                if id(n) not in fed:
                    raise ValueError(f"no value fed for placeholder {n.name or ''} {n.type}")
                shape = fed[id(n)]
            elif n.op == "param":
                shape = n.attrs["var"].value.shape
            elif n.op == "constant":
                shape = n.attrs["value"].array.shape
            else:
                types = [TensorType(self.shapes[id(i)], i.dtype) for i in n.inputs]
                shape = get_op(n.op).infer(*types, **n.attrs).shape
                if any(d is None for d in shape):
                    raise ValueError(f"cpu backend: cannot infer a static shape for {n.op} "
                                     f"from inputs {[t.shape for t in types]}")
            self.shapes[id(n)] = tuple(int(d) for d in shape)

    def _layouts(self) -> None:
        for n in self.order:
            shape = self.shapes[id(n)]
            if n.op in SOURCES:
                self.storage_kind[id(n)] = {"placeholder": "feed", "param": "param",
                                            "constant": "const"}[n.op]
                self.layouts[id(n)] = L.fresh(id(n), shape)
                continue
            if n.op in PLAN_CONSTANTS:
                self.storage_kind[id(n)] = "const"
                value = PLAN_CONSTANTS[n.op](n, [self.shapes[id(i)] for i in n.inputs])
                self.consts[id(n)] = np.ascontiguousarray(value, dtype=n.dtype)
                self.layouts[id(n)] = L.fresh(id(n), shape)
                continue
            view = VIEWS.get(n.op)
            if view is not None:
                lay = view(n, [self.layouts[id(i)] for i in n.inputs], shape)
                if lay is not None:
                    self.layouts[id(n)] = lay
                    self.storage_kind[id(n)] = "view"
                    continue
            self.layouts[id(n)] = L.fresh(id(n), shape)
            self.storage_kind[id(n)] = "buffer"
            self.kernel_nodes.append(n)

    def _groups(self) -> None:
        """The program's multi-output groups whose members have equal run-time shapes and
        are all kernels in this plan (id(head) -> members)."""
        self.active: dict[int, list[Node]] = {}
        self.grouped: set[int] = set()
        for head, members in self.program.groups.items():
            if all(self.storage_kind.get(id(m)) == "buffer"
                   and self.shapes[id(m)] == self.shapes[head] for m in members):
                self.active[head] = members
                self.grouped.update(id(m) for m in members)

    def _lifetimes(self) -> dict[str, Any]:
        """Per kernel: its step; per storage root: (first, last) steps and the layouts read at
        each step."""
        step = {id(n): t for t, n in enumerate(self.kernel_nodes)}
        for members in self.active.values():  # a group runs at its first member's step
            for m in members[1:]:
                step[id(m)] = step[id(members[0])]
        first = dict(step)
        last: dict[int, int] = dict(step)
        reads: dict[int, list[tuple[int, L.Layout]]] = {}
        for n in self.kernel_nodes:
            t = step[id(n)]
            for i in data_inputs(n):
                lay = self.layouts[id(n.inputs[i])]
                reads.setdefault(lay.root, []).append((t, lay))
                if last.get(lay.root, -1) < t:
                    last[lay.root] = t
        for o in self.graph.outputs:
            last[self.layouts[id(o)].root] = END
        return {"step": step, "first": first, "last": last, "reads": reads}

    def _nbytes(self, n: Node) -> int:
        return int(np.prod(self.shapes[id(n)], dtype=np.int64)) * np.dtype(n.dtype).itemsize

    def _may_share(self, prev: Node, nxt: Node, lt: dict[str, Any]) -> bool:
        """Whether ``nxt`` may take over the buffer of ``prev`` (prev's value is dead by then,
        or ``nxt`` overwrites it in place, element by element)."""
        last_prev = lt["last"][id(prev)]
        t = lt["step"][id(nxt)]
        if last_prev < t:
            return True
        if last_prev > t or not is_aligned_elementwise(nxt) or prev.dtype != nxt.dtype:
            return False
        out_lay = self.layouts[id(nxt)]
        return all(lay.offset == out_lay.offset and lay.shape == out_lay.shape
                   and lay.strides == out_lay.strides
                   for s, lay in lt["reads"].get(id(prev), []) if s == t)

    def _assign_buffers(self, lt: dict[str, Any]) -> dict[int, int]:
        """id(kernel node) -> buffer index: the program's planned assignment, where this plan's
        lifetimes (which views extend) allow it, else a private buffer."""
        planned = self.program.planned_buffers()
        self.info["memory"] = self.program.memory_info
        occupant: dict[int, Node] = {}
        result: dict[int, int] = {}
        fresh = max(planned.values(), default=-1) + 1
        private = 0
        for n in self.kernel_nodes:
            b = planned.get(id(n))
            if b is not None:
                prev = occupant.get(b)
                if prev is None or self._may_share(prev, n, lt):
                    occupant[b] = n
                    result[id(n)] = b
                    continue
                private += 1
            result[id(n)] = fresh
            occupant[fresh] = n
            fresh += 1
        self.info["private_buffers"] = private
        return result

    def _inplace_updates(self, lt: dict[str, Any]) -> dict[int, Any]:
        """id(update value node) -> Variable whose buffer receives it directly."""
        result: dict[int, Any] = {}
        taken: set[int] = set()
        out_roots = {}
        for k, o in enumerate(self.graph.outputs):
            out_roots.setdefault(self.layouts[id(o)].root, []).append(k)
        count: dict[int, int] = {}
        for _, var in self.program.updates:
            count[id(var)] = count.get(id(var), 0) + 1
        for k, var in self.program.updates:
            if count[id(var)] > 1:
                continue  # the executor applies them in order: the last one must win
            u = self.graph.outputs[k]
            if id(u) in result or id(var) in taken or self.storage_kind.get(id(u)) != "buffer":
                continue
            if self.layouts[id(u)].root != id(u) or u.dtype != var.dtype:
                continue
            if self.shapes[id(u)] != var.value.shape or not var.value.flags.c_contiguous:
                continue
            pnode = var.__kiln_node__()
            proot = id(pnode)
            t = lt["step"][id(u)]
            if proot in out_roots:
                continue  # an output shows the old value
            ok = True
            for s, lay in lt["reads"].get(proot, []):
                if s > t:
                    ok = False
                elif s == t:
                    out_lay = self.layouts[id(u)]
                    if not (is_aligned_elementwise(u) and lay.offset == out_lay.offset
                            and lay.shape == out_lay.shape and lay.strides == out_lay.strides):
                        ok = False
            if ok:
                result[id(u)] = var
                taken.add(id(var))
        return result

    def _allocate(self, buffers: dict[int, int], inplace: dict[int, Any]) -> None:
        sizes: dict[int, int] = {}
        for n in self.kernel_nodes:
            if id(n) in inplace:
                continue
            b = buffers[id(n)]
            sizes[b] = max(sizes.get(b, 0), self._nbytes(n))
        raw = {b: np.empty(max(s, 1), np.uint8) for b, s in sizes.items()}
        self.info["buffer_bytes"] = int(sum(sizes.values()))
        self.info["buffers"] = len(raw)
        for n in self.order:
            key = id(n)
            kind = self.storage_kind.get(key)
            dtype = np.dtype(n.dtype)
            if kind == "feed":
                self.flats[key] = np.empty(self.shapes[key], dtype).reshape(-1)
            elif kind == "param":
                self.flats[key] = n.attrs["var"].value.reshape(-1)
            elif kind == "const":
                value = self.consts.get(key)
                if value is None:
                    value = n.attrs["value"].array
                self.flats[key] = np.array(value, dtype=dtype, copy=True).reshape(-1)
            elif kind == "buffer" and self.layouts[key].root == key:
                if key in inplace:
                    self.flats[key] = inplace[key].value.reshape(-1)
                else:
                    count = int(np.prod(self.shapes[key], dtype=np.int64))
                    self.flats[key] = raw[buffers[key]][:count * dtype.itemsize].view(dtype)

    def _build_node(self, node: Node) -> None:
        fn = BUILDERS.get(node.op)
        if fn is None and is_generated(node):
            from kiln.core.backends.cpu.elementwise import build_loop

            fn = build_loop
        if fn is None:
            warn_fallback(node.op)
            fn = build_reference
        fn(self, node)


def is_generated(node: Node) -> bool:
    """Nodes whose kernel is generated from scalar bodies (elementwise, fused, reductions)."""
    kind = get_op(node.op).kind
    if kind in (ELEMENTWISE, FUSED):
        return True
    from kiln.core.backends.cpu.codegen import REDUCE_OPS

    return kind == REDUCE and node.op in REDUCE_OPS


def build_reference(b: PlanBuilder, node: Node) -> None:
    """Runs the op's NumPy reference and copies the result into the output buffer."""
    ref = get_op(node.op).ref
    ins = [b.array(i) for i in node.inputs]
    out = b.out(node)
    attrs = dict(node.attrs)

    def run_reference() -> None:
        with np.errstate(all="ignore"):
            value = ref(*ins, **attrs)
        np.copyto(out, np.asarray(value), casting="unsafe")

    b.add(run_reference, (), label=f"{node.op}(reference)")


def _size_of(node: Node, in_shapes: list[tuple[int, ...]]) -> np.ndarray:
    shape = in_shapes[0]
    n = int(np.prod([shape[a] for a in node.attrs["axis"]], dtype=np.int64))
    return np.asarray(n, dtype=node.dtype)


# ops whose value depends only on shapes: computed once per plan
PLAN_CONSTANTS: dict[str, Callable[..., np.ndarray]] = {"size_of": _size_of}


class CpuProgram:
    """A compiled graph for the CPU backend (see the module docstring).

    Args:
        graph: the graph; its outputs are the function's outputs followed by update values.
        updates: ``(output index, Variable)`` pairs: the outputs that are new values of
            Variables (written in place when safe). Defaults to ``graph.updates`` if set.
    """

    backend = "cpu"

    def __init__(self, graph: Graph, updates: Sequence[tuple[int, Any]] | None = None):
        from kiln.core.backends.cpu.lowering import lower

        if updates is None:
            updates = getattr(graph, "updates", None) or ()
        self.source_graph = graph
        self.graph = lower(graph)
        self.updates = [(int(k), var) for k, var in updates]
        order = sink_updates(self.graph, self.updates, schedule(self.graph))
        self.kernels_order, self.groups = merge_chains(self.graph, self.updates, order)
        kernel_ids = {id(n) for n in self.kernels_order}
        sources = [n for n in self.graph.nodes if n.op in SOURCES and id(n) not in kernel_ids]
        seen = {id(n) for n in sources}
        unused = [p for p in self.graph.inputs if id(p) not in seen]  # fed but never read
        self.order = unused + sources + self.kernels_order
        self.reuse_buffers = True
        self.bind_feeds = True
        self._planned: dict[int, int] | None = None
        self.memory_info = ""
        self.num_kernels = len(self.kernels_order)
        self._plans: dict[tuple, Plan] = {}
        self._profile_env = config.profile_enabled()

    def planned_buffers(self) -> dict[int, int]:
        """id(kernel node) -> buffer index from ``kiln.core.memory.plan_memory`` (computed once,
        at a fixed batch size, so that every plan shares buffers the same way and so uses the
        same compiled kernels: in-place loops are specialized), or {} without a planner."""
        if self._planned is not None:
            return self._planned
        self._planned = {}
        self.memory_info = "one buffer per kernel"
        if not self.reuse_buffers:
            return self._planned
        try:
            from kiln.core.memory import plan_memory
        except ImportError:
            return self._planned
        try:
            mp = plan_memory(self.graph, order=self.kernels_order, batch_size=PLANNER_BATCH,
                             inplace=True)
        except Exception as exc:  # a planner bug must not stop the program
            self.memory_info = f"one buffer per kernel (plan_memory failed: {exc})"
            return self._planned
        self._planned = dict(mp.buffer)
        self.memory_info = "plan_memory"
        return self._planned

    def plan(self, feeds: Sequence[np.ndarray]) -> Plan:
        """The plan for these feeds' shapes (built on first use)."""
        key = tuple(np.shape(f) for f in feeds)
        plan = self._plans.get(key)
        if plan is None or not plan.valid():
            plan = PlanBuilder(self, feeds).build()
            self._plans[key] = plan
        return plan

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Computes the graph outputs for ``feeds`` (arrays for ``graph.inputs``, in order)."""
        if self._profile_env:
            return self.profile(feeds)
        key = tuple(f.shape for f in feeds)
        plan = self._plans.get(key)
        if plan is None or not plan.valid():
            plan = self.plan(feeds)
        return plan.run(feeds)

    def profile(self, feeds: Sequence[np.ndarray], repeat: int = 1,
                file: Any = None) -> list[np.ndarray]:
        """Runs ``repeat`` times and prints the time per kernel and per op kind.

        Returns:
            The outputs of the last run.
        """
        plan = self.plan(feeds)
        times = [0.0] * (len(plan.calls) + 1)
        t0 = time.perf_counter()
        for _ in range(repeat):
            out = plan.run_profiled(feeds, times)
        total = time.perf_counter() - t0
        print(format_profile(plan, times, total, repeat), file=file)
        return out


def format_profile(plan: Plan, times: list[float], total: float, repeat: int) -> str:
    """A table: per kernel call and per op kind, time per run in microseconds."""
    rows = [("feeds", "copy", times[0])] + [(s.label, s.kind, t)
                                            for s, t in zip(plan.steps, times[1:])]
    per_kind: dict[str, list[float]] = {}
    for _, kind, t in rows:
        acc = per_kind.setdefault(kind, [0.0, 0])
        acc[0] += t
        acc[1] += 1
    lines = [f"kiln cpu profile: {len(plan.steps)} kernels, {total / repeat * 1e6:.1f} us per "
             f"run ({repeat} runs)", f"{'#':>4} {'kernel':<48}{'kind':<12}{'us':>10}{'%':>7}"]
    measured = sum(times) or 1.0
    for k, (labelk, kind, t) in enumerate(rows):
        lines.append(f"{k:>4} {labelk[:47]:<48}{kind:<12}{t / repeat * 1e6:>10.1f}"
                     f"{100 * t / measured:>7.1f}")
    lines.append(f"{'':>4} {'by kind':<48}{'calls':<12}{'us':>10}{'%':>7}")
    for kind, (t, c) in sorted(per_kind.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{'':>4} {kind:<48}{c:<12}{t / repeat * 1e6:>10.1f}"
                     f"{100 * t / measured:>7.1f}")
    overhead = total - measured
    lines.append(f"{'':>4} {'(python loop overhead)':<48}{'':<12}"
                 f"{overhead / repeat * 1e6:>10.1f}")
    return "\n".join(lines)
