"""kiln.ops.scan: the loop op against NumPy loops (forward), central finite differences in
float64 (gradients, through 50 steps, nested and reversed loops, several carries), and the
loops pass (one forward loop after differentiation, unused outputs pruned, hoisting)."""

from __future__ import annotations

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
import kiln.ops as K

BACKENDS = ["reference", "cpu"]




def _rnn_np(xs, h0, W, U, reverse=False):
    h, ys = h0, [None] * len(xs)
    for t in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        h = np.tanh(xs[t] @ W + h @ U)
        ys[t] = h * h
    return h, np.stack(ys)


def _rnn_graph(dtype="float64", reverse=False):
    x = kiln.placeholder((None, 2, 3), dtype)
    h0 = kiln.placeholder((2, 4), dtype)
    w = kiln.placeholder((3, 4), dtype)
    u = kiln.placeholder((4, 4), dtype)

    def step(h, xt):
        h = K.tanh(K.matmul(xt, w) + K.matmul(h, u))
        return h, h * h

    hT, ys = K.scan(step, h0, x, reverse=reverse)
    return [x, h0, w, u], hT, ys


def _rnn_inputs(T, rng, dtype="float64"):
    return [rng.normal(size=s).astype(dtype) * 0.5 for s in ((T, 2, 3), (2, 4), (3, 4), (4, 4))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reverse", [False, True])
def test_forward_matches_a_numpy_loop(backend, reverse):
    phs, hT, ys = _rnn_graph(reverse=reverse)
    fn = kiln.function(phs, [hT, ys], backend=backend)
    args = _rnn_inputs(7, np.random.default_rng(0))
    got_h, got_ys = fn(*args)
    want_h, want_ys = _rnn_np(*args, reverse=reverse)
    np.testing.assert_allclose(got_h, want_h, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_ys, want_ys, rtol=1e-12, atol=1e-12)


def test_sequence_length_is_polymorphic_without_recompiling():
    phs, hT, ys = _rnn_graph()
    fn = kiln.function(phs, [hT, ys])
    rng = np.random.default_rng(1)
    program = fn.program
    for T in (3, 11, 1):
        args = _rnn_inputs(T, rng)
        got_h, got_ys = fn(*args)
        want_h, want_ys = _rnn_np(*args)
        assert got_ys.shape == (T, 2, 4)
        np.testing.assert_allclose(got_h, want_h, rtol=1e-12)
        np.testing.assert_allclose(got_ys, want_ys, rtol=1e-12)
    assert fn.program is program  # one compiled program, a plan per length


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_through_50_steps_matches_finite_differences(backend):
    phs, hT, ys = _rnn_graph()
    loss = K.sum(ys * 0.3) + K.sum(hT * hT)
    grads = kiln.grad(loss, phs)
    fn = kiln.function(phs, grads, backend=backend)
    rng = np.random.default_rng(2)
    args = _rnn_inputs(50, rng)
    args[3] *= 0.6  # a contracting recurrence: the gradient through 50 steps is not tiny
    analytic = fn(*args)

    def f() -> float:
        h, y = _rnn_np(*args)
        return float(np.sum(y * 0.3) + np.sum(h * h))

    for k in range(4):
        np.testing.assert_allclose(analytic[k], numeric_grad(f, args[k]), rtol=1e-5,
                                   atol=1e-7, err_msg=f"input {k}")


def test_several_carries_no_sequences_and_a_length():
    a0 = kiln.placeholder((3,), "float64")
    b0 = kiln.placeholder((3,), "float64")

    def step(carry, _):
        a, b = carry
        return (b, a + b * 0.5), None  # swapping carries must not overwrite one too early

    (aT, bT), ys = K.scan(step, (a0, b0), length=6)
    assert ys is None
    loss = K.sum(aT * bT)
    grads = kiln.grad(loss, [a0, b0])
    rng = np.random.default_rng(3)
    av, bv = rng.normal(size=3), rng.normal(size=3)

    def loop(a, b):
        for _ in range(6):
            a, b = b, a + b * 0.5
        return a, b

    for backend in BACKENDS:
        fn = kiln.function([a0, b0], [aT, bT] + grads, backend=backend)
        got = fn(av, bv)
        want = loop(av, bv)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        for k, arr in enumerate((av, bv)):
            num = numeric_grad(lambda: float(np.sum(np.multiply(*loop(av, bv)))), arr)
            np.testing.assert_allclose(got[2 + k], num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_and_reversed_loops_forward_and_gradient(backend):
    c0 = kiln.placeholder((2,), "float64")
    xs = kiln.placeholder((4, 3, 2), "float64")
    v = kiln.placeholder((2,), "float64")

    def outer(c, x):
        def inner(ci, xi):
            nxt = K.sin(ci * v + xi)
            return nxt, nxt

        c2, inner_ys = K.scan(inner, c, x, reverse=True)
        return c2, K.sum(inner_ys, axis=0) * c2

    cT, ys = K.scan(outer, c0, xs)
    loss = K.sum(ys) + K.sum(cT)
    grads = kiln.grad(loss, [c0, xs, v])
    fn = kiln.function([c0, xs, v], [loss] + grads, backend=backend)
    rng = np.random.default_rng(4)
    args = [rng.normal(size=(2,)), rng.normal(size=(4, 3, 2)), rng.normal(size=(2,))]

    def f() -> float:
        c0v, xsv, vv = args
        c, total = c0v, 0.0
        for t in range(4):
            ci, acc = c, np.zeros(2)
            for s in range(2, -1, -1):
                ci = np.sin(ci * vv + xsv[t, s])
                acc = acc + ci
            c = ci
            total += np.sum(acc * c)
        return total + np.sum(c)

    got = fn(*args)
    np.testing.assert_allclose(got[0], f(), rtol=1e-12)
    for k in range(3):
        np.testing.assert_allclose(got[1 + k], numeric_grad(f, args[k]), rtol=1e-5, atol=1e-8)


def _loops(graph):
    return [n for n in graph.nodes if n.op == "scan"]


def test_one_forward_loop_after_differentiation_and_the_projection_is_hoisted():
    phs, hT, ys = _rnn_graph()
    loss = K.sum(ys)
    fn = kiln.function(phs, [loss] + kiln.grad(loss, phs[2:]))
    loops = _loops(fn.optimized_graph)
    names = sorted(n.attrs["body"].name for n in loops)
    assert names == ["scan", "scan_grad"], names
    fwd = next(n for n in loops if n.attrs["body"].name == "scan")
    body_ops = {n.op for n in fwd.attrs["body"].graph.nodes}
    # x_t @ W is computed once for every step before the loop: the body multiplies by U only
    assert sum(n.op == "matmul" for n in fwd.attrs["body"].graph.nodes) == 1, body_ops
    outer = [n for n in fn.optimized_graph.nodes if n.op == "matmul" and n.ndim == 3]
    assert outer, "the input projection is not a sequence-wide matmul"
    assert "loop 'scan'" in str(fn.report) and "loop 'scan_grad'" in str(fn.report)


def test_unused_outputs_and_residuals_are_pruned():
    phs, hT, ys = _rnn_graph()
    kiln.grad(K.sum(ys), phs)  # builds the augmented loop; nobody uses it below
    fn = kiln.function(phs, [hT])
    (loop,) = _loops(fn.optimized_graph)
    assert loop.attrs["body"].n_y == 0
    args = _rnn_inputs(5, np.random.default_rng(5))
    np.testing.assert_allclose(fn(*args)[0], _rnn_np(*args)[0], rtol=1e-12)


def test_bad_loops_are_clear_errors():
    h0 = kiln.placeholder((2, 4))
    xs = kiln.placeholder((5, 2, 3))
    with pytest.raises(ValueError, match=r"scan: fn returns carry 0 as float32\[2, 3\]"):
        K.scan(lambda h, x: (x, None), h0, xs)
    with pytest.raises(ValueError, match="carry 0.*float64"):
        K.scan(lambda h, x: (K.cast(h, "float64"), None), h0, xs)
    with pytest.raises(ValueError, match="different lengths"):
        K.scan(lambda h, x: (h, None), h0, [xs, kiln.placeholder((4, 2, 3))])
    with pytest.raises(ValueError, match="give sequences xs or a length"):
        K.scan(lambda h, x: (h, None), h0)
    with pytest.raises(TypeError, match=r"must return \(new_carry, y\)"):
        K.scan(lambda h, x: h, h0, xs)
    with pytest.raises(ValueError, match="init has 1"):
        K.scan(lambda h, x: ((h, h), None), h0, xs)


def test_a_large_fed_sequence_read_by_the_loop_is_never_stale():
    """The executor reads large feeds in place (rebinding kernel arguments); the loop holds its
    inputs in its own step, so a fed sequence must not be bound away from it: two calls with
    different data give two right answers."""
    x = kiln.placeholder((None, 64, 128))
    h0 = kiln.placeholder((64, 128))
    hT, _ = K.scan(lambda h, xt: (K.tanh(h * 0.5 + xt), None), h0, x)
    fn = kiln.function([x, h0], [hT, K.sum(x)])  # another kernel reads x: x gets bound
    rng = np.random.default_rng(6)
    for _ in range(2):
        xs = rng.normal(size=(30, 64, 128)).astype("float32")
        h = np.zeros((64, 128), "float32")
        want = h
        for t in range(30):
            want = np.tanh(want * 0.5 + xs[t])
        got, total = fn(xs, h)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(total, xs.sum(), rtol=1e-4)


def test_a_residual_read_only_for_its_shape_is_not_stacked():
    """The gradient of gates sliced from one product reads the product only for its shape
    (slice_grad); once the backward body is optimized (the slice_grads become a concatenate),
    the forward loop stops stacking it."""
    x = kiln.placeholder((None, 2, 3), "float64")
    h0 = kiln.placeholder((2, 4), "float64")
    w = kiln.placeholder((3, 8), "float64")
    u = kiln.placeholder((4, 8), "float64")

    def step(h, xt):
        z = K.matmul(xt, w) + K.matmul(h, u)
        a = K.slice(z, [(None, None, 1), (0, 4, 1)], None)
        b = K.slice(z, [(None, None, 1), (4, 8, 1)], None)
        h = K.tanh(a) * K.sigmoid(b)
        return h, None

    hT, _ = K.scan(step, h0, x)
    grads = kiln.grad(K.sum(hT), [x, h0, w, u])
    fn = kiln.function([x, h0, w, u], grads)
    fwd = next(n for n in fn.optimized_graph.nodes
               if n.op == "scan" and not n.attrs["reverse"])
    shapes = [y.shape for y in fwd.attrs["body"].ys]
    assert (2, 8) not in shapes, shapes
    args = _rnn_inputs(6, np.random.default_rng(8))
    args[2] = np.random.default_rng(9).normal(size=(3, 8)) * 0.5
    args[3] = np.random.default_rng(10).normal(size=(4, 8)) * 0.5
    got = fn(*args)

    def f() -> float:
        xs, h, W, U = args
        for t in range(len(xs)):
            z = xs[t] @ W + h @ U
            h = np.tanh(z[:, :4]) / (1 + np.exp(-z[:, 4:]))
        return float(np.sum(h))

    for k in range(4):
        np.testing.assert_allclose(got[k], numeric_grad(f, args[k]), rtol=1e-5, atol=1e-8)
