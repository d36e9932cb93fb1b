"""Registry-driven tests: every registered op is checked as soon as it is registered.

* completeness: shape rule, reference, VJP decision, examples and a kernel path;
* forward: the op's static type agrees with what its reference computes (also with an unknown
  batch dimension), and each backend's result matches the reference;
* gradient: every differentiable op's VJP matches central finite differences in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
from kiln.core.ops import all_ops
from kiln.core.ops.registry import ELEMENTWISE, KERNELS, SOURCE, apply

OPS = all_ops()
TESTED = sorted(n for n, op in OPS.items() if op.kind != SOURCE)
DIFFERENTIABLE = sorted(n for n in TESTED if OPS[n].differentiable)


def _backends() -> list[str]:
    names = ["reference"]
    try:
        import kiln.core.backends.cpu  # noqa: F401

        names.append("cpu")
    except ModuleNotFoundError:
        pass
    return names


def _examples(name: str, dtype: str):
    op = OPS[name]
    return op.examples(np.random.default_rng(abs(hash(name)) % 2**32), dtype)


def _build(name: str, example, batch_unknown: bool = False):
    phs = []
    first_float = next((k for k, a in enumerate(example.inputs)
                        if np.asarray(a).dtype.kind == "f" and np.ndim(a) >= 1), None)
    for k, a in enumerate(example.inputs):
        a = np.asarray(a)
        shape = a.shape
        if batch_unknown and k == first_float:
            shape = (None,) + shape[1:]
        phs.append(kiln.placeholder(shape, a.dtype.name))
    return phs, apply(name, *phs, **example.attrs)


def test_registry_is_complete():
    try:
        import kiln.core.backends.cpu  # noqa: F401
    except ModuleNotFoundError:
        pass
    problems = []
    for name, op in OPS.items():
        if op.infer is None or op.ref is None:
            problems.append(f"{name}: missing shape rule or reference")
        if op.differentiable and op.vjp is None:
            problems.append(f"{name}: differentiable without a vjp")
        if not op.differentiable and not op.nondiff_reason:
            problems.append(f"{name}: non-differentiable without a stated reason")
        if op.kind == SOURCE:
            continue
        if op.examples is None:
            problems.append(f"{name}: no examples for the registry tests")
        has_kernel = (op.kind == ELEMENTWISE and op.scalar is not None) or name in KERNELS.get(
            "cpu", set())
        if not has_kernel:
            problems.append(f"{name}: no CPU kernel path (scalar body or registered kernel)")
    assert not problems, "\n".join(problems)


@pytest.mark.nojit
@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", TESTED)
def test_forward_matches_reference(name, dtype, backend):
    for example in _examples(name, dtype):
        expected = np.asarray(OPS[name].ref(*example.inputs, **example.attrs))
        phs, node = _build(name, example)
        assert node.shape == expected.shape, f"{name}: shape rule {node.shape} vs {expected.shape}"
        assert node.dtype == expected.dtype.name or expected.dtype.kind == node.dtype[0] == "b"
        fn = kiln.function(phs, node, backend=backend, optimize=False)
        got = fn(*example.inputs)
        assert got.dtype == np.dtype(node.dtype)
        tol = 1e-5 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(got, expected.astype(node.dtype), rtol=tol, atol=tol,
                                   err_msg=f"{name} {example.attrs}")


@pytest.mark.parametrize("name", TESTED)
def test_shape_rule_with_unknown_batch(name):
    for example in _examples(name, "float32"):
        if not example.inputs or np.ndim(example.inputs[0]) == 0:
            continue
        try:
            _, node = _build(name, example, batch_unknown=True)
        except ValueError:
            continue  # ops that need a static size here say so clearly; that's allowed
        expected = np.shape(OPS[name].ref(*example.inputs, **example.attrs))
        assert len(node.shape) == len(expected)
        for d, e in zip(node.shape, expected):
            assert d is None or d == e, f"{name}: {node.shape} vs {expected}"




@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradient_matches_finite_differences(name):
    op = OPS[name]
    for example in _examples(name, "float64"):
        if example.wrt == ():
            continue
        inputs = [np.array(a, copy=True) for a in example.inputs]
        phs, node = _build(name, example)
        ref_out = np.asarray(op.ref(*inputs, **example.attrs))
        weights = np.random.default_rng(0).normal(size=ref_out.shape)
        loss = kiln.ops.sum(node * weights)
        wrt = example.wrt
        if wrt is None:
            wrt = tuple(i for i, a in enumerate(inputs) if np.asarray(a).dtype.kind == "f")
        grads = kiln.grad(loss, [phs[i] for i in wrt])
        fn = kiln.function(phs, grads, backend="reference", optimize=False)
        analytic = fn(*inputs)

        def f(inputs=inputs, attrs=example.attrs, weights=weights) -> float:
            return float(np.sum(np.asarray(op.ref(*inputs, **attrs)) * weights))

        for k, i in enumerate(wrt):
            numeric = numeric_grad(f, inputs[i], example.fd_eps)
            np.testing.assert_allclose(analytic[k], numeric, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} d/d input {i} {example.attrs}")
