"""``kiln.export.to_onnx`` on functions and graphs (loops included), its arguments, and its
errors: an op with no translation names the op and its layer, and a failed export never
leaves a partial file."""

from __future__ import annotations

import os

import numpy as np
import pytest

import kiln
from kiln import layers as L
from kiln import ops as K
from kiln.core import Graph
from kiln.export import ExportError, to_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def run(proto, *feeds):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: f for i, f in zip(sess.get_inputs(), feeds)})


# ---- functions and graphs ----------------------------------------------------------------------
def test_function_names_and_dynamic_dims():
    x = kiln.placeholder((None, 3), name="x")
    y = kiln.placeholder((None, 3), name="y")
    total = K.sum(x * y, axis=1, keepdims=True)
    count = K.size_of(x, axis=0)  # the batch size, known only at run time
    f = kiln.function([x, y], [total / count, K.relu(x)])
    proto = to_onnx(f, output_names=["mean_dot", "relu"])
    onnx.checker.check_model(proto, full_check=True)
    assert [i.name for i in proto.graph.input] == ["x", "y"]
    assert [o.name for o in proto.graph.output] == ["mean_dot", "relu"]
    rng = np.random.default_rng(0)
    for b in (1, 6):
        a, c = (rng.normal(size=(b, 3)).astype(np.float32) for _ in range(2))
        for got, want in zip(run(proto, a, c), f(a, c)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_graph_with_default_names_and_an_output_that_is_an_input():
    x = kiln.placeholder((2, 2))
    proto = to_onnx(Graph([x], [x, K.exp(x)]))
    assert [i.name for i in proto.graph.input] == ["input_0"]
    assert [o.name for o in proto.graph.output] == ["output_0", "output_1"]
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    same, e = run(proto, a)
    np.testing.assert_array_equal(same, a)
    np.testing.assert_allclose(e, np.exp(a), rtol=1e-6)


def _rnn_step(w, u):
    def step(h, x):
        h = K.tanh(K.matmul(x, w) + K.matmul(h, u))
        return h, h * 2.0
    return step


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("unroll", [0, 5])
def test_scan_matches_the_loop(reverse, unroll):
    rng = np.random.default_rng(1)
    w = kiln.Variable(rng.normal(size=(3, 4)).astype(np.float32) * 0.5, name="w")
    u = kiln.Variable(rng.normal(size=(4, 4)).astype(np.float32) * 0.5, name="u")
    xs = kiln.placeholder((None, None, 3), name="xs")  # time-major, length unknown
    h0 = kiln.placeholder((None, 4), name="h0")
    h, ys = K.scan(_rnn_step(w, u), h0, xs, reverse=reverse)
    f = kiln.function([xs, h0], [h, ys])
    proto = to_onnx(f, unroll=unroll)  # the length is unknown: a Scan either way
    onnx.checker.check_model(proto, full_check=True)
    for t, b in [(5, 2), (1, 3)]:
        x = rng.normal(size=(t, b, 3)).astype(np.float32)
        s = rng.normal(size=(b, 4)).astype(np.float32)
        for got, want in zip(run(proto, x, s), f(x, s)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_loop_without_sequences_is_unrolled_and_nested_loops_export():
    c0 = kiln.placeholder((None, 2), name="c0")
    xs = kiln.placeholder((4, 3, 2), name="xs")

    def outer(c, x):  # an inner loop over a second axis inside the outer body
        def inner(ci, xi):
            nxt = K.sin(ci + xi)
            return nxt, nxt
        c2, _ = K.scan(inner, c, K.broadcast_to(K.expand_dims(x, 1), (3, 1, 2)))
        return c2, c2 * c2

    _, ys = K.scan(outer, c0, xs, reverse=True)
    doubled, _ = K.scan(lambda c, _: (c * 2.0 + 1.0, None), c0, length=3)
    f = kiln.function([c0, xs], [ys, doubled])
    proto = to_onnx(f)
    onnx.checker.check_model(proto, full_check=True)
    top = [n.op_type for n in proto.graph.node]
    assert top.count("Scan") == 1  # the outer loop; the length-3 loop is unrolled
    rng = np.random.default_rng(2)
    for b in (1, 3):
        c = rng.normal(size=(b, 2)).astype(np.float32)
        x = rng.normal(size=(4, 3, 2)).astype(np.float32)
        for got, want in zip(run(proto, c, x), f(c, x)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_to_onnx_of_a_model_is_model_export(tmp_path):
    model = kiln.Sequential([kiln.Input((3,)), L.Dense(2)])
    a = to_onnx(model, tmp_path / "a.onnx")
    b = model.export(tmp_path / "b.onnx")
    assert a.graph == b.graph
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    with pytest.raises(ValueError, match="a model names its own inputs and outputs"):
        to_onnx(model, output_names=["y"])


# ---- argument errors ---------------------------------------------------------------------------
def test_argument_errors(tmp_path):
    x = kiln.placeholder((None, 3), name="x")
    v = kiln.Variable(np.zeros(3, np.float32), name="v")
    with pytest.raises(ValueError, match=r"updates 1 Variable\(s\) \(a training step\)"):
        to_onnx(kiln.function([x], K.sum(x), updates=[(v, v + 1.0)]))
    g = Graph([x], [K.relu(x)])
    for bad in (12, 99, "17", True):
        with pytest.raises(ValueError, match=f"opset must be an int from 13 to .*{bad!r}"):
            to_onnx(g, opset=bad)
    with pytest.raises(TypeError, match="dynamic_batch must be True or False, received 1"):
        to_onnx(g, dynamic_batch=1)
    with pytest.raises(ValueError, match=r"has 1 outputs, received 2 output names"):
        to_onnx(g, output_names=["a", "b"])
    with pytest.raises(ValueError, match=r"must be distinct, \['x'\] repeat"):
        to_onnx(g, output_names=["x"])
    with pytest.raises(TypeError, match="expected a kiln Model, a kiln.function or a Graph"):
        to_onnx(object())
    model = kiln.Sequential([L.Dense(2)], name="unbuilt")
    with pytest.raises(ValueError, match="unbuilt: build the model before exporting"):
        model.export(tmp_path / "m.onnx")
    built = kiln.Sequential([kiln.Input((3,)), L.Dense(2)], name="seq")
    with pytest.raises(ValueError, match="seq: export supports format='onnx' only, received "
                                         "'tf_saved_model'"):
        built.export(tmp_path / "m", format="tf_saved_model")
    with pytest.raises(ValueError, match="seq: export supports format='onnx' only, received "
                                         "'litert'"):
        built.export(tmp_path / "m.onnx", format="litert")
    with pytest.raises(ValueError, match="input_signature=.... is not supported"):
        built.export(tmp_path / "m.onnx", input_signature=[(None, 3)])
    assert os.listdir(tmp_path) == []


# ---- ops without a translation, and no partial files -------------------------------------------
class Noisy(L.Layer):
    """Adds noise at inference too: random numbers kiln cannot export."""

    def call(self, x):
        key = K.constant(np.array([1, 2], np.int64))
        return x + K.random_normal(key, x, salt=3)


def test_an_untranslatable_op_names_the_op_and_its_layer_and_writes_nothing(tmp_path):
    inner = kiln.Sequential([kiln.Input((4,)), L.Dense(4), Noisy(name="noisy")], name="block")
    x = kiln.Input((4,))
    model = kiln.Model(x, L.Dense(2)(inner(x)))
    path = tmp_path / "model.onnx"
    path.write_bytes(b"the previous export")
    with pytest.raises(ExportError, match=r"op 'random_normal' \(from layer 'noisy'\) is not "
                                          r"exportable: kiln's counter-based generator"):
        model.export(path)
    assert path.read_bytes() == b"the previous export"
    assert sorted(os.listdir(tmp_path)) == ["model.onnx"]
    assert "call" not in vars(model.layers[1].layers[-1])  # the recorder is gone


def test_a_write_that_fails_leaves_no_file(tmp_path, monkeypatch):
    import kiln.export.onnx_export as onnx_export

    def half_then_fail(path, data):
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        raise OSError("disk full")

    monkeypatch.setattr(onnx_export, "_write_bytes", half_then_fail)
    model = kiln.Sequential([kiln.Input((3,)), L.Dense(2)])
    with pytest.raises(OSError, match="disk full"):
        model.export(tmp_path / "model.onnx")
    assert os.listdir(tmp_path) == []
