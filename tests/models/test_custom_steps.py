"""Custom train_step / test_step / predict_step, traced into one compiled step
(kiln/models/custom_steps.py). Oracles: the built-in step (same seed, same data), closed forms
(an SGD step by hand, a zeroed gradient leaves its weight unchanged), specific errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers, ops


def data(n=64, d=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype("float32")
    y = (x[:, :2].sum(1) > 0).astype("int32")
    return x, y


class KerasDocsModel(kiln.Model):
    """The Keras guide's "customizing what happens in fit" model, with only the import
    changed (tf.GradientTape -> kiln.GradientTape)."""

    def train_step(self, data):
        x, y = data
        with kiln.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply(gradients, trainable_vars)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def functional(cls=kiln.Model, seed=1):
    kiln.utils.set_random_seed(seed)
    inp = kiln.Input((6,))
    h = layers.Dense(8, activation="relu", name="h")(inp)
    out = layers.Dense(2, activation="softmax", name="out")(h)
    return cls(inp, out, name="m")


def test_the_keras_guide_train_step_matches_the_builtin_step():
    x, y = data()
    ref = functional()
    ref.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    h_ref = ref.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0).history
    model = functional(KerasDocsModel)
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    h = model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0).history
    assert sorted(h) == ["accuracy", "loss"]
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # the guide's loss tracker is updated with the batch mean (unweighted by the batch size
    # of the last, full-size batches: all batches are 16 here), so the logs agree too
    np.testing.assert_allclose(h["loss"], h_ref["loss"], rtol=1e-5)
    np.testing.assert_allclose(h["accuracy"], h_ref["accuracy"], rtol=1e-6)


def test_one_compiled_step(monkeypatch):
    calls = []
    real = kiln.core.function

    def counting(*args, **kwargs):
        calls.append(kwargs.get("name"))
        return real(*args, **kwargs)

    monkeypatch.setattr(kiln.core, "function", counting)
    x, y = data()
    model = functional(KerasDocsModel)
    model.compile("sgd", "sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert calls.count("train_function") == 1


class ZeroFirstGradient(kiln.Model):
    def train_step(self, data):
        x, y = data
        with kiln.GradientTape() as tape:
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
        variables = self.trainable_weights
        grads = tape.gradient(loss, variables)
        grads[0] = ops.zeros_like(grads[0])  # freeze the first kernel
        self.optimizer.apply(grads, variables)
        self._loss_tracker.update_state(loss)
        return {"loss": self._loss_tracker.result()}


def test_a_changed_update_changes_the_weights():
    x, y = data()
    model = functional(ZeroFirstGradient)
    model.compile(kiln.optimizers.Adam(0.05), "sparse_categorical_crossentropy")
    before = model.get_weights()
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    after = model.get_weights()
    np.testing.assert_array_equal(after[0], before[0])  # the zeroed gradient: unchanged
    for a, b in zip(after[1:], before[1:]):
        assert not np.allclose(a, b)


class TwoSgdSteps(kiln.Model):
    """Two updates in one step: the second gradient is taken at the updated weights."""

    def train_step(self, data):
        x, y = data
        for _ in range(2):
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
            self.optimizer.apply(kiln.grad(loss, self.trainable_weights),
                                 self.trainable_weights)
        return {"loss": loss}


def test_updates_in_one_step_are_sequential():
    x, y = data(16)
    ref = functional()
    ref.compile(kiln.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    ref.train_on_batch(x, y)
    ref.train_on_batch(x, y)
    model = functional(TwoSgdSteps)
    model.compile(kiln.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    hist = model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0).history
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert int(model.optimizer.iterations.value) == 2
    # "loss" is a tensor: the logs hold its value at the last batch (the second update's)
    second = ref.evaluate(x, y, verbose=0)
    assert hist["loss"][0] > second  # logged before the second update


class Untraceable(kiln.Model):
    def train_step(self, data):
        x, y = data
        loss = self.compute_loss(y=y, y_pred=self(x, training=True))
        if float(loss) > 0:  # a Python branch on a value known only when the step runs
            pass
        return {"loss": loss}


def test_an_untraceable_train_step_is_a_clear_error_and_changes_nothing():
    x, y = data()
    model = functional(Untraceable)
    model.compile("adam", "sparse_categorical_crossentropy")
    before = model.get_weights()
    with pytest.raises(kiln.models.StepTraceError,
                       match=r"m: train_step could not be traced into one compiled step"):
        model.fit(x, y, epochs=1, verbose=0)
    for a, b in zip(model.get_weights(), before):
        np.testing.assert_array_equal(a, b)


def test_train_step_must_return_a_dict():
    class NoDict(kiln.Model):
        def train_step(self, data):
            return 1.0

    x, y = data()
    model = functional(NoDict)
    model.compile("adam", "sparse_categorical_crossentropy")
    with pytest.raises(kiln.models.StepTraceError, match="must return a dict of logs"):
        model.fit(x, y, verbose=0)


class CountCalls(layers.Layer):
    """A stateful layer: counts the samples it saw in training (Variable.assign_add)."""

    def build(self, input_shape):
        self.seen = self.add_weight(shape=(), initializer="zeros", trainable=False,
                                    name="seen")

    def call(self, x, training=None):
        if training:
            self.seen.assign_add(ops.cast(ops.size_of(x, axis=0), "float32"))
        return x


def test_assign_in_call_is_a_graph_update():
    x, y = data(50)
    kiln.utils.set_random_seed(0)
    counter = CountCalls()
    model = kiln.Sequential([kiln.Input((6,)), counter, layers.Dense(2, "softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=16, epochs=3, verbose=0)
    assert float(counter.seen.value) == 150.0
    model.predict(x, verbose=0)  # inference: no update
    assert float(counter.seen.value) == 150.0


class CustomEval(kiln.Model):
    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        err = ops.mean(ops.cast(ops.not_equal(ops.argmax(y_pred, axis=-1),
                                              ops.cast(y, "int64")), "float32"))
        self.err_tracker.update_state(err, sample_weight=ops.cast(ops.size_of(x, axis=0),
                                                                  "float32"))
        return {"error": self.err_tracker.result()}

    def predict_step(self, data):
        return ops.argmax(self(data, training=False), axis=-1)


def test_custom_test_and_predict_steps():
    x, y = data(70)
    model = functional(CustomEval)
    model.err_tracker = kiln.metrics.Mean(name="error")
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    probs = kiln.Model(model.inputs[0], model.outputs[0]).predict(x, verbose=0)
    expected_error = float(np.mean(probs.argmax(-1) != y))
    logs = model.evaluate(x, y, batch_size=32, return_dict=True, verbose=0)
    assert logs == pytest.approx({"error": expected_error}, abs=1e-6)
    np.testing.assert_array_equal(model.predict(x, batch_size=32, verbose=0), probs.argmax(-1))


def test_on_batch_methods_run_the_custom_steps():
    x, y = data(32)
    model = functional(CustomEval)
    model.err_tracker = kiln.metrics.Mean(name="error")
    model.compile(kiln.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    ref = functional()
    ref.compile(kiln.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    # train_step is the default one (compute_loss + the compiled loss): same as built in
    logs = model.train_on_batch(x, y, return_dict=True)
    ref_logs = ref.train_on_batch(x, y, return_dict=True)
    assert logs["loss"] == pytest.approx(ref_logs["loss"], rel=1e-6)
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    probs = ref.predict_on_batch(x)
    err = float(np.mean(probs.argmax(-1) != y))
    model.err_tracker.reset_state()
    assert model.test_on_batch(x, y, return_dict=True) == pytest.approx({"error": err})
    np.testing.assert_array_equal(model.predict_on_batch(x), probs.argmax(-1))


class NestedLogsModel(kiln.Model):
    """A train_step returning nested dicts of logs (Keras flattens them: pythonify_logs)."""

    def train_step(self, data):
        x, y = data
        with kiln.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        self.optimizer.apply(tape.gradient(loss, self.trainable_variables),
                             self.trainable_variables)
        return {"losses": {"loss": loss, "twice": {"double": loss * 2.0}}, "const": 3.0}


def test_nested_logs_of_a_custom_step_are_flattened_into_computed_values():
    x, y = data()
    model = functional(NestedLogsModel)
    model.compile("sgd", "sparse_categorical_crossentropy")
    h = model.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0).history
    assert sorted(h) == ["const", "double", "loss"]
    for name in h:
        assert all(isinstance(v, float) for v in h[name]), (name, h[name])
    # one batch an epoch: the logged loss is the step's loss at the weights before its update
    ref = functional()
    ref.compile("sgd", "sparse_categorical_crossentropy")
    want = ref.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h["loss"], want, rtol=1e-5)
    np.testing.assert_allclose(h["double"], 2 * np.asarray(h["loss"]), rtol=1e-6)
    assert h["const"] == [3.0, 3.0]
