"""random_uniform / random_normal: the reference's counter-based generator (SplitMix64 over
uint64 with wraparound, see kiln/core/ops/random.py), reproduced bit for bit by one native
kernel (``native_nn.uniform_ir``); where the native path is off, the ops run their NumPy
references (the same numbers).
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.kernels.nn.native_nn import uniform_ir
from kiln.core.backends.cpu.registry import build_reference, builder
from kiln.core.ir import Node


@builder("random_uniform", "random_normal")
def build_random(b, node: Node) -> None:
    key = b.contiguous(node.inputs[0]).reshape(-1)
    out = b.flat(node)
    n = out.shape[0]
    # random_normal: Box-Muller on pairs of uniforms (float64)
    u = out if node.op == "random_uniform" else np.empty((n, 2), np.float64)
    flat = u.reshape(-1)
    dt, kt = flat.dtype.name, key.dtype.name  # the IR's maker holds names, never arrays
    found = native.try_kernel(f"uniform {flat.dtype} {key.dtype}", (flat, key),
                              [node.attrs["salt"], flat.shape[0]],
                              lambda s: uniform_ir(s, dt, kt))
    if found is None:  # the native path is off: the NumPy reference
        build_reference(b, node)
        return
    if node.op == "random_uniform":
        b.add(*found)
        return
    b.add(*found, label="random_normal:uniform")
    # Box-Muller with NumPy's own log and cos (as in the reference), so the numbers are
    # bit-identical whatever libm a kernel would call.
    u1, lg, u2, cs = (np.empty(n, np.float64) for _ in range(4))

    def box_muller() -> None:
        np.subtract(1.0, u[:, 0], out=u1)
        np.log(u1, out=lg)
        np.multiply(-2.0, lg, out=lg)
        np.sqrt(lg, out=lg)
        np.multiply(2.0 * np.pi, u[:, 1], out=u2)
        np.cos(u2, out=cs)
        np.multiply(lg, cs, out=lg)
        np.copyto(out, lg, casting="unsafe")

    b.add(box_muller, (), label="random_normal:box_muller")
