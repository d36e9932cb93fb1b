"""Every kernel the simulator runs must also compile for a real GPU: the kernels launched by an
MLP and a convnet training step, every reduction and row kernel, and one kernel holding every
elementwise op's scalar body are compiled to PTX (sm_90) by NVVM, in a process without the
simulator. Needs NVVM and NVRTC (``pip install nvidia-nvvm nvidia-cuda-nvrtc``, or
``numba-cuda[cu13]``), not a GPU; skipped without them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba.cuda")
pytest.importorskip("numba_cuda")

import kiln  # noqa: E402
import kiln.ops as K  # noqa: E402
from kiln.core.backends.cuda import _codegen as cg  # noqa: E402
from kiln.core.backends.cuda import _jit  # noqa: E402
from kiln.core.ir import TensorType  # noqa: E402
from kiln.core.ops import all_ops  # noqa: E402
from kiln.core.ops.registry import ELEMENTWISE  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

_COMPILE = """
import json, sys
try:  # NVVM and NVRTC (CUDA toolkit wheels) are needed, not a GPU
    from numba import cuda, float32
    def k(a):
        a[0] = float32(1.0)
    cuda.compile_ptx(k, (float32[::1],), cc=(9, 0))
except Exception as exc:
    print("NO-NVVM " + repr(exc)[:300].replace(chr(10), " "))
    sys.exit(0)
from kiln.core.backends.cuda._jit import compile_ptx
bad = []
for path, name, types in json.load(open(sys.argv[1])):
    try:
        compile_ptx(path, name, [tuple(t) for t in types])
    except Exception as exc:
        bad.append(f"{name} {path}: {type(exc).__name__}: {str(exc)[:800]}")
print("BAD " + json.dumps(bad))
"""


def _kitchen_sink(dtype: str) -> tuple[str, str, tuple]:
    """One loop kernel computing every elementwise op's body, with the operand dtypes of the
    op's registry examples (plus int32 variants of the integer-friendly ops)."""
    ins = [dtype, "float64" if dtype == "float32" else "float32", "bool", "int32", "int64"]
    name_of = {d: f"x{k}" for k, d in enumerate(ins)}
    lines = []
    rng = np.random.default_rng(0)
    for name, op in sorted(all_ops().items()):
        if op.kind != ELEMENTWISE or op.scalar is None:
            continue
        variants = {}
        for ex in op.examples(rng, dtype):
            dts = tuple(np.asarray(a).dtype.name for a in ex.inputs)
            shapes = tuple(np.shape(a) for a in ex.inputs)
            variants[(dts, repr(sorted(ex.attrs.items())))] = (dts, shapes, ex.attrs)
        if name in ("neg", "abs", "sign", "square", "relu", "add", "maximum", "less"):
            k = len(next(iter(variants.values()))[0])
            variants["int"] = (("int32",) * k, ((),) * k, {})
        for dts, shapes, attrs in variants.values():
            out_t = op.infer(*[TensorType(s, d) for s, d in zip(shapes, dts)], **attrs)
            expr = cg.instruction(name, attrs, [name_of[d] for d in dts], dts, out_t.dtype)
            lines.append(f"v{len(lines)} = {expr}")
    src = cg.loop_source(1, cg.CONTIG, [cg.CONTIG] * len(ins), lines, "x0")
    kernel = _jit.load(src, "k_loop")
    types = [("int64",), ("int64",), ("array", dtype, 1), ("int64",)]
    for d in ins:
        types += [("array", d, 1), ("int64",)]
    return kernel.path, kernel.name, tuple(types)


def _graph():
    rng = np.random.default_rng(0)
    x = kiln.placeholder((None, 6, 6, 1))
    y = kiln.placeholder((None,), "int32")
    key = kiln.placeholder((2,), "int64")
    w = kiln.Variable(rng.normal(size=(3, 3, 1, 2)))
    v = kiln.Variable(rng.normal(size=(8, 3)))
    h = K.avg_pool2d(K.max_pool2d(K.relu(K.conv2d(x, w, padding="same")), 2), 1,
                     padding="same")
    h = K.dropout(K.reshape(h, (-1, 18)), 0.5, key)[:, :8]
    logits = h @ v
    wide = K.concatenate([logits] * 200, axis=1)  # long rows: block-mode kernels on a GPU
    loss = (K.mean(K.sparse_softmax_cross_entropy(logits, y))
            + K.sum(K.softmax_cross_entropy(wide, K.softmax(wide)))
            + K.sum(K.random_normal(key, (3,))) + K.sum(K.one_hot(y, 3))
            + K.sum(K.take(v, y, 0)) + K.sum(K.pad(v, ((0, 1), (1, 0)))))
    grads = kiln.grad(loss, [w, v, x])
    outs = [loss, *grads, K.argmax(logits), K.argmin(wide, 1), K.logsumexp(wide, axis=1),
            K.prod(logits, axis=0), K.min(logits), K.max(wide, axis=1), K.mean(wide, axis=0),
            K.log_softmax(wide), K.reshape(h, (1, -1, 8)) @ K.expand_dims(v, 0)]
    feeds = [rng.normal(size=(2, 6, 6, 1)).astype(np.float32), np.array([0, 2], np.int32),
             np.array([1, 2], np.int64)]
    return [x, y, key], outs, feeds


def _record(monkeypatch) -> list:
    """The kernels (source, name, argument types) that the graph above launches with a real
    GPU's block sizes (recorded, not run)."""
    from kiln.core.backends.cuda import _device, _lower, _program

    def record_only(self, griddim, blockdim, *args):
        _jit.launches.append((self.path, self.name, tuple(_jit.arg_type(a) for a in args)))

    monkeypatch.setattr(_jit.Kernel, "launch", record_only)
    monkeypatch.setattr(_jit, "launches", [])
    inputs, outs, feeds = _graph()
    # a real GPU's block sizes (the simulator's kernels differ only in those constants)
    monkeypatch.setattr(_program, "launch_config", lambda: _device.REAL)
    for split_k in (0, 2):
        monkeypatch.setattr(_lower, "CONV_SPLIT_K", split_k)
        kiln.function(inputs, outs, backend="cuda")(*feeds)
    found = set(_jit.launches)
    found.add(_kitchen_sink("float32"))
    found.add(_kitchen_sink("float64"))
    return sorted(found)


def test_kernels_compile_to_ptx_for_a_real_gpu(tmp_path, monkeypatch):
    launched = _record(monkeypatch)
    names = {name for _, name, _ in launched}
    assert {"k_conv_fwd", "k_conv_bpi", "k_conv_bpf", "k_pool", "k_maxgrad", "k_avggrad",
            "k_gemm", "k_red", "k_row", "k_random", "k_take", "k_take_grad", "k_one_hot",
            "k_fill", "k_loop"} <= names
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    parts = max(1, min(4, os.cpu_count() or 1))  # compile in parallel processes
    procs = []
    for k in range(parts):
        spec = tmp_path / f"kernels{k}.json"
        spec.write_text(json.dumps(launched[k::parts]))
        procs.append(subprocess.Popen([sys.executable, "-c", _COMPILE, str(spec)], cwd=ROOT,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    bad = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        if "NO-NVVM" in out:
            pytest.skip("the CUDA compiler libraries are missing (pip install nvidia-nvvm "
                        "nvidia-cuda-nvrtc, or numba-cuda[cu13]): " + out.split("NO-NVVM", 1)[1])
        bad += json.loads(out.split("BAD ", 1)[1])
    assert not bad, "\n".join(bad)
