"""Masking (Keras' contract): a mask made by ``Embedding(mask_zero=True)``, ``Masking`` or
passed as ``mask=`` travels with the tensors (through Dense, Dropout, Activation, Sequential
and functional models, training steps included) to the layers that honour it: recurrent layers
keep their states over masked steps, so each sequence of a padded batch gives what it gives
alone; ``Bidirectional`` masks both directions; ``GlobalAveragePooling1D`` averages the
unmasked steps only.

Keras semantics (checked with Keras 3.15): on a masked step an RNN's output repeats the
previous output (zeros before the first unmasked step), or is zero with
``zero_output_for_mask=True``; with ``go_backwards`` the sequence is in processing order.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln import layers
from kiln.layers.base import get_mask
from kiln.layers.context import trace

VOCAB, EMB, U = 12, 4, 3
LENGTHS = [6, 3, 1, 5]


def _randomize(layer, rng, scale=0.5):
    layer.set_weights([rng.normal(size=w.shape) * scale for w in layer.weights])


def _sequences(rng, lengths=LENGTHS, vocab=VOCAB):
    return [rng.integers(1, vocab, size=n).astype(np.int32) for n in lengths]


def _pad(seqs, steps=None, pre=False, value=0):
    steps = steps or max(len(s) for s in seqs)
    out = np.full((len(seqs), steps) + seqs[0].shape[1:], value, seqs[0].dtype)
    for i, s in enumerate(seqs):
        if pre:
            out[i, steps - len(s):] = s
        else:
            out[i, :len(s)] = s
    return out


def _rnn(kind, **kwargs):
    return {"lstm": layers.LSTM, "gru": layers.GRU, "simple": layers.SimpleRNN}[kind](
        U, dtype="float64", **kwargs)


def _alone(model, seqs):
    """The model's outputs for each sequence on its own (a batch of one, unpadded)."""
    return [model.predict(s[None], verbose=0) for s in seqs]


def _as_list(v):
    return list(v) if isinstance(v, list | tuple) else [v]


# ---- Embedding(mask_zero=True) -> RNN in a functional model ---------------------------------
@pytest.mark.parametrize("pre", [False, True], ids=["post", "pre"])
@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru", "simple"])
def test_padded_batch_gives_each_sequence_what_it_gives_alone(kind, go_backwards, pre):
    rng = np.random.default_rng(0)
    inp = layers.Input((None,), dtype="int32")
    emb = layers.Embedding(VOCAB, EMB, mask_zero=True, dtype="float64")
    rnn = _rnn(kind, return_sequences=True, return_state=True, go_backwards=go_backwards)
    model = kiln.Model(inp, rnn(emb(inp)))
    _randomize(model, rng)
    seqs = _sequences(rng)
    ids = _pad(seqs, steps=8, pre=pre)
    mask = ids != 0
    seq_out, *states = model.predict(ids, verbose=0)
    for i, alone in enumerate(_alone(model, seqs)):
        alone_seq, *alone_states = alone
        for got, want in zip(states, alone_states):   # the final states
            np.testing.assert_allclose(got[i], want[0], rtol=1e-12, atol=1e-14)
        # the outputs of the unmasked steps, in processing order
        valid = mask[i][::-1] if go_backwards else mask[i]
        np.testing.assert_allclose(seq_out[i][valid], alone_seq[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("initial_state", [False, True])
@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("zero_output", [False, True])
def test_outputs_on_masked_steps(zero_output, go_backwards, initial_state):
    """Keras 3: a masked step repeats the previous output (before the first unmasked step:
    the initial state, zeros by default); with zero_output_for_mask=True it outputs zeros."""
    rng = np.random.default_rng(1)
    rnn = _rnn("simple", return_sequences=True, go_backwards=go_backwards,
               zero_output_for_mask=zero_output)
    x = rng.normal(size=(2, 6, EMB))
    h0 = rng.normal(size=(2, U)) if initial_state else np.zeros((2, U))
    mask = np.array([[1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 0, 1]], bool)
    xp = kiln.placeholder((None, None, EMB), "float64")
    mp = kiln.placeholder((None, None), "bool")
    hp = kiln.placeholder((None, U), "float64")
    y = rnn(xp, mask=mp, initial_state=hp)
    _randomize(rnn, rng)
    got = kiln.function([xp, mp, hp], y)(x, mask, h0)
    kernel, rk, bias = rnn.get_weights()
    for i in range(2):
        h = prev = h0[i]
        order = range(5, -1, -1) if go_backwards else range(6)
        for j, t in enumerate(order):
            if mask[i, t]:
                h = prev = np.tanh(x[i, t] @ kernel + h @ rk + bias)
                want = h
            else:
                want = np.zeros(U) if zero_output else prev
            np.testing.assert_allclose(got[i, j], want, rtol=1e-12, atol=1e-14)


def test_the_last_output_with_a_mask():
    """return_sequences=False: the output of the last step, i.e. the last unmasked step's
    output; with zero_output_for_mask=True a sequence ending in padding gives zeros (Keras 3
    does the same: its last output is the last element of the zeroed sequence)."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 5, EMB))
    mask = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], bool)
    for zero_output in (False, True):
        rnn = _rnn("gru", zero_output_for_mask=zero_output)
        xp = kiln.placeholder((None, 5, EMB), "float64")
        mp = kiln.placeholder((None, 5), "bool")
        y = rnn(xp, mask=mp)
        _randomize(rnn, np.random.default_rng(3))
        got = kiln.function([xp, mp], y)(x, mask)
        want0 = np.zeros(U) if zero_output else rnn(x[:1, :2])[0]
        np.testing.assert_allclose(got[0], want0, rtol=1e-12)
        np.testing.assert_allclose(got[1], rnn(x[1:])[0], rtol=1e-12)


# ---- the Masking layer and an explicit mask= -------------------------------------------------
def test_masking_layer_in_a_functional_model():
    rng = np.random.default_rng(4)
    seqs = [rng.normal(size=(n, EMB)) for n in LENGTHS]
    inp = layers.Input((None, EMB), dtype="float64")
    masked = layers.Masking(0.0, dtype="float64")(inp)
    assert get_mask(masked) is not None and get_mask(masked).shape == (None, None)
    lstm = _rnn("lstm", return_state=True)
    model = kiln.Model(inp, lstm(masked))
    _randomize(model, rng)
    out, h, c = model.predict(_pad(seqs, steps=7), verbose=0)
    for i, alone in enumerate(_alone(model, seqs)):
        for got, want in zip((out, h, c), alone):
            np.testing.assert_allclose(got[i], want[0], rtol=1e-12, atol=1e-14)


def test_masking_layer_values_and_mask():
    x = np.array([[[1., 2.], [-1., -1.], [0., -1.]], [[-1., -1.], [3., -1.], [-1., -1.]]])
    layer = layers.Masking(mask_value=-1.0, dtype="float64")
    xp = kiln.placeholder((None, 3, 2), "float64")
    y = layer(xp)
    got, mask = kiln.function([xp], [y, get_mask(y)])(x)
    keep = np.array([[True, False, True], [False, True, False]])
    np.testing.assert_array_equal(mask, keep)
    np.testing.assert_array_equal(got, x * keep[..., None])   # masked steps are zeroed
    assert layers.Masking.from_config(layer.get_config()).mask_value == -1.0


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_explicit_mask_argument(kind):
    rng = np.random.default_rng(5)
    seqs = [rng.normal(size=(n, EMB)) for n in LENGTHS]
    x = _pad(seqs, steps=6, value=7.0)         # the padding values must not matter
    mask = np.arange(6)[None] < np.array(LENGTHS)[:, None]
    rnn = _rnn(kind, return_state=True)
    xp = kiln.placeholder((None, None, EMB), "float64")
    mp = kiln.placeholder((None, None), "bool")
    outs = rnn(xp, mask=mp)
    _randomize(rnn, rng)
    got = kiln.function([xp, mp], outs)(x, mask)
    for i, s in enumerate(seqs):
        for g, w in zip(got, rnn(s[None])):
            np.testing.assert_allclose(g[i], w[0], rtol=1e-12, atol=1e-14)

    # the mask as a model input, passed explicitly in a functional model
    x_in = layers.Input((None, EMB), dtype="float64")
    m_in = layers.Input((None,), dtype="bool")
    model = kiln.Model([x_in, m_in], rnn(x_in, mask=m_in))
    for g, w in zip(model.predict([x, mask], verbose=0), got):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_eager_calls_take_array_masks_and_initial_states():
    """Keras allows layer(x, mask=m) and layer(x, initial_state=[...]) on arrays: they are
    fed like the inputs (one compiled function for any values)."""
    rng = np.random.default_rng(12)
    x = rng.normal(size=(2, 5, EMB))
    mask = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], bool)
    lstm = _rnn("lstm", return_state=True)
    lstm(x)
    _randomize(lstm, rng)
    out, h, c = lstm(x, mask=mask)
    alone = lstm(x[:1, :2])
    for g, w in zip((out, h, c), alone):
        np.testing.assert_allclose(g[0], w[0], rtol=1e-12)
    other = mask.copy()
    other[0] = True
    np.testing.assert_allclose(lstm(x, mask=other)[0], lstm(x)[0], rtol=1e-12)
    s0 = [rng.normal(size=(2, U)) for _ in range(2)]
    xp = kiln.placeholder((None, None, EMB), "float64")
    sps = [kiln.placeholder((None, U), "float64") for _ in range(2)]
    mp = kiln.placeholder((None, None), "bool")
    want = kiln.function([xp, mp] + sps, lstm(xp, mask=mp, initial_state=sps))(x, mask, *s0)
    for g, w in zip(lstm(x, initial_state=s0, mask=mask), want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    bi = layers.Bidirectional(_rnn("gru"))
    bi(x)
    np.testing.assert_allclose(bi(x, mask=mask)[0], bi(x[:1, :2])[0], rtol=1e-12)
    pooled = layers.GlobalAveragePooling1D(dtype="float64")(x, mask=mask)
    np.testing.assert_allclose(pooled[0], x[0, :2].mean(0), rtol=1e-12)


# ---- Bidirectional ------------------------------------------------------------------------------
@pytest.mark.parametrize("return_sequences", [False, True])
def test_bidirectional_with_a_mask(return_sequences):
    """Each sequence of a padded batch gets its states and valid steps as alone; with
    return_sequences the padded steps are zero in both directions (Keras 3 sets
    zero_output_for_mask = return_sequences on both layers)."""
    rng = np.random.default_rng(6)
    inp = layers.Input((None,), dtype="int32")
    x = layers.Embedding(VOCAB, EMB, mask_zero=True, dtype="float64")(inp)
    bi = layers.Bidirectional(_rnn("lstm", return_sequences=return_sequences,
                                   return_state=True))
    outs = bi(x)
    assert len(outs) == 5
    if return_sequences:
        assert get_mask(outs[0]) is not None
    assert all(get_mask(s) is None for s in outs[1:])
    model = kiln.Model(inp, outs)
    _randomize(model, rng)
    seqs = _sequences(rng)
    ids = _pad(seqs, steps=7)
    got = model.predict(ids, verbose=0)
    for i, (s, alone) in enumerate(zip(seqs, _alone(model, seqs))):
        for g, w in zip(got[1:], alone[1:]):   # forward h, c, backward h, c
            np.testing.assert_allclose(g[i], w[0], rtol=1e-12, atol=1e-14)
        if return_sequences:   # step t of both directions lines up: the valid steps agree
            np.testing.assert_allclose(got[0][i, :len(s)], alone[0][0], rtol=1e-12,
                                       atol=1e-14)
            # Keras forces zero_output_for_mask on both directions: zeros on padded steps
            np.testing.assert_array_equal(got[0][i, len(s):], 0.0)
        else:
            np.testing.assert_allclose(got[0][i], alone[0][0], rtol=1e-12, atol=1e-14)


# ---- masked pooling --------------------------------------------------------------------------
def test_global_average_pooling_1d_averages_the_unmasked_steps():
    rng = np.random.default_rng(7)
    inp = layers.Input((None,), dtype="int32")
    emb = layers.Embedding(VOCAB, EMB, mask_zero=True, dtype="float64")
    pooled = layers.GlobalAveragePooling1D(dtype="float64")(emb(inp))
    assert get_mask(pooled) is None
    model = kiln.Model(inp, pooled)
    _randomize(model, rng)
    seqs = _sequences(rng)
    ids = _pad(seqs, steps=9)
    table = emb.get_weights()[0]
    got = model.predict(ids, verbose=0)
    want = np.stack([table[s].mean(0) for s in seqs])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # without a mask: the plain mean over every step, padding included
    plain = kiln.Model(inp, layers.GlobalAveragePooling1D(dtype="float64")(
        layers.Embedding(VOCAB, EMB, dtype="float64", weights=[table])(inp)))
    np.testing.assert_allclose(plain.predict(ids, verbose=0), table[ids].mean(1), rtol=1e-12)


def test_global_average_pooling_1d_explicit_mask_and_keepdims():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(3, 5, 2))
    mask = np.array([[1, 0, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], bool)
    xp = kiln.placeholder((None, 5, 2), "float64")
    mp = kiln.placeholder((None, 5), "bool")
    layer = layers.GlobalAveragePooling1D(keepdims=True, dtype="float64")
    y = layer(xp, mask=mp)
    assert y.shape == (None, 1, 2)
    got = kiln.function([xp, mp], y)(x, mask)
    np.testing.assert_allclose(got[0, 0], x[0, [0, 2]].mean(0), rtol=1e-12)
    np.testing.assert_allclose(got[1, 0], x[1].mean(0), rtol=1e-12)
    np.testing.assert_array_equal(got[2, 0], 0.0)   # no unmasked step: zeros, not NaN
    with pytest.raises(ValueError, match=r"mask has shape \(None, 4\)"):
        layer(xp, mask=kiln.placeholder((None, 4), "bool"))


# ---- masks flow through other layers, Sequential, training ----------------------------------
def _stack():
    return [layers.Embedding(VOCAB, EMB, mask_zero=True, dtype="float64"),
            layers.Dense(5, activation="tanh", dtype="float64"),
            layers.Dropout(0.5, dtype="float64"),
            layers.Activation("relu", dtype="float64"),
            _rnn("gru", return_sequences=True),
            layers.Dense(2, dtype="float64"),
            _rnn("lstm")]


def test_masks_flow_through_dense_dropout_and_activation_in_a_functional_model():
    rng = np.random.default_rng(9)
    inp = layers.Input((None,), dtype="int32")
    x = inp
    for layer in _stack():
        x = layer(x)
        if not isinstance(layer, layers.LSTM):
            assert get_mask(x) is not None, layer.name
    assert get_mask(x) is None          # return_sequences=False ends the time axis
    model = kiln.Model(inp, x)
    _randomize(model, rng)
    seqs = _sequences(rng)
    got = model.predict(_pad(seqs, steps=8), verbose=0)
    for i, alone in enumerate(_alone(model, seqs)):
        np.testing.assert_allclose(got[i], alone[0], rtol=1e-12, atol=1e-14)


def test_masks_flow_through_sequential():
    rng = np.random.default_rng(10)
    model = kiln.Sequential([layers.Input((None,), dtype="int32")] + _stack())
    _randomize(model, rng)
    seqs = _sequences(rng)
    got = model.predict(_pad(seqs, steps=8, pre=True), verbose=0)
    for i, alone in enumerate(_alone(model, seqs)):
        np.testing.assert_allclose(got[i], alone[0], rtol=1e-12, atol=1e-14)


def test_masks_reach_the_training_step():
    """In a training trace (dropout on) the padding's embedding row gets no gradient, and
    fit leaves it untouched; the model still trains."""
    kiln.utils.set_random_seed(0)
    rng = np.random.default_rng(11)
    model = kiln.Sequential([layers.Input((None,), dtype="int32")] + _stack()
                            + [layers.Dense(1, dtype="float64")])
    emb = model.layers[0]
    ids_ph = kiln.placeholder((None, None), "int32")
    key = kiln.placeholder((2,), "int64")
    with trace(training=True, rng_key=key):
        out = model(ids_ph)
    (g,) = kiln.grad(K.sum(K.square(out)), [emb.embeddings])
    ids = _pad(_sequences(rng), steps=8)
    grad = kiln.function([ids_ph, key], g)(ids, np.array([1, 0], np.int64))
    np.testing.assert_array_equal(grad[0], 0.0)
    assert np.abs(grad[1:]).sum() > 0

    row0 = emb.get_weights()[0][0].copy()
    model.compile(kiln.optimizers.Adam(0.01), "mse")
    y = rng.normal(size=(len(ids), 1))
    before = model.evaluate(ids, y, verbose=0)
    model.fit(ids, y, epochs=10, verbose=0)
    np.testing.assert_array_equal(emb.get_weights()[0][0], row0)
    assert model.evaluate(ids, y, verbose=0) < before


def test_embedding_mask_zero_config():
    layer = layers.Embedding(VOCAB, EMB, mask_zero=True)
    config = layer.get_config()
    assert config["mask_zero"] is True
    assert layers.Embedding.from_config(config).mask_zero is True
    ids = kiln.placeholder((None, 4), "int32")
    mask = get_mask(layer(ids))
    assert mask is not None and mask.dtype == "bool" and mask.shape == (None, 4)
    assert get_mask(layers.Embedding(VOCAB, EMB)(ids)) is None


def test_the_loss_skips_masked_steps():
    """A masked sequence output: the loss is the mean over the unmasked steps only (Keras'
    apply_mask), whatever the targets on the padded steps."""
    rng = np.random.default_rng(13)
    model = kiln.Sequential([layers.Input((None,), dtype="int32"),
                             layers.Embedding(VOCAB, EMB, mask_zero=True, dtype="float64"),
                             _rnn("lstm", return_sequences=True),
                             layers.Dense(1, dtype="float64")])
    _randomize(model, rng)
    model.compile("sgd", "mse")
    ids = _pad(_sequences(rng), steps=7)
    mask = ids != 0
    y = rng.normal(size=ids.shape + (1,))
    noisy = y.copy()
    noisy[~mask] = 100.0
    pred = model.predict(ids, verbose=0)
    want = np.mean(((pred - y)[..., 0] ** 2)[mask])
    # (evaluate's running mean accumulates in float32)
    np.testing.assert_allclose(model.evaluate(ids, y, verbose=0), want, rtol=1e-6)
    np.testing.assert_allclose(model.evaluate(ids, noisy, verbose=0), want, rtol=1e-6)


def test_merge_layers_keep_a_step_when_every_masked_input_keeps_it():
    """Keras: Add & co. AND the inputs' masks; a residual block keeps the sequence's mask, so
    the pooling after it averages the real tokens only."""
    ids = layers.Input((4,), dtype="int32")
    e = layers.Embedding(10, 3, mask_zero=True)(ids)
    h = layers.Add()([e, layers.Dense(3)(e)])
    c = layers.Concatenate()([h, e])
    pooled = layers.GlobalAveragePooling1D()(c)
    model = kiln.Model(ids, [h, pooled])
    x = np.array([[1, 2, 0, 0], [3, 0, 0, 0]])
    seq, got = model.predict(x, verbose=0)
    emb = model.layers[1].get_weights()[0]
    want_e = emb[x]
    keep = (x != 0)[..., None]
    full = np.concatenate([seq, want_e], axis=-1)
    want = (full * keep).sum(1) / keep.sum(1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
