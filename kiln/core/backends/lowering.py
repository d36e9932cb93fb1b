"""The lowering interface: how a backend supplies its kernels (docs/architecture.md, "Backends").

The planner (``kiln/core/plan.py``) decides shapes, layouts, views, lifetimes and buffers for
every backend; a backend adds only, per op, the function that emits that op's kernel launches
into its plan. Every backend keeps them in a :class:`KernelTable`:

* ``table.register("matmul", ...)``: a decorator registering the emitter of those ops. Its
  arguments are the backend's (the CPU's ``(builder, node)``; the CUDA's ``(planner, node,
  in_layouts, type)``), but the lookup is the same everywhere;
* elementwise ops, fused nodes and the generated reductions need no entry: every backend
  generates their loops from the ops' ``scalar`` bodies;
* an op without an emitter runs its NumPy reference (the specification), with a one-time
  :func:`warn_fallback`;
* :meth:`KernelTable.covered` is what the backend runs without its reference: what the
  registry tests and ``KERNELS[backend]`` report.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

from kiln.core.ops.registry import ELEMENTWISE, FUSED, SHAPE, OpDef, all_ops


class KernelTable:
    """Op name -> the function emitting its kernel, for one backend.

    Args:
        backend: the backend's name (for messages).

    Example:
        >>> KERNELS = KernelTable("cpu")
        >>> @KERNELS.register("argmax", "argmin")
        ... def build_arg_reduce(b, node): ...
    """

    def __init__(self, backend: str):
        self.backend = backend
        self.emitters: dict[str, Callable[..., Any]] = {}

    def register(self, *ops: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: ``fn`` emits the kernels of ``ops``."""
        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            for op in ops:
                self.emitters[op] = fn
            return fn
        return deco

    def get(self, op: str, default: Any = None) -> Callable[..., Any] | None:
        return self.emitters.get(op, default)

    def __contains__(self, op: object) -> bool:
        return op in self.emitters

    def __iter__(self) -> Iterator[str]:
        return iter(self.emitters)

    # dict-like access, so tests can monkeypatch an entry (monkeypatch.delitem / setitem)
    def __getitem__(self, op: str) -> Callable[..., Any]:
        return self.emitters[op]

    def __setitem__(self, op: str, fn: Callable[..., Any]) -> None:
        self.emitters[op] = fn

    def __delitem__(self, op: str) -> None:
        del self.emitters[op]

    def covered(self, generated: Callable[[str, OpDef], bool]) -> set[str]:
        """The registered ops this backend runs without their reference: an emitter here, a
        loop generated from scalar bodies (``generated(name, op)``, plus every elementwise op
        with a scalar body and fused nodes), a view (``OpDef.view``) or a plan constant (kind
        SHAPE)."""
        names = set()
        for name, op in all_ops().items():
            if (name in self.emitters or op.view is not None or op.kind in (SHAPE, FUSED)
                    or (op.kind == ELEMENTWISE and op.scalar is not None)
                    or generated(name, op)):
                names.add(name)
        return names


_warned: set[tuple[str, str]] = set()


def warn_fallback(backend: str, op: str, reason: str = "", detail: str = "") -> None:
    """Warns once per backend and op that ``op`` runs its NumPy reference."""
    if (backend, op) in _warned:
        return
    _warned.add((backend, op))
    why = f" ({reason})" if reason else ""
    warnings.warn(f"kiln {backend} backend: no kernel for op {op!r}{why}; running its NumPy "
                  f"reference{detail} (slow)", RuntimeWarning, stacklevel=3)


def reset_warnings() -> None:
    """Forgets which fallbacks were warned about (tests)."""
    _warned.clear()
