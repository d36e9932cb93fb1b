"""The CPU backend: numba kernels, NumPy's BLAS for GEMMs, a planned executor.

``compile_graph(graph) -> CpuProgram``; ``program.run(feeds) -> outputs`` (graph.outputs in
order). See ``program.py`` for the executor, ``jit.py`` for the one JIT wrapper (disk cache,
``KILN_JIT=0``), ``codegen.py`` / ``elementwise.py`` for the generated elementwise, fused and
reduction kernels, and one file per family for the hand-written kernels.

Importing this package registers the ops it covers in ``KERNELS["cpu"]`` (elementwise ops are
covered through code generation from their scalar bodies).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

# numba's OpenMP threads spin after a parallel region and steal the cores from OpenBLAS when
# kernels and GEMMs alternate (see shared/notes/numba-measurements.md): make them sleep.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from kiln.core.backends.cpu import (  # noqa: E402,F401  (registration side effects)
    conv,
    gather,
    linalg,
    movement,
    nn,
    random,
    reduce,
)
from kiln.core.backends.cpu.codegen import REDUCE_OPS  # noqa: E402
from kiln.core.backends.cpu.program import PLAN_CONSTANTS, CpuProgram  # noqa: E402
from kiln.core.backends.cpu.registry import BUILDERS, VIEWS  # noqa: E402
from kiln.core.ir import Graph  # noqa: E402
from kiln.core.ops.registry import ELEMENTWISE, FUSED, KERNELS, all_ops  # noqa: E402


def covered_ops() -> set[str]:
    """Names of the registered ops with a CPU kernel (generated, hand-written, view or
    NumPy-with-out call); the rest run on their reference with a warning."""
    names = set(BUILDERS) | set(VIEWS) | set(PLAN_CONSTANTS) | set(REDUCE_OPS) | {"logsumexp"}
    for name, op in all_ops().items():
        if op.kind in (ELEMENTWISE, FUSED) and (op.scalar is not None or op.kind == FUSED):
            names.add(name)
    return {n for n in names if n in all_ops()}


def register_kernels() -> set[str]:
    """(Re)registers the covered ops in ``KERNELS["cpu"]`` (ops registered later, e.g. by a new
    op family, are picked up by calling this again)."""
    KERNELS.setdefault("cpu", set()).update(covered_ops())
    return KERNELS["cpu"]


register_kernels()


def compile_graph(graph: Graph, updates: Sequence[tuple[int, Any]] | None = None) -> CpuProgram:
    """Compiles ``graph`` for the CPU.

    Args:
        graph: the graph to run.
        updates: optional ``(output index, Variable)`` pairs naming the outputs that are new
            values of Variables, so they can be written into the Variables' buffers directly.

    Returns:
        A :class:`CpuProgram` (``run(feeds)``, ``profile(feeds)``).
    """
    register_kernels()
    if updates is None:
        updates = _caller_updates(graph)
    return CpuProgram(graph, updates)


def _caller_updates(graph: Graph) -> list[tuple[int, Any]] | None:
    """The (output index, Variable) pairs of the ``kiln.function`` compiling ``graph``.

    Interim bridge: ``executor.Function`` does not pass its updates to ``compile_graph`` yet,
    so they are read from the calling Function (its outputs come first, then one value per
    update, in order). Returns None when the caller is not a Function.
    """
    from kiln.core.executor import Function

    try:
        caller = sys._getframe(2).f_locals.get("self")
    except ValueError:  # pragma: no cover - shallow stack
        return None
    if not isinstance(caller, Function) or not hasattr(caller, "updates"):
        return None
    n = len(caller.outputs)
    if len(graph.outputs) != n + len(caller.updates):
        return None
    return [(n + k, var) for k, (var, _) in enumerate(caller.updates)]


__all__ = ["compile_graph", "CpuProgram", "covered_ops", "register_kernels"]
