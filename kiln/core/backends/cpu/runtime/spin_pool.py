"""Native kernels' split calls on workers that wait in native code (docs/architecture.md,
"Threads"): kiln's own kernels (:mod:`..codegen.native`) split over threads hand their parts
to these workers instead of :data:`threads.POOL`'s Python threads.

A split call on the Python pool wakes a worker through a queue and an event, and the worker
takes the GIL before it calls its part: 11-15 us a call (median; 18-32 at the 90th
percentile) on the 2-core Zen 4 test host, against 1-2 us for the parts themselves where they
are small (``benchmarks/bench_overhead.py --pool``). Here one LLVM module (compiled and cached
as any native kernel) holds:

* ``@<sym>_worker(slot)``: a worker's whole life, entered once through ctypes (so without the
  GIL) from a daemon thread. It starts from the slot's ``done`` count (a part published
  before the thread runs is still new to it) and spins on its slot's sequence number for
  :data:`SPIN_CYCLES` (the time read from the cycle counter, ``pause`` between reads, never
  ``sched_yield``: :data:`SPIN_CYCLES`' comment),
  runs each part published there (a trampoline and its argument vector) and publishes the
  part's number as done; after the spin it sleeps in ``futex(FUTEX_WAIT)`` on the sequence
  number. ``sleeping`` is set and the sequence number read again before it sleeps, and the
  caller reads ``sleeping`` after it publishes (both sequentially consistent), so a part is
  never missed: either the worker sees it or the caller wakes the worker.
* ``@<sym>_py``: the plan step's entry (a builtin function, :mod:`..codegen.native`'s wrapper
  convention): its first argument an int64 header (pool, parts, trampoline, kernel, arrays
  per part), then each part's arrays. It reads the arrays' data pointers, releases the GIL,
  takes the pool (a compare-and-swap on its lock word: a pool in use by another thread makes
  this caller run every part itself, in order), publishes parts 1.. to the workers, runs part
  0, then every part no worker has claimed yet (a worker claims a part by moving its slot's
  ``taken`` from the part's predecessor to its number, a compare-and-swap the caller makes
  too: each part runs once), waits for the claimed ones (spinning; ``sched_yield`` after a
  while), and releases the pool. A worker that does not get a core (other processes' threads
  hold them, or it sleeps and is slow to wake) so holds up nothing but its claimed part.
* ``@<sym>_call<n>(argv)``: trampolines calling ``argv[0](argv[1], ..., argv[n])``, the
  kernels' own signature (``void @kernel(ptr, ...)``: only pointers, :mod:`..codegen.llvm_loop`).

The parts of a call are the same parts with the same arguments as on the Python pool, so the
results are the same bits. A forked child starts its own workers on its first split call
(threads do not survive ``fork``; the pool's memory is cleared in the child).
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
from typing import Any

import numpy as np

from kiln.core.backends.cpu import target
from kiln.core.backends.cpu.codegen.spec import CodegenError
from kiln.core.backends.cpu.runtime import cpus

# A worker's spin reads its slot with ``pause`` between reads, never ``sched_yield``: a yield
# hands the core to any runnable task, a ``nice 19`` job's included (Linux's EEVDF gives it a
# whole slice, ~1-3 ms), and the part published meanwhile waits for it. Beside two niced
# CPU-bound jobs (2-core Zen 5), samples/s: LeNet-5 8,458 yielding against 29,344 (30,348
# alone), dilated Conv1D 808 against 4,993 (5,035); split 256 x 512 / 784 x 512 row-vector
# products, quiet, us: 4.9 / 10.5 yielding, 3.9 / 8.7 pausing (docs/performance.md,
# "Contention"). Where the CPUs are not all free the spin is 0 (place()): the worker sleeps in
# futex at once and a wake-up preempts a lower-priority task.
# a worker's spin before it sleeps: 2^18 cycles, ~75-100 us (the cycle counter runs at the
# CPU's base clock), enough for the next step of a plan, a serial copy between two split
# steps included (a causal Conv1D's pad), or the next serving call. 2^20 (~0.3 ms) held a
# core the caller's other threads wanted before the portable pool parked spinning workers
# (mlp_predict 0.78x against 2^16 then, another host); 2^16 (~20 us) let workers fall
# asleep in a plan's serial steps and each split step after one paid a futex wake-up:
# against 2^18, 2-core Zen 4, interleaved: dilated Conv1D 0.96x, transformer 0.96x, CIFAR
# CNN 0.98x, Conv1D 1.03x, the MLPs 0.98-1.01x; four copies at once the same totals
# (docs/performance.md, "Contention"). Where the CPUs are not all free the spin is 0.
SPIN_CYCLES = 1 << 18
MAX_ARRAYS = 16        # arrays per part a trampoline passes on
SLOT = 64              # bytes per worker slot (one cache line)
# a caller waiting for a worker's part yields only after this many pauses (~1-4 ms: a worker
# that lost its CPU, not one still computing; a yield hands the core to niced jobs too)
POLL_PAUSES = 1 << 16
MAX_WORKERS = max(63, os.cpu_count() or 1)  # slots (a split call of more parts: Python pool)
LOCK_OFFSET = 0        # the pool's first line: its lock word, and the park word
PARK_OFFSET = 8
# Linux x86-64 only (the futex syscall number 202 and ``pause`` below: target.SPIN_PLATFORMS),
# KILN_SPIN_POOL not 0: target.py decides, once at import; elsewhere threads.KernelPool's
# Python workers run the parts (runtime.parts.engine() says which)
ENABLED = target.process().spin_engine

# slot fields (byte offsets): i32 seq, i32 done, i32 sleeping, i32 taken, ptr trampoline,
# ptr argv, i64 spin cycles, ptr pool
_SEQ, _DONE, _SLEEPING, _TAKEN, _FN, _ARG, _SPIN, _POOL = 0, 4, 8, 12, 16, 24, 32, 40


def _ir(sym: str) -> str:
    """The module: worker loop, dispatcher, trampolines and the ``_py`` entry."""
    lines = [
        "declare i64 @llvm.readcyclecounter()",
        "declare void @llvm.x86.sse2.pause()",
        "declare i64 @syscall(i64, ...)",
        "declare i32 @sched_yield()",
        "declare ptr @PyEval_SaveThread()",
        "declare void @PyEval_RestoreThread(ptr)",
        "declare void @Py_IncRef(ptr)",
        "declare void @PyErr_SetString(ptr, ptr)",
        "@kiln_py_none = external global i8",
        "@kiln_py_type_error = external global i8",
        f"@{sym}_msg = private unnamed_addr constant [39 x i8] "
        'c"kiln spin pool: wrong number of arrays\\00"',
        "",
        # ---- the worker --------------------------------------------------------------------
        f"define void @{sym}_worker(ptr %slot) {{",
        "entry:",
        f"  %pdone = getelementptr inbounds i8, ptr %slot, i64 {_DONE}",
        f"  %psleep = getelementptr inbounds i8, ptr %slot, i64 {_SLEEPING}",
        f"  %pfn = getelementptr inbounds i8, ptr %slot, i64 {_FN}",
        f"  %parg = getelementptr inbounds i8, ptr %slot, i64 {_ARG}",
        f"  %pspin = getelementptr inbounds i8, ptr %slot, i64 {_SPIN}",
        f"  %ppool = getelementptr inbounds i8, ptr %slot, i64 {_POOL}",
        f"  %ptaken = getelementptr inbounds i8, ptr %slot, i64 {_TAKEN}",
        "  %pool = load ptr, ptr %ppool, align 8",
        f"  %ppark = getelementptr inbounds i8, ptr %pool, i64 {PARK_OFFSET}",
        # the parts already run: ``done`` (equal to the sequence number while no part is in
        # flight, as when a worker starts). Not the sequence number itself: a caller may
        # publish the first part before this thread gets here, and that part must not count
        # as seen
        "  %first = load atomic i32, ptr %pdone acquire, align 4",
        "  br label %wait",
        "wait:",
        "  %last = phi i32 [ %first, %entry ], [ %s, %run ], [ %s, %work ], [ %last, %woke ]",
        "  %t0 = call i64 @llvm.readcyclecounter()",
        "  %limit = load i64, ptr %pspin, align 8",
        "  br label %spin",
        "spin:",
        "  %s0 = load atomic i32, ptr %slot acquire, align 4",
        "  %new0 = icmp ne i32 %s0, %last",
        "  br i1 %new0, label %run, label %pause",
        "pause:",
        "  %t = call i64 @llvm.readcyclecounter()",
        "  %el = sub i64 %t, %t0",
        "  %more = icmp ult i64 %el, %limit",
        "  br i1 %more, label %hold, label %sleep",
        "hold:",
        "  call void @llvm.x86.sse2.pause()",
        "  br label %parked",
        "parked:",
        "  %pk = load atomic i32, ptr %ppark monotonic, align 4",
        "  %stay = icmp eq i32 %pk, 0",
        "  br i1 %stay, label %spin, label %sleep",
        "sleep:",
        "  store atomic i32 1, ptr %psleep seq_cst, align 4",
        "  %s1 = load atomic i32, ptr %slot seq_cst, align 4",
        "  %new1 = icmp ne i32 %s1, %last",
        "  br i1 %new1, label %woke, label %futex",
        "futex:",
        "  %l64 = zext i32 %last to i64",
        "  %r = call i64 (i64, ...) @syscall(i64 202, ptr %slot, i64 128, i64 %l64, ptr null)",
        "  br label %woke",
        "woke:",
        "  store atomic i32 0, ptr %psleep seq_cst, align 4",
        "  br label %wait",
        "run:",
        "  %s = phi i32 [ %s0, %spin ]",
        # the part is claimed (``taken`` from its predecessor to its number), or the caller
        # took it while this worker was away (then ``taken`` is already ``%s``: nothing to do)
        "  %prev = sub i32 %s, 1",
        "  %cl = cmpxchg ptr %ptaken, i32 %prev, i32 %s acq_rel monotonic, align 4",
        "  %mine = extractvalue { i32, i1 } %cl, 1",
        "  br i1 %mine, label %work, label %wait",
        "work:",
        "  %fn = load ptr, ptr %pfn, align 8",
        "  %arg = load ptr, ptr %parg, align 8",
        "  call void %fn(ptr %arg)",
        "  store atomic i32 %s, ptr %pdone release, align 4",
        "  br label %wait",
        "}",
        "",
        # ---- the dispatcher ----------------------------------------------------------------
        f"define void @{sym}_run(ptr %pool, i64 %parts, ptr %fn, ptr %argvs) {{",
        "entry:",
        "  %cas = cmpxchg ptr %pool, i32 0, i32 1 acquire monotonic, align 4",
        "  %got = extractvalue { i32, i1 } %cas, 1",
        "  br i1 %got, label %take, label %serial",
        "serial:",
        "  %k = phi i64 [ 0, %entry ], [ %k1, %serial ]",
        "  %ga = getelementptr inbounds ptr, ptr %argvs, i64 %k",
        "  %a = load ptr, ptr %ga, align 8",
        "  call void %fn(ptr %a)",
        "  %k1 = add i64 %k, 1",
        "  %sdone = icmp eq i64 %k1, %parts",
        "  br i1 %sdone, label %exit, label %serial",
        "take:",
        f"  %ppark = getelementptr inbounds i8, ptr %pool, i64 {PARK_OFFSET}",
        "  store atomic i32 0, ptr %ppark monotonic, align 4",
        "  br label %publish",
        "publish:",
        "  %j = phi i64 [ 1, %take ], [ %j1, %next ]",
        "  %more = icmp ult i64 %j, %parts",
        "  br i1 %more, label %give, label %own",
        "give:",
        f"  %off = mul i64 %j, {SLOT}",
        "  %slot = getelementptr inbounds i8, ptr %pool, i64 %off",
        f"  %pfn = getelementptr inbounds i8, ptr %slot, i64 {_FN}",
        f"  %parg = getelementptr inbounds i8, ptr %slot, i64 {_ARG}",
        "  %gj = getelementptr inbounds ptr, ptr %argvs, i64 %j",
        "  %aj = load ptr, ptr %gj, align 8",
        "  store ptr %fn, ptr %pfn, align 8",
        "  store ptr %aj, ptr %parg, align 8",
        "  %old = load atomic i32, ptr %slot monotonic, align 4",
        "  %seq = add i32 %old, 1",
        "  store atomic i32 %seq, ptr %slot seq_cst, align 4",
        f"  %psl = getelementptr inbounds i8, ptr %slot, i64 {_SLEEPING}",
        "  %sl = load atomic i32, ptr %psl seq_cst, align 4",
        "  %asleep = icmp ne i32 %sl, 0",
        "  br i1 %asleep, label %wake, label %next",
        "wake:",
        "  %w = call i64 (i64, ...) @syscall(i64 202, ptr %slot, i64 129, i64 1)",
        "  br label %next",
        "next:",
        "  %j1 = add i64 %j, 1",
        "  br label %publish",
        "own:",
        "  %a0 = load ptr, ptr %argvs, align 8",
        "  call void %fn(ptr %a0)",
        "  br label %steal",
        # the parts no worker claimed yet (its core taken by another thread, asleep and not
        # yet woken) run here, in order: the same parts, the same bits
        "steal:",
        "  %q = phi i64 [ 1, %own ], [ %q1, %kept ]",
        "  %qmore = icmp ult i64 %q, %parts",
        "  br i1 %qmore, label %try, label %collect0",
        "try:",
        f"  %qoff = mul i64 %q, {SLOT}",
        "  %qslot = getelementptr inbounds i8, ptr %pool, i64 %qoff",
        f"  %qtaken = getelementptr inbounds i8, ptr %qslot, i64 {_TAKEN}",
        "  %qseq = load atomic i32, ptr %qslot monotonic, align 4",
        "  %qprev = sub i32 %qseq, 1",
        "  %qcl = cmpxchg ptr %qtaken, i32 %qprev, i32 %qseq acq_rel monotonic, align 4",
        "  %qmine = extractvalue { i32, i1 } %qcl, 1",
        "  br i1 %qmine, label %self, label %kept",
        "self:",
        "  %gq = getelementptr inbounds ptr, ptr %argvs, i64 %q",
        "  %aq = load ptr, ptr %gq, align 8",
        "  call void %fn(ptr %aq)",
        f"  %qdone = getelementptr inbounds i8, ptr %qslot, i64 {_DONE}",
        "  store atomic i32 %qseq, ptr %qdone release, align 4",
        "  br label %kept",
        "kept:",
        "  %q1 = add i64 %q, 1",
        "  br label %steal",
        "collect0:",
        "  br label %collect",
        "collect:",
        "  %i = phi i64 [ 1, %collect0 ], [ %i1, %arrived ]",
        "  %cmore = icmp ult i64 %i, %parts",
        "  br i1 %cmore, label %await, label %release",
        "await:",
        f"  %coff = mul i64 %i, {SLOT}",
        "  %cslot = getelementptr inbounds i8, ptr %pool, i64 %coff",
        f"  %cdone = getelementptr inbounds i8, ptr %cslot, i64 {_DONE}",
        "  %want = load atomic i32, ptr %cslot monotonic, align 4",
        "  br label %poll",
        "poll:",
        "  %n = phi i64 [ 0, %await ], [ %n1, %idle ], [ 0, %yield ]",
        "  %d = load atomic i32, ptr %cdone acquire, align 4",
        "  %ready = icmp eq i32 %d, %want",
        "  br i1 %ready, label %arrived, label %idle",
        "idle:",
        "  call void @llvm.x86.sse2.pause()",
        "  %n1 = add i64 %n, 1",
        f"  %long = icmp ugt i64 %n1, {POLL_PAUSES}",
        "  br i1 %long, label %yield, label %poll",
        "yield:",
        "  %y = call i32 @sched_yield()",
        "  br label %poll",
        "arrived:",
        "  %i1 = add i64 %i, 1",
        "  br label %collect",
        "release:",
        "  store atomic i32 0, ptr %pool release, align 4",
        "  br label %exit",
        "exit:",
        "  ret void",
        "}",
        "",
    ]
    # ---- trampolines: argv[0](argv[1], ..., argv[n]) ---------------------------------------
    for n in range(1, MAX_ARRAYS + 1):
        lines += [f"define void @{sym}_call{n}(ptr %argv) {{",
                  "entry:",
                  "  %f = load ptr, ptr %argv, align 8"]
        for k in range(1, n + 1):
            lines += [f"  %g{k} = getelementptr inbounds ptr, ptr %argv, i64 {k}",
                      f"  %p{k} = load ptr, ptr %g{k}, align 8"]
        args = ", ".join(f"ptr %p{k}" for k in range(1, n + 1))
        lines += [f"  call void %f({args})", "  ret void", "}", ""]
    # ---- the entry: (header, part 0's arrays, part 1's arrays, ...) ------------------------
    from kiln.core.backends.cpu.codegen.llvm_loop import DATA_OFFSET

    lines += [
        f"define ptr @{sym}_py(ptr %self, ptr %args, i64 %nargs) {{",
        "entry:",
        "  %h = load ptr, ptr %args, align 8",
        f"  %hf = getelementptr inbounds i8, ptr %h, i64 {DATA_OFFSET}",
        "  %hd = load ptr, ptr %hf, align 8",
        "  %pool = load ptr, ptr %hd, align 8",
        "  %gp = getelementptr inbounds i64, ptr %hd, i64 1",
        "  %parts = load i64, ptr %gp, align 8",
        "  %gt = getelementptr inbounds i64, ptr %hd, i64 2",
        "  %tramp = load ptr, ptr %gt, align 8",
        "  %gk = getelementptr inbounds i64, ptr %hd, i64 3",
        "  %kern = load ptr, ptr %gk, align 8",
        "  %gn = getelementptr inbounds i64, ptr %hd, i64 4",
        "  %narr = load i64, ptr %gn, align 8",
        "  %total = mul i64 %parts, %narr",
        "  %want = add i64 %total, 1",
        "  %ok = icmp eq i64 %nargs, %want",
        "  %okp = icmp ugt i64 %parts, 0",
        "  %ok2 = and i1 %ok, %okp",
        "  br i1 %ok2, label %go, label %bad",
        "go:",
        "  %width = add i64 %narr, 1",
        "  %cells = mul i64 %parts, %width",
        "  %argv = alloca ptr, i64 %cells, align 8",
        "  %argvs = alloca ptr, i64 %parts, align 8",
        "  br label %part",
        "part:",
        "  %k = phi i64 [ 0, %go ], [ %k1, %partend ]",
        "  %base = mul i64 %k, %width",
        "  %row = getelementptr inbounds ptr, ptr %argv, i64 %base",
        "  store ptr %kern, ptr %row, align 8",
        "  %slotk = getelementptr inbounds ptr, ptr %argvs, i64 %k",
        "  store ptr %row, ptr %slotk, align 8",
        "  br label %arr",
        "arr:",
        "  %j = phi i64 [ 0, %part ], [ %j1, %arr ]",
        "  %src0 = mul i64 %k, %narr",
        "  %src1 = add i64 %src0, %j",
        "  %src = add i64 %src1, 1",
        "  %go_ = getelementptr inbounds ptr, ptr %args, i64 %src",
        "  %obj = load ptr, ptr %go_, align 8",
        f"  %fd = getelementptr inbounds i8, ptr %obj, i64 {DATA_OFFSET}",
        "  %data = load ptr, ptr %fd, align 8",
        "  %dst0 = add i64 %j, 1",
        "  %dst = getelementptr inbounds ptr, ptr %row, i64 %dst0",
        "  store ptr %data, ptr %dst, align 8",
        "  %j1 = add i64 %j, 1",
        "  %jdone = icmp eq i64 %j1, %narr",
        "  br i1 %jdone, label %partend, label %arr",
        "partend:",
        "  %k1 = add i64 %k, 1",
        "  %kdone = icmp eq i64 %k1, %parts",
        "  br i1 %kdone, label %call, label %part",
        "call:",
        "  %ts = call ptr @PyEval_SaveThread()",
        f"  call void @{sym}_run(ptr %pool, i64 %parts, ptr %tramp, ptr %argvs)",
        *entry_end_ir(sym),
    ]
    return "\n".join(lines) + "\n"


def entry_end_ir(sym: str) -> list[str]:
    """The end of a ``_py`` entry that released the GIL into ``%ts``: the GIL taken back and
    None returned; at ``bad:``, TypeError with the message ``@<sym>_msg``."""
    return ["  call void @PyEval_RestoreThread(ptr %ts)",
            "  call void @Py_IncRef(ptr @kiln_py_none)",
            "  ret ptr @kiln_py_none",
            "bad:",
            f"  call void @PyErr_SetString(ptr @kiln_py_type_error, ptr @{sym}_msg)",
            "  ret ptr null",
            "}"]


class SpinPool:
    """The workers and their slots: the pool's first cache line (its lock and park words),
    then one line per worker. Started on the first split call of this process, again in a
    forked child (``generation`` counts the forks: a plan step's header from before one is
    made again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.module: dict[str, Any] | None = None  # the entry and the functions' addresses
        self.loaded = False  # the module was tried (None after that: the Python pool)
        self.memory: np.ndarray | None = None
        self._park: ctypes.c_int32 | None = None
        self.workers: list[tuple[int, frozenset[int]]] = []  # (native id, CPUs at start)
        self.placed_for = -1
        self.count = 0  # workers running
        self.generation = 0
        self.spin = SPIN_CYCLES  # the workers' spin after a part (place() sets it)

    def after_fork(self) -> None:
        """In a forked child: no worker survived. The slots are cleared (the parent's may
        show a part in flight or the pool taken) and the workers start again on the next
        split call; plan steps make their headers again (``generation``)."""
        self._lock = threading.Lock()
        self.generation += 1
        self.count = 0
        self.workers = []
        self.placed_for = -1
        if self.memory is not None:
            self.memory[:16] = 0  # lock, park
            for k in range(1, self.memory.size // SLOT):
                self.memory[k * SLOT:k * SLOT + 16] = 0  # seq, done, sleeping

    def _load(self) -> dict[str, Any] | None:
        from kiln.core.backends.cpu.codegen import native

        if not native.enabled():
            return None
        try:
            k = native.kernel(f"spin_pool v5 spin{SPIN_CYCLES} poll{POLL_PAUSES} "
                              f"arrays{MAX_ARRAYS}", [], _ir)
            entry = k.compile(())
            engine = native._state["engine"]
            addr = {n: engine.get_function_address(f"{k.name}_{n}")
                    for n in ["worker", "run"] + [f"call{i}" for i in range(1, MAX_ARRAYS + 1)]}
        except (CodegenError, RuntimeError, OSError) as exc:  # LLVM's errors: RuntimeError
            warnings.warn(f"kiln: the spin pool did not build ({exc}); native kernels' split "
                          "calls run on the Python pool (slower, the same results)",
                          RuntimeWarning, stacklevel=2)
            return None
        if not all(addr.values()):
            warnings.warn("kiln: the spin pool's functions were not found after loading; "
                          "native kernels' split calls run on the Python pool",
                          RuntimeWarning, stacklevel=2)
            return None
        return {"entry": entry, "addr": addr,
                "worker": ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr["worker"])}

    def ready(self, parts: int) -> bool:
        """Whether at least ``parts - 1`` workers run (started here where they do not) and
        the module is loaded."""
        if self.count >= parts - 1 and self.module is not None:
            return True
        with self._lock:
            if not self.loaded:
                self.module = self._load()
                self.loaded = True
            if self.module is None:
                return False
            if self.memory is None:
                # every slot at once (a few KB): its workers start as calls need them
                lines = max(parts - 1, cpus.kernel_threads() - 1, MAX_WORKERS) + 1
                raw = np.zeros(SLOT * (lines + 1), np.uint8)
                skip = (-raw.ctypes.data) % SLOT
                self.memory = raw[skip:skip + SLOT * lines]
                base = self.memory.ctypes.data
                for k in range(1, lines):
                    self.memory[k * SLOT + _SPIN:k * SLOT + _SPIN + 8].view(np.int64)[0] = (
                        SPIN_CYCLES)
                    self.memory[k * SLOT + _POOL:k * SLOT + _POOL + 8].view(np.int64)[0] = base
                self._park = ctypes.c_int32.from_address(base + PARK_OFFSET)
            if parts - 1 > self.memory.size // SLOT - 1:
                return False  # more parts than slots: those calls stay on the Python pool
            while self.count < parts - 1:
                if not self._start(self.memory.ctypes.data + SLOT * (self.count + 1)):
                    return False
                self.count += 1
            self.placed_for = -1
        return True

    def _start(self, slot: int) -> bool:
        """Starts the worker of ``slot`` (a daemon thread that enters the native loop through
        ctypes, which releases the GIL, and never comes back)."""
        assert self.module is not None  # ready() loads the module before starting workers
        worker = self.module["worker"]
        started = threading.Event()
        found: list[tuple[int, frozenset[int]]] = []

        def life() -> None:
            try:
                allowed = frozenset(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                allowed = frozenset()
            found.append((threading.get_native_id(), allowed))
            started.set()
            worker(slot)

        t = threading.Thread(target=life, daemon=True, name=f"kiln-spin-{self.count}")
        try:
            t.start()
        except RuntimeError:  # no thread can start (interpreter shutting down, limits)
            return False
        started.wait()
        if len(found[0][1]) > 1:
            self.workers.append(found[0])
        return True

    def header(self, parts: int, kernel: int, arrays: int) -> tuple | None:
        """``(entry, header)`` to run a native kernel (function address ``kernel``, taking
        ``arrays`` pointers) in ``parts`` parts, the first on the caller: ``entry(header,
        *part0, *part1, ...)``; None where this pool cannot (off, not loaded, too many parts
        or arrays: the Python pool runs them)."""
        if (not ENABLED or not 1 <= arrays <= MAX_ARRAYS or parts < 2
                or not self.ready(parts)):
            return None
        # workers run (ready()), so the module and the shared memory are loaded
        assert self.module is not None and self.memory is not None
        addr = self.module["addr"]
        return self.module["entry"], np.array(
            [self.memory.ctypes.data, parts, addr[f"call{arrays}"], kernel, arrays], np.int64)

    def addresses(self, parts: int) -> dict[str, int] | None:
        """The pool's memory (``"pool"``) and its functions' addresses (``"run"``: the
        dispatcher; ``"call<n>"``: the trampolines) with the workers of ``parts`` parts
        running, for :mod:`.native_plan`; None where this pool cannot run them."""
        if not ENABLED or not self.ready(max(parts, 1)):
            return None
        assert self.module is not None and self.memory is not None
        return {"pool": self.memory.ctypes.data, **self.module["addr"]}

    def park(self) -> None:
        """Sends spinning workers to sleep: a BLAS call follows, whose own threads would
        share the cores with them (the next split call wakes them)."""
        park = self._park
        if park is not None:
            park.value = 1

    def place(self) -> None:
        """Moves the workers off the calling thread's CPU where it changed since the last
        call (as ``threads.KernelPool`` does its own); sets their spin after a part to
        :data:`SPIN_CYCLES`, or none where :func:`cpus.plan` says the CPUs are not all free
        (a worker then sleeps in futex as soon as its part is done)."""
        spin = SPIN_CYCLES if cpus.plan().spin else 0
        if spin != self.spin and self.memory is not None:
            self.spin = spin
            for k in range(1, self.memory.size // SLOT):
                self.memory[k * SLOT + _SPIN:k * SLOT + _SPIN + 8].view(np.int64)[0] = spin
        cpu = cpus.current_cpu()
        if cpu >= 0 and cpu != self.placed_for:
            self.placed_for = cpu
            cpus.move_off(self.workers, cpu)


POOL = SpinPool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=POOL.after_fork)


def kernel_of(entry: Any) -> tuple[int, int] | None:
    """``(address, arrays)`` of the kernel function behind a native kernel's entry point (its
    ``_py`` builtin) and how many arrays it takes, or None where ``entry`` is not one, or is
    one whose kernel returns a status (an index out of range: only its entry point raises
    the error; the trampolines here would drop it)."""
    from kiln.core.backends.cpu.codegen import native

    name = getattr(entry, "__name__", None)
    if name is None or native._loaded.get(name) is not entry:
        return None
    for k in list(native._kernels.values()):
        if k.name == name:
            engine = native._state.get("engine")
            if engine is None or engine.get_global_value_address(f"{name}_fails"):
                return None  # (the mark of llvm_loop.wrapper's kernels with a status)
            addr = engine.get_function_address(name)
            return (addr, len(k.dtypes)) if addr else None
    return None
