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
    """``keras.ops`` computed by Keras' NumPy backend (the readable reference), or a skip when
    Keras is absent. When another test module loaded Keras with another backend first
    (tests/saving/test_keras_export.py: torch), the NumPy backend's functions are called
    directly."""
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() == "numpy":
        return keras.ops
    return _NumpyBackendOps()


class _NumpyBackendOps:
    """``keras.ops``-like access to ``keras.src.backend.numpy``'s modules."""

    def __init__(self, only=None):
        import importlib

        for needed in ("scipy", "jax"):  # Keras' NumPy backend imports both
            pytest.importorskip(needed, reason="Keras' NumPy backend imports scipy and jax")

        import keras.src.backend as kb

        self._space = only[0] if only else None
        names = only or ("nn", "math", "core", "numpy", "linalg", "image")
        # importing keras.src.backend.numpy rebinds keras.src.backend.numpy (the active
        # backend's numpy module, which Keras' own ops call): put it back afterwards
        saved = kb.__dict__.get("numpy")
        try:
            self._mods = [importlib.import_module(f"keras.src.backend.numpy.{n}")
                          for n in names]
        finally:
            if saved is not None:
                kb.numpy = saved
        if only is None:
            self.image = _NumpyBackendOps(("image",))
            self.linalg = _NumpyBackendOps(("linalg",))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        for m in self._mods:
            fn = getattr(m, name, None)
            if fn is not None and getattr(fn, "__module__", "").startswith(
                    "keras.src.backend.numpy"):
                return fn
        import keras

        space = getattr(keras.ops, self._space) if self._space else keras.ops
        return getattr(space, name)  # ops written once for every backend (ssim ...)


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
