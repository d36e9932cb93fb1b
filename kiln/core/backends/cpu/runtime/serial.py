"""Small kernels on the caller's thread: a plan step split into parts for kiln's workers
(:class:`~kiln.core.backends.cpu.runtime.threads.SplitCall`) whose work is below
``options.CpuOptions.serial_work`` at the plan's shapes runs its parts one
after the other on the thread that calls the plan, waking no worker (:func:`serialize`,
called once when a plan is built: a decision of the planner, not of the pools).

A batch-1 (serving) plan of the MNIST convnet then runs every kernel on its caller's thread:
on the 2-core test host under load (issue 47) a call took 47 ms split against 1.3 ms on one
thread; a plan's large kernels (a training batch) are split as before. Generated loops
(elementwise, fused, reductions) keep their own rule (``kernels/elementwise.py``: they split
from a number of bytes moved), and the bodies of ``scan`` (``loop.py``) split as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.core.backends.cpu.lowering import runs_serial
from kiln.core.backends.cpu.runtime.threads import SplitCall
from kiln.core.ops.registry import ELEMENTWISE, FUSED, REDUCE, get_op


class SerialParts:
    """A :class:`SplitCall`'s parts run in order on the calling thread (the same kernel
    calls on the same arguments: the same results)."""

    __slots__ = ("entry", "parts", "change")

    def __init__(self, split: SplitCall):
        self.entry: Callable = split.entry
        self.parts: int = split.parts
        self.change: Callable[[tuple, int], tuple] = split.change

    def __call__(self, *args: Any) -> None:
        entry, change = self.entry, self.change
        for k in range(self.parts):
            entry(*change(args, k))


def serialize(plan: Any, shape_of: Callable) -> int:
    """Makes each split step of ``plan`` (a built ``program.Plan``, its entry points settled)
    whose hand-written kernel does less than ``serial_work`` run on the caller's thread;
    returns how many steps changed."""
    changed = 0
    for k, step in enumerate(plan.steps):
        node = step.node
        if (not isinstance(step.fn, SplitCall) or node is None or step.fn.engine is not None
                or step.fn.sized):
            continue  # not split, its engine forced, or its parts sized by its kernel's own
            # rule (runtime.parts.add_parts)
        if get_op(node.op).kind in (ELEMENTWISE, FUSED, REDUCE):
            continue  # generated loops: kernels/elementwise.py decides from bytes moved
        if not runs_serial(node, shape_of):
            continue
        step.fn = SerialParts(step.fn)
        fn, args = plan.calls[k]
        plan.calls[k] = (step.fn, args)
        changed += 1
    return changed
