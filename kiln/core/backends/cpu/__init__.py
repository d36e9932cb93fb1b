"""The CPU backend: numba kernels, NumPy's BLAS for GEMMs, a planned executor.

``compile_graph(graph) -> CpuProgram``; ``program.run(feeds) -> outputs`` (graph.outputs in
order). See ``program.py`` for the executor (host buffers and kernel calls on top of the
device-neutral planner ``kiln/core/plan.py``, profiler), ``lowering.py`` for the rewrites
applied before planning, ``jit.py`` for the one JIT wrapper (disk cache,
``KILN_JIT=0``), ``codegen.py`` / ``elementwise.py`` for the generated elementwise, fused and
reduction kernels, ``threads.py`` for the thread pools, and one file
per family for the other kernels (``linalg``, ``nn``, ``conv``, ``gather``, ``random``,
``reduce``, ``movement``).

Importing this package registers the ops it covers in ``KERNELS["cpu"]`` (elementwise ops are
covered through code generation from their scalar bodies).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.core.backends.cpu import threads

# numba's OpenMP threads and OpenBLAS's threads spin after their work and steal the cores from
# each other when kernels and GEMMs alternate: make both sleep soon (before numba's pool starts).
threads.configure()

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
from kiln.core.backends.cpu.program import CpuProgram  # noqa: E402
from kiln.core.backends.cpu.registry import BUILDERS  # noqa: E402
from kiln.core.ir import Graph  # noqa: E402
from kiln.core.ops.registry import ELEMENTWISE, FUSED, KERNELS, SHAPE, all_ops  # noqa: E402


def covered_ops() -> set[str]:
    """Names of the registered ops with a CPU kernel (generated, hand-written or NumPy with
    ``out=``), planned as views (``OpDef.view``) or as plan constants (kind SHAPE); the rest
    run on their reference with a warning."""
    names = set(BUILDERS) | set(REDUCE_OPS) | {"logsumexp"}
    for name, op in all_ops().items():
        if op.view is not None or op.kind in (SHAPE, FUSED) or (
                op.kind == ELEMENTWISE and op.scalar is not None):
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
    return CpuProgram(graph, updates)


