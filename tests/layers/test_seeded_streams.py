"""The random stream of a layer built without ``seed=`` (Dropout, recurrent dropout, attention
dropout) is drawn from kiln's seeded generator when the layer is constructed; it once came from
the layer's automatic name, which differs between the first and the second model of a process
("dropout", "dropout_1"), so the same seeded script run twice in one process trained
differently (Keras gives the same weights)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers

X = np.random.default_rng(0).normal(size=(48, 6)).astype(np.float32)
Y = np.arange(48) % 3


def _identical(a, b) -> bool:
    return len(a) == len(b) and all(u.tobytes() == v.tobytes() for u, v in zip(a, b))


def _mlp():
    m = kiln.Sequential([kiln.Input((6,)), layers.Dense(16, activation="relu"),
                         layers.Dropout(0.5), layers.Dense(16, activation="relu"),
                         layers.Dropout(0.3), layers.Dense(3)])
    m.compile("adam", kiln.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def _script(seed, build=_mlp, epochs=2):
    """What a user's script does: seed, build, train; run twice in the same process."""
    kiln.utils.set_random_seed(seed)
    model = build()
    model.fit(X, Y, epochs=epochs, batch_size=16, verbose=0)
    return model


def test_the_same_seeded_script_twice_in_one_process_trains_identically():
    first, second = _script(42), _script(42)
    names = [lay.name for lay in first.layers], [lay.name for lay in second.layers]
    assert names[0] != names[1]  # automatic names differ: they no longer matter
    assert _identical(first.get_weights(), second.get_weights())
    # and dropout really ran: the weights differ from a model trained without it
    kiln.utils.set_random_seed(42)
    plain = _mlp()
    for lay in plain.layers:
        if isinstance(lay, layers.Dropout):
            lay.rate = 0.0
    plain.fit(X, Y, epochs=2, batch_size=16, verbose=0)
    assert not _identical(plain.get_weights(), first.get_weights())


def test_another_seed_gives_other_streams():
    a, b = _script(1, epochs=1), _script(2, epochs=1)
    salts = [[lay.salt for lay in m.layers if isinstance(lay, layers.Dropout)] for m in (a, b)]
    assert salts[0] != salts[1]
    assert len(set(salts[0])) == 2  # two Dropout layers of one model: two streams


def test_an_explicit_seed_is_the_stream():
    kiln.utils.set_random_seed(5)
    a = layers.Dropout(0.5, seed=7)
    kiln.utils.set_random_seed(6)
    b = layers.Dropout(0.5, seed=7)
    assert a.salt == b.salt == 7 and a.get_config()["seed"] == 7 and a.seed == 7
    x = np.ones((4, 32), np.float32)
    key = kiln.placeholder((2,), "int64")
    masks = []
    for layer in (a, b):
        ph = kiln.placeholder((None, 32))
        with kiln.layers.context.trace(training=True, rng_key=key):
            out = layer(ph)
        masks.append(kiln.function([ph, key], out)(x, np.array([3, 0], np.int64)))
    np.testing.assert_array_equal(masks[0], masks[1])
    assert set(np.unique(masks[0])) == {0.0, 2.0}


def test_the_drawn_stream_is_saved_as_the_seed_and_loaded_models_continue_identically(tmp_path):
    model = _script(3, epochs=1)
    drops = [lay for lay in model.layers if isinstance(lay, layers.Dropout)]
    assert all(d.seed is None for d in drops)  # the user gave none
    assert [d.get_config()["seed"] for d in drops] == [d.salt for d in drops]
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = kiln.saving.load_model(path)
    assert [lay.salt for lay in loaded.layers if isinstance(lay, layers.Dropout)] == \
        [d.salt for d in drops]
    model.fit(X, Y, epochs=1, batch_size=16, verbose=0, shuffle=False)
    loaded.fit(X, Y, epochs=1, batch_size=16, verbose=0, shuffle=False)
    assert _identical(model.get_weights(), loaded.get_weights())


def test_a_dropout_layer_does_not_change_the_other_layers_initial_weights():
    """The streams have a generator of their own, apart from the initializers'."""
    kiln.utils.set_random_seed(9)
    a = kiln.Sequential([kiln.Input((6,)), layers.Dense(8), layers.Dense(4)])
    kiln.utils.set_random_seed(9)
    b = kiln.Sequential([kiln.Input((6,)), layers.Dense(8), layers.Dropout(0.5),
                         layers.Dense(4)])
    assert _identical(a.get_weights(), b.get_weights())


def test_a_layer_without_randomness_draws_no_stream():
    assert layers.Dropout(0.0).get_config()["seed"] is None
    assert layers.LSTM(3).get_config()["seed"] is None
    assert "seed" not in layers.Attention().get_config()
    assert layers.MultiHeadAttention(2, 2).get_config()["seed"] is None


def _rnn_model():
    m = kiln.Sequential([kiln.Input((5, 6)),
                         layers.LSTM(4, dropout=0.3, recurrent_dropout=0.3,
                                     return_sequences=True),
                         layers.GRU(4, dropout=0.3), layers.Dense(3)])
    m.compile("sgd", kiln.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def test_recurrent_dropout_streams_are_seeded_and_distinct():
    xs = np.random.default_rng(1).normal(size=(8, 5, 6)).astype(np.float32)
    ys = np.arange(8) % 3
    runs = []
    for _ in range(2):
        kiln.utils.set_random_seed(21)
        m = _rnn_model()
        m.fit(xs, ys, epochs=1, batch_size=8, verbose=0)
        runs.append(m)
    assert _identical(runs[0].get_weights(), runs[1].get_weights())
    cells = [lay.cell for lay in runs[0].layers[:2]]
    # both cells are named after their class: the name-based stream was shared
    streams = [c.get_config()["seed"] for c in cells]
    assert streams[0] != streams[1] and None not in streams


def test_attention_dropout_streams_are_seeded():
    x = np.random.default_rng(2).normal(size=(2, 4, 8)).astype(np.float32)
    outs = []
    for _ in range(2):
        kiln.utils.set_random_seed(4)
        mha = layers.MultiHeadAttention(2, 4, dropout=0.5)
        att = layers.Attention(dropout=0.5)
        outs.append((mha(x, x, training=True), att([x, x], training=True)))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("rate", [0.5])
def test_eager_dropout_after_the_same_seed_is_the_same(rate):
    x = np.ones((8, 16), np.float32)
    kiln.utils.set_random_seed(11)
    a = layers.Dropout(rate)(x, training=True)
    kiln.utils.set_random_seed(11)
    b = layers.Dropout(rate)(x, training=True)
    np.testing.assert_array_equal(a, b)
    assert 0 < np.mean(a == 0) < 1
