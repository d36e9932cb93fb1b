"""The MPI transport of :class:`kiln.distribution.DataParallel` (mpi4py; imported only there).

Every wait is bounded: collectives are started non-blocking and polled against a deadline, so
a rank whose peer died or hangs raises :class:`DistributionError` instead of waiting forever;
an uncaught exception on any rank aborts the whole job (``MPI_Abort``), so the others do not
sit in a collective that will never complete.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

_ABORT_HOOK: dict[str, Any] = {"installed": False}


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

    # ---- bounded waits -------------------------------------------------------------------------
    def _wait(self, request: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        spins = 0
        while not request.Test():
            spins += 1
            if spins > 2000:  # past the first microseconds: poll gently
                time.sleep(0.0002)
                if time.monotonic() > deadline:
                    from kiln.distribution import DistributionError
                    raise DistributionError(
                        f"rank {self.rank} of {self.size}: {what} did not complete within "
                        f"{self.timeout:g} s: another rank died, raised or is stuck "
                        "(KILN_DIST_TIMEOUT sets the limit)")

    def allreduce_sum(self, buffer: np.ndarray) -> None:
        """Sums ``buffer`` (C-contiguous float) over the ranks, in place."""
        req = self.comm.Iallreduce(self.MPI.IN_PLACE, buffer, op=self.MPI.SUM)
        self._wait(req, f"allreduce of {buffer.size} {buffer.dtype} values")

    def broadcast(self, buffer: np.ndarray, root: int = 0) -> None:
        """Overwrites ``buffer`` (C-contiguous) with rank ``root``'s, in place."""
        req = self.comm.Ibcast(buffer, root=root)
        self._wait(req, f"broadcast of {buffer.size} {buffer.dtype} values")

    def barrier(self) -> None:
        self._wait(self.comm.Ibarrier(), "barrier")

    def allgather_json(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (JSON-serializable), in rank order. Sizes first, then the
        UTF-8 bytes: nothing is pickled."""
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
