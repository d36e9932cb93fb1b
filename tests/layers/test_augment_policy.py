"""RandAugment (issue 44): with one op the output is exactly one of its eleven candidate
augmentations computed with the same random key; the pick is uniform; the random-layer
invariants and ``.keras`` round trips."""

from __future__ import annotations

import json

import numpy as np
from test_more_layers_saving import test_keras_file_round_trip as _round_trip

import kiln
from kiln import layers as L
from kiln.layers.augment_policy import apply_augmentation

X = (np.random.default_rng(13).random((4, 8, 8, 3)) * 255).astype("float32")


def _candidates_and_output(layer, key_value):
    x = kiln.placeholder(X.shape, "float32")
    key = kiln.placeholder((2,), "int64")
    outs = [layer._augment(x, key)] + [apply_augmentation(op, x, key) for op in layer._ops]
    values = kiln.function([x, key], outs)(X, np.array(key_value, np.int64))
    return np.asarray(values[0]), [np.asarray(v) for v in values[1:]]


def test_one_op_is_one_of_the_eleven_candidates_and_picks_spread():
    layer = L.RandAugment(num_ops=1, factor=0.4, seed=5)
    picked = set()
    for k in range(30):
        out, cands = _candidates_and_output(layer, [k, 0])
        match = [i for i, c in enumerate(cands) if np.array_equal(out, c)]
        assert match, "the output is none of the candidate augmentations"
        picked.add(match[0])
    assert len(picked) >= 6  # 30 uniform picks among 11 reach many of them


def test_zero_ops_inference_and_round_trips(tmp_path):
    np.testing.assert_array_equal(L.RandAugment(num_ops=0)(X), X)
    layer = L.RandAugment(value_range=(0, 255), num_ops=3, factor=(0.1, 0.3), seed=2)
    np.testing.assert_array_equal(layer(X, training=False), X)
    again = L.RandAugment.from_config(json.loads(json.dumps(layer.get_config())))
    assert again.get_config() == layer.get_config()
    _round_trip((L.RandAugment, {"num_ops": 1, "seed": 2}, (2, 8, 8, 3), None, None, []),
                tmp_path)
    runs = []
    for _ in range(2):
        kiln.utils.set_random_seed(8)
        runs.append(np.asarray(L.RandAugment()(X)))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert runs[0].shape == X.shape and np.all(np.isfinite(runs[0]))


def test_augmix_one_chain_of_one_step_is_a_convex_mix_of_the_input_and_one_candidate():
    layer = L.AugMix(num_chains=1, chain_depth=1, factor=0.5, seed=4)
    x = kiln.placeholder(X.shape, "float32")
    key = kiln.placeholder((2,), "int64")
    outs = [layer._augment(x, key)] + [apply_augmentation(op, x, key) for op in layer._ops]
    f = kiln.function([x, key], outs)
    weights = []
    for k in range(12):
        values = [np.asarray(v, "float64") for v in f(X, np.array([k, 0], np.int64))]
        out, cands = values[0], values[1:] + [X.astype("float64")]  # last: no augmentation
        fits = []
        for c in cands:
            d = X - c
            w = float(np.sum((out - c) * d) / max(np.sum(d * d), 1e-12))
            resid = np.abs(np.clip(w * X + (1 - w) * c, 0, 255) - out).max()
            fits.append((resid, w))
        resid, w = min(fits)
        assert resid < 1e-2 and -1e-6 <= w <= 1 + 1e-6
        weights.append(w)
    assert np.std(weights) > 0.05  # the Beta weight varies from call to call


def test_augmix_invariants_and_round_trips(tmp_path):
    layer = L.AugMix(num_chains=2, chain_depth=2, all_ops=False, seed=1)
    np.testing.assert_array_equal(layer(X, training=False), X)
    again = L.AugMix.from_config(json.loads(json.dumps(layer.get_config())))
    assert again.get_config() == layer.get_config()
    _round_trip((L.AugMix, {"num_chains": 1, "chain_depth": 1, "seed": 2}, (2, 8, 8, 3), None,
                 None, []), tmp_path)
    kiln.utils.set_random_seed(3)
    a = np.asarray(L.AugMix(num_chains=2, chain_depth=1)(X))
    kiln.utils.set_random_seed(3)
    np.testing.assert_array_equal(L.AugMix(num_chains=2, chain_depth=1)(X), a)
    assert a.min() >= 0 and a.max() <= 255
