"""The spin pool (kiln/core/backends/cpu/runtime/spin_pool.py): native kernels' split calls on
workers that wait in native code. Oracles: the float64 product, the same kernel's parts run one
after the other (the same bits), and specific errors."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from cpu_targets import set_cpu
from in_threads import run_in_threads

from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import native_matmul
from kiln.core.backends.cpu.runtime import spin_pool, threads

pytestmark = pytest.mark.skipif(not (native.enabled() and spin_pool.ENABLED),
                                reason="needs the native path and the spin workers (Linux "
                                       "x86-64, KILN_SPIN_POOL not 0)")


def _product(m: int = 256, k: int = 96, n: int = 256, seed: int = 0):
    """A split Dense product step (``native_matmul.add``): (SplitCall, args, a, b, out)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    step = native_matmul._Step()
    assert native_matmul.add(step, a, b, out)
    fn, args = step.fn, step.args
    assert isinstance(fn, threads.SplitCall) and fn.parts >= 2
    return fn, args, a, b, out


def _serial(fn: threads.SplitCall, args: tuple) -> None:
    """The step's parts one after the other on the caller: the reference bits."""
    for k in range(fn.parts):
        fn.entry(*fn.change(args, k))


@pytest.fixture(autouse=True)
def _two_threads(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    # the split kernel here is kiln's Dense product, AVX-512's choice (target.py): chosen on
    # any x86 host for these tests (its 16-lane code runs on AVX2 too)
    set_cpu(monkeypatch, avx512=True)


def test_split_call_runs_on_the_spin_pool_with_the_serial_bits():
    fn, args, a, b, out = _product()
    fn(*args)
    assert fn._native is not None, "a native kernel's split call should bind the spin pool"
    assert spin_pool.POOL.count >= 1
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    got = out.copy()
    out[:] = np.nan
    _serial(fn, args)
    np.testing.assert_array_equal(got, out)


def test_many_calls_and_new_inputs_between_them():
    fn, args, a, b, out = _product(m=384, k=200, n=512, seed=1)
    rng = np.random.default_rng(2)
    for _ in range(50):
        a[:] = rng.standard_normal(a.shape).astype(np.float32)
        fn(*args)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=2e-4)


def test_parked_and_sleeping_workers_are_woken():
    """A BLAS call parks the workers (they sleep in futex at once); a worker whose spin has
    run out sleeps too: the next split call wakes them, and nothing is lost."""
    fn, args, a, b, out = _product(seed=3)
    fn(*args)
    mem = spin_pool.POOL.memory
    spins = [mem[k * spin_pool.SLOT + spin_pool._SPIN:][:8].view(np.int64)
             for k in range(1, spin_pool.POOL.count + 1)]
    saved = [int(s[0]) for s in spins]
    ref = a.astype(np.float64) @ b
    bad: list[int] = []

    def calls() -> None:
        for i in range(200):
            if i % 3 == 0:
                spin_pool.POOL.park()
            out[:] = np.nan
            fn(*args)
            if not np.allclose(out, ref, rtol=1e-4, atol=1e-4):
                bad.append(i)

    try:
        for s in spins:
            s[0] = 0  # no spin: every part after the first finds the worker asleep
        t = threading.Thread(target=calls, daemon=True)
        t.start()
        t.join(60)
        assert not t.is_alive(), "a split call waited for a worker that was never woken"
        assert not bad, f"wrong results at calls {bad[:5]}"
    finally:
        for s, v in zip(spins, saved):
            s[0] = v


def test_concurrent_callers_get_their_own_results():
    """Threads splitting their own products at once: one takes the pool, the others run
    their parts themselves; every result is the serial one."""
    steps = [_product(m=256, k=64 + 16 * t, n=256, seed=10 + t) for t in range(4)]
    refs = []
    for fn, args, _, _, out in steps:
        _serial(fn, args)
        refs.append(out.copy())
    errors: list[str] = []

    def work(t: int) -> None:
        fn, args, a, b, out = steps[t]
        for i in range(100):
            out[:] = np.nan
            fn(*args)
            if not np.array_equal(out, refs[t]):
                errors.append(f"thread {t}, call {i}")
                return

    run_in_threads(work)
    assert not errors, errors


def _in_child(check, timeout: float, hung: str) -> None:
    """Runs ``check()`` (True: passed) in a forked child; fails where it returns False,
    raises, or takes over ``timeout`` seconds (the child is then killed, so that the test
    fails instead of waiting on it)."""
    import select
    import signal

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if check() else 2
        finally:
            os.write(w, bytes([code]))
            os._exit(code)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        assert ready, hung
        assert os.read(r, 1) == b"\x00", "the child's result was wrong"
    finally:
        os.close(r)
        os.waitpid(pid, 0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_forked_child_starts_its_own_workers():
    fn, args, a, b, out = _product(seed=4)
    fn(*args)  # the parent's workers run
    generation = spin_pool.POOL.generation
    ref = a.astype(np.float64) @ b

    def child() -> bool:  # no worker survived the fork
        fresh = spin_pool.POOL.generation == generation + 1 and spin_pool.POOL.count == 0
        out[:] = np.nan
        fn(*args)
        return fresh and spin_pool.POOL.count >= 1 and np.allclose(out, ref, rtol=1e-4,
                                                                   atol=1e-4)

    _in_child(child, 60, "the forked child's split call hung")
    out[:] = np.nan
    fn(*args)  # the parent's pool still works
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_part_published_before_a_new_worker_runs_is_not_lost():
    # a forked child's first split call starts a worker and publishes its part at once,
    # often before the new thread first reads its slot: it must still run that part
    fn, args, a, b, out = _product(seed=6)
    fn(*args)
    ref = a.astype(np.float64) @ b

    def child() -> bool:
        out[:] = np.nan
        fn(*args)
        return np.allclose(out, ref, rtol=1e-4, atol=1e-4)

    for _ in range(20):
        _in_child(child, 30, "a new worker missed the part published before it ran")


def test_a_worker_runs_a_part_published_before_it_started():
    # the race itself, made certain: part 1 is published in a fresh slot before its worker
    # thread exists; the worker must take it (it starts from ``done``, not from the sequence)
    import ctypes
    import time

    fn, args, a, b, out = _product(seed=7)
    fn(*args)  # the module loaded
    module = spin_pool.POOL.module
    addr, n = spin_pool.kernel_of(fn.entry)
    part = fn.change(args, 1)
    raw = np.zeros(3 * spin_pool.SLOT, np.uint8)
    slot = raw.ctypes.data + (-raw.ctypes.data) % spin_pool.SLOT
    argv = (ctypes.c_void_p * (n + 1))(addr, *[x.ctypes.data for x in part])
    fields = ctypes.c_int32 * 3  # seq, done, sleeping
    c_int64 = ctypes.c_int64
    c_int64.from_address(slot + spin_pool._FN).value = module["addr"][f"call{n}"]
    c_int64.from_address(slot + spin_pool._ARG).value = ctypes.addressof(argv)
    c_int64.from_address(slot + spin_pool._SPIN).value = 1 << 16
    c_int64.from_address(slot + spin_pool._POOL).value = slot  # its park word: 0
    state = fields.from_address(slot)
    out[:] = np.nan
    state[0] = 1  # published: sequence 1, done 0
    threading.Thread(target=module["worker"], args=(slot,), daemon=True).start()
    deadline = time.monotonic() + 30
    while state[1] != 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert state[1] == 1, "the worker never ran the part published before it started"
    assert fn.entry is not None and native_matmul._ranges(*a.shape, b.shape[1])[0]
    cols = slice(*[int(v) for v in part[-1][-2:]])  # the part's column range
    assert cols.start > 0
    np.testing.assert_allclose(out[:, cols], (a.astype(np.float64) @ b)[:, cols], rtol=1e-4,
                               atol=1e-4)
    keep = (raw, argv)  # the worker keeps reading its slot: never freed while it may run
    _LEAKED.append(keep)


_LEAKED: list = []


def test_entry_checks_its_argument_count():
    fn, args, a, b, out = _product(seed=5)
    fn(*args)
    entry, header = fn._native[:2]
    parts = [fn.change(args, k) for k in range(fn.parts)]
    flat = [x for p in parts for x in p]
    with pytest.raises(TypeError, match="spin pool: wrong number of arrays"):
        entry(header, *flat[:-1])


def test_python_entries_stay_on_the_python_pool():
    seen = []

    def part(k: int) -> None:
        seen.append(k)

    call = threads.SplitCall(part, 2, lambda a, k: (k,))
    call()
    assert sorted(seen) == [0, 1] and call._native is None
    assert spin_pool.kernel_of(part) is None
    assert spin_pool.kernel_of(np.add) is None


def test_a_waiting_worker_never_yields_its_core():
    # a sched_yield hands the core to any runnable task, a `nice 19` job's included (a whole
    # slice of Linux's EEVDF, ~1-3 ms): beside two niced jobs LeNet-5 trained at 8,458
    # samples/s against 30,348 alone (spin_pool.SPIN_CYCLES' comment). A worker pauses, then
    # sleeps in futex; only a caller waiting past POLL_PAUSES pauses yields.
    ir = spin_pool._ir("k")
    worker = ir[ir.index("define void @k_worker"):ir.index("define void @k_run")]
    caller = ir[ir.index("define void @k_run"):ir.index("define void @k_call1")]
    assert "sched_yield" not in worker and "llvm.x86.sse2.pause" in worker
    assert "syscall(i64 202" in worker  # futex wait after the spin
    assert f"icmp ugt i64 %n1, {spin_pool.POLL_PAUSES}" in caller
    assert spin_pool.POLL_PAUSES >= 1 << 16


def _argv_rows(fn: threads.SplitCall, args: tuple, module: dict):
    """The ctypes argument rows of the step's parts for the dispatcher (kernel address, then
    the part's arrays' data pointers) and the trampoline for their count."""
    import ctypes

    addr, n = spin_pool.kernel_of(fn.entry)
    rows = [(ctypes.c_void_p * (n + 1))(addr, *[x.ctypes.data for x in fn.change(args, k)])
            for k in range(fn.parts)]
    argvs = (ctypes.c_void_p * len(rows))(*[ctypes.addressof(r) for r in rows])
    return rows, argvs, module["addr"][f"call{n}"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_parts_no_worker_claims_run_on_the_caller():
    # a worker that does not get a core (another process's threads hold them) must not hold
    # up the call: the caller runs every part no worker claimed. Here a pool's memory with
    # no worker at all: the dispatcher runs every part itself, instead of waiting forever
    import ctypes

    fn, args, a, b, out = _product(seed=8)
    fn(*args)
    _serial(fn, args)
    ref = out.copy()
    module = spin_pool.POOL.module
    lines = fn.parts + 1
    raw = np.zeros((lines + 1) * spin_pool.SLOT, np.uint8)
    pool = raw.ctypes.data + (-raw.ctypes.data) % spin_pool.SLOT
    rows, argvs, tramp = _argv_rows(fn, args, module)
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                           ctypes.c_void_p)(module["addr"]["run"])
    fields = ctypes.c_int32 * 4  # seq, done, sleeping, taken

    def child() -> bool:
        out[:] = np.nan
        run(pool, fn.parts, tramp, argvs)
        slots = [list(fields.from_address(pool + k * spin_pool.SLOT))
                 for k in range(1, fn.parts)]
        return np.array_equal(out, ref) and all(s == [1, 1, 0, 1] for s in slots)

    assert fn.parts >= 2
    _in_child(child, 30, "a split call waited for a worker that never came")


def test_a_worker_skips_a_part_the_caller_took_and_runs_the_next():
    # the caller took part 1 (``taken`` is its number): the worker must not run it again,
    # and must still run the part published after it
    import ctypes
    import time

    fn, args, a, b, out = _product(seed=9)
    fn(*args)
    module = spin_pool.POOL.module
    rows, argvs, tramp = _argv_rows(fn, args, module)
    raw = np.zeros(3 * spin_pool.SLOT, np.uint8)
    slot = raw.ctypes.data + (-raw.ctypes.data) % spin_pool.SLOT
    c_int64 = ctypes.c_int64
    c_int64.from_address(slot + spin_pool._FN).value = tramp
    c_int64.from_address(slot + spin_pool._ARG).value = ctypes.addressof(rows[1])
    c_int64.from_address(slot + spin_pool._SPIN).value = 1 << 16
    c_int64.from_address(slot + spin_pool._POOL).value = slot
    state = (ctypes.c_int32 * 4).from_address(slot)  # seq, done, sleeping, taken
    cols = slice(*[int(v) for v in fn.change(args, 1)[-1][-2:]])
    out[:] = np.nan
    state[3] = 1  # taken by the caller ...
    state[0] = 1  # ... as part 1 was published
    threading.Thread(target=module["worker"], args=(slot,), daemon=True).start()
    _LEAKED.append((raw, rows, argvs))
    time.sleep(0.05)
    assert np.isnan(out[:, cols]).all() and state[1] == 0, "the worker ran a taken part"
    state[0] = 2  # the next part: untaken (``taken`` is its predecessor); the worker may
    # sleep by now: woken as the dispatcher does (futex wake, x86-64 Linux's number 202)
    ctypes.CDLL(None).syscall(202, ctypes.c_void_p(slot), 129, 1)
    deadline = time.monotonic() + 30
    while state[1] != 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert state[1] == 2 and state[3] == 2, "the worker missed the part after a taken one"
    np.testing.assert_allclose(out[:, cols], (a.astype(np.float64) @ b)[:, cols], rtol=1e-4,
                               atol=1e-4)
