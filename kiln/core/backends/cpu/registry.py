"""How each op runs on the CPU backend: ``BUILDERS`` (a
:class:`~kiln.core.backends.lowering.KernelTable`) maps an op to the function
``builder(b, node)`` that adds the kernel calls computing ``node`` into its output buffer (``b``
is the executor's :class:`~kiln.core.backends.cpu.runtime.program.PlanBuilder`); ``@builder("op")``
registers one.

Elementwise ops, fused nodes and the generated reductions need no entry: their loops are
generated from the ops' scalar bodies (``elementwise.py``). Views and shape-only inputs are
facts of the ops (``OpDef.view``, ``OpDef.shape_only``), planned in ``kiln/core/plan.py``; an
op with a view rule registers a builder here only for the case its view rule declines (a
reshape of strided data is a copy).

:func:`build_reference` runs an op's NumPy reference: the program's fallback for an op without
a builder (warned), and the builders' for a hand-written kernel whose one implementation, its
native (LLVM IR) kernel, does not run here (``KILN_NATIVE=0``, ``KILN_JIT=0``, no usable
llvmlite: docs/architecture.md, "One implementation per kernel").
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.lowering import KernelTable
from kiln.core.ir import Node
from kiln.core.ops.registry import get_op

BUILDERS = KernelTable("cpu")
builder = BUILDERS.register


def build_reference(b, node: Node) -> None:
    """Adds a step running ``node``'s NumPy reference into its output buffer."""
    ref = get_op(node.op).ref
    ins = [b.array(i) for i in node.inputs]
    out = b.out(node)
    attrs = dict(node.attrs)

    def run_reference() -> None:
        with np.errstate(all="ignore"):
            value = ref(*ins, **attrs)
        np.copyto(out, np.asarray(value), casting="unsafe")

    b.add(run_reference, (), label=f"{node.op}(reference)")


def reference_unless_native(b, node: Node) -> bool:
    """True where the native kernels run (``codegen.native.enabled()``); else adds ``node``'s
    reference (:func:`build_reference`) and returns False: the builder of an op whose kernels
    are native only then adds nothing more."""
    from kiln.core.backends.cpu.codegen import native

    if native.enabled():
        return True
    build_reference(b, node)
    return False
