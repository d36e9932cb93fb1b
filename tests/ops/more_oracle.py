"""Shared helpers of the issue-44 op tests: Keras 3 (its NumPy backend when kiln's tests
import it first) as the oracle for semantics, and a float64 finite-difference gradient check.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from fd_oracle import numeric_grad
from test_ops_numpy import check

import kiln
import kiln.ops as K


def keras_ops():
    """``keras.ops``, or a skip when Keras is absent."""
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    keras = pytest.importorskip("keras")
    return keras.ops


def to_numpy(v):
    if isinstance(v, tuple | list):
        return type(v)(to_numpy(w) for w in v)
    return np.asarray(v.detach() if hasattr(v, "detach") else v)


def check_keras(fn, kfn, *arrays, rtol=1e-5, atol=1e-6):
    """``fn`` eager and in a compiled graph against Keras' ``kfn`` on the same arrays."""
    # copies: Keras' NumPy backend writes some results into its inputs (scatter_update)
    check(fn, lambda *a: to_numpy(kfn(*[np.array(v, copy=True) for v in a])), *arrays,
          rtol=rtol, atol=atol)


def check_grad(fn, *arrays, wrt=0, eps=1e-6, rtol=1e-4, atol=1e-6, seed=0):
    """The gradient of ``sum(fn(*arrays) * w)`` (random ``w``) with respect to ``arrays[wrt]``
    (float64) against central finite differences."""
    arrays = [np.array(a, dtype="float64") if np.asarray(a).dtype.kind == "f" else a
              for a in arrays]
    phs = [kiln.placeholder(a.shape, str(a.dtype) if a.dtype.kind != "i" else "int32")
           for a in arrays]
    out = fn(*phs)
    w = np.random.default_rng(seed).normal(size=out.shape)
    (g,) = kiln.grad(K.sum(out * K.constant(w)), [phs[wrt]])
    got = kiln.function(phs, g)(*arrays)
    want = numeric_grad(lambda: float(np.sum(np.asarray(fn(*arrays)) * w)), arrays[wrt], eps)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
