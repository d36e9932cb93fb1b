"""A plan whose every step is a native kernel, run in ONE native call (docs/architecture.md,
"Threads"; issue 47: serving at batch 1).

A plan runs its steps from a Python loop: ``fn(*args)`` per step, and a split step goes
through :class:`~kiln.core.backends.cpu.runtime.threads.SplitCall`'s Python code, the spin
pool's entry (the arrays' pointers read again, the GIL released and taken again) for each.
For the MNIST MLP at batch 1 (three row-vector products, two of them split, their sums, a
softmax) the loop took 16.8-18.6 us where one native call takes 14.4 (onnxruntime's whole
call: 17-18 us on the 2-core Zen 5 test host). Where every step of a plan is
a native kernel's entry point (:func:`spin_pool.kernel_of`), plain, split or in order
(``SerialParts``), taking only arrays, the plan's arguments never change between calls
(its buffers and the Variables' arrays are fixed while :meth:`Plan.valid` holds; a plan is
rebuilt when they are not), so :func:`build` writes them once as a schedule: per step its part
count, whether its parts run in order, the spin pool's trampoline for its argument count and
one argument row per part (the kernel's address, then its arrays' data pointers). One call of
the module's entry (:func:`_ir`) copies the feeds into the plan's feed buffers, releases the
GIL once, runs every step (a split one through the spin pool's dispatcher, the same parts on
the same workers as ``SplitCall``: the same bits) and takes the GIL back.

Only where the spin engine runs (``spin_pool.ENABLED``, x86-64 Linux), for plans whose feeds
are all copied (under ``bind_min_bytes``: larger ones the Python loop reads in place), and
with every feed a C-contiguous array of the buffer's shape and dtype
(:meth:`NativePlan.accepts`); otherwise, and for plans with any other step (a BLAS call, a
numba kernel, NumPy), the Python loop runs.

Its split steps run on the spin workers or all on the caller, whichever its calls measure
faster here (``race.py``), and on the caller on a busy machine (``cpus.plan``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.codegen.llvm_loop import DATA_OFFSET
from kiln.core.backends.cpu.codegen.spec import CodegenError
from kiln.core.backends.cpu.runtime import cpus, spin_pool
from kiln.core.backends.cpu.runtime.race import SPREAD, Race
from kiln.core.backends.cpu.runtime.serial import SerialParts
from kiln.core.backends.cpu.runtime.threads import SplitCall

# schedule header (int64 words): pool, in-order flag, steps, feeds, the dispatcher's address;
# then (buffer, bytes) per feed; then (parts, in order, trampoline, argument rows) per step
HEADER, FEED, STEP = 5, 2, 4
_MSG = "kiln native plan: wrong number of feeds"


def _ir(sym: str) -> str:
    msg = f"[{len(_MSG) + 1} x i8]"
    return "\n".join([
        "declare ptr @PyEval_SaveThread()",
        "declare void @PyEval_RestoreThread(ptr)",
        "declare void @Py_IncRef(ptr)",
        "declare void @PyErr_SetString(ptr, ptr)",
        "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
        "@kiln_py_none = external global i8",
        "@kiln_py_type_error = external global i8",
        f'@{sym}_msg = private unnamed_addr constant {msg} c"{_MSG}\\00"',
        "",
        f"define ptr @{sym}_py(ptr %self, ptr %args, i64 %nargs) {{",
        "entry:",
        "  %h = load ptr, ptr %args, align 8",
        f"  %hf = getelementptr inbounds i8, ptr %h, i64 {DATA_OFFSET}",
        "  %s = load ptr, ptr %hf, align 8",
        "  %pool = load ptr, ptr %s, align 8",
        "  %g1 = getelementptr inbounds i64, ptr %s, i64 1",
        "  %inorder_all = load i64, ptr %g1, align 8",
        "  %g2 = getelementptr inbounds i64, ptr %s, i64 2",
        "  %nsteps = load i64, ptr %g2, align 8",
        "  %g3 = getelementptr inbounds i64, ptr %s, i64 3",
        "  %nfeeds = load i64, ptr %g3, align 8",
        "  %g4 = getelementptr inbounds i64, ptr %s, i64 4",
        "  %run = load ptr, ptr %g4, align 8",
        "  %want = add i64 %nfeeds, 1",
        "  %ok = icmp eq i64 %nargs, %want",
        "  br i1 %ok, label %feed, label %bad",
        # ---- the feeds into their buffers (accepts(): their shapes and dtypes) -------------
        "feed:",
        "  %i = phi i64 [ 0, %entry ], [ %i1, %copy ]",
        "  %fmore = icmp ult i64 %i, %nfeeds",
        "  br i1 %fmore, label %copy, label %go",
        "copy:",
        "  %ai = add i64 %i, 1",
        "  %ga = getelementptr inbounds ptr, ptr %args, i64 %ai",
        "  %obj = load ptr, ptr %ga, align 8",
        f"  %fd = getelementptr inbounds i8, ptr %obj, i64 {DATA_OFFSET}",
        "  %src = load ptr, ptr %fd, align 8",
        f"  %fi = mul i64 %i, {FEED}",
        f"  %di = add i64 %fi, {HEADER}",
        "  %gd = getelementptr inbounds i64, ptr %s, i64 %di",
        "  %dst = load ptr, ptr %gd, align 8",
        "  %ni = add i64 %di, 1",
        "  %gn = getelementptr inbounds i64, ptr %s, i64 %ni",
        "  %nb = load i64, ptr %gn, align 8",
        "  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %nb, i1 false)",
        "  %i1 = add i64 %i, 1",
        "  br label %feed",
        # ---- the steps, without the GIL -------------------------------------------------------
        "go:",
        "  %ts = call ptr @PyEval_SaveThread()",
        f"  %fw = mul i64 %nfeeds, {FEED}",
        f"  %base0 = add i64 %fw, {HEADER}",
        "  br label %step",
        "step:",
        "  %t = phi i64 [ 0, %go ], [ %t1, %next ]",
        "  %smore = icmp ult i64 %t, %nsteps",
        "  br i1 %smore, label %body, label %done",
        "body:",
        f"  %tw = mul i64 %t, {STEP}",
        "  %b = add i64 %base0, %tw",
        "  %gp = getelementptr inbounds i64, ptr %s, i64 %b",
        "  %parts = load i64, ptr %gp, align 8",
        "  %b1 = add i64 %b, 1",
        "  %gm = getelementptr inbounds i64, ptr %s, i64 %b1",
        "  %mode = load i64, ptr %gm, align 8",
        "  %b2 = add i64 %b, 2",
        "  %gt = getelementptr inbounds i64, ptr %s, i64 %b2",
        "  %tramp = load ptr, ptr %gt, align 8",
        "  %b3 = add i64 %b, 3",
        "  %gv = getelementptr inbounds i64, ptr %s, i64 %b3",
        "  %argvs = load ptr, ptr %gv, align 8",
        "  %one = icmp eq i64 %parts, 1",
        "  %m = or i64 %mode, %inorder_all",
        "  %ordered = icmp ne i64 %m, 0",
        "  %caller = or i1 %one, %ordered",
        "  br i1 %caller, label %own, label %split",
        "split:",
        "  call void %run(ptr %pool, i64 %parts, ptr %tramp, ptr %argvs)",
        "  br label %next",
        "own:",
        "  %k = phi i64 [ 0, %body ], [ %k1, %own ]",
        "  %gk = getelementptr inbounds ptr, ptr %argvs, i64 %k",
        "  %a = load ptr, ptr %gk, align 8",
        "  call void %tramp(ptr %a)",
        "  %k1 = add i64 %k, 1",
        "  %kdone = icmp eq i64 %k1, %parts",
        "  br i1 %kdone, label %next, label %own",
        "next:",
        "  %t1 = add i64 %t, 1",
        "  br label %step",
        "done:",
        *spin_pool.entry_end_ir(sym),
        "",
    ])


_entry: list[Any] = []  # the compiled entry, once per process ([None]: it did not build)


def _runner() -> Any:
    if not _entry:
        try:
            _entry.append(native.kernel("native plan v1", [], _ir).compile(()))
        except (CodegenError, RuntimeError, OSError) as exc:  # LLVM's errors: RuntimeError
            warnings.warn(f"kiln: the native plan runner did not build ({exc}); plans run "
                          "their steps from Python (slower, the same results)",
                          RuntimeWarning, stacklevel=2)
            _entry.append(None)
    return _entry[0]


def _pointer(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class NativePlan:
    """A plan's steps as one native call: ``plan(feeds)`` after :meth:`accepts`."""

    __slots__ = ("entry", "schedule", "ordered", "rows", "buffers", "specs", "workers",
                 "race", "_keep")

    def __init__(self, entry: Any, schedule: np.ndarray, rows: np.ndarray,
                 buffers: list[np.ndarray], workers: int, keep: list[np.ndarray],
                 race: bool = True):
        self.entry = entry
        self.schedule = schedule  # split steps on the workers
        self.ordered = schedule.copy()  # every part on the caller, in order (a busy machine)
        self.ordered[1] = 1
        self.rows = rows
        self.buffers = buffers
        self.specs = [(b.dtype, b.shape, b.strides) for b in buffers]
        self.workers = workers  # the spin workers its split steps need (0: none split)
        self.race = Race() if race else None  # split steps spread or in order: the faster
        self._keep = keep  # every array whose pointer the schedule holds

    def accepts(self, feeds: Sequence[Any]) -> bool:
        """Whether the feeds can be copied into the buffers as they are: arrays of the
        buffers' shapes, dtypes and (C-contiguous) strides."""
        if len(feeds) != len(self.specs):
            return False
        for f, (dtype, shape, strides) in zip(feeds, self.specs):
            if (type(f) is not np.ndarray or f.shape != shape or f.strides != strides
                    or (f.dtype is not dtype and f.dtype != dtype)):
                return False
        return True

    def __call__(self, feeds: Sequence[np.ndarray]) -> None:
        if not self.workers:
            self.entry(self.ordered, *feeds)
            return
        pool = spin_pool.POOL
        if cpus.plan().threads == 1:  # a busy machine: the caller runs every part
            self.entry(self.ordered, *feeds)
            return
        if pool.count < self.workers and not pool.ready(self.workers + 1):
            self.entry(self.ordered, *feeds)  # (a forked child whose workers cannot start)
            return
        race = self.race
        if race is None:
            pool.place()
            self.entry(self.schedule, *feeds)
            return
        way = race.way()
        if race.settled is not None:
            if way == SPREAD:
                pool.place()
                self.entry(self.schedule, *feeds)
            else:
                self.entry(self.ordered, *feeds)
            return
        if way == SPREAD:
            pool.place()
        clock = time.perf_counter_ns
        t0 = clock()
        self.entry(self.schedule if way == SPREAD else self.ordered, *feeds)
        race.record(way, clock() - t0)


def build(plan: Any) -> NativePlan | None:
    """The :class:`NativePlan` of a built plan (its entry points settled), or None where any
    step is not a native kernel taking only arrays, or the spin engine is off."""
    if not spin_pool.ENABLED or not plan.calls or any(plan.bindings or ()):
        return None  # (a feed read in place, from options.bind_min_bytes: the Python loop
        # binds it; copying it here cost mlp_predict's batches of 1,024 rows 14%)
    steps: list[tuple[int, int, int, int, list[list[np.ndarray]]]] = []
    most = 1
    for fn, args in plan.calls:
        args = tuple(args)
        if isinstance(fn, SplitCall):
            if fn.engine == "portable":
                return None
            entry, parts, ordered = fn.entry, fn.parts, int(fn.engine == "serial")
        elif isinstance(fn, SerialParts):
            entry, parts, ordered = fn.entry, fn.parts, 1
        else:
            entry, parts, ordered = fn, 1, 1
        found = spin_pool.kernel_of(entry)
        if found is None:
            return None
        address, arrays = found
        calls = ([list(fn.change(args, k)) for k in range(parts)]
                 if isinstance(fn, SplitCall | SerialParts) else [list(args)])
        if not 1 <= arrays <= spin_pool.MAX_ARRAYS or any(
                len(c) != arrays or any(type(a) is not np.ndarray for a in c) for c in calls):
            return None
        steps.append((len(calls), ordered, address, arrays, calls))
        if not ordered:
            most = max(most, len(calls))
    runner = _runner()
    addresses = spin_pool.POOL.addresses(most)
    if runner is None or addresses is None:
        return None
    buffers = list(plan.feed_buffers)
    # rows: per step its table of argument-row pointers, then the rows themselves
    words = sum(p + p * (n + 1) for p, _, _, n, _ in steps)
    rows = np.zeros(max(words, 1), np.int64)
    base = _pointer(rows)
    schedule = np.zeros(HEADER + FEED * len(buffers) + STEP * len(steps), np.int64)
    schedule[0] = addresses["pool"]
    schedule[2] = len(steps)
    schedule[3] = len(buffers)
    schedule[4] = addresses["run"]
    for i, b in enumerate(buffers):
        schedule[HEADER + FEED * i:HEADER + FEED * i + 2] = (_pointer(b), b.nbytes)
    keep: list[np.ndarray] = [*buffers]
    at = 0
    for t, (parts, ordered, address, arrays, calls) in enumerate(steps):
        table = at
        at += parts
        for k, call in enumerate(calls):
            rows[table + k] = base + 8 * at
            rows[at] = address
            rows[at + 1:at + 1 + arrays] = [_pointer(a) for a in call]
            keep += call
            at += arrays + 1
        s = HEADER + FEED * len(buffers) + STEP * t
        schedule[s:s + STEP] = (parts, ordered, addresses[f"call{arrays}"], base + 8 * table)
    return NativePlan(runner, schedule, rows, buffers, most - 1, keep,
                      options.current().race)
