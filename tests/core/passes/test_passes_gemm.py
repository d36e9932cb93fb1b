"""gemm: a scaled matrix product summed with a same-shaped tensor -> one BLAS call
(kiln/core/passes/gemm.py), its kernel (backends/cpu/products.gemm) and the in-place rule for its
accumulator (kiln/core/memory.py, kiln/core/plan.py)."""

import sys

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends.cpu.gemm import products
from kiln.core.ir import Graph
from kiln.core.passes import optimize
from kiln.core.passes.gemm import gemm

gemm_pass = sys.modules["kiln.core.passes.gemm"]  # the package's `gemm` is the function


@pytest.fixture(autouse=True)
def small_sums(monkeypatch, pass_options):
    # the tests' sums are small: let the pass take them (the size rule has its own test)
    pass_options(gemm_min_elements=1)


def _ops(graph):
    return [n.op for n in graph.nodes]


def _mlp_momentum(backend, lr=None):
    rng = np.random.default_rng(1)
    x = kiln.placeholder((None, 12))
    y = kiln.placeholder((None,), "int32")
    sizes = [12, 16, 9, 4]
    params = [kiln.Variable(rng.normal(size=(a, b)).astype("float32") * 0.3)
              for a, b in zip(sizes[:-1], sizes[1:])]
    h = x
    for k, w in enumerate(params):
        h = K.matmul(h, w)
        if k < len(params) - 1:
            h = K.relu(h)
    loss = K.mean(K.sparse_softmax_cross_entropy(h, y))
    grads = kiln.grad(loss, params)
    vel = [kiln.Variable(np.zeros(p.shape, "float32")) for p in params]
    rate = 0.05 if lr is None else lr
    updates = []
    for p, g, v in zip(params, grads, vel):
        new_v = v * 0.9 - g * rate
        updates += [(v, new_v), (p, p + new_v)]
    return kiln.function([x, y], loss, updates=updates, backend=backend), params + vel


def test_momentum_updates_are_gemms_written_into_the_velocities():
    step, variables = _mlp_momentum("cpu")
    graph = step.optimized_graph
    assert _ops(graph).count("gemm") == 3  # one per kernel's velocity
    # no kernel gradient is a matmul of its own any more (only the input gradients are)
    assert _ops(graph).count("matmul") == 3 + 2
    rng = np.random.default_rng(0)
    feeds = [rng.normal(size=(20, 12)).astype("float32"), rng.integers(0, 4, 20).astype("int32")]
    step(*feeds)
    plan = step.program.plan(feeds)
    assert plan.info["inplace_updates"] == len(variables)
    for (var, _), out in zip(step.updates, plan.outputs[1:]):
        assert out is var.value


@pytest.mark.nojit
def test_plain_sgd_updates_are_the_gemms_themselves():
    # w - lr * x.T @ dy: the GEMM writes the new kernel straight into w, no update kernel
    rng = np.random.default_rng(3)
    w0 = rng.normal(size=(12, 7)).astype("float32")
    batches = [(rng.normal(size=(9, 12)).astype("float32") + k,
                rng.normal(size=(9, 7)).astype("float32")) for k in range(3)]
    x = kiln.placeholder((None, 12))
    t = kiln.placeholder((None, 7))
    got = {}
    for backend in ("reference", "cpu"):
        w = kiln.Variable(w0.copy())
        loss = K.mean(K.square(K.matmul(x, w) - t))
        (g,) = kiln.grad(loss, [w])
        step = kiln.function([x, t], loss, updates=[(w, w - g * 0.1)], backend=backend)
        for xb, tb in batches:
            step(xb, tb)
        got[backend] = w.numpy()
    assert _ops(step.optimized_graph).count("gemm") == 1
    assert step.program.plan(list(batches[0])).info["inplace_updates"] == 1
    np.testing.assert_allclose(got["cpu"], got["reference"], rtol=1e-5, atol=1e-5)


def test_the_velocity_is_added_to_a_large_kernel_by_axpy(cpu_options):
    # w + v after the gemm: BLAS's axpy where the kernel has axpy_min_elements elements, a
    # generated loop below; the same values either way (the reference backend's). A plan
    # whose products are all kiln's fuses the add into the kernel's epilogue instead: here
    # the forward product stays BLAS's (its batch kernel off)
    cpu_options(native_batched=False)
    rng = np.random.default_rng(9)
    x = rng.normal(size=(32, 300)).astype("float32")
    t = rng.normal(size=(32, 256)).astype("float32")
    w0 = rng.normal(size=(300, 256)).astype("float32") * 0.05
    got = {}
    for backend in ("reference", "cpu"):
        w = kiln.Variable(w0.copy())
        v = kiln.Variable(np.zeros_like(w0))
        px, pt = kiln.placeholder((None, 300)), kiln.placeholder((None, 256))
        loss = K.mean(K.square(K.matmul(px, w) - pt))
        (g,) = kiln.grad(loss, [w])
        new_v = v * 0.9 - g * 0.1
        step = kiln.function([px, pt], loss, updates=[(v, new_v), (w, w + new_v)],
                             backend=backend)
        for _ in range(3):
            step(x, t)
        got[backend] = (w.numpy(), v.numpy())
    labels = [s.label for s in step.program.plan([x, t]).steps]
    assert "add(axpy)" in labels and labels.count("gemm") == 1
    for a, b in zip(got["cpu"], got["reference"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_learning_rate_variable_is_read_at_each_call():
    lr = kiln.Variable(np.asarray(0.05, "float32"))
    steps = {b: _mlp_momentum(b, lr=lr) for b in ("reference", "cpu")}
    assert "gemm" in _ops(steps["cpu"][0].optimized_graph)
    rng = np.random.default_rng(4)
    for rate in (0.05, 0.5, 0.0):
        lr.assign(np.asarray(rate, "float32"))
        feeds = [rng.normal(size=(20, 12)).astype("float32"),
                 rng.integers(0, 4, 20).astype("int32")]
        for step, _ in steps.values():
            step(*feeds)
    for a, b in zip(steps["cpu"][1], steps["reference"][1]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def _forms():
    # (name, f(c, p, s, t), the sum by NumPy)
    return [
        ("t*c - s*p", lambda c, p, s, t: c * t - p * s, lambda c, p, s, t: t * c - s * p),
        ("s*p - t*c", lambda c, p, s, t: s * p - t * c, lambda c, p, s, t: s * p - t * c),
        ("c + p", lambda c, p, s, t: c + p, lambda c, p, s, t: c + p),
        ("p + c*t", lambda c, p, s, t: p + c * t, lambda c, p, s, t: p + t * c),
        ("c - p", lambda c, p, s, t: c - p, lambda c, p, s, t: c - p),
        ("p*s + c", lambda c, p, s, t: p * s + c, lambda c, p, s, t: s * p + c),
    ]


@pytest.mark.parametrize("name,build,want", _forms(), ids=[f[0] for f in _forms()])
@pytest.mark.parametrize("scalars", ["constant", "fed"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_each_form_of_the_sum_is_one_gemm(name, build, want, scalars, dtype):
    rng = np.random.default_rng(5)
    a = rng.normal(size=(13, 21)).astype(dtype)
    b = rng.normal(size=(13, 17)).astype(dtype)  # the product a.T @ b: a transposed operand
    c = rng.normal(size=(21, 17)).astype(dtype)
    s, t = np.asarray(-0.3, dtype), np.asarray(0.7, dtype)
    pa, pb, pc = (kiln.placeholder(v.shape, dtype) for v in (a, b, c))
    if scalars == "fed":
        ps, pt = kiln.placeholder((), dtype), kiln.placeholder((), dtype)
        inputs, feeds = [pa, pb, pc, ps, pt], [a, b, c, s, t]
    else:
        ps, pt = K.constant(s), K.constant(t)
        inputs, feeds = [pa, pb, pc], [a, b, c]
    # c: a kernel's result that nothing else reads (the result takes its buffer)
    out = build(K.exp(pc), K.matmul(K.transpose(pa), pb), ps, pt)
    rewritten = gemm(Graph(inputs, [out]))
    assert _ops(rewritten).count("gemm") == 1 and "matmul" not in _ops(rewritten)
    f = kiln.function(inputs, out)
    assert _ops(f.optimized_graph).count("gemm") == 1
    expect = want(np.exp(c.astype(np.float64)), a.T.astype(np.float64) @ b, float(s), float(t))
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(f(*feeds), expect, rtol=tol, atol=tol)


def test_not_rewritten_where_the_product_or_the_scaling_is_read_elsewhere():
    x, w, fed = kiln.placeholder((8, 9)), kiln.placeholder((9, 10)), kiln.placeholder((8, 10))
    c = K.exp(fed)
    assert "gemm" in _ops(gemm(Graph([x, w, fed], [c - K.matmul(x, w) * 0.5])))
    p = K.matmul(x, w)
    assert "gemm" not in _ops(gemm(Graph([x, w, fed], [c - p * 0.5, p])))  # p is an output
    assert "gemm" not in _ops(gemm(Graph([x, w, fed], [c - p * 0.5, K.exp(p)])))
    scaled = p * 0.5
    g = gemm(Graph([x, w, fed], [c - scaled, K.exp(scaled)]))  # the scaled product is needed
    assert "gemm" not in _ops(g)


def test_not_rewritten_where_the_sum_would_first_copy_its_accumulator():
    # a fed or constant c, one read elsewhere too, or a view (a time step of a sequence)
    x, w, fed = kiln.placeholder((8, 9)), kiln.placeholder((9, 10)), kiln.placeholder((8, 10))
    seq = kiln.placeholder((3, 8, 10))
    p = K.matmul(x, w)
    c = K.exp(fed)
    cases = [[fed + p], [K.constant(np.ones((8, 10), "float32")) + p], [c + p, c],
             [K.exp(seq)[1] + p]]
    for outputs in cases:
        assert "gemm" not in _ops(gemm(Graph([x, w, fed, seq], outputs)))


def test_not_rewritten_for_broadcasts_batches_or_integers():
    x, w = kiln.placeholder((8, 9)), kiln.placeholder((9, 10))
    row = kiln.placeholder((1, 10))
    assert "gemm" not in _ops(gemm(Graph([x, w, row], [K.exp(row) + K.matmul(x, w)])))
    xb, wb = kiln.placeholder((2, 8, 9)), kiln.placeholder((2, 9, 10))
    cb = kiln.placeholder((2, 8, 10))
    assert "gemm" not in _ops(gemm(Graph([xb, wb, cb], [K.exp(cb) + K.matmul(xb, wb)])))
    xi, wi, ci = (kiln.placeholder(s, "int32") for s in ((8, 9), (9, 10), (8, 10)))
    assert "gemm" not in _ops(gemm(Graph([xi, wi, ci], [K.abs(ci) + K.matmul(xi, wi)])))


def test_a_product_of_the_updated_variable_itself_is_not_written_over_its_operand():
    # w <- w - 0.1 * (w @ w): c is w, and so are both factors, in the same layout as the
    # result; BLAS must not write w while it multiplies it (the planner keeps the update out
    # of place)
    rng = np.random.default_rng(6)
    w0 = rng.normal(size=(24, 24)).astype("float32") * 0.2
    w = kiln.Variable(w0.copy())
    x = kiln.placeholder((None, 24))
    step = kiln.function([x], K.sum(K.matmul(x, w)),
                         updates=[(w, w - K.matmul(w, w) * 0.1)])
    assert "gemm" in _ops(step.optimized_graph)
    expect = w0.astype(np.float64)
    for _ in range(3):
        step(np.ones((2, 24), "float32"))
        expect = expect - 0.1 * (expect @ expect)
    np.testing.assert_allclose(w.numpy(), expect, rtol=1e-4, atol=1e-5)


def test_sums_below_the_size_limit_stay_a_matmul_and_an_elementwise_kernel(pass_options):
    pass_options(gemm_min_elements=1 << 14)
    for rows, cols, want in ((128, 127, False), (128, 128, True), (None, 255, False),
                             (None, 256, True)):  # an unknown dim counts as 64
        x, w = kiln.placeholder((rows, 9)), kiln.placeholder((9, cols))
        c = K.exp(kiln.placeholder((rows, cols)))
        g = gemm(Graph([x, w], [c - K.matmul(x, w) * 0.5]))
        assert ("gemm" in _ops(g)) == want, (rows, cols)


def test_the_pipeline_runs_the_pass_and_can_skip_it():
    x, w, c = kiln.placeholder((8, 9)), kiln.placeholder((9, 10)), kiln.placeholder((8, 10))
    g = Graph([x, w, c], [K.exp(c) * 0.9 - K.matmul(x, w) * 0.01])
    assert "gemm" in _ops(optimize(g)[0])
    assert "gemm" not in _ops(optimize(g, exclude="gemm")[0])


# ---- the kernel ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("in_place", [True, False])
def test_the_kernel_computes_the_reference_in_place_or_into_another_buffer(dtype, in_place):
    rng = np.random.default_rng(7)
    a = rng.normal(size=(40, 33)).astype(dtype)
    b = rng.normal(size=(40, 50)).astype(dtype)
    c = rng.normal(size=(33, 50)).astype(dtype)
    alpha, beta = np.asarray(-0.25, dtype), np.asarray(0.9, dtype)
    expect = alpha * (a.T.astype(np.float64) @ b) + beta * c
    acc = c.copy()
    out = acc if in_place else np.full_like(c, np.nan)
    products.gemm(a.T, b, None if in_place else acc, alpha, beta, out)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out, expect, rtol=tol, atol=tol)
    if not in_place:
        np.testing.assert_array_equal(acc, c)  # c itself is not written


def test_a_zero_scale_still_propagates_nan_like_the_reference():
    # BLAS skips C when beta == 0 and A @ B when alpha == 0: a NaN there would vanish
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=(16, 12)).astype("float32"), rng.normal(size=(12, 10)).astype("float32")
    c = rng.normal(size=(16, 10)).astype("float32")
    c[3, 4] = np.nan
    out = np.empty_like(c)
    zero, one = np.asarray(0.0, "float32"), np.asarray(1.0, "float32")
    products.gemm(a, b, c, one, zero, out)
    assert np.isnan(out[3, 4]) and np.isfinite(np.delete(out.ravel(), 3 * 10 + 4)).all()
    a[2, 5] = np.nan
    products.gemm(a, b, np.zeros_like(c), zero, one, out)
    assert np.isnan(out[2]).all() and np.isfinite(np.delete(out, 2, axis=0)).all()


def test_the_op_names_itself_and_the_shapes_it_refuses():
    from kiln.core.ops.registry import apply

    m = {s: kiln.placeholder(s) for s in ((3, 4), (4, 5), (3, 5), (5, 5), (2,))}
    one = kiln.placeholder(())
    with pytest.raises(ValueError, match=r"gemm: cannot multiply \(3, 4\) by \(5, 5\)"):
        apply("gemm", m[(3, 4)], m[(5, 5)], m[(3, 5)], one, one)
    with pytest.raises(ValueError, match=r"gemm: c must have the product's shape \(3, 5\), "
                                         r"received \(5, 5\)"):
        apply("gemm", m[(3, 4)], m[(4, 5)], m[(5, 5)], one, one)
    with pytest.raises(ValueError, match=r"gemm: alpha and beta must be scalars, received \(2,\)"):
        apply("gemm", m[(3, 4)], m[(4, 5)], m[(3, 5)], m[(2,)], one)
    with pytest.raises(TypeError, match="gemm: expected float32 or float64 operands, received "
                                        "int32"):
        ints = [kiln.placeholder(s, "int32") for s in ((3, 4), (4, 5), (3, 5), (), ())]
        apply("gemm", *ints)
