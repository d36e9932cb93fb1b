"""``kiln.ops.numpy``, continued: arrays, shapes, diagonals and products (composites).

Diagonals are read with a constant mask and a sum over one axis (``where``, so an inf or NaN
off the diagonal does not leak in), placed with a mask and a pad; ``kron``/``outer``/
``tensordot``/``cross`` are products of broadcast views or ``einsum``; ``roll``/``rot90``
are slices, concatenations and transposes; ``correlate`` gathers its windows with one
``take`` of constant indices. Creation functions (``tri``, ``logspace``, the windows ...)
return NumPy arrays (constants inside a traced step), as ``eye`` and ``linspace`` do.
"""

from __future__ import annotations

# ruff: noqa: A001
import builtins

import numpy as np

import kiln.config
from kiln.ops import _G, _dual, broadcast_to
from kiln.ops._numpy_shape import _ax, _sl, _static
from kiln.ops._shapes import created, full, ones, zeros

_N = _G.as_node
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
__all__ = ["broadcast_to", "full", "ones", "zeros"]


def _c(value, like):
    return _G.constant(np.asarray(value, like.dtype))


def _export(fn, name, doc, first="tensor"):
    op = _dual(fn, name, first=first)
    op.__doc__ = doc
    globals()[name] = op
    __all__.append(name)
    return op


def _shape(op, x):
    if None in x.shape:
        raise ValueError(f"{op}: needs a tensor of known shape, received {x.shape}")
    return x.shape


# ---- arrays -------------------------------------------------------------------------------------
def _array(x, dtype=None):
    x = _N(x)
    return _G.identity(x) if dtype is None or dtype == x.dtype else _G.cast(x, dtype)


def _empty_like(x, dtype=None):
    x = _N(x)
    out = _G.zeros_like(x)
    return out if dtype is None else _G.cast(out, dtype)


def empty(shape, dtype=None):
    """An array of ``shape`` (kiln fills it with zeros; default dtype floatx)."""
    return zeros(shape, dtype)


def ndim(x):
    """The rank of ``x`` (an int)."""
    return _N(x).ndim if _is_sym(x) else np.ndim(x)


def size(x):
    """The number of elements of ``x``: an int when the shape is static, else a scalar
    tensor (run-time shapes)."""
    if not _is_sym(x):
        return int(np.size(x))
    x = _N(x)
    return int(np.prod(x.shape, dtype=np.int64)) if None not in x.shape else _G.size_of(x)


def _is_sym(x):
    return isinstance(x, _G.Node) or hasattr(x, "__kiln_node__")


def _view(x, dtype=None):
    x = _N(x)
    if dtype is None or np.dtype(dtype) == np.dtype(x.dtype):
        return _G.identity(x)
    raise NotImplementedError(f"view: reinterpreting {x.dtype} bits as {dtype} is not "
                              "supported on kiln tensors (only NumPy arrays)")


def view(x, dtype=None):
    """``x`` with its bytes read as ``dtype`` (NumPy arrays; tensors only for their own dtype)."""
    if not _is_sym(x) and dtype is not None:
        return np.asarray(x).view(dtype)
    return _view_op(x, dtype)


_view_op = _dual(_view, "view")
__all__ += ["empty", "ndim", "size", "view"]
_export(_array, "array", "``x`` as a tensor (of ``dtype`` when given).")
_export(lambda x: _G.identity(_N(x)), "copy", "A copy of ``x``.")
_export(_empty_like, "empty_like", "An array of the shape of ``x`` (zeros in kiln).")
_export(lambda x: _G.reshape(_N(x), (-1,)), "ravel", "``x`` flattened to 1-D.")


def _get_item(x, key):
    x = _N(x)
    if isinstance(key, list | np.ndarray) or _is_sym(key):
        idx = _N(key) if _is_sym(key) else np.asarray(key)
        if str(idx.dtype) == "bool":
            raise TypeError(f"get_item: a boolean mask gives a data-dependent shape; received "
                            f"a mask of shape {idx.shape} for a tensor of shape {x.shape}")
        return _G.take(x, idx if _is_sym(key) else idx.astype(np.int64), axis=0)
    return _G.getitem(x, key)


_export(_get_item, "get_item", "``x[key]``: ints, slices, None, Ellipsis, or an integer index "
        "array (a gather along axis 0).")


# ---- joining and splitting ----------------------------------------------------------------------
def _append(x1, x2, axis=None):
    a, b = _promote2(x1, x2)
    if axis is None:
        return _G.concatenate([_G.reshape(a, (-1,)), _G.reshape(b, (-1,))], axis=0)
    return _G.concatenate([a, b], axis=axis)


def _array_split(x, indices_or_sections, axis=0):
    x = _N(x)
    axis = _ax("array_split", axis, x.ndim)
    if not isinstance(indices_or_sections, int | np.integer):
        from kiln.ops._numpy_shape import _split
        return _split(x, indices_or_sections, axis)
    n, k = _static("array_split", x, axis), int(indices_or_sections)
    if k < 1:
        raise ValueError(f"array_split: the number of sections must be >= 1, received {k}")
    sizes = [n // k + 1] * (n % k) + [n // k] * (k - n % k)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [_sl(x, axis, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def _atleast(x, rank):
    x = _N(x)
    if x.ndim >= rank:
        return x
    if rank == 2:
        return _G.reshape(x, (1, -1)) if x.ndim == 1 else _G.reshape(x, (1, 1))
    if x.ndim == 0:
        return _G.reshape(x, (1, 1, 1))
    return _G.reshape(x, (1, -1, 1)) if x.ndim == 1 else _G.expand_dims(x, -1)


def _hsplit(x, indices_or_sections):
    x = _N(x)
    return _array_split_exact(x, indices_or_sections, 1 if x.ndim > 1 else 0, "hsplit")


def _array_split_exact(x, ios, axis, op):
    if x.ndim <= axis:
        raise ValueError(f"{op}: needs a tensor of rank >= {axis + 1}, received {x.shape}")
    from kiln.ops._numpy_shape import _split
    return _split(x, ios, axis)


_export(_append, "append", "``x1`` and ``x2`` joined along ``axis`` (flattened when None).")
_export(_array_split, "array_split", "``np.array_split``: like ``split``, sections may differ "
        "by one.")
_export(_hsplit, "hsplit", "Split along axis 1 (axis 0 for 1-D).")
_export(lambda x, indices_or_sections: _array_split_exact(_N(x), indices_or_sections, 0,
                                                         "vsplit"),
        "vsplit", "Split along axis 0 (rank >= 2).")
_export(lambda x, indices_or_sections: _array_split_exact(_N(x), indices_or_sections, 2,
                                                         "dsplit"),
        "dsplit", "Split along axis 2 (rank >= 3).")


def _atleast1(x):
    return _G.reshape(x, (1,)) if x.ndim == 0 else x


_export(lambda xs: _G.concatenate([_atleast1(_N(x)) for x in xs],
                                  axis=0 if builtins.all(_N(x).ndim <= 1 for x in xs) else 1),
        "hstack", "Tensors joined column-wise (along axis 1; 1-D ones end to end).", "tensors")
_export(lambda xs: _G.concatenate([_atleast(x, 2) for x in xs], axis=0), "vstack",
        "Tensors joined row-wise (1-D ones as rows).", "tensors")
_export(lambda xs: _G.concatenate([_atleast(x, 3) for x in xs], axis=2), "dstack",
        "Tensors joined along axis 2 (after ``atleast_3d``).", "tensors")


# ---- axes ---------------------------------------------------------------------------------------
def _moveaxis(x, source, destination):
    x = _N(x)
    src = [source] if isinstance(source, int | np.integer) else list(source)
    dst = [destination] if isinstance(destination, int | np.integer) else list(destination)
    if len(src) != len(dst):
        raise ValueError(f"moveaxis: source {source} and destination {destination} must have "
                         "the same number of axes")
    src = [_ax("moveaxis", s, x.ndim) for s in src]
    dst = [_ax("moveaxis", d, x.ndim) for d in dst]
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _G.transpose(x, tuple(order))


def _swapaxes(x, axis1, axis2):
    x = _N(x)
    perm = list(range(x.ndim))
    a, b = _ax("swapaxes", axis1, x.ndim), _ax("swapaxes", axis2, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return _G.transpose(x, tuple(perm))


def _flip1(x, axis):
    return _G.slice(x, [(None, None, -1) if a == axis else (None, None, 1)
                        for a in range(x.ndim)])


def _rot90(array, k=1, axes=(0, 1)):
    x = _N(array)
    a0, a1 = (_ax("rot90", a, x.ndim) for a in axes)
    if a0 == a1 or x.ndim < 2:
        raise ValueError(f"rot90: axes {axes} must be two different axes of a tensor of rank "
                         f">= 2, received shape {x.shape}")
    k = int(k) % 4
    if k == 0:
        return x
    if k == 2:
        return _flip1(_flip1(x, a0), a1)
    if k == 1:
        return _swapaxes(_flip1(x, a1), a0, a1)
    return _flip1(_swapaxes(x, a0, a1), a1)


def _roll(x, shift, axis=None):
    x = _N(x)
    if axis is None:
        return _G.reshape(_roll(_G.reshape(x, (-1,)), shift, 0), x.shape if None not in x.shape
                          else (-1,) + x.shape[1:])
    shifts = [shift] if isinstance(shift, int | np.integer) else list(shift)
    axes = [axis] if isinstance(axis, int | np.integer) else list(axis)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1 and len(shifts) > 1:
        axes = axes * len(shifts)
    for s, a in zip(shifts, axes):
        a = _ax("roll", a, x.ndim)
        n = _static("roll", x, a)
        s = int(s) % n if n else 0
        if s:
            x = _G.concatenate([_sl(x, a, n - s, n), _sl(x, a, 0, n - s)], axis=a)
    return x


_export(_moveaxis, "moveaxis", "``x`` with axes ``source`` moved to ``destination``.")
_export(_swapaxes, "swapaxes", "``x`` with ``axis1`` and ``axis2`` exchanged.")
_export(lambda x: _flip1(_N(x), 1), "fliplr", "``x`` reversed along axis 1.")
_export(lambda x: _flip1(_N(x), 0), "flipud", "``x`` reversed along axis 0.")
_export(_rot90, "rot90", "``x`` rotated by 90 degrees ``k`` times in the plane ``axes``.")
_export(_roll, "roll", "``x`` shifted cyclically by ``shift`` along ``axis`` (flat when None).")


# ---- diagonals ----------------------------------------------------------------------------------
def _diagonal(x, offset=0, axis1=0, axis2=1):
    x = _N(x)
    if x.ndim < 2:
        raise ValueError(f"diagonal: needs a tensor of rank >= 2, received {x.shape}")
    a1, a2 = _ax("diagonal", axis1, x.ndim), _ax("diagonal", axis2, x.ndim)
    if a1 == a2:
        raise ValueError(f"diagonal: axis1 and axis2 must differ, received {axis1}, {axis2}")
    if x.dtype == "bool":
        return _G.cast(_diagonal(_G.cast(x, "int32"), offset, a1, a2), "bool")
    y = _moveaxis(x, (a1, a2), (-2, -1))
    n, m = _static("diagonal", y, y.ndim - 2), _static("diagonal", y, y.ndim - 1)
    k = int(offset)
    length = builtins.max(0, builtins.min(n + builtins.min(k, 0), m - builtins.max(k, 0)))
    mask = _G.constant(np.eye(n, m, k, dtype=bool))
    if k >= 0:  # row i holds entry (i, i + k)
        d = _G.sum(_G.where(mask, y, _c(0, y)), axis=-1)
        return _sl(d, d.ndim - 1, 0, length)
    d = _G.sum(_G.where(mask, y, _c(0, y)), axis=-2)  # column j holds entry (j - k, j)
    return _sl(d, d.ndim - 1, 0, length)


def _trace(x, offset=0, axis1=0, axis2=1):
    x = _N(x)
    if x.dtype == "bool":
        x = _G.cast(x, "int32")
    return _G.sum(_diagonal(x, offset, axis1, axis2), axis=-1)


def _diag(x, k=0):
    x = _N(x)
    k = int(k)
    if x.ndim == 2:
        return _diagonal(x, k)
    if x.ndim != 1:
        raise ValueError(f"diag: needs a 1-D or 2-D tensor, received shape {x.shape}")
    n = _static("diag", x, 0)
    sq = _G.where(_G.constant(np.eye(n, dtype=bool)), _G.expand_dims(x, 1), _c(0, x))
    a = builtins.abs(k)
    return _G.pad(sq, ((0, a), (a, 0)) if k >= 0 else ((a, 0), (0, a)), 0.0)


_export(_diagonal, "diagonal", "The diagonal ``offset`` of the planes (axis1, axis2), as the "
        "last axis.")
_export(_trace, "trace", "Sum of the diagonal ``offset`` of the planes (axis1, axis2).")
_export(_diag, "diag", "The diagonal ``k`` of a matrix, or a matrix with a vector on it.")
_export(lambda x, k=0: _diag(_G.reshape(_N(x), (-1,)), k), "diagflat",
        "A matrix with the flattened ``x`` on diagonal ``k``.")


def tri(N, M=None, k=0, dtype=None):
    """Ones at and below diagonal ``k`` of an (N, M) matrix (a NumPy array, floatx)."""
    return created(np.tri(int(N), None if M is None else int(M), int(k),
                          dtype=dtype or kiln.config.floatx()))


__all__ += ["tri"]


# ---- products -----------------------------------------------------------------------------------
def _promote2(x1, x2):
    from kiln.ops.numpy_math import _promote
    return _promote(x1, x2)


def _tensordot(x1, x2, axes=2):
    a, b = _promote2(x1, x2)
    if isinstance(axes, int | np.integer):
        n = int(axes)
        ax_a, ax_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, int | np.integer) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, int | np.integer) else list(ax_b)
    ax_a = [_ax("tensordot", i, a.ndim) for i in ax_a]
    ax_b = [_ax("tensordot", i, b.ndim) for i in ax_b]
    if len(ax_a) != len(ax_b):
        raise ValueError(f"tensordot: axes {axes} pair {len(ax_a)} axes of x1 with "
                         f"{len(ax_b)} of x2")
    la = list(_LETTERS[:a.ndim])
    lb = list(_LETTERS[a.ndim:a.ndim + b.ndim])
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in ax_a] + [c for j, c in enumerate(lb)
                                                            if j not in ax_b]
    if a.dtype == "bool":
        a, b = _G.cast(a, "int32"), _G.cast(b, "int32")
    return _G.einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


def _outer(x1, x2):
    a, b = _promote2(x1, x2)
    return _G.expand_dims(_G.reshape(a, (-1,)), 1) * _G.expand_dims(_G.reshape(b, (-1,)), 0)


def _inner(x1, x2):
    a, b = _promote2(x1, x2)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return _tensordot(a, b, ([-1], [-1]))


def _vdot(x1, x2):
    a, b = _promote2(x1, x2)
    return _G.sum(_G.reshape(a, (-1,)) * _G.reshape(b, (-1,)))


def _kron(x1, x2):
    a, b = _promote2(x1, x2)
    nd = builtins.max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + _shape("kron", a)
    sb = (1,) * (nd - b.ndim) + _shape("kron", b)
    a = _G.reshape(a, tuple(d for p in zip(sa, (1,) * nd) for d in p))
    b = _G.reshape(b, tuple(d for p in zip((1,) * nd, sb) for d in p))
    return _G.reshape(a * b, tuple(p * q for p, q in zip(sa, sb)))


def _cross(x1, x2, axisa=-1, axisb=-1, axisc=-1, axis=None):
    a, b = _promote2(x1, x2)
    if axis is not None:
        axisa = axisb = axisc = axis
    a = _moveaxis(a, _ax("cross", axisa, a.ndim), -1)
    b = _moveaxis(b, _ax("cross", axisb, b.ndim), -1)
    na, nb = _static("cross", a, a.ndim - 1), _static("cross", b, b.ndim - 1)
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError(f"cross: the vectors must have 2 or 3 components, received {na} and "
                         f"{nb}")

    def comp(v, i, n):
        return _G.squeeze(_sl(v, v.ndim - 1, i, i + 1), -1) if i < n else None
    a0, a1, a2 = (comp(a, i, na) for i in range(3))
    b0, b1, b2 = (comp(b, i, nb) for i in range(3))
    z = a0 * b1 - a1 * b0
    if na == 2 and nb == 2:
        return z
    x = (a1 * b2 if a2 is None else a1 * b2 - a2 * b1) if b2 is not None else -(a2 * b1)
    y = (a2 * b0 - a0 * b2) if a2 is not None and b2 is not None else (
        a2 * b0 if a2 is not None else -(a0 * b2))
    out = _G.stack([x, y, z], axis=-1)
    return _moveaxis(out, -1, _ax("cross", axisc, out.ndim))


_export(_tensordot, "tensordot", "Sum of products over ``axes`` (an int: the last of x1 with "
        "the first of x2; or a pair of axis lists).")
_export(_outer, "outer", "Outer product of the flattened operands.")
_export(_inner, "inner", "Sum of products over the last axes.")
_export(_vdot, "vdot", "Dot product of the flattened operands.")
_export(_kron, "kron", "Kronecker product (static shapes).")
_export(_cross, "cross", "Cross product of 3-vectors (2-vectors: the z component).")


# ---- differences, grids, polynomials ------------------------------------------------------------
def _diff(a, n=1, axis=-1):
    x = _N(a)
    axis = _ax("diff", axis, x.ndim)
    for _ in range(int(n)):
        m = _static("diff", x, axis)
        hi, lo = _sl(x, axis, 1, m), _sl(x, axis, 0, builtins.max(m - 1, 0))
        x = _G.not_equal(hi, lo) if x.dtype == "bool" else hi - lo
    return x


def _meshgrid(*x, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', received {indexing!r}")
    vs = [_G.reshape(_N(v), (-1,)) for v in x]
    shape = [_static("meshgrid", v, 0) for v in vs]
    if indexing == "xy" and len(vs) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, v in enumerate(vs):
        pos = i
        if indexing == "xy" and len(vs) > 1 and i < 2:
            pos = 1 - i
        view = [1] * len(vs)
        view[pos] = -1
        out.append(_G.broadcast_to(_G.reshape(v, tuple(view)), tuple(shape)))
    return out


def meshgrid(*x, indexing="xy"):
    """Coordinate grids of 1-D tensors (``'xy'``: Cartesian, ``'ij'``: matrix indexing)."""
    if any(_is_sym(v) for v in x):
        return _meshgrid(*x, indexing=indexing)
    return _meshgrid_op(list(x), indexing)


_meshgrid_op = _dual(lambda xs, indexing: _meshgrid(*xs, indexing=indexing), "meshgrid",
                     first="tensors")


def _vander(x, N=None, increasing=False):
    x = _N(x)
    if x.ndim != 1:
        raise ValueError(f"vander: needs a 1-D tensor, received shape {x.shape}")
    n = _static("vander", x, 0) if N is None else int(N)
    cols, p = [], _G.ones_like(x)
    for _ in range(n):
        cols.append(p)
        p = p * x
    if not increasing:
        cols = cols[::-1]
    return _G.stack(cols, axis=1) if cols else _G.reshape(_sl(x, 0, 0, 0), (-1, 0))


def _select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist) or not condlist:
        raise ValueError(f"select: condlist and choicelist need the same (nonzero) length, "
                         f"received {len(condlist)} and {len(choicelist)}")
    choices = [_N(c) for c in choicelist]
    out = _N(default, choices[0].dtype)
    for c, v in zip(condlist[::-1], choices[::-1]):
        c = _N(c)
        out = _G.where(c if c.dtype == "bool" else _G.not_equal(c, _c(0, c)), v, out)
    return out


def _correlate(x1, x2, mode="valid"):
    from kiln.ops.numpy_math import _fpair
    a, v = _fpair(x1, x2)  # Keras: floats (ints in floatx)
    if a.ndim != 1 or v.ndim != 1:
        raise ValueError(f"correlate: needs 1-D tensors, received {a.shape} and {v.shape}")
    na, nv = _static("correlate", a, 0), _static("correlate", v, 0)
    if mode not in ("valid", "same", "full"):
        raise ValueError(f"correlate: mode must be 'valid', 'same' or 'full', received {mode!r}")
    # full[k] = sum_n a[n + k - (nv - 1)] v[n], k in [0, na + nv - 1): one gather of windows
    padded = _G.pad(a, ((nv - 1, nv - 1),), 0.0)
    nfull = na + nv - 1
    if mode == "full":
        start, length = 0, nfull
    elif mode == "valid":
        start, length = builtins.min(na, nv) - 1, builtins.max(na, nv) - builtins.min(na, nv) + 1
    else:
        length = builtins.max(na, nv)
        start = (nv - 1) // 2 if na >= nv else nfull - ((na - 1) // 2 + nv)
    idx = np.arange(start, start + length)[:, None] + np.arange(nv)[None, :]
    windows = _G.take(padded, idx.astype(np.int32), axis=0)
    return _G.sum(windows * v, axis=-1)


def _unravel_index(indices, shape):
    idx = _N(indices)
    dims = [int(d) for d in shape]
    out = []
    from kiln.ops.numpy_math import _int_floordiv
    for i in range(len(dims)):
        stride = int(np.prod(dims[i + 1:], dtype=np.int64))
        q = _int_floordiv(idx, _c(stride, idx))
        out.append(q - _int_floordiv(q, _c(dims[i], idx)) * _c(dims[i], idx))
    return tuple(out)


__all__ += ["meshgrid"]
_export(_diff, "diff", "The ``n``-th discrete difference along ``axis``.")
_export(_vander, "vander", "The Vandermonde matrix of a 1-D tensor (``N`` columns).")
_export(_select, "select", "Per element, the choice of the first true condition, else "
        "``default``.", "value")
_export(_correlate, "correlate", "Cross-correlation of two 1-D tensors ('valid', 'same', "
        "'full').")
_export(_unravel_index, "unravel_index", "Flat indices as a tuple of coordinate tensors of "
        "``shape``.")


# ---- creation -----------------------------------------------------------------------------------
def logspace(start, stop, num=50, endpoint=True, base=10, dtype=None, axis=0):
    """``base ** linspace(start, stop)`` (a NumPy array, floatx)."""
    out = np.logspace(start, stop, int(num), endpoint=endpoint, base=base, axis=axis)
    return created(out.astype(dtype or kiln.config.floatx()))


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """Numbers spaced evenly on a log scale from start to stop (a NumPy array, floatx)."""
    out = np.geomspace(start, stop, int(num), endpoint=endpoint, axis=axis)
    return created(out.astype(dtype or kiln.config.floatx()))


def _window(fn, name):
    def f(x):
        return created(fn(int(x)).astype(kiln.config.floatx()))
    f.__name__ = name
    f.__doc__ = f"The {name} window of ``x`` points (a NumPy array, floatx)."
    return f


bartlett, blackman = _window(np.bartlett, "bartlett"), _window(np.blackman, "blackman")
hamming, hanning = _window(np.hamming, "hamming"), _window(np.hanning, "hanning")


def kaiser(x, beta):
    """The Kaiser window of ``x`` points and shape ``beta`` (a NumPy array, floatx)."""
    return created(np.kaiser(int(x), float(beta)).astype(kiln.config.floatx()))


__all__ += ["logspace", "geomspace", "bartlett", "blackman", "hamming", "hanning", "kaiser"]

