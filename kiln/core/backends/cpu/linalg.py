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
    x, y, out = _operands(b, node)
    if x.ndim == 2 and y.ndim == 2 and products_native(b) and dense(b, node, x, y, out):
        return
    b.add(threads.MatmulCall(), (x, y, out))


def _operands(b, node: Node) -> tuple:
    """``(x, y, out)`` of a matmul node as its GEMM takes them: batch axes of ``x`` folded into
    the rows where ``y`` is a matrix (one GEMM; np.matmul would loop over the batch)."""
    xn, yn = node.inputs
    x, out = b.array(xn), b.out(node)
    if yn.ndim == 2 and xn.ndim > 2 and x.flags.c_contiguous and out.flags.c_contiguous:
        x = x.reshape(-1, x.shape[-1])
        out = out.reshape(-1, out.shape[-1])
    return x, b.array(yn), out


# Ops whose kernels may call BLAS (a matmul: decided per node, :func:`products_native`).
BLAS_OPS = frozenset({"gemm", "conv2d", "conv2d_backprop_input", "conv2d_backprop_filter",
                      "scan"})


def products_native(b) -> bool:
    """Whether every product of the plan being built runs on kiln's own kernel (then its Dense
    products take it: :func:`dense`); decided once per plan. OpenBLAS's worker threads spin
    for ~0.3 ms after each of its calls (``threads.BLAS_TIMEOUT``), and a kernel on kiln's
    threads in that window shares a core with the spin: in the MLP training step (whose
    input-gradient products ``d @ W.T`` and kernel-gradient ``gemm`` stay BLAS's), the
    native forward product right after the previous step's BLAS calls took 854 against
    BLAS's 572 us, the step 1.2x slower. A plan that calls no BLAS (a Dense stack's
    ``predict``) has no such spin."""
    known = b.cache.get("products_native")
    if known is None:
        known = True
        for node in b.static.kernels:
            if node.op in BLAS_OPS:
                known = False
            elif node.op == "matmul":
                xn, yn = node.inputs
                if xn.ndim == 2 and yn.ndim == 2 and 1 in (xn.shape[1], yn.shape[1]):
                    continue  # the outer product and matrix-vector loops: no BLAS
                from kiln.core.backends.cpu import native_matmul

                x, y, out = _operands(b, node)
                known = x.ndim == 2 and y.ndim == 2 and native_matmul.suits(x, y, out)
            if not known:
                break
        b.cache["products_native"] = known
    return known


def dense(b, node: Node, x, y, out) -> bool:
    """Adds ``out = x @ y`` on kiln's register-blocked kernel (:mod:`.native_matmul`), with
    the bias add and ReLU of the kernel right after it as its epilogue where that kernel is
    one (``conv_tile.epilogue``: the pass over the product is gone); False where the kernel
    does not take the product."""
    from kiln.core.backends.cpu import conv_tile, native_matmul

    if not native_matmul.suits(x, y, out):
        return False
    fused, epi = conv_tile.epilogue(b, x, y)
    if fused is not None and native_matmul.add(
            b, x, y, b.epilogue_target(fused, node).reshape(out.shape), epilogue=epi):
        b.absorb(fused)
        return True
    return native_matmul.add(b, x, y, out)


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
