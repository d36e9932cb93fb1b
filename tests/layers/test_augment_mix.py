"""MixUp and CutMix (issue 44): the Beta sampler's moments (closed form), the mixing read
back from one-hot labels (each image is ``w x_i + (1 - w) x_j`` for MixUp, a box of ``x_j``
pasted on ``x_i`` for CutMix), the random-layer invariants and ``.keras`` round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_more_layers_saving import test_keras_file_round_trip as _round_trip

import kiln
from kiln import layers as L
from kiln.layers.augment_mix import beta

RNG = np.random.default_rng(9)
X = RNG.random((6, 5, 4, 3)).astype("float32")
Y = np.eye(6, dtype="float32")


@pytest.mark.parametrize("a", [0.2, 1.0, 3.0])
def test_beta_draws_have_the_beta_moments(a):
    key = kiln.placeholder((2,), "int64")
    like = kiln.placeholder((None, 1), "float32")
    f = kiln.function([key, like], [beta(key, like, 5, a)])
    s = np.asarray(f(np.array([1, 0]), np.zeros((100000, 1), "float32"))[0]).ravel()
    assert s.min() >= 0 and s.max() <= 1
    assert abs(s.mean() - 0.5) < 0.005
    assert abs(s.var() - 1 / (4 * (2 * a + 1))) < 0.005


def _partner(labels, i):
    row = labels[i]
    others = [j for j in np.nonzero(row > 1e-6)[0] if j != i]
    return (others[0] if others else i), row[i]


def test_mixup_mixes_images_and_labels_with_one_weight():
    out = L.MixUp(0.5, seed=1)({"images": X, "labels": Y})
    labels, images = np.asarray(out["labels"]), np.asarray(out["images"])
    np.testing.assert_allclose(labels.sum(1), 1.0, rtol=1e-6)
    for i in range(6):
        j, w = _partner(labels, i)
        want = w * X[i] + (1 - w) * X[j] if j != i else X[i]
        np.testing.assert_allclose(images[i], want, rtol=1e-5, atol=1e-6)


def test_cutmix_pastes_a_box_of_the_partner():
    big = RNG.random((6, 40, 40, 3)).astype("float32")  # grid discretization ~5% of the area
    kiln.utils.set_random_seed(12)
    out = L.CutMix(seed=3)({"images": big, "labels": Y})
    labels, images = np.asarray(out["labels"]), np.asarray(out["images"])
    np.testing.assert_allclose(labels.sum(1), 1.0, rtol=1e-6)
    for i in range(6):
        j, w = _partner(labels, i)
        from_j = np.all(images[i] == big[j], axis=-1) & ~np.all(images[i] == big[i], axis=-1)
        assert np.all(np.all(images[i] == big[i], axis=-1) | from_j)
        if j != i:  # a rectangle of (1 - w) of the image, up to the pixel grid
            r, c = np.nonzero(from_j)
            if len(r):
                assert from_j[r.min():r.max() + 1, c.min():c.max() + 1].all()
            assert abs(from_j.mean() - (1 - w)) <= 81 / 1600


@pytest.mark.parametrize("cls,kwargs", [(L.MixUp, {"alpha": 0.4, "seed": 2}),
                                        (L.CutMix, {"factor": 0.5, "seed": 2})])
def test_invariants_and_round_trips(cls, kwargs, tmp_path):
    layer = cls(**kwargs)
    again = cls.from_config(json.loads(json.dumps(layer.get_config())))
    assert again.get_config() == layer.get_config()
    np.testing.assert_array_equal(layer(X, training=False), X)
    out = layer({"images": X, "labels": Y}, training=False)
    np.testing.assert_array_equal(out["labels"], Y)
    _round_trip((cls, kwargs, (2, 5, 4, 3), None, None, []), tmp_path)
    runs = []
    for _ in range(2):
        kiln.utils.set_random_seed(6)
        runs.append(np.asarray(cls(**kwargs)(X)))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.allclose(runs[0], X)
    assert runs[0].min() >= X.min() - 1e-6 and runs[0].max() <= X.max() + 1e-6


def test_errors():
    with pytest.raises(ValueError, match="alpha"):
        L.MixUp(0.0)
    with pytest.raises(ValueError, match="'images'"):
        L.MixUp()({"labels": Y})
    with pytest.raises(ValueError, match="factor"):
        L.CutMix(2.0)
