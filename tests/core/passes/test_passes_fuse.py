"""fuse: elementwise groups, reduction epilogue, single output, no cycles, no duplicated
transcendental work."""

from __future__ import annotations

import numpy as np

import kiln
import kiln.ops as K
from kiln.core.backends.reference import evaluate
from kiln.core.ir import Graph
from kiln.core.ops.fused import check_program
from kiln.core.passes._util import PassOptions
from kiln.core.passes.fuse import fuse
from kiln.core.passes.verify import check_graph

RNG = np.random.default_rng(0)


def fused_nodes(g: Graph):
    return [n for n in g.nodes if n.op == "fused"]


def check(g: Graph, feeds: dict) -> Graph:
    out = fuse(g)
    check_graph(out)
    for n in fused_nodes(out):
        check_program(n.attrs["program"], len(n.inputs))
    for a, b in zip(evaluate(g.outputs, feeds), evaluate(out.outputs, feeds)):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    return out


def test_chain_becomes_one_fused_node():
    x = kiln.placeholder((None, 4))
    g = Graph([x], [K.relu(x * 2.0 + 1.0)])
    out = check(g, {x: RNG.normal(size=(3, 4)).astype("float32")})
    (f,) = fused_nodes(out)
    assert out.outputs[0] is f
    assert [ins[0] for ins in f.attrs["program"]] == ["mul", "add", "relu"]


def test_reduction_epilogue():
    x = kiln.placeholder((None, 4))
    y = kiln.placeholder((None, 4))
    g = Graph([x, y], [K.sum(K.exp(x) * y, axis=1)])
    out = check(g, {x: RNG.normal(size=(3, 4)).astype("float32"),
                    y: RNG.normal(size=(3, 4)).astype("float32")})
    (f,) = fused_nodes(out)
    assert [ins[0] for ins in f.attrs["program"]] == ["exp", "mul", "sum"]
    assert f.type == g.outputs[0].type


def test_value_used_outside_is_a_group_output_and_transcendentals_are_not_duplicated():
    x = kiln.placeholder((None, 4))
    e = K.exp(x)
    g = Graph([x], [K.sin(e) * 2.0, K.cos(e) + 1.0])
    out = check(g, {x: RNG.normal(size=(3, 4)).astype("float32")})
    assert out.count_ops()["exp"] == 1  # computed once, read by both groups
    for f in fused_nodes(out):
        assert "exp" not in [ins[0] for ins in f.attrs["program"]]
        assert any(i.op == "exp" for i in f.inputs)


def test_cheap_op_is_duplicated_into_its_users():
    x = kiln.placeholder((None, 4))
    n = -x
    g = Graph([x], [K.sin(n) * 2.0, K.cos(n) + 1.0])
    out = check(g, {x: RNG.normal(size=(3, 4)).astype("float32")})
    assert "neg" not in out.count_ops()  # never materialized
    fs = fused_nodes(out)
    assert len(fs) == 2 and all(f.attrs["program"][0][0] == "neg" for f in fs)


def test_batch_norms_centred_input_is_never_stored_and_its_variance_is_one_reduction():
    # BatchNormalization's d = x - mean (x with a smaller broadcast operand: cheap) is computed
    # again in each of its users; the gradient of mean(square(d)) reads x's shape, not the
    # square's (canonicalize), so the square folds into the variance's reduction
    from kiln.core.passes import optimize

    x = kiln.placeholder((None, 6, 4))
    mean = K.mean(x, axis=(0, 1), keepdims=True)
    d = x - mean
    var = K.mean(K.square(d), axis=(0, 1), keepdims=True)
    y = d * K.rsqrt(var + 1e-3)
    loss = K.sum(K.square(y) * K.constant(RNG.normal(size=(4,)).astype("float32")))
    g = Graph([x], [y, *kiln.grad(loss, [x])])
    out, _ = optimize(g, exclude=("remat",))
    assert not {"sub", "square"} & set(out.count_ops())
    programs = [[ins[0] for ins in f.attrs["program"]] for f in fused_nodes(out)]
    assert ["sub", "square", "mean"] in programs
    feeds = {x: RNG.normal(size=(3, 6, 4)).astype("float32")}
    for a, b in zip(evaluate(g.outputs, feeds), evaluate(out.outputs, feeds)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_no_cycle_through_another_kernel():
    x = kiln.placeholder((None, 4))
    w = kiln.Variable(RNG.normal(size=(4, 4)))
    a = K.exp(x)
    b = K.matmul(a, w)
    c = K.tanh(a + b)
    g = Graph([x], [c])
    out = check(g, {x: RNG.normal(size=(3, 4)).astype("float32")})
    (f,) = fused_nodes(out)
    assert [ins[0] for ins in f.attrs["program"]] == ["add", "tanh"]
    assert out.count_ops()["exp"] == 1


def test_graph_outputs_are_not_absorbed():
    x = kiln.placeholder((None, 4))
    y = K.exp(x)
    g = Graph([x], [y, K.log(y * 2.0)])
    out = check(g, {x: RNG.normal(size=(3, 4)).astype("float32")})
    assert out.outputs[0].op == "exp"
    assert out.outputs[1].op == "fused" and out.outputs[1].inputs[0] is out.outputs[0]


def test_broadcasts_and_smaller_producers_stay_outside():
    x = kiln.placeholder((None, 4))
    b = kiln.Variable(RNG.normal(size=(4,)))
    lr = kiln.Variable(np.float32(0.1))
    scale = K.sqrt(lr) * 3.0  # scalar: computed once, not once per element
    g = Graph([x], [K.relu((x + K.exp(b)) * scale)])
    out = check(g, {x: RNG.normal(size=(3, 4)).astype("float32")})
    root = out.outputs[0]
    assert root.op == "fused"
    assert [ins[0] for ins in root.attrs["program"]] == ["add", "mul", "relu"]
    assert {i.op for i in root.inputs} >= {"exp", "fused"}  # exp(b) (4,), scale ()


def test_single_ops_stay_plain_and_long_chains_are_split():
    x = kiln.placeholder((None, 4))
    out = fuse(Graph([x], [K.exp(x)]))
    assert out.outputs[0].op == "exp"
    y = x
    for k in range(150):
        y = K.tanh(y) if k % 2 else y * 1.001
    g = Graph([x], [y])
    out = check(g, {x: RNG.normal(size=(2, 4)).astype("float32")})
    fs = fused_nodes(out)
    assert len(fs) == 3 and all(len(f.attrs["program"]) <= PassOptions.fuse_max_instructions
                               for f in fs)
    assert sum(len(f.attrs["program"]) for f in fs) == 150
