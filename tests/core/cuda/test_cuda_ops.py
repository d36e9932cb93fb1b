"""Registry-driven forward checks of every op with a CUDA kernel, against the NumPy reference
(under the simulator at the ops' tiny example sizes), plus the fallback path."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba.cuda")
pytest.importorskip("numba_cuda")

import kiln  # noqa: E402
from kiln.core.backends import cuda as kcuda  # noqa: E402
from kiln.core.ops import all_ops  # noqa: E402
from kiln.core.ops.registry import SOURCE, apply  # noqa: E402

OPS = all_ops()
WITH_KERNEL = sorted(n for n in kcuda.ops_with_kernels() if OPS[n].kind != SOURCE)


def _examples(name: str, dtype: str):
    return OPS[name].examples(np.random.default_rng(abs(hash(name)) % 2**32), dtype)


def _check(name: str, dtype: str, example) -> None:
    expected = np.asarray(OPS[name].ref(*example.inputs, **example.attrs))
    phs = [kiln.placeholder(np.shape(a), np.asarray(a).dtype.name) for a in example.inputs]
    node = apply(name, *phs, **example.attrs)
    fn = kiln.function(phs, node, backend="cuda", optimize=False)
    got = fn(*example.inputs)
    assert got.dtype == np.dtype(node.dtype), name
    assert got.shape == expected.shape, name
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, expected.astype(node.dtype), rtol=tol, atol=tol,
                               err_msg=f"{name} {example.attrs}")


# Ops that run their NumPy reference on the host under CUDA (the warned fallback, correct
# numbers), each with its reason. A new op lands here only with a reason.
HOST_ONLY = {
    "allreduce": "MPI sums host buffers (kiln.distribution runs on the CPU backend)",
    "allreduce_start": "MPI sums host buffers (kiln.distribution runs on the CPU backend)",
    "allreduce_wait": "MPI sums host buffers (kiln.distribution runs on the CPU backend)",
    "resize": "image preprocessing: no CUDA kernel yet",
    "resize_grad": "image preprocessing: no CUDA kernel yet",
    "affine_transform": "augmentation (training-time input transform): no CUDA kernel yet",
    "affine_transform_grad": "augmentation: no CUDA kernel yet",
    "argsort": "sorting: no CUDA kernel yet (NumPy's stable sort on the host)",
    **{op: "kiln.ops.linalg: LAPACK through NumPy on the host (no cuSOLVER path yet)"
       for op in ("cholesky", "solve_triangular", "solve", "inv", "det", "eigh", "qr", "svd",
                  "pinv", "lu_factor")},
}


def test_every_op_but_sources_has_a_cuda_kernel():
    missing = sorted(n for n, op in OPS.items()
                     if op.kind != SOURCE and n not in WITH_KERNEL and n not in HOST_ONLY)
    assert not missing, f"ops without a CUDA kernel (they fall back to the host): {missing}"
    assert not set(HOST_ONLY) & set(WITH_KERNEL), "a HOST_ONLY op has a kernel now: drop it"
    from kiln.core.ops.registry import KERNELS

    assert set(WITH_KERNEL) <= KERNELS["cuda"]


@pytest.mark.parametrize("name", WITH_KERNEL)
def test_forward_matches_reference_float32(name):
    for example in _examples(name, "float32"):
        _check(name, "float32", example)


@pytest.mark.parametrize("name", WITH_KERNEL)
def test_forward_matches_reference_float64(name):
    for example in _examples(name, "float64"):
        _check(name, "float64", example)
