"""random_uniform / random_normal: the reference's counter-based generator (SplitMix64 over
uint64 with wraparound, see kiln/core/ops/random.py), reproduced bit for bit.
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu.codegen import jit, native
from kiln.core.backends.cpu.kernels.nn.native_nn import uniform_ir
from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Node


def uniform_kernel(o, key, p):
    # o[i] = the i-th uniform [0, 1) number of stream (key, salt = p[0]), as float64 or float32
    golden = np.uint64(0x9E3779B97F4A7C15)
    m1 = np.uint64(0xBF58476D1CE4E5B9)
    m2 = np.uint64(0x94D049BB133111EB)
    seed_mul = np.uint64(0xD1B54A32D192ED03)
    salt_mul = np.uint64(0x8CB92BA72F3D8DD7)
    s30 = np.uint64(30)
    s27 = np.uint64(27)
    s31 = np.uint64(31)
    s40 = np.uint64(40)
    one = np.uint64(1)
    scale = 1.0 / 16777216.0
    z = np.uint64(key[0]) * seed_mul + np.uint64(p[0]) * salt_mul
    z = (z ^ (z >> s30)) * m1
    z = (z ^ (z >> s27)) * m2
    z = z ^ (z >> s31)
    z = z ^ (np.uint64(key[1]) * golden)
    z = (z ^ (z >> s30)) * m1
    z = (z ^ (z >> s27)) * m2
    base = z ^ (z >> s31)
    for i in range(o.shape[0]):
        h = base + (np.uint64(i) + one) * golden
        h = (h ^ (h >> s30)) * m1
        h = (h ^ (h >> s27)) * m2
        h = h ^ (h >> s31)
        o[i] = np.float64(h >> s40) * scale


@builder("random_uniform", "random_normal")
def build_random(b, node: Node) -> None:
    key = b.contiguous(node.inputs[0]).reshape(-1)
    out = b.flat(node)
    p = np.array([node.attrs["salt"]], np.int64)

    def uniform(o: np.ndarray, label: str | None = None) -> None:
        dt, kt = o.dtype.name, key.dtype.name  # the IR's maker holds names, never arrays
        found = native.try_kernel(f"uniform {o.dtype} {key.dtype}", (o, key),
                                  [node.attrs["salt"], o.shape[0]],
                                  lambda s: uniform_ir(s, dt, kt))
        if found is None:
            args = (o, key, p)
            found = (jit.load_function(uniform_kernel).specialize(args), args)
        b.add(*found, label=label)

    if node.op == "random_uniform":
        uniform(out)
        return
    # Box-Muller on pairs of uniforms, with NumPy's own log and cos (as in the reference), so
    # the numbers are bit-identical whatever libm numba would call.
    n = out.shape[0]
    u = np.empty((n, 2), np.float64)
    uniform(u.reshape(-1), "random_normal:uniform")
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
