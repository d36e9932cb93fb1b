"""Property: on random graphs built from the registered elementwise, reduction and movement
ops, every single pass and the whole pipeline compute what the unoptimized graph computes
(reference backend). Where the unoptimized value is inf/NaN, the stabilization rules may
legitimately give a finite value, so only finite reference values are compared."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln
import kiln.ops as K
from kiln.core.backends.reference import evaluate
from kiln.core.ir import Graph
from kiln.core.ops.registry import ELEMENTWISE, all_ops, apply
from kiln.core.passes import optimize
from kiln.core.passes.canonicalize import canonicalize
from kiln.core.passes.constant_fold import constant_fold
from kiln.core.passes.cse import cse
from kiln.core.passes.dce import dce
from kiln.core.passes.fuse import fuse
from kiln.core.passes.remat import remat
from kiln.core.passes.simplify import simplify
from kiln.core.passes.verify import check_graph, check_preserved

UNARY = ["neg", "abs", "exp", "expm1", "log", "log1p", "sqrt", "square", "sin", "cos",
         "tanh", "sigmoid", "relu", "softplus", "reciprocal", "erf"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]
CONSTS = [0.0, 1.0, -1.0, 2.0, 0.5]
REDUCE = ["sum", "mean", "max", "min", "logsumexp"]
SINGLE_PASSES = [canonicalize, constant_fold, cse, simplify, dce, fuse]


def test_generator_ops_are_registered_elementwise():
    ops = all_ops()
    assert all(ops[n].kind == ELEMENTWISE for n in UNARY + BINARY)


def _aligned(*nodes) -> bool:
    """Unknown (batch) dims meet only unknown dims or 1s, so that run-time shapes agree."""
    ndim = max(n.ndim for n in nodes)
    for axis in range(ndim):
        dims = {n.shape[axis - ndim + n.ndim] for n in nodes if axis - ndim + n.ndim >= 0}
        if None in dims and dims - {None, 1}:
            return False
    return True


def _try(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except (ValueError, TypeError):
        return None


@st.composite
def graphs(draw):
    rank = draw(st.integers(1, 3))
    dims = tuple(draw(st.sampled_from([1, 2, 3])) for _ in range(rank - 1))
    x = kiln.placeholder((None,) + dims, "float64", name="x")
    z = kiln.placeholder((None,) + dims, "float64", name="z")
    w_shape = dims[-1:]
    w_value = draw(st.floats(-2, 2)) + 0.25 * np.arange(int(np.prod(w_shape))).reshape(w_shape)
    w = kiln.Variable(w_value, dtype="float64")
    pool = [x, z, K.add(w, 0.0)]
    for _ in range(draw(st.integers(2, 12))):
        a = draw(st.sampled_from(pool))
        b = draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(["unary", "binary", "const", "reduce", "move", "pattern"]))
        new = None
        if kind == "unary":
            new = apply(draw(st.sampled_from(UNARY)), a)
        elif kind == "binary" and _aligned(a, b):
            new = _try(apply, draw(st.sampled_from(BINARY)), a, b)
        elif kind == "const":
            c = K.constant(np.float64(draw(st.sampled_from(CONSTS))))
            op = draw(st.sampled_from(BINARY))
            new = apply(op, a, c) if draw(st.booleans()) else apply(op, c, a)
        elif kind == "reduce" and a.ndim > 0:
            axes = draw(st.lists(st.integers(0, a.ndim - 1), min_size=1, max_size=a.ndim,
                                 unique=True))
            new = apply(draw(st.sampled_from(REDUCE)), a, axis=tuple(sorted(axes)),
                        keepdims=draw(st.booleans()))
        elif kind == "move":
            new = _move(draw, a, b)
        elif kind == "pattern" and a.ndim > 0:
            new = _pattern(draw, a, b)
        if new is not None:
            pool.append(new)
    k = draw(st.integers(1, min(3, len(pool) - 2)))
    outputs = pool[-k:] + draw(st.lists(st.sampled_from(pool), max_size=2))
    return Graph([x, z], outputs), x, z


def _move(draw, a, b):
    choice = draw(st.sampled_from(["transpose", "reshape", "expand", "squeeze", "broadcast"]))
    if choice == "transpose" and a.ndim > 1:
        perm = draw(st.permutations(range(a.ndim)))
        return K.transpose(a, perm)
    if choice == "reshape" and a.ndim > 1 and a.shape[-1] is not None \
            and a.shape[-2] is not None:
        return K.reshape(a, tuple(-1 if d is None else d for d in a.shape[:-2])
                         + (a.shape[-2] * a.shape[-1],))
    if choice == "expand":
        return K.expand_dims(a, draw(st.integers(0, a.ndim)))
    if choice == "squeeze" and 1 in a.shape:
        return K.squeeze(a)
    if choice == "broadcast" and a.ndim <= b.ndim and all(
            da == 1 or da == db for da, db in zip(a.shape[::-1], b.shape[::-1])):
        return K.broadcast_like(a, b)
    return None


def _pattern(draw, a, b):
    choice = draw(st.sampled_from(["log_softmax", "log_sigmoid", "log1p", "expm1", "neg_neg",
                                   "transpose2", "cast", "ce", "mul1", "bcast_const"]))
    if choice == "log_softmax":
        return K.log(K.softmax(a, axis=draw(st.integers(0, a.ndim - 1))))
    if choice == "log_sigmoid":
        return K.log(K.sigmoid(a))
    if choice == "log1p":
        return K.log(1.0 + K.square(a)) if draw(st.booleans()) else K.log(K.abs(a) + 1.0)
    if choice == "expm1":
        return K.exp(a) - 1.0
    if choice == "neg_neg":
        return K.neg(K.neg(a))
    if choice == "transpose2" and a.ndim > 1:
        p1, p2 = draw(st.permutations(range(a.ndim))), draw(st.permutations(range(a.ndim)))
        return K.transpose(K.transpose(a, p1), p2)
    if choice == "cast":
        return apply("cast", a, dtype="float64")
    if choice == "ce" and a.type == b.type:
        return -K.sum(K.sigmoid(b) * K.log(K.softmax(a)), axis=-1)
    if choice == "mul1":
        return a * 1.0 + 0.0
    if choice == "bcast_const":
        return a * K.broadcast_like(K.constant(np.float64(2.0)), a)
    return None


def _assert_same(reference, values, label):
    for k, (r, v) in enumerate(zip(reference, values)):
        r, v = np.asarray(r), np.asarray(v)
        assert r.shape == v.shape and r.dtype == v.dtype, (label, k, r.shape, v.shape)
        finite = np.isfinite(r)
        assert np.isfinite(v[finite]).all(), (label, k)
        np.testing.assert_allclose(v[finite], r[finite], rtol=1e-7, atol=1e-9,
                                   err_msg=f"{label}: output {k}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.integers(1, 3), st.integers(0, 2**31))
def test_optimized_graphs_compute_the_same_values(case, batch, seed):
    g, x, z = case
    rng = np.random.default_rng(seed)
    shape = (batch,) + x.shape[1:]
    feeds = {x: rng.normal(size=shape), z: rng.normal(size=shape)}
    with np.errstate(all="ignore"):
        reference = evaluate(g.outputs, feeds)
        for fn in SINGLE_PASSES:
            out = fn(g)
            check_preserved(g, out, fn.__name__)
            check_graph(out, fn.__name__)
            _assert_same(reference, evaluate(out.outputs, feeds), fn.__name__)
        out, report = optimize(g, batch_size=batch)
        _assert_same(reference, evaluate(out.outputs, feeds), "optimize")
        try:
            tight = remat(out, max(report.peak_bytes // 2, 1), batch_size=batch)
        except ValueError:
            return
        for r, v in zip(evaluate(out.outputs, feeds), evaluate(tight.outputs, feeds)):
            np.testing.assert_array_equal(v, r)
