"""``kiln.utils.set_random_seed``: the same seed gives bit-identical weights (initialization,
dropout keys and shuffling)."""

from __future__ import annotations

import numpy as np
from model_helpers import blobs

import kiln
from kiln import layers
from kiln.layers.base import reset_names


def _train(seed: int) -> tuple[list[np.ndarray], dict, kiln.Model]:
    reset_names()
    kiln.utils.set_random_seed(seed)
    x, y = blobs(200)
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(32, activation="relu"),
                             layers.Dropout(0.4), layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=3, batch_size=16, validation_split=0.1, verbose=0)
    return model.get_weights(), history.history, model


def test_same_seed_bit_identical():
    w1, h1, m1 = _train(42)
    w2, h2, m2 = _train(42)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(w1, w2))
    assert h1 == h2
    assert m1._rng_seed == m2._rng_seed and m1._rng_counter == m2._rng_counter == 3 * 12


def test_different_seed_differs():
    w1, _, _ = _train(1)
    w2, _, _ = _train(2)
    assert not all(np.array_equal(a, b) for a, b in zip(w1, w2))


def test_rng_state_can_be_restored_for_an_exact_resume():
    x, y = blobs(64)

    def model():
        reset_names()
        kiln.utils.set_random_seed(9)
        m = kiln.Sequential([kiln.Input((8,)), layers.Dense(16), layers.Dropout(0.5),
                             layers.Dense(10, activation="softmax")])
        m.compile("sgd", "sparse_categorical_crossentropy")
        return m

    full = model()
    full.fit(x, y, epochs=4, batch_size=16, shuffle=False, verbose=0)
    part = model()
    part.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0)
    state = (part.get_weights(), part.optimizer.get_weights(), part._rng_seed,
             part._rng_counter)
    resumed = model()
    resumed.set_weights(state[0])
    resumed.optimizer.set_weights(state[1])
    resumed._rng_seed, resumed._rng_counter = state[2], state[3]
    resumed.fit(x, y, epochs=4, initial_epoch=2, batch_size=16, shuffle=False, verbose=0)
    for a, b in zip(resumed.get_weights(), full.get_weights()):
        np.testing.assert_array_equal(a, b)
