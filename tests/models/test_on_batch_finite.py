"""train_on_batch / test_on_batch refuse NaN and inf like fit (the first call and the cached
fast path alike), before any weight changes; check_finite=False lets them through."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.models.data import NonFiniteDataError


def _model() -> kiln.Model:
    model = kiln.Sequential([kiln.layers.Input((3,)), kiln.layers.Dense(2)])
    model.compile(kiln.optimizers.SGD(0.1), "mse")
    return model


@pytest.mark.parametrize("method", ["train_on_batch", "test_on_batch"])
@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("where", ["x", "y"])
def test_non_finite_batches_are_refused_before_any_change(method, warm, where):
    model = _model()
    x = np.ones((4, 3), np.float32)
    y = np.zeros((4, 2), np.float32)
    if warm:  # the second call of a signature takes the cached fast path
        getattr(model, method)(x, y)
    before = model.get_weights()
    bad_x, bad_y = x.copy(), y.copy()
    (bad_x if where == "x" else bad_y)[2, 1] = np.nan
    with pytest.raises(NonFiniteDataError,
                       match=rf"{where} \({method[:-9]}_on_batch\) holds 1 non-finite value "
                             r"\(the first, nan, at index \(2, 1\)"):
        getattr(model, method)(bad_x, bad_y)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_check_finite_false_trains_on_the_values_given():
    model = _model()
    x = np.ones((4, 3), np.float32)
    y = np.zeros((4, 2), np.float32)
    y[0, 0] = np.inf
    loss = model.train_on_batch(x, y, check_finite=False)
    assert not np.isfinite(loss)
