"""The CPUs kiln's workers run on: how many threads a split kernel uses
(:func:`kernel_threads`), how many CPUs this process may use (:func:`usable_cpus`: its
affinity, its cgroup's CPU quota, ``KILN_NUM_THREADS``), how busy they are now (:func:`plan`:
the contention policy, docs/configuration.md ``KILN_CONTENTION``), the CPU the calling thread
is on (:func:`current_cpu`) and moving sleeping workers off a CPU (:func:`move_off`), for
kiln's pools (``threads``, ``spin_pool``) and OpenBLAS's workers (``gemm.blas``). Imports
nothing of the backend.

Contention (issue 47). A split kernel's parts are fixed when its plan is made (their number is
:func:`kernel_threads`, and so are the bits of a sum split over them); how they run is decided
at run time by :func:`plan`, which samples the load at most every :data:`SAMPLE_S` seconds:
the share of its runnable time in the last window the calling thread spent waiting for a CPU
(its ``schedstat`` run delay over run time plus run delay, :func:`wait_share`: it sees rivals
of any priority, in any cgroup, and a CPU quota running out), and the runnable tasks not this
process's (``/proc/loadavg``'s running count less its own threads in state R), which decides
only where the run delay is unknown: at the first sample. After an idle gap the samples before
it are forgotten and the window's own share decides; one too short to tell keeps the plan.
:func:`policy` turns them into a :class:`Plan`: ``threads`` (1: every part of a split call
runs on the caller, in order; the private OpenBLAS runs ``min(its threads, threads)``) and
``spin`` (workers spin after a part only with every usable CPU, else they sleep at once).
``KILN_CONTENTION``: ``auto``, ``off`` (every usable CPU, spinning), ``busy`` (one thread).
"""

from __future__ import annotations

import ctypes
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

CGROUP_ROOT = "/sys/fs/cgroup"
SAMPLE_S = 0.1   # the load is sampled at most this often (~60-150 us a sample)
WAIT_HIGH = 0.25  # a caller runnable but not running this share of a window: one thread less
WAIT_LOW = 0.05   # ... at most this share: one thread more may be tried
PROBE_MAX_S = 6.4  # the longest time between two probes (failed probes double it)
ACTIVE_MIN_S = 0.01  # a window the caller was runnable less than this long says nothing
GAP_SHARE = 0.5  # ... one it was runnable less than this share of follows an idle gap
MODES = ("auto", "off", "busy")


def kernel_threads() -> int:
    """Threads a split kernel uses: ``KILN_NUM_THREADS``, else numba's configured count
    (``NUMBA_NUM_THREADS``), else the CPUs this process may use (:func:`usable_cpus`); 1 when
    kernels run as Python."""
    from kiln import config

    if not config.jit_enabled():
        return 1
    n = config.env_positive_int("KILN_NUM_THREADS")
    if n is not None:
        return n
    raw = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            pass
    return usable_cpus()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _ancestors(root: str, path: str) -> list[str]:
    """``root/path`` and each folder above it up to ``root`` (a cgroup's limits are its own
    and its parents')."""
    parts = [p for p in path.strip().split("/") if p and p != ".."]
    return [os.path.join(root, *parts[:k]) for k in range(len(parts), -1, -1)]


def cgroup_cpu_limit(root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup"
                     ) -> float | None:
    """The CPUs this process's cgroup quota allows (quota / period, the smallest along its
    cgroup path), or None where there is no quota. cgroup v2: ``cpu.max`` (``"max 100000"``:
    none; ``"150000 100000"``: 1.5); v1: ``cpu.cfs_quota_us`` (-1: none) over
    ``cpu.cfs_period_us`` in the ``cpu`` controller's folder. ``root`` and ``proc_cgroup``
    are parameters for tests."""
    paths: list[str] = []
    v1: list[str] = []
    for line in (_read(proc_cgroup) or "").splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3 and fields[0] == "0" and not fields[1]:
            paths.append(fields[2])
        elif len(fields) == 3 and "cpu" in fields[1].split(","):
            v1.append(fields[2])
    limits = []
    for folder in _ancestors(root, paths[0] if paths else "/"):
        words = (_read(os.path.join(folder, "cpu.max")) or "").split()
        if len(words) == 2 and words[0] != "max":
            try:
                quota, period = float(words[0]), float(words[1])
            except ValueError:
                continue
            if quota > 0 and period > 0:
                limits.append(quota / period)
    for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        for folder in _ancestors(os.path.join(root, mount), v1[0] if v1 else "/"):
            quota_s = _read(os.path.join(folder, "cpu.cfs_quota_us"))
            period_s = _read(os.path.join(folder, "cpu.cfs_period_us"))
            try:
                quota, period = float(quota_s or "-1"), float(period_s or "0")
            except ValueError:
                continue
            if quota > 0 and period > 0:
                limits.append(quota / period)
    return min(limits) if limits else None


def affinity_cpus() -> int:
    """The CPUs the scheduler may run this process on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def usable_cpus(root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> int:
    """The CPUs this process may use: the smallest of its affinity, its cgroup's CPU quota
    (rounded up: 1.5 CPUs of quota keep two threads busy 75% of the time) and
    ``KILN_NUM_THREADS``. ``nproc`` in a container with a quota counts the host's CPUs."""
    from kiln import config

    n = affinity_cpus()
    quota = cgroup_cpu_limit(root, proc_cgroup)
    if quota is not None:
        n = min(n, max(1, math.ceil(quota - 1e-9)))
    limit = config.env_positive_int("KILN_NUM_THREADS")
    return min(n, limit) if limit is not None else n


# ---- contention --------------------------------------------------------------------------------
class Plan(NamedTuple):
    """How split calls run now: on ``threads`` threads (1: the caller runs every part, in
    order), workers spinning after their part (``spin``) or sleeping at once."""

    threads: int
    spin: bool


def policy(usable: int, capacity: int, others: float | None, waited: float | None,
           previous: int | None = None, probe: bool = False) -> Plan:
    """The :class:`Plan` for a process that may use ``usable`` CPUs of the ``capacity`` its
    affinity allows. ``waited``: the share of the last window its calling thread spent
    runnable but waiting for a CPU (None: unknown); ``others``: runnable tasks not its own
    on those CPUs (None: unknown); ``previous``: the last plan's threads (None: the first);
    ``probe``: whether one more thread may be tried.

    Where ``waited`` is known it decides: above :data:`WAIT_HIGH` one thread fewer than
    ``previous`` (the CPUs are not there), below :data:`WAIT_LOW` one more where ``probe``
    (the monitor spaces failed probes out), else ``previous``. The runnable count decides only
    where it is not (the free CPUs, rounded): it cannot tell a task of lower priority or in
    another cgroup from a rival. Always 1 to ``usable`` threads; workers spin only with all
    ``usable`` threads and a caller that did not wait."""
    usable = max(1, usable)
    before = usable if previous is None else previous
    if waited is None:
        free = capacity - others if others is not None else float(capacity)
        want = math.floor(free + 0.5)
    elif waited > WAIT_HIGH:
        want = before - 1
    elif waited < WAIT_LOW and probe:
        want = before + 1
    else:
        want = before
    threads = min(usable, max(1, want))
    return Plan(threads, threads == usable > 1 and (waited is None or waited < WAIT_HIGH))


def wait_share(ran: float, delay: float, window: float) -> float | None:
    """The share of its runnable time the caller spent waiting for a CPU over a window in
    which it ran ``ran`` and waited ``delay`` seconds (its ``schedstat``'s growth): ``delay /
    (ran + delay)``, the load it met while it had work, whatever it idled meanwhile (the
    share of the whole window would read a busy machine as free after an idle gap: four
    copies started together would each try every CPU at once). None where it was runnable
    under :data:`ACTIVE_MIN_S`: too little to tell."""
    active = ran + delay
    if window <= 0 or active <= 0 or active < ACTIVE_MIN_S:
        return None
    return min(1.0, max(0.0, delay / active))


def _read_fd(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 512)
    finally:
        os.close(fd)


def _own_running() -> int:
    """This process's threads in state R (running or runnable), the caller included."""
    n = 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 1
    for tid in tids:
        try:
            s = _read_fd(f"/proc/self/task/{tid}/stat")
        except OSError:  # the thread ended
            continue
        end = s.rfind(b")")
        if s[end + 2:end + 3] == b"R":
            n += 1
    return max(n, 1)


class Monitor:
    """Samples the load (at most every :data:`SAMPLE_S` s) and keeps the current :class:`Plan`
    (:func:`plan`); ``KILN_CONTENTION`` is read at each sample. A probe (one thread more)
    that had to be taken back doubles the time to the next one, up to :data:`PROBE_MAX_S`."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forgets the samples (a forked child: its threads are not its parent's)."""
        self.next = 0.0
        self.current = Plan(1, False)
        self.previous: int | None = None
        self.others: float | None = None
        self.waited: float | None = None
        self.idle = False  # the caller was runnable under GAP_SHARE of the last window
        self.last: tuple[int, float, float, float] | None = None  # thread, ran, delay, time
        self.usable = (0.0, 1)  # (time read, CPUs)
        self.probe_at = 0.0  # no probe before this time
        self.backoff = 2 * SAMPLE_S
        self.probed = 0.0  # when the last probe started (0: none in trial)
        self.counts: dict[int, int] = {}  # samples by the plan's threads (benchmarks read it)

    def _runnable_others(self, capacity: int) -> float | None:
        try:
            running = int(_read_fd("/proc/loadavg").split()[3].split(b"/")[0])
        except (OSError, IndexError, ValueError):
            return None
        online = os.cpu_count() or capacity
        return max(0, running - _own_running()) * min(1.0, capacity / online)

    def _waited(self, now: float) -> float | None:
        """The caller's :func:`wait_share` since the last sample (None: unknown)."""
        tid, times = _thread_id(), _schedstat()
        if times is None:
            return None
        last, self.last = self.last, (tid, *times, now)
        if last is None or last[0] != tid:
            return None
        ran, delay, window = times[0] - last[1], times[1] - last[2], now - last[3]
        self.idle = ran + delay < GAP_SHARE * window
        return wait_share(ran, delay, window)

    def sample(self, now: float) -> Plan:
        from kiln import config

        self.next = now + SAMPLE_S
        mode = config.env_choice("KILN_CONTENTION", MODES, "auto")
        if now - self.usable[0] > 2.0 or self.usable[0] == 0.0:
            self.usable = (now, usable_cpus())
        usable = self.usable[1]
        if mode == "off":
            self.current = Plan(usable, usable > 1)
        elif mode == "busy":
            self.current = Plan(1, False)
        else:
            self._auto(now, usable)
        self.previous = self.current.threads
        self.counts[self.current.threads] = self.counts.get(self.current.threads, 0) + 1
        return self.current

    def _auto(self, now: float, usable: int) -> None:
        capacity = affinity_cpus()
        others, waited = self._runnable_others(capacity), self._waited(now)
        if self.idle:  # back from an idle gap: the samples before it say nothing of now
            self.others = self.waited = None
            self.idle = False
            if waited is None:  # nor does this window (too short): the plan stays. The
                # runnable count at a wake-up counts the waker and the process's own workers:
                # on a quiet 2-core host it sent wide_mlp's epochs to one thread (0.20-0.27
                # against 0.146 s), and deep_mlp's short epochs never met a full window to
                # probe two threads again in (0.075 against 0.058 s)
                return
        if others is not None:
            self.others = others if self.others is None else 0.5 * (self.others + others)
        if waited is not None:
            self.waited = waited if self.waited is None else 0.5 * (self.waited + waited)
        plan = policy(usable, capacity, self.others, self.waited, self.previous,
                      probe=now >= self.probe_at)
        if self.previous is not None and plan.threads != self.previous:
            self.waited = None  # the next window measures the new plan alone
            if plan.threads > self.previous:
                self.probed = now
            elif self.probed and now - self.probed < 3 * SAMPLE_S:  # the probe failed
                self.backoff = min(PROBE_MAX_S, 2 * self.backoff)
                self.probe_at = now + self.backoff
                self.probed = 0.0
        elif self.probed and now - self.probed >= 3 * SAMPLE_S:  # the probe held
            self.backoff = 2 * SAMPLE_S
            self.probed = 0.0
        self.current = plan


def _schedstat() -> tuple[float, float] | None:
    """The calling thread's time on a CPU and time runnable but waiting for one, in seconds
    (``/proc/thread-self/schedstat``), or None where there is none."""
    try:
        fields = _read_fd("/proc/thread-self/schedstat").split()
        return int(fields[0]) * 1e-9, int(fields[1]) * 1e-9
    except (OSError, IndexError, ValueError):
        return None


def _thread_id() -> int:
    import threading

    return threading.get_native_id()


MONITOR = Monitor()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=MONITOR.reset)


def plan() -> Plan:
    """The current :class:`Plan` (sampled anew where :data:`SAMPLE_S` has passed)."""
    m = MONITOR
    now = time.monotonic()
    if now < m.next:
        return m.current
    return m.sample(now)


def _cpu_reader() -> Callable[[], int]:
    """A function returning the CPU the calling thread runs on (glibc's ``sched_getcpu``, a
    vDSO read), or -1 where there is none."""
    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError, TypeError):  # no libc symbol (not glibc), or Windows
        return lambda: -1
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn


current_cpu = _cpu_reader()


def move_off(workers: Sequence[tuple[int, frozenset[int]]], cpu: int) -> bool:
    """Sets the affinity of each thread ``(native id, CPUs it started with)`` of ``workers``
    to those CPUs but ``cpu`` (kept where that leaves none). A sleeping thread is then woken
    on another CPU than its waker's (kiln's pool here, OpenBLAS's workers in blas.place).
    False where a thread no longer exists."""
    for tid, allowed in workers:
        others = allowed - {cpu}
        if others:
            try:
                os.sched_setaffinity(tid, others)
            except ProcessLookupError:
                return False
            except OSError:  # the CPUs allowed changed: the thread stays where it is
                pass
    return True
