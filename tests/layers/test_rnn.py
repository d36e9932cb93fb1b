"""Recurrent layers: SimpleRNN, LSTM and GRU against torch.nn.RNN/LSTM/GRU with mapped weights
(forward, return_sequences, return_state, go_backwards, initial_state, and the gradients of
the weights, the inputs and the initial states), GRU(reset_after=False) against a NumPy
reference of Keras' formula, Bidirectional (merge modes, states, weight order) against its two
layers run by hand, TimeDistributed, a Bidirectional LSTM that learns a task needing memory,
a user-written cell inside RNN, config and save/load round trips, and the error messages.

Keras semantics (checked with Keras 3.15): with ``go_backwards`` the returned sequence is in
the order processed (step 0 of the output is the last input step); ``Bidirectional`` returns
``[output, *forward_states, *backward_states]`` and re-reverses the backward sequence.

The numeric tests run on the reference backend (tests/layers/conftest.py) and, where marked,
also on the compiled CPU backend.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
import kiln.ops as K
from kiln import layers

BACKENDS = ["reference", "cpu"]
B, T, D, U = 3, 5, 4, 6  # all different, so that no transposed axis goes unseen


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _randomize(layer, rng, scale=0.5):
    layer.set_weights([rng.normal(size=w.shape) * scale for w in layer.weights])


def _make(kind, dtype="float64", **kwargs):
    if kind == "lstm":
        return layers.LSTM(U, dtype=dtype, **kwargs)
    if kind == "gru":
        return layers.GRU(U, dtype=dtype, **kwargs)
    if kind == "gru_v1":
        return layers.GRU(U, reset_after=False, dtype=dtype, **kwargs)
    return layers.SimpleRNN(U, dtype=dtype, **kwargs)


def _n_states(kind):
    return 2 if kind == "lstm" else 1


# ---- torch with mapped weights -------------------------------------------------------------
_GRU_PERM = (1, 0, 2)  # torch's gate blocks r, z, n from Keras' z, r, h (and back)


def _blocks(a, perm, axis=0):
    parts = np.split(a, 3, axis=axis)
    return np.concatenate([parts[p] for p in perm], axis=axis)


def _torch_module(kind, layer):
    torch = pytest.importorskip("torch")
    kernel, rk, bias = layer.get_weights()
    d, u = kernel.shape[0], rk.shape[0]
    if kind == "lstm":
        m = torch.nn.LSTM(d, u, batch_first=True, dtype=torch.float64)
        w_ih, w_hh, b_ih, b_hh = kernel.T, rk.T, bias, np.zeros_like(bias)
    elif kind == "gru":
        m = torch.nn.GRU(d, u, batch_first=True, dtype=torch.float64)
        w_ih, w_hh = _blocks(kernel.T, _GRU_PERM), _blocks(rk.T, _GRU_PERM)
        b_ih, b_hh = _blocks(bias[0], _GRU_PERM), _blocks(bias[1], _GRU_PERM)
    else:
        m = torch.nn.RNN(d, u, batch_first=True, nonlinearity="tanh", dtype=torch.float64)
        w_ih, w_hh, b_ih, b_hh = kernel.T, rk.T, bias, np.zeros_like(bias)
    with torch.no_grad():
        for name, value in (("weight_ih_l0", w_ih), ("weight_hh_l0", w_hh),
                            ("bias_ih_l0", b_ih), ("bias_hh_l0", b_hh)):
            getattr(m, name).copy_(torch.tensor(np.ascontiguousarray(value)))
    return m


def _torch_weight_grads(kind, m):
    """torch's parameter gradients in Keras' layout: kernel, recurrent_kernel, bias."""
    g = {n: getattr(m, n).grad.numpy() for n in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0",
                                                  "bias_hh_l0")}
    if kind == "gru":
        return [_blocks(g["weight_ih_l0"], _GRU_PERM).T, _blocks(g["weight_hh_l0"], _GRU_PERM).T,
                np.stack([_blocks(g["bias_ih_l0"], _GRU_PERM),
                          _blocks(g["bias_hh_l0"], _GRU_PERM)])]
    # bias_ih and bias_hh enter as a sum: their gradients are equal, Keras' bias gets one
    np.testing.assert_allclose(g["bias_ih_l0"], g["bias_hh_l0"], rtol=1e-12)
    return [g["weight_ih_l0"].T, g["weight_hh_l0"].T, g["bias_ih_l0"]]


def _torch_run(kind, m, x, states0, go_backwards):
    """(sequence in processing order, final states) from torch, with autograd on ``x`` and
    the initial states."""
    torch = pytest.importorskip("torch")
    tx = torch.tensor(x, requires_grad=True)
    tstates = [torch.tensor(s[None], requires_grad=True) for s in states0]
    inp = torch.flip(tx, [1]) if go_backwards else tx
    if kind == "lstm":
        seq, (h, c) = m(inp, (tstates[0], tstates[1]))
        final = [h[0], c[0]]
    else:
        seq, h = m(inp, tstates[0])
        final = [h[0]]
    return tx, tstates, seq, final


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru", "simple"])
def test_forward_and_gradients_match_torch(kind, go_backwards, backend):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    n = _n_states(kind)
    layer = _make(kind, return_sequences=True, return_state=True, go_backwards=go_backwards)
    xp = kiln.placeholder((None, None, D), "float64")
    sps = [kiln.placeholder((None, U), "float64") for _ in range(n)]
    seq, *states = layer(xp, initial_state=sps)
    assert seq.shape == (None, None, U) and [s.shape for s in states] == [(None, U)] * n
    _randomize(layer, rng)
    x = rng.normal(size=(B, T, D))
    s0 = [rng.normal(size=(B, U)) * 0.5 for _ in range(n)]
    w_seq = rng.normal(size=(B, T, U))
    w_states = [rng.normal(size=(B, U)) for _ in range(n)]
    # the loss weights are fed (batch None), so every gradient keeps the graph's shapes
    wps = [kiln.placeholder((None,) + w.shape[1:], "float64") for w in [w_seq] + w_states]
    loss = K.sum(seq * wps[0])
    for s, w in zip(states, wps[1:]):
        loss = loss + K.sum(s * w)
    weights = layer.trainable_weights
    assert [w.name.split("/")[-1] for w in weights] == ["kernel", "recurrent_kernel", "bias"]
    grads = kiln.grad(loss, weights + [xp] + sps)
    got = kiln.function([xp] + sps + wps, [seq] + states + grads, backend=backend)(
        x, *s0, w_seq, *w_states)

    m = _torch_module(kind, layer)
    tx, ts, t_seq, t_final = _torch_run(kind, m, x, s0, go_backwards)
    t_loss = (t_seq * torch.tensor(w_seq)).sum()
    for s, w in zip(t_final, w_states):
        t_loss = t_loss + (s * torch.tensor(w)).sum()
    t_loss.backward()
    want = ([t_seq.detach().numpy()] + [s.detach().numpy() for s in t_final]
            + _torch_weight_grads(kind, m) + [tx.grad.numpy()] + [s.grad.numpy()[0] for s in ts])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("kind", ["lstm", "gru", "simple"])
def test_input_gradient_with_a_cotangent_of_static_batch(kind):
    """loss = sum(seq * constant): the cotangent has a static batch size while the input's
    is unknown; the gradient of the input keeps the input's type."""
    rng = np.random.default_rng(13)
    layer = _make(kind, return_sequences=True)
    xp = kiln.placeholder((None, T, D), "float64")
    seq = layer(xp)
    w_seq = rng.normal(size=(B, T, U))
    (gx,) = kiln.grad(K.sum(seq * K.constant(w_seq)), [xp])
    x = rng.normal(size=(B, T, D))
    got = kiln.function([xp], gx)(x)
    wp = kiln.placeholder((None, T, U), "float64")
    (gx2,) = kiln.grad(K.sum(seq * wp), [xp])
    np.testing.assert_allclose(got, kiln.function([xp, wp], gx2)(x, w_seq), rtol=1e-12)


@pytest.mark.parametrize("kind", ["lstm", "gru", "simple"])
def test_float32_matches_torch_to_1e5(kind):
    """The default dtype: float32 outputs and weight gradients within 1e-5 of torch (float64)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    layer = _make(kind, dtype="float32", return_sequences=True)
    xp = kiln.placeholder((None, T, D))
    seq = layer(xp)
    _randomize(layer, rng)
    x = rng.normal(size=(B, T, D)).astype(np.float32)
    w_seq = rng.normal(size=(B, T, U)).astype(np.float32)
    grads = kiln.grad(K.sum(seq * K.constant(w_seq)), layer.trainable_weights)
    got = kiln.function([xp], [seq] + grads)(x)
    assert all(g.dtype == np.float32 for g in got)

    m = _torch_module(kind, layer)
    s0 = [np.zeros((B, U))] * _n_states(kind)
    _, _, t_seq, _ = _torch_run(kind, m, x.astype(np.float64), s0, False)
    (t_seq * torch.tensor(w_seq.astype(np.float64))).sum().backward()
    want = [t_seq.detach().numpy()] + _torch_weight_grads(kind, m)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru", "gru_v1", "simple"])
def test_last_output_is_the_last_step_processed(kind, go_backwards):
    """return_sequences=False gives the sequence's last element (in processing order), which
    is the final state h."""
    rng = np.random.default_rng(2)
    seq_layer = _make(kind, return_sequences=True, return_state=True, go_backwards=go_backwards)
    x = rng.normal(size=(B, T, D))
    seq_layer(x)
    _randomize(seq_layer, rng)
    last_layer = _make(kind, go_backwards=go_backwards)
    last_layer(x)
    last_layer.set_weights(seq_layer.get_weights())
    seq, h, *_ = seq_layer(x)
    last = last_layer(x)
    assert last.shape == (B, U)
    np.testing.assert_allclose(last, seq[:, -1], rtol=1e-12)
    np.testing.assert_allclose(h, seq[:, -1], rtol=1e-12)


@pytest.mark.parametrize("kind", ["lstm", "gru", "gru_v1", "simple"])
def test_a_compiled_function_sees_new_weights(kind):
    """The compiled CPU program reads the weights in place: set_weights after the first call
    changes the result (the orthogonal recurrent kernel of shape (units, gates * units) once
    came out Fortran-ordered and was read through a stale copy)."""
    rng = np.random.default_rng(15)
    layer = _make(kind, dtype="float32")
    xp = kiln.placeholder((None, None, D))
    y = layer(xp)
    assert all(w.value.flags.c_contiguous for w in layer.weights)
    fn = kiln.function([xp], y, backend="cpu")
    x = rng.normal(size=(B, T, D)).astype(np.float32)
    fn(x)
    for k in range(len(layer.weights)):
        weights = layer.get_weights()
        weights[k] = rng.normal(size=weights[k].shape).astype(np.float32)
        layer.set_weights(weights)
        fresh = kiln.function([xp], y, backend="cpu")(x)
        np.testing.assert_allclose(fn(x), fresh, rtol=1e-6, err_msg=layer.weights[k].name)


def test_fit_updates_the_recurrent_kernel_on_the_cpu_backend(monkeypatch):
    monkeypatch.setenv("KILN_BACKEND", "cpu")
    rng = np.random.default_rng(16)
    model = kiln.Sequential([layers.Input((T, 2)), layers.LSTM(U), layers.Dense(1)])
    model.compile("adam", "mse")
    before = [w.numpy() for w in model.layers[0].weights]
    model.fit(rng.normal(size=(32, T, 2)), rng.normal(size=(32, 1)), epochs=1, verbose=0)
    for w, b in zip(model.layers[0].weights, before):
        assert not np.allclose(w.numpy(), b), w.name


# ---- GRU(reset_after=False): NumPy reference of Keras' formula -----------------------------
def _gru_v1_np(x, h, kernel, rk, bias, go_backwards=False):
    u = rk.shape[0]
    wz, wr, wh = kernel[:, :u], kernel[:, u:2 * u], kernel[:, 2 * u:]
    uz, ur, uh = rk[:, :u], rk[:, u:2 * u], rk[:, 2 * u:]
    bz, br, bh = bias[:u], bias[u:2 * u], bias[2 * u:]
    steps = range(x.shape[1] - 1, -1, -1) if go_backwards else range(x.shape[1])
    outs = []
    for t in steps:
        xt = x[:, t]
        z = _sigmoid(xt @ wz + bz + h @ uz)
        r = _sigmoid(xt @ wr + br + h @ ur)
        hh = np.tanh(xt @ wh + bh + (r * h) @ uh)
        h = z * h + (1 - z) * hh
        outs.append(h)
    return np.stack(outs, 1), h




@pytest.mark.parametrize("go_backwards", [False, True])
def test_gru_reset_before_matches_keras_formula(go_backwards):
    rng = np.random.default_rng(3)
    layer = _make("gru_v1", return_sequences=True, return_state=True, go_backwards=go_backwards)
    xp = kiln.placeholder((None, None, D), "float64")
    hp = kiln.placeholder((None, U), "float64")
    seq, h = layer(xp, initial_state=hp)
    _randomize(layer, rng)
    kernel, rk, bias = layer.get_weights()
    assert bias.shape == (3 * U,)
    x = rng.normal(size=(B, T, D))
    h0 = rng.normal(size=(B, U)) * 0.5
    w_seq = rng.normal(size=(B, T, U))
    grads = kiln.grad(K.sum(seq * K.constant(w_seq)), layer.trainable_weights)
    got_seq, got_h, *got_grads = kiln.function([xp, hp], [seq, h] + grads)(x, h0)
    want_seq, want_h = _gru_v1_np(x, h0, kernel, rk, bias, go_backwards)
    np.testing.assert_allclose(got_seq, want_seq, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_h, want_h, rtol=1e-10, atol=1e-12)
    params = [kernel, rk, bias]
    for g, p in zip(got_grads, params):
        def loss():
            return float(np.sum(_gru_v1_np(x, h0, *params, go_backwards)[0] * w_seq))
        np.testing.assert_allclose(g, numeric_grad(loss, p), rtol=1e-6, atol=1e-8)


# ---- initial_state, return_state, go_backwards in models -----------------------------------
def test_initial_state_and_return_state_in_a_functional_model():
    rng = np.random.default_rng(4)
    x_in = layers.Input((None, D))
    h_in, c_in = layers.Input((U,)), layers.Input((U,))
    lstm = layers.LSTM(U, return_sequences=True, return_state=True)
    seq, h, c = lstm(x_in, initial_state=[h_in, c_in])
    model = kiln.Model([x_in, h_in, c_in], [seq, h, c])
    _randomize(lstm, rng)
    x = rng.normal(size=(B, T, D)).astype(np.float32)
    h0, c0 = (rng.normal(size=(B, U)).astype(np.float32) for _ in range(2))
    got = model.predict([x, h0, c0], verbose=0)
    xp = kiln.placeholder((None, None, D))
    hp, cp = kiln.placeholder((None, U)), kiln.placeholder((None, U))
    direct = kiln.function([xp, hp, cp], lstm(xp, initial_state=[hp, cp]))(x, h0, c0)
    for g, w in zip(got, direct):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    # the states differ from the zero-state run, and zero states equal no initial state
    zero = model.predict([x, np.zeros_like(h0), np.zeros_like(c0)], verbose=0)
    assert not np.allclose(zero[0], got[0])
    for g, w in zip(zero, lstm(x)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru", "simple"])
def test_go_backwards_equals_the_forward_layer_on_the_reversed_sequence(kind):
    """Keras' semantics: go_backwards runs over x[:, ::-1], and the returned sequence is in
    that (processing) order, not re-reversed."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(B, T, D))
    fwd = _make(kind, return_sequences=True, return_state=True)
    bwd = _make(kind, return_sequences=True, return_state=True, go_backwards=True)
    fwd(x)
    bwd(x)
    _randomize(fwd, rng)
    bwd.set_weights(fwd.get_weights())
    got = bwd(x)
    want = fwd(x[:, ::-1].copy())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert not np.allclose(got[0], fwd(x)[0])


# ---- Bidirectional -------------------------------------------------------------------------
def _merge(mode, f, b):
    return {"concat": lambda: np.concatenate([f, b], -1), "sum": lambda: f + b,
            "mul": lambda: f * b, "ave": lambda: (f + b) / 2, None: lambda: [f, b]}[mode]()


@pytest.mark.parametrize("return_sequences", [False, True])
@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul", "ave", None])
def test_bidirectional_merge_modes_match_the_two_layers_by_hand(merge_mode, return_sequences):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(B, T, D))
    bi = layers.Bidirectional(layers.LSTM(U, return_sequences=return_sequences,
                                          dtype="float64"), merge_mode=merge_mode)
    out = bi(x)
    _randomize(bi, rng)
    out = bi(x)
    fwd = layers.LSTM(U, return_sequences=return_sequences, dtype="float64")
    bwd = layers.LSTM(U, return_sequences=return_sequences, go_backwards=True, dtype="float64")
    fwd(x)
    bwd(x)
    n = len(bi.forward_layer.weights)
    fwd.set_weights(bi.get_weights()[:n])
    bwd.set_weights(bi.get_weights()[n:])
    f, b = fwd(x), bwd(x)
    if return_sequences:
        b = b[:, ::-1]  # Bidirectional re-reverses the backward sequence: step t lines up
    want = _merge(merge_mode, f, b)
    if merge_mode is None:
        assert isinstance(out, list) and len(out) == 2
        for g, w in zip(out, want):
            np.testing.assert_allclose(g, w, rtol=1e-12)
    else:
        width = 2 * U if merge_mode == "concat" else U
        assert out.shape == ((B, T, width) if return_sequences else (B, width))
        np.testing.assert_allclose(out, want, rtol=1e-12)


def test_bidirectional_return_state_and_weight_order():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(B, T, D))
    bi = layers.Bidirectional(layers.GRU(U, return_state=True, dtype="float64"),
                              merge_mode="sum")
    xp = kiln.placeholder((None, None, D), "float64")
    outs = bi(xp)
    assert len(outs) == 3 and [o.shape for o in outs] == [(None, U)] * 3
    _randomize(bi, rng)
    # Keras' layout: the forward layer's weights, then the backward layer's
    assert bi.weights == bi.forward_layer.weights + bi.backward_layer.weights
    assert bi.forward_layer.name.startswith("forward_")
    assert bi.backward_layer.name.startswith("backward_")
    assert not bi.forward_layer.go_backwards and bi.backward_layer.go_backwards
    got = kiln.function([xp], outs)(x)
    f_out, f_h = bi.forward_layer(x)
    b_out, b_h = bi.backward_layer(x)
    np.testing.assert_allclose(got[0], f_out + b_out, rtol=1e-12)
    np.testing.assert_allclose(got[1], f_h, rtol=1e-12)   # forward states first
    np.testing.assert_allclose(got[2], b_h, rtol=1e-12)   # then the backward ones
    # initial_state: the forward states then the backward ones
    s = [rng.normal(size=(B, U)) for _ in range(2)]
    sps = [kiln.placeholder((None, U), "float64") for _ in range(2)]
    got = kiln.function([xp] + sps, bi(xp, initial_state=sps))(x, *s)
    fp = kiln.placeholder((None, None, D), "float64")
    hp = kiln.placeholder((None, U), "float64")
    f = kiln.function([fp, hp], bi.forward_layer(fp, initial_state=hp))(x, s[0])
    b = kiln.function([fp, hp], bi.backward_layer(fp, initial_state=hp))(x, s[1])
    np.testing.assert_allclose(got[0], f[0] + b[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], f[1], rtol=1e-12)
    np.testing.assert_allclose(got[2], b[1], rtol=1e-12)


def test_bidirectional_with_an_explicit_backward_layer():
    fwd = layers.SimpleRNN(U, return_sequences=True)
    bwd = layers.LSTM(U + 1, return_sequences=True, go_backwards=True)
    bi = layers.Bidirectional(fwd, backward_layer=bwd)
    x = np.random.default_rng(8).normal(size=(B, T, D)).astype(np.float32)
    assert bi(x).shape == (B, T, 2 * U + 1)
    assert len(bi.weights) == 6
    with pytest.raises(ValueError, match="go_backwards"):
        layers.Bidirectional(layers.LSTM(U), backward_layer=layers.LSTM(U))
    with pytest.raises(ValueError, match="return_sequences"):
        layers.Bidirectional(layers.LSTM(U), backward_layer=layers.LSTM(
            U, go_backwards=True, return_sequences=True))


# ---- TimeDistributed -----------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("steps", [T, None])
def test_time_distributed_dense_equals_dense_per_step(steps, backend):
    rng = np.random.default_rng(9)
    td = layers.TimeDistributed(layers.Dense(U, activation="tanh", dtype="float64"),
                                dtype="float64")
    xp = kiln.placeholder((None, steps, D), "float64")
    y = td(xp)
    assert y.shape == (None, steps, U)
    _randomize(td, rng)
    w_out = rng.normal(size=(B, T, U))
    loss = K.sum(y * K.constant(w_out))
    grads = kiln.grad(loss, td.trainable_weights + [xp])
    x = rng.normal(size=(B, T, D))
    got = kiln.function([xp], [y] + grads, backend=backend)(x)
    kernel, bias = td.layer.get_weights()
    z = np.tanh(x @ kernel + bias)
    np.testing.assert_allclose(got[0], z, rtol=1e-12)
    dz = w_out * (1 - z * z)
    np.testing.assert_allclose(got[1], np.einsum("btd,btu->du", x, dz), rtol=1e-10)
    np.testing.assert_allclose(got[2], dz.sum((0, 1)), rtol=1e-10)
    np.testing.assert_allclose(got[3], dz @ kernel.T, rtol=1e-10)
    if steps is None:  # another length, the same compiled function
        x7 = rng.normal(size=(2, 7, D))
        fn = kiln.function([xp], y, backend=backend)
        np.testing.assert_allclose(fn(x7), np.tanh(x7 @ kernel + bias), rtol=1e-12)


@pytest.mark.parametrize("unknown_inner", ["BatchNormalization", "activity_regularizer"])
def test_time_distributed_unknown_steps_with_updates_or_losses_trains(unknown_inner):
    inner = layers.BatchNormalization() if unknown_inner == "BatchNormalization" else \
        layers.Dense(3, activity_regularizer="l2")
    model = kiln.Sequential([layers.Input((None, D)), layers.TimeDistributed(inner),
                             layers.Dense(1)])
    model.compile("sgd", "mse")
    rng = np.random.default_rng(14)
    model.fit(rng.normal(size=(8, T, D)), rng.normal(size=(8, T, 1)), epochs=1, verbose=0)


def test_time_distributed_dropout_draws_a_mask_per_step():
    from kiln.layers.context import trace
    xp = kiln.placeholder((None, None, 64))
    key = kiln.placeholder((2,), "int64")
    with trace(training=True, rng_key=key):
        y = layers.TimeDistributed(layers.Dropout(0.5))(xp)
    out = kiln.function([xp, key], y)(np.ones((2, 6, 64), np.float32), np.array([3, 0]))
    assert not all(np.array_equal(out[:, 0], out[:, t]) for t in range(1, 6))


# ---- dropout -------------------------------------------------------------------------------
def test_dropout_masks_are_drawn_once_per_sequence():
    """As Keras: one input mask and one recurrent mask per sequence, the same at every step;
    none in inference."""
    x = np.ones((2, 6, 8))
    rnn = layers.SimpleRNN(8, activation="linear", dropout=0.5, return_sequences=True,
                           dtype="float64")
    rnn(x)
    rnn.set_weights([np.eye(8), np.zeros((8, 8)), np.zeros(8)])
    y = rnn(x, training=True)
    assert set(np.unique(y)) == {0.0, 2.0}
    assert all(np.array_equal(y[:, 0], y[:, t]) for t in range(6))
    np.testing.assert_array_equal(rnn(x), x)
    # recurrent dropout only: h_t = 1 + m * h_{t-1} with m in {0, 2}, the same m every step
    rnn = layers.SimpleRNN(8, activation="linear", recurrent_dropout=0.5, return_sequences=True,
                           dtype="float64")
    rnn(x)
    rnn.set_weights([np.eye(8), np.eye(8), np.zeros(8)])
    y = rnn(x, training=True)
    kept = np.array([2.0 ** (t + 1) - 1 for t in range(6)])
    for b in range(2):
        for j in range(8):
            assert (np.array_equal(y[b, :, j], np.ones(6))
                    or np.array_equal(y[b, :, j], kept)), y[b, :, j]
    assert {y[b, -1, j] for b in range(2) for j in range(8)} == {1.0, kept[-1]}


# ---- learning ------------------------------------------------------------------------------
def test_bidirectional_lstm_learns_a_task_that_needs_memory():
    """The label is the FIRST of 24 random tokens: a model without memory across the sequence
    is at chance (1/8); the backward LSTM sees that token last."""
    kiln.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    steps, vocab = 24, 8
    x = rng.integers(0, vocab, size=(1000, steps)).astype(np.int32)
    x_test = rng.integers(0, vocab, size=(500, steps)).astype(np.int32)
    model = kiln.Sequential([layers.Input((steps,), dtype="int32"), layers.Embedding(vocab, 8),
                             layers.Bidirectional(layers.LSTM(16)),
                             layers.Dense(vocab, activation="softmax")])
    model.compile(kiln.optimizers.Adam(0.01), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    history = model.fit(x, x[:, 0], batch_size=32, epochs=5, verbose=0)
    assert history.history["accuracy"][0] < 0.9
    _, accuracy = model.evaluate(x_test, x_test[:, 0], verbose=0)
    assert accuracy > 0.95


# ---- a user-written cell -------------------------------------------------------------------
class MinimalRNNCell(layers.Layer):
    """Keras' documented example of a custom cell."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight("kernel", (input_shape[-1], self.units), "glorot_uniform")
        self.recurrent_kernel = self.add_weight("recurrent_kernel", (self.units, self.units),
                                                "orthogonal")
        self.built = True

    def call(self, inputs, states):
        prev = states[0]
        out = K.tanh(K.matmul(inputs, self.kernel) + K.matmul(prev, self.recurrent_kernel))
        return out, [out]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def _minimal_np(x, kernel, rk):
    h = np.zeros((x.shape[0], rk.shape[0]), x.dtype)
    outs = []
    for t in range(x.shape[1]):
        h = np.tanh(x[:, t] @ kernel + h @ rk)
        outs.append(h)
    return np.stack(outs, 1)


def test_user_cell_matches_a_numpy_loop_and_trains():
    kiln.utils.set_random_seed(1)
    rng = np.random.default_rng(10)
    x = rng.normal(size=(64, 6, 2)).astype(np.float32)
    rnn = layers.RNN(MinimalRNNCell(8), return_sequences=True)
    seq = rnn(x)
    assert seq.shape == (64, 6, 8)
    assert [w.name.split("/")[-1] for w in rnn.weights] == ["kernel", "recurrent_kernel"]
    np.testing.assert_allclose(seq, _minimal_np(x, *rnn.get_weights()), rtol=1e-5, atol=1e-6)

    # a target that needs memory: the running sum of the first feature at the last step
    y = x[:, :, :1].sum(1) * 0.3
    inp = layers.Input((6, 2))
    model = kiln.Model(inp, layers.Dense(1)(layers.RNN(MinimalRNNCell(8))(inp)))
    model.compile(kiln.optimizers.Adam(0.02), "mse")
    loss = model.fit(x, y, batch_size=16, epochs=15, verbose=0).history["loss"]
    assert loss[-1] < 0.3 * loss[0]


# ---- config and saving ---------------------------------------------------------------------
CONFIG_CASES = {
    "lstm": lambda: layers.LSTM(U, return_sequences=True, go_backwards=True,
                                recurrent_activation="hard_sigmoid", unit_forget_bias=False,
                                dropout=0.1, recurrent_dropout=0.2, seed=3),
    "gru": lambda: layers.GRU(U, return_state=True, reset_after=False, activation="relu"),
    "simple": lambda: layers.SimpleRNN(U, use_bias=False, zero_output_for_mask=True),
    "rnn_cell": lambda: layers.RNN(layers.GRUCell(U), return_sequences=True),
    "rnn_user_cell": lambda: layers.RNN(MinimalRNNCell(U)),
    "bidirectional": lambda: layers.Bidirectional(layers.GRU(U, return_sequences=True),
                                                  merge_mode="ave"),
    "time_distributed": lambda: layers.TimeDistributed(layers.Dense(U, activation="relu")),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_config_round_trip(case):
    rng = np.random.default_rng(11)
    layer = CONFIG_CASES[case]()
    x = rng.normal(size=(B, T, D)).astype(np.float32)
    layer(x)
    _randomize(layer, rng)
    config = json.loads(json.dumps(layer.get_config()))
    clone = type(layer).from_config(config, custom_objects={"MinimalRNNCell": MinimalRNNCell}) \
        if case in ("rnn_cell", "rnn_user_cell", "bidirectional", "time_distributed") \
        else type(layer).from_config(config)
    assert json.loads(json.dumps(clone.get_config())) == config
    clone(x)
    clone.set_weights(layer.get_weights())
    for a, b in zip(_as_list(layer(x)), _as_list(clone(x))):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def _as_list(v):
    return list(v) if isinstance(v, list | tuple) else [v]


def test_config_has_keras_layout():
    config = layers.LSTM(U, name="enc").get_config()
    for key in ("units", "activation", "recurrent_activation", "return_sequences",
                "return_state", "go_backwards", "stateful", "unroll", "unit_forget_bias",
                "dropout", "recurrent_dropout", "zero_output_for_mask"):
        assert key in config
    assert "cell" not in config and config["name"] == "enc"
    assert layers.GRU(U).get_config()["reset_after"] is True
    bi = layers.Bidirectional(layers.LSTM(U, name="enc")).get_config()
    assert bi["layer"]["class_name"] == "LSTM" and bi["layer"]["config"]["name"] == "enc"
    assert bi["backward_layer"]["config"]["go_backwards"] is True
    rnn = layers.RNN(layers.LSTMCell(U)).get_config()
    assert rnn["cell"]["class_name"] == "LSTMCell" and rnn["cell"]["config"]["units"] == U


@pytest.mark.parametrize("loader", ["kiln.models.load_model", "kiln.saving.load_model"])
def test_model_save_and_load_gives_the_same_predictions(tmp_path, loader):
    rng = np.random.default_rng(12)
    inp = layers.Input((None,), dtype="int32")
    x = layers.Embedding(10, 4, mask_zero=True)(inp)
    x = layers.Bidirectional(layers.LSTM(U, return_sequences=True))(x)
    x = layers.TimeDistributed(layers.Dense(5, activation="tanh"))(x)
    x = layers.GRU(U, return_sequences=True, go_backwards=True)(x)
    x = layers.RNN(MinimalRNNCell(U))(x)
    out = layers.Dense(2, activation="softmax")(layers.SimpleRNN(U)(layers.RepeatVector(3)(x)))
    model = kiln.Model(inp, out)
    _randomize(model, rng)
    ids = rng.integers(1, 10, size=(4, 7)).astype(np.int32)
    ids[0, 4:] = 0
    before = model.predict(ids, verbose=0)
    path = str(tmp_path / "rnn.keras")
    model.save(path)
    load = kiln.models.load_model if loader == "kiln.models.load_model" else \
        kiln.saving.load_model
    loaded = load(path, custom_objects={"MinimalRNNCell": MinimalRNNCell})
    np.testing.assert_allclose(loaded.predict(ids, verbose=0), before, rtol=1e-6)
    assert [w.shape for w in loaded.weights] == [w.shape for w in model.weights]


# ---- errors --------------------------------------------------------------------------------
def test_wrong_feature_size_for_a_built_layer_names_the_layer_and_shapes():
    lstm = layers.LSTM(U, name="enc")
    lstm(kiln.placeholder((None, T, D)))
    with pytest.raises(ValueError, match=r"'enc'.*4 features.*\(None, 5, 7\)"):
        lstm(kiln.placeholder((None, T, 7)))
    bi = layers.Bidirectional(layers.GRU(U), name="bi")
    bi(kiln.placeholder((None, T, D)))
    with pytest.raises(ValueError, match=r"4 features.*\(None, 5, 6\)"):
        bi(kiln.placeholder((None, T, 6)))


@pytest.mark.parametrize("shape", [(None, T), (None, T, D, 1)])
def test_inputs_of_the_wrong_rank(shape):
    received = re.escape("(" + ", ".join(str(d) for d in shape) + ")")
    with pytest.raises(ValueError, match=r"'enc' \(LSTM\).*\(batch, steps, features\), "
                                         rf"received {received}"):
        layers.LSTM(U, name="enc")(kiln.placeholder(shape))


def test_unknown_feature_size():
    with pytest.raises(ValueError, match=r"known feature dimension"):
        layers.GRU(U)(kiln.placeholder((None, T, None)))


def test_a_mask_of_the_wrong_shape():
    lstm = layers.LSTM(U, name="enc")
    x = kiln.placeholder((None, T, D))
    with pytest.raises(ValueError, match=r"'enc' \(LSTM\).*mask has shape \(None, 4\).*"
                                         r"\(None, 5\)"):
        lstm(x, mask=kiln.placeholder((None, T - 1), "bool"))
    with pytest.raises(ValueError, match=r"mask has shape \(None, 5, 1\)"):
        lstm(x, mask=kiln.placeholder((None, T, 1), "bool"))


def test_initial_state_of_the_wrong_count_or_shape():
    x = kiln.placeholder((None, T, D))
    lstm = layers.LSTM(U, name="enc")
    with pytest.raises(ValueError, match=r"'enc' \(LSTM\) expects 2 initial state\(s\), "
                                         r"received 1"):
        lstm(x, initial_state=[kiln.placeholder((None, U))])
    with pytest.raises(ValueError, match=r"'enc' \(LSTM\): initial state 1 must have shape "
                                         rf"\(batch, {U}\), received \(None, {U + 1}\)"):
        lstm(x, initial_state=[kiln.placeholder((None, U)), kiln.placeholder((None, U + 1))])
    with pytest.raises(ValueError, match=rf"initial state 0 must have shape \(batch, {U}\), "
                                         rf"received \({U},\)"):
        layers.GRU(U, name="g")(x, initial_state=kiln.placeholder((U,)))
    with pytest.raises(ValueError, match=r"Bidirectional.*forward then the backward"):
        layers.Bidirectional(layers.GRU(U))(x, initial_state=[kiln.placeholder((None, U))])


def test_unsupported_arguments():
    with pytest.raises(ValueError, match=r"LSTM: stateful=True is not supported"):
        layers.LSTM(U, stateful=True)
    with pytest.raises(ValueError, match=r"stateful=True"):
        layers.RNN(layers.LSTMCell(U), stateful=True)
    with pytest.raises(ValueError, match=r"units must be a positive int"):
        layers.GRU(0)
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\)"):
        layers.LSTM(U, dropout=1.0)
    # a list of cells is Keras' StackedRNNCells (issue 44), no longer refused
    assert isinstance(layers.RNN([layers.LSTMCell(U), layers.LSTMCell(U)]).cell,
                      layers.StackedRNNCells)
    with pytest.raises(ValueError, match=r"cell must be a layer with a `state_size`"):
        layers.RNN(layers.Dense(U))
    with pytest.raises(ValueError, match=r"Bidirectional: layer must be a recurrent layer"):
        layers.Bidirectional(layers.Dense(U))
    with pytest.raises(ValueError, match=r"merge_mode must be one of"):
        layers.Bidirectional(layers.LSTM(U), merge_mode="max")
    with pytest.raises(ValueError, match=r"'td' \(TimeDistributed\).*rank >= 3.*\(None, 4\)"):
        layers.TimeDistributed(layers.Dense(U), name="td")(kiln.placeholder((None, D)))
