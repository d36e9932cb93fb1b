"""``KILN_POISON=1`` (kiln/core/backends/cpu/runtime/poison.py): fresh plan buffers start as
NaN, so a kernel reading memory nothing wrote shows at once. Models of every family train to
the same bits with and without it: no step of their plans reads unwritten memory (the scan
bug tests/core/test_scan_binding.py pins made ConvLSTM's gradient differ here)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers as L
from kiln.core.backends.cpu.runtime import poison


def test_poisoned_buffers_are_nan_in_floats_and_minus_one_in_ints(monkeypatch):
    monkeypatch.setenv("KILN_POISON", "1")
    assert np.isnan(poison.empty((3, 2), np.float32)).all()
    assert np.isnan(poison.empty(4, np.float64)).all()
    assert (poison.empty((2, 2), np.int32) == -1).all()
    assert (poison.empty(5, np.uint8) == 255).all()
    assert poison.empty((0, 3), np.float32).shape == (0, 3)
    monkeypatch.setenv("KILN_POISON", "0")
    assert not poison.enabled()


def _models():
    yield "mlp_bn_dropout", (12,), lambda: [
        L.Dense(16, activation="relu"), L.BatchNormalization(), L.Dropout(0.3), L.Dense(3)]
    yield "convnet_winograd", (10, 10, 3), lambda: [
        L.Conv2D(8, 3, padding="same", activation="relu"), L.BatchNormalization(),
        L.Conv2D(16, 3, padding="same", activation="relu"), L.MaxPooling2D(),
        L.GlobalAveragePooling2D(), L.Dense(3)]
    yield "lstm_gru", (7, 5), lambda: [
        L.LSTM(8, return_sequences=True), L.GRU(6), L.Dense(3)]
    yield "conv_lstm", (4, 6, 6, 2), lambda: [
        L.ConvLSTM2D(8, 3, padding="same", return_sequences=True),
        L.ConvLSTM2D(8, 3, padding="same"), L.Flatten(), L.Dense(3)]
    yield "attention", (6, 8), lambda: [
        _SelfAttention(), L.LayerNormalization(), L.GlobalAveragePooling1D(), L.Dense(3)]


class _SelfAttention(L.Layer):
    def __init__(self):
        super().__init__()
        self.mha = L.MultiHeadAttention(2, 4)

    def call(self, x):
        return x + self.mha(x, x)


@pytest.mark.parametrize("name,shape,make", list(_models()), ids=[m[0] for m in _models()])
def test_models_train_to_the_same_bits_with_poisoned_buffers(name, shape, make, monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, *shape)).astype("float32")
    y = rng.integers(0, 3, 16)
    results = []
    for flag in ("0", "1"):
        monkeypatch.setenv("KILN_POISON", flag)
        kiln.utils.set_random_seed(3)
        model = kiln.Sequential([L.Input(shape), *make()])
        model.compile("adam", "sparse_categorical_crossentropy")
        hist = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
        results.append((hist["loss"], model.get_weights(), model.predict(x, verbose=0)))
    (l0, w0, p0), (l1, w1, p1) = results
    assert np.isfinite(l1).all(), (name, l1)
    np.testing.assert_array_equal(l0, l1)
    for a, b in zip(w0, w1):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(p0, p1)


@pytest.mark.parametrize("case", ["pad", "pad_value", "slice_grad", "slice_grad_strided",
                                  "slice_grad_empty"])
def test_pad_and_slice_grad_write_every_element_of_a_poisoned_buffer(case, monkeypatch):
    # their kernels fill only the borders around the box they copy: a border missed would
    # leave NaN here (the buffer starts poisoned), or an earlier step's values in a reused one
    from kiln.core.ops.registry import apply

    monkeypatch.setenv("KILN_POISON", "1")
    rng = np.random.default_rng(0)
    # large enough that the kernels fill the borders alone (movement._BORDER_MIN_BYTES)
    x = rng.normal(size=(30, 50, 40)).astype(np.float32)
    ph = kiln.placeholder(x.shape, "float32")
    if case.startswith("pad"):
        pads, value = ((1, 2), (0, 3), (2, 0)), (1.5 if case == "pad_value" else 0.0)
        node = apply("pad", ph, pads=pads, value=value)
        want = np.pad(x, pads, constant_values=value)
    else:
        spec = {"slice_grad": ((1, 23, 1), (None, None, 1), (1, -1, 1)),
                "slice_grad_strided": ((0, None, 2), (40, 0, -2), (None, None, 1)),
                "slice_grad_empty": ((2, 1, 1), (None, None, 1), (None, None, 1))}[case]
        sl = tuple(slice(*s) for s in spec)
        ct = rng.normal(size=x[sl].shape).astype(np.float32)
        ct_ph = kiln.placeholder(ct.shape, "float32")
        node = apply("slice_grad", ct_ph, ph, spec=spec)
        want = np.zeros_like(x)
        want[sl] = ct
    fn = kiln.function([ph] if case.startswith("pad") else [ct_ph, ph], node, backend="cpu",
                       optimize=False)
    feeds = [x] if case.startswith("pad") else [ct, x]
    from kiln.core.backends.cpu.kernels import movement

    assert x.nbytes >= movement._BORDER_MIN_BYTES
    for _ in range(2):  # a second run over the first's values
        np.testing.assert_array_equal(fn(*feeds), want)
