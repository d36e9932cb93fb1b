"""GroupQueryAttention, ReversibleEmbedding and StackedRNNCells (issue 44) against Keras live
(weights copied over), finite differences, the standard checks, and ``.keras`` files written
by Keras itself that kiln loads (new layers of this issue, each with non-default weights)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from fd_oracle import numeric_grad
from layer_helpers import run_layer_test

import kiln
import kiln.ops as K
from kiln import layers as L
from kiln.saving import load_model

RNG = np.random.default_rng(3150)


@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    return pytest.importorskip("keras")


GQA = [
    {"head_dim": 4, "num_query_heads": 4, "num_key_value_heads": 2},
    {"head_dim": 3, "num_query_heads": 6, "num_key_value_heads": 3, "use_gate": True,
     "sliding_window": 2},
    {"head_dim": 2, "num_query_heads": 2, "num_key_value_heads": 1, "use_bias": False},
]


@pytest.mark.parametrize("kwargs", GQA, ids=["plain", "gate-window", "no-bias"])
@pytest.mark.parametrize("causal", [False, True])
def test_group_query_attention_matches_keras(kwargs, causal, keras):
    q = RNG.normal(size=(2, 5, 8)).astype("float32")
    v = q if causal else RNG.normal(size=(2, 6, 8)).astype("float32")
    theirs = keras.layers.GroupQueryAttention(**kwargs)
    want = np.asarray(theirs(q, v, use_causal_mask=causal))
    ours = L.GroupQueryAttention(**kwargs)
    ours(q, v)
    assert [w.name.split("/")[-2:] for w in ours.weights] == [
        w.path.split("/")[-2:] for w in theirs.weights]
    ours.set_weights([np.asarray(w) for w in theirs.weights])
    np.testing.assert_allclose(ours(q, v, use_causal_mask=causal), want, rtol=1e-5,
                               atol=1e-6)


def test_group_query_attention_masks_and_scores(keras):
    q = RNG.normal(size=(2, 4, 6)).astype("float32")
    vmask = np.array([[1, 1, 0, 1], [1, 0, 0, 0]], bool)
    kw = {"head_dim": 3, "num_query_heads": 4, "num_key_value_heads": 2}
    theirs = keras.layers.GroupQueryAttention(**kw)
    want, want_scores = theirs(q, q, value_mask=vmask, return_attention_scores=True)
    ours = L.GroupQueryAttention(**kw)
    ours(q, q)
    ours.set_weights([np.asarray(w) for w in theirs.weights])
    got, scores = ours(q, q, value_mask=vmask, return_attention_scores=True)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scores, np.asarray(want_scores), rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(scores)[1, :, :, 1:] == 0)


def test_group_query_attention_config_and_errors():
    layer = L.GroupQueryAttention(4, 4, 2, use_gate=True, sliding_window=3, dropout=0.1,
                                  seed=1)
    config = layer.get_config()
    for key in ("num_heads", "key_dim", "value_dim"):
        assert key not in config
    again = L.GroupQueryAttention.from_config(config)
    assert again.get_config() == config
    with pytest.raises(ValueError, match="divisible by `num_key_value_heads`"):
        L.GroupQueryAttention(4, 3, 2)
    with pytest.raises(ValueError, match="sliding_window"):
        L.GroupQueryAttention(4, 4, 2, sliding_window=0)
    # Keras' flash_attention (after sliding_window): None and False are plain attention,
    # True asks for a kernel kiln lacks and is refused, naming the argument
    plain = L.GroupQueryAttention(4, 4, 2, 0.0, True, None, False)
    assert plain.sliding_window is None and plain.get_config() == L.GroupQueryAttention(
        4, 4, 2, name=plain.name).get_config()
    with pytest.raises(ValueError, match=r"GroupQueryAttention: flash_attention=True is not "
                       "supported"):
        L.GroupQueryAttention(4, 4, 2, flash_attention=True)


def test_group_query_attention_gradient_matches_finite_differences():
    q = RNG.normal(size=(1, 3, 4))
    layer = L.GroupQueryAttention(2, 2, 1, use_gate=True, dtype="float64")
    layer(q, q)
    qp = kiln.placeholder(q.shape, "float64")
    ct = RNG.normal(size=q.shape)
    loss = K.sum(layer(qp, qp) * K.constant(ct))
    f = kiln.function([qp], [loss] + kiln.grad(loss, [qp] + list(layer.weights)))
    got = f(q)[1:]
    np.testing.assert_allclose(got[0], numeric_grad(lambda: float(f(q)[0]), q), rtol=1e-6,
                               atol=1e-8)
    for w, g in zip(layer.weights, got[1:]):
        np.testing.assert_allclose(g, numeric_grad(lambda: float(f(q)[0]), w.value),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kwargs", [{}, {"tie_weights": False, "logit_soft_cap": 2.0},
                                    {"mask_zero": True}])
def test_reversible_embedding_matches_keras(kwargs, keras):
    ids = RNG.integers(0, 10, size=(2, 5))
    theirs = keras.layers.ReversibleEmbedding(10, 4, **kwargs)
    theirs(ids)
    for w in theirs.weights:
        w.assign(RNG.normal(size=w.shape).astype("float32"))
    ours = L.ReversibleEmbedding(10, 4, **kwargs)
    ours(ids)
    ours.set_weights([np.asarray(w) for w in theirs.weights])
    h = RNG.normal(size=(2, 5, 4)).astype("float32")
    np.testing.assert_allclose(ours(ids), np.asarray(theirs(ids)), rtol=1e-6)
    np.testing.assert_allclose(ours(h, reverse=True), np.asarray(theirs(h, reverse=True)),
                               rtol=1e-5, atol=1e-6)
    again = L.ReversibleEmbedding.from_config(ours.get_config())
    assert again.get_config() == ours.get_config()


def test_reversible_embedding_in_a_model_ties_both_directions(tmp_path):
    ids = kiln.Input((5,), dtype="int32")
    emb = L.ReversibleEmbedding(12, 6, logit_soft_cap=3.0)
    logits = emb(L.Dense(6)(emb(ids)), reverse=True)
    model = kiln.Model(ids, logits)
    assert len(model.weights) == 3 and model.output_shape == (None, 5, 12)
    x = RNG.integers(0, 12, size=(3, 5))
    y = model.predict(x, verbose=0)
    assert np.abs(y).max() <= 3.0
    model.save(str(tmp_path / "r.keras"))
    np.testing.assert_allclose(load_model(str(tmp_path / "r.keras")).predict(x, verbose=0), y,
                               rtol=1e-6)


def test_stacked_rnn_cells_match_keras(keras):
    x = RNG.normal(size=(2, 5, 3)).astype("float32")
    theirs = keras.layers.RNN(keras.layers.StackedRNNCells(
        [keras.layers.LSTMCell(4), keras.layers.GRUCell(3)]), return_sequences=True,
        return_state=True)
    out, lstm_states, gru_state = theirs(x)  # Keras nests the states per cell; kiln's are flat
    want = [np.asarray(t) for t in (out, *lstm_states, gru_state)]
    ours = L.RNN([L.LSTMCell(4), L.GRUCell(3)], return_sequences=True, return_state=True)
    ours(x)
    assert isinstance(ours.cell, L.StackedRNNCells) and ours.cell.state_size == [4, 4, 3]
    ours.set_weights([np.asarray(w) for w in theirs.weights])
    got = ours(x)
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):  # Keras keeps a one-state cell's state as a list of one
        np.testing.assert_allclose(g, w.reshape(np.shape(g)), rtol=1e-5, atol=1e-6)


STACKED = (L.RNN, {"cell": L.StackedRNNCells([L.SimpleRNNCell(3), L.LSTMCell(2)])},
           (2, 4, 3), (2, 2), (9 + 9 + 3) + (24 + 16 + 8), [(3, 3), (3, 3), (3,), (3, 8),
                                                            (2, 8), (8,)])


def test_stacked_rnn_cells_standard_checks_and_round_trip(tmp_path):
    cls, kwargs, in_shape, out_shape, params, _ = STACKED
    run_layer_test(cls, {"cell": L.StackedRNNCells([L.SimpleRNNCell(3), L.LSTMCell(2)])},
                   in_shape, out_shape, params)
    model = kiln.Sequential([kiln.Input(in_shape[1:]), L.RNN(kwargs["cell"])])
    model.set_weights([RNG.normal(size=w.shape).astype("float32") for w in model.weights])
    assert [tuple(w.shape) for w in model.weights] == STACKED[-1]
    x = RNG.normal(size=in_shape).astype("float32")
    model.save(str(tmp_path / "s.keras"))
    loaded = load_model(str(tmp_path / "s.keras"))
    assert [type(c).__name__ for c in loaded.layers[-1].cell.cells] == ["SimpleRNNCell",
                                                                        "LSTMCell"]
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6)


def test_stacked_rnn_cells_errors():
    with pytest.raises(ValueError, match="`state_size`"):
        L.StackedRNNCells([L.Dense(2)])


KERAS_WRITTEN = [
    ("Conv3D", lambda k: k.layers.Conv3D(3, 2, padding="same"), (2, 4, 4, 4, 2)),
    ("Conv3DTranspose", lambda k: k.layers.Conv3DTranspose(3, 2, strides=2), (2, 3, 3, 3, 2)),
    ("AveragePooling3D", lambda k: k.layers.AveragePooling3D(2, padding="same"),
     (2, 3, 4, 5, 2)),
    ("RMSNormalization", lambda k: k.layers.RMSNormalization(), (2, 4, 5)),
    ("StackedRNNCells", lambda k: k.layers.RNN([k.layers.LSTMCell(4), k.layers.GRUCell(3)]),
     (2, 5, 3)),
    ("GroupQueryAttention", lambda k: (lambda x: k.layers.GroupQueryAttention(4, 4, 2)(x, x)),
     (2, 5, 8)),
    ("AdaptiveMaxPooling2D", lambda k: k.layers.AdaptiveMaxPooling2D((2, 3)), (2, 5, 7, 3)),
    ("UpSampling3D", lambda k: k.layers.UpSampling3D((1, 2, 2)), (2, 2, 2, 2, 3)),
    ("ReversibleEmbedding", lambda k: (lambda x: k.layers.ReversibleEmbedding(
        7, 5, tie_weights=False)(k.layers.Dense(5)(x), reverse=True)), (2, 4, 3)),
    ("RandomColorJitter", lambda k: k.layers.RandomColorJitter(brightness_factor=0.2,
                                                               hue_factor=0.1), (2, 4, 4, 3)),
    ("AutoContrast", lambda k: k.layers.AutoContrast(), (2, 4, 4, 3)),
    ("Pipeline", lambda k: k.layers.Pipeline([k.layers.Rescaling(0.5), k.layers.Dense(2)]),
     (2, 3)),
]


@pytest.mark.parametrize("name,build,shape", KERAS_WRITTEN, ids=[k[0] for k in KERAS_WRITTEN])
def test_keras_written_files_load_and_predict_the_same(name, build, shape, keras, tmp_path):
    inp = keras.Input(shape[1:])
    model = keras.Model(inp, build(keras)(inp))
    for w in model.weights:
        w.assign(RNG.normal(size=w.shape).astype("float32") * 0.3)
    x = RNG.normal(size=shape).astype("float32")
    want = np.asarray(model.predict(x, verbose=0))
    model.save(str(tmp_path / "k.keras"))
    ours = load_model(str(tmp_path / "k.keras"))
    np.testing.assert_allclose(ours.predict(x, verbose=0), want, rtol=1e-5, atol=1e-5)
