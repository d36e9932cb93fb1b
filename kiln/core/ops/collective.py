"""Collective ops: ``allreduce`` sums a tensor over the processes of a group.

A compiled step stays a pure function of its feeds on every process; the collective is one
more node of it (docs/features.md, "Collectives"). The group is named by the attribute
``group`` (a string), resolved at run time in the core's group table
(:func:`register_group`): the core never imports a transport. Without a registered group, the
name ``"local"`` is the one-process group, where the sum over processes is the identity.

* ``ref``: copies ``x`` and lets the group sum it in place, so the reference is the spec on one
  process and the fallback kernel on any backend;
* ``vjp``: the gradient of ``sum_r f_r(allreduce(x))`` with respect to ``x_r`` is the sum of the
  cotangents of every process: ``allreduce(ct)``;
* never constant-folded (``kind = "collective"``): the other processes must take part at run time.

``allreduce_start`` / ``allreduce_wait`` split one allreduce in two, so that a step can go on
computing while the sum travels (data parallelism overlaps each bucket of gradients with the
rest of the backward pass): ``allreduce_wait(allreduce_start(x, group), group)`` is
``allreduce(x, group)``, element for element. The start's result is *in flight* until its wait:
only the wait may read it (the scheduler runs starts early and waits late,
:mod:`kiln.core.schedule`). A group that has no ``allreduce_start(buffer)`` /
``allreduce_wait(buffer)`` methods sums at the start (blocking) and waits for nothing. They are
inserted after autodiff and are not differentiable.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops.registry import COLLECTIVE, Example, OpDef, apply, register


class Group(Protocol):
    """What a transport provides: an in-place sum over its processes (same on every one)."""

    def allreduce_sum(self, buffer: np.ndarray) -> None: ...


def start_sum(group: Any, buffer: np.ndarray) -> None:
    """Starts summing ``buffer`` (C-contiguous) in place over ``group``: non-blocking where
    the group can (``allreduce_start``), else the whole blocking sum now."""
    start = getattr(group, "allreduce_start", None)
    if start is None:
        group.allreduce_sum(buffer)
    else:
        start(buffer)


def wait_sum(group: Any, buffer: np.ndarray) -> None:
    """Waits until the sum started on ``buffer`` by :func:`start_sum` has arrived."""
    wait = getattr(group, "allreduce_wait", None)
    if wait is not None:
        wait(buffer)


class LocalGroup:
    """The one-process group: the sum over one process is the value itself."""

    size = 1

    def allreduce_sum(self, buffer: np.ndarray) -> None:
        return None


_GROUPS: dict[str, Any] = {"local": LocalGroup()}
_LOCK = threading.Lock()


def register_group(name: str, group: Any) -> None:
    """Makes ``group`` (an object with ``allreduce_sum(buffer)``) the group named ``name``;
    ``None`` removes it. ``"local"`` cannot be replaced."""
    if name == "local":
        raise ValueError("register_group: the group 'local' is built in")
    with _LOCK:
        if group is None:
            _GROUPS.pop(name, None)
        else:
            if not callable(getattr(group, "allreduce_sum", None)):
                raise TypeError(f"register_group: {type(group).__name__} has no "
                                "allreduce_sum(buffer) method")
            _GROUPS[name] = group


def get_group(name: str) -> Any:
    try:
        return _GROUPS[name]
    except KeyError:
        raise RuntimeError(f"allreduce: no process group named {name!r} is registered (was "
                           "the distribution unset after this step was compiled?)") from None


def _infer(x: TensorType, *, group: str) -> TensorType:
    if not isinstance(group, str):
        raise TypeError(f"allreduce: group must be a string, received {group!r}")
    if x.dtype not in ("float32", "float64"):
        raise TypeError(f"allreduce: sums float tensors, received {x}")
    return x


def _ref(x: np.ndarray, *, group: str) -> np.ndarray:
    out = np.array(x, copy=True, order="C")
    get_group(group).allreduce_sum(out)
    return out


def _vjp(ct: Node, out: Node, x: Node, *, group: str) -> list[Node]:
    return [allreduce(ct, group)]


def _examples(rng: np.random.Generator, dt: str) -> list[Example]:
    return [Example((rng.standard_normal((3, 4)).astype(dt),), {"group": "local"}),
            Example((rng.standard_normal((7,)).astype(dt),), {"group": "local"})]


register(OpDef("allreduce", COLLECTIVE, _infer, _ref, _vjp, examples=_examples,
               doc="sum of x over the processes of a group (identity on one process)"))


def allreduce(x: Node, group: str = "local") -> Node:
    """``x`` summed over the processes of ``group`` (the same result on every process)."""
    return apply("allreduce", x, group=group)


def _infer_start(x: TensorType, *, group: str) -> TensorType:
    return _named(_infer, "allreduce_start", x, group)


def _infer_wait(x: TensorType, *, group: str) -> TensorType:
    return _named(_infer, "allreduce_wait", x, group)


def _named(infer: Any, name: str, x: TensorType, group: str) -> TensorType:
    try:
        return infer(x, group=group)
    except TypeError as exc:
        raise TypeError(str(exc).replace("allreduce:", f"{name}:", 1)) from None


def _ref_wait(x: np.ndarray, *, group: str) -> np.ndarray:
    get_group(group)  # an unknown group fails here too
    return np.array(x, copy=True, order="C")


_SPLIT = ("inserted after autodiff by data parallelism (DataParallel with bucket_bytes), which "
          "buckets the gradients; differentiate through allreduce instead")
register(OpDef("allreduce_start", COLLECTIVE, _infer_start, _ref, differentiable=False,
               nondiff_reason=_SPLIT, examples=_examples,
               doc="starts summing x over the processes of a group; read only by its wait"))
register(OpDef("allreduce_wait", COLLECTIVE, _infer_wait, _ref_wait, differentiable=False,
               nondiff_reason=_SPLIT, examples=_examples,
               doc="the sum started by allreduce_start, once it has arrived"))


def allreduce_start(x: Node, group: str = "local") -> Node:
    """Starts ``allreduce(x, group)``; its value may be read only through
    :func:`allreduce_wait`."""
    return apply("allreduce_start", x, group=group)


def allreduce_wait(started: Node, group: str = "local") -> Node:
    """The sum started by :func:`allreduce_start` (``started`` is the start's node)."""
    return apply("allreduce_wait", started, group=group)
