"""The CPU executor: plans, buffers and views, in-place updates, the reference fallback, random
kernels, the profiler, and a whole training step against the reference backend."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends import cpu, lowering
from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.registry import BUILDERS
from kiln.core.ir import Graph


def _mlp(backend: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = kiln.placeholder((None, 12), name="x")
    y = kiln.placeholder((None,), "int32", name="y")
    sizes = [12, 16, 8, 4]
    params, h = [], x
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = kiln.Variable(rng.normal(size=(a, b)) * np.sqrt(2 / a), name=f"w{i}")
        bias = kiln.Variable(rng.normal(size=(b,)) * 0.1, name=f"b{i}")
        params += [w, bias]
        h = h @ w + bias
        if i < len(sizes) - 2:
            h = K.relu(h)
    loss = K.mean(K.sparse_softmax_cross_entropy(h, y))
    grads = kiln.grad(loss, params)
    vel = [kiln.Variable(np.zeros(p.shape)) for p in params]
    updates = []
    for p, g, v in zip(params, grads, vel):
        new_v = 0.9 * v - 0.05 * g
        updates += [(v, new_v), (p, p + new_v)]
    step = kiln.function([x, y], loss, updates=updates, backend=backend)
    return step, params + vel


@pytest.mark.nojit
def test_mlp_training_steps_match_the_reference_backend():
    rng = np.random.default_rng(3)
    data = rng.normal(size=(5, 10, 12)).astype("float32")
    labels = rng.integers(0, 4, size=(5, 10)).astype("int32")
    losses = {}
    weights = {}
    for backend in ("reference", "cpu"):
        step, variables = _mlp(backend)
        losses[backend] = [float(step(data[i], labels[i])) for i in range(5)]
        weights[backend] = [v.numpy() for v in variables]
    np.testing.assert_allclose(losses["cpu"], losses["reference"], rtol=1e-5)
    for a, b in zip(weights["cpu"], weights["reference"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_updates_are_written_in_place_and_returned_as_the_variable_buffer():
    step, variables = _mlp("cpu")
    rng = np.random.default_rng(0)
    feeds = [rng.normal(size=(6, 12)).astype("float32"), rng.integers(0, 4, 6).astype("int32")]
    step(*feeds)
    plan = step.program.plan(feeds)
    assert plan.info["inplace_updates"] == len(variables)
    n = len(step.outputs)
    for (var, _), out in zip(step.updates, plan.outputs[n:]):
        assert out is var.value


@pytest.mark.nojit
def test_updates_read_old_values_even_when_they_cross():
    a = kiln.Variable(np.array([1.0, 2.0]))
    b = kiln.Variable(np.array([10.0, 20.0]))
    c = kiln.Variable(np.array([3.0, 4.0]))
    x = kiln.placeholder((2,))
    f = kiln.function([x], [a + x, c * 1.0],
                      updates=[(a, b), (b, a + b), (c, c * a - b), (a, a * 0.0 + x)],
                      backend="cpu")
    out = f(np.array([0.5, 0.5]))
    np.testing.assert_allclose(out[0], [1.5, 2.5])
    np.testing.assert_allclose(out[1], [3.0, 4.0])
    np.testing.assert_allclose(b.numpy(), [11.0, 22.0])
    np.testing.assert_allclose(c.numpy(), [3 * 1 - 10, 4 * 2 - 20])
    np.testing.assert_allclose(a.numpy(), [0.5, 0.5])  # the last update of a wins


@pytest.mark.nojit
def test_views_keep_their_storage_alive_against_buffer_reuse():
    x = kiln.placeholder((None, 6))
    a = K.exp(x)
    r = K.reshape(a, (-1, 3, 2))          # a view of a's buffer
    t = K.transpose(r, (0, 2, 1))          # another view
    b = K.sin(x) + 1.0                      # may take a's buffer if a looked dead
    c = K.tanh(b) * 2.0
    out = K.reshape(t, (-1, 6)) + c
    f = kiln.function([x], [out, K.sum(t, axis=1)], backend="cpu")
    xv = np.random.default_rng(0).normal(size=(4, 6)).astype("float32")
    e = np.exp(xv).reshape(-1, 3, 2).transpose(0, 2, 1)
    got = f(xv)
    np.testing.assert_allclose(got[0], e.reshape(-1, 6) + np.tanh(np.sin(xv) + 1) * 2,
                               rtol=1e-5)
    np.testing.assert_allclose(got[1], e.sum(1), rtol=1e-5)


def test_plans_are_cached_per_input_shapes_and_buffers_are_reused():
    step, _ = _mlp("cpu")
    rng = np.random.default_rng(0)
    feeds = [rng.normal(size=(8, 12)).astype("float32"), rng.integers(0, 4, 8).astype("int32")]
    step(*feeds)
    plan = step.program.plan(feeds)
    step(*feeds)
    assert step.program.plan(feeds) is plan
    assert plan.info["buffers"] < plan.info["kernels"]
    assert plan.info["memory"] == "plan_memory"


@pytest.mark.nojit
def test_non_contiguous_feeds():
    x = kiln.placeholder((None, 3))
    f = kiln.function([x], K.exp(x) @ np.ones((3, 2), "float32"), backend="cpu")
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(3, 5)).astype("float32").T  # strided
    np.testing.assert_allclose(f(xv), np.exp(xv) @ np.ones((3, 2)), rtol=1e-5)
    np.testing.assert_allclose(f(xv[::2]), np.exp(xv[::2]) @ np.ones((3, 2)), rtol=1e-5)
    # contiguous feeds are read in place, others copied: alternate between the two
    for xs in (np.ascontiguousarray(xv), xv, rng.normal(size=(5, 3)).astype("float32"), xv):
        np.testing.assert_allclose(f(xs), np.exp(xs) @ np.ones((3, 2)), rtol=1e-5)
    big = rng.normal(size=(4096, 3)).astype("float32")
    readonly = np.frombuffer(big.tobytes(), np.float32).reshape(4096, 3)  # bound, read-only
    np.testing.assert_allclose(f(readonly), np.exp(big) @ np.ones((3, 2)), rtol=1e-5)
    assert f.program.plan([readonly]).info["bound_feeds"] == 1
    g = kiln.function([x], [x * 1.0, x], backend="cpu")  # an output that is the feed itself
    for xs in (np.ascontiguousarray(xv), xv * 2):
        got = g(xs)
        np.testing.assert_array_equal(got[0], xs)
        np.testing.assert_array_equal(got[1], xs)


def _conv_reference(x, w, padding):
    from kiln.core.ops import all_ops

    return all_ops()["conv2d"].ref(x.astype("float64"), w.astype("float64"), strides=(1, 1),
                                   padding=padding, dilation=(1, 1))


@pytest.mark.parametrize("native_tile", [True, False])
def test_a_padded_convolution_of_a_large_feed_reads_the_fed_values(native_tile, monkeypatch,
                                                                   cpu_options):
    # A fed input of at least bind_min_bytes is read in place (its buffer never written); the
    # zero-bordered copy of a "same" convolution must copy the fed array, not the buffer (it
    # once copied the buffer: garbage, or zeros, for any 'same' first layer on a large batch)

    cpu_options(native_tile=native_tile)
    rng = np.random.default_rng(30)
    w = rng.normal(size=(5, 5, 8, 16)).astype("float32") * 0.1
    x = kiln.placeholder((None, 12, 12, 8))
    f = kiln.function([x], K.conv2d(x, K.constant(w), padding="same"), backend="cpu")
    for scale in (1, -2):  # a new fed array each call
        xv = rng.normal(size=(9, 12, 12, 8)).astype("float32") * scale
        assert xv.nbytes >= options.CpuOptions.bind_min_bytes
        np.testing.assert_allclose(f(xv), _conv_reference(xv, w, "same"), rtol=1e-4, atol=1e-4)
    assert f.program.plan([xv]).info["bound_feeds"] == 1  # still read in place


def test_a_feed_held_where_the_plan_cannot_rebind_it_is_copied():
    # x feeds a Winograd pipeline (its chunks hold views of x inside a SplitCall) and a sum
    # (x as an argument): the plan cannot rebuild the pipeline's views, so x is copied into
    # its buffer on every call and both read the fed values
    from kiln.core.backends.cpu.runtime import feeds, threads

    rng = np.random.default_rng(31)
    w = rng.normal(size=(3, 3, 16, 16)).astype("float32") * 0.1
    x = kiln.placeholder((None, 14, 14, 16))
    f = kiln.function([x], [K.conv2d(x, K.constant(w), padding="same"), K.sum(x * x)],
                      backend="cpu")
    for scale in (1, 3):
        xv = rng.normal(size=(6, 14, 14, 16)).astype("float32") * scale
        y, s = f(xv)
        np.testing.assert_allclose(y, _conv_reference(xv, w, "same"), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(s, (xv.astype("float64") ** 2).sum(), rtol=1e-5)
    plan = f.program.plan([xv])
    assert any(s.label.endswith("winograd_pipeline") for s in plan.steps)
    assert plan.info["bound_feeds"] == 0
    # what the binding looks through: a SplitCall's function, nested containers, a partial
    a = np.zeros(4)
    deep = [[[[[a]]]]]
    split = threads.SplitCall(print, 2, lambda args, k: (deep[0], k))
    assert any(h is a for h in feeds.closure_arrays(split))
    import functools
    assert any(h is a for h in feeds.closure_arrays(functools.partial(print, {"k": (a,)})))


def test_op_without_kernel_falls_back_to_its_reference_with_one_warning(monkeypatch):
    monkeypatch.delitem(BUILDERS, "argmax")
    monkeypatch.setattr(lowering, "_warned", set())
    x = kiln.placeholder((None, 4))
    xv = np.random.default_rng(0).normal(size=(3, 4)).astype("float32")
    with pytest.warns(RuntimeWarning, match="no kernel for op 'argmax'"):
        f = kiln.function([x], K.argmax(x, 1), backend="cpu")
        got = f(xv)
    np.testing.assert_array_equal(got, xv.argmax(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = kiln.function([x], K.argmax(x * 2.0, 1), backend="cpu")
        np.testing.assert_array_equal(g(xv), xv.argmax(1))


@pytest.mark.nojit
@pytest.mark.parametrize("op", ["random_uniform", "random_normal"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_kernels_are_bit_identical_to_the_reference(op, dtype):
    key = kiln.placeholder((2,), "int64")
    like = kiln.placeholder((None, 7), dtype)
    fn = getattr(K, op)
    outs = [fn(key, like, salt=s) for s in (0, 3, 2**40 + 5)]
    f_cpu = kiln.function([key, like], outs, backend="cpu")
    f_ref = kiln.function([key, like], outs, backend="reference")
    for k in ([0, 0], [7, 3], [-5, 2**62], [123456789, -1]):
        kv = np.array(k, np.int64)
        lv = np.zeros((33, 7), dtype)
        for a, b in zip(f_cpu(kv, lv), f_ref(kv, lv)):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)


def test_dropout_matches_the_reference():
    key = kiln.placeholder((2,), "int64")
    x = kiln.placeholder((None, 50))
    y = K.dropout(x, 0.3, key, salt=11)
    kv = np.array([42, 9], np.int64)
    xv = np.random.default_rng(0).normal(size=(20, 50)).astype("float32")
    got = kiln.function([key, x], y, backend="cpu")(kv, xv)
    want = kiln.function([key, x], y, backend="reference")(kv, xv)
    np.testing.assert_array_equal(got, want)


def test_profile_prints_time_per_kernel_and_per_kind(capsys, monkeypatch):
    step, _ = _mlp("cpu")
    rng = np.random.default_rng(0)
    feeds = [rng.normal(size=(8, 12)).astype("float32"), rng.integers(0, 4, 8).astype("int32")]
    loss = step.profile(*feeds)
    text = capsys.readouterr().out
    assert np.isfinite(loss[0]) if isinstance(loss, list) else True
    assert "kiln cpu profile" in text and "matmul" in text and "by kind" in text
    assert "linalg" in text and "sparse_softmax_cross_entropy" in text
    monkeypatch.setenv("KILN_PROFILE", "1")
    x = kiln.placeholder((None, 3))
    f = kiln.function([x], K.exp(x) + 1.0, backend="cpu")
    f(np.ones((2, 3), "float32"))
    assert "kiln cpu profile" in capsys.readouterr().out


def test_unused_inputs_are_accepted():
    x = kiln.placeholder((None, 3))
    unused = kiln.placeholder((None, 2))
    f = kiln.function([x, unused], K.exp(x), backend="cpu")
    xv = np.ones((2, 3), "float32")
    np.testing.assert_allclose(f(xv, np.ones((4, 2), "float32")), np.exp(xv), rtol=1e-6)


def test_compile_graph_takes_updates_explicitly():
    v = kiln.Variable(np.array([1.0, 2.0, 3.0]))
    x = kiln.placeholder((3,))
    new = v * 2.0 + x
    prog = cpu.compile_graph(Graph([x], [new * 1.0, new]), updates=[(1, v)])
    outs = prog.run([np.ones(3, "float32")])
    assert outs[1] is v.value
    np.testing.assert_allclose(v.value, [3.0, 5.0, 7.0])
    np.testing.assert_allclose(outs[0], [3.0, 5.0, 7.0])


@pytest.mark.nojit
def test_adam_updates_run_as_one_loop_per_parameter_and_match_the_reference():
    def build(backend):
        rng = np.random.default_rng(5)
        x = kiln.placeholder((None, 5))
        w = kiln.Variable(rng.normal(size=(5, 3)))
        b = kiln.Variable(np.zeros(3))
        loss = K.mean(K.square(x @ w + b))
        params = [w, b]
        grads = kiln.grad(loss, params)
        t = kiln.Variable(np.zeros(()))
        t_new = t + 1.0
        corr = K.sqrt(1.0 - 0.999 ** t_new) / (1.0 - 0.9 ** t_new) * 0.01
        updates = [(t, t_new)]
        for p, g in zip(params, grads):
            m = kiln.Variable(np.zeros(p.shape))
            v = kiln.Variable(np.zeros(p.shape))
            m_new = 0.9 * m + 0.1 * g
            v_new = 0.999 * v + 0.001 * K.square(g)
            updates += [(m, m_new), (v, v_new), (p, p - corr * m_new / (K.sqrt(v_new) + 1e-7))]
        return kiln.function([x], loss, updates=updates, backend=backend), params
    data = np.random.default_rng(6).normal(size=(4, 8, 5)).astype("float32")
    results = {}
    for backend in ("reference", "cpu"):
        f, params = build(backend)
        results[backend] = ([float(f(d)) for d in data], [p.numpy() for p in params])
        if backend == "cpu":
            groups = ["+".join(m.op for m in g) for g in f.program.groups.values()]
            assert sum(len(g.split("+")) == 3 for g in groups) == 2, groups  # m, v, p per param
    np.testing.assert_allclose(results["cpu"][0], results["reference"][0], rtol=1e-5)
    for a, b in zip(results["cpu"][1], results["reference"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.nojit
def test_feeding_a_variable_buffer_that_is_updated_in_place():
    w = kiln.Variable(np.arange(4096 * 4, dtype="float32").reshape(4096, 4) / 1000)
    x = kiln.placeholder((None, 4))
    out = K.relu(x @ np.ones((4, 3), "float32") + 1.0)  # runs after the update of w
    f = kiln.function([x], out, updates=[(w, w * 0.5 + 1.0)], backend="cpu")
    before = w.numpy()
    got = f(w.value)  # the feed IS the buffer the update overwrites
    np.testing.assert_allclose(got, np.maximum(before @ np.ones((4, 3)) + 1, 0), rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), before * 0.5 + 1, rtol=1e-6)


def test_thread_pools_are_configured_to_sleep_between_kernels():
    import os

    from kiln.core.backends.cpu.runtime import threads

    status = threads.configure()
    assert os.environ["OMP_WAIT_POLICY"] == status["omp_wait_policy"]
    assert "OPENBLAS_THREAD_TIMEOUT" in os.environ
    assert "openblas_thread_timeout" in status


def test_a_fed_array_overlapping_any_written_buffer_is_found():
    # Plan._overlaps_written bisects the written ranges: the same answer as checking each
    from kiln.core.backends.cpu.runtime.program import Plan

    rng = np.random.default_rng(0)
    for _ in range(200):
        starts = rng.integers(0, 10_000, rng.integers(0, 12))
        written = [(int(a), int(a + rng.integers(1, 3_000))) for a in starts]  # may overlap
        base = np.zeros(14_000, np.uint8)
        origin = base.__array_interface__["data"][0]
        plan = Plan(steps=[], feed_buffers=[], outputs=[], var_checks=[],
                    written=[(origin + a, origin + b) for a, b in written])
        for _probe in range(20):
            lo = int(rng.integers(0, 13_000))
            n = int(rng.integers(1, 1_000))
            brute = any(a < lo + n and lo < b for a, b in written)
            assert plan._overlaps_written(base[lo:lo + n]) == brute, (written, lo, n)


@pytest.mark.nojit
def test_feeding_one_of_many_updated_variables():
    ws = [kiln.Variable(np.full((4096, 4), float(i), "float32")) for i in range(30)]
    x = kiln.placeholder((None, 4))
    out = K.relu(x @ np.ones((4, 3), "float32") + 1.0)  # runs after the updates, as above
    f = kiln.function([x], out, updates=[(w, w * 0.5 + 1.0) for w in ws], backend="cpu")
    got = f(ws[17].value[100:])  # 64 KB inside the 18th buffer, which the step rewrites
    np.testing.assert_allclose(got, np.full((3996, 3), 17.0 * 4 + 1))
    np.testing.assert_allclose(ws[17].numpy(), 17.0 * 0.5 + 1)


def test_the_pointer_a_plan_reads_is_the_arrays_data_address():
    # Plan._pointer: read from the ndarray object where the native path checked its offset,
    # else __array_interface__; either way the address of the first element
    from kiln.core.backends.cpu.runtime.program import Plan

    plan = Plan(steps=[], feed_buffers=[], outputs=[], var_checks=[])
    base = np.arange(6000, dtype=np.float32).reshape(60, 100)
    for a in (base, base[7:], base[:, 3:], base[::2, ::-3], base.T, base[5:6, 4:5],
              base.view(np.uint8)[1:], np.zeros(0), np.float64(2.5) * np.ones(3)):
        assert plan._pointer(a) == a.__array_interface__["data"][0]


@pytest.mark.nojit
def test_a_feed_view_is_the_array_its_reshape_or_a_new_view_with_the_same_values():
    from kiln.core.backends.cpu.runtime import feeds

    buf = np.empty((8, 6, 5), np.float32)
    fed = np.arange(240, dtype=np.float32).reshape(8, 6, 5)
    ref = np.ndarray
    cases = [(0, (8, 6, 5), buf.strides, "whole"), (0, (48, 5), (20, 4), "reshape"),
             (0, (240,), (4,), "reshape"), (120, (6, 5), (20, 4), "view"),
             (0, (5, 48), (4, 20), "view"), (4, (8, 6, 4), buf.strides, "view")]
    for offset, shape, strides, kind in cases:
        view = feeds.view_maker(buf, offset, shape, strides)
        got = view(fed)
        want = ref(shape, np.float32, buffer=fed, offset=offset, strides=strides)
        np.testing.assert_array_equal(got, want)
        assert np.shares_memory(got, fed)
        assert (got is fed) == (kind == "whole"), (offset, shape, kind)
        assert got.shape == shape and got.strides == strides


def test_bound_feeds_switch_between_in_place_and_copied_and_back():
    # a contiguous feed is read in place; a strided one is copied into the buffer (the steps
    # then read the buffer); the next contiguous feed is read in place again
    x = kiln.placeholder((None, 64))
    w = np.random.default_rng(1).normal(size=(64, 8)).astype(np.float32)
    f = kiln.function([x], K.relu(x @ w) + K.sum(x, axis=1, keepdims=True), backend="cpu")
    rng = np.random.default_rng(2)
    big = rng.normal(size=(256, 128)).astype(np.float32)
    for a in (big[:, :64].copy(), big[:, ::2], big[:, 64:].copy(), big[:, 1::2],
              np.ascontiguousarray(big[:, 32:96])):
        want = np.maximum(a @ w, 0) + a.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(f(a), want, rtol=1e-5, atol=1e-4)
    assert f.program.plan([big[:, :64].copy()]).info["bound_feeds"] == 1


def test_a_kernel_reading_two_bound_feeds_sees_both_new_arrays_on_each_call():
    # both feeds are read in place by the same kernels: each call must rebind both arguments
    x = kiln.placeholder((None, 4096))
    y = kiln.placeholder((None, 4096))
    f = kiln.function([x, y], [K.sum(x * y, axis=1), K.softmax_cross_entropy(x, y)],
                      backend="cpu")
    rng = np.random.default_rng(3)
    for _ in range(3):
        a = rng.normal(size=(8, 4096)).astype(np.float32)
        b = rng.dirichlet(np.ones(4096), size=8).astype(np.float32)
        got_dot, got_xent = f(a, b)
        np.testing.assert_allclose(got_dot, (a * b).sum(axis=1), rtol=1e-4, atol=1e-6)
        a64 = a.astype(np.float64)
        lsm = a64 - a64.max(1, keepdims=True)
        lsm -= np.log(np.exp(lsm).sum(1, keepdims=True))
        np.testing.assert_allclose(got_xent, -(b * lsm).sum(1), rtol=1e-4)
    assert f.program.plan([a, b]).info["bound_feeds"] == 2
