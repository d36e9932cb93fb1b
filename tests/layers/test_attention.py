"""Attention layers: EinsumDense (Keras' shape rule, forward), MultiHeadAttention (against
torch.nn.MultiheadAttention with mapped weights: forward, scores, weight and input gradients,
masks, causal; against a NumPy reference of Keras' semantics for the masks and higher-rank
inputs), Attention and AdditiveAttention (NumPy formulas), a transformer encoder block trained
with fit, config and save/load round trips, and the error messages.

These tests run on the compiled CPU backend (the default), not on the reference backend the
other layer tests use.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from layer_helpers import run_layer_test

import kiln
import kiln.ops as K
from kiln import layers
from kiln.layers.context import trace


@pytest.fixture(autouse=True)
def _reference_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Overrides tests/layers/conftest.py: these tests compile with the CPU backend."""
    monkeypatch.setenv("KILN_BACKEND", "cpu")


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _random_weights(layer, rng, scale=0.5):
    layer.set_weights([rng.normal(size=w.shape) * scale for w in layer.weights])


# ---- EinsumDense ---------------------------------------------------------------------------------
@pytest.mark.parametrize("equation,output_shape,bias_axes,input_shape,kernel,bias,out", [
    ("ab,bc->ac", 7, "c", (2, 5), (5, 7), (7,), (2, 7)),
    ("abc,cd->abd", (None, 6), "d", (2, 3, 4), (4, 6), (6,), (2, 3, 6)),
    ("...x,xy->...y", 6, "y", (2, 3, 4), (4, 6), (6,), (2, 3, 6)),
    ("abc,cde->abde", (None, 2, 3), "de", (2, 4, 5), (5, 2, 3), (2, 3), (2, 4, 2, 3)),
    ("abc,cde->abde", (None, 2, 3), "be", (2, 4, 5), (5, 2, 3), (4, 1, 3), (2, 4, 2, 3)),
    ("abcd,cde->abe", (None, 5), "e", (2, 4, 2, 3), (2, 3, 5), (5,), (2, 4, 5)),
    ("ab...,bc->ac...", 6, "c", (2, 4, 3), (4, 6), (6, 1), (2, 6, 3)),
    ("abc,cd->abd", (None, 6), None, (2, 3, 4), (4, 6), None, (2, 3, 6)),
])
def test_einsum_dense_shapes_and_values(equation, output_shape, bias_axes, input_shape, kernel,
                                        bias, out):
    rng = np.random.default_rng(0)
    layer = layers.EinsumDense(equation, output_shape, bias_axes=bias_axes, activation="tanh")
    x = rng.normal(size=input_shape).astype(np.float32)
    y = layer(x)
    assert layer.kernel.shape == kernel
    assert (layer.bias is None and bias is None) or layer.bias.shape == bias
    assert [w.name.split("/")[-1] for w in layer.weights] == ["kernel", "bias"][:1 + (bias
                                                                                       is not None)]
    expected = np.einsum(equation, x, layer.kernel.numpy())
    if bias is not None:
        expected = expected + layer.bias.numpy()
    assert y.shape == out
    np.testing.assert_allclose(y, np.tanh(expected), rtol=1e-5, atol=1e-6)


def test_einsum_dense_standard_layer_checks():
    run_layer_test(layers.EinsumDense, {"equation": "abc,cde->abde", "output_shape": (None, 2, 3),
                                        "bias_axes": "de"},
                   input_shape=(2, 4, 5), expected_output_shape=(2, 4, 2, 3),
                   expected_num_params=5 * 6 + 6)


# ---- MultiHeadAttention vs torch ---------------------------------------------------------------
def _torch_mha(mha, d_q, d_kv):
    """A torch.nn.MultiheadAttention carrying ``mha``'s weights (embed_dim = N * H = d_q)."""
    torch = pytest.importorskip("torch")
    qk, qb, kk, kb, vk, vb, ok, ob = mha.get_weights()
    e = qk.shape[1] * qk.shape[2]
    t = torch.nn.MultiheadAttention(e, qk.shape[1], batch_first=True, dtype=torch.float64,
                                    kdim=d_kv, vdim=d_kv)
    with torch.no_grad():
        ws = [w.reshape(w.shape[0], e).T for w in (qk, kk, vk)]
        if d_kv == d_q:
            t.in_proj_weight.copy_(torch.tensor(np.concatenate(ws)))
        else:
            for name, w in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), ws):
                getattr(t, name).copy_(torch.tensor(w))
        t.in_proj_bias.copy_(torch.tensor(np.concatenate([qb.ravel(), kb.ravel(), vb.ravel()])))
        t.out_proj.weight.copy_(torch.tensor(ok.reshape(e, -1).T))
        t.out_proj.bias.copy_(torch.tensor(ob))
    return t


def _torch_grads_as_keras(t, shapes):
    """torch's parameter gradients in Keras' MHA weight layout and order."""
    e = t.embed_dim
    if t.in_proj_weight is not None:
        w = t.in_proj_weight.grad.numpy()
        wq, wk, wv = w[:e], w[e:2 * e], w[2 * e:]
    else:
        wq, wk, wv = (getattr(t, n).grad.numpy() for n in ("q_proj_weight", "k_proj_weight",
                                                           "v_proj_weight"))
    b = t.in_proj_bias.grad.numpy()
    out = [wq.T, b[:e], wk.T, b[e:2 * e], wv.T, b[2 * e:],
           t.out_proj.weight.grad.numpy().T, t.out_proj.bias.grad.numpy()]
    return [g.reshape(s) for g, s in zip(out, shapes)]


@pytest.mark.torch
@pytest.mark.parametrize("case", ["self", "cross", "attention_mask", "causal", "causal+mask"])
def test_multi_head_attention_matches_torch(case):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    b, t_len, n, h = 2, 4, 2, 3
    d = n * h
    d_kv = 5 if case == "cross" else d
    s_len = t_len if "causal" in case else 5
    mha = layers.MultiHeadAttention(n, h, dtype="float64")
    qp = kiln.placeholder((None, t_len, d), "float64")
    vp = kiln.placeholder((None, s_len, d_kv), "float64")
    mask = None
    kwargs: dict = {"return_attention_scores": True}
    if "mask" in case:
        mask = rng.uniform(size=(b, t_len, s_len)) > 0.4
        mask[..., 0] = True                           # torch gives NaN for a fully masked row
        kwargs["attention_mask"] = kiln.placeholder((None, t_len, s_len), "bool")
    if "causal" in case:
        kwargs["use_causal_mask"] = True
    out, scores = mha(qp, vp, **kwargs)
    _random_weights(mha, rng)
    weights = mha.trainable_weights
    q = rng.normal(size=(b, t_len, d))
    v = rng.normal(size=(b, s_len, d_kv))
    w_out = rng.normal(size=(b, t_len, d))
    loss = K.sum(out * K.constant(w_out))
    grads = kiln.grad(loss, weights + [qp, vp])
    feeds = [qp, vp] + ([kwargs["attention_mask"]] if mask is not None else [])
    got = kiln.function(feeds, [out, scores] + grads)(q, v, *([mask] if mask is not None else []))

    tm = _torch_mha(mha, d, d_kv)
    tq = torch.tensor(q, requires_grad=True)
    tv = torch.tensor(v, requires_grad=True)
    allowed = np.ones((b, t_len, s_len), bool) if mask is None else mask.copy()
    if "causal" in case:
        allowed &= np.tril(np.ones((t_len, s_len), bool))
    attn_mask = torch.tensor(~np.repeat(allowed, n, axis=0))   # torch: True = not allowed
    t_out, t_scores = tm(tq, tv, tv, attn_mask=attn_mask, need_weights=True,
                         average_attn_weights=False)
    (t_out * torch.tensor(w_out)).sum().backward()
    np.testing.assert_allclose(got[0], t_out.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], t_scores.detach().numpy(), rtol=1e-10, atol=1e-12)
    expected = _torch_grads_as_keras(tm, [w.shape for w in weights])
    for w, g, e in zip(weights, got[2:], expected):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-11, err_msg=w.name)
    np.testing.assert_allclose(got[-2], tq.grad.numpy(), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(got[-1], tv.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_multi_head_attention_weights_follow_keras():
    mha = layers.MultiHeadAttention(num_heads=3, key_dim=4, value_dim=5)
    q, v = kiln.Input((7, 8)), kiln.Input((6, 10))
    y = mha(q, v)
    assert y.shape == (None, 7, 8)
    assert [w.name for w in mha.weights] == [
        "query/kernel", "query/bias", "key/kernel", "key/bias", "value/kernel", "value/bias",
        "attention_output/kernel", "attention_output/bias"]
    assert [w.shape for w in mha.weights] == [(8, 3, 4), (3, 4), (10, 3, 4), (3, 4),
                                              (10, 3, 5), (3, 5), (3, 5, 8), (8,)]
    assert mha.count_params() == 8 * 12 + 12 + 10 * 12 + 12 + 10 * 15 + 15 + 15 * 8 + 8
    nobias = layers.MultiHeadAttention(2, 4, use_bias=False, output_shape=3)
    assert nobias(q, v).shape == (None, 7, 3)
    assert [w.shape for w in nobias.weights] == [(8, 2, 4), (10, 2, 4), (10, 2, 4), (2, 4, 3)]
    assert mha.compute_output_shape((None, 7, 8), (None, 6, 10)) == (None, 7, 8)


# ---- MultiHeadAttention vs a NumPy reference of Keras' semantics --------------------------------
def ref_mha(weights, q, v, k=None, mask=None):
    """Keras' MultiHeadAttention for rank-3 inputs; ``mask`` (B, T, S), True = attend."""
    qk, qb, kk, kb, vk, vb, ok, ob = weights
    k = v if k is None else k
    qq = (np.einsum("btd,dnh->btnh", q, qk) + qb) / np.sqrt(qk.shape[-1])
    kk_ = np.einsum("bsd,dnh->bsnh", k, kk) + kb
    vv = np.einsum("bsd,dnh->bsnh", v, vk) + vb
    scores = np.einsum("btnh,bsnh->bnts", qq, kk_)
    if mask is not None:
        scores = np.where(mask[:, None], scores, -1e9)
    probs = _softmax(scores)
    if mask is not None:
        probs = probs * mask[:, None]
    out = np.einsum("bnts,bsnh->btnh", probs, vv)
    return np.einsum("btnh,nhd->btd", out, ok) + ob, probs


def test_multi_head_attention_masks_combine_like_keras_and_full_mask_is_zero():
    rng = np.random.default_rng(2)
    b, t, s, d = 3, 4, 5, 6
    mha = layers.MultiHeadAttention(2, 3, dtype="float64")
    q, v, k = rng.normal(size=(b, t, d)), rng.normal(size=(b, s, d)), rng.normal(size=(b, s, 4))
    qm = rng.uniform(size=(b, t)) > 0.3
    vm = rng.uniform(size=(b, s)) > 0.3
    km = np.ones((b, s), bool)
    km[:, -1] = False
    am = rng.uniform(size=(b, t, s)) > 0.2
    vm[0] = False                                  # batch 0: every key hidden
    out, scores = mha(q, v, key=k, query_mask=qm, value_mask=vm, key_mask=km,
                      attention_mask=am, return_attention_scores=True)
    mask = qm[:, :, None] & vm[:, None, :] & km[:, None, :] & am
    want, want_scores = ref_mha(mha.get_weights(), q, v, k, mask)
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-10, atol=1e-12)
    assert np.all(scores[0] == 0)                  # fully masked rows: zero probabilities,
    np.testing.assert_allclose(out[0], np.broadcast_to(mha.get_weights()[-1], (t, d)))  # no NaN
    # int masks work like bool masks, and the mask arrays are fed, not baked in
    out2 = mha(q, v, key=k, query_mask=qm.astype("int32"), value_mask=vm, key_mask=km,
               attention_mask=am.astype("float64"))
    np.testing.assert_allclose(out2, want, rtol=1e-10, atol=1e-12)
    other = mha(q, v, key=k, query_mask=~qm, value_mask=vm, key_mask=km, attention_mask=am)
    assert not np.allclose(other, out)


def test_multi_head_attention_gradients_are_finite_with_a_fully_masked_row():
    mha = layers.MultiHeadAttention(2, 2, dtype="float64")
    x = kiln.placeholder((None, 3, 4), "float64")
    m = kiln.placeholder((None, 3, 3), "bool")
    y = mha(x, x, attention_mask=m)
    grads = kiln.grad(K.sum(K.square(y)), mha.trainable_weights + [x])
    mask = np.ones((2, 3, 3), bool)
    mask[0, 1] = False
    values = kiln.function([x, m], grads)(np.ones((2, 3, 4)), mask)
    assert all(np.all(np.isfinite(g)) for g in values)


def test_multi_head_attention_higher_rank_attends_over_all_inner_axes():
    rng = np.random.default_rng(3)
    mha = layers.MultiHeadAttention(2, 3, dtype="float64")
    q, v = rng.normal(size=(2, 2, 3, 4)), rng.normal(size=(2, 3, 2, 5))
    out, scores = mha(q, v, return_attention_scores=True)
    assert out.shape == (2, 2, 3, 4) and scores.shape == (2, 2, 2, 3, 3, 2)
    w = mha.get_weights()
    # the same as attention over the flattened positions (kernels applied per position)
    want, want_scores = ref_mha([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]],
                                q.reshape(2, 6, 4), v.reshape(2, 6, 5))
    np.testing.assert_allclose(out, want.reshape(2, 2, 3, 4), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(scores, want_scores.reshape(2, 2, 2, 3, 3, 2), rtol=1e-10)


def test_multi_head_attention_dropout_only_in_training():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 5, 4)).astype(np.float32)
    mha = layers.MultiHeadAttention(2, 2, dropout=0.5, seed=3)
    ref = layers.MultiHeadAttention(2, 2)
    a = mha(x, x)
    ref(x, x)
    ref.set_weights(mha.get_weights())
    np.testing.assert_allclose(a, ref(x, x), rtol=1e-6)
    assert not np.allclose(mha(x, x, training=True), a)
    # in a training trace, dropout draws from the trace's random key
    ph = kiln.placeholder((None, 5, 4))
    key = kiln.placeholder((2,), "int64")
    with trace(training=True, rng_key=key):
        y = mha(ph, ph)
    fn = kiln.function([ph, key], y)
    k1, k2 = np.array([1, 0], np.int64), np.array([2, 0], np.int64)
    np.testing.assert_array_equal(fn(x, k1), fn(x, k1))
    assert not np.allclose(fn(x, k1), fn(x, k2))


# ---- Attention / AdditiveAttention -------------------------------------------------------------
def ref_attention(scores, v, q_mask=None, v_mask=None, causal=False):
    keep = np.ones(scores.shape, bool)
    if v_mask is not None:
        keep &= v_mask[:, None, :]
    if causal:
        keep &= np.tril(np.ones(scores.shape[1:], bool))
    w = _softmax(scores - 1e9 * ~keep)
    out = w @ v
    if q_mask is not None:
        out = out * q_mask[:, :, None]
    return out, w


@pytest.mark.parametrize("mode", ["dot", "dot+scale", "concat", "concat+scale", "additive",
                                  "additive-noscale"])
@pytest.mark.parametrize("masks", ["none", "masks", "causal"])
def test_attention_layers_match_numpy(mode, masks):
    rng = np.random.default_rng(5)
    b, tq, tv, d = 2, 4, 4, 3
    q, v, k = (rng.normal(size=(b, tq, d)), rng.normal(size=(b, tv, 5)),
               rng.normal(size=(b, tv, d)))
    use_scale = "scale" in mode or mode == "additive"
    if mode.startswith("additive"):
        layer = layers.AdditiveAttention(use_scale=use_scale, dtype="float64")
    else:
        layer = layers.Attention(use_scale=use_scale, score_mode=mode.split("+")[0],
                                 dtype="float64")
    layer([q, v, k])
    if layer.weights:
        layer.set_weights([np.asarray(rng.uniform(0.5, 2.0, size=w.shape))
                           for w in layer.weights])
    weights = [w.numpy() for w in layer.weights]
    if mode.startswith("dot"):
        scores = q @ k.transpose(0, 2, 1) * (weights[0] if use_scale else 1.0)
    else:
        pair = q[:, :, None] + k[:, None]
        if mode.startswith("concat"):
            scale = weights[0] if use_scale else 1.0
            scores = weights[-1] * np.tanh(scale * pair).sum(-1)
        else:
            scores = (np.tanh(pair) * (weights[0] if use_scale else 1.0)).sum(-1)
    kwargs: dict = {"return_attention_scores": True}
    q_mask = v_mask = None
    if masks == "masks":
        q_mask = rng.uniform(size=(b, tq)) > 0.3
        v_mask = rng.uniform(size=(b, tv)) > 0.3
        kwargs["mask"] = [q_mask, v_mask]
    if masks == "causal":
        kwargs["use_causal_mask"] = True
    out, w = layer([q, v, k], **kwargs)
    want, want_w = ref_attention(scores, v, q_mask, v_mask, masks == "causal")
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w, want_w, rtol=1e-10, atol=1e-12)


def test_attention_layers_standard_checks():
    run_layer_test(layers.Attention, {"use_scale": True, "score_mode": "concat"},
                   input_shape=[(2, 3, 4), (2, 5, 6), (2, 5, 4)],
                   expected_output_shape=(2, 3, 6), expected_num_params=2)
    run_layer_test(layers.AdditiveAttention, {}, input_shape=[(2, 3, 4), (2, 5, 4)],
                   expected_output_shape=(2, 3, 4), expected_num_params=4)
    assert "score_mode" not in layers.AdditiveAttention().get_config()


def test_attention_symbolic_masks_and_dropout():
    q, v = kiln.Input((3, 4)), kiln.Input((5, 4))
    qm, vm = kiln.Input((3,), dtype="bool"), kiln.Input((5,), dtype="bool")
    out = layers.Attention(dropout=0.5)([q, v], mask=[qm, vm])
    model = kiln.Model([q, v, qm, vm], out)
    rng = np.random.default_rng(6)
    data = [rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)),
            np.array([[1, 1, 0]] * 2, bool), np.ones((2, 5), bool)]
    y = model.predict(data, verbose=0)
    assert y.shape == (2, 3, 4) and np.all(y[:, 2] == 0)


# ---- a transformer encoder block, trained ------------------------------------------------------
def _encoder(t=6, d=8, classes=3):
    x = kiln.Input((t, d))
    a = layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.1)(x, x)
    h = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([x, a]))
    f = layers.Dense(16, activation="relu")(h)
    h = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([h, layers.Dense(d)(f)]))
    out = layers.Dense(classes, activation="softmax")(layers.GlobalAveragePooling1D()(h))
    return kiln.Model(x, out)


def test_transformer_encoder_block_trains_and_round_trips(tmp_path):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(64, 6, 8)).astype(np.float32)
    y = (x[:, :, 0].sum(1) > 0).astype(np.int64) + (x[:, 0, 1] > 0.5)
    model = _encoder()
    model.compile(kiln.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    loss = model.fit(x, y, epochs=6, batch_size=16, verbose=0).history["loss"]
    assert loss[-1] < loss[0] * 0.9, loss
    pred = model.predict(x, verbose=0)
    config = json.loads(json.dumps(model.get_config()))
    again = kiln.Model.from_config(config)
    again.set_weights(model.get_weights())
    np.testing.assert_allclose(again.predict(x, verbose=0), pred, rtol=1e-5, atol=1e-6)
    path = tmp_path / "encoder.keras"
    model.save(path)
    loaded = kiln.models.load_model(path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), pred)


def test_multi_head_attention_config_round_trip():
    mha = layers.MultiHeadAttention(3, 4, value_dim=2, dropout=0.25, use_bias=False,
                                    output_shape=(5,), kernel_initializer="he_normal",
                                    kernel_regularizer="l2", seed=9, name="att")
    config = mha.get_config()
    text = json.dumps(config)
    again = layers.MultiHeadAttention.from_config(json.loads(text))
    assert json.dumps(again.get_config()) == text
    assert config["value_dim"] == 2 and config["output_shape"] == [5]
    q = np.random.default_rng(8).normal(size=(2, 3, 6)).astype(np.float32)
    a = mha(q, q)
    again(q, q)
    again.set_weights(mha.get_weights())
    np.testing.assert_allclose(again(q, q), a, rtol=1e-6)
    assert mha.get_build_config() == {"shapes_dict": {"query_shape": [None, 3, 6],
                                                      "value_shape": [None, 3, 6]}}
    built = layers.MultiHeadAttention.from_config(config)
    built.build_from_config(mha.get_build_config())
    assert [w.shape for w in built.weights] == [w.shape for w in mha.weights]
    assert len(mha.losses) == 4                      # l2 on the four kernels


# ---- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    ({"num_heads": 0, "key_dim": 2}, "num_heads must be a positive int"),
    ({"num_heads": 2, "key_dim": -1}, "key_dim must be a positive int"),
    ({"num_heads": 2, "key_dim": 2, "dropout": 1.0}, "dropout must be a float in"),
    ({"num_heads": 2, "key_dim": 2, "kernel_constraint": "max_nrom"},
     "invalid kernel_constraint: Unknown constraint"),
])
def test_multi_head_attention_constructor_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        layers.MultiHeadAttention(**kwargs)


def test_multi_head_attention_call_errors():
    mha = layers.MultiHeadAttention(2, 3, name="mha")
    q, v = kiln.Input((4, 8)), kiln.Input((5, 8))
    mha(q, v)
    with pytest.raises(ValueError, match=r"'mha'.*built for query inputs with last dimension 8"
                       r".*query \(None, 4, 6\)"):
        mha(kiln.Input((4, 6)), v)
    with pytest.raises(ValueError, match=r"'mha'.*attention_mask of shape \(None, 4, 6\) does "
                                         r"not broadcast to .* \(None, 4, 5\)"):
        mha(q, v, attention_mask=kiln.Input((4, 6), dtype="bool"))
    with pytest.raises(ValueError, match=r"query_mask of shape \(None, 5\).*\(None, 4\)"):
        mha(q, v, query_mask=kiln.Input((5,), dtype="bool"))
    with pytest.raises(ValueError, match=r"value and key except the last"):
        mha(q, v, key=kiln.Input((6, 8)))
    with pytest.raises(ValueError, match=r"rank >= 3"):
        layers.MultiHeadAttention(2, 3)(kiln.Input((8,)), kiln.Input((8,)))
    with pytest.raises(ValueError, match=r"attention_axes=\(2,\) is not supported"):
        layers.MultiHeadAttention(2, 3, attention_axes=2)(q, v)
    with pytest.raises(ValueError, match=r"use_causal_mask needs .*known"):
        x = kiln.Input((None, 8))
        layers.MultiHeadAttention(2, 3)(x, x, use_causal_mask=True)
    with pytest.raises(ValueError, match="call needs query and value"):
        mha(q)


def test_attention_and_einsum_dense_errors():
    q, v = kiln.Input((3, 4)), kiln.Input((5, 6))
    with pytest.raises(ValueError, match="must be called on a list of inputs"):
        layers.Attention()(q)
    with pytest.raises(ValueError, match=r"query and key must have the same last dimension.*"
                                         r"query \(None, 3, 4\), value \(None, 5, 6\)"):
        layers.Attention()([q, v])
    with pytest.raises(ValueError, match=r"value_mask of shape \(None, 4\).*\(None, 5\)"):
        layers.Attention()([q, kiln.Input((5, 4))], mask=[None, kiln.Input((4,), dtype="bool")])
    with pytest.raises(ValueError, match="score_mode must be one of"):
        layers.Attention(score_mode="add")
    with pytest.raises(ValueError, match="invalid einsum equation"):
        layers.EinsumDense("ab->b", 3)(kiln.Input((4,)))
    with pytest.raises(ValueError, match=r"bias_axes 'x'.*not in the output spec"):
        layers.EinsumDense("ab,bc->ac", 3, bias_axes="x")(kiln.Input((4,)))
    with pytest.raises(ValueError, match="output_shape .* has 2 entries"):
        layers.EinsumDense("ab,bc->ac", (3, 4))(kiln.Input((4,)))
    dense = layers.EinsumDense("abc,cd->abd", (None, 3), name="ed")
    dense(kiln.Input((2, 4)))
    assert dense(kiln.Input((5, 4))).shape == (None, 5, 3)  # b is not in the weights
    with pytest.raises(ValueError, match=r"'ed'.*built for inputs of shape \(None, 2, 4\)"):
        dense(kiln.Input((2, 5)))
