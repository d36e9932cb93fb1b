"""Convolution layers of the MNIST convnet (batch 128, 3x3, valid), kiln CPU kernels by method
(direct numba loops vs im2col + BLAS GEMM) against PyTorch, per op: forward, input gradient,
kernel gradient, and 2x2 max pooling. Used to pick ``conv.conv_method``
(``forward.tile`` against ``forward.direct`` and ``forward.gemm``).

Usage::

    python benchmarks/bench_conv.py [--batch 128] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

LAYERS = {"conv1": ((28, 28, 1), 32), "conv2": ((13, 13, 32), 64)}


def timeit(fn, repeat: int) -> float:
    """Median milliseconds of ``repeat`` calls after two warm-up calls."""
    return float(np.median(harness.call_times(fn, repeat, warmup=2))) * 1e3


def kiln_times(batch: int, repeat: int) -> dict:
    import kiln
    from kiln.core.backends.cpu.kernels.conv import conv
    from kiln.core.ops.registry import apply

    rng = np.random.default_rng(0)
    out = {}
    for name, ((h, w, ci), co) in LAYERS.items():
        x = rng.random((batch, h, w, ci), dtype=np.float32)
        k = rng.random((3, 3, ci, co), dtype=np.float32)
        ct = rng.random((batch, h - 2, w - 2, co), dtype=np.float32)
        attrs = {"strides": (1, 1), "padding": "valid", "dilation": (1, 1)}
        xs = kiln.placeholder(x.shape)
        ks = kiln.placeholder(k.shape)
        cs = kiln.placeholder(ct.shape)
        graphs = {
            "forward": ([xs, ks], apply("conv2d", xs, ks, **attrs), (x, k)),
            "input_grad": ([cs, ks], apply("conv2d_backprop_input", cs, ks,
                                           input_shape=(h, w, ci), **attrs), (ct, k)),
            "kernel_grad": ([xs, cs], apply("conv2d_backprop_filter", xs, cs,
                                            kernel_size=(3, 3), **attrs), (x, ct)),
        }
        for method in ("direct", "gemm"):
            saved = conv.conv_method
            conv.conv_method = lambda taps, op="conv2d", *a, method=method, **kw: method
            try:
                for op, (ins, node, feeds) in graphs.items():
                    f = kiln.function(ins, node, backend="cpu", optimize=False)
                    out[f"{name}.{op}.{method}"] = timeit(
                        lambda run=f.program.run, feeds=feeds: run(list(feeds)), repeat)
                # the three ops of a training step in one function (the im2col buffer of x
                # is shared by the forward and the kernel gradient, as in a step)
                f = kiln.function([xs, ks, cs], [n for _, n, _ in graphs.values()],
                                  backend="cpu", optimize=False)
                out[f"{name}.step.{method}"] = timeit(
                    lambda run=f.program.run, feeds=(x, k, ct): run(list(feeds)), repeat)
            finally:
                conv.conv_method = saved
        ins, node, feeds = graphs["forward"]  # the register-tiled forward (TILE64)
        f = kiln.function(ins, node, backend="cpu", optimize=False)
        out[f"{name}.forward.tile"] = timeit(
            lambda run=f.program.run, feeds=feeds: run(list(feeds)), repeat)
        pooled = kiln.placeholder((batch, h - 2, w - 2, co))
        f = kiln.function([pooled], kiln.ops.max_pool2d(pooled, 2), backend="cpu",
                          optimize=False)
        out[f"{name}.maxpool"] = timeit(lambda f=f, ct=ct: f.program.run([ct]), repeat)
    return out


def torch_times(batch: int, repeat: int) -> dict:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    conv = torch.nn.functional.conv2d
    out = {}
    for name, ((h, w, ci), co) in LAYERS.items():
        x = torch.rand(batch, ci, h, w, requires_grad=True)
        k = torch.rand(co, ci, 3, 3, requires_grad=True)
        y = torch.nn.functional.conv2d(x, k)
        g = torch.rand_like(y)
        out[f"{name}.forward"] = timeit(lambda x=x, k=k: conv(x, k), repeat)
        out[f"{name}.forward+backward"] = timeit(
            lambda x=x, k=k, g=g: torch.autograd.grad(conv(x, k), (x, k), g), repeat)
        out[f"{name}.maxpool"] = timeit(
            lambda y=y: torch.nn.functional.max_pool2d(y, 2), repeat)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    res = {"kiln": kiln_times(args.batch, args.repeat)}
    try:
        res["torch"] = torch_times(args.batch, args.repeat)
    except ImportError:
        pass
    for fw, times in res.items():
        for k, v in times.items():
            print(f"{fw:<6}{k:<32}{v:9.2f} ms")
    print("JSON " + json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
