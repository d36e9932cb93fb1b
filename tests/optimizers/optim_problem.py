"""A fixed least-squares problem, run through kiln graph nodes and through NumPy references.

loss(W, c) = 0.5 * sum((A @ W + c - b) ** 2) with W of shape (4, 1) and c of shape (1,), so
there are two variables (slot order and per-variable rules are exercised) and the gradients
are known in closed form: dW = A.T @ r, dc = sum(r) with r = A @ W + c - b.
"""

from __future__ import annotations

import numpy as np

import kiln

RNG = np.random.default_rng(1234)
A = RNG.normal(size=(6, 4))
B = RNG.normal(size=(6, 1)) * 3.0
W0 = RNG.normal(size=(4, 1))
C0 = np.array([0.5])


def f32(x: float) -> float:
    """The learning rate as the optimizer sees it: stored in a float32 Variable."""
    return float(np.float32(x))


def np_grads(params: list[np.ndarray]) -> list[np.ndarray]:
    w, c = params
    r = A @ w + c - B
    return [A.T @ r, r.sum(axis=0)]


def make_vars(dtype: str = "float64") -> list[kiln.Variable]:
    return [kiln.Variable(W0, name="w", dtype=dtype), kiln.Variable(C0, name="c", dtype=dtype)]


def loss_node(variables: list[kiln.Variable]):
    w, c = variables
    a = kiln.ops.constant(A.astype(w.dtype))
    b = kiln.ops.constant(B.astype(w.dtype))
    return 0.5 * kiln.ops.sum(kiln.ops.square(a @ w + c - b))


def compile_step(opt, variables: list[kiln.Variable], backend: str = "reference"
                 ) -> kiln.Function:
    loss = loss_node(variables)
    grads = kiln.grad(loss, variables)
    opt.build(variables)
    return kiln.function([], loss, updates=opt.update_nodes(grads, variables), backend=backend)


def run_kiln(opt, steps: int = 20, dtype: str = "float64", backend: str = "reference"
             ) -> list[np.ndarray]:
    """``steps`` training steps through graph nodes (grad + update_nodes + kiln.function)."""
    variables = make_vars(dtype)
    fn = compile_step(opt, variables, backend)
    for _ in range(steps):
        opt.before_step()
        fn()
    return [v.numpy() for v in variables]


def run_numpy(rule, steps: int = 20, lr=0.01, clip=None, weight_decay: float | None = None,
              grad_fn=np_grads) -> list[np.ndarray]:
    """The same problem with a NumPy rule ``rule(g, w, state, t, lr) -> new w`` applied per
    variable (t is 1-based); ``clip`` transforms the gradient list; ``lr`` may be a function
    of the 0-based step."""
    params = [W0.astype(np.float64).copy(), C0.astype(np.float64).copy()]
    states: list[dict] = [{} for _ in params]
    for step in range(steps):
        rate = f32(lr(step) if callable(lr) else lr)
        grads = grad_fn(params)
        if clip is not None:
            grads = clip(grads)
        new = []
        for p, g, st in zip(params, grads, states):
            if weight_decay is not None:
                p = p - p * weight_decay * rate
            new.append(rule(g, p, st, step + 1, rate))
        params = new
    return params


def assert_close(actual: list[np.ndarray], expected: list[np.ndarray], rtol: float = 1e-6,
                 atol: float = 0.0) -> None:
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
