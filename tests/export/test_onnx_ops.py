"""Registry-driven ONNX export tests: every registered op has an ONNX rule or a stated reason
why it is not exportable, and every op with a rule, exported alone on each of its registry
examples, computes in onnxruntime what its NumPy reference computes."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.core import Graph
from kiln.core.ops import all_ops
from kiln.core.ops.registry import apply
from kiln.export import NOT_EXPORTABLE, RULES, ExportError, to_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

OPS = all_ops()
SOURCES = {"placeholder", "param", "constant"}  # exported as graph inputs / initializers
#: ops whose registry examples cannot stand alone in a graph, with the test that covers them
COVERED_ELSEWHERE = {
    # its examples read a packed buffer fed as an input; a loop's own outputs are exported
    # in test_onnx_api.py and test_onnx_models.py (and here through the `scan` examples)
    "scan_output",
}
EXPORTED = sorted(n for n in OPS if n in RULES and n not in SOURCES | COVERED_ELSEWHERE)


def test_every_registered_op_has_a_rule_or_a_reason():
    missing = sorted(n for n in OPS if n not in RULES and n not in NOT_EXPORTABLE)
    assert not missing, f"ops with neither an ONNX rule nor a 'not exportable' reason: {missing}"
    both = sorted(set(RULES) & set(NOT_EXPORTABLE))
    assert not both, f"ops both translated and declared not exportable: {both}"
    stale = sorted((set(RULES) | set(NOT_EXPORTABLE)) - set(OPS))
    assert not stale, f"ONNX table entries for ops that are not registered: {stale}"
    assert all(isinstance(r, str) and len(r) > 20 for r in NOT_EXPORTABLE.values())


def _run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, feeds)))


def _examples(name: str):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    return OPS[name].examples(rng, "float32")


def _cases():
    for name in EXPORTED:
        for k in range(len(_examples(name))):
            yield pytest.param(name, k, id=f"{name}-{k}")


@pytest.mark.parametrize("name,k", list(_cases()))
def test_op_matches_its_reference_in_onnxruntime(name, k):
    ex = _examples(name)[k]
    arrays = [np.asarray(a) for a in ex.inputs]
    phs = [kiln.placeholder(a.shape, a.dtype.name, name=f"in{j}") for j, a in enumerate(arrays)]
    node = apply(name, *phs, **ex.attrs)
    model = to_onnx(Graph(phs, [node]), opset=17)
    onnx.checker.check_model(model, full_check=True)
    (got,) = _run(model, arrays)
    want = np.asarray(OPS[name].ref(*arrays, **ex.attrs)).astype(node.dtype)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                 want.dtype, want.shape)
    # onnxruntime's threads may sum in another order: a float32 sum that cancels differs by a
    # rounding of its largest terms (seen: conv2d example 9, 1.3e-6 on 0.02), so the absolute
    # slack follows the output's scale; a wrong export is off by far more
    finite = want[np.isfinite(want)] if np.issubdtype(want.dtype, np.floating) else want[:0]
    scale = float(np.abs(finite).max()) if finite.size else 0.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=max(1e-6, 1e-5 * scale))


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "logsumexp"])
@pytest.mark.parametrize("opset", [13, 18])
def test_reductions_at_both_axis_spellings(name, opset):
    # before opset 18 (13 for ReduceSum) the axes are an attribute, from then an input
    x = np.random.default_rng(0).uniform(0.5, 1.5, size=(2, 3, 4)).astype(np.float32)
    ph = kiln.placeholder((None, 3, 4), name="x")
    node = apply(name, ph, axis=(0, 2), keepdims=False)
    model = to_onnx(Graph([ph], [node]), opset=opset)
    onnx.checker.check_model(model, full_check=True)
    np.testing.assert_allclose(_run(model, [x])[0], OPS[name].ref(x, axis=(0, 2),
                                                                 keepdims=False), rtol=1e-5)


def test_numerically_stable_composites_at_extreme_values():
    # the references are stable where the naive formulas overflow
    x = np.array([[-100.0, -20.0, 0.0, 20.0, 100.0]], np.float32)
    ph = kiln.placeholder((None, 5), name="x")
    outs = [apply("softplus", ph), apply("sigmoid", ph),
            apply("logsumexp", ph, axis=(1,), keepdims=True),
            apply("log_softmax", ph, axis=1)]
    got = _run(to_onnx(Graph([ph], outs)), [x])
    for node, g in zip(outs, got):
        want = OPS[node.op].ref(x, **node.attrs)
        assert np.all(np.isfinite(g)), node.op
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6, err_msg=node.op)


@pytest.mark.parametrize("name", sorted(n for n in NOT_EXPORTABLE if n in OPS))
def test_not_exportable_ops_raise_naming_the_op_and_the_reason(name):
    ex = _examples(name)[0]
    phs = [kiln.placeholder(np.shape(a), np.asarray(a).dtype.name) for a in ex.inputs]
    node = apply(name, *phs, **ex.attrs)
    with pytest.raises(ExportError, match=f"op '{name}' is not exportable: "
                       f"{NOT_EXPORTABLE[name][:20]}"):
        to_onnx(Graph(phs, [node]))


def test_scan_output_of_a_packed_buffer_that_is_no_loop_is_refused():
    ex = _examples("scan_output")[0]
    phs = [kiln.placeholder(np.shape(a), np.asarray(a).dtype.name) for a in ex.inputs]
    node = apply("scan_output", *phs, **ex.attrs)
    with pytest.raises(ExportError, match="scan_output of a placeholder node"):
        to_onnx(Graph(phs, [node]))


def test_importing_kiln_never_imports_onnx():
    code = ("import sys, kiln\n"
            "assert callable(kiln.export.to_onnx)\n"  # reachable from `import kiln`
            "kiln.Sequential([kiln.Input((3,)), kiln.layers.Dense(2)])\n"
            "assert 'onnx' not in sys.modules and 'onnxruntime' not in sys.modules\n")
    env = dict(os.environ, KILN_JIT="0")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_missing_onnx_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    x = kiln.placeholder((None, 3), name="x")
    with pytest.raises(ImportError, match=r'pip install "kiln-nn\[onnx\]"'):
        to_onnx(Graph([x], [kiln.ops.relu(x)]))
