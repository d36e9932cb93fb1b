"""fold_affine: a per-channel scale and shift after a convolution folded into its kernel and bias
(kiln/core/passes/fold_affine.py)."""

import numpy as np
import pytest
from cpu_targets import set_cpu

import kiln
import kiln.ops as K
from kiln import layers as L
from kiln.core.backends.cpu import target
from kiln.core.backends.cpu.codegen import native
from kiln.core.ir import Graph
from kiln.core.passes import optimize
from kiln.core.passes.fold_affine import fold_affine


def _ops(graph):
    return [n.op for n in graph.nodes]


def _vec(rng, n, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, n).astype("float32")


def _compare(inputs, outputs, feeds, rtol=2e-5, atol=2e-5):
    cpu = kiln.function(inputs, outputs)
    ref = kiln.function(inputs, outputs, backend="reference", optimize=False)
    for got, want in zip(cpu(*feeds), ref(*feeds)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return cpu


@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_inference_batchnorm_after_a_convolution_is_its_kernel_and_bias(padding, avx512,
                                                                        monkeypatch):
    set_cpu(monkeypatch, avx512)  # the bias + ReLU epilogue belongs to the conv tiles
    rng = np.random.default_rng(0)
    x = kiln.placeholder((None, 12, 12, 5))
    conv = L.Conv2D(16, 3, padding=padding)
    bn = L.BatchNormalization()
    y = K.relu(bn(conv(x), training=False))
    bn.build((None, 12, 12, 16))
    for var, (lo, hi) in zip(bn.weights, ((0.5, 2.0), (-1, 1), (-1, 1), (0.2, 3.0))):
        var.assign(_vec(rng, 16, lo, hi))  # gamma, beta, moving mean, moving variance
    conv.bias.assign(_vec(rng, 16))
    xs = rng.normal(size=(6, 12, 12, 5)).astype("float32")
    f = _compare([x], [y], [xs])
    graph = f.optimized_graph
    (c,) = [n for n in graph.nodes if n.op == "conv2d"]
    assert c.inputs[1].op in ("mul", "fused")  # the kernel times the per-channel scale
    (after,) = [n for n in graph.nodes if any(i is c for i in n.inputs)]
    assert after.op == "fused" and [i[0] for i in after.attrs["program"]] == ["add", "relu"]
    steps = f.program.plan([xs]).steps
    if not (target.current().tile_conv and native.enabled()):  # no tiles: no epilogue
        assert not any(s.label.endswith("_br") for s in steps)
        return
    assert any(s.label.endswith("_br") for s in steps)  # bias + ReLU: the conv's epilogue
    # no kernel over the activation after the convolution, only the per-channel vectors'
    assert all(s.node.shape == (16,) for s in steps if s.label.startswith("fused"))


def test_training_batchnorm_keeps_its_batch_statistics():
    x = kiln.placeholder((None, 12, 12, 5))
    bn = L.BatchNormalization()
    conv = L.Conv2D(16, 3)
    y = bn(conv(x), training=True)
    g = fold_affine(Graph([x], [y]))
    (c,) = [n for n in g.nodes if n.op == "conv2d"]
    assert c.inputs[1].op == "param"  # the statistics are computed from the convolution


@pytest.mark.parametrize("form", ["(y*s + t)", "(t - y)*s", "s*(y - t) - t", "t + s*y*s"])
def test_every_order_and_sign_of_the_chain(form):
    rng = np.random.default_rng(1)
    x = kiln.placeholder((None, 10, 10, 3))
    w = kiln.Variable(rng.normal(size=(3, 3, 3, 8)).astype("float32"))
    s = kiln.Variable(_vec(rng, 8, 0.5, 2.0))
    t = kiln.placeholder((1, 1, 1, 8))  # a fed per-channel operand, (1, 1, 1, C)
    y = K.conv2d(x, w, padding="same")
    out = {"(y*s + t)": lambda: y * s + t, "(t - y)*s": lambda: (t - y) * s,
           "s*(y - t) - t": lambda: s * (y - t) - t, "t + s*y*s": lambda: t + s * y * s}[form]()
    g = fold_affine(Graph([x, t], [out]))
    (c,) = [n for n in g.nodes if n.op == "conv2d"]
    assert c.inputs[1].op == "mul"
    feeds = [rng.normal(size=(4, 10, 10, 3)).astype("float32"),
             _vec(rng, 8).reshape(1, 1, 1, 8)]
    _compare([x, t], [out], feeds)


def test_not_folded_where_it_would_not_pay_or_not_be_the_same_values():
    rng = np.random.default_rng(2)
    x = kiln.placeholder((None, 10, 10, 3))
    w = kiln.Variable(rng.normal(size=(3, 3, 3, 8)).astype("float32"))
    s = kiln.Variable(_vec(rng, 8))
    full = kiln.placeholder((None, 10, 10, 8))
    y = K.conv2d(x, w, padding="same")
    cases = {
        "shift only (the bias epilogue)": [y + s],
        "a full-shaped factor": [y * full],
        "the convolution is an output too": [y * s, y],
        "read by another kernel too": [y * s + K.sum(y)],
    }
    for name, outs in cases.items():
        g = fold_affine(Graph([x, full], outs))
        (c,) = [n for n in g.nodes if n.op == "conv2d"]
        assert c.inputs[1].op == "param", name
    # a kernel larger than a quarter of the activation (4 x 4 output, 3 x 3 x 64 taps)
    xs = kiln.placeholder((None, 6, 6, 64))
    big = kiln.Variable(rng.normal(size=(3, 3, 64, 8)).astype("float32"))
    g = fold_affine(Graph([xs], [K.conv2d(xs, big) * s]))
    assert [n for n in g.nodes if n.op == "conv2d"][0].inputs[1].op == "param"


def test_a_frozen_batchnorm_in_a_training_step_trains_like_the_reference():
    rng = np.random.default_rng(3)
    x = kiln.placeholder((None, 9, 9, 4))
    labels = kiln.placeholder((None,), "int32")
    w0 = (rng.normal(size=(3, 3, 4, 8)) * 0.3).astype("float32")
    s, t = _vec(rng, 8, 0.5, 2.0), _vec(rng, 8)
    xs = rng.normal(size=(5, 9, 9, 4)).astype("float32")
    ys = rng.integers(0, 8, 5).astype("int32")
    got = {}
    for backend in ("reference", "cpu"):
        w = kiln.Variable(w0.copy())
        h = K.relu(K.conv2d(x, w, padding="same") * K.convert_to_tensor(s) + K.convert_to_tensor(t))
        loss = K.mean(K.sparse_softmax_cross_entropy(K.mean(h, axis=(1, 2)), labels))
        (g,) = kiln.grad(loss, [w])
        step = kiln.function([x, labels], loss, updates=[(w, w - g * 0.5)], backend=backend)
        losses = [float(step(xs, ys)) for _ in range(3)]
        got[backend] = (losses, w.numpy())
    np.testing.assert_allclose(got["cpu"][0], got["reference"][0], rtol=1e-5)
    np.testing.assert_allclose(got["cpu"][1], got["reference"][1], rtol=1e-4, atol=1e-5)


def test_the_pipeline_runs_the_pass_and_can_skip_it():
    x = kiln.placeholder((None, 10, 10, 3))
    w = kiln.Variable(np.ones((3, 3, 3, 8), "float32"))
    s = kiln.Variable(np.ones(8, "float32"))
    g = Graph([x], [K.conv2d(x, w) * s])
    mul_of_param = [n for n in optimize(g)[0].nodes if n.op == "conv2d"][0].inputs[1].op
    assert mul_of_param in ("mul", "fused")
    kept = optimize(g, exclude="fold_affine")[0]
    assert [n for n in kept.nodes if n.op == "conv2d"][0].inputs[1].op == "param"
