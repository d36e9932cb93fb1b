"""The learning rate lives in a Variable: changing it (by hand, schedule or callable) takes
effect on the next step and never recompiles."""

from __future__ import annotations

import numpy as np
import pytest
from optim_problem import assert_close, compile_step, make_vars, np_grads, run_numpy

from kiln import optimizers as O
from kiln.core.backends import reference
from kiln.optimizers import schedules as S


def sgd_momentum(g, w, st, t, lr, momentum=0.9):
    v = momentum * st.get("v", 0.0) - lr * g
    st["v"] = v
    return w + v


@pytest.fixture
def compile_counter(monkeypatch):
    calls = []
    original = reference.compile_graph

    def counting(graph, **kwargs):
        calls.append(graph)
        return original(graph, **kwargs)

    monkeypatch.setattr(reference, "compile_graph", counting)
    return calls


def test_setting_learning_rate_applies_next_step_without_recompiling(compile_counter):
    opt = O.SGD(0.1, momentum=0.9)
    variables = make_vars()
    fn = compile_step(opt, variables)
    assert len(compile_counter) == 1
    rates = [0.1] * 5 + [0.01] * 5 + [0.003] * 5
    for i, lr in enumerate(rates):
        if i in (5, 10):
            opt.learning_rate = lr
            assert opt.learning_rate == pytest.approx(lr, rel=1e-7)
        opt.before_step()
        fn()
    assert len(compile_counter) == 1  # one Function, built once, reused for all 15 steps
    assert fn.calls == 15
    want = run_numpy(sgd_momentum, steps=15, lr=lambda s: rates[s])
    assert_close([v.numpy() for v in variables], want)


def test_apply_gradients_compiles_once_per_variable_list(compile_counter):
    opt = O.Adam(0.05)
    variables = make_vars()
    params = [v.numpy() for v in variables]
    for step in range(6):
        if step == 3:
            opt.learning_rate = 0.2
        grads = np_grads([v.numpy() for v in variables])
        opt.apply_gradients(zip(grads, variables), backend="reference")
    assert len(compile_counter) == 1
    assert len(opt._compiled) == 1
    # the same six Adam steps in NumPy
    st = [{}, {}]
    for step in range(6):
        lr = float(np.float32(0.05 if step < 3 else 0.2))
        g = np_grads(params)
        new = []
        for p, gi, s in zip(params, g, st):
            m = 0.9 * s.get("m", 0.0) + 0.1 * gi
            v = 0.999 * s.get("v", 0.0) + 0.001 * gi * gi
            s["m"], s["v"] = m, v
            t = step + 1
            new.append(p - m * lr * np.sqrt(1 - 0.999**t) / (1 - 0.9**t) / (np.sqrt(v) + 1e-7))
        params = new
    assert_close([v.numpy() for v in variables], params)
    assert int(opt.iterations.value) == 6


def test_schedule_learning_rate_is_written_before_each_step(compile_counter):
    schedule = S.ExponentialDecay(0.1, decay_steps=4, decay_rate=0.5)
    opt = O.SGD(schedule, momentum=0.9)
    variables = make_vars()
    fn = compile_step(opt, variables)
    for _ in range(12):
        opt.before_step()
        assert float(opt.learning_rate_variable.value) == np.float32(
            schedule(int(opt.iterations.value)))
        fn()
    assert len(compile_counter) == 1
    want = run_numpy(sgd_momentum, steps=12, lr=schedule)
    assert_close([v.numpy() for v in variables], want)
    assert opt.learning_rate == pytest.approx(schedule(12))
    with pytest.raises(TypeError, match="not settable"):
        opt.learning_rate = 0.5


def test_callable_learning_rate():
    box = {"lr": 0.1}
    opt = O.SGD(lambda: box["lr"])
    variables = make_vars()
    fn = compile_step(opt, variables)
    for i in range(6):
        box["lr"] = 0.1 / (i + 1)
        opt.before_step()
        fn()
    want = run_numpy(lambda g, w, st, t, lr: w - lr * g, steps=6, lr=lambda s: 0.1 / (s + 1))
    assert_close([v.numpy() for v in variables], want)
    assert opt.learning_rate == pytest.approx(0.1 / 6)


def test_learning_rate_property_and_validation():
    opt = O.Adam()
    assert opt.learning_rate == pytest.approx(0.001)
    assert opt.learning_rate_variable.dtype == "float32"
    assert opt.learning_rate_variable.shape == ()
    assert opt.iterations.dtype == "int64" and opt.iterations.shape == ()
    assert int(opt.iterations.value) == 0
    opt.learning_rate = 3e-4
    assert opt.learning_rate == pytest.approx(3e-4)
    opt.learning_rate = S.CosineDecay(0.5, 10)
    assert opt.learning_rate == pytest.approx(0.5)
    with pytest.raises(TypeError, match="learning_rate"):
        O.SGD("fast")
    with pytest.raises(TypeError, match="learning_rate"):
        O.SGD(None)
