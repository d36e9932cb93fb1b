"""How each op runs on the CPU backend.

* ``VIEWS[op](node, in_layouts, out_shape) -> Layout | None``: movement ops that are new layouts
  of their input's storage (None: this case needs a copy, done by ``BUILDERS[op]``);
* ``BUILDERS[op](b, node)``: adds the kernel calls computing ``node`` into its output buffer
  (``b`` is the executor's :class:`~kiln.core.backends.cpu.program.PlanBuilder`);
* ``SHAPE_ONLY[op]``: input positions whose data is never read (only their shape).

Elementwise ops need no entry: they are generated from their scalar bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

VIEWS: dict[str, Callable[..., Any]] = {}
BUILDERS: dict[str, Callable[..., None]] = {}
SHAPE_ONLY: dict[str, frozenset[int]] = {
    "broadcast_like": frozenset({1}),
    "reshape_like": frozenset({1}),
    "size_of": frozenset({0}),
    "random_uniform": frozenset({1}),
    "random_normal": frozenset({1}),
    "slice_grad": frozenset({1}),
    "take_grad": frozenset({2}),
}


def view(*names: str):
    """Decorator registering a view rule for ops ``names``."""
    def deco(fn):
        for n in names:
            VIEWS[n] = fn
        return fn
    return deco


def builder(*names: str):
    """Decorator registering a kernel builder for ops ``names``."""
    def deco(fn):
        for n in names:
            BUILDERS[n] = fn
        return fn
    return deco


def data_inputs(node: Any) -> list[int]:
    """Positions of the inputs whose values (not only shapes) ``node`` reads."""
    skip = SHAPE_ONLY.get(node.op, frozenset())
    return [i for i in range(len(node.inputs)) if i not in skip]
