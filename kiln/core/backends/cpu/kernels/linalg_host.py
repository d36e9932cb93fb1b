"""Decompositions and solvers (``kiln/core/ops/linalg_host.py``) on the CPU: each runs its
op's NumPy reference (LAPACK through ``np.linalg``) on the host and copies the result into
the output buffer. These matrices are small next to the products around them; a batch is one
NumPy call (NumPy loops over it in C)."""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Node
from kiln.core.ops.linalg_host import HOST_OPS
from kiln.core.ops.registry import get_op


@builder(*HOST_OPS)
def build_host_linalg(b, node: Node) -> None:
    ref = get_op(node.op).ref
    ins = [b.array(x) for x in node.inputs]
    out = b.out(node)
    attrs = dict(node.attrs)

    def run() -> None:
        np.copyto(out, ref(*ins, **attrs), casting="unsafe")

    b.add(run, (), label=node.op)
