"""kiln on a busy machine (kiln/core/backends/cpu/runtime/cpus.py, issue 47): the CPU quota read
from fake cgroup files, the contention policy as a pure function, the monitor's modes and probe
spacing, split calls and the private OpenBLAS backing off, and four processes training at once
that end with the bits of one process alone. Oracles: closed-form quotas, the policy's table,
the same parts run one after the other (the same bits), specific errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from kiln.core.backends.cpu.gemm import blas
from kiln.core.backends.cpu.runtime import cpus, threads
from kiln.core.backends.cpu.runtime.cpus import Plan, policy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _cgroup(tmp_path, files: dict[str, str], proc: str) -> tuple[str, str]:
    """A fake cgroup tree under ``tmp_path/fs`` and a fake ``/proc/self/cgroup``."""
    for rel, text in files.items():
        path = tmp_path / "fs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "cgroup").write_text(proc)
    return str(tmp_path / "fs"), str(tmp_path / "cgroup")


QUOTAS = [
    ("v2 no quota", {"cpu.max": "max 100000\n"}, "0::/\n", None),
    ("v2 1.5 CPUs", {"cpu.max": "150000 100000\n"}, "0::/\n", 1.5),
    ("v2 its own cgroup and a parent's, the smaller",
     {"cpu.max": "max 100000\n", "kube/cpu.max": "300000 100000\n",
      "kube/pod/cpu.max": "400000 100000\n"}, "0::/kube/pod\n", 3.0),
    ("v2 a bad file", {"cpu.max": "lots 100000\n"}, "0::/\n", None),
    ("v1 cpu,cpuacct", {"cpu,cpuacct/docker/c1/cpu.cfs_quota_us": "50000\n",
                        "cpu,cpuacct/docker/c1/cpu.cfs_period_us": "100000\n"},
     "4:cpu,cpuacct:/docker/c1\n", 0.5),
    ("v1 no quota (-1)", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
     "2:cpu:/\n", None),
    ("v1 a container's own root", {"cpu/cpu.cfs_quota_us": "200000\n",
                                   "cpu/cpu.cfs_period_us": "100000\n"},
     "2:cpu:/docker/abc\n", 2.0),
    ("no cgroup files", {}, "", None),
]


@pytest.mark.parametrize("files, proc, want", [q[1:] for q in QUOTAS], ids=[q[0] for q in QUOTAS])
def test_cgroup_quota_from_fake_files(tmp_path, files, proc, want):
    root, proc_file = _cgroup(tmp_path, files, proc)
    assert cpus.cgroup_cpu_limit(root, proc_file) == want


def test_usable_cpus_is_the_smallest_of_affinity_quota_and_kiln_num_threads(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.delenv("KILN_NUM_THREADS", raising=False)
    root, proc = _cgroup(tmp_path, {"cpu.max": "150000 100000\n"}, "0::/\n")
    assert cpus.usable_cpus(root, proc) == 2  # 1.5 CPUs of quota: two threads
    root2, proc2 = _cgroup(tmp_path / "none", {"cpu.max": "max 100000\n"}, "0::/\n")
    assert cpus.usable_cpus(root2, proc2) == 8  # the affinity
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert cpus.usable_cpus(root, proc) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    assert cpus.usable_cpus(root, proc) == 1


# (usable, capacity, others, waited, previous, probe) -> Plan
POLICY = [
    ("quiet, first sample", (2, 2, None, None, None, False), Plan(2, True)),
    ("runnable count only: 3 others on 2 CPUs", (2, 2, 3.0, None, 2, False), Plan(1, False)),
    ("runnable count only: 0.4 others", (2, 2, 0.4, None, 2, False), Plan(2, True)),
    ("runnable count only: 5 of 16 CPUs busy", (8, 16, 5.0, None, 8, False), Plan(8, True)),
    ("runnable count only: 12 of 16 busy", (8, 16, 12.0, None, 8, False), Plan(4, False)),
    ("the caller waited 40%: one thread less", (2, 2, 0.0, 0.4, 2, True), Plan(1, False)),
    ("waited 40% with 8 threads", (8, 8, None, 0.4, 8, False), Plan(7, False)),
    ("waited 50% on one thread: stays 1", (2, 2, 3.0, 0.5, 1, True), Plan(1, False)),
    ("waited 1%, probe allowed: one more", (2, 2, 5.0, 0.01, 1, True), Plan(2, True)),
    ("waited 1%, no probe yet", (2, 2, None, 0.01, 1, False), Plan(1, False)),
    ("waited 10%: between, stays", (4, 4, None, 0.1, 2, True), Plan(2, False)),
    ("full and waited 10%: keeps spinning", (2, 2, None, 0.1, 2, False), Plan(2, True)),
    ("one usable CPU", (1, 4, 0.0, 0.0, None, True), Plan(1, False)),
    ("a quota below the affinity", (2, 16, 0.0, 0.0, 2, True), Plan(2, True)),
]


@pytest.mark.parametrize("args, want", [p[1:] for p in POLICY], ids=[p[0] for p in POLICY])
def test_policy(args, want):
    assert policy(*args) == want


def test_modes_and_a_bad_value(monkeypatch):
    m = cpus.Monitor()
    monkeypatch.setenv("KILN_CONTENTION", "busy")
    assert m.sample(1.0) == Plan(1, False)
    monkeypatch.setenv("KILN_CONTENTION", "OFF")
    usable = cpus.usable_cpus()
    assert m.sample(2.0) == Plan(usable, usable > 1)
    monkeypatch.setenv("KILN_CONTENTION", "sometimes")
    with pytest.raises(ValueError, match="KILN_CONTENTION must be one of 'auto', 'off', "
                                         "'busy', got 'sometimes'"):
        m.sample(3.0)


def test_failed_probes_are_spaced_out_and_a_held_probe_resets_the_spacing(monkeypatch):
    """Driven by a fake load: the caller waits 50% with two threads, 0% with one (one other
    single-threaded job on two CPUs); then the other job ends."""
    monkeypatch.setenv("KILN_CONTENTION", "auto")
    m = cpus.Monitor()
    m.usable = (1e9, 2)  # read "now": two usable CPUs
    load = {"busy": True}
    monkeypatch.setattr(cpus, "affinity_cpus", lambda: 2)
    monkeypatch.setattr(m, "_runnable_others", lambda capacity: None)
    monkeypatch.setattr(m, "_waited", lambda now: 0.5 if load["busy"] and m.current.threads
                        == 2 else 0.0)
    step = cpus.SAMPLE_S
    t, seen = 1.0, []
    for _ in range(120):
        t += step
        seen.append((t, m.sample(t).threads))
    ups = [t for (t, n), (_, before) in zip(seen[1:], seen) if n > before]
    gaps = np.diff(ups)
    assert len(ups) >= 4 and all(b >= 1.5 * a for a, b in zip(gaps, gaps[1:])), ups
    assert max(gaps) <= cpus.PROBE_MAX_S + 3 * step
    assert sum(n == 1 for _, n in seen[20:]) > 0.8 * len(seen[20:])  # mostly one thread
    load["busy"] = False  # the other job ended: the next probe holds
    for _ in range(int(cpus.PROBE_MAX_S / step) + 10):
        t += step
        m.sample(t)
    assert m.current == Plan(2, True)
    assert m.backoff == 2 * step


WAIT_SHARES = [  # (ran, delay, window) -> share of the runnable time spent waiting
    ("always runnable, waited half", (0.05, 0.05, 0.1), 0.5),
    ("always runnable, never waited", (0.1, 0.0, 0.1), 0.0),
    ("runnable 60% of the window, waited a third of it", (0.04, 0.02, 0.1), 1 / 3),
    ("idle 2 s then 0.05 s running: the load of the burst", (0.05, 0.0, 2.05), 0.0),
    ("idle 2 s then 0.05 s waiting half: the load of the burst", (0.025, 0.025, 2.05), 0.5),
    ("runnable 5 ms of a window: too little to tell", (0.004, 0.001, 0.1), None),
    ("no time passed", (0.0, 0.0, 0.0), None),
]


@pytest.mark.parametrize("args, want", [w[1:] for w in WAIT_SHARES],
                         ids=[w[0] for w in WAIT_SHARES])
def test_wait_share(args, want):
    got = cpus.wait_share(*args)
    assert got == want if want is None else got == pytest.approx(want)


class _FakeHost:
    """A caller's ``schedstat`` (time on a CPU, run delay) and the runnable others, advanced
    by phases: ``run(seconds, share)`` (runnable throughout, waiting ``share`` of it, with
    ``others`` rivals runnable) and ``idle(seconds)``."""

    def __init__(self, monkeypatch, monitor):
        self.t, self.ran, self.delay, self.others = 1.0, 0.0, 0.0, 0.0
        monkeypatch.setattr(cpus, "_schedstat", lambda: (self.ran, self.delay))
        monkeypatch.setattr(cpus, "affinity_cpus", lambda: 2)
        monkeypatch.setattr(monitor, "_runnable_others", lambda capacity: self.others)

    def run(self, seconds: float, share: float, others: float, m) -> list[int]:
        self.others, seen = others, []
        for _ in range(round(seconds / cpus.SAMPLE_S)):
            self.t += cpus.SAMPLE_S
            self.ran += (1 - share) * cpus.SAMPLE_S
            self.delay += share * cpus.SAMPLE_S
            seen.append(m.sample(self.t).threads)
        return seen

    def idle(self, seconds: float) -> None:
        self.t += seconds


def test_back_from_idle_the_first_window_follows_the_load_of_its_burst(monkeypatch):
    """bench_suite --contended's sequence: a copy alone on a quiet machine (2 threads), idle
    while the harness settles, then started with three rivals at once (they wait 50% with one
    thread each). The old wait share (run delay over the whole window, idle time included)
    read the first window as free; the share over the caller's runnable time sees the rivals
    at once (1 thread), and the runnable count at the wake-up (which counts the waker) decides
    nothing. Then the rivals end, the copy idles and runs alone again: the contended samples
    are forgotten at the gap, its first window gives the second thread back."""
    monkeypatch.setenv("KILN_CONTENTION", "auto")
    m = cpus.Monitor()
    m.usable = (1e9, 2)
    host = _FakeHost(monkeypatch, m)
    assert host.run(1.0, 0.0, 0.0, m)[-1] == 2  # alone, quiet
    host.idle(0.5)
    together = host.run(1.0, 0.5, 3.0, m)
    assert together == [1] * len(together), together
    assert m.current == Plan(1, False)
    host.idle(0.5)
    m.probe_at = 0.0  # the probe spacing of the contended phase is not this test's subject
    alone = host.run(1.0, 0.0, 0.0, m)
    assert alone[0] == 2 and m.current == Plan(2, True), alone


def test_short_bursts_between_idle_gaps_follow_their_own_load(monkeypatch):
    """A copy alone whose wake-ups find runnable tasks (its waker, its own workers: the
    runnable count at that instant) keeps its two threads; one on one thread (after a
    contended phase) whose bursts are shorter than a sample's window gets the second back
    from the bursts' own wait share; a burst too short to tell keeps the plan."""
    monkeypatch.setenv("KILN_CONTENTION", "auto")
    m = cpus.Monitor()
    m.usable = (1e9, 2)
    host = _FakeHost(monkeypatch, m)
    assert host.run(1.0, 0.0, 0.0, m)[-1] == 2
    for _ in range(5):
        host.idle(0.2)
        assert host.run(0.2, 0.0, 1.5, m) == [2, 2]
    assert host.run(1.0, 0.5, 3.0, m)[-1] == 1  # contended
    m.probe_at = 0.0
    host.idle(0.2)
    host.t += 0.05  # a 0.05 s burst, quiet, inside a 0.3 s window
    host.ran += 0.05
    assert m.sample(host.t).threads == 2
    host.idle(0.3)
    host.t += 0.005  # a 5 ms burst: too little to tell
    host.ran += 0.005
    assert m.sample(host.t).threads == 2


def test_a_busy_caller_keeps_its_averaged_wait(monkeypatch):
    """Windows the caller was runnable throughout are averaged as before: on a machine where
    it waits 40% it runs one thread, and one quiet window (20% averaged in) does not bring
    the second thread back."""
    monkeypatch.setenv("KILN_CONTENTION", "auto")
    m = cpus.Monitor()
    m.usable = (1e9, 2)
    host = _FakeHost(monkeypatch, m)
    assert host.run(1.0, 0.4, 3.0, m)[-1] == 1
    assert host.run(0.1, 0.0, 0.0, m) == [1]


def _square_parts(out: np.ndarray, x: np.ndarray, lo: int, hi: int, ran: list) -> None:
    out[lo:hi] = x[lo:hi] ** 2
    ran.append(threading.get_native_id())


def test_a_busy_machine_runs_the_pools_parts_on_the_caller_in_order(monkeypatch):
    x = np.arange(12.0)
    out = np.zeros_like(x)
    ran: list[int] = []
    calls = [(_square_parts, (out, x, lo, hi, ran)) for lo, hi in threads.chunks(12, 3)]
    monkeypatch.setenv("KILN_CONTENTION", "busy")
    monkeypatch.setattr(cpus.MONITOR, "next", 0.0)
    threads.POOL.run(calls)
    np.testing.assert_array_equal(out, x ** 2)
    assert ran == [threading.get_native_id()] * 3


def test_a_split_call_gives_the_same_bits_busy_and_not(monkeypatch):
    from cpu_targets import set_cpu

    from kiln.core.backends.cpu.gemm import native_matmul

    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    set_cpu(monkeypatch, avx512=True)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 96)).astype(np.float32)
    b = rng.standard_normal((96, 256)).astype(np.float32)
    out = np.full((256, 256), np.nan, np.float32)
    step = native_matmul._Step()
    if not native_matmul.add(step, a, b, out) or not isinstance(step.fn, threads.SplitCall):
        pytest.skip("kiln's own split product does not run here")
    got = {}
    for mode in ("off", "busy", "off"):
        monkeypatch.setenv("KILN_CONTENTION", mode)
        monkeypatch.setattr(cpus.MONITOR, "next", 0.0)
        out[:] = np.nan
        step.fn(*step.args)
        got.setdefault(mode, out.copy())
        np.testing.assert_array_equal(out, got[mode])
    np.testing.assert_array_equal(got["busy"], got["off"])
    np.testing.assert_allclose(got["busy"], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_the_private_openblas_runs_on_the_callers_thread_when_busy(monkeypatch):
    lib = blas.library()
    if lib is None or lib.threads < 2:
        pytest.skip("no private OpenBLAS with threads here")
    a = np.random.default_rng(1).standard_normal((300, 300)).astype(np.float32)
    out = np.empty_like(a)
    # as many usable CPUs as the library has threads, whatever this host's affinity, quota
    # or KILN_NUM_THREADS (with one, "off" would run one thread too)
    monkeypatch.setattr(cpus, "usable_cpus", lambda: lib.threads)
    monkeypatch.setattr(cpus.MONITOR, "usable", (0.0, 0))
    try:
        for mode, want in (("busy", 1), ("off", lib.threads)):
            monkeypatch.setenv("KILN_CONTENTION", mode)
            monkeypatch.setattr(cpus.MONITOR, "next", 0.0)
            blas.place(lib)
            assert lib.running == want
            call = blas._call(lib, a, a, out, 0)
            call[0](*blas._single_args(call))
            np.testing.assert_allclose(out, a.astype(np.float64) @ a, rtol=1e-4, atol=1e-3)
    finally:
        lib.running = lib.threads
        lib.set_threads(lib.threads)


TRAIN = textwrap.dedent("""
    import hashlib, sys
    import numpy as np
    import kiln
    from kiln.core.backends.cpu.runtime import threads

    calls = [0]
    call = threads.SplitCall.__call__

    def counted(self, *args):
        calls[0] += 1
        return call(self, *args)

    threads.SplitCall.__call__ = counted
    kiln.utils.set_random_seed(0)
    L = kiln.layers
    model = kiln.Sequential([kiln.Input((28, 28, 1)), L.Conv2D(8, 3, activation="relu"),
                             L.MaxPooling2D(2), L.Flatten(), L.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.random((512, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, 512).astype(np.int32)
    model.fit(x, y, batch_size=64, epochs=2, verbose=0, shuffle=False)
    h = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
    print("RESULT", h, calls[0])
""")


def _train(mode: str, cache: str, copies: int = 1) -> list[tuple[str, int]]:
    env = dict(os.environ, KILN_CONTENTION=mode, KILN_NUM_THREADS="2", KILN_BLAS="numpy",
               KILN_CACHE_DIR=cache, PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, "-c", TRAIN], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(copies)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr[-2000:]
        line = [s for s in stdout.splitlines() if s.startswith("RESULT")][-1].split()
        out.append((line[1], int(line[2])))
    return out


def test_four_processes_at_once_end_with_the_bits_of_one_alone(tmp_path):
    """Four processes training at once (each backing off as the load says) and one process
    alone with ``KILN_CONTENTION=off`` and ``busy`` end with the same weights, bit for bit:
    the split kernels keep their parts whatever runs them (GEMMs through NumPy's OpenBLAS,
    whose thread count kiln leaves alone)."""
    cache = str(tmp_path / "cache")
    alone = _train("off", cache)[0]
    assert alone[1] > 0, "the model should have split calls"
    assert _train("busy", cache) == [alone]
    together = _train("auto", cache, copies=4)
    assert [h for h, _ in together] == [alone[0]] * 4
