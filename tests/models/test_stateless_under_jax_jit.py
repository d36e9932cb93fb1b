"""Keras' JAX training-loop guide jits whole steps around ``model.stateless_call``,
``optimizer.stateless_apply`` and ``metric.stateless_update_state``: inside ``jax.jit`` their
arguments are tracers, and kiln runs them as host callbacks. Oracle: the same step run
eagerly (no jit), and NumPy for the metric."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import kiln as keras  # noqa: E402


def _setup():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    optimizer = keras.optimizers.Adam(learning_rate=0.1)
    optimizer.build(model.trainable_variables)
    metric = keras.metrics.CategoricalAccuracy()
    loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)

    def compute(tv, ntv, mv, x, y):
        y_pred, ntv = model.stateless_call(tv, ntv, x)
        mv = metric.stateless_update_state(mv, y, y_pred)
        return loss_fn(y, y_pred), (ntv, mv)

    grad_fn = jax.value_and_grad(compute, has_aux=True)

    def step(state, data):
        tv, ntv, ov, mv = state
        (loss, (ntv, mv)), grads = grad_fn(tv, ntv, mv, *data)
        tv, ov = optimizer.stateless_apply(ov, grads, tv)
        return loss, (tv, ntv, ov, mv)

    state = ([np.array(v) for v in model.trainable_variables],
             [np.array(v) for v in model.non_trainable_variables],
             [np.array(v) for v in optimizer.variables],
             [np.array(v) for v in metric.variables])
    return step, state, metric


def test_a_jitted_step_matches_the_eager_step():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, 8)]
    step, state, _ = _setup()
    eager_loss, eager_state = step(state, (x, y))
    step, state, metric = _setup()
    jit_loss, jit_state = jax.jit(step)(state, (x, y))
    np.testing.assert_allclose(float(jit_loss), float(eager_loss), rtol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(jit_state), jax.tree_util.tree_leaves(eager_state)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert int(np.asarray(jit_state[2][0])) == 1  # the optimizer's iterations counted the step
    # the metric's state counts the batch's correct predictions of the weights before the
    # update (NumPy oracle)
    kernel, bias = state[0]
    correct = np.sum(np.argmax(x @ kernel + bias, -1) == np.argmax(y, -1))
    _, _, _, mv = jit_state
    np.testing.assert_allclose([float(np.asarray(v)) for v in mv], [correct, 8.0])
    assert metric.stateless_result([np.asarray(v) for v in mv]) == pytest.approx(correct / 8)


def test_stateless_result_under_jit():
    _, state, metric = _setup()
    out = jax.jit(metric.stateless_result)([np.float32(3.0), np.float32(4.0)])
    assert float(out) == pytest.approx(0.75)
