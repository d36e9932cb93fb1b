"""Gather (``take``) and its scatter-add gradient (``take_grad``, embedding gradients).

Both view the data as (P, N, Q) around the gathered axis and the indices as a flat vector;
negative indices wrap like NumPy, out-of-range ones raise IndexError.
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu import jit
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


@builder("take")
def build_take(b, node: Node) -> None:
    x_node, idx_node = node.inputs
    axis = node.attrs["axis"]
    p, n, q = _pnq(b.shape(x_node), axis)
    x = b.contiguous(x_node).reshape(p, n, q)
    idx = b.contiguous(idx_node).reshape(-1)
    out = b.out(node).reshape(p, idx.shape[0], q)
    args = (out, x, idx)
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
    b.add(jit.load_function(take_grad_kernel).specialize(args), args)
