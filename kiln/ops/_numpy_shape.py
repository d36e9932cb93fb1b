"""``kiln.ops.numpy``, continued: shapes, indexing, scans, sorting, products."""

from __future__ import annotations

# ruff: noqa: A001
import builtins

import numpy as np

from kiln.ops import _G, _dual

_N = _G.as_node


def _c(value, like):
    return _G.constant(np.asarray(value, like.dtype))


def _ax(op, axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of rank {ndim}")
    return int(axis) % ndim


def _static(op, x, axis):
    n = x.shape[axis]
    if n is None:
        raise ValueError(f"{op}: axis {axis} of a tensor of shape {x.shape} must have a known "
                         "size")
    return n


def _sl(x, axis, start, stop):
    spec = [(None, None, 1)] * x.ndim
    spec[axis] = (start, stop, 1)
    return _G.slice(x, spec)


# ---- movement ------------------------------------------------------------------------------------
def _reshape(x, newshape):
    if isinstance(newshape, int | np.integer):
        newshape = (int(newshape),)
    from kiln.ops._shapes import reshape_symbolic

    out = reshape_symbolic(x, newshape)  # ops.shape(x)[0] in the shape (Keras code)
    return _G.reshape(x, newshape) if out is None else out


def _transpose(x, axes=None, *, perm=None):
    return _G.transpose(x, perm if axes is None else axes)


reshape = _dual(_reshape, "reshape")
reshape.__doc__ = "``x`` in shape ``newshape`` (one entry may be -1)."
transpose = _dual(_transpose, "transpose")
transpose.__doc__ = "``x`` with its axes permuted by ``axes`` (reversed when None)."
expand_dims = _dual(_G.expand_dims, "expand_dims")
squeeze = _dual(_G.squeeze, "squeeze")
_ORDER = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")


def _same_dtype(xs):
    """The tensors of ``xs`` in one dtype, as Keras' concatenate/stack promote them: a float
    beats any int (the widest float present), else the widest int; Python numbers take the
    tensors' dtype."""
    nodes = [_N(x) if _is_tensor(x) else x for x in xs]
    kinds = {n.dtype for n in nodes if _is_tensor(n)}
    if len(kinds) <= 1:
        like = next((n for n in nodes if _is_tensor(n)), None)
        return [n if _is_tensor(n) or like is None else _c(n, like) for n in nodes]
    floats = [d for d in kinds if d.startswith("float")]
    known = [d for d in (floats or kinds) if d in _ORDER]
    dtype = max(known, key=_ORDER.index) if known else sorted(kinds)[0]
    return [n if _is_tensor(n) and n.dtype == dtype else
            (_G.cast(n, dtype) if _is_tensor(n) else _G.constant(np.asarray(n, dtype)))
            for n in nodes]


def _is_tensor(x):
    return isinstance(x, _G.Node) or hasattr(x, "__kiln_node__") or isinstance(x, np.ndarray)


def _concatenate(xs, axis=0):
    return _G.concatenate(_same_dtype(xs) if isinstance(xs, list | tuple) else xs, axis)


concatenate = _dual(_concatenate, "concatenate", first="tensors")
concatenate.__doc__ = ("Joins the tensors ``xs`` along ``axis`` (mixed dtypes meet in the "
                       "wider, a float beating any int, as in Keras).")


def _stack(x, axis=0):
    return _G.stack(_same_dtype(x) if isinstance(x, list | tuple) else x, axis)


stack = _dual(_stack, "stack", first="tensors")
stack.__doc__ = "Joins the tensors ``x`` along a new ``axis``."


def _flip(x, axis=None):
    x = _N(x)
    axes = range(x.ndim) if axis is None else (
        [axis] if isinstance(axis, int | np.integer) else list(axis))
    axes = {_ax("flip", a, x.ndim) for a in axes}
    return _G.slice(x, [(None, None, -1) if a in axes else (None, None, 1)
                        for a in range(x.ndim)])


flip = _dual(_flip, "flip")
flip.__doc__ = "``x`` reversed along ``axis`` (all axes when None; a view, no copy)."


def _split(x, indices_or_sections, axis=0):
    x = _N(x)
    axis = _ax("split", axis, x.ndim)
    n = x.shape[axis]
    if isinstance(indices_or_sections, int | np.integer):
        k = int(indices_or_sections)
        if n is None or k < 1 or n % k:
            raise ValueError(f"split: axis {axis} of {x.shape} cannot be split into {k} equal "
                             "parts")
        bounds = [i * (n // k) for i in range(k + 1)]
    else:
        n = _static("split", x, axis)
        cuts = [builtins.min(builtins.max(int(i) + (n if int(i) < 0 else 0), 0), n)
                for i in indices_or_sections]
        bounds = [0] + cuts + [n]
    return [_sl(x, axis, a, builtins.max(a, b)) for a, b in zip(bounds[:-1], bounds[1:])]


split = _dual(_split, "split")
split.__doc__ = ("Splits ``x`` into equal sections (an int) or at the given indices (a list), "
                 "like ``np.split``; returns a list.")


def _slice(inputs, start_indices, shape):
    if shape is None:  # kiln's form (shape None): one (start, stop, step) triple per axis
        return _G.slice(inputs, start_indices)
    starts = [int(s) for s in start_indices]
    return _G.slice(inputs, [(s, s + int(n), 1) if int(n) >= 0 else (s, None, 1)
                             for s, n in zip(starts, shape)])


slice = _dual(_slice, "slice")
slice.__doc__ = ("Keras' ``slice(x, start_indices, shape)`` (static starts; a size of -1 runs "
                 "to the end), or kiln's ``slice(x, spec)`` with one (start, stop, step) per axis.")


def _pad(x, pad_width, mode="constant", constant_values=None):
    x = _N(x)
    if not isinstance(mode, str):  # kiln's older pad(x, pads, value)
        mode, constant_values = "constant", mode
    pw = np.asarray(pad_width, dtype=np.int64)
    pw = np.broadcast_to(pw.reshape(-1, 2) if pw.ndim else pw, (x.ndim, 2))
    if mode != "constant":
        from kiln.ops.numpy_special import pad_by_mode
        return pad_by_mode(x, pw, mode)
    value = 0.0 if constant_values is None else float(constant_values)
    return _G.pad(x, tuple((int(a), int(b)) for a, b in pw), value)


pad = _dual(_pad, "pad")
pad.__doc__ = ("``x`` padded with ``constant_values`` (default 0); ``pad_width`` is an int, a "
               "(before, after) pair, or one pair per axis (``np.pad``; mode 'constant').")


def _take(x, indices, axis=None):
    x = _N(x)
    if axis is None:
        x, axis = _G.reshape(x, (-1,)), 0
    return _G.take(x, indices, axis=_ax("take", axis, x.ndim))


take = _dual(_take, "take")
take.__doc__ = ("Entries of ``x`` at integer ``indices`` along ``axis`` (``np.take``: the "
                "flat array when ``axis`` is None).")


def _take_along_axis(x, indices, axis=None):
    x, idx = _N(x), _N(indices)
    if axis is None:
        x, axis = _G.reshape(x, (-1,)), 0
        idx = _G.reshape(idx, (-1,))
    axis = _ax("take_along_axis", axis, x.ndim)
    if idx.ndim != x.ndim:
        raise ValueError(f"take_along_axis: indices of shape {idx.shape} must have the rank "
                         f"of x {x.shape}")
    rows = [a for a in range(x.ndim) if a != axis]
    if builtins.any(None not in (x.shape[a], idx.shape[a]) and x.shape[a] != idx.shape[a]
                    for a in rows):
        # NumPy broadcasts the two but along ``axis``: kiln does it on static shapes (a run-time
        # size must equal the other's: the op checks that when it runs)
        if builtins.any(d is None for d in x.shape + idx.shape):
            raise ValueError(f"take_along_axis: x of shape {x.shape} and indices of shape "
                             f"{idx.shape} differ off axis {axis}: broadcasting them needs "
                             "static shapes")
        full = [builtins.max(x.shape[a], idx.shape[a]) for a in range(x.ndim)]
        x = _G.broadcast_to(x, tuple(x.shape[a] if a == axis else full[a]
                                     for a in range(x.ndim)))
        idx = _G.broadcast_to(idx, tuple(idx.shape[a] if a == axis else full[a]
                                         for a in range(x.ndim)))
    return _G.take_along_axis(x, idx, axis)


take_along_axis = _dual(_take_along_axis, "take_along_axis")
take_along_axis.__doc__ = ("``np.take_along_axis`` (negative indices wrap; broadcasting the two "
                            "off ``axis`` needs static shapes).")


def _tile(x, repeats):
    from kiln.ops._shapes import SymbolicDim, static_entries

    x = _N(x)
    entries = static_entries(repeats)
    if entries is None:
        raise ValueError(f"tile: repeats must be ints, or computed from ops.shape dimensions, "
                         f"received {repeats!r}")
    if builtins.any(isinstance(r, SymbolicDim) for r in entries):
        return _tile_symbolic(x, entries)
    reps = [int(r) for r in entries]
    if len(reps) > x.ndim:
        x = _G.reshape(x, (1,) * (len(reps) - x.ndim) + x.shape) if None not in x.shape else \
            _G.expand_dims(x, tuple(range(len(reps) - x.ndim)))
    reps = [1] * (x.ndim - len(reps)) + reps
    for axis, r in enumerate(reps):
        if r < 0:
            raise ValueError(f"tile: repeats must be >= 0, received {repeats!r}")
        if r == 0:
            x = _sl(x, axis, 0, 0)
        elif r > 1:
            x = _G.concatenate([x] * r, axis=axis)
    return x


def _tile_symbolic(x, reps):
    """``tile`` with a repeat count known only at run time (``ops.shape(x)[0]``): along that
    axis ``x`` is broadcast to ``count`` copies (a new axis), which a reshape merges."""
    from kiln.ops._shapes import SymbolicDim, like_shape

    if len(reps) > x.ndim:
        x = _G.expand_dims(x, tuple(range(len(reps) - x.ndim)))
    reps = [1] * (x.ndim - len(reps)) + list(reps)
    for axis, r in enumerate(reps):
        if not isinstance(r, SymbolicDim):
            if r != 1:
                x = _tile(x, [1] * axis + [r] + [1] * (x.ndim - axis - 1))
            continue
        if x.shape[axis] == 1:  # the batch axis of a (1, n, n) mask: a broadcast
            target = tuple(r if a == axis else (d if d is not None else SymbolicDim(x, a))
                           for a, d in enumerate(x.shape))
            x = _G.broadcast_like(x, like_shape(target))
            continue
        grown = _G.expand_dims(x, (axis,))
        target = tuple(r if a == axis else (d if d is not None else SymbolicDim(grown, a))
                       for a, d in enumerate(grown.shape))
        grown = _G.broadcast_like(grown, like_shape(target))
        if builtins.any(d is None for d in x.shape):
            raise ValueError(f"tile: a run-time repeat count along axis {axis} needs the "
                             f"tensor's other dimensions known, received shape {x.shape}; "
                             "a size-1 axis (a (1, n, n) mask tiled to the batch) is supported")
        new_shape = list(x.shape)
        new_shape[axis] = -1
        x = _G.reshape(grown, tuple(new_shape))
    return x


tile = _dual(_tile, "tile")
tile.__doc__ = "``x`` repeated ``repeats`` times along each axis (``np.tile``)."


def _repeat(x, repeats, axis=None):
    x = _N(x)
    if axis is None:
        x, axis = _G.reshape(x, (-1,)), 0
    axis = _ax("repeat", axis, x.ndim)
    if isinstance(repeats, int | np.integer):
        r = int(repeats)
        if r < 0:
            raise ValueError(f"repeat: repeats must be >= 0, received {r}")
        if r == 1:
            return x
        n = x.shape[axis]
        if n is not None:
            return _G.take(x, np.repeat(np.arange(n, dtype=np.int32), r), axis=axis)
        y = _G.concatenate([_G.expand_dims(x, axis + 1)] * r, axis=axis + 1)
        if builtins.sum(d is None for d in x.shape) == 1:
            return _G.reshape(y, tuple(-1 if a == axis else d for a, d in enumerate(x.shape)))
        # other run-time dims too (the batch): the shape comes from a stand-in whose `axis`
        # holds r copies of x's (only x's first element along every static axis is read)
        first = x[tuple(builtins.slice(None) if d is None else builtins.slice(0, 1)
                        for d in x.shape)]
        like = _G.concatenate([first] * r, axis=axis) + _G.constant(
            np.zeros(tuple(1 if d is None else d for d in x.shape), x.dtype))
        return _G.apply("reshape_like", y, like)
    n = x.shape[axis]
    reps = np.asarray(repeats, dtype=np.int64).reshape(-1)
    if n is None or reps.size != n or np.any(reps < 0):
        raise ValueError(f"repeat: repeats {list(reps)} must be >= 0, one per element of "
                         f"axis {axis} of {x.shape}")
    return _G.take(x, np.repeat(np.arange(n, dtype=np.int32), reps), axis=axis)


repeat = _dual(_repeat, "repeat")
repeat.__doc__ = "Each element repeated ``repeats`` times along ``axis`` (``np.repeat``)."


def _tri_mask(op, x, k, lower):
    x = _N(x)
    if x.ndim < 2 or None in x.shape[-2:]:
        raise ValueError(f"{op}: needs a tensor of rank >= 2 with known last two dims, "
                         f"received {x.shape}")
    m = np.tri(x.shape[-2], x.shape[-1], int(k) if lower else int(k) - 1, dtype=bool)
    mask = _G.constant(m if lower else ~m)
    return _G.where(mask, x, _c(0, x))


tril = _dual(lambda x, k=0: _tri_mask("tril", x, k, True), "tril")
tril.__doc__ = "``x`` with the entries above diagonal ``k`` zeroed (last two axes)."
triu = _dual(lambda x, k=0: _tri_mask("triu", x, k, False), "triu")
triu.__doc__ = "``x`` with the entries below diagonal ``k`` zeroed (last two axes)."


# ---- scans ---------------------------------------------------------------------------------------
def _scan(op, x, axis, dtype, combine, unit):
    x = _N(x)
    if dtype is not None:
        x = _G.cast(x, dtype)
    elif x.dtype == "bool":
        x = _G.cast(x, "int32")
    if axis is None:
        x, axis = _G.reshape(x, (-1,)), 0
    axis = _ax(op, axis, x.ndim)
    n = _static(op, x, axis)
    shift = 1
    while shift < n:  # Hillis-Steele: after the step for `shift`, y[i] combines 2*shift terms
        pads = [(0, 0)] * x.ndim
        pads[axis] = (shift, 0)
        x = combine(x, _G.pad(_sl(x, axis, 0, n - shift), tuple(pads), unit))
        shift *= 2
    return x


def _cumsum(x, axis=None, dtype=None):
    return _scan("cumsum", x, axis, dtype, lambda a, b: a + b, 0.0)


def _cumprod(x, axis=None, dtype=None):
    return _scan("cumprod", x, axis, dtype, lambda a, b: a * b, 1.0)


cumsum = _dual(_cumsum, "cumsum")
cumsum.__doc__ = "Cumulative sum along ``axis`` (the flat array when None)."
cumprod = _dual(_cumprod, "cumprod")
cumprod.__doc__ = "Cumulative product along ``axis`` (the flat array when None)."


# ---- sorting ------------------------------------------------------------------------------------
def _sort(x, axis=-1):
    x = _N(x)
    axis = _ax("sort", axis, x.ndim)
    return _G.take_along_axis(x, _G.argsort(x, axis), axis)


def _argsort(x, axis=-1):
    x = _N(x)
    return _G.argsort(x, _ax("argsort", axis, x.ndim))


def _top_k(x, k, sorted=True):
    x = _N(x)
    n = _static("top_k", x, x.ndim - 1)
    if not 1 <= int(k) <= n:
        raise ValueError(f"top_k: k must be in [1, {n}], received {k}")
    idx = _G.argsort(x, -1, int(k), descending=True)  # ties: lower index first; NaN last
    return _G.take_along_axis(x, idx, -1), _G.cast(idx, "int32")


sort = _dual(_sort, "sort")
sort.__doc__ = "``x`` sorted ascending along ``axis`` (stable, NaN last)."
argsort = _dual(_argsort, "argsort")
argsort.__doc__ = "Indices (int64) that sort ``x`` along ``axis`` (stable, NaN last)."
top_k = _dual(_top_k, "top_k")
top_k.__doc__ = ("The ``k`` largest entries of the last axis and their indices (int32), "
                 "largest first (``sorted`` is always honoured: they come sorted).")


# ---- products ------------------------------------------------------------------------------------
def _pair(x1, x2):
    """Both operands as nodes; a number or array takes the symbolic operand's dtype."""
    if isinstance(x1, _G.Node) or hasattr(x1, "__kiln_node__"):
        a = _N(x1)
        return a, _N(x2, a.dtype)
    b = _N(x2) if isinstance(x2, _G.Node) or hasattr(x2, "__kiln_node__") else None
    if b is not None:
        return _N(x1, b.dtype), b
    return _N(x1), _N(x2)


def _matmul(x1, x2):
    a, b = _pair(x1, x2)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must not be scalars, received {a.shape} and "
                         f"{b.shape}")
    va, vb = a.ndim == 1, b.ndim == 1
    out = _G.matmul(_G.expand_dims(a, 0) if va else a, _G.expand_dims(b, -1) if vb else b)
    if vb:
        out = _G.squeeze(out, -1)
    if va:
        out = _G.squeeze(out, -2 if not vb else -1)
    return out


def _dot(x1, x2):
    a, b = _pair(x1, x2)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if b.ndim <= 2 and a.ndim <= 2:
        return _matmul(a, b)
    if b.ndim == 1:
        return _G.sum(a * b, axis=-1)
    letters = "abcdefghijklmnopqrstuvwxyz"
    la = letters[:a.ndim - 1]
    lb = letters[a.ndim - 1:a.ndim - 1 + b.ndim - 2]
    return _G.einsum(f"{la}z,{lb}zy->{la}{lb}y", a, b)


matmul = _dual(_matmul, "matmul")
matmul.__doc__ = "Matrix product with NumPy's rules for 1-D operands and batch dims."
dot = _dual(_dot, "dot")
dot.__doc__ = "``np.dot``: products of scalars, vectors, matrices, and sum over last/2nd-last."


def _einsum(subscripts, *operands, **kwargs):
    if kwargs:
        raise TypeError(f"einsum: unexpected keyword argument(s) {sorted(kwargs)}")
    return _G.einsum(subscripts, *operands)


einsum = _dual(_einsum, "einsum", first="value")
einsum.__doc__ = _G.einsum.__doc__


# ---- control -------------------------------------------------------------------------------------
def cond(pred, true_fn, false_fn):
    """``true_fn()`` if ``pred`` else ``false_fn()``.

    A static graph has no branches: with a symbolic ``pred`` BOTH branches are computed and the
    result selected with ``where`` (same structure from both; a NaN in the unused branch does
    not leak into the value, but both branches' costs are paid and gradients flow only through
    the selected one). With a concrete ``pred`` only the chosen branch runs.
    """
    if not isinstance(pred, _G.Node) and not hasattr(pred, "__kiln_node__"):
        return true_fn() if bool(np.asarray(pred)) else false_fn()
    p = _G.as_node(pred)
    if p.dtype != "bool":
        p = _G.not_equal(p, _c(0, p))
    t, f = true_fn(), false_fn()
    if type(t) in (list, tuple):
        if type(f) not in (list, tuple) or len(t) != len(f):
            raise ValueError("cond: true_fn and false_fn must return the same structure")
        return type(t)(_G.where(p, a, b) for a, b in zip(t, f))
    return _G.where(p, t, f)


__all__ = [n for n in list(globals()) if not n.startswith("_") and n not in (
    "annotations", "builtins", "np")]
