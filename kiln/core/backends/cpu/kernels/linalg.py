"""The matmul and gemm builders: each product runs on the engine ``gemm.products`` picks for
the plan (kiln's register-blocked kernel with its epilogues, or OpenBLAS with a preallocated
``out=`` buffer).

Transposed operands are strided views (``x.T @ g`` from autodiff's ``transpose`` nodes): BLAS
takes them without copies. Two degenerate 2-D shapes, where ``np.matmul`` costs several
microseconds of overhead for almost no work (a regression head with one output), run as
generated loops instead: an outer product (inner dimension 1: a broadcast multiply) and a
matrix-vector product (one output column: a multiply with a sum epilogue).
"""

from __future__ import annotations

import numpy as np

from kiln.core import aligned
from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.gemm import native_batched, products
from kiln.core.backends.cpu.kernels.elementwise import Operand, emit_loop
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
    x, y, out = products.operands(b, node)
    # w.T laid out before w's update was fused into an earlier gemm (_pack_early): read that
    y = b.cache.get("packed", {}).get(id(yn), y)
    if x.ndim == 2 and y.ndim == 2 and products.products_native(b) and dense(b, node, x, y, out):
        return
    if x.ndim == 2 and y.ndim == 2 and few_rows(b, node, x, y, out):
        return
    # batches on the register-blocked kernel in any plan (split in plans without BLAS
    # calls), 2-D products there only in plans whose every product is kiln's
    native = products.products_native(b)
    if (x.ndim >= 3 or native) and native_batched.add(b, x, y, out, spread=native):
        return
    b.add(products.MatmulCall(), (x, y, out))


# d @ W.T's copy of a weight's W.T made right after the forward product read W (False: just
# before the product). MLP training step, one process, epochs alternated: 0.912-0.972x the
# time of the late copy (docs/architecture.md, "Dense products"): options.CpuOptions.early_pack

def dense(b, node: Node, x, y, out) -> bool:
    """Adds ``out = x @ y`` on kiln's register-blocked kernel (:mod:`..gemm.native_matmul`), with
    the bias add and ReLU of the kernel right after it as its epilogue where that kernel is
    one (``conv_tile.epilogue``: the pass over the product is gone); False where the kernel
    does not take the product."""
    from kiln.core.backends.cpu.gemm import native_matmul
    from kiln.core.backends.cpu.kernels.conv import conv_tile

    if not native_matmul.suits(x, y, out, packed=True):
        return False
    fused, epi = conv_tile.epilogue(b, x, y)
    if fused is not None and native_matmul.add(
            b, x, y, b.epilogue_target(fused, node).reshape(out.shape), epilogue=epi):
        b.absorb(fused)
        return True
    pack_at = _weight_read(b, node.inputs[1], y)
    gated = _relu_gradient(b, node, out)
    if gated is not None and native_matmul.add(b, x, y, gated[1], pack_at=pack_at,
                                               gate=gated[2:]):
        b.absorb(gated[0])
        return True
    return native_matmul.add(b, x, y, out, pack_at=pack_at)


def few_rows(b, node: Node, x, y, out) -> bool:
    """Adds ``out = x @ y`` for an ``x`` of a few rows (a Dense layer at serving batch sizes)
    on kiln's row-vector kernel (:mod:`..gemm.native_gemv`), with the bias add and ReLU after
    it as its epilogue where they are one (float32: ``conv_tile.epilogue``); False where the
    kernel does not take the product. Only in plans without updates (``predict``, a function
    of no state): a training step at a new batch size compiles nothing new (its products stay
    BLAS's at every size), and serving is where the few rows are."""
    from kiln.core.backends.cpu.gemm import native_gemv
    from kiln.core.backends.cpu.kernels.conv import conv_tile

    if b.program.updates or not native_gemv.suits(x, y, out):
        return False
    fused, epi = conv_tile.epilogue(b, x, y) if out.dtype == np.float32 else (None, None)
    if fused is not None and native_gemv.add(
            b, x, y, b.epilogue_target(fused, node).reshape(out.shape), epilogue=epi):
        b.absorb(fused)
        return True
    return native_gemv.add(b, x, y, out)


# A ReLU's gradient as the fused kernel computes it: dy * float(relu_output > threshold)
RELU_GRADIENT = (("greater", (-1, -2), ()), ("cast", (0,), (("dtype", "float32"),)),
                 ("mul", (-3, 1), ()))


def _relu_gradient(b, node: Node, out: np.ndarray) -> tuple | None:
    """``(kernel, target, g, t)`` where a later kernel multiplies this product (its only
    reader) by a ReLU's gradient mask, ``float(g > t)`` (:data:`RELU_GRADIENT`), writing
    ``target``, and the product's kernel may do it in its epilogue: no kernel between the two
    reads or writes ``target``, ``g`` or ``t``, or the product (the result is written early,
    the product never). In the MLP's step the weight's update sits between the input
    gradient ``d @ W.T`` and that kernel."""
    kernels = b.static.kernels
    at = next((k for k, n in enumerate(kernels) if n is node), None)
    if at is None or b._readers.get(id(node)) != 1:
        return None
    j = next((k for k in range(at + 1, len(kernels))
              if any(i is node for i in kernels[k].inputs)), None)
    if j is None:
        return None
    nxt = kernels[j]
    if (nxt.op != "fused" or nxt.attrs.get("program") != RELU_GRADIENT
            or nxt.inputs[2] is not node or id(nxt) in b.grouped or id(nxt) in b.absorbed
            or any(id(i) not in b.layouts for i in nxt.inputs)):
        return None
    g, t, target = b.array(nxt.inputs[0]), b.array(nxt.inputs[1]), b.out(nxt)
    if (target.shape != out.shape or not target.flags.c_contiguous or t.shape != ()
            or t.dtype != np.float32):
        return None
    watched = (target, g, t, out)
    for k in _run_between(b, at, j):
        touched = [b.array(i) for i in k.inputs if id(i) in b.layouts] + [b.out(k)]
        if any(np.shares_memory(x, w) for x in touched for w in watched):
            return None
    return nxt, target, g, t

def _weight_read(b, yn: Node, y: np.ndarray) -> int | None:
    """Where a product's transposed ``y`` (``d @ W.T``, an input gradient) is best laid out
    for the kernel: right after the plan's first step reading ``W`` (the forward product,
    which just brought it into the cache) where ``W`` is a weight (a ``param``, which no step
    writes before this product reads it: its update comes after its readers); else None
    (just before the product)."""
    from kiln.core.backends.cpu.gemm import native_matmul
    from kiln.core.plan import is_view

    if not (options.current().early_pack and native_matmul.transposed(y)):
        return None
    root = yn
    while root.op != "param" and root.inputs and is_view(root):
        root = root.inputs[0]
    if root.op != "param" or id(root) not in b.layouts:
        return None
    w = b.array(root)
    if not np.shares_memory(w, y):
        return None
    return _after_first_read(b, w)


def _after_first_read(b, w: np.ndarray) -> int | None:
    """The index right after the first step built so far whose arguments may touch ``w``,
    or None."""
    return next((k + 1 for k, step in enumerate(b.steps) if any(
        isinstance(a, np.ndarray) and np.may_share_memory(a, w) for a in step.args)), None)


@builder("gemm")
def build_gemm(b, node: Node) -> None:
    """``alpha * (a @ b) + beta * c`` in one BLAS call (``products.GemmCall``); the planner may
    give the result ``c``'s buffer (an update written in place: kiln/core/memory.py)."""
    an, bn, cn, alpha, beta = node.inputs
    c, out = b.array(cn), b.out(node)
    if products.products_native(b):
        from kiln.core.backends.cpu.gemm import native_matmul

        args = products.gemm_native(b, node)
        if args is not None:
            applied = _applied_update(b, node, out)
            if applied is not None and native_matmul.add(b, *args[:3],
                                                         update=(*args[3:], applied[1])):
                b.absorb(applied[0])
                return
            if native_matmul.add(b, *args[:3], update=args[3:]):
                return
    # in place: the result is c's storage, decided here once (a plan is rebuilt when a
    # Variable's array changes; c is never a feed: passes/gemm.py)
    b.add(products.GemmCall(), (b.array(an), b.array(bn), None if products.in_place(c, out) else c,
                                b.array(alpha), b.array(beta), out))


def _applied_update(b, node: Node, out: np.ndarray) -> tuple | None:
    """``(add node, w)`` where a later kernel adds this ``gemm``'s result into a weight in
    place (SGD momentum: ``v = momentum * v - lr * g`` is the gemm, then ``w = w + v``), and
    the gemm's kernel may do that add in its epilogue: ``w`` a float32 array of the result's
    shape, the add's output in ``w``'s own storage, and no kernel between the two reading or
    writing ``w`` (it would see the weight updated early). The add is then one kernel less,
    and ``w`` is read and written while the product's block is in registers."""
    kernels = b.static.kernels
    at = next((k for k, n in enumerate(kernels) if n is node), None)
    if at is None:
        return None
    for j in range(at + 1, len(kernels)):
        add = kernels[j]
        if any(i is node for i in add.inputs):
            break
    else:
        return None
    if add.op != "add" or len(add.inputs) != 2 or add.dtype != "float32":
        return None
    wn = add.inputs[0] if add.inputs[1] is node else add.inputs[1]
    if wn is node or id(add) in b.absorbed:
        return None
    w, target = b.array(wn), b.out(add)
    if not (w.shape == out.shape and w.flags.c_contiguous and products.in_place(w, target)):
        return None
    readers = []
    for k in _run_between(b, at, j):
        reads = [b.array(i) for i in k.inputs if id(i) in b.layouts]
        if np.shares_memory(b.out(k), w):
            return None
        if any(np.shares_memory(r, w) for r in reads):
            if not _reads_transposed(b, k, w):
                return None
            readers.append(k)
    if readers and not _pack_early(b, readers, w):
        return None
    return add, w


def _reads_transposed(b, node: Node, w: np.ndarray) -> bool:
    """Whether ``node`` is a product ``d @ w.T`` (an input gradient through ``w``) that reads
    ``w`` only as that ``w.T``."""
    if node.op != "matmul" or len(node.inputs) != 2 or any(
            id(i) not in b.layouts for i in node.inputs):
        return False
    x, y = b.array(node.inputs[0]), b.array(node.inputs[1])
    return (not np.shares_memory(x, w) and y.shape == w.shape[::-1]
            and y.strides == w.strides[::-1]
            and y.__array_interface__["data"][0] == w.__array_interface__["data"][0])


def _pack_early(b, readers: list[Node], w: np.ndarray) -> bool:
    """Lays ``w.T`` out for the kernel (``native_matmul.add_transpose``) right after the
    plan's first step reading ``w`` (before the gemm that will update ``w`` in its epilogue),
    and hands that copy to the products ``readers`` (``d @ w.T``: built later, they read it,
    on the kernel or on BLAS alike: ``b.cache["packed"]``); False where there is no such step
    or the transpose does not build (the update is then not fused)."""
    from kiln.core.backends.cpu.gemm import native_matmul

    at = _after_first_read(b, w)
    if at is None:
        return False
    packed = aligned.empty(w.shape[::-1], w.dtype)
    if not native_matmul.add_transpose(b, w, packed):
        return False
    b.steps.insert(at, b.steps.pop())
    table = b.cache.setdefault("packed", {})
    for k in readers:
        table[id(k.inputs[1])] = packed
    return True


def _run_between(b, at: int, j: int) -> list[Node]:
    """The kernels that run between the plan's kernels ``at`` and ``j`` (positions in
    ``b.static.kernels``): a merged group's members run where its head is (the planner's
    loop builds the group there), not at their own places."""
    out: list[Node] = []
    for n in b.static.kernels[at + 1:j]:
        if id(n) in b.active:
            out += [n, *b.active[id(n)]]
        elif id(n) not in b.grouped:
            out.append(n)
    return out
