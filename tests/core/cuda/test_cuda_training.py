"""Gradients, training steps, random streams, residency of Variables, fallbacks and views on
the cuda backend (under the simulator), each against the reference backend."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("numba.cuda")
pytest.importorskip("numba_cuda")

import kiln  # noqa: E402
import kiln.ops as K  # noqa: E402
from kiln.core.backends import cuda as kcuda  # noqa: E402
from kiln.core.backends import lowering  # noqa: E402
from kiln.core.backends.cuda import _lower, _resident  # noqa: E402
from kiln.core.ops.random import uniform_bits  # noqa: E402


def _both(inputs, outputs, feeds, updates_fn=None, steps=1, rtol=1e-5, atol=1e-6):
    """Runs the same graph on the reference and the cuda backend and compares all outputs."""
    results = {}
    for backend in ("reference", "cuda"):
        outs = kiln.function(inputs, outputs, backend=backend, optimize=False)(*feeds)
        results[backend] = outs
    for got, want in zip(results["cuda"], results["reference"]):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return results["cuda"]


# ---- gradients -----------------------------------------------------------------------------------
def test_mlp_gradients_match_reference():
    rng = np.random.default_rng(0)
    x = kiln.placeholder((None, 6))
    y = kiln.placeholder((None,), "int32")
    w1 = kiln.Variable(rng.normal(size=(6, 5)) * 0.5)
    b1 = kiln.Variable(rng.normal(size=(5,)) * 0.1)
    w2 = kiln.Variable(rng.normal(size=(5, 3)) * 0.5)
    logits = K.relu(x @ w1 + b1) @ w2
    loss = K.mean(K.sparse_softmax_cross_entropy(logits, y))
    grads = kiln.grad(loss, [w1, b1, w2])
    _both([x, y], [loss, *grads], [rng.normal(size=(4, 6)).astype(np.float32),
                                   np.array([0, 2, 1, 2], np.int32)])


@pytest.mark.parametrize("split_k", [0, 3])
def test_convnet_gradients_match_reference(monkeypatch, split_k):
    # the kernel gradient as one GEMM, or split in 3 K pieces added atomically
    monkeypatch.setattr(_lower, "CONV_SPLIT_K", split_k)
    rng = np.random.default_rng(1)
    x = kiln.placeholder((None, 6, 6, 1))
    w = kiln.Variable(rng.normal(size=(3, 3, 1, 2)) * 0.5)
    v = kiln.Variable(rng.normal(size=(8, 3)) * 0.5)
    lab = kiln.placeholder((None, 3))
    h = K.max_pool2d(K.relu(K.conv2d(x, w, padding="same")), 3)
    h = K.avg_pool2d(h, 1)
    logits = K.reshape(h, (-1, 8)) @ v
    loss = K.sum(K.softmax_cross_entropy(logits, lab))
    grads = kiln.grad(loss, [w, v, x])
    labels = np.eye(3, dtype=np.float32)[[0, 2]]
    _both([x, lab], [loss, *grads], [rng.normal(size=(2, 6, 6, 1)).astype(np.float32), labels],
          rtol=1e-4, atol=1e-5)


def test_movement_and_reduction_gradients_match_reference():
    rng = np.random.default_rng(2)
    x = kiln.placeholder((3, 4))
    e = kiln.Variable(rng.normal(size=(5, 4)))
    idx = kiln.placeholder((3,), "int32")
    g = K.take(e, idx, axis=0)                        # embedding lookup -> take_grad (atomics)
    z = K.concatenate([x[:, ::-1], K.transpose(g.T[::-1, :])], axis=0)  # strided views
    z = K.pad(z, ((1, 0), (0, 2)), 0.5)
    loss = (K.sum(K.logsumexp(z, axis=1)) + K.sum(K.max(z, axis=0) * K.tanh(K.mean(z)))
            + K.sum(K.log_softmax(z, axis=0) * 0.1))
    grads = kiln.grad(loss, [x, e])
    _both([x, idx], [loss, *grads], [rng.normal(size=(3, 4)).astype(np.float32),
                                     np.array([4, 0, 4], np.int32)])


# ---- training ------------------------------------------------------------------------------------
def _mlp_step(backend: str, data, seed: int = 0, optimize: bool = False, adam: bool = False):
    rng = np.random.default_rng(seed)
    x = kiln.placeholder((None, 8), name="x")
    y = kiln.placeholder((None,), "int32", name="y")
    params = [kiln.Variable(rng.normal(size=(8, 16)) * 0.3), kiln.Variable(np.zeros(16)),
              kiln.Variable(rng.normal(size=(16, 4)) * 0.3), kiln.Variable(np.zeros(4))]
    h = K.relu(x @ params[0] + params[1])
    loss = K.mean(K.sparse_softmax_cross_entropy(h @ params[2] + params[3], y))
    grads = kiln.grad(loss, params)
    updates = []
    if adam:
        t = kiln.Variable(np.zeros(()))
        t_new = t + 1.0
        updates.append((t, t_new))
        corr = K.sqrt(1.0 - 0.999 ** t_new) / (1.0 - 0.9 ** t_new) * 0.05
    for p, g in zip(params, grads):
        if adam:
            m, v = kiln.Variable(np.zeros(p.shape)), kiln.Variable(np.zeros(p.shape))
            m_new, v_new = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * K.square(g)
            updates += [(m, m_new), (v, v_new), (p, p - corr * m_new / (K.sqrt(v_new) + 1e-7))]
        else:
            v = kiln.Variable(np.zeros(p.shape))
            new_v = 0.9 * v - 0.1 * g
            updates += [(v, new_v), (p, p + new_v)]
    fn = kiln.function([x, y], loss, updates=updates, backend=backend, optimize=optimize)
    losses = [float(fn(xb, yb)) for xb, yb in data]
    if backend == "cuda":
        assert not [k for k in fn.program.kernel_labels() if k.endswith("(host)")]
        if optimize:
            assert "fused" in fn.program.kernel_labels()
    return losses, [p.numpy() for p in params]


@pytest.mark.parametrize("optimize,adam", [(False, False), (True, True)])
def test_mlp_training_steps_match_reference(optimize, adam):
    rng = np.random.default_rng(3)
    batch = (rng.normal(size=(6, 8)).astype(np.float32), rng.integers(0, 4, 6).astype(np.int32))
    data = [batch] * 3
    data.append((data[0][0][:5], data[0][1][:5]))  # a smaller last batch: a second plan
    ref_losses, ref_params = _mlp_step("reference", data, optimize=optimize, adam=adam)
    cuda_losses, cuda_params = _mlp_step("cuda", data, optimize=optimize, adam=adam)
    np.testing.assert_allclose(cuda_losses, ref_losses, rtol=1e-5)
    assert cuda_losses[2] < cuda_losses[0]
    for got, want in zip(cuda_params, ref_params):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_updates_are_computed_from_old_values_and_can_swap():
    a = kiln.Variable(np.array([1.0, 2.0]))
    b = kiln.Variable(np.array([10.0, 20.0]))
    x = kiln.placeholder((2,))
    f = kiln.function([x], a + x, updates=[(a, b), (b, a + b)], backend="cuda")
    np.testing.assert_allclose(f(np.array([0.5, 0.5])), [1.5, 2.5])
    np.testing.assert_allclose(a.numpy(), [10.0, 20.0])
    np.testing.assert_allclose(b.numpy(), [11.0, 22.0])
    a.assign([0.0, 0.0])  # a host write is seen by the next call
    np.testing.assert_allclose(f(np.array([1.0, 1.0])), [1.0, 1.0])


# ---- random numbers ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_streams_are_bit_identical_to_reference(dtype):
    key = kiln.placeholder((2,), "int64")
    like = K.broadcast_to(K.constant(np.zeros((), dtype)), (7, 5))
    outs = [K.random_uniform(key, like, salt=3), K.random_normal(key, like, salt=3),
            K.random_uniform(key, like, salt=4), K.dropout(K.constant(np.ones((7, 5), dtype)),
                                                           0.5, key, salt=2)]
    for k in (np.array([7, 3], np.int64), np.array([-1, 2**62], np.int64)):
        ref = kiln.function([key], outs, backend="reference")(k)
        got = kiln.function([key], outs, backend="cuda")(k)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[2], ref[2])
        np.testing.assert_array_equal(got[3], ref[3])
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-12 if dtype == "float64" else 0,
                                   atol=0)
        bits = uniform_bits(k, 3, 35).reshape(7, 5).astype(dtype)
        np.testing.assert_array_equal(got[0], bits)


# ---- Variables on the device ---------------------------------------------------------------------
class HookedVariable(kiln.Variable):
    """A Variable implementing the proposed residency protocol (_version, _device_pull)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._version = 0
        self._device_pull = None
        self.pulls = 0

    @property
    def value(self):
        if self._device_pull is not None:
            self.pulls += 1
            self._device_pull(self)
        return self._value

    def numpy(self):
        return self.value.copy()

    def assign(self, value):
        self._device_pull = None
        self._value[...] = np.asarray(value, self.dtype)
        self._version += 1
        return self


def test_bound_updates_stay_on_device_until_read():
    w = HookedVariable(np.array([1.0, 2.0, 3.0]))
    x = kiln.placeholder((3,))
    fn = kiln.function([x], K.sum(w * x), backend="cuda")
    prog = kcuda.compile_graph(kiln.Graph([x], [K.sum(w * x), w * 2.0]))
    prog.bind_updates([w])
    assert prog.updates_on_device
    out = prog.run([np.ones(3, np.float32)])
    np.testing.assert_allclose(out[0], 6.0)
    assert out[1] is w._value                      # the executor must not write it
    np.testing.assert_array_equal(w._value, [1, 2, 3])  # host is stale: no copy-back per step
    out = prog.run([np.ones(3, np.float32)])
    np.testing.assert_allclose(out[0], 12.0)       # the device copy was updated in place
    assert w.pulls == 0
    np.testing.assert_array_equal(w.numpy(), [4, 8, 12])  # reading pulls once
    assert w.pulls == 1 and w._device_pull is None
    np.testing.assert_allclose(fn(np.ones(3, np.float32)), 24.0)  # no re-upload needed
    w.assign([1.0, 1.0, 1.0])                      # host write: version bump -> re-upload
    np.testing.assert_allclose(prog.run([np.ones(3, np.float32)])[0], 3.0)
    prog.run([np.ones(3, np.float32)])
    kcuda.sync_to_host()
    np.testing.assert_array_equal(w._value, [4, 4, 4])
    assert w.pulls == 1                            # sync_to_host pulled, not a read
    prog.run([np.ones(3, np.float32)])             # device newer again ([8, 8, 8])...
    w.assign([5.0, 5.0, 5.0])                      # ...but a host write wins
    kcuda.sync_to_host()
    np.testing.assert_array_equal(w.numpy(), [5, 5, 5])
    np.testing.assert_allclose(prog.run([np.ones(3, np.float32)])[0], 15.0)


def test_variables_without_the_protocol_are_updated_eagerly(monkeypatch):
    monkeypatch.setattr(_resident, "supports_residency", lambda var: False)
    w = kiln.Variable(np.array([1.0, 2.0]))
    prog = kcuda.compile_graph(kiln.Graph([], [w * 2.0]))
    prog.bind_updates([w])
    assert not prog.updates_on_device              # no _version/_device_pull: eager
    (new,) = prog.run([])
    np.testing.assert_array_equal(new, [2.0, 4.0])
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])  # the executor writes it, not us
    f = kiln.function([], w * 2.0, updates=[(w, w + 1.0)], backend="cuda")
    f()
    f()
    np.testing.assert_array_equal(w.numpy(), [3.0, 4.0])


def test_executor_keeps_updates_on_device_when_variables_support_it():
    if not _resident.supports_residency(kiln.Variable(0.0)):
        pytest.skip("kiln.Variable has no _version/_device_pull yet (see the cuda backend)")
    w = kiln.Variable(np.array([1.0, 2.0]))
    f = kiln.function([], K.sum(w), updates=[(w, w * 2.0)], backend="cuda")
    assert f.program.updates_on_device
    assert float(f()) == 3.0 and float(f()) == 6.0
    assert w._device_pull is not None              # the host copy is stale, and knows it
    np.testing.assert_array_equal(w.numpy(), [4.0, 8.0])
    w.assign([1.0, 1.0])
    assert float(f()) == 2.0
    g = kiln.function([], K.sum(w), updates=[(w, w + 1.0)], backend="reference")
    assert float(g()) == 4.0                       # the reference backend read the device value
    assert float(f()) == 6.0                       # and cuda re-uploaded after the host write


def test_resident_copies_are_shared_and_freed():
    w = kiln.Variable(np.ones(4))
    x = kiln.placeholder((4,))
    f = kiln.function([x], w * x, backend="cuda")
    g = kiln.function([x], w + x, backend="cuda")
    f(np.ones(4))
    g(np.ones(4))
    assert f.program.last_plan.params[0][1] is g.program.last_plan.params[0][1]
    import gc

    v = kiln.Variable(np.ones(3))
    gc.collect()  # let Variables of earlier tests go first, so the count below is exact
    _resident.resident(v)
    n = len(_resident._residents)
    del v
    gc.collect()
    assert len(_resident._residents) == n - 1


# ---- fallbacks, views, plans ---------------------------------------------------------------------
def test_op_without_kernel_falls_back_to_host_with_one_warning(monkeypatch):
    def no_kernel(self, node, ins, t):
        raise _lower.cg.Untranslatable("disabled for the test")

    monkeypatch.setitem(_lower.KERNELS, "one_hot", no_kernel)
    monkeypatch.setattr(lowering, "_warned", set())
    idx = kiln.placeholder((None,), "int32")
    y = K.one_hot(idx, 4) * 2.0
    with pytest.warns(RuntimeWarning, match="no kernel for op 'one_hot'.*on the host"):
        fn = kiln.function([idx], y, backend="cuda")
        out = fn(np.array([1, 3, -1], np.int32))
    np.testing.assert_array_equal(out, [[0, 2, 0, 0], [0, 0, 0, 2], [0, 0, 0, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kiln.function([idx], y + 1.0, backend="cuda")(np.array([0], np.int32))
    assert "one_hot (host)" in fn.program.kernel_labels()


def test_views_need_no_copies_and_strided_reads_are_right():
    rng = np.random.default_rng(4)
    x = kiln.placeholder((None, 4, 3))
    w = kiln.Variable(rng.normal(size=(5, 3)))
    y = K.transpose(x, (0, 2, 1))[:, ::-1, 1:] @ K.expand_dims(w.T[:, 1:], 0)[:, :, ::2]
    y = K.reshape(y, (-1, 6)) + K.broadcast_to(K.constant(np.arange(6, dtype=np.float32)),
                                               (1, 6))
    z = K.reshape(K.transpose(x, (0, 2, 1)), (-1, 12))  # needs a copy
    xv = rng.normal(size=(2, 4, 3)).astype(np.float32)
    out = _both([x], [y, K.squeeze(y[:, None, :2], 1), z], [xv])
    assert out[0].shape == (2, 6)
    f = kiln.function([x], y, backend="cuda")
    f(xv)
    assert f.program.kernel_labels() == ["matmul", "add"]  # strided views, no copies
    g = kiln.function([x], z * 2.0, backend="cuda")
    g(xv)
    assert g.program.kernel_labels() == ["materialize", "mul"]


def test_batch_sizes_get_their_own_plans_and_share_the_arena():
    x = kiln.placeholder((None, 3))
    f = kiln.function([x], K.sum(K.exp(x) * 2.0, axis=1), backend="cuda")
    for n in (2, 9, 2, 0, 9):
        xv = np.linspace(-1, 1, n * 3, dtype=np.float32).reshape(n, 3)
        np.testing.assert_allclose(f(xv), np.sum(np.exp(xv) * 2, axis=1), rtol=1e-6)
    assert len(f.program._plans) == 3
