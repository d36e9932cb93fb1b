"""The cuda program: plans a graph onto device buffers and runs it.

Per feed-shape signature a :class:`_Plan` is built once:

1. concrete types of every node (the ops' shape rules on the fed shapes);
2. a :class:`~kiln.core.backends.cuda._layout.Layout` per node: movement ops become strided
   views of their input's buffer (no kernel), everything else a kernel writing a fresh buffer;
3. buffers by liveness: each temporary is assigned a *slot* of the program's arena, reusing
   slots whose tensors are dead (the arena persists on the device across steps and plans);
4. a list of launches (closures over device arrays and integer arguments).

Params live on the device (:mod:`kiln.core.backends.cuda._resident`), constants are uploaded
once per program, each batch is copied in once, outputs are copied back once.

Ops without a CUDA kernel (or whose scalar body cannot be translated) run their NumPy
reference on the host with a one-time warning (copy in, compute, copy out).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.core.backends.cuda import _codegen as cg
from kiln.core.backends.cuda import _loop  # noqa: F401  (registers the loop's kernel)
from kiln.core.backends.cuda import _resident as rs
from kiln.core.backends.cuda._device import blocks_for, check_available, launch_config
from kiln.core.backends.cuda._lower import KERNELS, Lowering
from kiln.core.ir import Graph, Node, TensorType
from kiln.core.layout import Layout, prod
from kiln.core.memory import assign_intervals
from kiln.core.ops.registry import KERNELS as COVERED
from kiln.core.ops.registry import REDUCE
from kiln.core.plan import StaticPlan, program_order, with_sources


def ops_with_kernels() -> set[str]:
    """Names of the registered ops the cuda backend runs on the device."""
    return KERNELS.covered(lambda name, op: op.kind == REDUCE and name in cg.REDUCE_OPS)


# ---- plans ---------------------------------------------------------------------------------------
@dataclass
class _Root:
    kind: str                 # "temp", "param", "const"
    dtype: str
    nelem: int
    var: Any = None
    host: np.ndarray | None = None    # const value
    first: int = 1 << 60
    last: int = -1
    slot: int = -1


@dataclass
class _StepSpec:
    label: str
    reads: list[int]
    writes: list[int]
    bind: Callable[[Callable[[int], Any]], Callable[[], None]]


@dataclass
class _Plan:
    fns: list[Callable[[], None]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    feeds: list[tuple[int, Any, int, int]] = field(default_factory=list)
    params: list[tuple[Any, Any]] = field(default_factory=list)
    outputs: list[tuple[Any, int, tuple, str]] = field(default_factory=list)
    updates: list[tuple[Any, Any, int, int, bool]] = field(default_factory=list)
    slots: dict[tuple[str, int], int] = field(default_factory=dict)
    generation: int = 0
    checks: list[Callable[[], None]] = field(default_factory=list)  # run after the launches


class _Planner(Lowering):
    def __init__(self, prog: CudaProgram, feed_shapes: Sequence[tuple]):
        self.prog = prog
        self.cfg = launch_config()
        # storage key -> root: the planner's keys (id of the node owning the storage) and
        # this backend's temporaries (negative keys); a kernel's result root is registered
        # under both its temporary key and its node's key (one _Root object)
        self.roots: dict[int, _Root] = {}
        self._next_temp = -1
        self.feed_roots: list[tuple[int, Layout]] = []
        self.param_roots: dict[int, int] = {}
        self.steps: list[_StepSpec] = []
        self.checks: list[Callable[[], None]] = []  # e.g. kn.IndexCheck: raise after the run
        self.layouts: dict[int, Layout] = {}
        self.types: dict[int, TensorType] = {}
        self.keep: list[Node] = []  # nodes a kernel builds for itself (Lowering.op_gemm)
        self.feed_shapes = feed_shapes

    # ---- helpers --------------------------------------------------------------------------
    def root(self, kind: str, dtype: str, nelem: int, **kw: Any) -> int:
        key = self._next_temp
        self._next_temp -= 1
        self.roots[key] = _Root(kind, dtype, nelem, **kw)
        return key

    def fresh(self, dtype: str, shape: tuple) -> Layout:
        return Layout.fresh(self.root("temp", dtype, prod(shape)), tuple(shape))

    def emit(self, label: str, reads: Sequence[Layout], writes: Sequence[Layout],
             bind: Callable[[Callable[[int], Any]], Callable[[], None]]) -> None:
        self.steps.append(_StepSpec(label, [r.root for r in reads], [w.root for w in writes],
                                    bind))

    def dtype(self, node: Node) -> str:
        return self.types[id(node)].dtype

    def shape(self, node: Node) -> tuple[int, ...]:
        return self.types[id(node)].dims

    def launch1(self, label: str, kernel: Any, n: int, reads: Sequence[Layout],
                out: Layout, args: Callable[[Callable[[int], Any]], tuple]) -> None:
        """A 1-D grid-stride launch over ``n`` items (skipped when n == 0)."""
        grid, block = blocks_for(n, self.cfg), self.cfg.threads

        def bind(arr: Callable[[int], Any]) -> Callable[[], None]:
            a = args(arr)
            if n == 0:
                return lambda: None
            return kernel.bind(grid, block, a)
        self.emit(label, reads, [out], bind)

    def rows(self, n: int) -> int:
        return max(1, min(n, self.cfg.max_rows))

    # ---- the graph ------------------------------------------------------------------------
    def plan(self) -> None:
        """Shapes, layouts and storage from the device-neutral planner; a kernel (or a host
        fallback) for every node it marks as one."""
        g = self.prog.graph
        st = StaticPlan(g, self.prog.order, self.feed_shapes, "cuda")
        feeds = {id(p): k for k, p in enumerate(g.inputs)}
        for node in st.order:
            key, t = id(node), st.type(node)
            self.types[key] = t
            lay = st.layouts[key]
            kind = st.storage[key]
            if kind == "feed":
                self.roots[key] = _Root("temp", t.dtype, prod(t.dims), first=-1)
                self.feed_roots.append((feeds[key], lay))
            elif kind == "param":
                var = node.attrs["var"]
                shared = self.param_roots.setdefault(id(var), key)
                self.roots[key] = self.roots[shared] if shared != key else _Root(
                    "param", t.dtype, prod(t.dims), var=var)
            elif kind == "const":
                host = st.consts[key] if key in st.consts else node.attrs["value"].array
                self.roots[key] = _Root("const", t.dtype, prod(t.dims), host=host)
            elif kind == "buffer":
                out = self.kernel(node, [self.layouts[id(i)] for i in node.inputs], t)
                if out != Layout.fresh(out.root, t.dims) or self.roots[out.root].kind != "temp":
                    copy = self.fresh(t.dtype, t.shape)
                    self.copy_into(copy, out, t.dtype, "result")
                    out = copy
                self.roots[key] = self.roots[out.root]
            self.layouts[key] = lay

# ---- the program ---------------------------------------------------------------------------------
class CudaProgram:
    """A graph compiled for the GPU. ``run(feeds)`` returns the outputs as host arrays.

    After :meth:`bind_updates` (the executor tells which trailing outputs are new values of
    which Variables), those Variables stay on the device: ``run`` writes the new values into
    the device copies and returns the Variables' host arrays (stale) in their places;
    :attr:`updates_on_device` is then True and the executor must not write them back. The
    host copies are refreshed lazily (``Variable.value`` calls back) or by
    :meth:`sync_to_host`.
    """

    backend = "cuda"

    def __init__(self, graph: Graph):
        self.cuda = check_available()
        self.graph = graph
        self.order = with_sources(graph, program_order(graph, ())[0])
        self._plans: dict[tuple, _Plan] = {}
        self._pool: dict[tuple[str, int], Any] = {}
        self._generation = 0
        self._consts: dict[int, Any] = {}
        self._update_vars: list[Any] = []
        self.updates_on_device = False
        self.last_plan: _Plan | None = None
        # a loop body's program keeps its feeds for the whole run (the consts are copied in
        # once per loop, not once per step): no temporary may take their slots
        self.keep_feeds = False

    # ---- executor protocol ------------------------------------------------------------------
    def bind_updates(self, variables: Sequence[Any]) -> None:
        """Declares that the last ``len(variables)`` outputs are new values of ``variables``.

        They then stay on the device when every Variable supports it (``_version`` and
        ``_device_pull``: see :mod:`kiln.core.backends.cuda._resident`)."""
        variables = list(variables)
        if len(variables) > len(self.graph.outputs):
            raise ValueError(f"bind_updates: {len(variables)} updates for "
                             f"{len(self.graph.outputs)} outputs")
        self._update_vars = variables
        params = [n.attrs["var"] for n in self.graph.nodes if n.op == "param"]
        self.updates_on_device = all(rs.supports_residency(v) for v in variables + params)
        self._plans.clear()

    def sync_to_host(self) -> None:
        """Copies every Variable whose device copy is newer back to its host array."""
        rs.sync_to_host()

    @property
    def num_kernels(self) -> int:
        plan = self.last_plan
        return len(plan.fns) if plan is not None else 0

    def kernel_labels(self) -> list[str]:
        """The launches of the last plan, in order (``"op (host)"`` for host fallbacks)."""
        return list(self.last_plan.labels) if self.last_plan is not None else []

    # ---- planning ---------------------------------------------------------------------------
    def _plan(self, shapes: tuple) -> _Plan:
        plan = self._plans.get(shapes)
        if plan is not None and plan.generation == self._generation:
            return plan
        planner = _Planner(self, shapes)
        planner.plan()
        plan = self._finish(planner)
        self._plans[shapes] = plan
        return plan

    def _finish(self, pl: _Planner) -> _Plan:
        g = self.graph
        n_up = len(self._update_vars)
        n_out = len(g.outputs) - n_up
        resident = self.updates_on_device
        updated = {id(v) for v in self._update_vars} if resident else set()
        out_layouts = []
        for j, o in enumerate(g.outputs):
            lay = pl.layouts[id(o)]
            root = pl.roots[lay.root]
            is_update = j >= n_out and resident
            dt = pl.dtype(o)
            if not lay.is_contiguous:
                lay = pl.contig(lay, dt)
            elif is_update and root.kind == "param" and id(root.var) in updated \
                    and root.var is not self._update_vars[j - n_out]:
                # the new value of one Variable is another updated Variable's old value:
                # copy it before the device copies are overwritten
                lay = self._copy(pl, lay, dt)
            out_layouts.append(lay)
        # liveness (in launch steps: a kernel's own temporaries count too)
        end = len(pl.steps)
        for i, st in enumerate(pl.steps):
            for r in st.reads + st.writes:
                root = pl.roots[r]
                root.first = min(root.first, i)
                root.last = max(root.last, i)
        for lay in out_layouts:
            pl.roots[lay.root].last = end
        for _, lay in pl.feed_roots:
            pl.roots[lay.root].first = -1
            pl.roots[lay.root].last = end if self.keep_feeds else max(pl.roots[lay.root].last,
                                                                      -1)
        slots = self._allocate(pl)
        plan = _Plan(generation=self._generation, slots=slots, checks=pl.checks)
        arrays: dict[int, Any] = {}
        by_root: dict[int, Any] = {}
        for rid, root in pl.roots.items():
            found = by_root.get(id(root), by_root)
            if found is not by_root:  # a second key of the same storage
                if found is not None:
                    arrays[rid] = found
                continue
            array = None
            if root.kind == "temp":
                if root.slot >= 0:
                    array = self._pool[(root.dtype, root.slot)]
            elif root.kind == "param":
                array = rs.resident(root.var).dev
                plan.params.append((root.var, rs.resident(root.var)))
            else:
                array = self._const(root)
            by_root[id(root)] = array
            if array is not None:
                arrays[rid] = array
        arr = arrays.__getitem__
        for st in pl.steps:
            plan.fns.append(st.bind(arr))
            plan.labels.append(st.label)
        for k, lay in pl.feed_roots:
            plan.feeds.append((k, arrays[lay.root], lay.offset, lay.size))
        for j, (o, lay) in enumerate(zip(g.outputs, out_layouts)):
            if j >= n_out and resident:
                var = self._update_vars[j - n_out]
                same = pl.roots[lay.root].kind == "param" and pl.roots[lay.root].var is var
                plan.updates.append((var, arrays[lay.root], lay.offset, lay.size, same))
            else:
                plan.outputs.append((arrays[lay.root], lay.offset, lay.shape, pl.dtype(o)))
        return plan

    def _copy(self, pl: _Planner, lay: Layout, dtype: str) -> Layout:
        out = pl.fresh(dtype, lay.shape)
        pl.copy_into(out, lay, dtype, "update copy")
        return out

    def _allocate(self, pl: _Planner) -> dict[tuple[str, int], int]:
        """Slots of the program's per-dtype device arena for the temporaries, by lifetime
        (:func:`kiln.core.memory.assign_intervals`); grows the arena when a slot must."""
        unique = {id(r): r for r in pl.roots.values()}
        caps: dict[tuple[str, int], int] = {}
        by_dtype: dict[str, dict[int, list[int]]] = {}
        for key, root in unique.items():
            if root.kind == "temp" and root.last >= root.first:
                by_dtype.setdefault(root.dtype, {})[key] = [root.first, root.last,
                                                            max(root.nelem, 1)]
        for dtype, span in by_dtype.items():
            where, sizes = assign_intervals(span)
            for key, slot in where.items():
                unique[key].slot = slot
            for slot, size in enumerate(sizes):
                caps[(dtype, slot)] = size
        cuda = self.cuda
        grown = False
        for pool_key, cap in caps.items():
            have = self._pool.get(pool_key)
            if have is None or have.size < cap:
                self._pool[pool_key] = cuda.device_array(cap, dtype=np.dtype(pool_key[0]))
                grown = grown or have is not None
        if grown:
            self._generation += 1
        return caps

    def _const(self, root: _Root) -> Any:
        host = np.asarray(root.host, dtype=root.dtype, order="C").reshape(-1)
        key = id(root.host)
        found = self._consts.get(key)
        if found is not None and found[0] is root.host:
            return found[1]
        dev = self.cuda.to_device(host if host.size else np.zeros(1, root.dtype))
        self._consts[key] = (root.host, dev)
        return dev

    # ---- running ----------------------------------------------------------------------------
    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        feeds = [np.asarray(f, order="C") for f in feeds]
        plan = self._plan(tuple(f.shape for f in feeds))
        self.last_plan = plan
        eager = not self.updates_on_device
        for var, res in plan.params:
            rs.refresh(var, res, force=eager)
        for k, arr, off, n in plan.feeds:
            if n:
                arr[off:off + n].copy_to_device(feeds[k].reshape(-1))
        try:
            for fn in plan.fns:
                fn()
        finally:  # errors the kernels flagged (an IndexError names its op)
            for check in plan.checks:
                check()
        results = []
        for arr, off, shape, dtype in plan.outputs:
            host = np.empty(shape, dtype)
            n = host.size
            if n:
                arr[off:off + n].copy_to_host(host.reshape(-1))
            results.append(host)
        for var, arr, off, n, same in plan.updates:
            res = rs.resident(var)
            if not same and n:
                res.dev.copy_to_device(arr[off:off + n])
            rs.mark_device_newer(var, res)
            results.append(var._value)
        return results

    def profile(self, feeds: Sequence[np.ndarray]) -> dict[str, float]:
        """Runs once, synchronizing after each launch; prints and returns seconds per op."""
        feeds = [np.asarray(f, order="C") for f in feeds]
        self.run(feeds)
        plan = self.last_plan
        assert plan is not None
        times: dict[str, float] = {}
        self.cuda.synchronize()
        for label, fn in zip(plan.labels, plan.fns):
            t0 = time.perf_counter()
            fn()
            self.cuda.synchronize()
            times[label] = times.get(label, 0.0) + time.perf_counter() - t0
        total = sum(times.values()) or 1.0
        for label, sec in sorted(times.items(), key=lambda kv: -kv[1]):
            print(f"{label:32s} {sec * 1e3:9.3f} ms  {100 * sec / total:5.1f}%")
        return times


def compile_graph(graph: Graph, updates: object = None) -> CudaProgram:
    """Compiles ``graph`` for the GPU (raises CudaUnavailableError when it cannot run)."""
    COVERED.setdefault("cuda", set()).update(ops_with_kernels())  # ops registered since
    return CudaProgram(graph)
