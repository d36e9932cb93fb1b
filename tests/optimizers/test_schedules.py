"""Learning-rate schedules against their closed forms (Keras 3 definitions)."""

from __future__ import annotations

import json
import math

import pytest

from kiln.optimizers import schedules as S

STEPS = [0, 1, 5, 10, 37, 100, 250, 1000]


@pytest.mark.parametrize("staircase", [False, True])
def test_exponential_decay(staircase):
    s = S.ExponentialDecay(0.1, decay_steps=30, decay_rate=0.5, staircase=staircase)
    for t in STEPS:
        p = t // 30 if staircase else t / 30
        assert s(t) == pytest.approx(0.1 * 0.5**p, rel=1e-12)


def test_piecewise_constant_decay():
    s = S.PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1])
    expected = {0: 1.0, 10: 1.0, 11: 0.5, 20: 0.5, 21: 0.1, 1000: 0.1}
    for t, v in expected.items():
        assert s(t) == v
    with pytest.raises(ValueError, match="1 less"):
        S.PiecewiseConstantDecay([1, 2], [1.0])
    with pytest.raises(ValueError, match="increasing"):
        S.PiecewiseConstantDecay([2, 1], [1.0, 0.5, 0.1])


@pytest.mark.parametrize("power", [1.0, 0.5, 2.0])
def test_polynomial_decay(power):
    s = S.PolynomialDecay(0.1, decay_steps=100, end_learning_rate=0.01, power=power)
    for t in STEPS:
        tt = min(t, 100)
        assert s(t) == pytest.approx((0.1 - 0.01) * (1 - tt / 100) ** power + 0.01, rel=1e-12)


def test_polynomial_decay_cycle():
    s = S.PolynomialDecay(0.1, decay_steps=100, end_learning_rate=0.01, cycle=True)
    assert s(0) == pytest.approx(0.1)
    for t in [1, 50, 100, 101, 150, 250]:
        d = 100 * math.ceil(t / 100)
        assert s(t) == pytest.approx(0.09 * (1 - t / d) + 0.01, rel=1e-12)


@pytest.mark.parametrize("staircase", [False, True])
def test_inverse_time_decay(staircase):
    s = S.InverseTimeDecay(0.1, decay_steps=10, decay_rate=0.5, staircase=staircase)
    for t in STEPS:
        p = t // 10 if staircase else t / 10
        assert s(t) == pytest.approx(0.1 / (1 + 0.5 * p), rel=1e-12)


def test_cosine_decay():
    s = S.CosineDecay(0.1, decay_steps=100, alpha=0.1)
    for t in STEPS:
        tt = min(t, 100)
        cos = 0.5 * (1 + math.cos(math.pi * tt / 100))
        assert s(t) == pytest.approx(0.1 * (0.9 * cos + 0.1), rel=1e-12)
    assert s(100) == pytest.approx(0.01)


def test_cosine_decay_with_warmup():
    s = S.CosineDecay(0.0, decay_steps=100, alpha=0.0, warmup_target=0.2, warmup_steps=10)
    for t in range(0, 10):
        assert s(t) == pytest.approx(0.2 * t / 10, abs=1e-15)
    assert s(10) == pytest.approx(0.2)
    for t in [10, 35, 60, 110, 500]:
        tt = min(t, 110) - 10
        assert s(t) == pytest.approx(0.2 * 0.5 * (1 + math.cos(math.pi * tt / 100)), abs=1e-15)


def _sgdr(t, lr, first, t_mul, m_mul, alpha):
    """Cosine decay with restarts by walking the periods explicitly."""
    start, length, i = 0.0, float(first), 0
    while t >= start + length:
        start += length
        length *= t_mul
        i += 1
    frac = (t - start) / length
    return lr * ((1 - alpha) * 0.5 * m_mul**i * (1 + math.cos(math.pi * frac)) + alpha)


@pytest.mark.parametrize("t_mul,m_mul,alpha", [(2.0, 1.0, 0.0), (1.0, 0.5, 0.1),
                                               (1.5, 0.8, 0.05)])
def test_cosine_decay_restarts(t_mul, m_mul, alpha):
    s = S.CosineDecayRestarts(0.1, first_decay_steps=10, t_mul=t_mul, m_mul=m_mul, alpha=alpha)
    for t in [0, 1, 5, 9, 11, 15, 29, 31, 44, 77, 101]:
        assert s(t) == pytest.approx(_sgdr(t, 0.1, 10, t_mul, m_mul, alpha), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("schedule", [
    S.ExponentialDecay(0.1, 100, 0.9, staircase=True),
    S.PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1]),
    S.PolynomialDecay(0.1, 100, 0.001, power=2.0, cycle=True),
    S.InverseTimeDecay(0.1, 10, 0.5),
    S.CosineDecay(0.1, 100, alpha=0.1, warmup_target=0.5, warmup_steps=5),
    S.CosineDecayRestarts(0.1, 10, t_mul=1.5, m_mul=0.9, alpha=0.01),
], ids=lambda s: type(s).__name__)
def test_schedule_config_round_trip(schedule):
    cfg = json.loads(json.dumps(S.serialize(schedule)))
    again = S.deserialize(cfg)
    assert type(again) is type(schedule)
    assert again.get_config() == schedule.get_config()
    assert type(schedule).from_config(schedule.get_config()).get_config() == \
        schedule.get_config()
    for t in [0, 3, 17, 150]:
        assert again(t) == schedule(t)


def test_schedule_errors():
    with pytest.raises(ValueError, match="decay_steps"):
        S.ExponentialDecay(0.1, 0, 0.5)
    with pytest.raises(ValueError, match="first_decay_steps"):
        S.CosineDecayRestarts(0.1, -1)
    with pytest.raises(ValueError, match="unknown schedule"):
        S.deserialize({"class_name": "Nope", "config": {}})
    with pytest.raises(TypeError):
        S.serialize(lambda step: 0.1)
    with pytest.raises(NotImplementedError):
        S.LearningRateSchedule()(0)


def test_custom_schedule_with_custom_objects():
    class Halving(S.LearningRateSchedule):
        def __init__(self, lr):
            self.lr = lr

        def __call__(self, step):
            return self.lr / 2**step

        def get_config(self):
            return {"lr": self.lr}

    cfg = S.serialize(Halving(1.0))
    assert S.deserialize(cfg, custom_objects={"Halving": Halving})(3) == 0.125
