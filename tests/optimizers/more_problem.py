"""A least-squares problem with a matrix variable, for the optimizers whose rule depends on
the variable's rank (Adafactor factors it, Muon orthogonalizes it), run three ways: through
kiln's graph update, through a NumPy reference, and (where keras is importable) through
Keras 3's optimizer applied to the same variables and gradients.

loss(W, c) = 0.5 * sum((A @ W + c - B) ** 2), W (5, 3) and c (3,):
dW = A.T @ r, dc = sum(r, axis=0) with r = A @ W + c - B.
"""

from __future__ import annotations

import numpy as np

import kiln

RNG = np.random.default_rng(7)
A = RNG.normal(size=(8, 5))
B = RNG.normal(size=(8, 3))
W0 = RNG.normal(size=(5, 3))
C0 = RNG.normal(size=(3,))


def np_grads(params: list[np.ndarray]) -> list[np.ndarray]:
    w, c = (np.asarray(p, np.float64) for p in params)
    r = A @ w + c - B
    return [A.T @ r, r.sum(axis=0)]


def f32(x: float) -> float:
    return float(np.float32(x))


def run_graph(opt, steps: int, dtype: str = "float64", names=("w", "c")) -> list[np.ndarray]:
    """``steps`` steps of ONE compiled function (loss, gradients and the optimizer's update
    as graph nodes) on the reference backend."""
    vs = [kiln.Variable(W0, name=names[0], dtype=dtype),
          kiln.Variable(C0, name=names[1], dtype=dtype)]
    a = kiln.ops.constant(A.astype(dtype))
    b = kiln.ops.constant(B.astype(dtype))
    loss = 0.5 * kiln.ops.sum(kiln.ops.square(a @ vs[0] + vs[1] - b))
    grads = kiln.grad(loss, vs)
    fn = kiln.function([], loss, updates=opt.update_nodes(grads, vs), backend="reference")
    for _ in range(steps):
        opt.before_step()
        fn()
    return [v.numpy() for v in vs]


def run_numpy(rule, steps: int, lr: float, weight_decay=None) -> list[np.ndarray]:
    """``rule(g, w, state, t, lr) -> new w`` per variable (t 1-based), after Keras' decoupled
    weight decay ``w -= w * wd * lr`` (``weight_decay`` a float or a per-variable list)."""
    params = [W0.copy(), C0.copy()]
    states: list[dict] = [{}, {}]
    lr = f32(lr)
    for step in range(steps):
        grads = np_grads(params)
        new = []
        for i, (p, g, st) in enumerate(zip(params, grads, states)):
            wd = weight_decay[i] if isinstance(weight_decay, list | tuple) else weight_decay
            if wd is not None:
                p = p - p * wd * lr
            new.append(rule(g, p, st, step + 1, lr))
        params = new
    return params


def run_keras(keras, opt, steps: int, dtype: str = "float32", names=("w", "c"),
              grad_fn=None) -> list[np.ndarray]:
    """Keras 3's optimizer on keras.Variables with the same closed-form gradients."""
    vs = [keras.Variable(W0.astype(dtype), dtype=dtype, name=names[0]),
          keras.Variable(C0.astype(dtype), dtype=dtype, name=names[1])]
    for step in range(steps):
        params = [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in vs]
        grads = (grad_fn or (lambda p, s: np_grads(p)))(params, step)
        opt.apply_gradients([(keras.ops.convert_to_tensor(np.asarray(g, dtype)), v)
                             for g, v in zip(grads, vs)])
    return [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in vs]


def run_graph_grads(opt, steps: int, grad_fn, dtype: str = "float32", names=("w", "c")
                    ) -> list[np.ndarray]:
    """Like :func:`run_keras` on kiln: gradients fed as arrays to one compiled update
    (``Optimizer.apply``), from ``grad_fn(params, step)``."""
    vs = [kiln.Variable(W0, name=names[0], dtype=dtype),
          kiln.Variable(C0, name=names[1], dtype=dtype)]
    for step in range(steps):
        grads = grad_fn([v.numpy() for v in vs], step)
        opt.apply([np.asarray(g, dtype) for g in grads], vs, backend="reference")
    return [v.numpy() for v in vs]
