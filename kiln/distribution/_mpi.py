"""The MPI transport of :class:`kiln.distribution.DataParallel` (mpi4py; imported only there).

Every wait is bounded: collectives are started non-blocking and polled against a deadline, so
a rank whose peer died or hangs raises :class:`DistributionError` instead of waiting forever;
an uncaught exception on any rank aborts the whole job (``MPI_Abort``), so the others do not
sit in a collective that will never complete.

Faults travel on a second communicator: a rank that leaves a distributed fit/evaluate/predict
by any exception (``SystemExit`` included), or whose interpreter exits, sends a short notice
to every other rank (:meth:`MpiGroup.poison`). Every wait also polls for such a notice, so a
peer blocked in a collective raises at once instead of at the timeout, and a group that sent
or received one is *poisoned*: each later collective on it raises before it starts, so a rank
that caught the error cannot pair its next collectives with the wrong ones.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from typing import Any

import numpy as np

_ABORT_HOOK: dict[str, Any] = {"installed": False}
_OS_EXIT: dict[str, Any] = {"real": None, "pid": None}
_FAULT = 77  # the tag of fault notices (on the group's own fault communicator)
_EXITED = "exited"  # the notice of a rank whose interpreter exits
_EXIT_GRACE = 2.0  # seconds a collective may still complete after its peer's exit notice


def _import_mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError("kiln.distribution.DataParallel needs mpi4py: pip install "
                          "\"kiln-nn[mpi]\" (mpi4py and the mpich wheel)") from exc
    return MPI


class MpiGroup:
    """An MPI communicator with bounded waits; ``allreduce_sum`` is what ``allreduce`` calls."""

    def __init__(self, comm: Any, timeout: float):
        mpi = _import_mpi()
        self.MPI = mpi
        self.comm = (comm if comm is not None else mpi.COMM_WORLD).Dup()
        self.rank = int(self.comm.Get_rank())
        self.size = int(self.comm.Get_size())
        self.timeout = timeout
        self.poisoned: str | None = None  # why the group is unusable, once it is
        self._faults = self.comm.Dup()  # notices only: never mixed with the collectives
        self._notice = np.zeros(512, np.uint8)
        self._listen = self._faults.Irecv(self._notice, source=mpi.ANY_SOURCE, tag=_FAULT)
        self._received: tuple[int, str, float] | None = None  # (rank, notice, when)
        self._notified = False
        self._sent: list[Any] = []
        self._pending: dict[tuple[int, int], Any] = {}  # (address, bytes) -> started sum
        if self.size > 1:
            atexit.register(self._at_exit)

    # ---- faults between ranks ------------------------------------------------------------------
    def _error(self, message: str) -> Exception:
        from kiln.distribution import DistributionError
        return DistributionError(message)

    def _check_notice(self, in_collective: bool = False) -> None:
        """Raises (and poisons the group) when another rank has sent a fault notice. A peer
        that *exited* may have done its part of the collective this rank is finishing: inside
        a collective that notice raises only after ``_EXIT_GRACE`` seconds."""
        if self.poisoned is not None:
            raise self._error(self.poisoned)
        if self._received is None:
            status = self.MPI.Status()
            if not self._listen.Test(status):
                return
            text = bytes(self._notice[:status.Get_count(self.MPI.BYTE)]).decode("utf-8",
                                                                                 "replace")
            self._received = (status.Get_source(), text, time.monotonic())
        source, text, when = self._received
        if in_collective and text == _EXITED and time.monotonic() - when < _EXIT_GRACE:
            return
        self.poisoned = (f"rank {source} of {self.size} {text}; this distribution is unusable "
                         "(every later collective raises on every rank)")
        raise self._error(self.poisoned)

    def poison(self, reason: str) -> None:
        """Marks the group unusable and tells every other rank why (once; never waits)."""
        if self.size == 1 or self._notified:
            return
        self._notified = True
        if self.poisoned is None:
            self.poisoned = (f"rank {self.rank} of {self.size} {reason}; this distribution is "
                             "unusable (every later collective raises on every rank)")
        data = np.frombuffer(reason.encode("utf-8")[:self._notice.size], np.uint8).copy()
        for r in range(self.size):
            if r != self.rank:
                self._sent.append((self._faults.Isend(data, dest=r, tag=_FAULT), data))

    def _at_exit(self) -> None:
        # The interpreter is exiting (sys.exit, the end of the script): a peer still inside a
        # collective must not wait for this rank until the timeout.
        self.poison(_EXITED)
        self._flush_notices()

    def _flush_notices(self) -> None:
        deadline = time.monotonic() + 0.5  # let the notices leave (their peers may be gone)
        while self._sent and time.monotonic() < deadline:
            if all(req.Test() for req, _ in self._sent):
                break
            time.sleep(0.005)
        if self._received is None and not self._listen.Test():
            self._listen.Cancel()

    # ---- bounded waits -------------------------------------------------------------------------
    def _start(self) -> None:
        """Called before each collective starts: a poisoned group refuses it."""
        if self.size > 1:
            self._check_notice()

    def _wait(self, request: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        spins = 0
        while not request.Test():
            spins += 1
            if spins > 2000:  # past the first microseconds: poll gently
                time.sleep(0.0002)
                if spins % 64 == 0:
                    self._check_notice(in_collective=True)
                if time.monotonic() > deadline:
                    self.poison(f"timed out in {what}")
                    raise self._error(
                        f"rank {self.rank} of {self.size}: {what} did not complete within "
                        f"{self.timeout:g} s: another rank died, raised or is stuck "
                        "(KILN_DIST_TIMEOUT sets the limit)")

    def allreduce_sum(self, buffer: np.ndarray) -> None:
        """Sums ``buffer`` (C-contiguous float) over the ranks, in place."""
        self._start()
        req = self.comm.Iallreduce(self.MPI.IN_PLACE, buffer, op=self.MPI.SUM)
        self._wait(req, f"allreduce of {buffer.size} {buffer.dtype} values")

    def allreduce_start(self, buffer: np.ndarray) -> None:
        """Starts summing ``buffer`` (C-contiguous float) over the ranks, in place; it must not
        be read or written until :meth:`allreduce_wait` of the same buffer returns. Every rank
        starts its sums in the same order (MPI pairs non-blocking collectives by order).

        MPI moves a started sum on only inside MPI calls (this one, later starts, the wait):
        no progress thread (one measured slower on a loaded 2-core host: docs/architecture.md,
        "Data parallelism")."""
        if buffer.size == 0:  # nothing to sum (and empty buffers may share an address)
            return
        key = (buffer.__array_interface__["data"][0], buffer.nbytes)
        if key in self._pending:  # a step stopped between a start and its wait
            self.allreduce_wait(buffer)
        self._start()
        for earlier in self._pending.values():  # MPI moves them on only inside MPI calls
            earlier.Test()
        self._pending[key] = self.comm.Iallreduce(self.MPI.IN_PLACE, buffer, op=self.MPI.SUM)

    def allreduce_wait(self, buffer: np.ndarray) -> None:
        """Waits until the sum that :meth:`allreduce_start` started on ``buffer`` has arrived."""
        if buffer.size == 0:
            return
        req = self._pending.pop((buffer.__array_interface__["data"][0], buffer.nbytes), None)
        if req is None:
            raise self._error(f"rank {self.rank} of {self.size}: allreduce_wait of "
                              f"{buffer.size} {buffer.dtype} values: no allreduce was started "
                              "on this buffer")
        self._wait(req, f"allreduce of {buffer.size} {buffer.dtype} values")

    def broadcast(self, buffer: np.ndarray, root: int = 0) -> None:
        """Overwrites ``buffer`` (C-contiguous) with rank ``root``'s, in place."""
        self._start()
        req = self.comm.Ibcast(buffer, root=root)
        self._wait(req, f"broadcast of {buffer.size} {buffer.dtype} values")

    def barrier(self) -> None:
        self._start()
        self._wait(self.comm.Ibarrier(), "barrier")

    def allgather_json(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (JSON-serializable), in rank order. Sizes first, then the
        UTF-8 bytes: nothing is pickled."""
        self._start()
        data = np.frombuffer(json.dumps(value, sort_keys=True).encode(), np.uint8)
        sizes = np.zeros(self.size, np.int64)
        req = self.comm.Iallgather(np.array([data.size], np.int64), sizes)
        self._wait(req, "allgather of sizes")
        out = np.empty(int(sizes.sum()), np.uint8)
        req = self.comm.Iallgatherv(data, [out, sizes])
        self._wait(req, "allgather")
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        return [json.loads(out[offsets[r]:offsets[r + 1]].tobytes().decode())
                for r in range(self.size)]

    def allgather_rows(self, local: np.ndarray) -> np.ndarray:
        """The ranks' arrays (same trailing shape and dtype) stacked along axis 0, in rank
        order."""
        self._start()
        local = np.ascontiguousarray(local)
        rows = np.zeros(self.size, np.int64)
        req = self.comm.Iallgather(np.array([local.shape[0]], np.int64), rows)
        self._wait(req, "allgather of row counts")
        per_row = int(np.prod(local.shape[1:], dtype=np.int64))
        out = np.empty((int(rows.sum()),) + local.shape[1:], local.dtype)
        counts = rows * per_row
        req = self.comm.Iallgatherv(local, [out, counts])
        self._wait(req, "allgather of predictions")
        return out

    # ---- faults --------------------------------------------------------------------------------
    def install_abort_hook(self) -> None:
        """An uncaught exception on this rank prints its traceback, then aborts every rank."""
        if _ABORT_HOOK["installed"] or self.size == 1:
            return
        previous = sys.excepthook
        comm = self.comm
        rank = self.rank

        def hook(kind: Any, value: Any, tb: Any) -> None:
            previous(kind, value, tb)
            sys.stderr.write(f"kiln.distribution: rank {rank} failed; aborting all ranks\n")
            sys.stderr.flush()
            comm.Abort(1)

        sys.excepthook = hook
        _ABORT_HOOK["installed"] = True
        _guard_os_exit()


def _guard_os_exit() -> None:
    """``os._exit`` on this rank (its main process) tells the other ranks, and turns a status
    of 0 into 1. ``os._exit`` skips ``atexit`` and ``MPI_Finalize``, so mpiexec (MPICH's
    Hydra) kills the other ranks mid-collective and would report the job's status as the
    exiting rank's: 0, for a job whose ranks were killed mid-training."""
    _OS_EXIT["pid"] = os.getpid()
    if _OS_EXIT["real"] is not None:
        return
    real = _OS_EXIT["real"] = os._exit

    def _exit(status: int) -> None:
        from kiln.distribution import active

        dist = active()  # the distribution still set (set_distribution(None) lifts this)
        g = getattr(dist, "group", None)
        if isinstance(g, MpiGroup) and os.getpid() == _OS_EXIT["pid"]:  # not a forked child
            try:
                g.poison(f"called os._exit({status})")
                g._flush_notices()
                if status == 0:
                    sys.stderr.write(f"kiln.distribution: rank {g.rank} of {g.size} called "
                                     "os._exit(0) in a distributed job; exiting with status 1 "
                                     "(mpiexec ends the other ranks)\n")
                    sys.stderr.flush()
            except Exception:  # noqa: BLE001 - exiting whatever happens
                pass
            status = status or 1
        real(status)

    os._exit = _exit
