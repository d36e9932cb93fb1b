"""``kiln.ops.linalg``: Keras 3's linear-algebra ops (graph and eager: see ``kiln.ops``).

The decompositions and solvers are primitives whose kernels call LAPACK through NumPy on the
host (``kiln/core/ops/linalg_host.py``); the rest are composites of them. Matrices are the
last two axes (leading axes are a batch); integer inputs compute in float32.

``norm`` adds the matrix norms of singular values (``ord`` 2, -2, "nuc") to
``kiln.ops.norm``. ``eig`` (complex eigenvalues: kiln has no complex dtype in graphs) is defined in
:mod:`kiln.ops.complex_more`, on arrays only, and added to this namespace there.
Gradients: every op but ``lu_factor`` and ``matrix_rank`` (piecewise constant) and the
singular vectors of ``svd`` (only the singular values are differentiable); ``cholesky`` and
``eigh`` read the lower triangle only (LAPACK's convention), so their gradients live there.
"""

from __future__ import annotations

import numpy as np

from kiln.ops import _G, _dual, is_symbolic
from kiln.ops import numpy as _knp

_N = _G.as_node


def _float(x):
    x = _N(x)
    return x if x.dtype in ("float32", "float64") else _G.cast(x, "float32")


def _t(x):
    return _G.transpose(x, tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2))


def _square(op, x):
    if x.ndim < 2:
        raise ValueError(f"{op}: expected a matrix (rank >= 2), received shape {x.shape}")
    return x


def _cholesky(x, upper=False):
    low = _G.apply("cholesky", _square("cholesky", _float(x)))
    return _t(low) if upper else low


def _cholesky_inverse(x, upper=False):
    """``inv(L @ L.T)`` from the factor ``L`` (or ``U.T @ U`` from ``U`` when ``upper``)."""
    f = _square("cholesky_inverse", _float(x))
    low = _t(f) if upper else f
    n = low.shape[-1]
    if n is None:
        raise ValueError(f"cholesky_inverse: needs static matrix dims, received {f.shape}")
    eye = _G.broadcast_like(_G.constant(np.eye(n, dtype=low.dtype)), low)
    li = _G.apply("solve_triangular", low, eye, lower=True)  # L^-1
    return _G.matmul(_t(li), li)


def _det(x):
    return _G.apply("det", _square("det", _float(x)))


def _eigh(x):
    x = _square("eigh", _float(x))
    return _G.apply("eigh", x, part="w"), _G.apply("eigh", x, part="v")


def _inv(x):
    return _G.apply("inv", _square("inv", _float(x)))


def _lu_factor(x):
    x = _square("lu_factor", _float(x))
    return _G.apply("lu_factor", x, part="lu"), _G.apply("lu_factor", x, part="piv")


def _qr(x, mode="reduced"):
    if mode not in ("reduced", "complete"):
        raise ValueError(f"qr: mode must be 'reduced' or 'complete', received mode={mode!r}")
    x = _square("qr", _float(x))
    c = mode == "complete"
    return _G.apply("qr", x, part="q", complete=c), _G.apply("qr", x, part="r", complete=c)


def _solve_operands(op, a, b):
    a = _square(op, _float(a))
    b = _N(b, a.dtype)
    if b.dtype != a.dtype:
        b = _G.cast(b, a.dtype)
    vector = b.ndim == a.ndim - 1
    return a, (_G.expand_dims(b, -1) if vector else b), vector


def _solve(a, b):
    a, b, vector = _solve_operands("solve", a, b)
    out = _G.apply("solve", a, b)
    return _G.squeeze(out, -1) if vector else out


def _solve_triangular(a, b, lower=False):
    a, b, vector = _solve_operands("solve_triangular", a, b)
    out = _G.apply("solve_triangular", a, b, lower=bool(lower))
    return _G.squeeze(out, -1) if vector else out


def _svd(x, full_matrices=True, compute_uv=True):
    x = _square("svd", _float(x))
    s = _G.apply("svd", x, part="s", full=bool(full_matrices))
    if not compute_uv:
        return s
    f = bool(full_matrices)
    return _G.apply("svd", x, part="u", full=f), s, _G.apply("svd", x, part="vh", full=f)


def _pinv(x, rcond=None):
    x = _square("pinv", _float(x))
    return _G.apply("pinv", x, rcond=None if rcond is None else float(rcond))


def _lstsq(a, b, rcond=None):
    """``pinv(a) @ b``: the minimum-norm least-squares solution (NumPy's ``lstsq``; its
    default cut-off, machine epsilon times ``max(m, n)``, is used when ``rcond`` is None)."""
    a = _square("lstsq", _float(a))
    b = _N(b, a.dtype)
    if rcond is None:
        m, n = a.shape[-2:]
        rcond = float(np.finfo(a.dtype).eps * max(m or 1, n or 1))
    vector = b.ndim == 1
    p = _G.apply("pinv", a, rcond=float(rcond))
    out = _G.matmul(p, _G.expand_dims(b, -1) if vector else b)
    return _G.squeeze(out, -1) if vector else out


def _matrix_rank(x, tol=None):
    x = _square("matrix_rank", _float(x))
    s = _G.apply("svd", x, part="s", full=False)
    smax = _G.max(s, axis=-1, keepdims=True)
    if tol is None:
        m, n = x.shape[-2:]
        if m is None or n is None:
            raise ValueError(f"matrix_rank: needs static matrix dims, received {x.shape}")
        cut = smax * _G.constant(np.asarray(max(m, n) * np.finfo(x.dtype).eps, x.dtype))
    else:
        cut = _N(tol, x.dtype)
    return _G.sum(_G.cast(_G.greater(s, cut), "int32"), axis=-1)


cholesky = _dual(_cholesky, "cholesky")
cholesky.__doc__ = "The Cholesky factor (lower, or upper with ``upper=True``) of ``x``."
cholesky_inverse = _dual(_cholesky_inverse, "cholesky_inverse")
cholesky_inverse.__doc__ = _cholesky_inverse.__doc__
det = _dual(_det, "det")
det.__doc__ = "The determinant of each matrix."
eigh = _dual(_eigh, "eigh")
eigh.__doc__ = "``(eigenvalues ascending, eigenvectors)`` of symmetric matrices (lower half read)."
inv = _dual(_inv, "inv")
inv.__doc__ = "The inverse of each matrix."
lu_factor = _dual(_lu_factor, "lu_factor")
lu_factor.__doc__ = ("``(lu, pivots)``: L and U packed, 0-based row swaps (SciPy's "
                     "``lu_factor``); not differentiable.")
qr = _dual(_qr, "qr")
qr.__doc__ = "``(q, r)`` of each matrix; ``mode`` 'reduced' or 'complete'."
solve = _dual(_solve, "solve")
solve.__doc__ = "``x`` with ``a @ x = b`` (``b`` a matrix or, one axis fewer, a vector)."
solve_triangular = _dual(_solve_triangular, "solve_triangular")
solve_triangular.__doc__ = ("``solve`` for triangular ``a`` (only the ``lower`` or upper "
                            "triangle is read).")
svd = _dual(_svd, "svd")
svd.__doc__ = ("``(u, s, vh)`` with ``x = u @ diag(s) @ vh``, or ``s`` alone when "
               "``compute_uv=False``.")
pinv = _dual(_pinv, "pinv")
pinv.__doc__ = "The Moore-Penrose pseudo-inverse."
lstsq = _dual(_lstsq, "lstsq")
lstsq.__doc__ = _lstsq.__doc__
matrix_rank = _dual(_matrix_rank, "matrix_rank")
matrix_rank.__doc__ = "The number of singular values above ``tol`` (NumPy's default cut-off)."
def _norm(x, ord=None, axis=None, keepdims=False):
    """``kiln.ops.norm`` plus the matrix norms of singular values (``ord`` 2, -2, "nuc")."""
    x = _N(x)
    if ord in (2, -2, "nuc") and (isinstance(axis, list | tuple) and len(axis) == 2
                                  or axis is None and x.ndim == 2):
        ax = tuple(a % x.ndim for a in (axis if axis is not None else (0, 1)))
        if ax[0] == ax[1]:
            raise ValueError(f"norm: the two matrix axes must differ, received axis={axis}")
        perm = [a for a in range(x.ndim) if a not in ax] + list(ax)
        s = _G.apply("svd", _G.transpose(_float(x), perm), part="s", full=False)
        red = {2: _G.max, -2: _G.min, "nuc": _G.sum}[ord](s, axis=-1)
        if keepdims:
            red = _G.expand_dims(red, tuple(sorted(ax)))
        return red
    return _knp.norm(x, ord=ord, axis=axis, keepdims=keepdims)


norm = _dual(_norm, "linalg_norm")
norm.__doc__ = _norm.__doc__


def jvp(fun, primals, tangents, has_aux=False):
    """Forward-mode product ``(fun(*primals), J @ tangents)`` (``JAX``'s ``jvp``), computed by
    reverse mode twice: ``g(u) = J.T u`` is linear in ``u``, so ``d<g(u), t>/du = J t``.

    Args:
        fun: a function of tensors returning a tensor (or ``(tensor, aux)`` with ``has_aux``).
        primals, tangents: tuples (or lists) of the same length and shapes.

    Returns:
        ``(out, tangent_out)`` or ``(out, tangent_out, aux)``.
    """
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    if is_symbolic(primals, tangents):
        return _jvp_graph(fun, primals, tangents, has_aux)
    import kiln.core

    arrays = [np.asarray(a) if np.asarray(a).dtype.kind == "f" else np.asarray(a, "float32")
              for a in primals + tangents]
    phs = [kiln.core.placeholder(a.shape, "float64" if a.dtype == np.float64 else "float32")
           for a in arrays]
    res = _jvp_graph(fun, tuple(phs[:len(primals)]), tuple(phs[len(primals):]), has_aux)
    flat = list(res)
    return tuple(kiln.core.function(phs, flat)(*arrays))


def _jvp_graph(fun, primals, tangents, has_aux):
    import kiln.core

    ps = [_float(p) for p in primals]
    ts = [_G.cast(_N(t, p.dtype), p.dtype) for t, p in zip(tangents, ps)]
    res = fun(*ps)
    out, aux = (res if has_aux else (res, None))
    out = _N(out)
    u = _G.broadcast_like(_G.constant(np.asarray(0, out.dtype)), out)
    g = kiln.core.grad(_G.sum(out * u), ps)
    inner = None
    for gi, ti in zip(g, ts):
        term = _G.sum(gi * ti)
        inner = term if inner is None else inner + term
    (jt,) = kiln.core.grad(inner, [u])
    return (out, jt, aux) if has_aux else (out, jt)


__all__ = ["cholesky", "cholesky_inverse", "det", "eigh", "inv", "lu_factor", "qr", "solve",
           "solve_triangular", "svd", "pinv", "lstsq", "matrix_rank", "norm", "jvp"]
