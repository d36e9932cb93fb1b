"""The one interface to the matrix products of the CPU backend: it picks the engine.

* Plan steps and calls that run a product on OpenBLAS (kiln's private instance,
  :mod:`.blas`) or NumPy, under one process-wide lock (:func:`matmul`, :class:`MatmulCall`,
  :class:`GemmCall`, :func:`gemm`, :func:`axpy`);
* :func:`products_native`: whether a plan's products all run on kiln's own register-blocked
  kernel (:mod:`.native_matmul`, :mod:`.native_gemm`) instead, decided once per plan.

Kernels (``kernels/linalg.py``, the convolutions, the fused loops) ask here; this package
imports codegen and the runtime's worker API, never a hand-written kernel.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import numpy as np

from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.gemm import blas, native_batched, native_matmul
from kiln.core.ir import Node

# ---- kiln's GEMMs, one at a time ---------------------------------------------------------------
# OpenBLAS (0.3.28 to 0.3.33, NumPy's wheels up to 2.4 included) serializes concurrent threaded
# GEMMs with a lock per transpose variant (NN, NT, TN, TT are four functions, each with its own
# lock): two GEMMs of different variants at once, e.g. a forward x @ W and a gradient x.T @ g
# from two threads predicting or training with kiln, corrupt its shared state, which gives
# wrong results or hangs (OpenBLAS issue 5836, NumPy issue 29391; fixed in OpenBLAS 0.3.34).
# Every GEMM of a kiln plan takes this one lock: at most one runs at a time in the process
# (each uses all the BLAS threads already, so concurrent calls lose no throughput).
_GEMM_LOCK = threading.Lock()
# fork() while another thread is inside an OpenBLAS GEMM hangs: OpenBLAS's own fork handler
# stops its worker threads while the GEMM waits on them (7 of 7 tries; issue 46). The fork
# waits here for the GEMM in flight and holds off the next until the child exists; the child
# starts OpenBLAS's threads anew at its first GEMM (kiln's pools: threads.py, spin_pool.py).
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_GEMM_LOCK.acquire, after_in_parent=_GEMM_LOCK.release,
                        after_in_child=_GEMM_LOCK.release)


def matmul(a: Any, b: Any, out: Any) -> None:
    """``out = a @ b`` under kiln's process-wide GEMM lock (see above): through
    :func:`kiln.core.backends.cpu.gemm.blas.matmul` (kiln's private OpenBLAS: batches split over
    kiln's threads, better kernels where NumPy's picked slower ones), else ``np.matmul``."""
    with _GEMM_LOCK:
        if not blas.matmul(a, b, out):
            np.matmul(a, b, out=out)


# What a kept step call holds where NumPy computes its product (too small for BLAS's threads,
# or operands BLAS does not take): decided once for the arrays, as a BLAS call is.
NUMPY = ()


class _KeptCall:
    """A plan step's BLAS call (``blas.prepare`` / ``prepare_gemm``) kept for the arrays it
    last saw: weak references to them, never the arrays (a feed the step reads is still bound
    in place: ``feeds.closure_arrays``), with their dtypes, shapes and strides; and the CPU
    options of the plan that made it (options.py: its thresholds, whichever thread runs it)."""

    __slots__ = ("_seen", "_single", "_options")

    def __init__(self) -> None:
        self._seen: tuple | None = None
        self._single: tuple | None = None
        self._options = options.current()

    def _kept(self, a: Any, b: Any, out: Any) -> tuple | None:
        """The kept call for these arrays: as kept when they are the ones last seen; with
        ``a``'s address changed when only ``a`` is another array of the same layout that does
        not overlap ``out`` (a feed bound in place is a new view at each call); else None."""
        seen = self._seen
        if seen is None or seen[1]() is not b or seen[2]() is not out:
            return None
        if seen[3] != (a.dtype, a.shape, a.strides, b.shape, b.strides, out.shape,
                       out.strides):
            return None
        if seen[0]() is a or self._single is NUMPY:
            return self._single
        if np.may_share_memory(a, out):
            return None
        assert self._single is not None  # _keep sets it with _seen
        lib, fn, args = self._single
        self._single = (lib, fn, (*args[:7], a.__array_interface__["data"][0], *args[8:]))
        self._seen = (weakref.ref(a), *seen[1:])
        return self._single

    def _keep(self, a: Any, b: Any, out: Any, single: tuple | None) -> None:
        """Keeps ``single`` (a BLAS call, or :data:`NUMPY`) for these arrays; None: nothing."""
        if single is None:
            self._seen = None
            return
        self._seen = (weakref.ref(a), weakref.ref(b), weakref.ref(out),
                      (a.dtype, a.shape, a.strides, b.shape, b.strides, out.shape, out.strides))
        self._single = single


class MatmulCall(_KeptCall):
    """``out = a @ b`` as :func:`matmul` computes it, for one plan step (``b.add(MatmulCall(),
    (a, b, out))``): the BLAS call it derived is made again, without deriving it anew, while
    the same arrays come back (a plan's own buffers; a bound feed changes only its address):
    ~10 us a product less than :func:`matmul` (docs/architecture.md, "BLAS")."""

    __slots__ = ()

    def __call__(self, a: Any, b: Any, out: Any) -> None:
        with _GEMM_LOCK:
            single = self._kept(a, b, out)
            if single is None:
                if a.ndim != 2:  # a batch: split over kiln's threads where BLAS takes it
                    if not blas.matmul(a, b, out, self._options):
                        np.matmul(a, b, out=out)
                    return
                single = blas.prepare(a, b, out, self._options) or NUMPY
                self._keep(a, b, out, single)
            if single is NUMPY:
                np.matmul(a, b, out=out)
            else:
                blas.run(single)


class GemmCall(_KeptCall):
    """:func:`gemm` for one plan step, its BLAS call kept as :class:`MatmulCall` keeps its
    own (``alpha`` and ``beta`` read at each call)."""

    __slots__ = ()

    def __call__(self, a: Any, b: Any, c: Any, alpha: Any, beta: Any, out: Any) -> None:
        al, be = alpha.item(), beta.item()
        if al != 0 and be != 0:
            if c is not None:
                np.copyto(out, c)
                c = None  # out holds it now
            with _GEMM_LOCK:
                single = self._kept(a, b, out)
                if single is None:
                    single = blas.prepare_gemm(a, b, out)
                    self._keep(a, b, out, single)
                if single is not None:
                    blas.run_gemm(single, al, be)
                    return
        gemm(a, b, c, alpha, beta, out)


def gemm(a: Any, b: Any, c: Any, alpha: Any, beta: Any, out: Any) -> None:
    """``out = alpha * (a @ b) + beta * c`` (the ``gemm`` op; ``alpha``, ``beta`` 0-d arrays read
    at each call: a learning rate may change between steps), under the GEMM lock. ``c`` None:
    ``out`` holds it already (the planner writes an update in place; BLAS reads and writes it
    element by element); otherwise ``c`` is copied into ``out`` first. One BLAS call with
    ``beta`` (:func:`kiln.core.backends.cpu.gemm.blas.gemm`), the product never written on its own;
    where no BLAS takes it, or ``alpha`` or ``beta`` is 0 (BLAS would skip that operand, and a
    NaN in it would not reach the result as it does in ``0 * NaN``), NumPy in the reference's
    order."""
    al, be = alpha.item(), beta.item()
    if c is not None:
        np.copyto(out, c)
    with _GEMM_LOCK:
        if al != 0 and be != 0 and blas.gemm(a, b, out, al, be):
            return
        product = np.matmul(a, b)
    np.multiply(product, alpha, out=product)
    np.multiply(out, beta, out=out)
    np.add(product, out, out=out)


def axpy(x: Any, out: Any) -> None:
    """``out += x`` for two contiguous float arrays of one shape, by BLAS's axpy (alpha 1: the
    same bits as the add) under the GEMM lock; NumPy's add where no OpenBLAS is at hand."""
    with _GEMM_LOCK:
        if blas.axpy(x, out):
            return
    np.add(out, x, out=out)


# Ops whose kernels may call BLAS (a matmul: decided per node, :func:`products_native`).
BLAS_OPS = frozenset({"gemm", "conv2d", "conv2d_backprop_input", "conv2d_backprop_filter",
                      "scan"})


def products_native(b) -> bool:
    """Whether every product of the plan being built runs on kiln's own kernel (then its Dense
    products and in-place ``gemm`` updates take it: :func:`dense`, :func:`build_gemm`);
    decided once per plan. OpenBLAS's worker threads spin for ~0.3 ms after each of its calls
    (``threads.BLAS_TIMEOUT``), and a kernel on kiln's threads in that window shares a core
    with the spin: in an MLP training step whose input gradients and updates stayed
    OpenBLAS's, running only the forward products on the kernel made the step 1.2x slower.
    A plan that calls no BLAS (a Dense stack's ``predict`` and training step, a transformer
    block's, whose batches and 2-D products take ``native_batched``) has no such spin
    (docs/architecture.md, "Dense products"); a product too small to wake BLAS's threads
    (:func:`few_threads`: a classifier head) does not count."""
    known = b.cache.get("products_native")
    if known is None:
        known = True
        for node in b.static.kernels:
            if node.op == "gemm":
                known = gemm_native(b, node) is not None
            elif node.op in BLAS_OPS:
                known = False
            elif node.op == "matmul":
                xn, yn = node.inputs
                if xn.ndim == 2 and yn.ndim == 2 and 1 in (xn.shape[1], yn.shape[1]):
                    continue  # the outer product and matrix-vector loops: no BLAS
                x, y, out = operands(b, node)
                if x.ndim == 2 and y.ndim == 2 and few_threads(x, y):
                    continue
                known = native_batched.suits(x, y, out) or (
                    x.ndim == y.ndim == 2 and native_matmul.suits(x, y, out, packed=True))
            if not known:
                break
        b.cache["products_native"] = known
    return known


def few_threads(x: Any, y: Any) -> bool:
    """Whether the 2-D product ``x @ y`` is too small to wake BLAS's threads: under
    ``blas_placed_min_work`` multiply-adds it runs on ``np.matmul`` (:func:`blas.prepare`),
    and NumPy's OpenBLAS computes a product of under 4 x 65,536 multiply-adds on the calling
    thread (its ``GEMM_MULTITHREAD_THRESHOLD``): a classifier head's, beside a transformer's
    products on kiln's kernel."""
    work = x.shape[0] * x.shape[1] * y.shape[1]
    return work < min(options.current().blas_placed_min_work, 4 * 65536)


def operands(b, node: Node) -> tuple:
    """``(x, y, out)`` of a matmul node as its GEMM takes them: batch axes of ``x`` folded into
    the rows where ``y`` is a matrix (one GEMM; np.matmul would loop over the batch)."""
    xn, yn = node.inputs
    x, out = b.array(xn), b.out(node)
    if yn.ndim == 2 and xn.ndim > 2 and x.flags.c_contiguous and out.flags.c_contiguous:
        x = x.reshape(-1, x.shape[-1])
        out = out.reshape(-1, out.shape[-1])
    return x, b.array(yn), out


def in_place(c: np.ndarray, out: np.ndarray) -> bool:
    return (c.__array_interface__["data"][0] == out.__array_interface__["data"][0]
            and c.strides == out.strides)


def gemm_native(b, node: Node) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                         np.ndarray] | None:
    """``(a, b, out, alpha, beta)`` of a ``gemm`` node that kiln's Dense kernel computes in
    place (``native_matmul.add``'s ``update``: matrices, the result in ``c``'s storage), or
    None."""
    an, bn, cn, alpha, beta = node.inputs
    a, bm, c, out = b.array(an), b.array(bn), b.array(cn), b.out(node)
    al, be = b.array(alpha), b.array(beta)
    if not (a.ndim == 2 and bm.ndim == 2 and in_place(c, out)
            and native_matmul.suits(a, bm, out, packed=True)):
        return None
    if not all(s.shape == () and s.dtype == np.float32 for s in (al, be)):
        return None
    return a, bm, out, al, be
