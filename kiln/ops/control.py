"""More of Keras 3's core ops: loops, branches, scatters, slices and small utilities (graph and
eager: see ``kiln.ops``).

A static graph has no data-dependent control flow, so:

* ``map`` / ``vectorized_map`` / ``fori_loop`` run as a ``scan`` (the body traced once) on
  symbolic values, and as a Python loop of eager ops on arrays;
* ``while_loop`` on symbolic values needs ``maximum_iterations``: it scans that many steps and
  stops updating the loop variables once ``cond`` is false (the remaining steps still cost);
* ``switch`` on a symbolic index computes every branch and selects (shapes must agree);
* ``scatter`` / ``scatter_update`` build a (positions x updates) mask: fine for the small
  index sets of losses and metrics, not for embedding-sized tables.
"""

from __future__ import annotations

import builtins
import inspect

import numpy as np

from kiln.ops import _G, _dual, is_symbolic
from kiln.ops import math as _math
from kiln.ops import scan as _scan

_N = _G.as_node


def _tensor(x):
    return isinstance(x, _G.Node) or hasattr(x, "__kiln_node__")


# ---- loops ---------------------------------------------------------------------------------------
def map(f, xs):  # noqa: A001  (Keras' name)
    """``stack([f(x) for x in xs])`` over the leading axis (``xs`` a tensor or a tuple/list of
    tensors sharing it; ``f`` returns a tensor or a tuple/list of them)."""
    if is_symbolic(xs):
        _, ys = _scan(lambda carry, x: (carry, f(x)), [], xs, name="map")
        return ys
    seqs = xs if isinstance(xs, list | tuple) else None
    n = len(seqs[0]) if seqs is not None else len(xs)
    outs = [f(type(seqs)(s[i] for s in seqs) if seqs is not None else xs[i]) for i in range(n)]
    if isinstance(outs[0], list | tuple):
        return type(outs[0])(np.stack([np.asarray(o[k]) for o in outs])
                             for k in range(len(outs[0])))
    return np.stack([np.asarray(o) for o in outs])


def vectorized_map(function, elements):
    """``function`` applied to each slice of ``elements`` along the first axis (as ``map``)."""
    return map(function, elements)


def fori_loop(lower, upper, body_fun, init_val):
    """``val = body_fun(i, val)`` for ``i`` in ``range(lower, upper)``; returns ``val``. On
    symbolic values the bounds must be Python ints (a scan over the static range)."""
    if not is_symbolic(init_val) and not _tensor(lower) and not _tensor(upper):
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(np.asarray(i, "int32"), val)
        return val
    if _tensor(lower) or _tensor(upper):
        raise ValueError("fori_loop: symbolic bounds are not supported (a static graph needs "
                         "the trip count); pass Python ints")
    if int(upper) <= int(lower):
        return init_val
    idx = _G.constant(np.arange(int(lower), int(upper), dtype="int32"))
    vals, back = _carrier(init_val)
    carry, _ = _scan(lambda c, i: (_carried(body_fun(i, back(c))), None), vals, idx,
                     name="fori_loop")
    return back(carry)


def _carrier(value):
    """A scan carries one dtype: ``value``'s tensors cast to a common float (float64 if one is;
    integers stay exact up to 2**24 in float32), and the function restoring the originals."""
    seq = isinstance(value, list | tuple)
    nodes = [_N(v) for v in (value if seq else [value])]
    wide = "float64" if builtins.any(n.dtype in ("float64", "int64") for n in nodes) \
        else "float32"
    dtypes = [n.dtype for n in nodes]

    def back(carry):
        carry = list(carry) if isinstance(carry, list | tuple) else [carry]
        out = [_G.cast(c, d) for c, d in zip(carry, dtypes)]
        return type(value)(out) if seq else out[0]
    _CARRIER_DTYPE[0] = wide
    return [_G.cast(n, wide) for n in nodes], back


_CARRIER_DTYPE = ["float32"]


def _carried(value):
    vals = value if isinstance(value, list | tuple) else [value]
    return [_G.cast(_N(v), _CARRIER_DTYPE[0]) for v in vals]


def while_loop(cond, body, loop_vars, maximum_iterations=None):
    """``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)``, at most
    ``maximum_iterations`` times (required on symbolic values)."""
    is_seq = isinstance(loop_vars, list | tuple)
    lv = tuple(loop_vars) if is_seq else (loop_vars,)
    if not is_symbolic(lv):
        i = 0
        while bool(np.asarray(cond(*lv))) and (maximum_iterations is None
                                               or i < maximum_iterations):
            out = body(*lv)
            lv = tuple(out) if isinstance(out, list | tuple) else (out,)
            i += 1
        return type(loop_vars)(lv) if is_seq else lv[0]
    if maximum_iterations is None:
        raise ValueError("while_loop: on symbolic values maximum_iterations is required (a "
                         "static graph runs a fixed number of steps; the loop variables stop "
                         "changing once cond is false)")
    vals, back = _carrier(list(lv))
    wide = vals[0].dtype

    def step(carry, _):
        active, vs = carry[0], back(carry[1:])
        go = _G.logical_and(_G.greater(active, _G.constant(np.asarray(0, wide))),
                            _bool(cond(*vs)))
        out = body(*vs)
        out = tuple(out) if isinstance(out, list | tuple) else (out,)
        if len(out) != len(vs):
            raise ValueError(f"while_loop: body returned {len(out)} values for {len(vs)} loop "
                             "variables")
        new = [_G.where(go, _G.cast(_N(o, v.dtype), wide), c)
               for o, v, c in zip(out, vs, carry[1:])]
        return [_G.cast(go, wide)] + new, None
    carry, _ = _scan(step, [_G.constant(np.asarray(1, wide))] + vals,
                     length=int(maximum_iterations), name="while_loop")
    res = tuple(back(carry[1:]))
    return type(loop_vars)(res) if is_seq else res[0]


def _bool(p):
    p = _N(p)
    if p.ndim:
        raise ValueError(f"while_loop: cond must return a scalar, received shape {p.shape}")
    return p if p.dtype == "bool" else _G.not_equal(p, _G.constant(np.asarray(0, p.dtype)))


def associative_scan(f, elems, reverse=False, axis=0):
    """Inclusive scan of the associative ``f`` along ``axis`` (static length) in ceil(log2 n)
    rounds of ``f`` (Hillis-Steele); ``elems`` a tensor or a tuple/list of tensors."""
    return _assoc(f, elems, reverse=reverse, axis=axis)


def _assoc_graph(f, elems, reverse=False, axis=0):
    seq = isinstance(elems, list | tuple)
    xs = [_N(e) for e in (elems if seq else [elems])]
    ax = axis % xs[0].ndim
    n = xs[0].shape[ax]
    if n is None or builtins.any(x.shape[ax] != n for x in xs):
        raise ValueError(f"associative_scan: axis {axis} must be static and shared, received "
                         f"{[x.shape for x in xs]}")

    def sl(x, lo, hi, step=1):
        spec = [(None, None, 1)] * x.ndim
        spec[ax] = (lo, hi, step)
        return _G.slice(x, spec)
    if reverse:
        xs = [sl(x, None, None, -1) for x in xs]

    def comb(a, b):
        out = f(type(elems)(a) if seq else a[0], type(elems)(b) if seq else b[0])
        return [_N(o) for o in (out if seq else [out])]
    d = 1
    while d < n:
        moved = comb([sl(x, 0, n - d) for x in xs], [sl(x, d, n) for x in xs])
        xs = [_G.concatenate([sl(x, 0, d), m], ax) for x, m in zip(xs, moved)]
        d *= 2
    if reverse:
        xs = [sl(x, None, None, -1) for x in xs]
    return type(elems)(xs) if seq else xs[0]


_assoc = _dual(_assoc_graph, "associative_scan", first="value")


# ---- branches ------------------------------------------------------------------------------------
def switch(index, branches, *operands):
    """``branches[index](*operands)``, the index clamped to the branches. A symbolic index
    computes every branch and selects the result (the branches must agree in shape)."""
    if not branches:
        raise ValueError("switch: branches must not be empty")
    if not _tensor(index):
        i = builtins.min(builtins.max(int(np.asarray(index)), 0), len(branches) - 1)
        return branches[i](*operands)
    idx = _G.clip(_G.cast(_N(index), "int32"), _G.constant(np.asarray(0, "int32")),
                  _G.constant(np.asarray(len(branches) - 1, "int32")))
    outs = [b(*operands) for b in branches]
    seq = isinstance(outs[0], list | tuple)
    flat = [list(o) if seq else [o] for o in outs]
    result = [_N(v) for v in flat[-1]]
    for k in range(len(outs) - 2, -1, -1):
        pick = _G.equal(idx, _G.constant(np.asarray(k, "int32")))
        new = []
        for a, b in zip(flat[k], result):
            a = _N(a)
            if a.shape != b.shape or a.dtype != b.dtype:
                raise ValueError(f"switch: on a symbolic index every branch must return the "
                                 f"same shapes and dtypes; branch {k} gave {a.dtype}{a.shape}, "
                                 f"a later one {b.dtype}{b.shape}")
            new.append(_G.where(pick, a, b))
        result = new
    return type(outs[0])(result) if seq else result[0]


# ---- scatter, slices -----------------------------------------------------------------------------
def _flat_index(op, indices, shape):
    idx = _G.cast(_N(indices), "int32")
    if idx.ndim != 2 or idx.shape[1] is None or idx.shape[1] > len(shape):
        raise ValueError(f"{op}: indices must be (N, k) with k <= rank {len(shape)}, received "
                         f"{idx.shape}")
    k = idx.shape[1]
    strides = np.cumprod((1,) + tuple(shape[:k])[::-1][:-1])[::-1].astype("int32")
    flat = _G.sum(idx * _G.constant(strides), axis=1)
    return flat, int(np.prod(shape[:k], dtype=np.int64)), k


def _scatter(indices, values, shape):
    shape = tuple(int(s) for s in shape)
    flat, m, k = _flat_index("scatter", indices, shape)
    v = _N(values)
    out = _math._segment("scatter", "sum")(v, flat, num_segments=m)
    return _G.reshape(out, shape)


def _scatter_update(inputs, indices, updates, reduction=None):
    x = _N(inputs)
    if None in x.shape:
        raise ValueError(f"scatter_update: inputs need a static shape, received {x.shape}")
    flat, m, k = _flat_index("scatter_update", indices, x.shape)
    u = _G.cast(_N(updates, x.dtype), x.dtype)
    rest = x.shape[k:]
    xf = _G.reshape(x, (m,) + rest)
    count = _math._segment("scatter_update", "sum")(
        _G.ones_like(_G.cast(flat, "float32")), flat, num_segments=m)
    touched = _G.reshape(_G.greater(count, _G.constant(np.asarray(0, "float32"))),
                         (m,) + (1,) * len(rest))
    if reduction is None:  # unique indices (as TensorFlow's scatter_nd_update)
        new = _math._segment("scatter_update", "sum")(u, flat, num_segments=m)
        out = _G.where(touched, new, xf)
    elif reduction == "add":
        out = xf + _math._segment("scatter_update", "sum")(u, flat, num_segments=m)
    elif reduction in ("max", "min", "mul"):
        kind = {"max": "max", "min": "min", "mul": "prod"}[reduction]
        red = _math._segment("scatter_update", kind)(u, flat, num_segments=m)
        comb = {"max": _G.maximum, "min": _G.minimum, "mul": _G.mul}[reduction]
        out = _G.where(touched, comb(xf, red), xf)
    else:
        raise ValueError(f"scatter_update: unsupported reduction {reduction!r} (None, 'add', "
                         "'max', 'min' or 'mul')")
    return _G.reshape(out, x.shape)


def _slice_update(inputs, start_indices, updates):
    x = _N(inputs)
    if _tensor(start_indices) or builtins.any(_tensor(s) for s in start_indices):
        raise ValueError("slice_update: symbolic start_indices are not supported (a static "
                         "graph needs the slice's place); pass ints")
    u = _G.cast(_N(updates, x.dtype), x.dtype)
    starts = [int(s) for s in start_indices]
    if len(starts) != x.ndim or u.ndim != x.ndim or None in x.shape or None in u.shape:
        raise ValueError(f"slice_update: inputs {x.shape}, start_indices {starts} and updates "
                         f"{u.shape} must have the same (static) rank")
    for s, n, k in zip(starts, x.shape, u.shape):
        if s < 0 or s + k > n:
            raise ValueError(f"slice_update: updates {u.shape} at {starts} do not fit inputs "
                             f"{x.shape}")
    pads = [(s, n - s - k) for s, n, k in zip(starts, x.shape, u.shape)]
    mask = np.zeros(x.shape, bool)
    mask[tuple(slice(s, s + k) for s, k in zip(starts, u.shape))] = True
    return _G.where(_G.constant(mask), _G.pad(u, pads), x)


def _saturate_cast(x, dtype):
    x = _N(x)
    dtype = np.dtype(dtype).name
    lo, hi = _limits(x.dtype), _limits(dtype)
    lo_v = np.asarray(builtins.max(lo[0], hi[0])).astype(x.dtype)
    hi_v = np.asarray(builtins.min(lo[1], hi[1])).astype(x.dtype)
    if float(lo_v) < hi[0]:  # compared exactly (NumPy would round the int to x's dtype)
        lo_v = np.nextafter(lo_v, np.asarray(0, x.dtype))
    if float(hi_v) > hi[1]:
        hi_v = np.nextafter(hi_v, np.asarray(0, x.dtype))
    if x.dtype != "bool":
        x = _G.clip(x, _G.constant(lo_v), _G.constant(hi_v))
    return _G.cast(x, dtype)


def _limits(dtype):
    if dtype == "bool":
        return 0, 1
    dt = np.dtype(dtype)
    info = np.iinfo(dt) if dt.kind in "iu" else np.finfo(dt)
    return info.min, info.max


def _unstack(x, num=None, axis=0):
    x = _N(x)
    ax = axis % x.ndim
    n = x.shape[ax]
    if n is None or (num is not None and num != n):
        raise ValueError(f"unstack: axis {axis} of {x.shape} must be static (and equal num="
                         f"{num})")
    out = []
    for i in range(n):
        spec = [(None, None, 1)] * x.ndim
        spec[ax] = (i, i + 1, 1)
        out.append(_G.squeeze(_G.slice(x, spec), ax))
    return out


scatter = _dual(_scatter, "scatter")
scatter.__doc__ = ("A zero tensor of ``shape`` with ``values`` added at ``indices`` (N, k) "
                   "(repeated indices add).")
scatter_update = _dual(_scatter_update, "scatter_update")
scatter_update.__doc__ = ("``inputs`` with ``updates`` written (or reduced: 'add', 'max', 'min', "
                          "'mul') at ``indices`` (N, k).")
slice_update = _dual(_slice_update, "slice_update")
slice_update.__doc__ = "``inputs`` with ``updates`` written at the static ``start_indices``."
saturate_cast = _dual(_saturate_cast, "saturate_cast")
saturate_cast.__doc__ = "``cast`` after clipping to the target dtype's range."
unstack = _dual(_unstack, "unstack")
unstack.__doc__ = "The slices of ``x`` along ``axis``, as a list."


def dtype(x):
    """The dtype of ``x`` as a string (``"float32"`` ...)."""
    if _tensor(x):
        return _N(x).dtype
    return np.asarray(x).dtype.name


def is_tensor(x):
    """Whether ``x`` is a tensor kiln.ops takes as one: a symbolic tensor, a Variable or a NumPy
    array."""
    return _tensor(x) or isinstance(x, np.ndarray)


def custom_gradient(f):
    """Decorator: ``f(*args) -> (output, grad_fn)``; the result computes ``output`` and its
    gradient with respect to ``args`` is ``grad_fn(upstream)`` (or ``grad_fn(*args,
    upstream=upstream)``, the PyTorch-style signature). On arrays it just returns ``output``.
    """
    def wrapped(*args):
        out, grad_fn = f(*args)
        if not is_symbolic(*args):
            return out
        params = inspect.signature(grad_fn).parameters
        if "upstream" in params:
            def rule(ct):
                return grad_fn(*args, upstream=ct)
        else:
            def rule(ct):
                return grad_fn(ct)
        return _G.apply("custom_vjp", _N(out), *[_N(a) for a in args], rule=rule)
    wrapped.__name__ = getattr(f, "__name__", "custom_gradient")
    wrapped.__doc__ = f.__doc__
    return wrapped


__all__ = ["map", "vectorized_map", "fori_loop", "while_loop", "associative_scan", "switch",
           "scatter", "scatter_update", "slice_update", "saturate_cast", "unstack", "dtype",
           "is_tensor", "custom_gradient"]
