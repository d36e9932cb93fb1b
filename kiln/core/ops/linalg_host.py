"""Matrix decompositions and solvers (``keras.ops.linalg``): primitives whose kernels call
NumPy's LAPACK on the host (``backends/cpu/linalg_host.py``; CUDA takes its documented host
fallback, the reference).

Each op works on the last two axes, with any leading batch axes; the matrix axes must be
static (the gradients build masks of their size). Multi-output decompositions are one op with
a ``part`` attribute (``qr`` -> "q" / "r", ``eigh`` -> "w" / "v", ``svd`` -> "u" / "s" / "vh",
``lu_factor`` -> "lu" / "piv"): equal nodes are shared, and as each part's VJP is linear in
its cotangent, autodiff's sum of the parts' gradients is the decomposition's gradient.

A matrix LAPACK cannot factor (singular for ``solve``/``inv``, not positive definite for
``cholesky``) gives NaN in its place, as in JAX, rather than an exception from the compiled
function. ``cholesky`` and ``eigh`` read only the lower triangle (as LAPACK and NumPy do): their
gradients are with respect to that triangle (zero above the diagonal).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import fmt, require_float, same_dtype
from kiln.core.ops.registry import LINALG, Example, OpDef, apply, register


# ---- shape rules -----------------------------------------------------------------------------
def _matrix(op: str, x: TensorType, square: bool = True) -> None:
    require_float(op, x)
    if x.ndim < 2:
        raise ValueError(f"{op}: expected a matrix (rank >= 2), received shape {fmt(x.shape)}")
    n, m = x.shape[-2:]
    if square and n is not None and m is not None and n != m:
        raise ValueError(f"{op}: expected square matrices, received shape {fmt(x.shape)}")


def _same_infer(op: str):
    def infer(x: TensorType) -> TensorType:
        _matrix(op, x)
        return x
    return infer


def _det_infer(x: TensorType) -> TensorType:
    _matrix("det", x)
    return TensorType(x.shape[:-2], x.dtype)


def _solve_infer(op: str):
    def infer(a: TensorType, b: TensorType, **attrs: Any) -> TensorType:
        _matrix(op, a)
        dtype = same_dtype(op, a, b)
        if b.ndim != a.ndim:
            raise ValueError(f"{op}: b must have a's rank {a.ndim} (a {fmt(a.shape)}), "
                             f"received {fmt(b.shape)}")
        n, k = a.shape[-1], b.shape[-2]
        if n is not None and k is not None and n != k:
            raise ValueError(f"{op}: a {fmt(a.shape)} and b {fmt(b.shape)}: {n} unknowns but "
                             f"{k} equations")
        for x, y in zip(a.shape[:-2], b.shape[:-2]):
            if x is not None and y is not None and x != y:
                raise ValueError(f"{op}: a {fmt(a.shape)} and b {fmt(b.shape)} have different "
                                 "batch dimensions")
        batch = tuple(x if x is not None else y for x, y in zip(a.shape[:-2], b.shape[:-2]))
        return TensorType(batch + b.shape[-2:], dtype)
    return infer


def _eigh_infer(x: TensorType, *, part: str) -> TensorType:
    _matrix("eigh", x)
    return TensorType(x.shape[:-1], x.dtype) if part == "w" else x


def _qr_infer(x: TensorType, *, part: str, complete: bool) -> TensorType:
    _matrix("qr", x, square=False)
    m, n = x.shape[-2:]
    k = m if complete else (None if m is None or n is None else min(m, n))
    shape = (m, k) if part == "q" else (k, n)
    return TensorType(x.shape[:-2] + shape, x.dtype)


def _svd_infer(x: TensorType, *, part: str, full: bool) -> TensorType:
    _matrix("svd", x, square=False)
    m, n = x.shape[-2:]
    k = None if m is None or n is None else min(m, n)
    shape = {"u": (m, m if full else k), "s": (k,), "vh": (n if full else k, n)}[part]
    return TensorType(x.shape[:-2] + shape, x.dtype)


def _pinv_infer(x: TensorType, *, rcond: float | None) -> TensorType:
    _matrix("pinv", x, square=False)
    return TensorType(x.shape[:-2] + x.shape[-2:][::-1], x.dtype)


def _lu_infer(x: TensorType, *, part: str) -> TensorType:
    _matrix("lu_factor", x)
    return x if part == "lu" else TensorType(x.shape[:-1], "int32")


# ---- references ------------------------------------------------------------------------------
def _nan_on_failure(fn):
    """``fn`` on each matrix of the batch, NaN for those LAPACK cannot factor (singular, not
    positive definite), as JAX does: a compiled graph gets a value, not an exception."""
    def ref(x, *rest, **attrs):
        try:
            return np.asarray(fn(x, *rest, **attrs))
        except np.linalg.LinAlgError:
            pass
        first = np.asarray(fn(*_spd_like(x, rest), **attrs))  # the result's shape and dtype
        out = np.empty(x.shape[:-2] + first.shape[x.ndim - 2:], first.dtype)
        for idx in np.ndindex(x.shape[:-2]):
            try:
                out[idx] = fn(x[idx], *[r[idx] for r in rest], **attrs)
            except np.linalg.LinAlgError:
                out[idx] = np.nan
        return out
    return ref


def _spd_like(x, rest):
    n = x.shape[-1]
    eye = np.broadcast_to(np.eye(n, dtype=x.dtype), x.shape)
    return [eye] + [np.asarray(r) for r in rest]


def _tri(a: np.ndarray, lower: bool) -> np.ndarray:
    return np.tril(a) if lower else np.triu(a)


def _solve_tri_ref(a, b, *, lower):
    return np.linalg.solve(_tri(a, lower), b).astype(a.dtype)


def _eigh_ref(x, *, part):
    w, v = np.linalg.eigh(x)
    return w if part == "w" else v


def _qr_ref(x, *, part, complete):
    q, r = np.linalg.qr(x, mode="complete" if complete else "reduced")
    return q if part == "q" else r


def _svd_ref(x, *, part, full):
    u, s, vh = np.linalg.svd(x, full_matrices=full)
    return {"u": u, "s": s, "vh": vh}[part]


def _pinv_ref(x, *, rcond):
    out = np.linalg.pinv(x) if rcond is None else np.linalg.pinv(x, rcond=rcond)
    return out.astype(x.dtype)


def _lu_ref(x, *, part):
    """LAPACK's ``getrf``: ``L`` (unit diagonal, below) and ``U`` packed in one matrix, and the
    0-based row swapped with each row in turn (SciPy's ``lu_factor``)."""
    a = np.array(x, dtype=x.dtype, copy=True)
    n = a.shape[-1]
    piv = np.zeros(a.shape[:-1], np.int32)
    for idx in np.ndindex(a.shape[:-2]):
        m = a[idx]
        for j in range(n):
            p = j + int(np.argmax(np.abs(m[j:, j])))
            piv[idx + (j,)] = p
            if p != j:
                m[[j, p]] = m[[p, j]]
            if m[j, j] != 0:
                m[j + 1:, j] /= m[j, j]
                m[j + 1:, j + 1:] -= np.outer(m[j + 1:, j], m[j, j + 1:])
    return a if part == "lu" else piv


# ---- gradient helpers (graph nodes) ----------------------------------------------------------
def _const(value: np.ndarray, like: Node) -> Node:
    from kiln.core.ops.source import constant

    return constant(np.asarray(value, like.dtype))


def _n(op: str, x: Node) -> int:
    n = x.shape[-1]
    if n is None:
        raise ValueError(f"{op}: the gradient needs static matrix dims, received {fmt(x.shape)}")
    return int(n)


def _t(x: Node) -> Node:
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return apply("transpose", x, perm=perm)


def _mm(a: Node, b: Node) -> Node:
    return apply("matmul", a, b)


def _mask(x: Node, mask: np.ndarray) -> Node:
    return apply("mul", x, _const(mask, x))


def _lower_fold(g: Node, n: int) -> Node:
    """The gradient with respect to the lower triangle of a function of ``tril(A) +
    tril(A, -1).T`` whose symmetric-perturbation gradient is ``g`` (symmetric)."""
    return apply("sub", _mask(apply("add", g, _t(g)), np.tril(np.ones((n, n)))),
                 _mask(g, np.eye(n)))


def _sym(g: Node) -> Node:
    return apply("mul", apply("add", g, _t(g)), _const(np.asarray(0.5), g))


def _diag_embed(v: Node, n: int) -> Node:
    return apply("mul", apply("expand_dims", v, axis=(v.ndim - 1,)), _const(np.eye(n), v))


def _cholesky_vjp(ct, out, x):
    n = _n("cholesky", x)
    phi = _mask(_mm(_t(out), ct), np.tril(np.ones((n, n))) - 0.5 * np.eye(n))
    z = apply("solve_triangular", _t(out), phi, lower=False)  # L^-T phi
    g = _t(apply("solve_triangular", _t(out), _t(z), lower=False))  # L^-T phi L^-1
    return [_lower_fold(_sym(g), n)]


def _solve_tri_vjp(ct, out, a, b, *, lower):
    n = _n("solve_triangular", a)
    gb = apply("solve_triangular", _t(a), ct, lower=not lower)
    mask = np.tril(np.ones((n, n))) if lower else np.triu(np.ones((n, n)))
    return [_mask(apply("neg", _mm(gb, _t(out))), mask), gb]


def _solve_vjp(ct, out, a, b):
    gb = apply("solve", _t(a), ct)
    return [apply("neg", _mm(gb, _t(out))), gb]


def _inv_vjp(ct, out, x):
    return [apply("neg", _mm(_mm(_t(out), ct), _t(out)))]


def _det_vjp(ct, out, x):
    scale = apply("expand_dims", apply("mul", ct, out), axis=(out.ndim, out.ndim + 1))
    return [apply("mul", scale, _t(apply("inv", x)))]


def _eigh_vjp(ct, out, x, *, part):
    n = _n("eigh", x)
    v = apply("eigh", x, part="v")
    if part == "w":
        g = _mm(_mm(v, _diag_embed(ct, n)), _t(v))
    else:
        w = apply("eigh", x, part="w")
        diff = apply("sub", apply("expand_dims", w, axis=(w.ndim - 1,)),
                     apply("expand_dims", w, axis=(w.ndim,)))  # w_j - w_i at (i, j)
        eye = _const(np.eye(n), diff)
        f = _mask(apply("reciprocal", apply("add", diff, eye)), 1 - np.eye(n))
        g = _mm(_mm(v, apply("mul", f, _mm(_t(v), ct))), _t(v))
    return [_lower_fold(_sym(g), n)]


def _copyltu(m: Node, n: int) -> Node:
    low = _mask(m, np.tril(np.ones((n, n)), -1))
    return apply("add", apply("add", low, _t(low)), _mask(m, np.eye(n)))


def _qr_vjp(ct, out, x, *, part, complete):
    m, n = x.shape[-2:]
    if m is None or n is None or m < n or (complete and m != n):
        raise ValueError(f"qr: the gradient is defined for reduced factors of matrices with at "
                         f"least as many rows as columns, received {fmt(x.shape)} "
                         f"(complete={complete})")
    q = apply("qr", x, part="q", complete=complete)
    r = apply("qr", x, part="r", complete=complete)
    if part == "q":
        mm = apply("neg", _mm(_t(ct), q))
        left = apply("add", ct, _mm(q, _copyltu(mm, n)))
    else:
        left = _mm(q, _copyltu(_mm(r, _t(ct)), n))
    # left @ R^-T: solve R Y^T = left^T
    return [_t(apply("solve_triangular", r, _t(left), lower=False))]


def _svd_vjp(ct, out, x, *, part, full):
    if part != "s":
        raise ValueError("svd: only the singular values are differentiable in kiln (the "
                         f"gradient of {part!r} is not supported)")
    u = apply("svd", x, part="u", full=False)
    vh = apply("svd", x, part="vh", full=False)
    m = x.shape[-2]
    if m is None:
        raise ValueError(f"svd: the gradient needs static matrix dims, received {fmt(x.shape)}")
    k = min(int(m), _n("svd", x))
    return [_mm(_mm(u, _diag_embed(ct, k)), vh)]


def _pinv_vjp(ct, out, x, *, rcond):
    m, n = x.shape[-2:]
    if m is None or n is None:
        raise ValueError(f"pinv: the gradient needs static matrix dims, received "
                         f"{fmt(x.shape)}")
    ax = _mm(x, out)  # m x m
    xa = _mm(out, x)  # n x n
    p = apply("sub", _const(np.eye(m), x), ax)
    q = apply("sub", _const(np.eye(n), x), xa)
    term1 = apply("neg", _mm(_mm(_t(out), ct), _t(out)))
    term2 = _mm(_mm(p, _t(ct)), _mm(out, _t(out)))
    term3 = _mm(_mm(_mm(_t(out), out), _t(ct)), q)
    return [apply("add", apply("add", term1, term2), term3)]


# ---- examples --------------------------------------------------------------------------------
def _spd(rng, shape, dt):
    a = rng.normal(size=shape)
    n = shape[-1]
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dt)


def _well(rng, shape, dt):
    n = shape[-1]
    return (rng.normal(size=shape) + 3 * np.eye(n)).astype(dt)


def _ex(*inputs, wrt=None, **attrs) -> Example:
    return Example(tuple(inputs), attrs, wrt)


def _chol_examples(rng, dt):
    return [_ex(_spd(rng, (3, 3), dt)), _ex(_spd(rng, (2, 4, 4), dt))]


def _solve_examples(rng, dt):
    return [_ex(_well(rng, (3, 3), dt), rng.normal(size=(3, 2)).astype(dt)),
            _ex(_well(rng, (2, 4, 4), dt), rng.normal(size=(2, 4, 1)).astype(dt))]


def _solve_tri_examples(rng, dt):
    out = []
    for lower in (True, False):
        a = _well(rng, (2, 3, 3), dt)
        out.append(_ex(a, rng.normal(size=(2, 3, 2)).astype(dt), lower=lower))
    return out


def _square_examples(rng, dt):
    return [_ex(_well(rng, (3, 3), dt)), _ex(_well(rng, (2, 4, 4), dt))]


def _eigh_examples(rng, dt):
    # well separated eigenvalues: the eigenvectors' finite differences are stable
    def sym(shape):
        n = shape[-1]
        q, _ = np.linalg.qr(rng.normal(size=shape))
        w = np.arange(1, n + 1) * 1.5
        return (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)
    return [_ex(sym((3, 3)).astype(dt), part="w"), _ex(sym((2, 4, 4)).astype(dt), part="v")]


def _qr_examples(rng, dt):
    out = []
    for part in ("q", "r"):
        out.append(_ex(rng.normal(size=(4, 3)).astype(dt), part=part, complete=False))
        out.append(_ex(rng.normal(size=(2, 3, 3)).astype(dt), part=part, complete=False))
    out.append(_ex(rng.normal(size=(4, 2)).astype(dt), part="q", complete=True, wrt=()))
    return out


def _svd_examples(rng, dt):
    x = rng.normal(size=(4, 3)).astype(dt)
    return [_ex(x, part="s", full=False), _ex(rng.normal(size=(2, 3, 5)).astype(dt),
                                              part="s", full=True),
            _ex(x, part="u", full=False, wrt=()), _ex(x, part="vh", full=True, wrt=())]


def _pinv_examples(rng, dt):
    return [_ex(rng.normal(size=(4, 3)).astype(dt), rcond=None),
            _ex(rng.normal(size=(2, 2, 3)).astype(dt), rcond=None)]


def _lu_examples(rng, dt):
    x = rng.normal(size=(2, 4, 4)).astype(dt)
    return [_ex(x, part="lu"), _ex(x, part="piv")]


register(OpDef("cholesky", LINALG, _same_infer("cholesky"),
               _nan_on_failure(lambda x: np.linalg.cholesky(x)), _cholesky_vjp,
               examples=_chol_examples))
register(OpDef("solve_triangular", LINALG, _solve_infer("solve_triangular"),
               _nan_on_failure(_solve_tri_ref), _solve_tri_vjp, examples=_solve_tri_examples))
register(OpDef("solve", LINALG, _solve_infer("solve"),
               _nan_on_failure(lambda a, b: np.linalg.solve(a, b)), _solve_vjp,
               examples=_solve_examples))
register(OpDef("inv", LINALG, _same_infer("inv"), _nan_on_failure(lambda x: np.linalg.inv(x)),
               _inv_vjp, examples=_square_examples))
register(OpDef("det", LINALG, _det_infer, lambda x: np.asarray(np.linalg.det(x), x.dtype),
               _det_vjp, examples=_square_examples))
register(OpDef("eigh", LINALG, _eigh_infer, _eigh_ref, _eigh_vjp, examples=_eigh_examples))
register(OpDef("qr", LINALG, _qr_infer, _qr_ref, _qr_vjp, examples=_qr_examples))
register(OpDef("svd", LINALG, _svd_infer, _svd_ref, _svd_vjp, examples=_svd_examples))
register(OpDef("pinv", LINALG, _pinv_infer, _pinv_ref, _pinv_vjp, examples=_pinv_examples))
register(OpDef("lu_factor", LINALG, _lu_infer, _lu_ref, differentiable=False,
               nondiff_reason="the pivots are piecewise constant and the packed factors carry "
                              "them; differentiate solve or det instead",
               examples=_lu_examples))

HOST_OPS = ("cholesky", "solve_triangular", "solve", "inv", "det", "eigh", "qr", "svd", "pinv",
            "lu_factor")
