"""Gather (``take``) and its scatter-add gradient (``take_grad``, embedding gradients); the
per-row gather ``take_along_axis`` and its gradient.

All view the data as (P, N, Q) around the gathered axis; negative indices wrap like NumPy,
out-of-range ones raise IndexError naming the op. The numba kernels (below) read one index
per gathered element, (P, M, Q): ``take_along_axis``'s own indices, or ``take``'s index vector
broadcast over P and Q. ``take`` / ``take_grad`` also have a native kernel from LLVM IR
(:func:`take_ir`, through :mod:`..codegen.native`, compiled ~5x faster; used when that path
is on and the dtypes are generated), which returns a status that its entry point turns into the same
IndexError.
"""
from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu.codegen import jit, native
from kiln.core.backends.cpu.codegen.llvm_expr import Val
from kiln.core.backends.cpu.codegen.llvm_loop import MEM, Func
from kiln.core.backends.cpu.codegen.spec import CodegenError
from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Node


def gather_kernel(o, x, idx):
    """``o[i, m, q] = x[i, idx[i, m, q], q]``; 1 for an index out of range (after the wrap)."""
    n_p, n, n_q = x.shape
    n_m = idx.shape[1]
    for i in range(n_p):
        for m in range(n_m):
            for q in range(n_q):
                k = idx[i, m, q]
                if k < 0:
                    k += n
                if k < 0 or k >= n:
                    return 1
                o[i, m, q] = x[i, k, q]
    return 0


def scatter_add_kernel(o, ct, idx):
    """``o[i, idx[i, m, q], q] += ct[i, m, q]`` into a zeroed ``o``; 1 for an index out of
    range."""
    n_p, n, n_q = o.shape
    n_m = idx.shape[1]
    for i in range(n_p):
        for k in range(n):
            for q in range(n_q):
                o[i, k, q] = 0
    for i in range(n_p):
        for m in range(n_m):
            for q in range(n_q):
                k = idx[i, m, q]
                if k < 0:
                    k += n
                if k < 0 or k >= n:
                    return 1
                o[i, k, q] += ct[i, m, q]
    return 0


def _add_checked(b, op: str, kernel, args: tuple) -> None:
    """A step calling the numba ``kernel`` that raises IndexError naming ``op`` on status 1."""
    fn = jit.load_function(kernel).specialize(args)

    def checked(*a) -> None:
        if fn(*a):
            raise IndexError(f"{op}: index out of range")

    b.add(checked, args, label=op)


def _pnq(shape: tuple, axis: int) -> tuple[int, int, int]:
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]),
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


def take_ir(kind: str, symbol: str, dtype: str, idx_dtype: str) -> str:
    """The LLVM module of ``take`` or ``take_grad`` (``kind``) over flat arrays ``(o, x or
    ct, idx, p)`` with ``p = [P, N, Q, M]``: the loops of :func:`gather_kernel` /
    :func:`scatter_add_kernel` for one index vector; status 1 for an index out of range."""
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
    wrapped, neg, k2, low, high, bad = (f.tmp() for _ in range(6))
    f.emit(f"{wrapped} = add i64 {k}, {n}")
    f.emit(f"{neg} = icmp slt i64 {k}, 0")
    f.emit(f"{k2} = select i1 {neg}, i64 {wrapped}, i64 {k}")
    f.emit(f"{low} = icmp slt i64 {k2}, 0")
    f.emit(f"{high} = icmp sge i64 {k2}, {n}")
    f.emit(f"{bad} = or i1 {low}, {high}")
    f.fail_when(Val(bad, "b"), 1)
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
    return f.function(symbol, ["o", "x", "idx", "p"],
                      {1: ("index", f"{kind}: index out of range")})


@builder("take")
def build_take(b, node: Node) -> None:
    x_node, idx_node = node.inputs
    axis = node.attrs["axis"]
    p, n, q = _pnq(b.shape(x_node), axis)
    x = b.contiguous(x_node).reshape(p, n, q)
    idx = b.contiguous(idx_node).reshape(-1)
    out = b.out(node).reshape(p, idx.shape[0], q)
    args = (out, x, idx)
    dt, it = x.dtype.name, idx.dtype.name  # the IR's maker holds names, never arrays
    found = native.try_kernel(f"take {x.dtype} {idx.dtype}", args, [p, n, q, idx.shape[0]],
                              lambda s: take_ir("take", s, dt, it))
    if found is not None:
        b.add(*found)
    else:
        rows = np.broadcast_to(idx.reshape(1, -1, 1), (p, idx.shape[0], q))
        _add_checked(b, "take", gather_kernel, (out, x, rows))


@builder("take_grad")
def build_take_grad(b, node: Node) -> None:
    ct_node, idx_node, _ = node.inputs
    axis = node.attrs["axis"]
    p, n, q = _pnq(b.shape(node), axis)
    idx = b.contiguous(idx_node).reshape(-1)
    ct = b.contiguous(ct_node).reshape(p, idx.shape[0], q)
    out = b.out(node).reshape(p, n, q)
    args = (out, ct, idx)
    dt, it = ct.dtype.name, idx.dtype.name
    found = native.try_kernel(f"take_grad {ct.dtype} {idx.dtype}", args,
                              [p, n, q, idx.shape[0]],
                              lambda s: take_ir("take_grad", s, dt, it))
    if found is not None:
        b.add(*found)
    else:
        rows = np.broadcast_to(idx.reshape(1, -1, 1), (p, idx.shape[0], q))
        _add_checked(b, "take_grad", scatter_add_kernel, (out, ct, rows))


@builder("take_along_axis", "take_along_axis_grad")
def build_take_along(b, node: Node) -> None:
    """Both as (P, N, Q) around the axis, the indices and the gathered side as (P, M, Q)."""
    axis = node.attrs["axis"]
    idx_node = node.inputs[1]
    full = b.shape(node.inputs[0] if node.op == "take_along_axis" else node)
    got = b.shape(idx_node)
    if full[:axis] + full[axis + 1:] != got[:axis] + got[axis + 1:]:
        raise ValueError(f"{node.op}: indices of shape {got} and x of shape {full} differ off "
                         f"axis {axis}")
    p, m, q = _pnq(got, axis)
    idx = b.contiguous(idx_node).reshape(p, m, q)
    if node.op == "take_along_axis":
        x_node = node.inputs[0]
        x = b.contiguous(x_node).reshape(_pnq(b.shape(x_node), axis))
        _add_checked(b, node.op, gather_kernel, (b.out(node).reshape(p, m, q), x, idx))
    else:
        ct = b.contiguous(node.inputs[0]).reshape(p, m, q)
        out = b.out(node).reshape(_pnq(b.shape(node), axis))
        _add_checked(b, node.op, scatter_add_kernel, (out, ct, idx))

