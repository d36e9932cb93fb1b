"""Adafactor, Ftrl, Lamb, Muon and ScheduleFreeAdamW: several steps of kiln's graph update
against NumPy references written from Keras 3's documented rules, and (where keras is
importable) against Keras' own optimizers on the same variables and gradients; fit, config
round trips and a saved model that continues identically."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from more_problem import C0, W0, f32, np_grads, run_graph, run_graph_grads, run_keras, run_numpy

import kiln
from kiln import optimizers as O


def rms(x):
    return np.sqrt(np.mean(np.square(x)))


# ---- NumPy references (keras/src/optimizers/<name>.py, written from the formulas) ---------
def ftrl_rule(power=-0.5, init=0.1, l1=0.0, l2=0.0, shrink=0.0, beta=0.0):
    def rule(g, w, st, t, lr):
        n = st.get("n", np.full_like(w, init))
        z = st.get("z", np.zeros_like(w))
        p = -power
        n_new = n + g * g
        z = z + (g + 2 * shrink * w) - (n_new**p - n**p) / lr * w
        st["n"], st["z"] = n_new, z
        quadratic = n_new**p / lr + 2 * (l2 + beta / (2 * lr))
        return (np.clip(z, -l1, l1) - z) / quadratic
    return rule


def lamb_rule(b1=0.9, b2=0.999, eps=1e-7):
    def rule(g, w, st, t, lr):
        m = b1 * st.get("m", 0.0) + (1 - b1) * g
        v = b2 * st.get("v", 0.0) + (1 - b2) * g * g
        st["m"], st["v"] = m, v
        u = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        wn, un = np.linalg.norm(w), np.linalg.norm(u)
        ratio = wn / un if wn > 0 and un > 0 else 1.0
        return w - ratio * lr * u
    return rule


def adafactor_rule(decay=-0.8, eps1=1e-30, eps2=1e-3, clip=1.0):
    def rule(g, w, st, t, lr):
        rho = min(lr, 1 / np.sqrt(t))
        alpha = max(eps2, rms(w)) * rho
        g2 = g * g + eps1
        beta = 1 - t**decay
        if w.ndim >= 2:
            st["r"] = beta * st.get("r", 0.0) + (1 - beta) * g2.mean(axis=-1)
            st["c"] = beta * st.get("c", 0.0) + (1 - beta) * g2.mean(axis=-2)
            v = (st["r"] / st["r"].mean(axis=-1, keepdims=True))[..., None] * st["c"][..., None, :]
        else:
            v = st["v"] = beta * st.get("v", 0.0) + (1 - beta) * g2
        u = g / np.sqrt(v)
        return w - alpha * u / max(1.0, rms(u) / clip)
    return rule


def newton_schulz(x, steps=5, a=3.4445, b=-4.7750, c=2.0315):
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / (np.linalg.norm(x) + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def muon_rule(momentum=0.95, rms_rate=0.2, b1=0.9, b2=0.999, eps=1e-7, ratio=1.0):
    adam = adam_rule(b1, b2, eps)

    def rule(g, w, st, t, lr):
        if w.ndim != 2:
            return adam(g, w, st, t, lr * ratio)
        m = st["m"] = momentum * st.get("m", 0.0) + g
        x = newton_schulz(g + momentum * m)
        return w - lr * x * np.sqrt(max(w.shape)) * rms_rate
    return rule


def adam_rule(b1=0.9, b2=0.999, eps=1e-7):
    def rule(g, w, st, t, lr):
        m = st["m"] = b1 * st.get("m", 0.0) + (1 - b1) * g
        v = st["v"] = b2 * st.get("v", 0.0) + (1 - b2) * g * g
        return w - m * lr * np.sqrt(1 - b2**t) / (1 - b1**t) / (np.sqrt(v) + eps)
    return rule


def schedule_free_rule(b1=0.9, b2=0.999, eps=1e-8, warmup=0):
    def rule(g, w, st, t, lr):
        if warmup:
            lr = lr * min(t / warmup, 1.0)
        z = st.get("z", w)  # z starts as a copy of the variable (before any decay: t=1 uses
        v = st["v"] = st.get("v", 0.0) + (g * g - st.get("v", 0.0)) * (1 - b2)  # no decay)
        z_new = z - lr * g / (np.sqrt(v / (1 - b2**t)) + eps)
        x = (w - (1 - b1) * z) / b1
        x = (1 - 1 / t) * x + z_new / t
        st["z"] = z_new
        return (1 - b1) * z_new + b1 * x
    return rule


# (kiln optimizer, Keras class name and arguments, NumPy rule, weight decay per variable)
CASES = {
    "ftrl": (dict(learning_rate=0.1, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                  l1_regularization_strength=0.01, l2_regularization_strength=0.02,
                  l2_shrinkage_regularization_strength=0.01, beta=0.1),
             "Ftrl", ftrl_rule(-0.5, 0.1, 0.01, 0.02, 0.01, 0.1), None),
    "lamb": (dict(learning_rate=0.01, weight_decay=0.01), "Lamb", lamb_rule(), 0.01),
    "adafactor": (dict(learning_rate=0.1), "Adafactor", adafactor_rule(), None),
    "muon": (dict(learning_rate=0.02, weight_decay=0.01, adam_weight_decay=0.02),
             "Muon", muon_rule(), [0.01, 0.02]),
    "schedule_free_adamw": (dict(learning_rate=0.05, warmup_steps=3), "ScheduleFreeAdamW",
                            schedule_free_rule(warmup=3), None),
}


@pytest.mark.parametrize("key", list(CASES))
def test_graph_update_matches_numpy_reference(key):
    kwargs, cls_name, rule, wd = CASES[key]
    got = run_graph(getattr(O, cls_name)(**kwargs), steps=8)
    expected = run_numpy(rule, steps=8, lr=kwargs["learning_rate"], weight_decay=wd)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)
    assert not np.allclose(got[0], run_graph(O.SGD(0.0), steps=1)[0])  # it moved


def test_ftrl_l1_gives_exact_zeros_and_rejects_bad_arguments():
    got = run_graph(O.Ftrl(0.1, l1_regularization_strength=1e4), steps=3)
    assert np.all(got[0] == 0.0) and np.all(got[1] == 0.0)
    with pytest.raises(ValueError, match="initial_accumulator_value"):
        O.Ftrl(initial_accumulator_value=-1.0)
    with pytest.raises(ValueError, match="learning_rate_power"):
        O.Ftrl(learning_rate_power=0.5)


def test_adafactor_factors_matrices_only():
    opt = O.Adafactor()
    w = kiln.Variable(np.ones((4, 6, 5)), name="w3")
    b = kiln.Variable(np.ones((5,)), name="b1")
    opt.build([w, b])
    assert opt.get_slot(w, "r").shape == (4, 6) and opt.get_slot(w, "c").shape == (4, 5)
    assert opt.get_slot(w, "velocity").shape == (4, 6, 5)
    with pytest.raises(KeyError, match="no slot 'r'"):
        opt.get_slot(b, "r")


def test_muon_newton_schulz_approximately_orthogonalizes():
    x = np.random.default_rng(0).normal(size=(6, 4))
    out = O.Muon().zeropower_via_newtonschulz5(kiln.ops.constant(x), 5)
    got = kiln.function([], out, backend="reference")()
    np.testing.assert_allclose(got, newton_schulz(x), rtol=1e-9, atol=1e-12)
    u, _, vt = np.linalg.svd(x, full_matrices=False)
    core = u.T @ got @ vt.T  # U^T X V: diagonal, with the singular values in (0.6, 1.2)
    assert np.abs(core - np.diag(np.diag(core))).max() < 1e-6
    assert 0.6 < np.diag(core).min() and np.diag(core).max() < 1.2


def test_muon_routes_rank_and_embeddings_to_adamw():
    opt = O.Muon(exclude_layers=["head"])
    assert opt._should_use_adamw(kiln.Variable(np.ones(3), name="dense/bias"))
    assert opt._should_use_adamw(kiln.Variable(np.ones((3, 2)), name="embedding/embeddings"))
    assert opt._should_use_adamw(kiln.Variable(np.ones((3, 2)), name="head/kernel"))
    assert not opt._should_use_adamw(kiln.Variable(np.ones((3, 2)), name="dense/kernel"))
    assert not O.Muon(exclude_embeddings=False)._should_use_adamw(
        kiln.Variable(np.ones((3, 2)), name="embedding/embeddings"))


# ---- Keras 3 itself -----------------------------------------------------------------------
def _keras_backend_is_tensorflow(keras) -> bool:
    return keras.backend.backend() == "tensorflow"


@pytest.mark.parametrize("key", ["ftrl", "lamb", "adafactor", "muon"])
def test_matches_keras(key):
    keras = pytest.importorskip("keras")
    kwargs, cls_name, _, _ = CASES[key]
    expected = run_keras(keras, getattr(keras.optimizers, cls_name)(**kwargs), steps=6)
    got = run_graph(getattr(O, cls_name)(**kwargs), steps=6, dtype="float32")
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


_SF_SCRIPT = """
import sys, numpy as np
sys.path.insert(0, {here!r})
import keras
from more_problem import run_keras
out = run_keras(keras, keras.optimizers.ScheduleFreeAdamW(**{kwargs!r}), steps=6)
np.savez({path!r}, *out)
"""


def test_schedule_free_adamw_matches_keras(tmp_path):
    """On the TensorFlow backend Keras reads ``momentum.value`` after ``assign_sub`` (a live
    tf.Variable), so its ``x_old`` uses the new ``z``; the formula, and Keras on its other
    backends, use the old one: compare with Keras' NumPy backend in a fresh process."""
    keras = pytest.importorskip("keras")
    kwargs = CASES["schedule_free_adamw"][0]
    if _keras_backend_is_tensorflow(keras):
        pytest.importorskip("scipy")  # Keras' NumPy backend imports it
        path = str(tmp_path / "sf.npz")
        script = _SF_SCRIPT.format(here=str(Path(__file__).parent), kwargs=kwargs, path=path)
        env = dict(os.environ, KERAS_BACKEND="numpy")
        subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300)
        with np.load(path) as f:
            expected = [f["arr_0"], f["arr_1"]]
    else:
        expected = run_keras(keras, keras.optimizers.ScheduleFreeAdamW(**kwargs), steps=6)
    got = run_graph(O.ScheduleFreeAdamW(**kwargs), steps=6, dtype="float32")
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


# ---- names, defaults and configs ----------------------------------------------------------
@pytest.mark.parametrize("name,cls", [("adafactor", O.Adafactor), ("ftrl", O.Ftrl),
                                      ("lamb", O.Lamb), ("muon", O.Muon),
                                      ("schedulefreeadamw", O.ScheduleFreeAdamW)])
def test_get_by_name_and_config_round_trip(name, cls):
    assert type(O.get(name)) is cls and type(O.get(cls.__name__)) is cls
    kwargs = CASES[{"schedulefreeadamw": "schedule_free_adamw"}.get(name, name)][0]
    opt = cls(**kwargs, clipnorm=2.0, name=f"my_{name}")
    config = opt.get_config()
    again = O.deserialize(O.serialize(opt))
    assert type(again) is cls and again.get_config() == config
    assert cls.from_config(config).get_config() == config
    for arg, value in kwargs.items():
        assert config[arg] == pytest.approx(value)


def test_keras_defaults():
    a = O.Adafactor()
    assert (a.learning_rate, a.beta_2_decay, a.epsilon_1, a.epsilon_2, a.clip_threshold,
            a.relative_step) == (pytest.approx(0.001), -0.8, 1e-30, 1e-3, 1.0, True)
    m = O.Muon()
    assert (m.weight_decay, m.adam_weight_decay, m.momentum, m.ns_steps, m.nesterov,
            m.rms_rate, m.exclude_embeddings) == (0.004, 0.004, 0.95, 5, True, 0.2, True)
    s = O.ScheduleFreeAdamW()
    assert (s.learning_rate, s.epsilon, s.warmup_steps) == (pytest.approx(0.0025), 1e-8, 0)


# ---- in a model: fit, save, reload, continue ----------------------------------------------
def _data():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (np.tanh(x @ rng.normal(size=(4, 2)))).astype("float32")
    return x, y


def _model():
    kiln.utils.set_random_seed(11)
    return kiln.Sequential([kiln.Input((4,)),
                            kiln.layers.Dense(8, activation="tanh", name="hidden"),
                            kiln.layers.Dense(2, name="out")])


FIT = [O.Adafactor(0.05), O.Ftrl(0.2), O.Lamb(0.02), O.Muon(0.02),
       O.ScheduleFreeAdamW(0.02)]


@pytest.mark.parametrize("opt", FIT, ids=lambda o: type(o).__name__)
def test_fit_decreases_loss_and_a_saved_model_continues_identically(opt, tmp_path):
    x, y = _data()
    model = _model()
    model.compile(optimizer=opt, loss="mse")
    hist = model.fit(x, y, epochs=4, batch_size=16, shuffle=False, verbose=0).history["loss"]
    assert hist[-1] < hist[0]
    path = tmp_path / "m.keras"
    model.save(path)
    again = kiln.saving.load_model(path)
    assert type(again.optimizer) is type(opt)
    assert again.optimizer.get_config() == opt.get_config()
    for a, b in zip(again.optimizer.variables, opt.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    h1 = model.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0).history["loss"]
    h2 = again.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0).history["loss"]
    assert h1 == h2
    for a, b in zip(model.get_weights(), again.get_weights()):
        np.testing.assert_array_equal(a, b)


# ---- LossScaleOptimizer -------------------------------------------------------------------
def _scaled_grads(params, step):
    """Gradients of a loss scaled by 64, with an inf at step 2 and a NaN at step 5."""
    g = [x * 64.0 for x in np_grads(params)]
    if step == 2:
        g[0][0, 0] = np.inf
    if step == 5:
        g[1][1] = np.nan
    return g


def _lso_reference(steps, lr=0.1, momentum=0.5, scale=32.0, growth=2):
    params = [W0.copy(), C0.copy()]
    vel = [np.zeros_like(p) for p in params]
    counter = iterations = 0
    lr = f32(lr)
    for step in range(steps):
        g = _scaled_grads(params, step)
        if all(np.all(np.isfinite(x)) for x in g):
            g = [x / scale for x in g]
            vel = [momentum * v - lr * gi for v, gi in zip(vel, g)]
            params = [p + v for p, v in zip(params, vel)]
            iterations += 1
            if counter == growth - 1:
                counter, scale = 0, scale * 2.0
            else:
                counter += 1
        else:
            counter, scale = 0, scale * 0.5
    return params, scale, counter, iterations


def test_loss_scale_optimizer_skips_non_finite_steps_and_adapts_the_scale():
    steps = 8
    opt = O.LossScaleOptimizer(O.SGD(0.1, momentum=0.5), initial_scale=32.0,
                               dynamic_growth_steps=2)
    got = run_graph_grads(opt, steps, _scaled_grads, dtype="float64")
    params, scale, counter, iterations = _lso_reference(steps)
    for g, e in zip(got, params):
        np.testing.assert_allclose(g, e, rtol=1e-12)
    assert float(opt.dynamic_scale.value) == scale
    assert int(opt.step_counter.value) == counter
    assert int(opt.iterations.value) == iterations == steps - 2
    assert opt.iterations is opt.inner_optimizer.iterations


def test_loss_scale_optimizer_matches_keras():
    keras = pytest.importorskip("keras")
    steps = 8
    k_opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.5),
                                                initial_scale=32.0, dynamic_growth_steps=2)
    expected = run_keras(keras, k_opt, steps, grad_fn=_scaled_grads)
    opt = O.LossScaleOptimizer(O.SGD(0.1, momentum=0.5), initial_scale=32.0,
                               dynamic_growth_steps=2)
    got = run_graph_grads(opt, steps, _scaled_grads, dtype="float32")
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert float(opt.dynamic_scale.value) == float(np.asarray(k_opt.dynamic_scale.value))
    assert int(opt.step_counter.value) == int(np.asarray(k_opt.step_counter.value))
    assert int(opt.iterations.value) == int(np.asarray(k_opt.iterations.value))


def test_loss_scale_optimizer_arguments_config_and_names():
    with pytest.raises(ValueError, match="does not support `clipnorm`"):
        O.LossScaleOptimizer(O.SGD(), clipnorm=1.0)
    with pytest.raises(ValueError, match="dynamic=False"):
        O.LossScaleOptimizer(O.SGD(), dynamic=False)
    with pytest.raises(ValueError, match="does not support arguments: `foo`"):
        O.LossScaleOptimizer(O.SGD(), foo=1)
    with pytest.raises(ValueError, match="cannot be made from its name"):
        O.get("lossscaleoptimizer")
    inner = O.Adam(0.01, loss_scale_factor=8.0)
    opt = O.LossScaleOptimizer(inner, initial_scale=128.0, dynamic_growth_steps=10)
    assert inner.loss_scale_factor is None  # the dynamic scale replaces it, as in Keras
    assert opt.learning_rate == pytest.approx(0.01)
    opt.learning_rate = 0.5
    assert inner.learning_rate == pytest.approx(0.5)
    config = opt.get_config()
    assert config["inner_optimizer"]["class_name"] == "Adam"
    again = O.deserialize(O.serialize(opt))
    assert type(again) is O.LossScaleOptimizer and again.get_config() == config
    assert type(again.inner_optimizer) is O.Adam


# ---- MultiOptimizer / OptimizerMap --------------------------------------------------------
def _multi_reference(steps):
    sgd, adam = sgd_momentum_rule(0.9), adam_rule()
    params = [W0.copy(), C0.copy()]
    states: list[dict] = [{}, {}]
    for step in range(steps):
        g = np_grads(params)
        params = [sgd(g[0], params[0], states[0], step + 1, f32(0.1)),
                  adam(g[1], params[1], states[1], step + 1, f32(0.05))]
    return params


def sgd_momentum_rule(momentum):
    def rule(g, w, st, t, lr):
        v = st["v"] = momentum * st.get("v", 0.0) - lr * g
        return w + v
    return rule


def test_multi_optimizer_routes_variables():
    opt = O.MultiOptimizer(O.OptimizerMap(O.SGD(0.1, momentum=0.9), {"c": O.Adam(0.05)}))
    got = run_graph(opt, steps=6)
    for g, e in zip(got, _multi_reference(6)):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)
    assert int(opt.iterations.value) == 6
    assert [int(o.iterations.value) for o in opt.optimizers] == [6, 6]
    assert [type(o).__name__ for o in opt.optimizers] == ["Adam", "SGD"]
    with pytest.raises(AttributeError, match="cannot be accessed on a MultiOptimizer"):
        _ = opt.learning_rate
    with pytest.raises(AttributeError, match="cannot be set on a MultiOptimizer"):
        opt.learning_rate = 0.1


def test_multi_optimizer_with_a_callable_matches_keras():
    keras = pytest.importorskip("keras")
    k_map = keras.optimizers.OptimizerMap(keras.optimizers.SGD(0.1, momentum=0.9),
                                          {"c": keras.optimizers.Adam(0.05)})
    expected = run_keras(keras, keras.optimizers.MultiOptimizer(k_map), 6)
    sgd, adam = O.SGD(0.1, momentum=0.9), O.Adam(0.05)
    opt = O.MultiOptimizer(lambda v: adam if v.name == "c" else sgd)
    got = run_graph(opt, steps=6, dtype="float32")
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="cannot be serialized"):
        opt.get_config()


def test_optimizer_map_lookup_and_errors():
    adam, sgd, rms = O.Adam(), O.SGD(), O.RMSprop()
    m = O.OptimizerMap(default_optimizer=rms)
    m["encoder/layer_0/dense"] = adam
    m["encoder/.*"] = sgd
    m["decoder"] = adam
    assert m["decoder"] is adam and m["encoder/layer_0/dense"] is adam
    assert m["encoder/layer_0/attention/query"] is sgd  # Keras' documented example
    assert m["decoder/layer_0/dense"] is rms
    with pytest.raises(ValueError, match="already exists"):
        m["decoder"] = sgd
    with pytest.raises(ValueError, match="cannot be LossScaleOptimizer"):
        m["x"] = O.LossScaleOptimizer(O.SGD())
    m["encoder/layer_0/.*"] = rms
    with pytest.raises(ValueError, match="multiple optimizers"):
        m["encoder/layer_0/ffn"]
    with pytest.raises(TypeError, match="default_optimizer must be"):
        O.OptimizerMap("adam")


def test_multi_optimizer_config_round_trip():
    opt = O.MultiOptimizer(O.OptimizerMap(O.SGD(0.1), {"dense_1/.*": O.Adam(0.01)}),
                           loss_scale_factor=4.0, name="multi")
    assert all(o.loss_scale_factor == 4.0 for o in opt.optimizers)
    config = opt.get_config()
    again = O.deserialize(O.serialize(opt))
    assert type(again) is O.MultiOptimizer and again.get_config() == config
    assert [type(o) for o in again.optimizers] == [O.Adam, O.SGD]


# ---- wrappers in a model; loss scaling in the train step ----------------------------------
def _fit_weights(opt, epochs=3):
    x, y = _data()
    model = _model()
    model.compile(optimizer=opt, loss="mse")
    hist = model.fit(x, y, epochs=epochs, batch_size=16, shuffle=False, verbose=0)
    return model, hist.history["loss"]


@pytest.mark.parametrize("make", [
    lambda: O.LossScaleOptimizer(O.SGD(0.05, momentum=0.9), initial_scale=1024.0,
                                 dynamic_growth_steps=3),
    lambda: O.SGD(0.05, momentum=0.9, loss_scale_factor=8.0)], ids=["dynamic", "factor"])
def test_train_step_scales_the_loss_and_unscales_the_gradients(make):
    """The step differentiates scale * loss and divides the gradients back: with powers of
    two the training is exactly that of the plain optimizer."""
    model, loss = _fit_weights(make())
    plain, plain_loss = _fit_weights(O.SGD(0.05, momentum=0.9))
    assert loss == plain_loss
    for a, b in zip(model.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(a, b)
    if isinstance(model.optimizer, O.LossScaleOptimizer):  # 12 finite steps: 4 doublings
        assert float(model.optimizer.dynamic_scale.value) == 1024.0 * 2**4


@pytest.mark.parametrize("make", [
    lambda: O.LossScaleOptimizer(O.Adam(0.01), initial_scale=64.0, dynamic_growth_steps=5),
    lambda: O.MultiOptimizer(O.OptimizerMap(O.SGD(0.05, momentum=0.9),
                                            {"out/.*": O.Adam(0.01)}))],
    ids=["LossScaleOptimizer", "MultiOptimizer"])
def test_wrappers_fit_save_reload_continue(make, tmp_path):
    model, loss = _fit_weights(make(), epochs=4)
    assert loss[-1] < loss[0]
    if isinstance(model.optimizer, O.MultiOptimizer):  # both got their variables
        adam, sgd = model.optimizer.optimizers
        assert [v.name for v in adam._trainable_variables] == ["out/kernel", "out/bias"]
        assert [v.name for v in sgd._trainable_variables] == ["hidden/kernel", "hidden/bias"]
    model.save(tmp_path / "m.keras")
    again = kiln.saving.load_model(tmp_path / "m.keras")
    assert type(again.optimizer) is type(model.optimizer)
    assert again.optimizer.get_config() == model.optimizer.get_config()
    for a, b in zip(again.optimizer.variables, model.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    x, y = _data()
    h1 = model.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0).history["loss"]
    h2 = again.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0).history["loss"]
    assert h1 == h2


def test_keras_serialized_configs_load():
    keras = pytest.importorskip("keras")
    for name in ("Adafactor", "Ftrl", "Muon", "ScheduleFreeAdamW", "Lamb"):
        config = keras.optimizers.serialize(getattr(keras.optimizers, name)())
        opt = O.deserialize(config)
        assert type(opt) is getattr(O, name)
        mine = opt.get_config()
        assert {k: mine[k] for k in config["config"]} == config["config"]
    k_map = keras.optimizers.OptimizerMap(keras.optimizers.SGD(0.1),
                                          {"out/.*": keras.optimizers.Adam(0.01)})
    multi = O.deserialize(keras.optimizers.serialize(keras.optimizers.MultiOptimizer(k_map)))
    assert [type(o) for o in multi.optimizers] == [O.Adam, O.SGD]
    assert multi._optimizer_map["out/kernel"] is multi.optimizers[0]
    lso = O.deserialize(keras.optimizers.serialize(keras.optimizers.LossScaleOptimizer(
        keras.optimizers.Adam(0.01), initial_scale=64.0)))
    assert (type(lso.inner_optimizer), lso.initial_scale) == (O.Adam, 64.0)
