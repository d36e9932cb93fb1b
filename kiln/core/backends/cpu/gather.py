"""Gather (``take``) and its scatter-add gradient (``take_grad``, embedding gradients).

Both view the data as (P, N, Q) around the gathered axis and the indices as a flat vector;
negative indices wrap like NumPy, out-of-range ones raise IndexError. Each has two kernels of
the same loops: numba's (below) and a native one from LLVM IR (:func:`take_ir`, through
:mod:`.native`, compiled ~5x faster; used when that path is on and the dtypes are
generated), which returns a status that its entry point turns into the same IndexError.
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu import jit, native
from kiln.core.backends.cpu.codegen import CodegenError
from kiln.core.backends.cpu.llvm_loop import MEM, Func, wrapper
from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Node


def take_kernel(o, x, idx):
    n_p, n, n_q = x.shape
    m_count = idx.shape[0]
    for i in range(n_p):
        for m in range(m_count):
            k = idx[m]
            if k < 0:
                k += n
            if k < 0 or k >= n:
                raise IndexError("take: index out of range")
            for q in range(n_q):
                o[i, m, q] = x[i, k, q]


def take_grad_kernel(o, ct, idx):
    n_p, n, n_q = o.shape
    m_count = idx.shape[0]
    for i in range(n_p):
        for k in range(n):
            for q in range(n_q):
                o[i, k, q] = 0
    for i in range(n_p):
        for m in range(m_count):
            k = idx[m]
            if k < 0:
                k += n
            if k < 0 or k >= n:
                raise IndexError("take_grad: index out of range")
            for q in range(n_q):
                o[i, k, q] += ct[i, m, q]


def _pnq(shape: tuple, axis: int) -> tuple[int, int, int]:
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]),
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


def take_ir(kind: str, symbol: str, dtype: str, idx_dtype: str) -> str:
    """The LLVM module of ``take`` or ``take_grad`` (``kind``) over flat arrays ``(o, x or
    ct, idx, p)`` with ``p = [P, N, Q, M]``: the loops of :func:`take_kernel` /
    :func:`take_grad_kernel`; status 1 for an index out of range."""
    if dtype not in MEM or idx_dtype not in ("int32", "int64") or (
            kind == "take_grad" and dtype == "bool"):
        raise CodegenError(f"native {kind}: {dtype} data, {idx_dtype} indices not generated")
    f = Func("")
    n_p, n, n_q, n_m = (f.param(k) for k in range(4))
    if kind == "take_grad":
        j, lab = f.begin(f.mul(f.mul(n_p, n), n_q))
        f.store("%o", dtype, j, f.scalar("0", {}))
        f.end(j, lab)
    i, li = f.begin(n_p)
    m, lm = f.begin(n_m)
    k = f.expr.cast(f.load("%idx", idx_dtype, m), "i64").ref
    wrapped, neg, low, high, bad = (f.tmp() for _ in range(5))
    f.emit(f"{wrapped} = add i64 {k}, {n}")
    f.emit(f"{neg} = icmp slt i64 {k}, 0")
    k2 = f.tmp()
    f.emit(f"{k2} = select i1 {neg}, i64 {wrapped}, i64 {k}")
    f.emit(f"{low} = icmp slt i64 {k2}, 0")
    f.emit(f"{high} = icmp sge i64 {k2}, {n}")
    f.emit(f"{bad} = or i1 {low}, {high}")
    f.emit(f"br i1 {bad}, label %range_error, label %in_range{f.labels}")
    f.lines.append(f"in_range{f.labels}:")
    gathered = f.mul(f.add(f.mul(i, n), k2), n_q)      # row k of x (take_grad: of o)
    listed = f.mul(f.add(f.mul(i, n_m), m), n_q)       # row m of o (take_grad: of ct)
    q, lq = f.begin(n_q)
    if kind == "take":
        f.store("%o", dtype, f.add(listed, q), f.load("%x", dtype, f.add(gathered, q)))
    else:
        at = f.add(gathered, q)
        f.store("%o", dtype, at, f.expr.arith("+", f.load("%o", dtype, at),
                                              f.load("%x", dtype, f.add(listed, q))))
    f.end(q, lq)
    f.end(m, lm)
    f.end(i, li)
    f.emit("ret i32 0")
    f.lines += ["range_error:", "  ret i32 1"]
    head = [f"define i32 @{symbol}(ptr %o, ptr %x, ptr %idx, ptr %p) nounwind {{", "entry:"]
    return "\n".join(sorted(f.declare) + head + f.allocas + f.lines + ["}", ""]
                     + wrapper(symbol, 4, {1: ("index", f"{kind}: index out of range")}))


def _native(kind: str, arrays: tuple, p: int, n: int, q: int):
    """(entry point, args) of the native ``kind`` kernel for ``arrays = (o, x or ct, idx)``
    (C-contiguous), or None (the path is off, or the dtypes are not generated)."""
    o, x, idx = arrays
    if not native.enabled() or not all(a.flags.c_contiguous for a in arrays):
        return None
    dtype, idx_dtype = x.dtype.name, idx.dtype.name
    try:
        k = native.kernel(f"{kind} {dtype} {idx_dtype}", [dtype, dtype, idx_dtype, "int64"],
                          lambda symbol: take_ir(kind, symbol, dtype, idx_dtype))
    except CodegenError:
        return None
    args = (o.reshape(-1), x.reshape(-1), idx, np.array([p, n, q, idx.shape[0]], np.int64))
    return k.specialize(args), args


@builder("take")
def build_take(b, node: Node) -> None:
    x_node, idx_node = node.inputs
    axis = node.attrs["axis"]
    p, n, q = _pnq(b.shape(x_node), axis)
    x = b.contiguous(x_node).reshape(p, n, q)
    idx = b.contiguous(idx_node).reshape(-1)
    out = b.out(node).reshape(p, idx.shape[0], q)
    args = (out, x, idx)
    found = _native("take", args, p, n, q)
    if found is not None:
        b.add(*found)
    else:
        b.add(jit.load_function(take_kernel).specialize(args), args)


@builder("take_grad")
def build_take_grad(b, node: Node) -> None:
    ct_node, idx_node, _ = node.inputs
    axis = node.attrs["axis"]
    p, n, q = _pnq(b.shape(node), axis)
    idx = b.contiguous(idx_node).reshape(-1)
    ct = b.contiguous(ct_node).reshape(p, idx.shape[0], q)
    out = b.out(node).reshape(p, n, q)
    args = (out, ct, idx)
    found = _native("take_grad", args, p, n, q)
    if found is not None:
        b.add(*found)
    else:
        b.add(jit.load_function(take_grad_kernel).specialize(args), args)
