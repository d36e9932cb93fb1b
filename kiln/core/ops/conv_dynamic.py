"""Input gradients of convolutions and average pooling whose spatial size is unknown when the
graph is built (``Conv1D`` on ``Input((None, C))``: variable-length sequences).

``conv2d_backprop_input`` needs its input's static ``(H, W, Cin)`` (several input sizes give
the same output size when the stride exceeds 1). With an unknown size, the input gradient is
written with ops whose shapes follow their inputs at plan time instead:

1. ``slice_grad`` scatters the cotangent, every ``stride`` entries, into zeros shaped like the
   input padded by the dilated kernel extent ``keff = dilation * (k - 1)`` (its shape is read
   from a stand-in built from ``x``);
2. a stride-1 ``conv2d`` with ``"valid"`` padding and the spatially flipped kernel, its input
   and output channels exchanged (per group), gives the gradient at every input position.

For ``"valid"`` padding the cotangent goes at ``keff, keff + s, ...`` up to ``len - keff``,
whatever the stride; for ``"same"`` padding with stride 1 it goes at ``pad_after .. len -
pad_before``. ``"same"`` with a stride above 1 pads by an amount that depends on the unknown
length, so it keeps needing a static size (a clear error says so).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node
from kiln.core.ops._rules import fmt
from kiln.core.ops.registry import apply
from kiln.core.ops.source import constant

__all__ = ["dynamic_input_grad", "dynamic_avg_pool_grad"]


def _axis_spec(op: str, size: int | None, k: int, stride: int, dilation: int, padding: str,
               x: Node) -> tuple[int | None, int | None, int]:
    """Where the cotangent goes along one spatial axis of the padded stand-in (length
    ``size + keff``): a ``(start, stop, step)`` slice."""
    keff = dilation * (k - 1)
    if padding == "valid":
        return (keff, -keff if keff else None, stride)
    if stride == 1:
        before = keff // 2
        return (keff - before, -before if before else None, 1)
    if size is None:
        raise ValueError(f"{op}: the gradient of 'same' padding with stride {stride} needs a "
                         f"static spatial size, received input {fmt(x.shape)} (use "
                         "padding='valid' or stride 1 for inputs of unknown length)")
    out = -(-size // stride)
    total = max((out - 1) * stride + keff + 1 - size, 0)
    start = keff - total // 2
    return (start, start + (out - 1) * stride + 1, stride)


def _scatter(op: str, ct: Node, x: Node, k: tuple[int, int], strides: tuple[int, int],
             dilation: tuple[int, int], padding: str) -> Node:
    """The cotangent placed in zeros of shape ``(N, H + keff_h, W + keff_w, C_ct)``."""
    keff = (dilation[0] * (k[0] - 1), dilation[1] * (k[1] - 1))
    stand_in = apply("slice", x, spec=((None, None, 1), (None, None, 1), (None, None, 1),
                                       (0, 1, 1)))
    stand_in = apply("pad", stand_in, pads=((0, 0), (keff[0], 0), (keff[1], 0), (0, 0)),
                     value=0.0)
    channels = constant(np.zeros((1, 1, 1, ct.shape[3]), dtype=x.dtype))
    stand_in = apply("add", stand_in, channels)
    spec = ((None, None, 1),
            _axis_spec(op, x.shape[1], k[0], strides[0], dilation[0], padding, x),
            _axis_spec(op, x.shape[2], k[1], strides[1], dilation[1], padding, x),
            (None, None, 1))
    return apply("slice_grad", ct, stand_in, spec=spec)


def dynamic_input_grad(ct: Node, x: Node, w: Node, *, strides: tuple[int, int], padding: str,
                       dilation: tuple[int, int], groups: int = 1) -> Node:
    """The gradient of ``conv2d(x, w)`` in ``x`` for a cotangent ``ct``, for any spatial size
    of ``x`` (see the module docstring)."""
    kh, kw, cin_g, cout = w.type.dims  # a kernel's shape is static
    padded = _scatter("conv2d", ct, x, (kh, kw), strides, dilation, padding)
    flipped = apply("slice", w, spec=((None, None, -1), (None, None, -1), (None, None, 1),
                                      (None, None, 1)))
    # per group g: w[..., ci, g * cout_g + c] -> w'[..., c, g * cin_g + ci]
    cout_g = cout // groups
    swapped = apply("reshape", flipped, shape=(kh, kw, cin_g, groups, cout_g))
    swapped = apply("transpose", swapped, perm=(0, 1, 4, 3, 2))
    swapped = apply("reshape", swapped, shape=(kh, kw, cout_g, groups * cin_g))
    attrs: dict[str, Any] = {"strides": (1, 1), "padding": "valid", "dilation": dilation}
    if groups != 1:
        attrs["groups"] = groups
    return apply("conv2d", padded, swapped, **attrs)


def dynamic_avg_pool_grad(ct: Node, x: Node, *, pool_size: tuple[int, int],
                          strides: tuple[int, int], padding: str) -> Node:
    """The gradient of ``avg_pool2d(x)`` in ``x`` for any spatial size of ``x``: each window's
    cotangent divided by its count of real (unpadded) entries, spread back over the window (a
    depthwise convolution's input gradient with a kernel of ones)."""
    ph, pw = pool_size
    one = apply("slice", x, spec=((None, None, 1), (None, None, 1), (None, None, 1), (0, 1, 1)))
    ones_x = apply("broadcast_like", constant(np.ones((1, 1, 1, 1), x.dtype)), one)
    window = constant(np.ones((ph, pw, 1, 1), x.dtype))
    counts = apply("conv2d", ones_x, window, strides=strides, padding=padding,
                   dilation=(1, 1))
    c = x.shape[3]
    if c is None:
        raise ValueError(f"avg_pool2d: the gradient needs a static number of channels, received "
                         f"input {fmt(x.shape)}")
    kernel = constant(np.ones((ph, pw, 1, c), x.dtype))
    return dynamic_input_grad(apply("div", ct, counts), x, kernel, strides=strides,
                              padding=padding, dilation=(1, 1), groups=c)
