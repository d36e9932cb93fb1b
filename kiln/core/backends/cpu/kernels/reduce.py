"""Reductions without a generated loop: argmax / argmin (NumPy with ``out=``).

sum, mean, max, min and prod are generated loops (``elementwise.py``), logsumexp is lowered to
them (``lowering.py``), size_of is a per-plan constant (``program.py``).
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Node


@builder("argmax", "argmin")
def build_arg_reduce(b, node: Node) -> None:
    fn = np.argmax if node.op == "argmax" else np.argmin
    x = b.array(node.inputs[0])
    out = b.out(node)
    axis, keepdims = node.attrs["axis"], node.attrs["keepdims"]

    def arg_reduce() -> None:
        fn(x, axis=axis, out=out, keepdims=keepdims)

    b.add(arg_reduce, (), label=node.op)
