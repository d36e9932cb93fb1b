"""Data-parallel training across processes over MPI (docs/features.md, "Collectives").

The Keras 3 spelling::

    import kiln
    kiln.distribution.set_distribution(kiln.distribution.DataParallel())
    model.fit(x, y, batch_size=256)          # started with: mpiexec -n 4 python train.py

``batch_size`` is the GLOBAL batch: every process (rank) computes on its slice of each batch,
and the gradients, losses and metric statistics are summed across ranks by one ``allreduce``
inside the compiled step, so every rank applies the same update and sees the same logs. Only
rank 0 prints the progress bar and writes files. Without MPI, or with one rank, everything
behaves as without a distribution.

``mpi4py`` (the optional extra ``kiln-nn[mpi]``) is imported only by :class:`DataParallel`.
"""

from __future__ import annotations

from typing import Any

from kiln.core import register_group

_current: dict[str, Any] = {"dist": None}


class DistributionError(RuntimeError):
    """A collective failed or timed out, or the ranks disagree about the model or the data."""


class DataParallel:
    """Replicates the model on every MPI rank and splits each global batch between them.

    Args:
        devices: accepted for Keras compatibility; must be None (one CPU process per rank).
        timeout: seconds a collective may wait for the other ranks before raising
            :class:`DistributionError` (a dead or stuck peer); default ``KILN_DIST_TIMEOUT``
            or 600 (the first step also waits for the slowest rank's compilation).
        comm: an ``mpi4py`` communicator (default ``MPI.COMM_WORLD``).
        bucket_bytes: kiln only: sum the gradients in buckets of about this many bytes, each
            started as soon as the backward pass has computed it and waited for just before
            the optimizer reads it (overlapping the sums with the backward pass); ``None``
            sums everything in one allreduce per dtype when the backward pass is done.

    Example:
        >>> kiln.distribution.set_distribution(kiln.distribution.DataParallel())
    """

    def __init__(self, devices: Any = None, timeout: float | None = None, comm: Any = None,
                 bucket_bytes: int | None = None, **kwargs: Any):
        if devices is not None:
            raise ValueError("DataParallel: kiln runs one process per rank; devices must be "
                             f"None, received {devices!r}")
        unknown = set(kwargs) - {"device_mesh", "auto_shard_dataset"}
        if unknown:
            raise TypeError(f"DataParallel: unexpected arguments {sorted(unknown)}")
        if timeout is None:
            from kiln import config

            timeout = config.env_positive_float("KILN_DIST_TIMEOUT", 600.0)
        if not timeout > 0:
            raise ValueError(f"DataParallel: timeout must be > 0 seconds, received {timeout!r}")
        if bucket_bytes is not None and (isinstance(bucket_bytes, bool) or not isinstance(
                bucket_bytes, int) or bucket_bytes <= 0):
            raise ValueError("DataParallel: bucket_bytes must be a positive integer or None, "
                             f"received {bucket_bytes!r}")
        self.bucket_bytes = bucket_bytes
        from kiln.distribution._mpi import MpiGroup

        self.group = MpiGroup(comm, float(timeout))
        self.group_name = f"kiln-dp-{id(self)}"

    @property
    def rank(self) -> int:
        return self.group.rank

    @property
    def world_size(self) -> int:
        return self.group.size

    def __repr__(self) -> str:
        return f"DataParallel(rank={self.rank}, world_size={self.world_size})"


def set_distribution(value: DataParallel | None) -> None:
    """Makes ``value`` the distribution of every later ``fit``/``evaluate``/``predict``
    (``None`` returns to one process). Models compiled before keep working: their steps are
    rebuilt for the new distribution."""
    if value is not None and not isinstance(value, DataParallel):
        raise TypeError("set_distribution: expects a kiln.distribution.DataParallel or None, "
                        f"received {type(value).__name__}")
    old = _current["dist"]
    if old is not None and old is not value:
        register_group(old.group_name, None)
    if value is not None:
        register_group(value.group_name, value.group)
        value.group.install_abort_hook()
    _current["dist"] = value


def distribution() -> DataParallel | None:
    """The distribution set by :func:`set_distribution`, or None."""
    return _current["dist"]


def active() -> DataParallel | None:
    """The distribution when it spans more than one rank (else None: the one-process path)."""
    dist = _current["dist"]
    return dist if dist is not None and dist.world_size > 1 else None


def rank() -> int:
    """This process's rank (0 without a distribution)."""
    dist = _current["dist"]
    return 0 if dist is None else dist.rank


def world_size() -> int:
    """The number of ranks (1 without a distribution)."""
    dist = _current["dist"]
    return 1 if dist is None else dist.world_size


def is_chief() -> bool:
    """Whether this process writes files and prints progress (rank 0)."""
    return rank() == 0


def barrier() -> None:
    """Waits until every rank reaches this point (no-op without a distribution)."""
    dist = _current["dist"]
    if dist is not None:
        dist.group.barrier()


__all__ = ["DataParallel", "DistributionError", "set_distribution", "distribution", "rank",
           "world_size", "is_chief", "barrier", "active"]
