"""Graph builders shared by the pass tests: MLP training steps written with kiln.ops."""

from __future__ import annotations

import numpy as np

import kiln
import kiln.ops as K
from kiln.core.ir import Graph


def mlp_train_step(widths, batch_norm=False, optimizer="adam", seed=0, dtype="float32",
                   lr=1e-3):
    """A training step of a relu MLP with a softmax cross-entropy loss written by hand
    (``-sum(y * log(softmax(logits)))``), gradients by kiln.grad and an Adam (or SGD) update
    written with kiln.ops, Variables as slots.

    Returns:
        (graph, x, y, variables): the graph's outputs are the loss, then the new value of
        every parameter and slot; ``x`` (None, widths[0]) and ``y`` (None, widths[-1]) are
        its inputs.
    """
    rng = np.random.default_rng(seed)
    x = kiln.placeholder((None, widths[0]), dtype, name="x")
    y = kiln.placeholder((None, widths[-1]), dtype, name="y")
    params = []
    h = x
    for k, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        w = kiln.Variable(rng.normal(size=(a, b)) * np.sqrt(2.0 / a), name=f"w{k}", dtype=dtype)
        bias = kiln.Variable(np.zeros(b), name=f"b{k}", dtype=dtype)
        params += [w, bias]
        h = h @ w + bias
        if k < len(widths) - 2:
            h = K.relu(h)
    p = K.softmax(h)
    loss = K.mean(-K.sum(y * K.log(p), axis=-1))
    grads = kiln.grad(loss, params)
    outputs = [loss]
    if optimizer == "sgd":
        outputs += [w - lr * g for w, g in zip(params, grads)]
        return Graph([x, y], outputs), x, y, params
    step = kiln.Variable(np.zeros(()), name="step", dtype=dtype)
    b1, b2, eps = 0.9, 0.999, 1e-7
    t = step + 1.0
    lr_t = lr * K.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t)
    slots = []
    new_params, new_slots = [], []
    for w, g in zip(params, grads):
        m = kiln.Variable(np.zeros(w.shape), name=f"m_{w.name}", dtype=dtype)
        v = kiln.Variable(np.zeros(w.shape), name=f"v_{w.name}", dtype=dtype)
        slots += [m, v]
        m_new = b1 * m + (1.0 - b1) * g
        v_new = b2 * v + (1.0 - b2) * K.square(g)
        new_params.append(w - lr_t * m_new / (K.sqrt(v_new) + eps))
        new_slots += [m_new, v_new]
    outputs += new_params + new_slots + [t]
    return Graph([x, y], outputs), x, y, params + slots + [step]


def feeds(x, y, batch, seed=1, dtype="float32", scale=1.0):
    rng = np.random.default_rng(seed)
    xv = (rng.normal(size=(batch, x.shape[1])) * scale).astype(dtype)
    labels = rng.integers(0, y.shape[1], size=batch)
    yv = np.eye(y.shape[1], dtype=dtype)[labels]
    return {x: xv, y: yv}
