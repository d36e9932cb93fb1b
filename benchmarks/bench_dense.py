"""Dense layers' products ``C = A @ B`` (float32): kiln's register-blocked kernel
(``kiln/core/backends/cpu/gemm/native_matmul.py``) against the BLAS kiln's other GEMMs use
(``floors.blas_matmul``), both into the same preallocated 64-byte-aligned outputs, in one run.

Each shape is timed two ways:

* ``back to back``: one call after another, the two sides alternated in blocks of
  ``BLOCK`` calls whose first call is not counted (OpenBLAS's threads spin ~0.35 ms after
  its calls, on the core kiln's second thread would take: a plan whose Dense products run
  on kiln's kernel has no BLAS call, ``products.products_native``), the median of ``--repeat``
  calls per side;
* ``after a pause``: each call after the machine idled ``--pause`` seconds (as the suite's
  epochs start; kiln's pool workers and OpenBLAS's threads are then woken cold), the sides
  alternated call by call.

Prints ``blas_us / native_us`` (> 1: kiln's kernel faster) per shape and one JSON line per
shape (prefix ``JSON``); shapes the kernel does not take (``native_matmul.suits``) print so.
No time is asserted anywhere.

Usage::

    python benchmarks/bench_dense.py
    python benchmarks/bench_dense.py --shapes 1024x784x512 128x784x512 --repeat 50
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import floors  # noqa: E402

# (M, K, N): the MLP benchmarks' products (batch 1024 predict, batch 128 forward), the wide
# MLP's, the deep MLP's, and shapes at the edges of the kernel's range
SHAPES = ["1024x784x512", "1024x512x256", "1024x256x10", "128x784x512", "128x512x256",
          "256x1024x2048", "256x2048x2048", "256x2048x10", "64x128x128", "512x128x128",
          "1024x1024x1024", "1024x2048x512"]
BLOCK = 6


def aligned(shape: tuple[int, ...], rng: np.random.Generator | None = None) -> np.ndarray:
    """A float32 array of ``shape`` whose data starts on a 64-byte boundary (as kiln's planned
    buffers do), random normal values when ``rng`` is given, else zeros."""
    n = int(np.prod(shape))
    raw = np.zeros(n + 16, np.float32)
    start = (-raw.ctypes.data % 64) // 4
    out = raw[start:start + n].reshape(shape)
    if rng is not None:
        out[...] = rng.standard_normal(shape, dtype=np.float32)
    return out


def measure(m: int, k: int, n: int, repeat: int, pause: float) -> dict:
    from kiln.core.backends.cpu.gemm import native_matmul

    rng = np.random.default_rng(m + k + n)
    a, b = aligned((m, k), rng), aligned((k, n), rng)
    outs = {"native": aligned((m, n)), "blas": aligned((m, n))}
    run = native_matmul.prepare(a, b, outs["native"])
    result = {"shape": [m, k, n]}
    if run is None:
        result["native"] = False
        return result
    fs = {"native": lambda: run(a, b, outs["native"]),
          "blas": lambda: floors.blas_matmul(a, b, outs["blas"])}
    for f in fs.values():
        f()
    want = a.astype(np.float64) @ b.astype(np.float64)
    for name, out in outs.items():  # both must agree with the float64 product first
        err = float(np.abs(out - want).max() / max(1.0, np.abs(want).max()))
        if err > 1e-5:
            raise SystemExit(f"{name} ({m}x{k}x{n}) is off by {err:.2e}")
    for mode, calls, wait in (("back_to_back", repeat, 0.0),
                              ("after_pause", max(4, repeat // 5), pause)):
        times: dict[str, list[float]] = {name: [] for name in fs}
        block = 1 if wait else BLOCK
        while len(times["native"]) < calls:
            for name, f in fs.items():
                for j in range(block + (block > 1)):
                    if wait:
                        time.sleep(wait)
                    t0 = time.perf_counter()
                    f()
                    if j or block == 1:
                        times[name].append(time.perf_counter() - t0)
        med = {name: statistics.median(t) * 1e6 for name, t in times.items()}
        result[mode] = {"native_us": med["native"], "blas_us": med["blas"],
                        "ratio": med["blas"] / med["native"]}
    result["native"] = True
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=SHAPES, help="MxKxN products")
    ap.add_argument("--repeat", type=int, default=40, help="back-to-back calls per side")
    ap.add_argument("--pause", type=float, default=0.2, help="idle seconds before each call "
                    "of the after-a-pause timing")
    args = ap.parse_args(argv)
    print(f"{'M x K x N':<18}{'native us':>11}{'blas us':>10}{'ratio':>8}"
          f"{'  | after pause: native':>24}{'blas':>8}{'ratio':>8}")
    for text in args.shapes:
        m, k, n = (int(v) for v in text.lower().split("x"))
        r = measure(m, k, n, args.repeat, args.pause)
        if not r["native"]:
            print(f"{text:<18}  (not taken by the native kernel: BLAS runs it)")
        else:
            bb, ap_ = r["back_to_back"], r["after_pause"]
            print(f"{text:<18}{bb['native_us']:>11.0f}{bb['blas_us']:>10.0f}{bb['ratio']:>7.2f}x"
                  f"{ap_['native_us']:>24.0f}{ap_['blas_us']:>8.0f}{ap_['ratio']:>7.2f}x")
        print("JSON " + json.dumps(r))
    print("(ratio: blas_us / native_us, > 1 = kiln's kernel faster; medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
