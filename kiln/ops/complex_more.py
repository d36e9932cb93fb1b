"""Keras 3's complex-valued ops in kiln: ``eig`` (``keras.ops.linalg``), ``polar``
(``keras.ops.nn``), ``view_as_complex`` and ``view_as_real``.

kiln's graphs have no complex dtype, so the ops whose result is complex (``eig``, ``polar``,
``view_as_complex``) run eagerly on arrays only (NumPy's complex64/complex128, as Keras' NumPy
backend returns) and raise a clear error on symbolic tensors. ``view_as_real`` of a NumPy
complex array stacks ``(real, imag)`` on a new last axis; on a (real) symbolic tensor it
builds ``stack((x, zeros), -1)`` in the graph, the same rule as kiln's ``real``/``imag``.
"""

from __future__ import annotations

import numpy as np

from kiln.ops import _G, _eager, is_symbolic


def _no_graph(op: str, what: str, x) -> None:
    raise TypeError(f"{op}: kiln's graphs have no complex dtype, so {op} runs on arrays only; "
                    f"received a symbolic tensor of shape {getattr(x, 'shape', None)} ({what}). "
                    "Keep (real, imag) pairs in the graph instead.")


def _array(x) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else _eager.to_array(x) if not np.iscomplexobj(
        x) else np.asarray(x)


def _complex_dtype(*xs: np.ndarray):
    return np.complex128 if any(x.dtype in (np.float64, np.complex128) for x in xs) \
        else np.complex64


def view_as_complex(x):
    """``x[..., 0] + 1j * x[..., 1]`` for a real array whose last axis has size 2 (complex64,
    as Keras casts). Arrays only: kiln's graphs have no complex dtype."""
    if is_symbolic(x):
        _no_graph("view_as_complex", "its result is complex", x)
    x = _array(x)
    if x.ndim < 1 or x.shape[-1] != 2:
        raise ValueError("view_as_complex: the last dimension of the input must be 2 (real "
                         f"and imaginary); received shape {x.shape}")
    return x[..., 0].astype(np.complex64) + 1j * x[..., 1].astype(np.complex64)


def view_as_real(x):
    """``stack((real(x), imag(x)), -1)``: a complex array as its real and imaginary parts on a
    new last axis of size 2. Symbolic tensors are real in kiln: ``stack((x, 0), -1)``."""
    if is_symbolic(x):
        node = _G.as_node(x)
        return _G.stack([node, _G.zeros_like(node)], axis=-1)
    x = np.asarray(x) if np.iscomplexobj(x) else _array(x)
    return np.stack((np.real(x), np.imag(x)), axis=-1)


def polar(abs_, angle):
    """The complex numbers ``abs_ * cos(angle) + 1j * abs_ * sin(angle)`` (``torch.polar``),
    broadcast; complex64 for float32 inputs. Arrays only: the result is complex."""
    if is_symbolic(abs_, angle):
        _no_graph("polar", "its result is complex", abs_ if is_symbolic(abs_) else angle)
    a, t = _array(abs_), _array(angle)
    if a.dtype.kind not in "fc":
        a = a.astype("float32")
    if t.dtype.kind not in "fc":
        t = t.astype("float32")
    try:
        real, imag = a * np.cos(t), a * np.sin(t)
    except ValueError as err:
        raise ValueError(f"polar: abs_ and angle do not broadcast: shapes {a.shape} and "
                         f"{t.shape}") from err
    dtype = _complex_dtype(a, t)
    return real.astype(dtype) + 1j * imag.astype(dtype)


def eig(x):
    """``(eigenvalues, eigenvectors)`` of square matrices ``(..., M, M)`` (NumPy's
    ``linalg.eig``: complex when the spectrum is, unit-norm eigenvector columns). Arrays only:
    eigenvalues of a general matrix are complex."""
    if is_symbolic(x):
        _no_graph("eig", "eigenvalues of a general matrix are complex", x)
    x = _array(x)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"eig: expected square matrices of shape (..., M, M), received "
                         f"shape {x.shape}")
    if x.dtype.kind not in "fc":
        x = x.astype("float32")
    w, v = np.linalg.eig(x)
    return w, v


__all__ = ["eig", "polar", "view_as_complex", "view_as_real"]
