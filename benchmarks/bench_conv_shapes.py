"""Convolutions of common shapes, kiln's CPU kernels against PyTorch eager, op by op: the
forward, the input gradient and the kernel gradient of each case below (NHWC in kiln, PyTorch's
default NCHW), float32 (issue 18: "convolutions that are fast for every common shape").

Each framework runs in worker processes of its own (kiln's thread settings, such as
OMP_WAIT_POLICY=PASSIVE, would slow PyTorch's OpenMP threads in a shared process), in the order
kiln, torch, torch, kiln (``--rounds`` such pairs); each op is timed as the median of
``--repeat`` calls after two warm-up calls, then the median over the workers. kiln is timed
through its program's ``run`` (the kernels, without the copy a ``Function`` call returns). The
table gives both times and ``torch_ms / kiln_ms`` (> 1: kiln faster), and the kernels kiln's
planner picked (the plan's labels). Cases (batch ``--batch``, 32 by default):

* ``stem3x3``   3 -> 32, 32 x 32, 3x3, same (a first layer)
* ``c32_64``    32 -> 64, 32 x 32, 3x3, same
* ``c64``       64 -> 64, 16 x 16, 3x3, same
* ``c128``      128 -> 128, 8 x 8, 3x3, same
* ``c256``      256 -> 256, 8 x 8, 3x3, same
* ``c512``      512 -> 512, 4 x 4, 3x3, same
* ``s2``        64 -> 128, 16 x 16, 3x3, stride 2, same
* ``pw``        64 -> 64, 16 x 16, 1x1 (pointwise)
* ``dil2``      64 -> 64, 16 x 16, 3x3, dilation 2, same
* ``k5``        32 -> 64, 16 x 16, 5x5, same
* ``stem7s2``   3 -> 64, 64 x 64, 7x7, stride 2, same (a ResNet stem)
* ``conv1d``    64 -> 64, length 500, kernel 3, same (as a 1 x 500 image)
* ``convT``     Conv2DTranspose 64 -> 32, 8 x 8 -> 16 x 16, 4x4, stride 2, same (kiln's
                conv2d_backprop_input of the layer's input; its input gradient is a conv2d)
* ``dw``        depthwise 64 channels, 16 x 16, 3x3, same (groups = 64)
* ``g4``        grouped 64 -> 64, 16 x 16, 3x3, same, 4 groups
* ``dw_s2``     depthwise 64 channels, 32 x 32, 3x3, stride 2, same (a MobileNet downsampling)
* ``g4_s2``     grouped 64 -> 64, 32 x 32, 3x3, stride 2, same, 4 groups (a ResNeXt downsampling)

Usage::

    python benchmarks/bench_conv_shapes.py                 # every case
    python benchmarks/bench_conv_shapes.py --cases c64 s2 --batch 64 --repeat 30

Prints one table and JSON lines (prefix ``JSON``). No time is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bench_conv  # noqa: E402  (benchmarks/ is not a package: its median-of-calls timer)

# name: (H, W, Cin, Cout, (kh, kw), stride, dilation, groups, transposed)
CASES = {
    "stem3x3": (32, 32, 3, 32, (3, 3), 1, 1, 1, False),
    "c32_64": (32, 32, 32, 64, (3, 3), 1, 1, 1, False),
    "c64": (16, 16, 64, 64, (3, 3), 1, 1, 1, False),
    "c128": (8, 8, 128, 128, (3, 3), 1, 1, 1, False),
    "c256": (8, 8, 256, 256, (3, 3), 1, 1, 1, False),
    "c512": (4, 4, 512, 512, (3, 3), 1, 1, 1, False),
    "s2": (16, 16, 64, 128, (3, 3), 2, 1, 1, False),
    "pw": (16, 16, 64, 64, (1, 1), 1, 1, 1, False),
    "dil2": (16, 16, 64, 64, (3, 3), 1, 2, 1, False),
    "k5": (16, 16, 32, 64, (5, 5), 1, 1, 1, False),
    "stem7s2": (64, 64, 3, 64, (7, 7), 2, 1, 1, False),
    "conv1d": (1, 500, 64, 64, (1, 3), 1, 1, 1, False),
    "convT": (16, 16, 32, 64, (4, 4), 2, 1, 1, True),
    "dw": (16, 16, 64, 64, (3, 3), 1, 1, 64, False),
    "g4": (16, 16, 64, 64, (3, 3), 1, 1, 4, False),
    "dw_s2": (32, 32, 64, 64, (3, 3), 2, 1, 64, False),
    "g4_s2": (32, 32, 64, 64, (3, 3), 2, 1, 4, False),
}
OPS = ("forward", "input_grad", "kernel_grad")


def out_size(size: int, stride: int) -> int:
    return -(-size // stride)  # "same"


def torch_padding(k: int, dilation: int, size: int, stride: int) -> tuple[int, int]:
    """TensorFlow's "same" padding as (before, after)."""
    out = out_size(size, stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def kiln_calls(case: tuple, batch: int, rng) -> dict:
    """``{op: (call, method)}``: kiln functions of the case's three ops (for ``transposed``,
    the convolution from the layer's output back to its input: the layer's forward is that
    convolution's input gradient, and the other way round)."""
    import kiln
    from kiln.core.ops.registry import apply

    h, w, ci, co, k, s, d, g, _ = case
    attrs = {"strides": (s, s), "padding": "same", "dilation": (d, d)}
    if g > 1:
        attrs["groups"] = g
    oh, ow = out_size(h, s), out_size(w, s)
    x = rng.standard_normal((batch, h, w, ci), dtype=np.float32)
    wt = rng.standard_normal((*k, ci // g, co), dtype=np.float32) * 0.1
    ct = rng.standard_normal((batch, oh, ow, co), dtype=np.float32)
    xs, ws, cs = (kiln.placeholder(a.shape) for a in (x, wt, ct))
    graphs = {
        "forward": ([xs, ws], apply("conv2d", xs, ws, **attrs), (x, wt)),
        "input_grad": ([cs, ws], apply("conv2d_backprop_input", cs, ws,
                                       input_shape=(h, w, ci), **attrs), (ct, wt)),
        "kernel_grad": ([xs, cs], apply("conv2d_backprop_filter", xs, cs,
                                        kernel_size=k, **attrs), (x, ct)),
    }
    out = {}
    for op, (ins, node, vals) in graphs.items():
        f = kiln.function(ins, node, backend="cpu")
        f(*vals)
        labels = sorted({s.label.split(":", 1)[1] for p in f.program._plans.values()
                         for s in (p[0] if isinstance(p, list) else p).steps
                         if ":" in s.label and not s.label.endswith(("pad", "sum_parts"))})
        # the program's run: the kernels, without the copy of the output a Function call
        # returns (its own buffers, as PyTorch returns its own tensor)
        out[op] = ((lambda f=f, vals=vals: f.program.run(list(vals))), "+".join(labels) or "-")
    return out


def torch_calls(case: tuple, batch: int, rng) -> dict:
    """The same three ops in PyTorch, NCHW, on the values ``kiln_calls`` draws from the same
    ``rng`` state (drawn channels-last, then transposed); "same" padding added explicitly
    where it is uneven, the input gradient cropped back to the input."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(os.cpu_count() or 1)
    h, w, ci, co, k, s, d, g, _ = case
    ph = torch_padding(k[0], d, h, s)
    pw = torch_padding(k[1], d, w, s)
    oh, ow = out_size(h, s), out_size(w, s)
    x = rng.standard_normal((batch, h, w, ci), dtype=np.float32)
    wt = rng.standard_normal((*k, ci // g, co), dtype=np.float32) * 0.1
    ct = rng.standard_normal((batch, oh, ow, co), dtype=np.float32)
    x = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    wt = torch.from_numpy(np.ascontiguousarray(wt.transpose(3, 2, 0, 1)))
    ct = torch.from_numpy(np.ascontiguousarray(ct.transpose(0, 3, 1, 2)))
    pads = (pw[0], pw[1], ph[0], ph[1])
    xp = F.pad(x, pads)
    kw = {"stride": s, "dilation": d, "groups": g}

    def forward():
        with torch.no_grad():
            return F.conv2d(F.pad(x, pads), wt, **kw)

    def input_grad():
        return torch.nn.grad.conv2d_input(xp.shape, wt, ct, **kw)[
            :, :, ph[0]:ph[0] + h, pw[0]:pw[0] + w]

    def kernel_grad():
        return torch.nn.grad.conv2d_weight(xp, wt.shape, ct, **kw)

    return {"forward": (forward, "torch"), "input_grad": (input_grad, "torch"),
            "kernel_grad": (kernel_grad, "torch")}


def worker(framework: str, cases: list[str], batch: int, repeat: int) -> None:
    """Times every op of ``cases`` with ``framework``; prints one ``RESULT`` JSON line."""
    rng = np.random.default_rng(0)
    out = {}
    for name in cases:
        case = CASES[name]
        calls = (kiln_calls if framework == "kiln" else torch_calls)(case, batch, rng)
        for op in OPS:
            kop = op
            if case[8]:  # a Conv2DTranspose: its forward is the convolution's input gradient
                kop = {"forward": "input_grad", "input_grad": "forward"}.get(op, op)
            fn, kernels = calls[kop]
            out[f"{name}/{op}"] = (bench_conv.timeit(fn, repeat), kernels)
    print("RESULT " + json.dumps(out), flush=True)


def run_worker(framework: str, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", framework, "--batch",
           str(args.batch), "--repeat", str(args.repeat), "--cases", *args.cases]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1, help="kiln-torch-torch-kiln rounds")
    ap.add_argument("--worker", choices=["kiln", "torch"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.cases, args.batch, args.repeat)
        return
    try:
        import torch  # noqa: F401
        frameworks = ["kiln", "torch"]
    except ImportError:
        frameworks = ["kiln"]
        print("PyTorch is not installed: kiln's times only")
    runs: dict[str, list[dict]] = {f: [] for f in frameworks}
    for _ in range(args.rounds):
        for fw in frameworks + frameworks[::-1]:
            runs[fw].append(run_worker(fw, args))
    print(f"{'case':9s} {'op':12s} {'kiln ms':>9s} {'torch ms':>9s} {'torch/kiln':>10s}  "
          "kiln kernels")
    for key in runs["kiln"][0]:
        name, op = key.split("/")
        k_ms = statistics.median(r[key][0] for r in runs["kiln"])
        t_ms = statistics.median(r[key][0] for r in runs["torch"]) if "torch" in runs else None
        ratio = t_ms / k_ms if t_ms else None
        kernels = runs["kiln"][0][key][1]
        tms = f"{t_ms:9.3f}" if t_ms else f"{'-':>9s}"
        rs = f"{ratio:9.2f}x" if ratio else f"{'-':>10s}"
        print(f"{name:9s} {op:12s} {k_ms:9.3f} {tms} {rs}  {kernels}")
        print("JSON " + json.dumps({"case": name, "op": op, "kiln_ms": k_ms, "torch_ms": t_ms,
                                    "torch_over_kiln": ratio, "kiln_kernels": kernels,
                                    "batch": args.batch}))


if __name__ == "__main__":
    main()
