"""get / serialize / deserialize, get_config round trips, argument checks, slot order."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from kiln import optimizers as O
from kiln.optimizers import schedules as S

NAMES = ["sgd", "adam", "adamw", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "lion"]
CLASSES = [O.SGD, O.Adam, O.AdamW, O.RMSprop, O.Adagrad, O.Adadelta, O.Adamax, O.Nadam, O.Lion]


@pytest.mark.parametrize("name,cls", list(zip(NAMES, CLASSES)))
def test_get_by_name_case_insensitive(name, cls):
    for ident in (name, name.upper(), cls.__name__):
        opt = O.get(ident)
        assert type(opt) is cls


def test_keras_defaults():
    assert O.SGD().learning_rate == pytest.approx(0.01)
    sgd = O.SGD()
    assert (sgd.momentum, sgd.nesterov) == (0.0, False)
    adam = O.Adam()
    assert (adam.beta_1, adam.beta_2, adam.epsilon, adam.amsgrad) == (0.9, 0.999, 1e-7, False)
    assert adam.learning_rate == pytest.approx(0.001)
    assert O.AdamW().weight_decay == 0.004
    r = O.RMSprop()
    assert (r.rho, r.momentum, r.epsilon, r.centered) == (0.9, 0.0, 1e-7, False)
    a = O.Adagrad()
    assert (a.initial_accumulator_value, a.epsilon) == (0.1, 1e-7)
    d = O.Adadelta()
    assert (d.rho, d.epsilon) == (0.95, 1e-7)
    assert (O.Adamax().beta_1, O.Adamax().beta_2) == (0.9, 0.999)
    assert (O.Nadam().beta_1, O.Nadam().beta_2, O.Nadam().epsilon) == (0.9, 0.999, 1e-7)
    assert (O.Lion().beta_1, O.Lion().beta_2) == (0.9, 0.99)
    for cls in CLASSES:
        opt = cls()
        assert opt.use_ema is False and opt.ema_momentum == 0.99
        assert opt.clipnorm is None and opt.clipvalue is None and opt.global_clipnorm is None
        assert opt.gradient_accumulation_steps is None


def test_get_errors():
    with pytest.raises(ValueError) as err:
        O.get("adamm")
    for name in NAMES:
        assert name in str(err.value)
    with pytest.raises(TypeError, match="could not interpret"):
        O.get(3)
    with pytest.raises(ValueError, match="unknown optimizer"):
        O.get({"class_name": "Sprinter", "config": {}})
    with pytest.raises(TypeError):
        O.deserialize({"config": {}})
    opt = O.Adam()
    assert O.get(opt) is opt


CONFIGS = [
    O.SGD(0.1, momentum=0.8, nesterov=True, clipnorm=2.0, name="s"),
    O.Adam(0.002, beta_1=0.8, beta_2=0.95, epsilon=1e-6, amsgrad=True, global_clipnorm=1.0),
    O.AdamW(0.003, weight_decay=0.02, use_ema=True, ema_momentum=0.9,
            ema_overwrite_frequency=5),
    O.RMSprop(0.01, rho=0.8, momentum=0.5, centered=True, clipvalue=0.3),
    O.Adagrad(0.05, initial_accumulator_value=0.2, epsilon=1e-5,
              gradient_accumulation_steps=4),
    O.Adadelta(1.0, rho=0.9, epsilon=1e-6, loss_scale_factor=128.0),
    O.Adamax(0.004, beta_1=0.85, beta_2=0.99, weight_decay=0.1),
    O.Nadam(0.002, beta_1=0.85),
    O.Lion(1e-4, beta_1=0.95, beta_2=0.98, weight_decay=0.5),
    O.SGD(S.PiecewiseConstantDecay([100], [0.1, 0.01]), momentum=0.9),
    O.Adam(S.CosineDecay(0.0, 1000, warmup_target=1e-3, warmup_steps=100)),
]


@pytest.mark.parametrize("opt", CONFIGS, ids=lambda o: type(o).__name__)
def test_config_round_trip(opt):
    cfg = opt.get_config()
    again = type(opt).from_config(cfg)
    assert again.get_config() == cfg
    ser = json.loads(json.dumps(O.serialize(opt)))
    assert ser["class_name"] == type(opt).__name__
    back = O.deserialize(ser)
    assert type(back) is type(opt)
    assert back.get_config() == cfg
    assert O.get(ser).get_config() == cfg
    assert back.learning_rate == pytest.approx(opt.learning_rate)


def test_keras_style_config_dict():
    opt = O.get({"class_name": "Adam", "config": {"learning_rate": 0.01, "beta_1": 0.5}})
    assert isinstance(opt, O.Adam) and opt.beta_1 == 0.5
    assert opt.learning_rate == pytest.approx(0.01)


def test_argument_checks():
    with pytest.raises(ValueError, match="only one of"):
        O.SGD(clipnorm=1.0, clipvalue=1.0)
    with pytest.raises(ValueError, match="momentum"):
        O.SGD(momentum=1.5)
    with pytest.raises(ValueError, match="weight_decay"):
        O.AdamW(weight_decay=None)
    with pytest.raises(ValueError, match="beta_1"):
        O.Lion(beta_1=0.0)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        O.Adam(gradient_accumulation_steps=1)
    with pytest.raises(ValueError, match="ema_momentum"):
        O.Adam(use_ema=True, ema_momentum=1.5)
    with pytest.raises(ValueError, match="not recognized"):
        O.Adam(betas=(0.9, 0.99))
    with pytest.raises(ValueError, match="non-negative"):
        O.Adagrad(initial_accumulator_value=-1.0)
    with pytest.raises(TypeError, match="clipnorm"):
        O.Adam(clipnorm="big")


def _vars():
    return [kiln.Variable(np.zeros((3, 2)), name="k"), kiln.Variable(np.zeros(2), name="b")]


def _slot_names(opt):
    return [v.name.split("/", 1)[1] for v in opt.variables]


def test_adam_slots_interleaved_per_variable_like_keras():
    opt = O.Adam(name="adam")
    opt.build(_vars())
    assert _slot_names(opt) == ["iteration", "k_momentum", "k_velocity", "b_momentum",
                                "b_velocity"]
    opt = O.Adam(amsgrad=True, name="adam")
    opt.build(_vars())
    assert _slot_names(opt)[5:] == ["k_velocity_hat", "b_velocity_hat"]


def test_slot_orders_of_other_optimizers():
    cases = {
        O.SGD(momentum=0.0): [],
        O.SGD(momentum=0.9): ["k_momentum", "b_momentum"],
        O.RMSprop(momentum=0.9, centered=True): [
            "k_velocity", "b_velocity", "k_momentum", "b_momentum", "k_average_gradient",
            "b_average_gradient"],
        O.Adagrad(): ["k_accumulator", "b_accumulator"],
        O.Adadelta(): ["k_accumulated_grad", "k_accumulated_delta_var", "b_accumulated_grad",
                       "b_accumulated_delta_var"],
        O.Adamax(): ["k_momentum", "k_norm", "b_momentum", "b_norm"],
        O.Nadam(): ["k_momentum", "k_velocity", "b_momentum", "b_velocity", "u_product"],
        O.Lion(): ["k_momentum", "b_momentum"],
        O.SGD(momentum=0.5, use_ema=True, gradient_accumulation_steps=2): [
            "k_average", "b_average", "k_gradient_accumulator", "b_gradient_accumulator",
            "k_momentum", "b_momentum"],
    }
    for opt, names in cases.items():
        opt.build(_vars())
        assert _slot_names(opt) == ["iteration", *names], type(opt).__name__


def test_slot_initial_values_shapes_dtypes():
    k = kiln.Variable(np.ones((3, 2)), dtype="float64")
    opt = O.Adagrad(initial_accumulator_value=0.25)
    opt.build([k])
    acc = opt.get_slot(k, "accumulator")
    assert acc.shape == (3, 2) and acc.dtype == "float64" and not acc.trainable
    np.testing.assert_array_equal(acc.value, np.full((3, 2), 0.25))
    with pytest.raises(KeyError, match="momentum"):
        opt.get_slot(k, "momentum")


def test_build_is_idempotent_and_extends():
    opt = O.Adam()
    vs = _vars()
    opt.build(vs)
    first = opt.variables
    opt.build(vs)
    opt.build(list(vs))
    assert opt.variables == first
    extra = kiln.Variable(np.zeros(4), name="e")
    opt.build([*vs, extra])
    assert opt.variables[:len(first)] == first
    assert _slot_names(opt)[len(first):] == ["e_momentum", "e_velocity"]


def test_optimizer_weights_round_trip():
    opt = O.Adam()
    vs = _vars()
    opt.build(vs)
    weights = [np.full(v.shape, i, dtype=v.dtype) for i, v in enumerate(opt.variables)]
    opt.set_weights(weights)
    for got, want in zip(opt.get_weights(), weights):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="expected 5"):
        opt.set_weights(weights[:2])


def test_fit_ends_with_the_moving_averages_in_the_weights_like_keras():
    """``use_ema=True``: Keras' ``fit`` ends by writing each weight's moving average into it
    (``finalize_variable_values``); the oracle is Keras itself on the same data and start."""
    keras = pytest.importorskip("keras")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 3)).astype("float32")
    y = rng.normal(size=(16, 1)).astype("float32")
    w0 = [rng.normal(size=(3, 1)).astype("float32"), np.zeros(1, "float32")]

    def run(lib, **ema):
        m = lib.Sequential([lib.Input((3,)), lib.layers.Dense(1)])
        m.set_weights(w0)
        m.compile(lib.optimizers.SGD(0.1, **ema), "mse")
        m.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
        return m.get_weights()

    ema = {"use_ema": True, "ema_momentum": 0.5}
    want = run(keras, **ema)
    got = run(kiln, **ema)
    plain = run(kiln)
    for g, w, p in zip(got, want, plain):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        assert not np.allclose(g, p, rtol=1e-4)
