"""The floors of benchmarks/bench_cpu.py and bench_suite.py: per step only the GEMMs an
implementation does whose GEMMs run on the BLAS kiln's own use, into preallocated float32
outputs, and nothing else (see the two scripts' docstrings for what each floor counts).

``gemm-floor`` of the MLP workloads (:func:`mlp_step`), ``conv-floor`` of the convolutional
ones and ``gemm-floor`` of the suite's other MLPs (:func:`gemms_of` the layers of
``FLOOR_LAYERS``, :func:`gemm_step`).

A floor's products run on what kiln's plans would run them on (:func:`products`: kiln's own
Dense kernel where a plan's every product takes it, a training step's ``d @ W.T`` with
``W.T`` laid out once beforehand, else the BLAS); with the environment variable
``KILN_BENCH_FLOOR_GEMM=blas`` on the BLAS always (a weaker floor where kiln's kernel beats
it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np


# ---- gemm floor ---------------------------------------------------------------------------------
def blas_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b`` with the BLAS kiln's own GEMMs run on: NumPy's, or the private OpenBLAS
    (with this CPU's kernels where NumPy's picked slower ones, and its threads placed:
    kiln/core/backends/cpu/gemm/blas.py), so that a floor is one for kiln too."""
    from kiln.core.backends.cpu.gemm import blas

    if not blas.matmul(a, b, out):
        np.matmul(a, b, out=out)


def step_gemm() -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """A GEMM ``f(a, b, out)`` as a plan step of kiln runs one (``gemm.products.MatmulCall``: the
    BLAS of :func:`blas_matmul`, its call kept for arrays that come back), so that a floor
    pays no more per product than kiln does."""
    from kiln.core.backends.cpu.gemm import products as gemm_products

    return gemm_products.MatmulCall()


def products(calls: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
             ) -> tuple[list[Callable[[np.ndarray, np.ndarray, np.ndarray], None]], bool]:
    """One GEMM ``f(a, b, out)`` per product ``(a, b, out)`` of a step (arrays laid out as the
    step's), on what kiln's plans would run them, and whether that is kiln's kernel: its own
    kernel (kiln/core/backends/cpu/gemm/native_matmul.py) for every one where each takes it (a
    plan's Dense products take it only then: ``products.products_native``), else a plan step's
    BLAS GEMM (:func:`step_gemm`) for all (always with ``KILN_BENCH_FLOOR_GEMM=blas``)."""

    if os.environ.get("KILN_BENCH_FLOOR_GEMM", "kiln") != "blas":
        native = [_native_product(a, b, out) for a, b, out in calls]
        if all(f is not None for f in native):
            return native, True
    return [step_gemm() for _ in calls], False


def _native_product(a: np.ndarray, b: np.ndarray, out: np.ndarray
                    ) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None:
    """kiln's kernel for ``out = a @ b`` (``native_matmul.prepare``: split by rows, as fast
    as a plan's split or faster for a product alone), or None. A transposed
    ``b`` (``d @ W.T``), which a plan lays out for the kernel at each step, is laid out here
    once, beforehand: the floor counts the product alone."""
    from kiln.core.backends.cpu.gemm import native_matmul

    if native_matmul.transposed(b) and b.strides[1] != b.itemsize:
        packed = np.ascontiguousarray(b)
        f = native_matmul.prepare(a, packed, out)
        return None if f is None else (lambda x, _b, o: f(x, packed, o))
    return native_matmul.prepare(a, b, out)


def mlp_step(batch: int, predict: bool) -> tuple[Callable[[Any, Any], Any], dict]:
    """Only the GEMMs of one step of the MLP 784-512-256-10 at ``batch``, float32, into
    preallocated outputs, each product on what kiln's plans run it (:func:`products`).

    Training: forward x@W1, h1@W2, h2@W3, then backward dW3 = h2.T@d3, dh2 = d3@W3.T,
    dW2 = h1.T@d2, dh1 = d2@W2.T, dW1 = x.T@d1 (no dX); ``predict``: the 3 forward GEMMs.
    """
    rng = np.random.default_rng(1)
    sizes = [784, 512, 256, 10]
    ws = [rng.uniform(-1, 1, (a, b)).astype(np.float32) * np.float32(np.sqrt(6 / (a + b)))
          for a, b in zip(sizes[:-1], sizes[1:])]
    hs = [np.empty((batch, b), np.float32) for b in sizes[1:]]  # h1, h2, logits
    ins = [np.empty((batch, sizes[0]), np.float32)] + hs[:-1]  # a batch's layout, h1, h2
    calls = list(zip(ins, ws, hs))
    ds = [(rng.standard_normal((batch, b)) * 0.01).astype(np.float32)
          for b in sizes[1:]]  # d1, d2, d3 (d1, d2 are overwritten by the backward GEMMs)
    dws = [np.empty_like(w) for w in ws]
    if not predict:  # dW1..3 = h.T @ d, then dh1, dh2 = d @ W.T: as a plan holds them, the
        # transposed operands views made once (the batch's, per batch)
        calls += list(zip([h.T for h in ins], ds, dws)) + list(zip(ds[1:], [w.T for w in
                                                                            ws[1:]], ds))
    fs, native = products(calls)

    def forward(xb: np.ndarray) -> np.ndarray:
        h = xb
        for f, w, out in zip(fs, ws, hs):
            f(h, w, out)
            h = out
        return h

    if predict:
        return (lambda xb, yb: forward(xb)), {"native": native}
    h_t = [None] + [c[0] for c in calls[4:6]]

    def step(xb: np.ndarray, yb: np.ndarray) -> None:
        forward(xb)
        for i in (2, 1, 0):  # dW3, dh2, dW2, dh1, dW1
            fs[3 + i](h_t[i] if i else xb.T, ds[i], dws[i])
            if i:
                fs[5 + i](ds[i], calls[5 + i][1], ds[i - 1])

    return step, {"native": native}


# ---- conv-floor and the suite's gemm-floors ------------------------------------------------------
class Gemm(NamedTuple):
    """One layer's GEMMs as an im2col convolution / a Dense: forward (M, K) @ (K, N), input
    gradient (M, N) @ (N, K), kernel gradient (K, M) @ (M, N). ``transposed``: a
    Conv2DTranspose, whose forward is the (M, N) @ (N, K) one."""

    m: int
    k: int
    n: int
    input_grad: bool
    transposed: bool = False


# the layers the floors count, per workload: ("conv", filters, kernel, stride, padding),
# ("convT", filters, kernel, stride) ("same" padding), ("pool", size), ("dense", units),
# ("gap",), ("flatten",); the input shape (without the batch) first
FLOOR_LAYERS: dict[str, tuple[tuple[int, ...], list[tuple]]] = {
    "deep_mlp": ((128,), [("dense", 128)] * 20 + [("dense", 10)]),
    "wide_mlp": ((1024,), [("dense", 2048), ("dense", 2048), ("dense", 10)]),
    "conv1d": ((500, 1), [("conv", 64, 3, 1, "same")] * 3 + [("gap",), ("dense", 2)]),
    "cifar_cnn": ((32, 32, 3), [
        ("conv", 32, 3, 1, "same"), ("conv", 32, 3, 1, "same"), ("pool", 2),
        ("conv", 64, 3, 1, "same"), ("conv", 64, 3, 1, "same"), ("pool", 2),
        ("conv", 128, 3, 1, "same"), ("pool", 2), ("flatten",), ("dense", 10)]),
    "small_resnet": ((32, 32, 3), [("conv", 64, 3, 1, "same")] * 4 + [("gap",), ("dense", 10)]),
    "conv_autoencoder": ((28, 28, 1), [
        ("conv", 32, 4, 2, "same"), ("conv", 32, 4, 2, "same"), ("convT", 32, 4, 2),
        ("convT", 32, 4, 2), ("conv", 1, 3, 1, "same")]),
    "convnet_train": ((28, 28, 1), [
        ("conv", 32, 3, 1, "valid"), ("pool", 2), ("conv", 64, 3, 1, "valid"), ("pool", 2),
        ("flatten",), ("dense", 10)]),
}


def conv_output_size(size: int, kernel: int, stride: int, padding: str) -> int:
    """Keras' output length of a convolution ("same": ceil(size / stride))."""
    if padding == "same":
        return -(-size // stride)
    return (size - kernel) // stride + 1


def gemms_of(shape: tuple[int, ...], layers: list[tuple], batch: int) -> list[Gemm]:
    """The GEMMs of ``layers`` (as in ``FLOOR_LAYERS``) on inputs of ``shape`` (channels last,
    without the batch), layer by layer; the first layer gets no input gradient."""
    spatial, channels = tuple(shape[:-1]), shape[-1]
    out: list[Gemm] = []
    for layer in layers:
        kind = layer[0]
        first = not out
        if kind == "conv":
            _, filters, k, s, padding = layer
            spatial = tuple(conv_output_size(d, k, s, padding) for d in spatial)
            out.append(Gemm(batch * math.prod(spatial), k ** len(spatial) * channels, filters,
                            not first))
            channels = filters
        elif kind == "convT":  # the convolution from its output back to its input
            _, filters, k, s = layer
            out.append(Gemm(batch * math.prod(spatial), k ** len(spatial) * filters, channels,
                            not first, transposed=True))
            spatial, channels = tuple(d * s for d in spatial), filters
        elif kind == "pool":
            spatial = tuple(d // layer[1] for d in spatial)
        elif kind == "gap":
            spatial = ()
        elif kind == "flatten":
            spatial, channels = (), math.prod(spatial) * channels
        elif kind == "dense":
            if spatial:
                raise ValueError(f"gemms_of: Dense on a rank-{len(spatial) + 2} input")
            out.append(Gemm(batch, channels, layer[1], not first))
            channels = layer[1]
        else:
            raise ValueError(f"gemms_of: unknown layer kind {kind!r}")
    return out


def gemm_step(gemms: list[Gemm], train: bool) -> tuple[Callable[[Any, Any], Any], dict]:
    """A floor's step: exactly the GEMMs of ``gemms`` (forward, then for ``train`` the
    backward ones, last layer first), float32, on what kiln's plans run them (:func:`products`),
    preallocated operands and outputs (shared between layers of the same shapes), nothing
    else."""
    rng = np.random.default_rng(1)
    buffers: dict[tuple, np.ndarray] = {}

    def buf(role: str, shape: tuple[int, int]) -> np.ndarray:
        key = (role, shape)
        if key not in buffers:
            buffers[key] = rng.random(shape, dtype=np.float32)  # values don't matter
        return buffers[key]

    calls: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (a, b, out)
    backward: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    # operands are never written (outputs feed no later GEMM but the forward's y, read as the
    # gradient dY, whose values stay the same every step): no growth to inf, no denormals
    for g in gemms:
        cols, w = buf("cols", (g.m, g.k)), buf("w", (g.k, g.n))
        y = buf("y", (g.m, g.n))
        if g.transposed:  # x (M, N) @ W.T into the columns (then col2im)
            calls.append((y, w.T, buf("dcols", (g.m, g.k))))
        else:
            calls.append((cols, w, y))
        if train:
            grads = [(cols.T, y, buf("dw", (g.k, g.n)))]  # kernel gradient
            if g.input_grad:  # input gradient (transposed: im2col of dY (M, K) @ W)
                grads.append((cols, w, buf("dx", (g.m, g.n))) if g.transposed
                             else (y, w.T, buf("dcols", (g.m, g.k))))
            backward = grads + backward
    calls += backward
    fs, native = products(calls)

    def step(xb: np.ndarray, yb: np.ndarray) -> None:
        for f, (a, b, out) in zip(fs, calls):
            f(a, b, out)

    return step, {"gemms": [(a.shape, b.shape) for a, b, _ in calls], "native": native}
