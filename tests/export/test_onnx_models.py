"""Exported models against ``model.predict``: for each model, ``onnx.checker`` (with shape
inference) accepts the file and onnxruntime's predictions match kiln's to 1e-5 at two batch
sizes (and two sequence lengths where the length is dynamic)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers as L

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

BATCHES = (1, 7)


def randomize(model: kiln.Model, seed: int = 0) -> kiln.Model:
    """Non-trivial weights everywhere (a fresh BatchNormalization is the identity)."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        shape = tuple(v.shape)
        if "variance" in v.name:
            v.assign(rng.uniform(0.5, 1.5, shape).astype(v.dtype))
        else:
            v.assign((rng.normal(size=shape) * 0.4).astype(v.dtype))
    return model


def session(path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def check_against_predict(model: kiln.Model, make_inputs, path, batches=BATCHES,
                          **export_kwargs) -> onnx.ModelProto:
    """Exports ``model`` to ``path`` and compares onnxruntime with ``model.predict`` on
    ``make_inputs(batch)`` (a list of arrays, one per model input)."""
    proto = model.export(path, **export_kwargs)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    sess = session(path)
    assert [i.name for i in sess.get_inputs()] == [s.name for s in model._model_input_specs()]
    assert [o.name for o in sess.get_outputs()] == model.output_names
    for b in batches:
        xs = make_inputs(b)
        want = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
        want = want if isinstance(want, list) else [want]
        got = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    return proto


def normal(*shape, seed=1):
    def make(b):
        return [np.random.default_rng(seed + b).normal(size=(b,) + shape).astype(np.float32)]
    return make


def ops_of(proto) -> set[str]:
    out = set()

    def walk(graph):
        for n in graph.node:
            out.add(n.op_type)
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)
    walk(proto.graph)
    return out


# ---- the models of the issue -------------------------------------------------------------------
def mlp():
    return kiln.Sequential([kiln.Input((20,)), L.Dense(32, activation="relu"), L.Dropout(0.5),
                            L.Dense(32, activation="relu"), L.Dropout(0.2),
                            L.Dense(10, activation="softmax")], name="mlp")


def convnet():
    """examples/mnist_convnet.py with BatchNormalization after each convolution."""
    return kiln.Sequential([
        kiln.Input((28, 28, 1)),
        L.Conv2D(32, 3, activation="relu"), L.BatchNormalization(), L.MaxPooling2D(2),
        L.Conv2D(64, 3, activation="relu"), L.BatchNormalization(), L.MaxPooling2D(2),
        L.Flatten(), L.Dropout(0.5), L.Dense(10, activation="softmax")], name="convnet")


def test_mlp_matches_predict_and_holds_no_training_ops(tmp_path):
    model = randomize(mlp())
    proto = check_against_predict(model, normal(20), tmp_path / "mlp.onnx")
    ops = ops_of(proto)
    assert ops <= {"MatMul", "Add", "Relu", "Softmax", "Identity"}, ops
    assert len(proto.graph.input) == 1  # the model's input, no random key
    weights = {v.name: v.numpy() for v in model.weights}
    for init in proto.graph.initializer:  # the weights, by name, float32
        assert init.data_type == onnx.TensorProto.FLOAT
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(init), weights[init.name])
    assert {t.name for t in proto.graph.initializer} == set(weights)


def test_convnet_with_batch_normalization(tmp_path):
    model = randomize(convnet())
    proto = check_against_predict(model, normal(28, 28, 1), tmp_path / "convnet.onnx")
    ops = ops_of(proto)
    assert "Conv" in ops and "MaxPool" in ops
    assert not ops & {"Dropout", "RandomUniform", "RandomUniformLike", "RandomNormal",
                      "RandomNormalLike", "BatchNormalization"}
    dim = proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param == "batch"


def test_functional_model_with_merges_and_layer_normalization(tmp_path):
    a, b = kiln.Input((6,), name="left"), kiln.Input((6,), name="right")
    ha = L.Dense(8, activation="tanh")(a)
    hb = L.Dense(8, activation="sigmoid")(b)
    merged = [L.Add()([ha, hb]), L.Subtract()([ha, hb]), L.Multiply()([ha, hb]),
              L.Average()([ha, hb]), L.Maximum()([ha, hb]), L.Minimum()([ha, hb])]
    joined = L.Concatenate()(merged)
    normed = L.LayerNormalization(name="norm")(joined)
    out1 = L.Dense(3, activation="softmax", name="probs")(normed)
    out2 = L.Dense(1, name="score")(L.LayerNormalization()(ha))
    model = randomize(kiln.Model([a, b], [out1, out2]))

    def make(n):
        rng = np.random.default_rng(n)
        return [rng.normal(size=(n, 6)).astype(np.float32) for _ in range(2)]
    check_against_predict(model, make, tmp_path / "functional.onnx")


# ---- every layer of the layer tests that has a translation ---------------------------------------
def _seq(shape, *layers, dtype="float32"):
    return kiln.Sequential([kiln.Input(shape, dtype=dtype), *layers])


def _ints(*shape, high=10):
    def make(b):
        x = np.random.default_rng(b).integers(0, high, size=(b,) + shape).astype(np.int32)
        x[:, -2:] = 0  # padding, masked by mask_zero
        return [x]
    return make


def _masked(*shape):
    def make(b):
        x = normal(*shape)(b)[0]
        x[:, -2:] = 0.0  # masked by Masking
        return [x]
    return make


LAYER_CASES = {
    "dense_activations": (lambda: _seq((5,), L.Dense(6, activation="gelu"),
                                       L.Activation("elu"), L.Activation("softplus"),
                                       L.Activation("silu"), L.Activation("mish"),
                                       L.Activation("hard_sigmoid"), L.Dense(4, "selu")),
                          normal(5)),
    "lambda": (lambda: _seq((5,), L.Lambda(lambda x: kiln.ops.square(x) - x)), normal(5)),
    "embedding_lstm": (lambda: _seq((6,), L.Embedding(10, 4, mask_zero=True), L.LSTM(3),
                                    dtype="int32"), _ints(6)),
    "masking_gru": (lambda: _seq((5, 3), L.Masking(), L.GRU(4, return_sequences=True)),
                    _masked(5, 3)),
    "simple_rnn_backwards": (lambda: _seq((5, 3), L.SimpleRNN(4, go_backwards=True,
                                                              return_sequences=True)),
                             normal(5, 3)),
    "lstm_state": (lambda: _seq((5, 3), L.LSTM(4, return_sequences=True),
                                L.LSTM(2, return_state=False)), normal(5, 3)),
    "bidirectional": (lambda: _seq((5, 3), L.Bidirectional(L.LSTM(3, return_sequences=True)),
                                   L.Bidirectional(L.GRU(2), merge_mode="sum")),
                      normal(5, 3)),
    "time_distributed": (lambda: _seq((4, 3), L.TimeDistributed(L.Dense(2))), normal(4, 3)),
    "conv1d_pools": (lambda: _seq((9, 3), L.Conv1D(4, 3, padding="causal", dilation_rate=2),
                                  L.MaxPooling1D(2), L.Conv1D(4, 2, padding="same"),
                                  L.AveragePooling1D(2, padding="same"),
                                  L.GlobalMaxPooling1D()), normal(9, 3)),
    "global_average_1d": (lambda: _seq((5, 3), L.Conv1D(2, 2), L.GlobalAveragePooling1D()),
                          normal(5, 3)),
    "conv2d_pools": (lambda: _seq((9, 8, 2), L.Conv2D(3, 3, strides=2, padding="same"),
                                  L.AveragePooling2D(2, padding="same"),
                                  L.Conv2D(2, (2, 1), dilation_rate=(1, 2), padding="same"),
                                  L.MaxPooling2D(2, strides=1, padding="same"),
                                  L.GlobalAveragePooling2D()), normal(9, 8, 2)),
    "global_max_2d": (lambda: _seq((5, 5, 2), L.AveragePooling2D(2), L.GlobalMaxPooling2D()),
                      normal(5, 5, 2)),
    "conv2d_transpose": (lambda: _seq((4, 5, 2), L.Conv2DTranspose(3, 3, strides=2,
                                                                   padding="same"),
                                      L.Conv2DTranspose(2, (2, 3), strides=(1, 2))),
                         normal(4, 5, 2)),
    "reshaping": (lambda: _seq((3, 3, 2), L.ZeroPadding2D(((1, 0), (0, 2))), L.UpSampling2D(2),
                               L.Flatten(), L.RepeatVector(2), L.Permute((2, 1)),
                               L.Reshape((-1, 4))), normal(3, 3, 2)),
    "batch_norm_dense": (lambda: _seq((6,), L.Dense(5), L.BatchNormalization(),
                                      L.LayerNormalization(center=False)), normal(6)),
    "einsum_dense": (lambda: _seq((4, 3), L.EinsumDense("abc,cd->abd", (4, 5),
                                                        bias_axes="d")), normal(4, 3)),
}


@pytest.mark.parametrize("case", sorted(LAYER_CASES))
def test_layer_matches_predict(case, tmp_path):
    build, make = LAYER_CASES[case]
    check_against_predict(randomize(build()), make, tmp_path / f"{case}.onnx")


def test_attention_layers(tmp_path):
    q, v = kiln.Input((4, 6), name="query"), kiln.Input((5, 6), name="value")
    mha = L.MultiHeadAttention(2, 3, name="mha")(q, v)
    causal = L.MultiHeadAttention(2, 3, name="self")(q, q, use_causal_mask=True)
    dot = L.Attention(use_scale=True)([q, v])
    additive = L.AdditiveAttention()([q, v])
    model = randomize(kiln.Model([q, v], [mha, causal, dot, additive]))

    def make(n):
        rng = np.random.default_rng(n)
        return [rng.normal(size=(n, 4, 6)).astype(np.float32),
                rng.normal(size=(n, 5, 6)).astype(np.float32)]
    check_against_predict(model, make, tmp_path / "attention.onnx")


def test_dynamic_sequence_length_runs_as_a_scan(tmp_path):
    model = randomize(_seq((None, 3), L.LSTM(4, return_sequences=True), L.GRU(2)))
    path = tmp_path / "rnn.onnx"
    proto = model.export(path)
    assert "Scan" in ops_of(proto)
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    name = proto.graph.input[0].name
    assert [d.dim_param for d in dims[:2]] == ["batch", f"{name}_dim1"]
    sess = session(path)
    for b, t in [(1, 7), (3, 2)]:  # each run a new batch size and length, no re-export
        x = normal(t, 3, seed=t)(b)[0]
        got = sess.run(None, {name: x})[0]
        np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-5, atol=1e-5)


def test_unrolled_loops_match_the_scan(tmp_path):
    model = randomize(_seq((5, 3), L.Bidirectional(L.LSTM(3))))
    proto = check_against_predict(model, normal(5, 3), tmp_path / "unrolled.onnx", unroll=5)
    assert "Scan" not in ops_of(proto)
    assert "Scan" in ops_of(model.export(None, unroll=4))  # 5 steps > 4: a Scan


@pytest.mark.parametrize("opset", [13, 18])
def test_other_opsets(opset, tmp_path):
    model = randomize(_seq((5, 3), L.Conv1D(4, 2), L.LSTM(3), L.LayerNormalization()))
    proto = check_against_predict(model, normal(5, 3), tmp_path / f"opset{opset}.onnx",
                                  opset=opset)
    assert proto.opset_import[0].version == opset


def test_fixed_batch(tmp_path):
    model = randomize(mlp())
    proto = check_against_predict(model, normal(20), tmp_path / "fixed.onnx", batches=(1,),
                                  dynamic_batch=False)
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1


class TwoTowers(kiln.Model):
    """A subclassed model (layers as attributes, a Python ``call``)."""

    def __init__(self):
        super().__init__(name="towers")
        self.a = L.Dense(4, activation="relu")
        self.b = L.Dense(4, activation="tanh")
        self.out = L.Dense(2)

    def call(self, x, training=None):
        return self.out(self.a(x) * self.b(x))


def test_subclassed_model(tmp_path):
    model = TwoTowers()
    model.build((None, 3))
    check_against_predict(randomize(model), normal(3), tmp_path / "towers.onnx")
    assert "call" not in vars(model)  # the recorder restored the method


def test_batchnormalization_folded_into_its_convolution_matches_predict(tmp_path):
    # Conv2D -> BatchNormalization (no activation between): the fold_affine pass makes the
    # kernel W * scale and the bias an add; the exported graph computes the same as predict
    model = randomize(kiln.Sequential([
        kiln.Input((12, 12, 3)), L.Conv2D(16, 3, padding="same"), L.BatchNormalization(),
        L.ReLU(), L.Conv2D(8, 3, use_bias=False), L.BatchNormalization(),
        L.GlobalAveragePooling2D(), L.Dense(4)], name="conv_bn"))
    proto = check_against_predict(model, normal(12, 12, 3), tmp_path / "conv_bn.onnx")
    ops = ops_of(proto)
    assert "Conv" in ops and "BatchNormalization" not in ops
    graph = model.predict_function.optimized_graph
    convs = [n for n in graph.nodes if n.op == "conv2d"]
    assert len(convs) == 2 and all(c.inputs[1].op != "param" for c in convs)  # both folded
