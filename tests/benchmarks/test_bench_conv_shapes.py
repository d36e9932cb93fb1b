"""benchmarks/bench_conv_shapes.py: its "same" padding is TensorFlow's (kiln's window
arithmetic), each case's kiln ops compute the float64 reference, its PyTorch twins compute the
same values (where PyTorch is installed), and a kiln worker prints its result line."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
from contextlib import redirect_stdout

import numpy as np
import pytest

from kiln.core.ops import all_ops
from kiln.core.ops.window import window2d

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
try:
    import bench_conv_shapes as bcs
finally:
    sys.path.pop(0)

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("size, k, stride, dilation", [(16, 3, 1, 1), (16, 3, 2, 1),
                                                      (64, 7, 2, 1), (16, 3, 1, 2),
                                                      (15, 4, 2, 1), (500, 3, 1, 1)])
def test_same_padding_is_tensorflows(size, k, stride, dilation):
    out, pads = window2d((size, size), (k, k), (stride, stride), (dilation, dilation), "same")
    assert bcs.out_size(size, stride) == out[0]
    assert bcs.torch_padding(k, dilation, size, stride) == tuple(pads[0])


def _kiln_values(name: str) -> tuple[dict, tuple]:
    case = bcs.CASES[name]
    calls = bcs.kiln_calls(case, 2, np.random.default_rng(4))
    return {op: np.array(fn()[0]) for op, (fn, _) in calls.items()}, case


@pytest.mark.parametrize("name", ["dw", "pw", "s2", "convT", "g4", "k5", "dil2"])
def test_each_cases_kiln_ops_compute_the_reference(name):
    got, (h, w, ci, co, k, s, d, g, _) = _kiln_values(name)
    rng = np.random.default_rng(4)  # the same draws as kiln_calls
    x = rng.standard_normal((2, h, w, ci), dtype=np.float32)
    wt = rng.standard_normal((*k, ci // g, co), dtype=np.float32) * 0.1
    ct = rng.standard_normal((2, bcs.out_size(h, s), bcs.out_size(w, s), co), dtype=np.float32)
    attrs = {"strides": (s, s), "padding": "same", "dilation": (d, d),
             **({"groups": g} if g > 1 else {})}
    ops = all_ops()
    x64, w64, c64 = (a.astype(np.float64) for a in (x, wt, ct))
    wants = {"forward": ops["conv2d"].ref(x64, w64, **attrs),
             "input_grad": ops["conv2d_backprop_input"].ref(c64, w64, input_shape=(h, w, ci),
                                                            **attrs),
             "kernel_grad": ops["conv2d_backprop_filter"].ref(x64, c64, kernel_size=k, **attrs)}
    for op, want in wants.items():
        np.testing.assert_allclose(got[op], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
@pytest.mark.parametrize("name", ["dw", "s2", "k5", "dil2", "convT"])
def test_the_torch_twins_compute_kilns_values(name):
    got, case = _kiln_values(name)
    calls = bcs.torch_calls(case, 2, np.random.default_rng(4))  # the same draws
    for op, (fn, _) in calls.items():
        t = fn().numpy()
        # PyTorch: NCHW values, (Cout, Cin/g, kh, kw) kernels; kiln: NHWC, (kh, kw, Cin/g, Cout)
        t = t.transpose(2, 3, 1, 0) if op == "kernel_grad" else t.transpose(0, 2, 3, 1)
        np.testing.assert_allclose(t, got[op], rtol=1e-4, atol=1e-4 * np.abs(t).max())


def test_a_kiln_worker_prints_one_result_line():
    buf = io.StringIO()
    with redirect_stdout(buf):
        bcs.worker("kiln", ["pw"], batch=2, repeat=1)
    line = buf.getvalue().strip()
    assert line.startswith("RESULT ")
    result = json.loads(line[len("RESULT "):])
    assert set(result) == {"pw/forward", "pw/input_grad", "pw/kernel_grad"}
    assert all(ms > 0 for ms, _ in result.values())
    assert "pointwise" in result["pw/input_grad"][1]
