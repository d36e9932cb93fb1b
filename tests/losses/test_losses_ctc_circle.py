"""The CTC and Circle losses against closed forms (CTC: the sum over every alignment, by brute
force; Circle: a NumPy transcription of the paper's formula), float64 finite differences and,
where importable, Keras itself."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
import kiln.ops as K
from kiln import losses

RNG = np.random.default_rng(1)


def _keras():
    """Keras as the oracle, or a skip; its NumPy and JAX backends also import scipy and jax."""
    keras = pytest.importorskip("keras")
    if keras.backend.backend() in ("numpy", "jax"):
        pytest.importorskip("scipy")
        pytest.importorskip("jax")
    return keras


def _ctc_brute(labels, logits):
    """-log sum over every path of length T that collapses (merge repeats, drop 0) to labels."""
    out = []
    for lab, lg in zip(labels, logits):
        target = [int(v) for v in lab if v != 0]
        logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
        total = 0.0
        for path in itertools.product(range(lg.shape[1]), repeat=lg.shape[0]):
            merged = [p for i, p in enumerate(path) if i == 0 or p != path[i - 1]]
            if [p for p in merged if p != 0] == target:
                total += np.exp(sum(logp[t, p] for t, p in enumerate(path)))
        out.append(-np.log(total))
    return np.array(out)


def _circle_np(y, e, ref_y=None, ref_e=None, remove_diagonal=True, gamma=80.0, margin=0.4):
    ref_y = y if ref_y is None else ref_y
    ref_e = e if ref_e is None else ref_e
    d = np.maximum(1.0 - e @ ref_e.T, 0.0)
    pos = y[:, None] == ref_y[None, :]
    neg = ~pos
    if remove_diagonal:
        pos &= ~np.eye(len(y), len(ref_y), dtype=bool)
    out = []
    for i in range(len(y)):
        sp = [-gamma * max(margin + d[i, j], 0) * (margin - d[i, j])
              for j in range(len(ref_y)) if pos[i, j]]
        sn = [gamma * max(1 + margin - d[i, j], 0) * (1 - margin - d[i, j])
              for j in range(len(ref_y)) if neg[i, j]]
        lse = (lambda s: np.log(np.sum(np.exp(s))) if s else -np.inf)
        out.append(np.logaddexp(0.0, lse(sp) + lse(sn)))
    return np.array(out)


def _unit(n, d, dtype="float32"):
    e = RNG.standard_normal((n, d))
    return (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(dtype)


def test_ctc_is_the_sum_over_alignments():
    labels = np.array([[1, 2, 0], [2, 2, 0], [1, 0, 0]], "int32")
    logits = RNG.standard_normal((3, 5, 3)).astype("float32")
    want = _ctc_brute(labels, logits)
    np.testing.assert_allclose(losses.ctc(labels, logits), want, rtol=1e-5)
    np.testing.assert_allclose(losses.CTC()(labels, logits), want.mean(), rtol=1e-5)
    np.testing.assert_allclose(losses.CTC(reduction="sum")(labels, logits), want.sum(),
                               rtol=1e-5)


def test_ctc_in_a_graph_with_unknown_batch():
    yt = kiln.placeholder((None, 2), "int32")
    yp = kiln.placeholder((None, 4, 3), "float32")
    out = losses.ctc(yt, yp)
    assert out.shape == (None,)
    labels = np.array([[1, 2], [2, 0]], "int32")
    logits = RNG.standard_normal((2, 4, 3)).astype("float32")
    np.testing.assert_allclose(kiln.function([yt, yp], out)(labels, logits),
                               _ctc_brute(labels, logits), rtol=1e-5)


def test_ctc_errors_name_the_loss():
    with pytest.raises(ValueError, match=r"ctc: targets y_true .* y_true.shape=\(2,\)"):
        losses.ctc(np.array([1, 2]), np.zeros((2, 3, 4), "float32"))
    with pytest.raises(ValueError, match=r"ctc: logits y_pred .* y_pred.shape=\(2, 3\)"):
        losses.ctc(np.array([[1], [2]]), np.zeros((2, 3), "float32"))


@pytest.mark.parametrize("remove_diagonal", [True, False])
def test_circle_matches_numpy(remove_diagonal):
    y = np.array([0, 0, 1, 1, 1, 2, 3], "int32")
    e = _unit(7, 5)
    want = _circle_np(y, e.astype("float64"), remove_diagonal=remove_diagonal)
    got = losses.circle(y, e, remove_diagonal=remove_diagonal)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # the loss object averages over the samples with a positive loss (Keras' mask)
    obj = losses.Circle(remove_diagonal=remove_diagonal)(y, e)
    np.testing.assert_allclose(obj, want[want > 0].mean(), rtol=1e-4)


def test_circle_reference_set_and_arguments():
    y, e = np.array([0, 1, 2], "int32"), _unit(3, 4)
    ry, re_ = np.array([0, 1, 1, 2, 2], "int32"), _unit(5, 4)
    want = _circle_np(y, e.astype("float64"), ry, re_.astype("float64"), remove_diagonal=False,
                      gamma=16.0, margin=0.25)
    got = losses.circle(y, e, ref_labels=ry, ref_embeddings=re_, remove_diagonal=False,
                        gamma=16, margin=0.25)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_circle_gradient_finite_differences():
    y = np.array([0, 0, 1, 1, 2], "int32")  # sample 4 has no positive pair
    e = _unit(5, 3, "float64")
    yt = kiln.placeholder((None,), "int32")
    yp = kiln.placeholder((None, 3), "float64")
    loss = K.sum(losses.circle(yt, yp, gamma=4.0))
    f = kiln.function([yt, yp], [loss, kiln.grad(loss, [yp])[0]])
    value, g = f(y, e)
    assert np.isfinite(g).all()
    np.testing.assert_allclose(value, _circle_np(y, e, gamma=4.0).sum(), rtol=1e-10)
    want = numeric_grad(lambda: float(f(y, e)[0]), e)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)


def test_circle_config_and_lookup():
    c = losses.Circle(gamma=32.0, margin=0.3, remove_diagonal=False)
    cfg = c.get_config()
    assert cfg["gamma"] == 32.0 and cfg["margin"] == 0.3 and cfg["remove_diagonal"] is False
    assert losses.deserialize(losses.serialize(c)).get_config() == cfg
    assert losses.get("circle") is losses.circle and losses.get("ctc") is losses.ctc
    assert isinstance(losses.get("CTC"), losses.CTC)
    with pytest.raises(ValueError, match=r"circle: expected 1-D integer labels .* \(2, 2, 2\)"):
        losses.circle(np.array([0, 1]), np.zeros((2, 2, 2), "float32"))


def test_ctc_and_circle_match_keras():
    keras = _keras()
    kops = keras.ops
    labels = np.array([[1, 2, 0], [3, 3, 1]], "int32")
    logits = RNG.standard_normal((2, 6, 4)).astype("float32")
    np.testing.assert_allclose(losses.ctc(labels, logits),
                               kops.convert_to_numpy(keras.losses.ctc(labels, logits)),
                               rtol=1e-4)
    np.testing.assert_allclose(losses.CTC()(labels, logits),
                               kops.convert_to_numpy(keras.losses.CTC()(labels, logits)),
                               rtol=1e-4)
    y, e = np.array([0, 0, 1, 1, 2, 3], "int32"), _unit(6, 4)
    np.testing.assert_allclose(losses.circle(y, e),
                               kops.convert_to_numpy(keras.losses.circle(y, e)), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(losses.Circle()(y, e),
                               kops.convert_to_numpy(keras.losses.Circle()(y, e)), rtol=1e-4)


def test_both_losses_train_a_model():
    x = RNG.standard_normal((32, 5)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + 2 * (x[:, 1] > 0)
    emb = kiln.Sequential([kiln.Input((5,)), kiln.layers.Dense(8),
                           kiln.layers.UnitNormalization()])
    emb.compile("adam", losses.Circle(gamma=16.0))  # targets: one label per embedding
    hist = emb.fit(x, y, batch_size=32, epochs=3, verbose=0).history["loss"]
    assert np.isfinite(hist).all()
    seq = kiln.Sequential([kiln.Input((6, 3)), kiln.layers.Dense(4)])
    seq.compile(kiln.optimizers.SGD(0.1), losses.CTC())  # targets: (batch, max_label_length)
    labels = np.array([[1, 2], [3, 0], [2, 2], [1, 3]], "int32")
    frames = RNG.standard_normal((4, 6, 3)).astype("float32")
    hist = seq.fit(frames, labels, batch_size=4, epochs=4, verbose=0).history["loss"]
    assert hist[-1] < hist[0]
