"""The IR: types, hash-consing, topological order, substitution, dumps, errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.ir import Graph, TensorType, toposort


def test_tensor_type_normalizes_and_prints():
    t = TensorType((None, 3), np.float64)
    assert t.shape == (None, 3) and t.dtype == "float64" and t.ndim == 2
    assert not t.is_static and t.size is None
    assert str(t) == "float64[?, 3]"
    assert TensorType((2, 3)).dtype == "float32" and TensorType((2, 3)).size == 6
    with pytest.raises(TypeError, match="complex128"):
        TensorType((2,), "complex128")
    with pytest.raises(ValueError, match="negative"):
        TensorType((-1,))


def test_nodes_are_hash_consed_and_frozen():
    x = kiln.placeholder((None, 4))
    a = K.exp(x) + 1.0
    b = K.exp(x) + 1.0
    assert a is b
    assert K.sum(x, axis=1) is K.sum(x, axis=(1,))
    assert K.sum(x, axis=1) is not K.sum(x, axis=0)
    with pytest.raises(AttributeError, match="immutable"):
        a.op = "mul"
    # two placeholders with the same type are different inputs
    assert kiln.placeholder((None, 4)) is not kiln.placeholder((None, 4))


def test_constants_with_equal_values_are_shared():
    x = kiln.placeholder((3,))
    assert (x * np.array([1.0, 2.0, 3.0])) is (x * np.array([1.0, 2.0, 3.0]))
    assert (x * 2.0) is not (x * 3.0)


def test_toposort_handles_100k_chain_without_recursion():
    x = kiln.placeholder((4,))
    y = x
    for _ in range(100_000):
        y = K.tanh(y)
    order = toposort([y])
    assert len(order) == 100_001
    assert order[0] is x and order[-1] is y
    g = kiln.grad(K.sum(y), [x])[0]
    assert len(toposort([g])) > 200_000


def test_toposort_orders_inputs_first_and_dedups():
    x = kiln.placeholder((2,))
    a = K.exp(x)
    b = a * a + a
    order = toposort([b, a])
    pos = {id(n): i for i, n in enumerate(order)}
    for n in order:
        for i in n.inputs:
            assert pos[id(i)] < pos[id(n)]
    assert len(order) == len({id(n) for n in order})


def test_substitute_rebuilds_users():
    x = kiln.placeholder((3,))
    y = kiln.placeholder((3,))
    a = K.exp(x)
    out = a * 2.0 + x
    g = Graph([x, y], [out])
    g2 = g.substitute({a: K.log(y)})
    (new_out,) = g2.outputs
    assert new_out is K.log(y) * 2.0 + x
    from kiln.core.backends.reference import evaluate

    xv, yv = np.array([1.0, 2.0, 3.0], "float32"), np.array([1.0, 2.0, 4.0], "float32")
    np.testing.assert_allclose(evaluate([new_out], {x: xv, y: yv})[0], np.log(yv) * 2 + xv,
                               rtol=1e-6)


def test_dump_is_readable():
    x = kiln.placeholder((None, 2), name="x")
    g = Graph([x], [K.relu(x) * 3.0])
    text = g.dump()
    assert "placeholder" in text and "relu(%0)" in text and "mul(" in text
    assert "# input" in text and "# output [0]" in text
    assert "float32[?, 2]" in text


def test_shape_errors_name_the_op_and_shapes():
    a = kiln.placeholder((32, 784))
    b = kiln.placeholder((512, 10))
    with pytest.raises(ValueError, match=r"matmul: cannot multiply \(32, 784\) by \(512, 10\): "
                                         r"inner dimensions 784 and 512 differ"):
        K.matmul(a, b)
    with pytest.raises(ValueError, match=r"add: shapes \(32, 784\) and \(512, 10\)"):
        a + b
    with pytest.raises(TypeError, match="add: operands must have the same dtype"):
        a + kiln.placeholder((32, 784), "float64")
    with pytest.raises(ValueError, match="reshape"):
        K.reshape(a, (5, -1))
    with pytest.raises(TypeError, match="truth value"):
        bool(a)


def test_core_imports_nothing_above_it():
    code = (
        "import sys, kiln.core, kiln.core.backends.reference\n"
        "bad = [m for m in sys.modules if m.split('.')[:2] in (['kiln','layers'],"
        "['kiln','models'],['kiln','optimizers'],['kiln','callbacks'])]\n"
        "print(bad); assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    import pathlib

    root = pathlib.Path(kiln.__file__).parent / "core"
    for path in root.rglob("*.py"):
        text = path.read_text()
        for pkg in ("layers", "models", "optimizers", "callbacks"):
            assert f"kiln.{pkg}" not in text, f"{path} mentions kiln.{pkg}"


def test_graphs_do_not_keep_variables_alive():
    import gc
    import weakref

    v = kiln.Variable(np.ones(3))
    ref = weakref.ref(v)
    x = kiln.placeholder((3,))
    f = kiln.function([x], x * v, backend="reference")
    np.testing.assert_array_equal(f(np.ones(3)), np.ones(3))
    del v, f
    gc.collect()
    assert ref() is None
