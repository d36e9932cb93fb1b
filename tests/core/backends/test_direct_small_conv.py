"""kiln/core/backends/cpu/kernels/conv/direct_small.py: the input gradient of a stride-1
convolution into few input channels (LeNet-5's second layer) through the dot kernel that loads
each input vector once for all output channels: against the float64 NumPy reference, against
central differences of the reference forward convolution, through autodiff, and the rule that
picks it."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends.cpu import target
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.kernels.conv import direct_small
from kiln.core.ops import all_ops
from kiln.core.ops.registry import apply

OPS = all_ops()

# (n, h, w, ci, co, k, padding, dilation): LeNet-5 layer 2 (6 -> 16, 5x5 valid, on 14 x 14);
# "same" padding; dilation 2 (3x3 dilated: not Winograd's); one input channel; 20 output
# channels (two vectors, the second masked); rows of 3 pixels (one block); 8 input channels
# (the most)
CASES = [(3, 14, 14, 6, 16, 5, "valid", 1), (2, 9, 11, 3, 16, 5, "same", 1),
         (2, 12, 10, 5, 20, 3, "same", 2), (2, 8, 8, 1, 32, 5, "valid", 1),
         (2, 5, 3, 4, 12, 5, "same", 1), (1, 7, 9, 8, 16, 4, "valid", 1)]


def _input_gradient(ct: np.ndarray, w: np.ndarray, hw: tuple, padding: str, dilation: int):
    cp = kiln.placeholder(ct.shape, "float32")
    wp = kiln.placeholder(w.shape, "float32")
    g = apply("conv2d_backprop_input", cp, wp, input_shape=(*hw, w.shape[2]), strides=(1, 1),
              padding=padding, dilation=(dilation, dilation))
    return kiln.function([cp, wp], g, backend="cpu")


def _labels(fn) -> list[str]:
    return [s.label for p in fn.program._plans.values() for s in p.steps]


def _runs_here() -> bool:
    return native.available() and target.current().tile_conv


def _case(case, seed=0):
    n, h, w, ci, co, k, padding, dil = case
    rng = np.random.default_rng(seed + sum(case[:6]))
    kernel = rng.normal(size=(k, k, ci, co))
    x = np.zeros((n, h, w, ci))
    oh, ow = OPS["conv2d"].ref(x, kernel, strides=(1, 1), padding=padding,
                               dilation=(dil, dil)).shape[1:3]
    ct = rng.normal(size=(n, oh, ow, co))
    return kernel, ct, (h, w), padding, dil


@pytest.mark.parametrize("case", CASES)
def test_input_gradient_matches_the_float64_reference(case):
    kernel, ct, hw, padding, dil = _case(case)
    fn = _input_gradient(ct, kernel, hw, padding, dil)
    got = fn(ct.astype(np.float32), kernel.astype(np.float32))
    want = OPS["conv2d_backprop_input"].ref(ct, kernel, input_shape=(*hw, kernel.shape[2]),
                                            strides=(1, 1), padding=padding,
                                            dilation=(dil, dil))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    if _runs_here():  # the dot kernel took it (hosts with the tiles' kernels)
        assert "conv2d_backprop_input:conv_dots" in _labels(fn)


@pytest.mark.parametrize("case", CASES[:3])
def test_input_gradient_is_the_derivative_of_the_forward(case):
    # d/dx sum(ct * conv(x, w)): kiln's float32 input gradient against central differences
    # of the float64 reference convolution (linear in x: the differences are exact up to
    # rounding)
    kernel, ct, hw, padding, dil = _case(case, seed=1)
    n, ci = ct.shape[0], kernel.shape[2]
    got = _input_gradient(ct, kernel, hw, padding, dil)(ct.astype(np.float32),
                                                        kernel.astype(np.float32))
    rng = np.random.default_rng(7)
    x = rng.normal(size=(n, *hw, ci))

    def loss(v: np.ndarray) -> float:
        return float(np.sum(ct * OPS["conv2d"].ref(v, kernel, strides=(1, 1), padding=padding,
                                                   dilation=(dil, dil))))

    eps = 1e-3
    for _ in range(6):
        idx = tuple(int(rng.integers(0, s)) for s in x.shape)
        d = np.zeros_like(x)
        d[idx] = eps
        fd = (loss(x + d) - loss(x - d)) / (2 * eps)
        assert abs(got[idx] - fd) <= 1e-4 * max(1.0, abs(fd)), (idx, got[idx], fd)


def test_lenet_layer_gradients_through_autodiff():
    # the input gradient as autodiff builds it for a Conv2D(16, 5) on 6 channels: against the
    # float64 reference's input gradient of the same cotangent
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 14, 14, 6)).astype(np.float32)
    w = rng.normal(size=(5, 5, 6, 16)).astype(np.float32)
    v = rng.normal(size=(4, 10, 10, 16)).astype(np.float32)
    p = kiln.placeholder(x.shape, "float32")
    loss = K.sum(K.conv(p, w) * v)
    fn = kiln.function([p], kiln.grad(loss, [p])[0], backend="cpu")
    got = fn(x)
    want = OPS["conv2d_backprop_input"].ref(v.astype(np.float64), w.astype(np.float64),
                                            input_shape=(14, 14, 6), strides=(1, 1),
                                            padding="valid", dilation=(1, 1))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_the_rule_takes_few_input_channels_at_stride_one_only(monkeypatch):
    monkeypatch.setattr(direct_small.target, "current",
                        lambda: type("T", (), {"tile_conv": True})())
    monkeypatch.setattr(direct_small.native, "enabled", lambda: True)
    out = np.zeros((2, 14, 14, 6), np.float32)
    node = type("N", (), {"attrs": {"strides": (1, 1)}})()
    w = np.zeros((5, 5, 6, 16), np.float32)
    assert direct_small.takes_input_gradient(node, w, out)
    assert not direct_small.takes_input_gradient(node, np.zeros((5, 5, 6, 8), np.float32), out)
    assert not direct_small.takes_input_gradient(  # many input channels: the tiles
        node, np.zeros((5, 5, 32, 16), np.float32), np.zeros((2, 14, 14, 32), np.float32))
    node2 = type("N", (), {"attrs": {"strides": (2, 2)}})()
    assert not direct_small.takes_input_gradient(node2, w, out)
    assert not direct_small.takes_input_gradient(node, w.astype(np.float64),
                                                 out.astype(np.float64))


@pytest.mark.parametrize("width, co, cvecs, rows", [(14, 6, 1, 4), (3, 6, 1, 3), (10, 1, 1, 8),
                                                    (10, 8, 2, 1)])
def test_block_rows_fit_the_registers(width, co, cvecs, rows):
    assert direct_small.block_rows(width, co, cvecs) == rows
    assert (co + 1) * cvecs * rows + 1 <= direct_small.REGISTERS or rows == 1
