"""``@kiln.function`` (kiln/capture.py): eager-tape code captured into one compiled graph.
Oracle: the same code run eagerly (losses, metrics, weights after several steps, rtol 1e-5),
the guide's loop (Keras' "writing a training loop from scratch", tests/programs/p41) run
both ways, and the documented error for a value-dependent branch."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers, ops
from kiln.capture import CaptureError


def _data(n=96, d=20, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype("float32"), rng.integers(0, classes, n)


def _guide_model(seed=0, regularize=False):
    """The guide's functional MLP (smaller), optionally with its ActivityRegularizationLayer."""

    class ActivityRegularizationLayer(layers.Layer):
        def call(self, inputs):
            self.add_loss(1e-2 * ops.sum(inputs))
            return inputs

    kiln.utils.set_random_seed(seed)
    inputs = kiln.Input(shape=(20,), name="digits")
    x = layers.Dense(16, activation="relu")(inputs)
    if regularize:
        x = ActivityRegularizationLayer()(x)
    x = layers.Dense(16, activation="relu")(x)
    return kiln.Model(inputs, layers.Dense(10, name="predictions")(x))


def _guide_loop(capture, optimizer="adam", regularize=False, steps=3):
    """The guide's train_step/test_step loop; ``capture`` decorates them with
    @kiln.function (as the guide does with @tf.function)."""
    x, y = _data()
    model = _guide_model(regularize=regularize)
    optimizer = kiln.optimizers.get(optimizer)
    loss_fn = kiln.losses.SparseCategoricalCrossentropy(from_logits=True)
    train_acc_metric = kiln.metrics.SparseCategoricalAccuracy()
    val_acc_metric = kiln.metrics.SparseCategoricalAccuracy()

    def train_step(x, y):
        with kiln.GradientTape() as tape:
            logits = model(x, training=True)
            loss_value = loss_fn(y, logits)
            loss_value += sum(model.losses)
        grads = tape.gradient(loss_value, model.trainable_weights)
        optimizer.apply(grads, model.trainable_weights)
        train_acc_metric.update_state(y, logits)
        return loss_value

    def test_step(x, y):
        val_logits = model(x, training=False)
        val_acc_metric.update_state(y, val_logits)

    if capture:
        train_step, test_step = kiln.function(train_step), kiln.function(test_step)
    losses = [float(train_step(x[i:i + 32], y[i:i + 32])) for i in range(0, 32 * steps, 32)]
    train_acc = float(train_acc_metric.result())
    for i in range(0, 64, 32):
        test_step(x[i:i + 32], y[i:i + 32])
    return losses, train_acc, float(val_acc_metric.result()), model.get_weights(), train_step


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("regularize", [False, True])
def test_guide_loop_captured_equals_eager(optimizer, regularize):
    eager = _guide_loop(False, optimizer, regularize)
    captured = _guide_loop(True, optimizer, regularize)
    np.testing.assert_allclose(captured[0], eager[0], rtol=1e-5)
    assert captured[1] == pytest.approx(eager[1]) and captured[2] == pytest.approx(eager[2])
    for a, b in zip(eager[3], captured[3]):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert captured[4].traces == 1  # three batches of one shape: traced once
    if regularize:  # the added loss is in the captured loss (not a stale eager value)
        assert captured[0][0] > _guide_loop(True, optimizer, False, steps=1)[0][0] + 1e-3


def test_one_graph_with_updates_per_signature():
    model = _guide_model()
    opt = kiln.optimizers.SGD(0.1)
    loss_fn = kiln.losses.SparseCategoricalCrossentropy(from_logits=True)
    compiled = []
    real = kiln.core.function

    def counting(*args, **kwargs):
        compiled.append(kwargs.get("name"))
        return real(*args, **kwargs)

    @kiln.function
    def step(x, y):
        with kiln.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply(tape.gradient(loss, model.trainable_weights), model.trainable_weights)
        return loss

    x, y = _data()
    import kiln.capture as capture_module
    capture_module.core_function = counting
    try:
        step(x[:32], y[:32])
        step(x[32:64], y[32:64])
        step(x[:16], y[:16])  # a new static shape: a second trace
    finally:
        capture_module.core_function = real
    assert compiled == ["step", "step"] and step.traces == 2

    relaxed = kiln.function(reduce_retracing=True)(step.python_function)
    relaxed(x[:32], y[:32])
    relaxed(x[:16], y[:16])
    assert relaxed.traces == 1


def test_python_scalars_retrace_and_structures_come_back():
    calls = []

    @kiln.function(jit_compile=True)
    def f(x, scale, mode="sum"):
        calls.append(scale)
        out = x * scale
        return {"total": ops.sum(out) if mode == "sum" else ops.max(out), "pair": (out, 7)}

    x = np.arange(6, dtype="float32").reshape(2, 3)
    r = f(x, 2.0)
    assert r["total"] == pytest.approx(30.0) and r["pair"][1] == 7
    np.testing.assert_allclose(r["pair"][0], x * 2)
    assert f(x, 2.0)["total"] == pytest.approx(30.0) and calls == [2.0]
    assert f(x, 3.0, mode="max")["total"] == pytest.approx(15.0) and calls == [2.0, 3.0]


def test_value_dependent_branch_names_the_line_and_ops_cond():
    @kiln.function
    def branchy(x):
        if ops.sum(x) > 0:  # the line the error names
            return x * 2.0
        return -x

    x = np.ones((2, 3), "float32")
    with pytest.raises(CaptureError) as info:
        branchy(x)
    text = str(info.value)
    assert f"{__file__}:" in text and "if ops.sum(x) > 0:" in text
    assert "kiln.ops.cond" in text and "'branchy'" in text

    @kiln.function
    def with_cond(x):
        return ops.cond(ops.sum(x) > 0, lambda: x * 2.0, lambda: -x)

    np.testing.assert_allclose(with_cond(x), x * 2.0)
    np.testing.assert_allclose(with_cond(-x), x)


def test_methods_variables_and_the_old_form():
    class Counter:
        def __init__(self):
            self.v = kiln.Variable(np.zeros(3, "float32"))

        @kiln.function
        def add(self, x):
            self.v.assign(self.v + x)
            return ops.sum(self.v)

    c = Counter()
    assert float(c.add(np.ones(3, "float32"))) == pytest.approx(3.0)
    assert float(c.add(np.ones(3, "float32"))) == pytest.approx(6.0)
    np.testing.assert_allclose(c.v.numpy(), [2, 2, 2])
    # the compiled-function form is unchanged
    xp = kiln.placeholder((None, 3))
    w = kiln.Variable(np.ones((3, 1), "float32"))
    f = kiln.function([xp], xp @ w, updates=[(w, w * 0.5)])
    np.testing.assert_allclose(f(np.ones((2, 3))), [[3.0], [3.0]])
    np.testing.assert_allclose(w.numpy(), 0.5)
    with pytest.raises(TypeError, match="unexpected keyword"):
        kiln.function(retrace=True)


def test_gan_step_with_two_tapes_and_random_draws():
    """The guide's GAN train_step (small): two optimizers, kiln.random inside, one graph."""
    kiln.utils.set_random_seed(0)
    latent = 4
    disc = kiln.Sequential([kiln.Input((6,)), layers.Dense(8), layers.LeakyReLU(0.2),
                            layers.Dense(1)])
    gen = kiln.Sequential([kiln.Input((latent,)), layers.Dense(6, activation="sigmoid")])
    d_opt, g_opt = kiln.optimizers.Adam(3e-4), kiln.optimizers.Adam(4e-4)
    loss_fn = kiln.losses.BinaryCrossentropy(from_logits=True)

    @kiln.function
    def train_step(real):
        n = real.shape[0]
        fake = gen(kiln.random.normal(shape=(n, latent)))
        images = ops.concatenate([fake, real], axis=0)
        labels = ops.concatenate([ops.ones((n, 1)), ops.zeros((n, 1))], axis=0)
        with kiln.GradientTape() as tape:
            d_loss = loss_fn(labels, disc(images))
        d_opt.apply(tape.gradient(d_loss, disc.trainable_weights), disc.trainable_weights)
        with kiln.GradientTape() as tape:
            g_loss = loss_fn(ops.zeros((n, 1)), disc(gen(kiln.random.normal(shape=(n,
                                                                                  latent)))))
        g_opt.apply(tape.gradient(g_loss, gen.trainable_weights), gen.trainable_weights)
        return d_loss, g_loss

    real = np.random.default_rng(0).uniform(size=(8, 6)).astype("float32")
    d0 = [w.copy() for w in disc.get_weights()]
    g0 = [w.copy() for w in gen.get_weights()]
    for _ in range(3):
        d_loss, g_loss = train_step(real)
    assert train_step.traces == 1 and np.isfinite([d_loss, g_loss]).all()
    assert int(d_opt.iterations.numpy()) == 3 and int(g_opt.iterations.numpy()) == 3
    assert all(not np.allclose(a, b) for a, b in zip(d0, disc.get_weights()))
    assert all(not np.allclose(a, b) for a, b in zip(g0, gen.get_weights()))
