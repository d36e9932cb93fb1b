"""The pass manager: order, exclusion, report, debug verification, DOT output, the
stabilized softmax cross-entropy end to end, and an MLP training step."""

from __future__ import annotations

import numpy as np
import pytest
from passes_helpers import feeds, mlp_train_step

import kiln
import kiln.core
import kiln.ops as K
from kiln.core.backends.reference import evaluate
from kiln.core.ir import Graph
from kiln.core.passes import PASS_NAMES, PIPELINE, GraphInvariantError, Report, optimize
from kiln.core.passes._util import num_kernels

RNG = np.random.default_rng(0)


def small_graph():
    x = kiln.placeholder((None, 4), name="x")
    w = kiln.Variable(RNG.normal(size=(4, 3)), name="w")
    h = K.relu(x @ w * 1.0 + 0.0)
    loss = K.mean(K.sum(K.square(h), axis=1))
    (gw,) = kiln.grad(loss, [w])
    return Graph([x], [loss, w - 0.1 * gw]), x


def test_pipeline_order_and_report_fields():
    g, x = small_graph()
    out, report = optimize(g)
    assert isinstance(report, Report)
    assert PASS_NAMES == ("canonicalize", "constant_fold", "cse", "simplify", "dce", "loops",
                          "fold_affine", "gemm", "fuse", "remat", "verify")
    assert [e.name for e in report.passes] == [n for n in PASS_NAMES if n != "remat"]
    assert report.passes[0].nodes_before == len(g)
    for a, b in zip(report.passes, report.passes[1:]):
        assert b.nodes_before == a.nodes_after
    assert report.passes[-1].nodes_after == len(out)
    assert report.num_kernels == num_kernels(out) == report.passes[-1].kernels_after
    assert 0 < report.peak_bytes <= report.naive_bytes
    assert report.before is g and report.after is out
    text = str(report)
    for name in ("canonicalize", "fuse", "verify", "kernels", "peak"):
        assert name in text
    f = {x: RNG.normal(size=(5, 4)).astype("float32")}
    for a, b in zip(evaluate(g.outputs, f), evaluate(out.outputs, f)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_inputs_and_outputs_are_preserved():
    x = kiln.placeholder((None, 4), name="x")
    unused = kiln.placeholder((2,), name="unused")
    w = kiln.Variable(np.ones((4,)))
    g = Graph([x, unused], [x * 1.0, w + 0.0, K.exp(x), x * 1.0])
    out, _ = optimize(g)
    assert out.inputs == [x, unused]
    assert out.outputs[0] is x and out.outputs[3] is x
    assert out.outputs[1].op == "param"
    assert [o.type for o in out.outputs] == [o.type for o in g.outputs]


def test_exclude_by_name_and_unknown_names():
    g, _ = small_graph()
    out, report = optimize(g, exclude=("fuse", "simplify"))
    assert "fused" not in out.count_ops()
    assert [e.name for e in report.passes] == ["canonicalize", "constant_fold", "cse", "dce",
                                               "loops", "fold_affine", "gemm",
                                               "verify"]
    _, report = kiln.core.optimize(g, exclude="fuse")  # forwards; a single name works too
    assert "fuse" not in [e.name for e in report.passes]
    with pytest.raises(ValueError, match="unknown pass name.*'fusion'.*canonicalize"):
        optimize(g, exclude=["fusion"])


def _replace_pass(monkeypatch, name, fn):
    pipeline = [(n, fn if n == name else f) for n, f in PIPELINE]
    monkeypatch.setattr("kiln.core.passes.PIPELINE", pipeline)


def test_passes_must_keep_inputs_and_output_types(monkeypatch):
    g, _ = small_graph()

    def bad_outputs(graph):
        return Graph(graph.inputs, [K.reshape(graph.outputs[0], (1,))] + graph.outputs[1:])

    def bad_inputs(graph):
        return Graph(graph.inputs[::-1] + [kiln.placeholder((1,))], graph.outputs)

    for bad, message in [(bad_outputs, "pass cse changed the type of output 0"),
                         (bad_inputs, "pass cse changed the graph inputs")]:
        _replace_pass(monkeypatch, "cse", bad)
        with pytest.raises(GraphInvariantError, match=message):
            optimize(g)


def test_debug_mode_verifies_after_every_pass(monkeypatch):
    from kiln.core.ir import Node

    g, _ = small_graph()
    monkeypatch.setenv("KILN_DEBUG", "1")
    optimize(g)  # the real pipeline passes every check

    def corrupt(graph):  # a node whose type disagrees with its op's shape rule
        out = graph.outputs[1]
        wrong = Node("exp", (K.sum(out, axis=0),), {}, out.type, ("corrupt",))
        return Graph(graph.inputs, [graph.outputs[0], wrong])

    _replace_pass(monkeypatch, "cse", corrupt)
    with pytest.raises(GraphInvariantError, match="after pass cse: exp node"):
        optimize(g, exclude=("verify",))
    monkeypatch.setenv("KILN_DEBUG", "0")
    with pytest.raises(GraphInvariantError) as info:  # without debug: noticed later, if at all
        optimize(g)
    assert "cse" not in str(info.value)


def test_verify_catches_a_node_whose_type_disagrees_with_its_shape_rule():
    from kiln.core.ir import Node, TensorType
    from kiln.core.passes.verify import check_graph

    x = kiln.placeholder((None, 4))
    broken = Node("exp", (x,), {}, TensorType((None, 5)), ("broken",))
    with pytest.raises(GraphInvariantError, match="shape rule gives"):
        check_graph(Graph([x], [broken]))


def test_to_dot_draws_fused_groups_as_clusters():
    g, _ = small_graph()
    _, report = optimize(g)
    after = report.to_dot("after")
    before = report.to_dot(stage="before")
    assert after.startswith("digraph") and after.rstrip().endswith("}")
    n_fused = report.after.count_ops().get("fused", 0)
    assert n_fused > 0 and after.count("subgraph cluster_") == n_fused
    assert "subgraph cluster_" not in before and "matmul" in before
    with pytest.raises(ValueError, match="stage"):
        report.to_dot("middle")


def test_function_reports_and_runs_optimized():
    g, x = small_graph()
    f = kiln.function([x], g.outputs[0], backend="reference")
    assert isinstance(f.report, Report) and f.report.num_kernels < len(f.graph)
    xv = RNG.normal(size=(3, 4)).astype("float32")
    np.testing.assert_allclose(f(xv), evaluate([g.outputs[0]], {x: xv})[0], rtol=1e-5)


# ---- stabilization end to end ---------------------------------------------------------------
def test_softmax_cross_entropy_by_hand_is_stable_after_optimize():
    logits = kiln.placeholder((None, 6), name="logits")
    y = kiln.placeholder((None, 6), name="y")
    loss = K.mean(-K.sum(y * K.log(K.softmax(logits)), axis=-1))
    (g_logits,) = kiln.grad(loss, [logits])  # gradients first, like the trainer
    graph = Graph([logits, y], [loss, g_logits])
    out, _ = optimize(graph)
    z = RNG.normal(size=(5, 6)).astype("float32") * 1e4
    labels = np.eye(6, dtype="float32")[[0, 2, 5, 1, 1]]
    naive = evaluate(graph.outputs, {logits: z, y: labels})
    assert not (np.isfinite(naive[0]) and np.isfinite(naive[1]).all())
    loss_v, grad_v = evaluate(out.outputs, {logits: z, y: labels})
    assert np.isfinite(loss_v) and np.isfinite(grad_v).all()
    z64 = z.astype(np.float64)
    lsm = z64 - z64.max(1, keepdims=True)
    lsm -= np.log(np.exp(lsm).sum(1, keepdims=True))
    np.testing.assert_allclose(loss_v, -(labels * lsm).sum(1).mean(), rtol=1e-5)
    np.testing.assert_allclose(grad_v, (np.exp(lsm) - labels) / 5, rtol=1e-5, atol=1e-7)


# ---- an MLP training step ----------------------------------------------------------------------
def test_mlp_training_step_784_512_256_10():
    g, x, y, _ = mlp_train_step([784, 512, 256, 10])
    out, report = optimize(g)
    ops_before = num_kernels(g)
    assert len(out) < len(g)
    assert report.num_kernels < ops_before
    assert report.peak_bytes < report.naive_bytes
    counts = out.count_ops()
    assert counts["fused"] >= 10 and counts["softmax_cross_entropy"] == 1
    assert "log" not in counts and "div" not in counts
    f = feeds(x, y, 8)
    for a, b in zip(evaluate(g.outputs, f), evaluate(out.outputs, f)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
