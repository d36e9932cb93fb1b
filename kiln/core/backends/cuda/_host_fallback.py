"""The cuda backend's host fallback: an op without a CUDA kernel (``Lowering.kernel`` warns
once per op) runs its NumPy reference on the host, its inputs copied down from their device
views and its result uploaded into a fresh device buffer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.layout import Layout
from kiln.core.ops.registry import get_op

if TYPE_CHECKING:
    from kiln.core.backends.cuda._lower import PlannerSide


def host_fallback(pl: PlannerSide, node: Node, ins: list[Layout], t: TensorType) -> Layout:
    """Emits one host step computing ``node`` with its op's NumPy reference."""
    op = get_op(node.op)
    out = pl.fresh(t.dtype, t.dims)
    dtypes = [pl.dtype(i) for i in node.inputs]
    attrs = dict(node.attrs)

    def bind(arr):
        def run() -> None:
            args = [to_host(arr(x.root), x, d) for x, d in zip(ins, dtypes)]
            with np.errstate(all="ignore"):
                value = np.asarray(op.ref(*args, **attrs))
            upload(arr(out.root), out.offset, value.astype(t.dtype, copy=False))
        return run
    pl.emit(f"{node.op} (host)", ins, [out], bind)
    return out


def to_host(arr: Any, layout: Layout, dtype: str) -> np.ndarray:
    """A host copy of a (strided) device view."""
    if layout.size == 0:
        return np.zeros(layout.shape, dtype)
    lo, hi = layout.span()
    flat = arr[lo:hi + 1].copy_to_host()
    item = np.dtype(dtype).itemsize
    view = np.lib.stride_tricks.as_strided(flat[layout.offset - lo:], layout.shape,
                                           tuple(s * item for s in layout.strides))
    return np.array(view, copy=True)


def upload(arr: Any, offset: int, value: np.ndarray) -> None:
    """Writes ``value`` (C order) into the flat device array ``arr`` from ``offset``."""
    flat = np.asarray(value, order="C").reshape(-1)
    if flat.size:
        arr[offset:offset + flat.size].copy_to_device(flat)
