"""Single float32 kernels of kiln's CPU backend against NumPy doing the same work, in one run:
elementwise exp / log / log1p / expm1 / softplus / ELU / erf / sin / cos / exact GELU
(scalars.py's vectorized functions; NumPy has no erf: its side is Abramowitz and Stegun's
7.1.26 in float32 ufuncs),
max and sum reductions, softmax, log-softmax and sparse cross-entropy rows (nn.py's lanes; and
a classifier head's short rows, 1,024 of 2 and of 10 by default: native_nn's short-row kernels),
sort and top_k of rows (the ``argsort`` op: NumPy's stable sort, and ``take_along_axis``;
NumPy's own ``np.sort`` is its unstable SIMD quicksort).

Each kernel is timed through its plan's ``run`` (the kernels, without the output copy a
``Function`` call returns), the minimum of ``--repeat`` calls after a warm-up, beside the
minimum of the NumPy expression (NumPy's own SIMD kernels; its softmax and cross-entropy
composed of reductions and elementwise ufuncs); both results must agree first. Prints
``numpy_us / kiln_us`` (> 1: kiln faster) and one JSON line per case (prefix ``JSON``). No
time is asserted anywhere.

Usage::

    python benchmarks/bench_kernels.py
    python benchmarks/bench_kernels.py --rows 64 --cols 20000 --repeat 30
    python benchmarks/bench_kernels.py --head-cols 3 16 --head-rows 4096
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

import kiln  # noqa: E402
import kiln.ops as K  # noqa: E402


def _numpy_xent(x, labels):
    m = x.max(axis=1, keepdims=True)
    return np.log(np.exp(x - m).sum(axis=1)) - (x[np.arange(len(x)), labels] - m[:, 0])


def _numpy_softmax(x, log):
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=1, keepdims=True)
    return (x - m) - np.log(s) if log else e / s


def _numpy_erf(x):
    """erf by Abramowitz and Stegun's 7.1.26 (absolute error 1.5e-7) in float32 ufuncs: NumPy
    has no erf of its own."""
    a = np.abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * a)
    p = np.float32(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        p = p * t + np.float32(c)
    return np.copysign(np.float32(1.0) - p * t * np.exp(-a * a), x)


CASES = {
    "exp": (K.exp, np.exp),
    "log(|x|+1)": (lambda t: K.log(K.abs(t) + 1.0), lambda x: np.log(np.abs(x) + 1)),
    "log1p(|x|)": (lambda t: K.log1p(K.abs(t)), lambda x: np.log1p(np.abs(x))),
    "expm1": (K.expm1, np.expm1),
    "softplus": (K.softplus, lambda x: np.logaddexp(0, x)),
    "elu": (K.elu, lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))),
    "max rows": (lambda t: K.max(t * 1.0, axis=1), lambda x: (x * 1.0).max(axis=1)),
    "sum rows": (lambda t: K.sum(t * 1.0, axis=1), lambda x: (x * 1.0).sum(axis=1)),
    "erf": (K.erf, _numpy_erf),
    "sin": (K.sin, np.sin),
    "cos": (K.cos, np.cos),
    "gelu": (lambda t: K.gelu(t, approximate=False),
             lambda x: np.float32(0.5) * x * (np.float32(1.0) + _numpy_erf(
                 x * np.float32(0.7071067811865476)))),
    "softmax": (lambda t: K.softmax(t), lambda x: _numpy_softmax(x, False)),
    "log_softmax": (lambda t: K.log_softmax(t), lambda x: _numpy_softmax(x, True)),
    "sort rows": (lambda t: K.sort(t, axis=1), lambda x: np.sort(x, axis=1)),
    "top_k 10": (lambda t: K.top_k(t, 10)[0],
                 lambda x: -np.sort(-np.partition(x, -10, axis=1)[:, -10:], axis=1)),
}


ROW_CASES = ("softmax", "log_softmax", "sparse_xent")  # also timed on a classifier head's rows


def run(rows: int, cols: int, repeat: int, names: tuple[str, ...] | None = None) -> list[dict]:
    """The cases ``names`` (all by default) on ``rows`` x ``cols`` float32 normals times 3."""
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(rows, cols)) * 3).astype(np.float32)
    labels = rng.integers(0, cols, size=rows).astype(np.int32)
    results = []
    cases = dict(CASES)
    cases["sparse_xent"] = (None, None)
    for name, (build, reference) in cases.items():
        if names is not None and name not in names:
            continue
        p = kiln.placeholder((None, cols))
        if name == "sparse_xent":
            lab = kiln.placeholder((None,), "int32")
            fn = kiln.function([p, lab], K.sparse_softmax_cross_entropy(p, lab))
            feeds = [x, labels]

            def numpy_call():
                return _numpy_xent(x, labels)
        else:
            fn = kiln.function([p], build(p))
            feeds = [x]

            def numpy_call(reference=reference):
                return reference(x)
        with np.errstate(all="ignore"):
            got, want = fn(*feeds), numpy_call()
        # a row's sum may cancel: its float32 rounding is relative to the sum of |x|
        slack = np.abs(x).sum(axis=1) * 1e-6
        slack = slack if np.ndim(got) == 1 else slack[:, None]
        if not np.allclose(got, want, rtol=2e-5, atol=1e-6, equal_nan=True) and not (
                name == "sum rows" and np.all(np.abs(got - want) <= slack)):
            raise AssertionError(f"bench_kernels: {name}: kiln and NumPy disagree")
        plan = next(iter(fn.program._plans.values()))
        with np.errstate(all="ignore"):
            kiln_s = min(harness.call_times(lambda plan=plan, feeds=feeds: plan.run(feeds), repeat))
            numpy_s = min(harness.call_times(numpy_call, repeat))
        results.append({"case": name, "rows": rows, "cols": cols, "kiln_us": kiln_s * 1e6,
                        "numpy_us": numpy_s * 1e6, "numpy_over_kiln": numpy_s / kiln_s,
                        "kernels": [s.label for s in plan.steps]})
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--head-rows", type=int, default=1024)
    ap.add_argument("--head-cols", type=int, nargs="*", default=[2, 10],
                    help="row lengths of the classifier-head cases (none: skip them)")
    args = ap.parse_args(argv)
    results = run(args.rows, args.cols, args.repeat)
    for cols in args.head_cols:
        results += run(args.head_rows, cols, args.repeat * 10, ROW_CASES)
    print(f"{'case':<14}{'shape':>12}{'kiln us':>10}{'numpy us':>10}{'numpy/kiln':>12}  kernels")
    for r in results:
        shape = f"{r['rows']}x{r['cols']}"
        print(f"{r['case']:<14}{shape:>12}{r['kiln_us']:>10.1f}{r['numpy_us']:>10.1f}"
              f"{r['numpy_over_kiln']:>11.2f}x  {', '.join(r['kernels'])}")
    for r in results:
        print("JSON " + json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
