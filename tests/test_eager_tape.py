"""kiln.GradientTape around eager code (kiln/tape.py): eager calls record a replay, gradient()
differentiates the replayed graph. Oracles: kiln.grad on the same graph, central finite
differences in float64, model.fit with the same optimizer and batches."""

from __future__ import annotations

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
import kiln.tape
from kiln import layers, ops
from kiln.layers.context import trace


@pytest.fixture
def float64():
    old = kiln.config.floatx()
    kiln.config.set_floatx("float64")
    yield
    kiln.config.set_floatx(old)


def _mlp(seed: int = 0, inputs: int = 3) -> kiln.Model:
    kiln.utils.set_random_seed(seed)
    return kiln.Sequential([kiln.Input((inputs,)), layers.Dense(4, activation="tanh"),
                            layers.Dense(3)])


def _loss_fn():
    return kiln.losses.SparseCategoricalCrossentropy(from_logits=True)


def _tape_grads(model, loss_fn, x, y):
    with kiln.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
    return loss, tape.gradient(loss, model.trainable_weights)


def _fd_check(model, loss_fn, x, y, grads, tol):
    for var, g in zip(model.trainable_weights, grads):
        w = var.numpy().astype(np.float64)

        def f(w=w, var=var):
            var.assign(w)
            return float(loss_fn(y, model(x)))

        num = numeric_grad(f, w)
        var.assign(w)
        np.testing.assert_allclose(g, num, rtol=tol, atol=tol)


def test_mlp_gradients_equal_kiln_grad_and_finite_differences(float64):
    model, loss_fn = _mlp(), _loss_fn()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 3)), rng.integers(0, 3, 6)
    loss, grads = _tape_grads(model, loss_fn, x, y)
    assert [g.shape for g in grads] == [tuple(v.shape) for v in model.trainable_weights]
    assert all(g.dtype == np.float64 for g in grads)
    xp, yp = kiln.placeholder((6, 3), "float64"), kiln.placeholder((6,), "int32")
    with trace(training=True):
        lp = loss_fn(yp, model(xp, training=True))
    ref = kiln.function([xp, yp], kiln.grad(lp, model.trainable_weights))(x, y.astype("int32"))
    for g, r in zip(grads, ref):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)
    _fd_check(model, loss_fn, x, y, grads, 1e-6)


def test_convnet_gradients_equal_finite_differences(float64):
    kiln.utils.set_random_seed(1)
    model = kiln.Sequential([kiln.Input((5, 5, 2)), layers.Conv2D(3, 3, activation="relu"),
                             layers.MaxPooling2D(), layers.Flatten(), layers.Dense(2)])
    loss_fn = _loss_fn()
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(3, 5, 5, 2)), rng.integers(0, 2, 3)
    _, grads = _tape_grads(model, loss_fn, x, y)
    _fd_check(model, loss_fn, x, y, grads, 1e-6)


# op family -> (function of the watched arrays, input arrays); each kiln.ops name is looked up
# in kiln.ops, so a renamed op fails here
_RNG = np.random.default_rng(2)
_CASES = {
    # (the watched arrays are the caller's plain arrays: NumPy arithmetic directly on them is
    # not recorded, on kiln results it is)
    "elementwise": (lambda a, b: ops.sum(ops.tanh(a) * ops.exp(b)
                                         - ops.divide(a, 1.5 + ops.square(b))),
                    [_RNG.normal(size=(2, 3)), _RNG.normal(size=(2, 3))]),
    "matmul": (lambda a, b: ops.sum(ops.square(ops.matmul(a, b))),
               [_RNG.normal(size=(2, 3)), _RNG.normal(size=(3, 4))]),
    "conv2d": (lambda a, k: ops.sum(ops.sin(ops.conv(a, k, padding="same"))),
               [_RNG.normal(size=(1, 4, 4, 2)), _RNG.normal(size=(3, 3, 2, 2))]),
    "reductions": (lambda a: ops.max(a, axis=1)[0] * ops.mean(a) + ops.sum(ops.prod(a, axis=0)),
                   [_RNG.normal(size=(3, 4))]),
    "softmax_cross_entropy": (
        lambda z: ops.mean(ops.categorical_crossentropy(
            np.eye(4)[[0, 2, 3]], ops.softmax(z))),
        [_RNG.normal(size=(3, 4))]),
    "gather": (lambda a: ops.sum(ops.take(a, np.array([2, 0, 2]), axis=0) ** 2),
               [_RNG.normal(size=(3, 2))]),
}


@pytest.mark.parametrize("family", sorted(_CASES))
def test_op_families_against_finite_differences(family):
    fn, arrays = _CASES[family]
    arrays = [a.copy() for a in arrays]
    with kiln.GradientTape() as tape:
        tape.watch(arrays)
        target = fn(*arrays)
    grads = tape.gradient(target, arrays)
    for a, g in zip(arrays, grads):
        num = numeric_grad(lambda: float(fn(*arrays)), a)
        np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-7, err_msg=family)


def test_guide_loop_trains_like_fit_and_compiles_once():
    (x_train, y_train), _ = kiln.datasets.mnist.load_sample()
    bs, steps = 32, 6
    x = (x_train[:bs * steps].reshape(-1, 784) / 255.0).astype("float32")
    y = y_train[:bs * steps].astype("int32")

    def get_model():
        kiln.utils.set_random_seed(3)
        inputs = kiln.Input(shape=(784,))
        h = layers.Dense(16, activation="relu")(inputs)
        return kiln.Model(inputs, layers.Dense(10)(h))

    model, twin = get_model(), get_model()
    twin.set_weights(model.get_weights())
    optimizer = kiln.optimizers.Adam(learning_rate=1e-3)
    loss_fn = _loss_fn()
    acc = kiln.metrics.SparseCategoricalAccuracy()
    compiles = []
    for step in range(steps):
        xb, yb = x[step * bs:(step + 1) * bs], y[step * bs:(step + 1) * bs]
        with kiln.GradientTape() as tape:
            logits = model(xb, training=True)
            loss_value = loss_fn(yb, logits)
        grads = tape.gradient(loss_value, model.trainable_weights)
        optimizer.apply(grads, model.trainable_weights)
        acc.update_state(yb, logits)
        compiles.append(kiln.tape.cache_info()["compiles"])
    assert compiles[1:] == [compiles[0]] * (steps - 1)  # steps 2.. reuse the gradient function
    assert 0.0 <= float(acc.result()) <= 1.0
    twin.compile(optimizer=kiln.optimizers.Adam(learning_rate=1e-3), loss=_loss_fn())
    twin.fit(x, y, batch_size=bs, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), twin.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_eager_loop_decreases_the_loss():
    model, loss_fn = _mlp(4, inputs=2), _loss_fn()
    rng = np.random.default_rng(4)
    x = rng.normal(size=(64, 2)).astype("float32")
    y = (x[:, 0] > x[:, 1]).astype("int32")
    optimizer = kiln.optimizers.SGD(learning_rate=0.5)
    losses = []
    for _ in range(30):
        loss, grads = _tape_grads(model, loss_fn, x, y)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        losses.append(float(loss))
    assert losses[-1] < 0.6 * losses[0]


def test_persistent_watch_and_unconnected():
    x = np.array([0.5, -1.0, 2.0])
    other = np.array([1.0, 2.0, 3.0])
    with kiln.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = ops.sum(ops.square(x))
        z = ops.sum(ops.exp(x))
    np.testing.assert_allclose(tape.gradient(y, x), 2 * x)
    np.testing.assert_allclose(tape.gradient(z, x), np.exp(x))
    assert tape.gradient(y, [x, other])[1] is None  # never used
    np.testing.assert_array_equal(
        tape.gradient(y, other, unconnected_gradients="zero"), np.zeros(3))
    with kiln.GradientTape() as once:
        once.watch(x)
        y = ops.sum(x)
    once.gradient(y, x)
    with pytest.raises(RuntimeError, match="non-persistent"):
        once.gradient(y, x)


def test_unwatched_array_has_no_gradient_and_stop_gradient_blocks():
    x = np.array([1.0, 2.0])
    with kiln.GradientTape() as tape:
        y = ops.sum(ops.square(x))
    assert tape.gradient(y, x) is None  # a constant: not watched
    with kiln.GradientTape() as tape:
        tape.watch(x)
        y = ops.sum(ops.multiply(ops.stop_gradient(ops.square(x)), x))
    np.testing.assert_allclose(tape.gradient(y, x), x ** 2)


def test_watch_accessed_variables_false():
    model, loss_fn = _mlp(6), _loss_fn()
    x, y = np.random.default_rng(6).normal(size=(5, 3)).astype("float32"), np.arange(5) % 3
    kernel = model.layers[0].kernel
    with kiln.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(kernel)
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    assert tape.watched_variables() == [kernel]
    assert [g is None for g in grads] == [v is not kernel for v in model.trainable_weights]
    _, full = _tape_grads(model, loss_fn, x, y)
    np.testing.assert_allclose(grads[0], full[0], rtol=1e-6)


def test_nested_tapes_give_second_derivative():
    x = np.array([0.3, -0.7])
    with kiln.GradientTape() as outer:
        outer.watch(x)
        with kiln.GradientTape() as inner:
            inner.watch(x)
            y = ops.sum(ops.power(x, 3))
        dy = inner.gradient(y, x)
        s = ops.sum(dy)
    np.testing.assert_allclose(dy, 3 * x ** 2)
    np.testing.assert_allclose(outer.gradient(s, x), 6 * x)


def test_numpy_arithmetic_and_model_losses_are_recorded(float64):
    kiln.utils.set_random_seed(5)
    model = kiln.Sequential([kiln.Input((3,)), layers.Dense(4, activation="tanh"),
                             layers.ActivityRegularization(l2=0.1), layers.Dense(3)])
    loss_fn = _loss_fn()
    x = np.random.default_rng(5).normal(size=(4, 3))
    y = np.array([0, 1, 2, 0])

    def total_loss():
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
        loss += sum(model.losses)  # the guide's pattern: NumPy arithmetic on eager results
        return 2.0 * loss - np.float64(1.0) * (logits[0, 0] * 0.0 + 1.0)

    with kiln.GradientTape() as tape:
        total = total_loss()
    assert len(model.losses) == 1 and float(model.losses[0]) > 0
    grads = tape.gradient(total, model.trainable_weights)
    for var, g in zip(model.trainable_weights, grads):
        w = var.numpy().copy()

        def f(w=w, var=var):
            var.assign(w)
            return float(total_loss())

        num = numeric_grad(f, w)
        var.assign(w)
        np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-7)


def test_unrecorded_target_is_a_clear_error():
    x = np.ones(3)
    with kiln.GradientTape() as tape:
        tape.watch(x)
        y = np.sum(x * 2.0)  # NumPy on plain arrays: not recorded
    with pytest.raises(ValueError, match="not computed by a kiln call recorded on this tape"):
        tape.gradient(y, x)


def test_value_dependent_branches_replay_the_path_taken():
    x = np.array([1.5, -0.5])
    for scale, expected in ((1.0, 2 * x), (-1.0, np.cos(x))):
        with kiln.GradientTape() as tape:
            tape.watch(x)
            s = ops.sum(ops.multiply(x, scale))
            y = ops.sum(ops.square(x)) if float(s) > 0 else ops.sum(ops.sin(x))
        np.testing.assert_allclose(tape.gradient(y, x), expected, rtol=1e-12)


def test_output_gradients_seed_a_vector_target():
    x, seed = np.array([1.0, -2.0, 0.5]), np.array([0.5, 1.0, -3.0])
    with kiln.GradientTape() as tape:
        tape.watch(x)
        y = ops.square(x)
    np.testing.assert_allclose(tape.gradient(y, x, output_gradients=seed), 2 * x * seed)


def test_a_layer_called_twice_shares_its_weights(float64):
    kiln.utils.set_random_seed(7)
    dense = layers.Dense(3, activation="tanh")
    x = np.random.default_rng(7).normal(size=(2, 3))

    def target():
        return ops.sum(ops.square(dense(dense(x))))

    with kiln.GradientTape() as tape:
        y = target()
    kernel = dense.kernel
    g = tape.gradient(y, kernel)
    w = kernel.numpy().copy()

    def f():
        kernel.assign(w)
        return float(target())

    np.testing.assert_allclose(g, numeric_grad(f, w), rtol=1e-6, atol=1e-8)
