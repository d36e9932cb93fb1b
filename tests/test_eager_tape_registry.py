"""Issue 45 acceptance: ``kiln.GradientTape`` gradients of EAGER calls match central finite
differences in float64 for every differentiable registered op (registry-driven, like
tests/core/test_registry_ops.py's graph gradient test).

Each op runs eagerly by name (``kiln.ops.apply_op``) on its float64 examples inside a tape;
the target ``sum(out * c)`` (a fixed random cotangent ``c``) is computed with ``kiln.ops`` so it
is recorded too. The oracle is central finite differences of the same eager computation.
"""

from __future__ import annotations

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
import kiln.tape
from kiln.core.ops import all_ops
from kiln.core.ops.registry import SOURCE

OPS = all_ops()
DIFFERENTIABLE = sorted(n for n, op in OPS.items()
                        if op.kind != SOURCE and op.differentiable)

#: ops that cannot be called eagerly by name on arrays, each with its reason
EXCLUDED: dict[str, str] = {}
#: ops whose gradient is by design not the derivative of their value (no finite-difference
#: oracle; each is checked against its closed form in its own test below)
NOT_FD: dict[str, str] = {
    "custom_vjp": "the user's rule is deliberately not d(value)/d(input): "
                  "test_custom_vjp_tape_gradient_is_the_rule",
}


def _examples(name: str):
    return OPS[name].examples(np.random.default_rng(abs(hash(name)) % 2**32), "float64")


def _target(name: str, inputs: list, attrs: dict, c: np.ndarray):
    return kiln.ops.sum(kiln.ops.multiply(kiln.ops.apply_op(name, *inputs, **attrs), c))


def test_exclusions_are_few_and_stated():
    assert len(DIFFERENTIABLE) > 50  # the registry loaded (77 ops when this was written)
    assert len(EXCLUDED) <= 5, sorted(EXCLUDED)
    for name, reason in EXCLUDED.items():
        assert name in DIFFERENTIABLE, f"{name}: excluded but not a differentiable op"
        assert len(reason) > 20, f"{name}: state why it is excluded"
    assert set(NOT_FD) <= set(DIFFERENTIABLE) and len(NOT_FD) <= 2


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_tape_gradient_matches_finite_differences(name):
    if name in EXCLUDED:
        pytest.skip(EXCLUDED[name])
    checked = 0
    for example in _examples(name):
        if example.wrt == ():
            continue
        inputs = [np.array(a, copy=True) for a in example.inputs]
        wrt = example.wrt
        if wrt is None:
            wrt = tuple(i for i, a in enumerate(inputs) if a.dtype.kind == "f")
        ref_out = np.asarray(OPS[name].ref(*inputs, **example.attrs))
        c = np.random.default_rng(0).normal(size=ref_out.shape)
        sources = [inputs[i] for i in wrt]
        with kiln.GradientTape() as tape:
            tape.watch(sources)
            target = _target(name, inputs, example.attrs, c)
        grads = tape.gradient(target, sources)
        compiles = kiln.tape.cache_info()["compiles"]
        with kiln.GradientTape() as tape:  # the same signature again: the cached gradient
            tape.watch(sources)
            again = tape.gradient(_target(name, inputs, example.attrs, c), sources)
        assert kiln.tape.cache_info()["compiles"] == compiles, f"{name}: gradient recompiled"
        for g, h in zip(grads, again):
            np.testing.assert_array_equal(g, h, err_msg=f"{name}: cached gradient differs")
        assert np.ndim(target) == 0
        np.testing.assert_allclose(target, np.sum(ref_out * c), rtol=1e-10, atol=1e-10,
                                   err_msg=f"{name}: eager value vs reference {example.attrs}")

        def f(inputs=inputs, attrs=example.attrs, c=c) -> float:
            return float(_target(name, inputs, attrs, c))

        for g, i in zip(grads, wrt):
            assert g is not None, f"{name}: no tape gradient for input {i} {example.attrs}"
            assert g.shape == inputs[i].shape and g.dtype == inputs[i].dtype
            numeric = numeric_grad(f, inputs[i], example.fd_eps)
            np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} d/d input {i} {example.attrs}")
        checked += 1
    assert checked or name in NOT_FD, f"{name}: no example with a float input to differentiate"


def test_apply_op_keys_attrs_in_the_eager_cache():
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(kiln.ops.apply_op("sum", x, axis=(1,), keepdims=False),
                                  [3.0, 12.0])
    np.testing.assert_array_equal(kiln.ops.apply_op("sum", x, axis=(0,), keepdims=False),
                                  [3.0, 5.0, 7.0])


def test_apply_op_is_symbolic_on_nodes():
    p = kiln.placeholder((2, 3), "float64")
    node = kiln.ops.apply_op("sum", p, axis=(1,), keepdims=False)
    assert node.shape == (2,)
    np.testing.assert_array_equal(kiln.function([p], node)(np.ones((2, 3))), [3.0, 3.0])


def test_custom_vjp_tape_gradient_is_the_rule():
    """custom_vjp(y, *xs, rule): the value is y, no gradient reaches y, and xs get
    rule(cotangent) - the oracle is the rule applied to the cotangent."""
    for example in _examples("custom_vjp"):
        inputs = [np.array(a, copy=True) for a in example.inputs]
        rule = example.attrs["rule"]
        c = np.random.default_rng(0).normal(size=inputs[0].shape)
        with kiln.GradientTape() as tape:
            tape.watch(inputs)
            target = _target("custom_vjp", inputs, example.attrs, c)
        grads = tape.gradient(target, inputs, unconnected_gradients="zero")
        np.testing.assert_allclose(target, np.sum(inputs[0] * c), rtol=1e-12)
        ph = kiln.placeholder(c.shape, "float64")
        expected = kiln.function([ph], rule(ph))(c)
        closed = {"_double": 2 * c, "_double_sum": np.full((4,), 2 * c.sum())}[rule.__name__]
        np.testing.assert_allclose(expected, closed, rtol=1e-12)
        np.testing.assert_array_equal(grads[0], np.zeros_like(inputs[0]))
        np.testing.assert_allclose(grads[1], expected, rtol=1e-12, atol=1e-12)


def test_apply_op_names_the_op_on_bad_input():
    with pytest.raises(ValueError, match="apply_op: unknown op 'no_such_op'"):
        kiln.ops.apply_op("no_such_op", np.ones(2))
    with pytest.raises(TypeError, match=r"apply_op\('argmax'\).*keepdims.*\[\(2, 3\)\]"):
        kiln.ops.apply_op("argmax", np.ones((2, 3)), axis=1)
