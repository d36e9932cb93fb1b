"""Large loops run on kiln's kernel threads: the serial kernel on parts of its outer loop
(threads.SplitCall, docs/architecture.md "Threads"). Oracle: NumPy, and the same program run
unsplit; every split (2, 3 and 7 parts, more parts than rows) must give the same bits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from in_threads import run_in_threads

import kiln
import kiln.ops as K
from kiln.core.backends.cpu.runtime import threads


def _plan_steps(f):
    plan = next(iter(f.program._plans.values()))
    return plan.steps


@pytest.fixture
def split_all(monkeypatch, cpu_options):
    cpu_options(parallel_min_bytes=0)
    cpu_options(serial_work=0)  # small kernels split too
    cpu_options(winograd_min_outputs=0)

    def with_threads(n):
        monkeypatch.setenv("KILN_NUM_THREADS", str(n))
    return with_threads


def _momentum(backend):
    # a fused multi-output group (v, then p + v: a side output) in place on Variables, a
    # broadcast row, a transposed (strided) read
    rng = np.random.default_rng(0)
    x = kiln.placeholder((50, 37))
    p = kiln.Variable(rng.normal(size=(13, 37)).astype("float32"))
    v = kiln.Variable(np.zeros((13, 37), "float32"))
    row = kiln.Variable(rng.normal(size=(37,)).astype("float32"))
    nv = 0.9 * v - 0.1 * K.tanh(x[:13] * row)
    out = K.relu(x * 2.0 - 1.0)[:37] + K.transpose(x[:37, :37] * 0.5)
    f = kiln.function([x], out, updates=[(v, nv), (p, p + nv)], backend=backend)
    return f, (p, v)


@pytest.mark.parametrize("n", [2, 3, 7, 64])
def test_split_loops_give_the_unsplit_bits(split_all, n):
    xv = np.random.default_rng(1).normal(size=(50, 37)).astype("float32")
    runs = {}
    for parts in (1, n):
        split_all(parts)
        f, (p, v) = _momentum("cpu")
        outs = [f(xv) for _ in range(3)]
        runs[parts] = (outs, p.numpy(), v.numpy())
        kinds = {type(s.fn).__name__ for s in _plan_steps(f)}
        if kiln.config.jit_enabled():
            assert ("SplitCall" in kinds) == (parts > 1), kinds
    for a, b in zip(runs[1][0], runs[n][0]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(runs[1][1], runs[n][1])
    np.testing.assert_array_equal(runs[1][2], runs[n][2])
    # and the numbers are right
    f, (p, v) = _momentum("reference")
    for _ in range(3):
        ref = f(xv)
    np.testing.assert_allclose(runs[n][0][-1], ref, rtol=1e-6)
    np.testing.assert_allclose(runs[n][1], p.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, expr", [
    ((3, 5, 7), lambda x: K.exp(x) * 2.0),                       # rank 3, odd sizes
    ((1, 1, 9), lambda x: x + 1.0),                              # padded outer loops
    ((6, 4), lambda x: K.transpose(x) * 3.0),                    # strided input
    ((5, 1, 8), lambda x: x * K.ones((5, 3, 8))),                # broadcast along a middle dim
    ((11,), lambda x: K.sigmoid(x)),                             # one loop: split the inner
])
def test_split_loops_match_numpy(split_all, shape, expr):
    split_all(3)
    x = kiln.placeholder(shape)
    f = kiln.function([x], expr(x), backend="cpu")
    r = kiln.function([x], expr(x), backend="reference")
    xv = np.random.default_rng(2).normal(size=shape).astype("float32")
    np.testing.assert_allclose(f(xv), r(xv), rtol=1e-6, atol=1e-7)


def test_parts_cover_the_range_once():
    for n in (1, 2, 5, 17):
        for parts in (1, 2, 3, 8):
            got = threads.chunks(n, parts)
            assert got[0][0] == 0 and got[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(got, got[1:]))
            assert len(got) == min(parts, n)
            sizes = [hi - lo for lo, hi in got]
            assert max(sizes) - min(sizes) <= 1


def test_the_pool_raises_the_error_of_any_part():
    seen = []

    def part(k):
        seen.append(k)
        if k == 2:
            raise ZeroDivisionError(f"part {k}")

    with pytest.raises(ZeroDivisionError, match="part 2"):
        threads.POOL.run([(part, (k,)) for k in range(4)])
    assert sorted(seen) == [0, 1, 2, 3]  # every part ran before the call returned
    threads.POOL.run([(part, (0,)), (part, (1,))])  # the pool still works


def test_concurrent_split_calls_each_get_all_their_parts():
    out = np.zeros((8, 1000))

    def fill(row, value):
        out[row] = value

    def caller(t):
        for rep in range(50):
            threads.POOL.run([(fill, (2 * t + k % 2, rep + t)) for k in range(2)])

    run_in_threads(caller)
    np.testing.assert_array_equal(out[:, 0], [49, 49, 50, 50, 51, 51, 52, 52])


def test_bad_thread_count_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "two")
    if not kiln.config.jit_enabled():
        pytest.skip("the count is read only when kernels are compiled")
    with pytest.raises(ValueError, match="KILN_NUM_THREADS must be a positive integer, got 'two'"):
        threads.kernel_threads()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_threads():
    code = textwrap.dedent("""
        import os
        from kiln.core.backends.cpu.runtime import threads
        hits = []
        threads.POOL.run([(hits.append, (k,)) for k in range(3)])
        pid = os.fork()
        if pid == 0:
            got = []
            threads.POOL.run([(got.append, (k,)) for k in range(3)])
            os._exit(0 if sorted(got) == [0, 1, 2] else 3)
        _, status = os.waitpid(pid, 0)
        print(sorted(hits), os.waitstatus_to_exitcode(status))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.split("\n")[0] == "[0, 1, 2] 0", proc.stderr[-2000:]


@pytest.mark.parametrize("ci, co, k, groups, stride, padding, winograd", [
    (1, 8, 3, 1, 1, "valid", "0"),     # direct (9 taps)
    (4, 16, 3, 1, 2, "same", "0"),     # tile forward, GEMM gradients
    (8, 64, 3, 1, 1, "same", "0"),     # tile forward and tile kernel gradient (64 channels)
    (6, 72, 2, 1, 1, "valid", "0"),    # GEMM forward (72 channels)
    (4, 8, 3, 2, 1, "same", "0"),      # grouped
    (16, 4, 3, 1, 1, "same", "0"),     # the input gradient as a forward convolution
    (32, 1, 3, 1, 1, "valid", "0"),
    (8, 64, 3, 1, 1, "same", "4"),     # Winograd F(4x4, 3x3): transforms split per image
    (16, 16, 4, 1, 2, "same", "4"),    # Winograd, stride 2: four phases
])
def test_convolutions_and_pools_with_split_loops_match_the_reference(
        split_all, ci, co, k, groups, stride, padding, winograd, monkeypatch, cpu_options):
    cpu_options(winograd_m=int(winograd))  # "0": the kernels named above
    rng = np.random.default_rng(3)
    xv = rng.normal(size=(5, 9, 8, ci)).astype("float32")  # batch 5: parts of 2, 2, 1
    wv = (rng.normal(size=(k, k, ci // groups, co)) / k).astype("float32")
    results = {}
    # conv._call splits the images over the threads (8: more parts than images); a kernel
    # gradient sums one buffer per part (conv._call_summed)
    for backend, parts in (("reference", 1), ("cpu", 1), ("cpu", 3), ("cpu", 8)):
        split_all(parts)
        x = kiln.placeholder(xv.shape)
        w = kiln.Variable(wv)
        h = K.conv2d(x, w, strides=stride, padding=padding, groups=groups)
        y = K.max_pool2d(K.relu(h), 2, padding="same") + 0.5 * K.avg_pool2d(h, 2, padding="same")
        loss = K.sum(y * y)
        f = kiln.function([x], [y, *kiln.grad(loss, [x, w])], backend=backend)
        results[(backend, parts)] = f(xv)
        if backend == "cpu":
            plan = next(iter(f.program._plans.values()))
            labels = " ".join(getattr(s, "label", "") for s in plan.steps)
            assert ("winograd" in labels) == (winograd != "0")
    for parts in (1, 3, 8):
        for a, b in zip(results[("cpu", parts)], results[("reference", 1)]):
            # F(4x4, 3x3) rounds to ~1e-6 of the output's scale (docs/architecture.md)
            scale = np.abs(b).max() if winograd != "0" else 1.0
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * scale)
        # forward and input gradient: each image on its own, the same bits split or not
        for a, b in zip(results[("cpu", parts)][:2], results[("cpu", 1)][:2]):
            np.testing.assert_array_equal(a, b)


BOUNDS = textwrap.dedent("""
    import numpy as np
    import kiln, kiln.ops as K
    x = kiln.placeholder((3, 7, 5, 2))
    y = K.max_pool2d(x, 2, padding="same")   # 4 x 3 windows: the last row and column overrun
    f = kiln.function([x], kiln.grad(K.sum(y * y), [x]), backend="cpu")
    xv = np.random.default_rng(0).normal(size=(3, 7, 5, 2)).astype("float32")
    r = kiln.function([x], kiln.grad(K.sum(y * y), [x]), backend="reference")
    np.testing.assert_allclose(f(xv)[0], r(xv)[0], rtol=1e-6)
    print("ok")
""")


def test_max_pool_gradient_stays_inside_its_arrays(tmp_path):
    # regression: with "same" padding, windows that tile the input but overrun its end made
    # the tiled gradient loop read and write past the arrays (numba does not check bounds
    # by default: heap corruption, then an abort). NUMBA_BOUNDSCHECK=1 turns that into an
    # IndexError.
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", KILN_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", BOUNDS], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split() == ["ok"], proc.stderr[-3000:]


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_an_interrupted_caller_returns_only_once_every_part_is_done():
    # Ctrl-C while the caller waits for a part: the part still running after the call
    # returned could write into the buffers of the next call, so the caller waits for it,
    # then raises the KeyboardInterrupt
    import time

    started, finished = threading.Event(), []

    def mine(k):
        started.wait(5)

    def slow(k):
        started.set()
        time.sleep(0.4)
        finished.append(k)

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.15)
        with pytest.raises(KeyboardInterrupt):
            threads.POOL.run([(mine, (0,)), (slow, (1,))])
        assert finished == [1]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _on_worker(pool, fn):
    """Runs ``fn()`` on ``pool``'s worker (the caller's own part waits for it, so the caller
    does not take the queued part itself); returns its result."""
    ran, out = threading.Event(), []

    def part():
        out.append(fn())
        ran.set()

    pool.run([(ran.wait, (10,)), (part, ())])
    assert ran.is_set()
    return out[0]


_ALLOWED = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()


@pytest.mark.skipif(len(_ALLOWED) < 2 or threads.current_cpu() < 0,
                    reason="needs two CPUs and sched_getcpu")
def test_a_worker_on_its_callers_cpu_moves_off_it():
    # after the machine idles, a guest kernel may wake a worker on its caller's CPU, and the
    # parts then take turns on it (threads.KernelPool): the worker moves off that CPU. A pool
    # of its own: one worker, started with this process's CPUs
    pool = threads.KernelPool()
    _on_worker(pool, lambda: None)  # starts the worker (it inherits this thread's CPUs)
    first, second = sorted(_ALLOWED)[:2]
    try:
        os.sched_setaffinity(0, {first})
        _on_worker(pool, lambda: os.sched_setaffinity(0, {first}))  # both on one CPU
        cpu = _on_worker(pool, threads.current_cpu)
        assert cpu != first and cpu in _ALLOWED
        assert _on_worker(pool, lambda: os.sched_getaffinity(0)) == _ALLOWED - {first}
        # a worker on another CPU than its caller's stays where it is
        _on_worker(pool, lambda: os.sched_setaffinity(0, {second}))
        assert _on_worker(pool, threads.current_cpu) == second
        assert _on_worker(pool, lambda: os.sched_getaffinity(0)) == {second}
        assert len(pool._threads) == 1
    finally:
        os.sched_setaffinity(0, _ALLOWED)


@pytest.mark.skipif(len(_ALLOWED) < 2 or threads.current_cpu() < 0,
                    reason="needs two CPUs and sched_getcpu")
def test_the_caller_moves_the_workers_off_its_cpu_before_handing_parts_out(monkeypatch):
    # a sleeping worker woken on its caller's CPU would wait there while the caller runs its
    # own part: the caller narrows the workers' CPUs first, once per CPU it runs on
    pool = threads.KernelPool()
    tid = _on_worker(pool, threading.get_native_id)
    assert [w[0] for w in pool.workers] == [tid]
    moves = []
    real = threads.move_off
    monkeypatch.setattr(threads, "move_off", lambda ws, cpu: moves.append(cpu) or real(ws, cpu))
    pool.placed_for = -1
    first, second = sorted(_ALLOWED)[:2]
    try:
        for cpu in (first, first, second, second, first):
            os.sched_setaffinity(0, {cpu})
            _on_worker(pool, lambda: None)
            assert os.sched_getaffinity(tid) == _ALLOWED - {cpu}
        assert moves == [first, second, first]  # only when the caller's CPU changed
    finally:
        os.sched_setaffinity(0, _ALLOWED)


def test_move_off_narrows_a_threads_cpus_and_reports_a_gone_one():
    ready, stop = threading.Event(), threading.Event()
    tids = []

    def sleeper():
        tids.append(threading.get_native_id())
        ready.set()
        stop.wait()

    t = threading.Thread(target=sleeper)
    t.start()
    ready.wait()
    try:
        if len(_ALLOWED) >= 2:
            cpu = min(_ALLOWED)
            assert threads.move_off([(tids[0], frozenset(_ALLOWED))], cpu)
            assert os.sched_getaffinity(tids[0]) == _ALLOWED - {cpu}
        # a single CPU allowed: nothing to move to, the thread keeps it
        one = frozenset(sorted(_ALLOWED)[:1])
        os.sched_setaffinity(tids[0], one)
        assert threads.move_off([(tids[0], one)], min(one))
        assert os.sched_getaffinity(tids[0]) == one
    finally:
        stop.set()
        t.join()
    for _ in range(500):  # the OS thread outlives join() briefly
        if not os.path.exists(f"/proc/self/task/{tids[0]}"):
            break
        time.sleep(0.01)
    if len(_ALLOWED) >= 2:  # the thread has ended: reported, so that its owner finds anew
        assert not threads.move_off([(tids[0], frozenset(_ALLOWED))], min(_ALLOWED))


def test_row_reductions_split_like_plain_loops_in_a_plan_without_blas(monkeypatch, cpu_options):
    # a softmax gradient's row sums (each part reduces whole rows: nothing to combine) split
    # from spin_min_bytes as a plain loop does; a reduction over the split axis (a bias
    # gradient's column sums) keeps parallel_min_bytes: its partials need a combining step
    from kiln.core.backends.cpu.runtime import parts
    from kiln.core.backends.cpu.runtime.threads import SplitCall

    if parts.engine() != "spin":
        pytest.skip("the spin engine's threshold (x86-64 Linux)")
    cpu_options(spin_min_bytes=0, serial_work=0, race=False)
    rng = np.random.default_rng(2)
    p, g = (rng.random((96, 40)).astype("float32") for _ in range(2))
    pp, pg = kiln.placeholder(p.shape), kiln.placeholder(g.shape)
    rows = pp * (pg - K.sum(pg * pp, axis=-1, keepdims=True))
    cols = K.sum(pg * pp, axis=0)
    results = {}
    for n in (1, 2):
        monkeypatch.setenv("KILN_NUM_THREADS", str(n))
        for name, out in (("rows", rows), ("cols", cols)):
            f = kiln.function([pp, pg], out)
            results[name, n] = f(p, g)
            (step, *_) = _plan_steps(f)
            assert step.label == "fused[mul,sum]"
            assert isinstance(step.fn, SplitCall) == (n == 2 and name == "rows")
    for name in ("rows", "cols"):
        assert np.array_equal(results[name, 1], results[name, 2])
    p64, g64 = p.astype(np.float64), g.astype(np.float64)
    np.testing.assert_allclose(results["rows", 2], p64 * (g64 - (g64 * p64).sum(-1, keepdims=True)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results["cols", 2], (g64 * p64).sum(0), rtol=1e-5)
