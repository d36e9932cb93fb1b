"""The private OpenBLAS's worker threads (kiln/core/backends/cpu/gemm/blas.py: found when it loads,
moved off the caller's CPU by ``place``) and a plan step's GEMM (``products.MatmulCall``: its
BLAS call kept for the arrays it last saw, and made anew for any others)."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

from kiln.core.backends.cpu.gemm import blas, products
from kiln.core.backends.cpu.runtime import feeds, threads


@pytest.fixture(scope="module")
def copy(numpy_core):
    """A copy with NumPy's own kernels and its threads found, loaded for these tests."""
    before = blas._tasks()
    lib = blas.load_copy(numpy_core)
    assert lib is not None
    lib.started = blas._tasks() - before  # the threads that appeared while it loaded
    return lib


def test_the_workers_are_threads_the_copy_started(copy):
    if copy.threads < 2:
        pytest.skip("OpenBLAS runs one thread here")
    tids = [tid for tid, _ in copy.workers]
    assert len(tids) == copy.threads - 1
    assert set(tids) <= copy.started
    assert not set(tids) & {t.native_id for t in threading.enumerate()}  # none of Python's
    for _, allowed in copy.workers:  # the CPUs of the thread that loaded it (this one)
        assert allowed == frozenset(os.sched_getaffinity(0))


def test_a_thread_started_while_it_loads_leaves_the_workers_unknown(numpy_core, monkeypatch):
    """One thread more than OpenBLAS starts (a thread of the program's): none is moved."""
    real = blas._tasks
    calls = []

    def tasks():
        calls.append(1)
        return real() | ({10 ** 9} if len(calls) > 1 else set())

    monkeypatch.setattr(blas, "_tasks", tasks)
    lib = blas.load_copy(numpy_core)
    assert lib is not None and lib.workers == []
    blas.place(lib)  # nothing to move, nothing raised


@pytest.fixture
def two_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or threads.current_cpu() < 0:
        pytest.skip("needs two CPUs and sched_getcpu")
    yield cpus
    os.sched_setaffinity(0, cpus)


def test_place_moves_the_workers_off_the_callers_cpu(copy, two_cpus):
    if not copy.workers:
        pytest.skip("the copy's workers are unknown here")
    starts = {tid: allowed for tid, allowed in copy.workers}
    try:
        for cpu in two_cpus[:2]:
            os.sched_setaffinity(0, {cpu})  # the caller on one CPU
            blas.place(copy)
            assert copy.placed_for == cpu
            for tid, start in starts.items():
                assert os.sched_getaffinity(tid) == start - {cpu}
    finally:
        for tid, start in starts.items():
            os.sched_setaffinity(tid, start)
        copy.placed_for = -1


def test_place_does_nothing_in_a_forked_child(copy, two_cpus, monkeypatch):
    if not copy.workers:
        pytest.skip("the copy's workers are unknown here")
    monkeypatch.setattr(copy, "pid", -1)  # as in a child: these thread ids are not its own
    before = {tid: os.sched_getaffinity(tid) for tid, _ in copy.workers}
    os.sched_setaffinity(0, {two_cpus[0]})
    blas.place(copy)
    assert {tid: os.sched_getaffinity(tid) for tid, _ in copy.workers} == before


def test_after_a_fork_the_workers_are_found_again(copy, two_cpus, monkeypatch):
    """OpenBLAS stops its threads before a fork (kiln forks its compile workers) and starts
    other ones at its next call: those are the ones placed then."""
    if not copy.workers:
        pytest.skip("the copy's workers are unknown here")
    monkeypatch.setattr(blas, "_state", {"lib": copy})
    old = {tid for tid, _ in copy.workers}
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert copy.stale
    blas.place(copy)  # found again, started from this thread (on any of its CPUs)
    tids = {tid for tid, _ in copy.workers}
    assert len(tids) == copy.threads - 1 and tids <= blas._tasks()
    assert not tids & old and not copy.stale
    os.sched_setaffinity(0, {two_cpus[0]})
    blas.place(copy)
    for tid, start in copy.workers:
        assert start == frozenset(two_cpus)
        assert os.sched_getaffinity(tid) == start - {two_cpus[0]}
        os.sched_setaffinity(tid, start)
    copy.placed_for = -1


@pytest.fixture
def using(copy, monkeypatch, cpu_options):
    monkeypatch.setattr(blas, "_state", {"lib": copy})
    cpu_options(blas_placed_min_work=0)
    monkeypatch.setattr(copy, "placeable", True)
    return copy


def _product(rng, m, k, n, transposed=False):
    a = rng.normal(size=(k, m) if transposed else (m, k)).astype(np.float32)
    a = a.T if transposed else a
    b = rng.normal(size=(k, n)).astype(np.float32)
    return a, b, a.astype(np.float64) @ b


def test_a_step_gemm_is_right_for_the_arrays_it_is_given_each_time(using):
    rng = np.random.default_rng(3)
    step = products.MatmulCall()
    a, b, want = _product(rng, 67, 45, 33)
    out = np.full((67, 33), np.nan, np.float32)
    for _ in range(3):  # the same arrays: the kept call
        out[...] = np.nan
        step(a, b, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert step._single is not None
    a[...] = rng.normal(size=a.shape)  # new values in the same arrays
    step(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    for m, transposed in ((67, True), (40, False), (67, False)):  # other arrays, other shapes
        a2, b2, want2 = _product(rng, m, 45, 33, transposed)
        out2 = np.full((m, 33), np.nan, np.float32)
        step(a2, b2, out2)
        np.testing.assert_allclose(out2, want2, rtol=1e-5, atol=1e-5)
        del a2, b2, out2
        gc.collect()  # their ids free for the next arrays: the call must not be taken for theirs


def test_a_step_gemm_whose_operand_changed_strides_in_place_is_derived_anew(using):
    """The same three objects, but ``a``'s strides set in place (its transpose now): the call
    kept for the old layout would compute the old product."""
    import warnings

    rng = np.random.default_rng(4)
    step = products.MatmulCall()
    a, b, _ = _product(rng, 48, 48, 40)
    out = np.empty((48, 40), np.float32)
    step(a, b, out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # NumPy discourages it
        a.strides = (4, 4 * 48)
    step(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_a_step_gemm_holds_no_array(using):
    """A plan binds a feed in place only where no step holds an array it cannot rebind."""
    rng = np.random.default_rng(5)
    step = products.MatmulCall()
    a, b, _ = _product(rng, 64, 48, 40)
    step(a, b, np.empty((64, 40), np.float32))
    assert feeds.closure_arrays(step) == []


def test_what_blas_does_not_take_is_numpys(using):
    """Integer operands, a batch with a broadcast operand: np.matmul, the right answer."""
    rng = np.random.default_rng(6)
    step = products.MatmulCall()
    a = rng.integers(-5, 5, (20, 30))
    b = rng.integers(-5, 5, (30, 10))
    out = np.zeros((20, 10), np.int64)
    step(a, b, out)
    np.testing.assert_array_equal(out, a @ b)
    a3 = rng.normal(size=(3, 20, 30)).astype(np.float32)
    b2 = rng.normal(size=(30, 10)).astype(np.float32)
    out3 = np.zeros((3, 20, 10), np.float32)
    step(a3, b2, out3)
    np.testing.assert_allclose(out3, a3.astype(np.float64) @ b2, rtol=1e-5, atol=1e-5)


def test_a_step_gemm_follows_a_bound_feed_to_its_new_address(using):
    """A feed bound in place is a new view (of new data) at each call, the same layout: only
    its address changes, and the product must be of the new data."""
    rng = np.random.default_rng(7)
    step = products.MatmulCall()
    b = rng.normal(size=(48, 40)).astype(np.float32)
    out = np.empty((64, 40), np.float32)
    data = rng.normal(size=(5, 64, 48)).astype(np.float32)
    for i in range(5):
        a = data[i]  # a new view each call
        step(a, b, out)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    t = rng.normal(size=(48, 64)).astype(np.float32)
    step(t.T, b, out)  # another layout: derived anew
    np.testing.assert_allclose(out, t.T.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_a_new_operand_that_overlaps_the_output_is_left_to_numpy(using):
    rng = np.random.default_rng(8)
    step = products.MatmulCall()
    b = rng.normal(size=(40, 40)).astype(np.float32)
    out = np.empty((64, 40), np.float32)
    step(rng.normal(size=(64, 40)).astype(np.float32), b, out)
    out[...] = rng.normal(size=out.shape)
    want = out.astype(np.float64) @ b
    step(out.copy(), b, out)  # the same layout, no overlap: the kept call
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    want = out.astype(np.float64) @ b
    step(out[:], b, out)  # a view of the output itself: BLAS would read what it writes
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("alpha, beta", [(-0.01, 0.9), (0.5, 1.0), (0.0, 0.9), (-0.01, 0.0)])
def test_a_step_gemm_with_alpha_and_beta_reads_them_at_each_call(using, alpha, beta):
    """``out = alpha * a @ b + beta * out`` in place (SGD momentum's velocity), three calls,
    the scalars changed between them (a learning rate schedule); 0 goes to NumPy (a NaN in
    the skipped operand reaches the result: 0 * NaN)."""
    rng = np.random.default_rng(9)
    step = products.GemmCall()
    a = rng.normal(size=(128, 48)).astype(np.float32).T  # a kernel gradient's h.T
    b = rng.normal(size=(128, 40)).astype(np.float32)
    out = rng.normal(size=(48, 40)).astype(np.float32)
    want = out.astype(np.float64)
    for k in range(3):
        al, be = np.array(alpha * (k + 1), np.float32), np.array(beta, np.float32)
        want = float(al) * (a.astype(np.float64) @ b) + float(be) * want
        step(a, b, None, al, be, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    c = rng.normal(size=out.shape).astype(np.float32)  # c in a buffer of its own: copied
    step(a, b, c, np.array(2.0, np.float32), np.array(beta, np.float32), out)
    np.testing.assert_allclose(out, 2.0 * (a.astype(np.float64) @ b) + beta * c.astype(np.float64),
                               rtol=1e-5, atol=1e-4)
    b[0, 0] = np.nan
    step(a, b, None, np.array(0.0, np.float32), np.array(1.0, np.float32), out)
    assert np.isnan(out[:, 0]).all() and not np.isnan(out[:, 1:]).any()


def test_a_product_too_small_for_blas_threads_stays_numpys(using, monkeypatch, cpu_options):
    """Under OpenBLAS's threading threshold the step keeps NumPy's product (decided once),
    right for every new first operand, one that overlaps the output included."""
    cpu_options(blas_placed_min_work=4 * 65536 + 1)
    rng = np.random.default_rng(10)
    step = products.MatmulCall()
    b = rng.normal(size=(32, 32)).astype(np.float32)
    out = np.empty((40, 32), np.float32)
    for _ in range(3):
        a = rng.normal(size=(40, 32)).astype(np.float32)
        step(a, b, out)
        assert step._single is products.NUMPY
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    want = out.astype(np.float64) @ b
    step(out[:], b, out)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
