"""matmul: NumPy's BLAS with a preallocated ``out=`` buffer.

Transposed operands are strided views (``x.T @ g`` from autodiff's ``transpose`` nodes): BLAS
takes them without copies. Two degenerate 2-D shapes, where ``np.matmul`` costs several
microseconds of overhead for almost no work (a regression head with one output), run as
generated loops instead: an outer product (inner dimension 1: a broadcast multiply) and a
matrix-vector product (one output column: a multiply with a sum epilogue).
"""

from __future__ import annotations

from kiln.core.backends.cpu import threads
from kiln.core.backends.cpu.elementwise import Operand, emit_loop
from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Node

OUTER = (("mul", (-1, -2), ()),)
MATVEC = (("mul", (-1, -2), ()), ("sum", (0,), (("axis", (1,)), ("keepdims", True))))


@builder("matmul")
def build_matmul(b, node: Node) -> None:
    xn, yn = node.inputs
    if xn.ndim == 2 and yn.ndim == 2 and node.dtype in ("float32", "float64"):
        x = Operand(b.layout(xn), xn.shape, xn.dtype, b.flat(xn))
        out = Operand(b.layout(node), node.shape, node.dtype, b.flat(node))
        if xn.shape[1] == 1:  # (M, 1) @ (1, N): broadcast multiply
            y = Operand(b.layout(yn), yn.shape, yn.dtype, b.flat(yn))
            emit_loop(b, OUTER, [x, y], out, "matmul(outer)")
            return
        if yn.shape[1] == 1:  # (M, K) @ (K, 1): multiply by the row y.T, sum over K
            y = Operand(b.layout(yn).transpose((1, 0)), yn.shape[::-1], yn.dtype, b.flat(yn))
            emit_loop(b, MATVEC, [x, y], out, "matmul(matvec)")
            return
    x, out = b.array(xn), b.out(node)
    if yn.ndim == 2 and xn.ndim > 2 and x.flags.c_contiguous and out.flags.c_contiguous:
        # batch axes folded into the rows: one GEMM (np.matmul would loop over the batch)
        x = x.reshape(-1, x.shape[-1])
        out = out.reshape(-1, out.shape[-1])
    b.add(threads.MatmulCall(), (x, b.array(yn), out))


@builder("gemm")
def build_gemm(b, node: Node) -> None:
    """``alpha * (a @ b) + beta * c`` in one BLAS call (``threads.GemmCall``); the planner may
    give the result ``c``'s buffer (an update written in place: kiln/core/memory.py)."""
    an, bn, cn, alpha, beta = node.inputs
    c, out = b.array(cn), b.out(node)
    # in place: the result is c's storage, decided here once (a plan is rebuilt when a
    # Variable's array changes; c is never a feed: passes/gemm.py)
    same = (c.__array_interface__["data"][0] == out.__array_interface__["data"][0]
            and c.strides == out.strides)
    b.add(threads.GemmCall(), (b.array(an), b.array(bn), None if same else c,
                                b.array(alpha), b.array(beta), out))
