"""The CPU executor: a graph -> per input signature, a plan of preallocated buffers and kernel
calls.

``CpuProgram.run(feeds)`` looks up the plan for the feeds' shapes (building it on first use)
and runs it: a Python loop calls each kernel with a precomputed argument tuple (compiled entry
points, flat storage roots and one int64 parameter array per generated kernel: no per-call
allocation, no type dispatch, no scalar arguments). Large C-contiguous feeds are read in place
(the arguments that view them are rebuilt around the fed array); small or strided ones are
copied into their buffer.

Planning is device-neutral and lives in ``kiln/core/plan.py`` (docs/architecture.md,
"Planning"): once per program the kernel order and the multi-output groups
(``program_order``) and the program-wide buffer assignment (``planned_buffers``); per input
signature the shapes, layouts (views), lifetimes, buffer sharing and in-place updates
(``StaticPlan``). This module adds what is the CPU's own: host buffers (one uint8 arena slice
per planned buffer), feed binding, and the kernel calls: generated loops for elementwise /
fused / reduction nodes and multi-output groups (``elementwise.py``), hand-written numba
kernels or NumPy calls with ``out=`` for the rest (``registry.BUILDERS``), and the op's NumPy
reference (with a one-time warning) for anything else.

Threads (docs/architecture.md, "Threads"): a plan's buffers serve one call at a time.
:meth:`CpuProgram.run` runs the plan of the feeds' signature and returns views of its buffers:
its caller holds a lock around the call and the reading of the outputs (the executor does,
for functions with updates). :meth:`CpuProgram.run_copied` may be called from any number of
threads: a call takes the signature's plan when no other call holds it (an uncontended
non-blocking lock), else a spare plan of that signature (built when all are busy, at most
:data:`MAX_PLANS` in all; beyond that it waits for one), and returns copies of the outputs.

``KILN_PROFILE=1`` (or ``program.profile(feeds)``) prints the time per kernel and per op kind.
"""

from __future__ import annotations

import bisect
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln import config
from kiln.core import gc_pause
from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import compile_batch
from kiln.core.backends.cpu.codegen.spec import REDUCE_OPS
from kiln.core.backends.cpu.kernels.elementwise import build_group, build_loop
from kiln.core.backends.cpu.lowering import lower
from kiln.core.backends.cpu.registry import BUILDERS, build_reference
from kiln.core.backends.cpu.runtime import native_plan, poison, race
from kiln.core.backends.cpu.runtime.feeds import (
    FeedBinding,
    feed_binding,
    pointer_reader,
    view_maker,
)
from kiln.core.backends.cpu.runtime.parts import settled
from kiln.core.backends.cpu.runtime.profiling import format_profile
from kiln.core.backends.cpu.runtime.serial import serialize
from kiln.core.backends.lowering import warn_fallback
from kiln.core.ir import Graph, Node, TensorType
from kiln.core.layout import Layout, as_array
from kiln.core.ops.fused import reduced_type
from kiln.core.ops.registry import COLLECTIVE, ELEMENTWISE, FUSED, REDUCE, get_op
from kiln.core.plan import StaticPlan, is_view, planned_buffers, program_order, with_sources
from kiln.core.variable import Variable


@dataclass
class Step:
    """One kernel call: ``fn(*args)``."""

    fn: Callable
    args: tuple
    label: str
    kind: str
    node: Node | None = None


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
    busy: Any = field(default_factory=threading.Lock)  # held by the call running in it
    native: Any = None  # every step in one native call (native_plan.py), or None
    loop: Any = None  # its split steps spread or in order, as measured (race.py), or None

    def __post_init__(self) -> None:
        self.calls: list[tuple[Callable, tuple | list]] = [(s.fn, s.args) for s in self.steps]
        # the written ranges by start, with the largest end so far: one bisection finds
        # whether a fed array overlaps any (a training step of 40 Variables: ~1 us, not 10)
        spans = sorted(self.written)
        self._starts = [a for a, _ in spans]
        self._reach = list(itertools.accumulate((b for _, b in spans), max))
        self._views: list[list[tuple[list, int, Callable]]] | None = None
        self._pointer = pointer_reader()

    def valid(self) -> bool:
        for var, arr in self.var_checks:
            # var.value, without the property's call where no device holds a newer copy
            if (var._value if var._device_pull is None else var.value) is not arr:
                return False
        return True

    def _feed(self, feeds: Sequence[np.ndarray]) -> None:
        """Binds each feed: rebuilds the arguments that view it when it is C-contiguous with the
        planned dtype, else copies it into its buffer (and points the arguments back there)."""
        views = self._views
        if views is None:
            views = self._views = self._bound_views()
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
            for args, pos, view in views[k]:
                args[pos] = view(src)

    def _bound_views(self) -> list[list[tuple[list, int, Callable]]]:
        """Per feed, ``(arguments, position, view)`` for each kernel argument that views it:
        ``view(array)`` is that argument for a fed array (or the feed's buffer). The bound
        steps' arguments become lists, changed in place on each call (a call runs
        ``fn(*args)``); the whole array itself, or its reshape, where the argument is."""
        out: list[list[tuple[list, int, Callable]]] = []
        for bind in self.bindings or [None] * len(self.feed_buffers):
            views: list[tuple[list, int, Callable]] = []
            if bind is not None:
                for step, refs in bind.refs.items():
                    fn, args = self.calls[step]
                    if not isinstance(args, list):  # one list per step, whichever feeds it reads
                        args = list(args)
                        self.calls[step] = (fn, args)
                    views += [(args, pos, view_maker(bind.buffer, offset, shape, strides))
                              for pos, offset, shape, strides in refs]
            out.append(views)
        return out

    def _overlaps_written(self, f: np.ndarray) -> bool:
        """Whether a fed array lies in a Variable buffer that this plan writes in place (it
        must then be copied first, so that the kernels see its value before the updates)."""
        if not self.written:
            return False
        lo = self._pointer(f)
        k = bisect.bisect_left(self._starts, lo + f.nbytes)  # the ranges starting before hi
        return k > 0 and self._reach[k - 1] > lo

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        native = self.native
        if native is not None and native.accepts(feeds):
            native(feeds)
            return list(self.outputs)
        self._feed(feeds)
        if self.info.get("python"):
            # KILN_JIT=0: the kernels' NumPy scalar math warns where compiled code is silent
            with np.errstate(all="ignore"):
                for fn, args in self.calls:
                    fn(*args)
        elif self.loop is not None:
            self.loop.run(self.calls)
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


# The most plans (sets of buffers) of one signature for concurrent run_copied calls: more
# than the cores gain nothing (the kernels release the GIL, but share the cores).
MAX_PLANS = max(2, min(8, os.cpu_count() or 2))


class PlanBuilder:
    """Builds a :class:`Plan` for one input signature on top of the device-neutral planner
    (:class:`kiln.core.plan.StaticPlan`: shapes, layouts, lifetimes, buffers, in-place
    updates); adds host allocation and the kernel calls.

    Kernel builders (``registry.BUILDERS``) use :meth:`shape`, :meth:`layout`, :meth:`array`,
    :meth:`flat`, :meth:`out`, :meth:`contiguous` and :meth:`add`."""

    def __init__(self, program: CpuProgram, feeds: Sequence[np.ndarray]):
        self.program = program
        self.graph = program.graph
        self.order = program.order
        self.static = StaticPlan(program.graph, program.order, [np.shape(f) for f in feeds], "cpu")
        self.shapes = self.static.shapes
        self.layouts = self.static.layouts
        self.flats: dict[int, np.ndarray] = {}      # root key -> flat array
        self.steps: list[Step] = []
        self.node: Node | None = None
        self.info: dict[str, Any] = {}
        self.cache: dict[Any, Any] = {}  # for builders: values shared by several kernels
        self.absorbed: set[int] = set()  # kernels another kernel computed (its epilogue)
        self._next: dict[int, Node] = {}
        self._readers: dict[int, int] = {}

    # ---- API for kernel builders ------------------------------------------------------------
    def shape(self, node: Node) -> tuple[int, ...]:
        return self.shapes[id(node)]

    def layout(self, node: Node) -> Layout:
        return self.layouts[id(node)]

    def flat(self, node: Node) -> np.ndarray:
        """The flat storage root that ``layout(node)`` indexes."""
        return self.flats[self.layouts[id(node)].root]

    def array(self, node: Node) -> np.ndarray:
        """A NumPy view of ``node``'s value."""
        lay = self.layouts[id(node)]
        return as_array(self.flats[lay.root], lay)

    def out(self, node: Node | None = None) -> np.ndarray:
        node = self.node if node is None else node
        assert node is not None, "a kernel builder's own output is read while it builds"
        return self.array(node)

    def epilogue(self, node: Node) -> Node | None:
        """The kernel right after ``node`` when it is ``node``'s only reader and a ``fused``
        elementwise node or an ``add`` (a bias add and activation a builder may apply as ``node``'s
        epilogue, then :meth:`absorb`), else None. It may read ``node`` through one view of the
        same elements in the same order that nothing else reads (a Conv1D's squeeze of its
        conv2d: :meth:`epilogue_input`). Being next, its output buffer holds no live value but
        ``node``'s own inputs' (which the builder must not overwrite: ``np.shares_memory``)."""
        nxt = self._next.get(id(node))
        if (nxt is None or nxt.op not in ("fused", "add") or id(node) in self.grouped
                or id(nxt) in self.grouped or self._readers.get(id(node)) != 1):
            return None
        return nxt if self.epilogue_input(node, nxt) is not None else None

    def epilogue_input(self, node: Node, nxt: Node) -> Node | None:
        """The input of ``nxt`` that is ``node``'s value: ``node`` itself, or a view of it
        (reshape, squeeze, expand_dims: no kernel, the same storage, offset and element
        order) read by ``nxt`` alone; None where there is none."""
        if any(i is node for i in nxt.inputs):
            return node
        lay = self.layouts.get(id(node))
        for i in nxt.inputs:
            if not (i.inputs and i.inputs[0] is node and is_view(i)
                    and self._readers.get(id(i)) == 1 and id(i) in self.layouts):
                continue
            view = self.layouts[id(i)]
            if (lay is not None and view.root == lay.root and view.offset == lay.offset
                    and view.is_contiguous and lay.is_contiguous and view.size == lay.size):
                return i
        return None

    def epilogue_target(self, fused: Node, node: Node) -> np.ndarray | None:
        """``fused``'s output as an array of ``node``'s shape (the buffer an epilogue of
        ``node`` writes), or None where it is not C-contiguous."""
        out = self.out(fused)
        if not out.flags.c_contiguous:
            return None
        return out.reshape(self.shape(node))

    def absorb(self, node: Node) -> None:
        """Marks ``node`` (an :meth:`epilogue`) as computed by the current kernel."""
        self.absorbed.add(id(node))

    def contiguous(self, node: Node) -> np.ndarray:
        """``node``'s value as a C-contiguous array (a view, or a scratch copy made by a
        step added here)."""
        lay = self.layouts[id(node)]
        arr = self.array(node)
        if lay.is_contiguous and arr.flags.c_contiguous:
            return arr
        scratch = poison.empty(lay.shape, np.dtype(node.dtype))
        self.add(np.copyto, (scratch, arr), label=f"{node.op}(contiguous copy)")
        return scratch

    def add(self, fn: Callable, args: tuple, label: str | None = None) -> None:
        node = self.node
        assert node is not None, "steps are added by the builder of a node"
        self.steps.append(Step(fn, tuple(args), label or node.op, get_op(node.op).kind, node))

    # ---- phases -------------------------------------------------------------------------------
    def build(self) -> Plan:
        """The plan; its kernels are compiled together when the outermost build ends
        (:mod:`..codegen.compile_batch`), and its calls then call their entry points directly."""
        # the options the program was compiled under, whichever thread builds (options.py)
        with gc_pause.paused(), options.use(self.program.options):
            with compile_batch.batch():
                plan = self._build()
            for step in plan.steps:
                step.fn = settled(step.fn)
            plan.calls = [(settled(fn), args) for fn, args in plan.calls]
            # small kernels on the caller's thread (runtime/serial.py)
            self.info["serial_steps"] = serialize(plan, self.shape) \
                if self.program.serial_small else 0
            plan.native = native_plan.build(plan)
            plan.loop = race.loop_for(plan.calls, options.current().race)
            self.info["native_plan"] = plan.native is not None
        return plan

    def _build(self) -> Plan:
        st = self.static
        self._groups()
        lifetimes = st.lifetimes(self.active)
        buffers, self.info["private_buffers"] = st.assign_buffers(
            self.program.planned_buffers(), lifetimes)
        self.info["memory"] = self.program.memory_info
        inplace: dict[int, Variable] = st.inplace_updates(self.program.updates, lifetimes)
        self._allocate(buffers, inplace)
        self._next = {id(a): b for a, b in zip(st.kernels, st.kernels[1:])}
        # every reader, views included (a value read through a view is read)
        for n in self.graph.nodes:
            for i in n.inputs:
                self._readers[id(i)] = self._readers.get(id(i), 0) + 1
        for o in self.graph.outputs:
            self._readers[id(o)] = self._readers.get(id(o), 0) + 1
        for node in st.kernels:
            if id(node) in self.grouped and id(node) not in self.active:
                continue  # computed by its group's loop
            if id(node) in self.absorbed:
                continue  # computed as the epilogue of the kernel before it
            self.node = node
            if id(node) in self.active:
                build_group(self, self.active[id(node)])
            else:
                self._build_node(node)
        self.node = None
        outputs = []
        upd: dict[int, Variable] = dict(self.program.updates)
        for k, o in enumerate(self.graph.outputs):
            var = upd.get(k)
            if var is not None and var is inplace.get(id(o)):
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

    def _groups(self) -> None:
        """The program's multi-output groups whose members have equal run-time shapes and
        are all kernels in this plan (id(head) -> members)."""
        self.active: dict[int, list[Node]] = {}
        self.grouped: set[int] = set()
        for head, members in self.program.groups.items():
            if all(self.static.is_kernel(m) and self._loop_shape(m) == self.shapes[head]
                   for m in members):
                self.active[head] = members
                self.grouped.update(id(m) for m in members)

    def _loop_shape(self, node: Node) -> tuple:
        """The run-time shape a group member's loop walks: its own, or for the reduction
        ending a group the shape of the value it reduces."""
        t = reduced_type(node, [TensorType(self.shapes[id(i)], i.dtype) for i in node.inputs])
        return self.shapes[id(node)] if t is None else tuple(t.shape)

    def _allocate(self, buffers: dict[int, int], inplace: dict[int, Any]) -> None:
        st = self.static
        sizes: dict[int, int] = {}
        for n in st.kernels:
            if id(n) in inplace:
                continue
            b = buffers[id(n)]
            sizes[b] = max(sizes.get(b, 0), st.nbytes(n))
        raw = {b: poison.empty(max(s, 1), np.uint8) for b, s in sizes.items()}
        self.info["buffer_bytes"] = int(sum(sizes.values()))
        self.info["buffers"] = len(raw)
        for n in self.order:
            key = id(n)
            kind = st.storage.get(key)
            dtype = np.dtype(n.dtype)
            if kind == "feed":
                self.flats[key] = poison.empty(self.shapes[key], dtype).reshape(-1)
            elif kind == "param":
                self.flats[key] = n.attrs["var"].value.reshape(-1)
            elif kind == "const":
                value = st.consts.get(key)
                if value is None:
                    value = n.attrs["value"].array
                self.flats[key] = np.array(value, dtype=dtype, copy=True).reshape(-1)
            elif kind == "buffer":
                if key in inplace:
                    self.flats[key] = inplace[key].value.reshape(-1)
                else:
                    count = int(np.prod(self.shapes[key], dtype=np.int64))
                    self.flats[key] = raw[buffers[key]][:count * dtype.itemsize].view(dtype)

    def _build_node(self, node: Node) -> None:
        op = get_op(node.op)
        if 0 in self.shape(node) and op.kind != COLLECTIVE and not op.multi_output:
            # nothing to compute into an empty output: no kernel runs (kernels that split
            # their work by a size need not be safe for zero; a collective still pairs)
            return
        fn = BUILDERS.get(node.op)
        if fn is None and is_generated(node):
            fn = build_loop
        if fn is None:
            warn_fallback("cpu", node.op)
            fn = build_reference
        fn(self, node)


def is_generated(node: Node) -> bool:
    """Nodes whose kernel is generated from scalar bodies (elementwise, fused, reductions)."""
    kind = get_op(node.op).kind
    return kind in (ELEMENTWISE, FUSED) or (kind == REDUCE and node.op in REDUCE_OPS)


class CpuProgram:
    """A compiled graph for the CPU backend (see the module docstring).

    Args:
        graph: the graph; its outputs are the function's outputs followed by update values.
        updates: ``(output index, Variable)`` pairs: the outputs that are new values of
            Variables (written in place when safe). Defaults to ``graph.updates`` if set.
    """

    backend = "cpu"

    def __init__(self, graph: Graph, updates: Sequence[tuple[int, Any]] | None = None):
        self.source_graph = graph
        # the CPU options every plan of this program is built with (options.py)
        self.options = options.current()
        with options.use(self.options):
            self.graph = lower(graph)
        self.updates = [(int(k), var) for k, var in (updates or ())]
        self.kernels_order, self.groups = program_order(self.graph, self.updates)
        self.order = with_sources(self.graph, self.kernels_order)
        self.reuse_buffers = True
        self.bind_feeds = True
        self.serial_small = True  # runtime/serial.py (not in scan bodies: loop.py)
        self._planned: dict[int, int] | None = None
        self.memory_info = ""
        self.num_kernels = len(self.kernels_order)
        self._plans: dict[tuple, Plan] = {}
        self._profile_env = config.profile_enabled()
        # run_copied's spare plans (the signature's plan is busy): per signature the idle
        # ones and how many exist
        self._pool = threading.Condition(threading.Lock())
        self._idle: dict[tuple, list[Plan]] = {}
        self._spares: dict[tuple, int] = {}
        self._once = threading.Lock()  # run_copied (re)building a signature's plan
        self._planning = threading.Lock()  # planned_buffers, computed once

    def planned_buffers(self) -> dict[int, int]:
        """id(kernel node) -> buffer index from :func:`kiln.core.plan.planned_buffers`
        (computed once, at a fixed batch size, so that every plan shares buffers the same way
        and so uses the same compiled kernels: in-place loops are specialized); {} when buffer
        reuse is off."""
        if self._planned is None:
            with self._planning:  # plans may be built by several threads at once
                if self._planned is None:
                    self.memory_info = ("plan_memory" if self.reuse_buffers
                                        else "one buffer per kernel")
                    self._planned = planned_buffers(self.graph, self.kernels_order) \
                        if self.reuse_buffers else {}
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

    def run_copied(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        """:meth:`run`, safe to call from several threads at once: the call runs in a plan
        no other call is using and returns copies of the outputs (update values included:
        the executor uses it for functions without updates)."""
        if self._profile_env:
            return self.profile(feeds)
        key = (feeds[0].shape,) if len(feeds) == 1 else tuple([f.shape for f in feeds])
        plan = self._plans.get(key)
        if plan is not None and plan.busy.acquire(blocking=False):
            try:
                if plan.valid():
                    return [r.copy() for r in plan.run(feeds)]
            finally:
                plan.busy.release()
        if plan is None or not plan.valid():
            with self._once:  # (re)builds the signature's plan once
                plan = self._plans.get(key)
                if plan is None or not plan.valid():
                    plan = PlanBuilder(self, feeds).build()
                    self._plans[key] = plan
            if plan.busy.acquire(blocking=False):
                try:
                    return [np.array(r, copy=True) for r in plan.run(feeds)]
                finally:
                    plan.busy.release()
        spare = self._checkout(key, feeds)
        try:
            return [np.array(r, copy=True) for r in spare.run(feeds)]
        finally:
            with self._pool:
                self._idle[key].append(spare)
                self._pool.notify()

    def _checkout(self, key: tuple, feeds: Sequence[np.ndarray]) -> Plan:
        """An idle spare plan for ``key`` that is valid for the Variables' current buffers,
        or a new one while fewer than ``MAX_PLANS - 1`` exist, or the next one returned."""
        with self._pool:
            idle = self._idle.setdefault(key, [])
            while not idle and self._spares.get(key, 0) >= MAX_PLANS - 1:
                self._pool.wait()
            plan = idle.pop() if idle else None
            if plan is None:
                self._spares[key] = self._spares.get(key, 0) + 1
        if plan is not None and plan.valid():
            return plan
        try:
            return PlanBuilder(self, feeds).build()
        except BaseException:
            with self._pool:
                if plan is None:
                    self._spares[key] -= 1
                else:  # the invalid plan keeps its place until a build succeeds
                    self._idle[key].append(plan)
                self._pool.notify()
            raise

    def profile(self, feeds: Sequence[np.ndarray], repeat: int = 1,
                file: Any = None) -> list[np.ndarray]:
        """Runs ``repeat`` times and prints the time per kernel and per op kind.

        Returns:
            Copies of the outputs of the last run.
        """
        plan = self.plan(feeds)
        times = [0.0] * (len(plan.calls) + 1)
        with plan.busy:
            t0 = time.perf_counter()
            for _ in range(repeat):
                out = plan.run_profiled(feeds, times)
            total = time.perf_counter() - t0
            out = [np.array(r, copy=True) for r in out]
        print(format_profile(plan, times, total, repeat), file=file)
        return out
