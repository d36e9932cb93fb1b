"""The CPU backend: kernels compiled for the host (generated loops as LLVM IR through
llvmlite, numba where the IR generator does not go), matrix products on kiln's private
OpenBLAS or its own register-blocked kernels, and a planned executor.

``compile_graph(graph) -> CpuProgram``; ``program.run(feeds) -> outputs`` (graph.outputs in
order). The layout (docs/architecture.md, "The CPU backend"), arrows pointing down:

* ``runtime/``: the program (plans of buffers and kernel calls on the device-neutral planner
  ``kiln/core/plan.py``, feeds read in place, ``scan`` bodies) and the worker API that runs a
  kernel's parts (kiln's thread pool, the spin pool);
* ``kernels/``: hand-written kernels by family (elementwise and fused loops, linalg, conv,
  pool, nn, gather, image, sort, random, movement, reduce, collective);
* ``gemm/``: every matrix product behind ``gemm.products``, which picks the engine;
* ``codegen/``: loop specs -> numba source or LLVM IR, native kernels, numba's side of the
  one JIT loader (``kiln/core/backends/jit.py``; ``KILN_JIT=0``), compile batches;
* ``registry.py`` (op -> builder), ``lowering.py`` (rewrites before planning), ``target.py``
  (the CPU kiln compiles for and the choices that follow from its features: the one place
  they are read; ``KILN_CPU``).

This package imports the kernel families for their registration; nothing in it imports this
``__init__``. Importing it registers the ops it covers in ``KERNELS["cpu"]`` (elementwise ops
are covered through code generation from their scalar bodies).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.core.backends.cpu import options, target
from kiln.core.backends.cpu.runtime import threads

# the CPU kiln compiles for (the host, or KILN_CPU's; refused here if the host cannot run it),
# chosen before numba compiles anything (target.py)
target.process()
# numba's OpenMP threads and OpenBLAS's threads spin after their work and steal the cores from
# each other when kernels and GEMMs alternate: make both sleep soon (before numba's pool starts).
threads.configure()

from kiln.core.backends.cpu.codegen.spec import REDUCE_OPS  # noqa: E402
from kiln.core.backends.cpu.kernels import (  # noqa: E402,F401  (registration side effects)
    collective,
    gather,
    image,
    linalg,
    linalg_host,
    movement,
    random,
    reduce,
    sort,
)
from kiln.core.backends.cpu.kernels.conv import builders  # noqa: E402,F401  (registration side effects)
from kiln.core.backends.cpu.kernels.nn import nn  # noqa: E402,F401  (registration side effects)
from kiln.core.backends.cpu.kernels.pool import pool  # noqa: E402,F401  (registration side effects)
from kiln.core.backends.cpu.registry import BUILDERS  # noqa: E402
from kiln.core.backends.cpu.runtime import loop  # noqa: E402,F401  (registration side effects)
from kiln.core.backends.cpu.runtime.program import CpuProgram  # noqa: E402
from kiln.core.ir import Graph  # noqa: E402
from kiln.core.ops.registry import KERNELS  # noqa: E402


def covered_ops() -> set[str]:
    """Names of the registered ops the CPU runs without their reference: a builder
    (``registry.BUILDERS``), a generated loop, a view or a plan constant."""
    return BUILDERS.covered(lambda name, op: name in REDUCE_OPS or name == "logsumexp")


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


def describe() -> str:
    """The CPU target and the engines it enables, for the compile report (target.py), and the
    options (options.py) that differ from the defaults, if any."""
    tuned = options.current().describe()
    return target.current().describe() + (f"\n{tuned}" if tuned else "")


