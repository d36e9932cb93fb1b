"""The pieces keras.io programs needed (issue 44): a PyDataset subclass that sets
``self.num_batches``; Keras' positional ``sample_weight`` of ``Metric.update_state``; a metric
update on a functional model's symbolic tensors (discarded, as Keras' StatelessScope does);
``Metric.variables`` of a built-in metric as assignable Variables; TensorFlow and JAX given
kiln values (a Variable's value eagerly, kiln's named error inside a layer's call()); kiln
Variables through ``jax.jit`` as their values."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import kiln


class _Pairs(kiln.utils.PyDataset):
    def __init__(self, num_batches):
        super().__init__()
        self.num_batches = num_batches
        self.seen = []

    def __len__(self):
        return self.num_batches

    def __getitem__(self, i):
        self.seen.append(i)
        x = np.full((4, 2), float(i), "float32")
        return x, x[:, :1]


def test_a_subclass_may_set_num_batches_and_fit_reads_it():
    ds = _Pairs(3)
    assert (ds.num_batches, len(ds)) == (3, 3)
    model = kiln.Sequential([kiln.Input((2,)), kiln.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(ds, epochs=1, verbose=0, shuffle=False)
    assert sorted(set(ds.seen)) == [0, 1, 2]
    with pytest.raises(ValueError, match=r"_Pairs.num_batches must be a non-negative int or "
                                         r"None, received -2"):
        _Pairs(-2)


def test_metric_sample_weight_may_be_positional():
    y = np.array([[1], [0], [1], [1]], "float32")
    p = np.array([[0.9], [0.8], [0.2], [0.7]], "float32")
    w = np.array([[1.0], [2.0], [3.0], [4.0]], "float32")
    # correct: rows 0 and 3 -> (1 + 4) / (1 + 2 + 3 + 4)
    assert kiln.metrics.BinaryAccuracy()(y, p, w) == pytest.approx(0.5)
    assert kiln.metrics.BinaryAccuracy()(y, p, sample_weight=w) == pytest.approx(0.5)
    # (batch, 1) weights of (batch,) values: the weighted mean, not a (batch, batch) product
    values = np.array([1.0, 0.0, 0.0, 1.0])
    assert kiln.metrics.Mean()(values, sample_weight=w) == pytest.approx(0.5)
    with pytest.raises(TypeError, match="update_state expects 2 arrays"):
        kiln.metrics.BinaryAccuracy().update_state(y)


def test_metric_update_on_a_functional_model_symbolic_inputs_is_discarded():
    metric = kiln.metrics.Mean()

    class Tracked(kiln.layers.Layer):
        def call(self, x):
            metric.update_state(x)
            return x

    out = Tracked()(kiln.Input((2,)))
    assert out.shape == (None, 2) and metric.result() == 0.0


def test_builtin_metric_variables_assign_the_state():
    m = kiln.metrics.Mean()
    m.update_state(np.array([1.0, 3.0]))
    total, count = m.variables
    assert (float(total.numpy()), float(count.numpy())) == (4.0, 2.0)
    total.assign(np.asarray(10.0))
    assert m.result() == pytest.approx(5.0)


def test_tensorflow_reads_a_variable_eagerly_and_refuses_it_in_a_layer_call():
    tf = pytest.importorskip("tensorflow")
    v = kiln.Variable(np.arange(4, dtype="float32").reshape(2, 2), name="w")
    assert float(tf.reduce_sum(v)) == 6.0

    class Standardize(kiln.layers.Layer):
        def build(self, shape):
            self.w = self.add_weight(shape=(2,), initializer="ones")

        def call(self, x):
            mean, _ = tf.nn.moments(self.w, axes=[0])
            return x - mean

    with pytest.raises(TypeError, match=r"TensorFlow's moments\(\) was given a symbolic kiln "
                                        r"tensor .*use kiln.ops.moments instead"):
        Standardize()(kiln.Input((2,)))


def test_variables_enter_jax_jit_as_their_values():
    jax = pytest.importorskip("jax")
    a = kiln.Variable(np.arange(3, dtype="float32"), name="a")
    b = kiln.Variable(np.ones((2, 2), "float32"), name="b")

    @jax.jit
    def step(state):
        x, y = state
        return x * 2.0, y.sum()

    doubled, total = step((a, b))
    np.testing.assert_array_equal(np.asarray(doubled), [0.0, 2.0, 4.0])
    assert float(total) == 4.0
    assert [np.asarray(leaf).tolist() for leaf in jax.tree_util.tree_leaves([a])] == [
        [0.0, 1.0, 2.0]]
    with pytest.raises(TypeError, match=r"jax.sum\(\) was given a symbolic kiln tensor .*"
                                        r"use kiln.ops.sum instead"):
        jax.numpy.sum(kiln.Input((3,)))


def test_jax_imported_after_kiln_still_gets_variables_as_values():
    pytest.importorskip("jax")
    code = ("import kiln, numpy as np\n"
            "import jax\n"
            "v = kiln.Variable(np.full(2, 3.0, 'float32'), name='v')\n"
            "print(float(jax.jit(lambda v: v.sum())(v)))\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "6.0"


def test_a_tensorflow_value_in_a_kiln_computation_is_named():
    tf = pytest.importorskip("tensorflow")
    with pytest.raises(TypeError, match=r"received ResourceVariable \(a tensorflow value\): "
                                        r"kiln's compiled graphs cannot use another "
                                        r"framework's tensors or variables"):
        kiln.ops.add(kiln.Input((2,)), tf.Variable([1.0, 2.0]))
