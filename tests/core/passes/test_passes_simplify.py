"""simplify: algebraic identities and stabilization rewrites, by structure and by value."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends.reference import evaluate
from kiln.core.ir import Graph
from kiln.core.ops.registry import apply
from kiln.core.passes import optimize
from kiln.core.passes.simplify import simplify

RNG = np.random.default_rng(0)
X = kiln.placeholder((None, 2, 3), "float64", name="x")
Y = kiln.placeholder((None, 2, 3), "float64", name="y")
FEEDS = {X: RNG.normal(size=(4, 2, 3)), Y: RNG.uniform(0.1, 1.0, size=(4, 2, 3))}


def one(fn):
    """simplify(Graph([X, Y], [fn()])) and its only output; values are checked too."""
    node = fn()
    g = Graph([X, Y], [node])
    out = simplify(g)
    (a,) = evaluate(g.outputs, FEEDS)
    (b,) = evaluate(out.outputs, FEEDS)
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    assert out.outputs[0].type == node.type
    return out.outputs[0]


@pytest.mark.parametrize("build", [
    lambda: X * 1.0, lambda: 1.0 * X, lambda: X + 0.0, lambda: 0.0 + X, lambda: X - 0.0,
    lambda: X / 1.0, lambda: K.neg(-X), lambda: K.transpose(K.transpose(X, (1, 0, 2)), (1, 0, 2)),
    lambda: apply("reshape", X, shape=(-1, 2, 3)), lambda: apply("cast", X, dtype="float64"),
    lambda: K.reshape(K.reshape(X, (-1, 6)), (-1, 2, 3)),
    lambda: K.squeeze(K.expand_dims(X, 1), 1),
    lambda: K.sum(K.expand_dims(X, 2), axis=2) * 1.0 - 0.0,
    lambda: (X * K.constant(np.ones(3))) + K.constant(np.zeros((2, 3))),
], ids=["x*1", "1*x", "x+0", "0+x", "x-0", "x/1", "neg-neg", "transpose-twice",
        "reshape-same", "cast-same", "reshape-reshape", "squeeze-expand", "sum-size1",
        "broadcast-constants"])
def test_identities_return_the_operand(build):
    assert one(build) is X


def test_power_of_one_is_the_base_and_power_of_two_a_product():
    assert one(lambda: K.power(X, 1.0)) is X
    sq = one(lambda: K.power(X, 2.0))
    assert sq.op == "mul" and sq.inputs == (X, X)
    # special values as pow gives them (both are the correctly rounded square), and the
    # gradient of a focal-loss-like (1 - x) ** 2 through the rewritten graph
    v = np.array([np.nan, np.inf, -np.inf, -0.0, 3e38, 1e-30, -2.5], np.float32)
    x = kiln.placeholder(v.shape, "float32")
    y = K.power(1.0 - x, 2.0)
    (g,) = kiln.grad(K.sum(y), [x])
    fn = kiln.function([x], [y, g])
    with np.errstate(all="ignore"):
        got, grad = fn(v)
        np.testing.assert_array_equal(got, np.power(np.float32(1) - v, np.float32(2)))
        np.testing.assert_array_equal(grad, -2 * (np.float32(1) - v))
    assert not any(n.op == "pow" for n in fn.optimized_graph.nodes)


def test_power_rewrites_keep_the_type():
    out = one(lambda: K.power(X, K.constant(np.full((5, 1, 1, 1), 2.0))))  # (5, ?, 2, 3)
    assert out.op == "pow"


def test_identity_that_would_change_the_type_does_not_fire():
    out = one(lambda: X * K.constant(np.ones((5, 1, 1, 1))))  # result is (5, ?, 2, 3)
    assert out.op == "mul"


def test_zero_minus_x_is_neg():
    assert one(lambda: 0.0 - X).op == "neg"


def test_transposes_compose():
    out = one(lambda: K.transpose(K.transpose(X, (2, 0, 1)), (2, 0, 1)))
    assert out.op == "transpose" and out.inputs[0] is X
    assert out.attrs["perm"] == (1, 2, 0)


def test_reshape_chain_becomes_one_reshape():
    out = one(lambda: K.reshape(K.expand_dims(K.reshape(X, (-1, 6)), 1), (-1, 3, 2)))
    assert out.op == "reshape" and out.inputs[0] is X


def test_sum_over_size_one_axes_is_squeeze():
    out = one(lambda: K.sum(K.expand_dims(X, 3), axis=3))
    assert out is X
    out = one(lambda: K.max(K.reshape(X, (-1, 1, 6)), axis=1))
    assert out.op in ("reshape", "squeeze") and "max" not in Graph([], [out]).count_ops()


def test_broadcast_of_scalar_constant_is_dropped_before_elementwise():
    b = K.broadcast_like(K.constant(np.float64(2.0)), X)
    out = one(lambda: X * b)
    assert out.op == "mul" and out.inputs[1].op == "constant" and out.inputs[1].shape == ()
    # kept where the broadcast decides the result shape
    out = one(lambda: K.constant(np.float64(3.0)) * b)
    assert "broadcast_like" in Graph([], [out]).count_ops()


# ---- stabilization ---------------------------------------------------------------------------
def test_log_softmax():
    out = one(lambda: K.log(K.softmax(X, axis=1)))
    assert out.op == "log_softmax" and out.attrs["axis"] == 1 and out.inputs[0] is X


def test_log_sigmoid_is_minus_softplus_of_minus_x():
    out = one(lambda: K.log(K.sigmoid(X)))
    assert out.op == "neg" and out.inputs[0].op == "softplus"
    assert out.inputs[0].inputs[0].op == "neg" and out.inputs[0].inputs[0].inputs[0] is X


@pytest.mark.parametrize("build", [lambda: K.log(1.0 + Y), lambda: K.log(Y + 1.0)])
def test_log1p(build):
    out = one(build)
    assert out.op == "log1p" and out.inputs[0] is Y


def test_log1p_not_when_the_one_broadcasts():
    out = one(lambda: K.log(Y + K.constant(np.ones((3, 1, 1, 1)))))
    assert out.op == "log"


def test_expm1():
    assert one(lambda: K.exp(X) - 1.0).op == "expm1"
    assert one(lambda: K.exp(X) + (-1.0)).op == "expm1"


def _logits_labels():
    z = kiln.placeholder((None, 5), "float64", name="z")
    t = kiln.placeholder((None, 5), "float64", name="t")
    feeds = {z: RNG.normal(size=(3, 5)), t: np.eye(5)[[0, 3, 1]]}
    return z, t, feeds


CE_FORMS = {
    "neg-sum": lambda z, t: -K.sum(t * K.log(K.softmax(z)), axis=-1),
    "sum-neg": lambda z, t: K.sum(-(t * K.log(K.softmax(z))), axis=-1),
    "neg-label": lambda z, t: K.sum(-t * K.log(K.softmax(z)), axis=1),
    "neg-log": lambda z, t: K.sum(t * -K.log(K.softmax(z)), axis=-1),
    "swapped": lambda z, t: -K.sum(K.log(K.softmax(z)) * t, axis=-1),
    "mean-neg": lambda z, t: K.mean(-K.sum(t * K.log(K.softmax(z)), axis=-1)),
    "neg-mean": lambda z, t: -K.mean(K.sum(t * K.log(K.softmax(z)), axis=-1)),
    "times-minus-one": lambda z, t: K.sum(t * K.log(K.softmax(z)), axis=-1) * -1.0,
    "keepdims": lambda z, t: -K.sum(t * K.log(K.softmax(z)), axis=-1, keepdims=True),
}


@pytest.mark.parametrize("form", sorted(CE_FORMS))
def test_hand_written_cross_entropy_becomes_softmax_cross_entropy(form):
    z, t, feeds = _logits_labels()
    loss = CE_FORMS[form](z, t)
    g = Graph([z, t], [loss])
    out, _ = optimize(g, exclude=("fuse",))
    ops = out.count_ops()
    assert ops.get("softmax_cross_entropy") == 1, out.dump()
    assert "log" not in ops and "softmax" not in ops and "log_softmax" not in ops
    np.testing.assert_allclose(evaluate(out.outputs, feeds)[0], evaluate(g.outputs, feeds)[0],
                               rtol=1e-12)


def test_cross_entropy_not_matched_over_the_wrong_axis_or_broadcast_labels():
    z, t, feeds = _logits_labels()
    wrong_axis = -K.sum(t * K.log(K.softmax(z)), axis=0)
    t_row = kiln.placeholder((5,), "float64")
    broadcast = -K.sum(t_row * K.log(K.softmax(z)), axis=-1)
    out = simplify(Graph([z, t, t_row], [wrong_axis, broadcast]))
    assert "softmax_cross_entropy" not in out.count_ops()


def test_gradient_division_by_probability_cancels():
    z, t, feeds = _logits_labels()
    s = K.sigmoid(z)
    loss = K.sum(t * K.log(s))
    (g,) = kiln.grad(loss, [z])
    out = simplify(Graph([z, t], [g]))
    assert "div" not in out.count_ops()
    big = {z: feeds[z] * 1e4, t: feeds[t]}
    assert np.isfinite(evaluate(out.outputs, big)[0]).all()
    assert not np.isfinite(evaluate([g], big)[0]).all()
    np.testing.assert_allclose(evaluate(out.outputs, feeds)[0], evaluate([g], feeds)[0],
                               rtol=1e-12)


@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("with_relu", [True, False])
def test_relu_mask_moves_before_max_pool_routing(padding, with_relu):
    """The gradient of relu -> max_pool2d: the mask on the full-size gradient moves to the
    pooled cotangent, values unchanged (float64 reference, with ties and exact zeros)."""
    z = kiln.placeholder((None, 5, 6, 3), "float64", name="z")
    pooled = K.max_pool2d(K.relu(z) if with_relu else z, 2, padding=padding)
    ct = kiln.placeholder(pooled.shape, "float64", name="ct")
    (gz,) = kiln.grad(K.sum(pooled * ct), [z])
    if not with_relu:  # the mask written by hand on the input of the pooling
        gz = gz * K.cast(K.greater(z, 0.0), "float64")
    g = Graph([z, ct], [gz])
    out = simplify(g)
    assert out.outputs[0].op == "max_pool2d_grad"
    zv = RNG.normal(size=(4, 5, 6, 3)).round(1)  # rounding makes ties and exact zeros
    zv[0, :2, :2] = 0.0
    feeds = {z: zv, ct: RNG.normal(size=(4,) + pooled.shape[1:])}
    (want,) = evaluate(g.outputs, feeds)
    (got,) = evaluate(out.outputs, feeds)
    np.testing.assert_array_equal(got, want)


def test_relu_mask_stays_when_it_masks_another_tensor():
    z = kiln.placeholder((None, 4, 4, 2), "float64", name="z")
    w = kiln.placeholder((None, 4, 4, 2), "float64", name="w")
    (gz,) = kiln.grad(K.sum(K.max_pool2d(K.relu(w), 2)), [w])
    node = gz * K.cast(K.greater(z, 0.0), "float64")  # mask of an unrelated tensor
    out = simplify(Graph([z, w], [node]))
    assert out.outputs[0].op == "mul"


@pytest.mark.parametrize("axis, keepdims", [((0, 1, 2), False), ((0, 1, 2), True),
                                            ((1, 2), False), ((0, 1), False)])
def test_sum_of_max_pool_gradient_over_space_is_the_sum_of_the_cotangent(axis, keepdims):
    """The bias gradient behind a max pooling: routed values keep their sum (float64, up to
    the order of the additions); a sum that keeps a spatial axis is not rewritten."""
    y = kiln.placeholder((None, 5, 6, 3), "float64", name="y")
    out = K.max_pool2d(y, 2, padding="same")
    ct = kiln.placeholder(out.shape, "float64", name="ct")
    grad = apply("max_pool2d_grad", y, out, ct, **out.attrs)
    node = K.sum(grad, axis=axis, keepdims=keepdims)
    g = Graph([y, ct], [node])
    rewritten = simplify(g)
    spatial = {1, 2} <= set(axis)
    assert (rewritten.outputs[0].inputs[0] is ct) == spatial
    feeds = {y: RNG.normal(size=(4, 5, 6, 3)).round(1), ct: RNG.normal(size=(4, 3, 3, 3))}
    (want,) = evaluate(g.outputs, feeds)
    (got,) = evaluate(rewritten.outputs, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ---- layout rules (loops and sequences) ---------------------------------------------------------
def _check(outputs, inputs, feeds):
    g = Graph(inputs, outputs)
    out = simplify(g)
    want = evaluate(g.outputs, feeds)
    got = evaluate(out.outputs, feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for o, n in zip(out.outputs, g.outputs):
        assert o.type == n.type
    return out.count_ops()


def test_matmul_of_a_batch_transpose_runs_on_the_untransposed_operand():
    x = kiln.placeholder((None, 5, 3), "float64")
    w = kiln.placeholder((3, 4), "float64")
    y = K.matmul(K.transpose(x, (1, 0, 2)), w)  # time-major product
    ops = _check([y], [x, w], {x: RNG.normal(size=(2, 5, 3)), w: RNG.normal(size=(3, 4))})
    g = simplify(Graph([x, w], [y]))
    mm = next(n for n in g.nodes if n.op == "matmul")
    assert mm.inputs[0] is x and g.outputs[0].op == "transpose", ops


def test_a_transpose_of_gathered_rows_moves_onto_the_indices_and_into_the_gradient():
    table = kiln.placeholder((7, 3), "float64")
    idx = kiln.placeholder((None, 4), "int32")
    y = K.transpose(K.take(table, idx, axis=0), (1, 0, 2))
    ct = kiln.placeholder((4, None, 3), "float64")
    (g,) = kiln.grad(K.sum(y * ct), [table])
    feeds = {table: RNG.normal(size=(7, 3)), idx: RNG.integers(0, 7, size=(2, 4)),
             ct: RNG.normal(size=(4, 2, 3))}
    _check([y, g], [table, idx, ct], feeds)
    out = simplify(Graph([table, idx, ct], [y, g]))
    take = out.outputs[0]
    assert take.op == "take" and take.inputs[1].op == "transpose"
    tg = next(n for n in out.nodes if n.op == "take_grad")
    assert tg.inputs[0].op != "transpose" and tg.inputs[1].op == "transpose"


def test_slice_grads_that_tile_an_axis_become_one_concatenate():
    z = kiln.placeholder((None, 8), "float64")
    parts = [K.slice(z, [(None, None, 1), (k, k + 2, 1)], None) for k in range(0, 8, 2)]
    y = K.sigmoid(parts[0]) * K.tanh(parts[2]) + parts[1] * parts[3]
    (g,) = kiln.grad(K.sum(y), [z])
    ops = _check([g], [z], {z: RNG.normal(size=(3, 8))})
    assert "slice_grad" not in ops and ops.get("concatenate") == 1, ops
    # a partial tiling is left alone (the rule would have to invent zeros)
    (g2,) = kiln.grad(K.sum(parts[0] * parts[1]), [z])
    assert "slice_grad" in _check([g2], [z], {z: RNG.normal(size=(3, 8))})
