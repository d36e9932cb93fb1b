"""canonicalize, constant_fold, cse and dce on hand-built graphs: structure and values."""

from __future__ import annotations

import numpy as np

import kiln
import kiln.ops as K
from kiln.core.backends.reference import evaluate
from kiln.core.ir import Graph
from kiln.core.ops.registry import apply
from kiln.core.passes.canonicalize import canonicalize
from kiln.core.passes.constant_fold import MAX_ELEMENTS, constant_fold
from kiln.core.passes.cse import cse
from kiln.core.passes.dce import dce

RNG = np.random.default_rng(0)


def same_values(g1: Graph, g2: Graph, feeds: dict) -> None:
    for a, b in zip(evaluate(g1.outputs, feeds), evaluate(g2.outputs, feeds)):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
        assert a.shape == b.shape and a.dtype == b.dtype


# ---- canonicalize ---------------------------------------------------------------------------
def test_canonicalize_removes_stop_gradient_and_puts_constants_right():
    x = kiln.placeholder((None, 3))
    c = K.constant(np.float32(2.0))
    g = Graph([x], [K.stop_gradient(K.add(c, x)), K.mul(c, x)])
    out = canonicalize(g)
    assert [o.op for o in out.outputs] == ["add", "mul"]
    assert all(o.inputs[0] is x and o.inputs[1].op == "constant" for o in out.outputs)
    assert out.inputs == g.inputs
    same_values(g, out, {x: RNG.normal(size=(2, 3)).astype("float32")})


def test_canonicalize_static_broadcast_like_and_reshape_like():
    x = kiln.placeholder((4, 3))
    b = kiln.Variable(RNG.normal(size=(3,)))
    z = kiln.placeholder((None, 2, 6))
    g = Graph([x, z], [K.broadcast_like(b, x), apply("reshape_like", z, K.reshape(z, (-1, 12)))])
    out = canonicalize(g)
    assert out.outputs[0].op == "broadcast_to" and out.outputs[0].attrs["shape"] == (4, 3)
    assert out.outputs[1].op == "reshape" and out.outputs[1].attrs["shape"] == (-1, 12)
    same_values(g, out, {x: np.zeros((4, 3), "float32"),
                         z: RNG.normal(size=(3, 2, 6)).astype("float32")})


def test_canonicalize_mul_by_minus_one_is_neg():
    x = kiln.placeholder((None, 3))
    out = canonicalize(Graph([x], [x * -1.0, -1.0 * x]))
    assert out.outputs[0].op == "neg" and out.outputs[0] is out.outputs[1]


def test_canonicalize_shape_references_read_the_earliest_node_of_that_shape():
    # broadcast_like's `like` and size_of's input only lend their shape: through elementwise ops
    # whose other operands are constants or smaller broadcasts, that is the first input's
    x = kiln.placeholder((None, 3))
    y = kiln.placeholder((None, 3))
    m = K.mean(x, axis=0, keepdims=True)
    sq = K.square((x - m) * 2.0)
    one = K.constant(np.float32(1.0))
    g = Graph([x, y], [K.broadcast_like(one, sq), K.size_of(sq, axis=0),
                       K.broadcast_like(one, x + y)])
    out = canonicalize(g)
    assert out.outputs[0].inputs[1] is x
    assert out.outputs[1].inputs[0] is x
    # two operands of the full shape (either could broadcast at run time): kept
    assert out.outputs[2].inputs[1].op == "add"
    same_values(g, out, {x: RNG.normal(size=(5, 3)).astype("float32"),
                         y: RNG.normal(size=(5, 3)).astype("float32")})


# ---- constant_fold -----------------------------------------------------------------------------
def test_fold_uses_the_reference_and_keeps_dtype():
    a = K.constant(np.arange(6, dtype="float32").reshape(2, 3))
    x = kiln.placeholder((None, 3))
    folded = K.sum(K.exp(a), axis=0)
    g = Graph([x], [x + folded])
    out = constant_fold(g)
    c = out.outputs[0].inputs[1]
    assert c.op == "constant" and c.dtype == "float32"
    np.testing.assert_array_equal(c.attrs["value"].array,
                                  np.sum(np.exp(np.arange(6, dtype="float32").reshape(2, 3)), 0))
    assert out.count_ops().get("exp", 0) == 0


def test_fold_shape_arithmetic():
    x = kiln.placeholder((None, 10))
    n_static = K.size_of(x, axis=1)
    n_dynamic = K.size_of(x, axis=0)
    ones = K.broadcast_like(K.constant(np.float32(1)), K.sum(x, axis=0))  # static (10,)
    out = constant_fold(Graph([x], [n_static, n_dynamic, ones]))
    assert out.outputs[0].op == "constant" and float(out.outputs[0].attrs["value"].array) == 10
    assert out.outputs[1].op == "size_of"  # the batch dim is only known at run time
    assert out.outputs[2].op == "constant"
    np.testing.assert_array_equal(out.outputs[2].attrs["value"].array, np.ones(10, "float32"))


def test_fold_respects_size_cap_random_and_sources():
    big = K.broadcast_to(K.constant(np.float32(3)), (MAX_ELEMENTS + 1,))
    small = K.broadcast_to(K.constant(np.float32(3)), (MAX_ELEMENTS,))
    key = K.constant(np.array([1, 2], np.int64))
    r = K.random_uniform(key, K.constant(np.zeros((2, 2), "float32")))
    x = kiln.placeholder((2,))
    w = kiln.Variable(np.ones(2))
    out = constant_fold(Graph([x], [big, small, r, K.exp(x), K.exp(w)]))
    assert [o.op for o in out.outputs] == ["broadcast_to", "constant", "random_uniform", "exp",
                                          "exp"]


def test_fold_mean_gradient_count():
    x = kiln.placeholder((None, 4))
    (g,) = kiln.grad(K.mean(K.sum(x * x, axis=0)), [x])
    out = constant_fold(Graph([x], [g]))
    assert "size_of" not in out.count_ops()  # size_of over the static axis folded
    same_values(Graph([x], [g]), out, {x: RNG.normal(size=(3, 4)).astype("float32")})


# ---- cse -------------------------------------------------------------------------------------
def test_cse_merges_commutative_operands_and_what_follows():
    a = kiln.placeholder((None, 3))
    b = kiln.placeholder((None, 3))
    pairs = [(K.add(a, b), K.add(b, a)), (K.mul(a, b), K.mul(b, a)),
             (K.maximum(a, b), K.maximum(b, a)), (K.minimum(a, b), K.minimum(b, a)),
             (K.equal(a, b), K.equal(b, a)),
             (K.logical_and(a > 0, b > 0), K.logical_and(b > 0, a > 0)),
             (K.logical_or(a > 0, b > 0), K.logical_or(b > 0, a > 0))]
    outs = [o for p in pairs for o in p] + [K.exp(a + b), K.exp(b + a)]
    g = Graph([a, b], outs)
    out = cse(g)
    for k in range(0, len(outs), 2):
        assert outs[k] is not outs[k + 1]
        assert out.outputs[k] is out.outputs[k + 1], outs[k].op
    assert len(out) < len(g)
    same_values(g, out, {a: RNG.normal(size=(2, 3)).astype("float32"),
                         b: RNG.normal(size=(2, 3)).astype("float32")})


def test_cse_keeps_non_commutative_operand_order():
    a = kiln.placeholder((None, 3))
    b = kiln.placeholder((None, 3))
    out = cse(Graph([a, b], [a - b, b - a, a / b]))
    assert out.outputs[0] is not out.outputs[1]
    assert out.outputs[0].inputs == (a, b) and out.outputs[1].inputs == (b, a)


def test_cse_merges_equal_constants():
    x = kiln.placeholder((3,))
    c1 = K.constant(np.array([1.0, 2.0, 3.0], "float32"))
    c2 = K.constant(np.array([1.0, 2.0, 3.0], "float32"))
    out = cse(Graph([x], [x + c1, c2 + x]))
    assert out.outputs[0] is out.outputs[1]
    assert out.count_ops()["constant"] == 1


# ---- dce --------------------------------------------------------------------------------------
def test_dce_drops_nodes_no_output_needs_and_keeps_inputs():
    x = kiln.placeholder((None, 3))
    unused = kiln.placeholder((None, 2))
    y = K.exp(x)
    dead = K.log(x) * 3.0
    g = Graph([x, unused], [y])
    g._order = [x, y, dead.inputs[1], dead.inputs[0], dead]  # a stale order holding dead nodes
    out = dce(g)
    assert [n.op for n in out.nodes] == ["placeholder", "exp"]
    assert out.inputs == [x, unused] and out.outputs == [y]
