"""Serving at batch 1 (issue 47): ``predict``, ``predict_on_batch`` and ``model(x)`` on one
sample allocate nothing but the arrays they return; small kernels run on the caller's thread
(``runtime/serial.py``, ``lowering.SERIAL_WORK``); a forward convolution with few output
positions takes the direct kernels (``lowering.WINOGRAD_MIN_OUTPUTS``). Oracles: a NumPy
forward pass of the convnet, closed-form work counts, the allocator's own accounting
(tracemalloc), the thread a part ran on."""

from __future__ import annotations

import threading
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest

import kiln
from kiln import layers
from kiln.core.backends.cpu import lowering
from kiln.core.backends.cpu.runtime.serial import SerialParts
from kiln.core.backends.cpu.runtime.threads import SplitCall


def _convnet() -> kiln.Model:
    kiln.utils.set_random_seed(3)
    return kiln.Sequential([
        kiln.Input(shape=(12, 12, 1)),
        layers.Conv2D(8, (3, 3), activation="relu"),
        layers.MaxPooling2D((2, 2)),
        layers.Conv2D(16, (3, 3), activation="relu"),
        layers.Flatten(),
        layers.Dense(5, activation="softmax"),
    ])


def _mlp() -> kiln.Model:
    kiln.utils.set_random_seed(4)
    return kiln.Sequential([kiln.Input(shape=(20,)), layers.Dense(32, activation="relu"),
                            layers.Dropout(0.5), layers.Dense(3, activation="softmax")])


def _conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A valid 2-D convolution, NHWC x HWIO, stride 1, in float64."""
    kh, kw = w.shape[:2]
    oh, ow = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nhwc,co->nhwo", x[:, i:i + oh, j:j + ow, :], w[i, j])
    return out + b


def _convnet_ref(model: kiln.Model, x: np.ndarray) -> np.ndarray:
    (w1, b1), (w2, b2), (w3, b3) = [[np.asarray(v, np.float64) for v in layer.get_weights()]
                                    for layer in model.layers if layer.get_weights()]
    h = np.maximum(_conv_ref(x.astype(np.float64), w1, b1), 0)
    n, hh, ww, c = h.shape
    h = h[:, :hh // 2 * 2, :ww // 2 * 2].reshape(n, hh // 2, 2, ww // 2, 2, c).max(axis=(2, 4))
    h = np.maximum(_conv_ref(h, w2, b2), 0).reshape(n, -1) @ w3 + b3
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_convnet_matches_numpy_at_small_and_large_batches(batch):
    # batch 1 and 3: direct kernels (under 512 output positions); 64: Winograd's (the
    # second convolution has 8 x 8 = 64 positions a sample)
    model = _convnet()
    x = np.random.default_rng(batch).uniform(size=(batch, 12, 12, 1)).astype(np.float32)
    want = _convnet_ref(model, x)
    np.testing.assert_allclose(model.predict_on_batch(x), want, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(model(x), want, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=2e-5, atol=1e-6)


def _peak_bytes(fn, calls: int = 20) -> int:
    """The largest rise of traced memory over a call of ``fn``, after a warm-up."""
    for _ in range(5):
        fn()
    tracemalloc.start()
    try:
        worst = 0
        for _ in range(calls):
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            out = fn()
            worst = max(worst, tracemalloc.get_traced_memory()[1] - base)
            del out
    finally:
        tracemalloc.stop()
    return worst


@pytest.mark.parametrize("make,shape", [(_convnet, (12, 12, 1)), (_mlp, (20,))])
@pytest.mark.parametrize("how", ["predict_on_batch", "call", "predict"])
def test_batch_one_call_allocates_only_its_result(make, shape, how):
    # the plan's arena holds every activation (the convnet's first one alone is
    # 10 x 10 x 8 floats: 3.2 KB): a call that allocated any buffer of its own would rise
    # past that; what is allowed is the returned array and a few small Python objects
    model = make()
    x = np.random.default_rng(0).uniform(size=(1, *shape)).astype(np.float32)
    fn = {"predict_on_batch": lambda: model.predict_on_batch(x), "call": lambda: model(x),
          "predict": lambda: model.predict(x, verbose=0)}[how]
    first = fn()
    again = fn()
    assert again is not first and not np.shares_memory(again, first)  # a new array each call
    np.testing.assert_array_equal(again, first)
    assert _peak_bytes(fn) < 2048


def test_predict_one_batch_still_calls_callbacks_and_returns_a_new_array():
    model = _mlp()
    x = np.random.default_rng(1).uniform(size=(4, 20)).astype(np.float32)
    seen = []

    class Recorder(kiln.callbacks.Callback):
        def on_predict_begin(self, logs=None):
            seen.append("begin")

        def on_predict_batch_end(self, batch, logs=None):
            seen.append(("batch", batch, logs["outputs"][0].shape))

        def on_predict_end(self, logs=None):
            seen.append("end")

    plain = model.predict(x, verbose=0)
    with_cb = model.predict(x, verbose=0, callbacks=[Recorder()])
    assert seen == ["begin", ("batch", 0, (4, 3)), "end"]
    np.testing.assert_array_equal(plain, with_cb)
    np.testing.assert_allclose(plain, model.predict(x, batch_size=2, verbose=0), rtol=1e-6)
    assert not np.shares_memory(plain, model.predict(x, verbose=0))


def test_predict_fast_path_keeps_the_errors():
    model = _mlp()
    with pytest.raises(ValueError, match=r"expects data of shape \(None, 20\), received an "
                                         r"array of shape \(1, 7\)"):
        model.predict(np.zeros((1, 7), np.float32), verbose=0)
    with pytest.raises(ValueError, match="batch_size"):
        model.predict(np.zeros((1, 20), np.float32), batch_size=0, verbose=0)


def _node(op: str, *inputs, **attrs) -> SimpleNamespace:
    """A stand-in for a graph node: the work rule reads only its op, inputs and attrs."""
    return SimpleNamespace(op=op, inputs=tuple(inputs), attrs=attrs)


def test_kernel_work_counts_multiply_adds():
    shapes = {}

    def leaf(shape):
        n = _node("param")
        shapes[id(n)] = shape
        return n

    def op(name, shape, *ins, **attrs):
        n = _node(name, *ins, **attrs)
        shapes[id(n)] = shape
        return n

    def shape_of(n):
        return shapes[id(n)]

    x, w = leaf((2, 28, 28, 3)), leaf((3, 3, 3, 16))
    y = op("conv2d", (2, 26, 26, 16), x, w)
    assert lowering.kernel_work(y, shape_of) == 2 * 26 * 26 * 3 * 3 * 3 * 16
    assert lowering.kernel_work(op("conv2d_backprop_input", (2, 28, 28, 3), y, w), shape_of) \
        == 2 * 26 * 26 * 3 * 3 * 3 * 16
    assert lowering.kernel_work(op("conv2d_backprop_filter", (3, 3, 3, 16), x, y), shape_of) \
        == 2 * 26 * 26 * 3 * 3 * 3 * 16
    a, b = leaf((1, 784)), leaf((784, 512))
    assert lowering.kernel_work(op("matmul", (1, 512), a, b), shape_of) == 784 * 512
    pooled = op("max_pool2d", (2, 13, 13, 16), y)
    assert lowering.kernel_work(pooled, shape_of) == (2 * 13 * 13 * 16 + 2 * 26 * 26 * 16) * 8
    assert lowering.runs_serial(op("matmul", (1, 512), a, b), shape_of)
    big = op("matmul", (1024, 512), leaf((1024, 784)), b)
    assert not lowering.runs_serial(big, shape_of)


def test_winograd_pays_from_a_number_of_output_positions():
    assert not lowering.winograd_pays((1, 11, 11, 64))      # 121 positions: direct
    assert not lowering.winograd_pays((4, 11, 11, 64))      # 484
    assert lowering.winograd_pays((5, 11, 11, 64))          # 605
    assert lowering.winograd_pays((1, 32, 32, 8))           # 1024


def test_serial_parts_run_every_part_in_order_on_the_callers_thread():
    out = np.zeros(10)
    ranges = [(0, 3), (3, 7), (7, 10)]
    where = []

    def entry(arr, lo, hi):
        where.append((threading.get_ident(), lo))
        arr[lo:hi] = np.arange(lo, hi) * 2.0

    split = SplitCall(entry, 3, lambda args, k: (args[0], *ranges[k]))
    SerialParts(split)(out, 0, 10)
    np.testing.assert_array_equal(out, np.arange(10) * 2.0)
    assert where == [(threading.get_ident(), 0), (threading.get_ident(), 3),
                     (threading.get_ident(), 7)]
    expected = np.zeros(10)
    split(expected, 0, 10)  # the same parts on kiln's workers: the same result
    np.testing.assert_array_equal(out, expected)



def _split_steps(model: kiln.Model, x: np.ndarray) -> tuple[int, int]:
    """(SplitCall steps, steps made serial) of the plan of ``model``'s predict for ``x``."""
    model.predict_on_batch(x)
    plan = model._predict_fn().program.plan([x])
    return sum(isinstance(s.fn, SplitCall) for s in plan.steps), plan.info["serial_steps"]


def test_batch_one_plan_runs_its_small_kernels_on_the_callers_thread(monkeypatch, cpu_options):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    x = np.random.default_rng(5).uniform(size=(1, 12, 12, 1)).astype(np.float32)
    split, serial = _split_steps(_convnet(), x)
    cpu_options(serial_work=0)  # the same plan with every split kept
    split_before, serial_before = _split_steps(_convnet(), x)
    assert serial_before == 0
    assert split == 0 and serial == split_before  # each split step now runs serially

