"""Softmax cross-entropy values and gradients against PyTorch (skipped without torch)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_sparse_softmax_cross_entropy_matches_torch(scale):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 5)) * scale
    labels = rng.integers(0, 5, size=6)
    x = kiln.placeholder((None, 5), "float64")
    y = kiln.placeholder((None,), "int64")
    loss = K.mean(K.sparse_softmax_cross_entropy(x, y))
    (g,) = kiln.grad(loss, [x])
    value, grad = kiln.function([x, y], [loss, g], backend="reference")(logits, labels)
    t = torch.tensor(logits, requires_grad=True)
    tl = torch.nn.functional.cross_entropy(t, torch.tensor(labels))
    tl.backward()
    np.testing.assert_allclose(value, tl.item(), rtol=1e-12)
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_dense_softmax_cross_entropy_with_soft_labels_matches_torch():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 3)) * 5
    soft = rng.uniform(size=(4, 3))
    soft /= soft.sum(1, keepdims=True)
    x = kiln.placeholder((None, 3), "float64")
    y = kiln.placeholder((None, 3), "float64")
    loss = K.sum(K.softmax_cross_entropy(x, y))
    gx, gy = kiln.grad(loss, [x, y])
    value, a, b = kiln.function([x, y], [loss, gx, gy], backend="reference")(logits, soft)
    t = torch.tensor(logits, requires_grad=True)
    ty = torch.tensor(soft, requires_grad=True)
    tl = torch.nn.functional.cross_entropy(t, ty, reduction="sum")
    tl.backward()
    np.testing.assert_allclose(value, tl.item(), rtol=1e-12)
    np.testing.assert_allclose(a, t.grad.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(b, ty.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_softmax_and_log_softmax_gradients_match_torch():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(3, 7))
    w = rng.normal(size=(3, 7))
    x = kiln.placeholder((3, 7), "float64")
    outs = [K.sum(K.softmax(x) * w), K.sum(K.log_softmax(x) * w)]
    grads = [kiln.grad(o, [x])[0] for o in outs]
    got = kiln.function([x], grads, backend="reference")(logits)
    for fn, g in zip([torch.softmax, torch.log_softmax], got):
        t = torch.tensor(logits, requires_grad=True)
        (fn(t, dim=-1) * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-10, atol=1e-14)
