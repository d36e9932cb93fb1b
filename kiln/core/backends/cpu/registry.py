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
"""

from __future__ import annotations

from kiln.core.backends.lowering import KernelTable

BUILDERS = KernelTable("cpu")
builder = BUILDERS.register
