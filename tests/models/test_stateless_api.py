"""Keras 3's stateless API, eagerly on NumPy arrays (issue 44): each stateless method gives the
stateful call's numbers (or a closed form), returns the new state, and leaves the object's own
variables untouched."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers
from kiln.models.custom_steps import StepTraceError

RNG = np.random.default_rng(0)
X = RNG.random((8, 4)).astype(np.float32)
Y = RNG.random((8, 1)).astype(np.float32)


def _values(variables):
    return [v.numpy() for v in variables]


def _assert_same(a, b, **kw):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), **kw)


def _bn_model(seed=0):
    kiln.utils.set_random_seed(seed)
    inp = kiln.Input((4,))
    h = layers.Dense(3, kernel_regularizer=kiln.regularizers.L2(0.1), name="d1")(inp)
    h = layers.BatchNormalization(name="bn")(h)
    model = kiln.Model(inp, layers.Dense(1, name="d2")(h))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model


def test_layer_stateless_call_equals_the_stateful_call_and_changes_nothing():
    dense = layers.Dense(2)
    dense(X)
    own = _values(dense.trainable_variables)
    kernel, bias = RNG.random((4, 2)).astype(np.float32), np.ones(2, np.float32)
    out, non_trainable = dense.stateless_call([kernel, bias], [], X)
    np.testing.assert_allclose(out, X @ kernel + bias, rtol=1e-6)
    assert non_trainable == []
    _assert_same(_values(dense.trainable_variables), own)  # untouched


def test_model_stateless_call_returns_the_new_batchnorm_statistics():
    model = _bn_model()
    trainable = [v + 0.1 for v in _values(model.trainable_variables)]
    non_trainable = _values(model.non_trainable_variables)
    before = _values(model.weights)
    out, new_nt = model.stateless_call(trainable, non_trainable, X, training=True)
    _assert_same(_values(model.weights), before)
    # NumPy oracle: BatchNormalization's moving statistics after one training batch
    kernel, bias = trainable[0], trainable[1]
    h = X @ kernel + bias
    np.testing.assert_allclose(new_nt[0], 0.99 * non_trainable[0] + 0.01 * h.mean(0),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new_nt[1], 0.99 * non_trainable[1] + 0.01 * h.var(0),
                               rtol=1e-5, atol=1e-6)
    # the stateful call with the same weights: the same outputs and statistics
    for v, a in zip(model.trainable_variables, trainable):
        v.assign(a)
    np.testing.assert_allclose(out, np.asarray(model(X, training=True)), rtol=1e-5, atol=1e-6)
    _assert_same(new_nt, _values(model.non_trainable_variables), rtol=1e-6)


def test_stateless_call_losses_and_errors():
    model = _bn_model()
    trainable = [v * 2.0 for v in _values(model.trainable_variables)]
    non_trainable = _values(model.non_trainable_variables)
    _, _, losses = model.stateless_call(trainable, non_trainable, X, return_losses=True)
    np.testing.assert_allclose(losses, [0.1 * np.sum(trainable[0] ** 2)], rtol=1e-5)
    with pytest.raises(ValueError, match=r"`trainable_variables` must be a list of values "
                                         r"corresponding 1:1 to its trainable_variables \(6\), "
                                         "received a list of 3"):
        model.stateless_call(trainable[:3], non_trainable, X)
    with pytest.raises(ValueError, match=r"trainable_variables\[0\] \(for 'd1/kernel'\) must have "
                                         r"shape \(4, 3\), received shape \(3,\)"):
        model.stateless_call([np.zeros(3)] + trainable[1:], non_trainable, X)
    with pytest.raises(ValueError, match="must be built"):
        layers.Dense(2).stateless_call([], [], X)


def test_compute_loss_on_arrays_matches_numpy():
    model = _bn_model()
    y_pred = model.predict(X, verbose=0)
    kernel = model.get_layer("d1").kernel.numpy()
    want = np.mean((Y - y_pred) ** 2) + 0.1 * np.sum(kernel ** 2)
    np.testing.assert_allclose(model.compute_loss(X, Y, y_pred), want, rtol=1e-5)
    sw = np.linspace(0.5, 1.5, 8).astype(np.float32)
    want_sw = np.mean(np.mean((Y - y_pred) ** 2, axis=1) * sw) + 0.1 * np.sum(kernel ** 2)
    np.testing.assert_allclose(model.compute_loss(X, Y, y_pred, sample_weight=sw), want_sw,
                               rtol=1e-5)


def test_stateless_compute_loss_and_compute_loss_and_updates():
    model = _bn_model()
    model.compute_loss(X, Y, model.predict(X, verbose=0))  # resolves the compiled metrics
    trainable = [v * 1.5 for v in _values(model.trainable_variables)]
    non_trainable = _values(model.non_trainable_variables)
    metrics = model.metrics_variables
    before = _values(model.weights)
    y_pred = RNG.random((8, 1)).astype(np.float32)
    loss, (tv, nt, mv) = model.stateless_compute_loss(trainable, non_trainable, metrics,
                                                      x=X, y=Y, y_pred=y_pred)
    np.testing.assert_allclose(loss, np.mean((Y - y_pred) ** 2)
                               + 0.1 * np.sum(trainable[0] ** 2), rtol=1e-5)
    _assert_same(tv, trainable)
    _assert_same(nt, non_trainable)
    _assert_same(mv, metrics)
    loss, (unscaled, y_pred, nt, mv) = model.compute_loss_and_updates(
        trainable, non_trainable, metrics, X, Y, None, training=True)
    _assert_same(_values(model.weights), before)
    out, want_nt = model.stateless_call(trainable, non_trainable, X, training=True)
    np.testing.assert_allclose(y_pred, out, rtol=1e-6)
    _assert_same(nt, want_nt, rtol=1e-6)
    np.testing.assert_allclose(loss, np.mean((Y - out) ** 2) + 0.1 * np.sum(trainable[0] ** 2),
                               rtol=1e-5)
    assert unscaled == loss


def test_optimizer_stateless_apply():
    w = kiln.Variable(np.array([1.0, 2.0], np.float32), name="w")
    sgd = kiln.optimizers.SGD(learning_rate=0.1)
    sgd.build([w])
    opt_vars = _values(sgd.variables)
    new_w, new_opt = sgd.stateless_apply(opt_vars, [np.array([1.0, -1.0])],
                                         [np.array([0.0, 0.0])])
    np.testing.assert_allclose(new_w[0], [-0.1, 0.1], rtol=1e-6)  # w - lr * g
    assert int(new_opt[0]) == 1 and int(sgd.iterations.numpy()) == 0
    np.testing.assert_allclose(w.numpy(), [1.0, 2.0])  # untouched
    # Adam: the same numbers as the stateful apply, state threaded through two steps
    model = _bn_model()
    opt = model.optimizer
    opt.build(model.trainable_variables)
    start_w, start_opt = _values(model.trainable_variables), _values(opt.variables)
    grads = [RNG.random(v.shape).astype(np.float32) for v in model.trainable_variables]
    tv, ov = opt.stateless_apply(start_opt, grads, start_w)
    tv, ov = opt.stateless_apply(ov, grads, tv)
    _assert_same(_values(model.trainable_variables), start_w)
    _assert_same(_values(opt.variables), start_opt)
    opt.apply(grads)
    opt.apply(grads)
    _assert_same(tv, _values(model.trainable_variables), rtol=1e-6)
    _assert_same(ov, _values(opt.variables), rtol=1e-6)
    with pytest.raises(ValueError, match="`optimizer_variables` must be a list"):
        opt.stateless_apply(start_opt[:1], grads, start_w)


def test_metric_stateless_methods():
    mean = kiln.metrics.Mean()
    mean.update_state(np.array([10.0]))
    state = mean.stateless_reset_state()
    _assert_same(state, [0.0, 0.0])
    state = mean.stateless_update_state(state, np.array([1.0, 3.0]))
    state = mean.stateless_update_state(state, np.array([5.0]), sample_weight=np.array([2.0]))
    _assert_same(state, [14.0, 4.0])
    assert float(mean.stateless_result(state)) == pytest.approx(3.5)
    assert mean.result() == pytest.approx(10.0)  # its own state is unchanged
    mae = kiln.metrics.MeanAbsoluteError()
    y_true, y_pred = np.array([[1.0], [2.0]]), np.array([[1.5], [1.0]])
    state = mae.stateless_update_state(mae.stateless_reset_state(), y_true, y_pred)
    assert float(mae.stateless_result(state)) == pytest.approx(0.75)
    assert mae.result() == 0.0

    class Total(kiln.metrics.Metric):  # a Keras-style metric with its own variable
        def __init__(self):
            super().__init__(name="total")
            self.total = self.add_variable((), name="total")

        def update_state(self, values, sample_weight=None):
            self.total.assign_add(kiln.ops.sum(values))

        def result(self):
            return self.total

    total = Total()
    state = total.stateless_update_state([np.array(2.0)], np.array([1.0, 4.0]))
    _assert_same(state, [7.0])
    assert float(total.stateless_result(state)) == 7.0 and float(total.total.numpy()) == 0.0


def test_jax_style_train_step_without_jax_is_refused(monkeypatch):
    import importlib.util

    from kiln.models import jax_steps
    real = importlib.util.find_spec
    monkeypatch.setattr(jax_steps.importlib.util, "find_spec",
                        lambda name, *a: None if name == "jax" else real(name, *a))

    class JaxStyle(kiln.Model):
        def train_step(self, state, data):
            raise AssertionError("never called")

    inp = kiln.Input((4,))
    model = JaxStyle(inp, layers.Dense(1)(inp), name="jax_style")
    model.compile(optimizer="adam", loss="mse")
    before = model.get_weights()
    with pytest.raises(StepTraceError, match=r"jax_style: train_step\(state, data\) has the "
                                             "JAX backend's stateless signature.*needs jax.*"
                                             "custom_train_step_in_tensorflow"):
        model.fit(X, Y, epochs=1, verbose=0)
    _assert_same(model.get_weights(), before)


def _jax_style_model_class(jax):
    class JaxStyle(kiln.Model):  # the guide's first CustomModel (custom_train_step_in_jax)
        def compute_loss_and_updates(self, trainable_variables, non_trainable_variables,
                                     metrics_variables, x, y, sample_weight, training=False):
            y_pred, non_trainable_variables = self.stateless_call(
                trainable_variables, non_trainable_variables, x, training=training)
            loss, (_, non_trainable_variables, metrics_variables) = \
                self.stateless_compute_loss(trainable_variables, non_trainable_variables,
                                            metrics_variables, x=x, y=y, y_pred=y_pred,
                                            sample_weight=sample_weight, training=training)
            return loss, (y_pred, non_trainable_variables, metrics_variables)

        def train_step(self, state, data):
            trainable, non_trainable, optimizer_vars, metrics_vars = state
            x, y, sample_weight = kiln.utils.unpack_x_y_sample_weight(data)
            grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)
            (loss, (y_pred, non_trainable, metrics_vars)), grads = grad_fn(
                trainable, non_trainable, metrics_vars, x, y, sample_weight, training=True)
            trainable, optimizer_vars = self.optimizer.stateless_apply(
                optimizer_vars, grads, trainable)
            new_metrics_vars, logs = [], {}
            for metric in self.metrics:
                these = metrics_vars[len(new_metrics_vars):
                                     len(new_metrics_vars) + len(metric.variables)]
                if metric.name == "loss":
                    these = metric.stateless_update_state(these, loss)
                else:
                    these = metric.stateless_update_state(these, y, y_pred)
                logs[metric.name] = metric.stateless_result(these)
                new_metrics_vars += these
            return logs, (trainable, non_trainable, optimizer_vars, new_metrics_vars)

    return JaxStyle


def test_jax_grad_through_stateless_call_equals_kiln_gradient_tape():
    jax = pytest.importorskip("jax")
    model = _bn_model()
    trainable = _values(model.trainable_variables)
    non_trainable = _values(model.non_trainable_variables)

    def loss_fn(tv, nt):
        y_pred, new_nt = model.stateless_call(tv, nt, X, training=True)
        return jax.numpy.mean((y_pred - Y) ** 2), new_nt

    (loss, new_nt), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable, non_trainable)
    _assert_same(_values(model.trainable_variables), trainable)  # untouched
    with kiln.GradientTape() as tape:
        want = kiln.ops.mean((model(X, training=True) - Y) ** 2)
    _assert_same(grads, tape.gradient(want, model.trainable_variables), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(loss), float(want), rtol=1e-6)
    _assert_same(new_nt, _values(model.non_trainable_variables), rtol=1e-6)


def test_jax_grad_through_a_loss_and_a_dropout_call():
    jax = pytest.importorskip("jax")
    mse = kiln.losses.MeanSquaredError()
    y_pred = RNG.random((8, 1)).astype(np.float32)
    g = jax.grad(lambda p: mse(Y, p))(y_pred)
    np.testing.assert_allclose(g, 2 * (y_pred - Y) / Y.size, rtol=1e-5)
    inp = kiln.Input((4,))
    dense = layers.Dense(1, use_bias=False, kernel_initializer="ones")
    model = kiln.Model(inp, dense(layers.Dropout(0.5)(inp)))
    kernel = [np.ones((4, 1), np.float32)]
    out, grads = jax.value_and_grad(
        lambda k: jax.numpy.sum(model.stateless_call(k, [], X, training=True)[0]))(kernel)
    # y = sum_j mask_j x_j / 0.5 with a kernel of ones, and d sum(y) / d kernel_j sums the
    # same masked inputs: the backward pass drew the forward pass's mask
    np.testing.assert_allclose(float(np.sum(grads[0])), float(out), rtol=1e-5)
    assert float(out) != pytest.approx(float(np.sum(X) * 2), rel=1e-3)  # something dropped


def test_jax_style_train_step_fit_matches_the_builtin_fit():
    jax = pytest.importorskip("jax")
    kiln.utils.set_random_seed(3)
    inp = kiln.Input((4,))
    model = _jax_style_model_class(jax)(inp, layers.Dense(1)(inp))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    inp2 = kiln.Input((4,))
    builtin = kiln.Model(inp2, layers.Dense(1)(inp2))
    builtin.set_weights(model.get_weights())
    builtin.compile(optimizer="adam", loss="mse", metrics=["mae"])
    hist = model.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    want = builtin.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    _assert_same(model.get_weights(), builtin.get_weights(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hist.history["mae"], want.history["mae"], rtol=1e-5)


def test_tf_gradient_tape_over_kiln_weights_names_kiln_gradient_tape():
    dense = layers.Dense(1)
    dense(X)
    assert not hasattr(dense.kernel, "_should_act_as_resource_variable")  # only inside TF
    with kiln.GradientTape() as tape:  # the supported loop: kiln's own tape
        loss = kiln.ops.mean((dense(X) - Y) ** 2)
    grads = tape.gradient(loss, dense.trainable_weights)
    residual = X @ dense.kernel.numpy() + dense.bias.numpy() - Y
    np.testing.assert_allclose(grads[0], 2 * X.T @ residual / len(X), rtol=1e-5, atol=1e-6)
    tf = pytest.importorskip("tensorflow")
    with tf.GradientTape() as tf_tape:
        loss = kiln.ops.mean((dense(X) - Y) ** 2)
    with pytest.raises(TypeError, match=r"tf.GradientTape.gradient\(\) was given the kiln "
                                        r"Variable '[\w/]*kernel'.*Use kiln.GradientTape"):
        tf_tape.gradient(loss, dense.trainable_weights)
