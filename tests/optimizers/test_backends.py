"""The optimizer graphs on the compiled CPU backend agree with the reference interpreter.

Skipped while the CPU backend is not available (it is built separately)."""

from __future__ import annotations

import importlib

import pytest
from optim_problem import assert_close, run_kiln

from kiln import optimizers as O


def _cpu_available() -> bool:
    try:
        module = importlib.import_module("kiln.core.backends.cpu")
    except Exception:
        return False
    return hasattr(module, "compile_graph")


pytestmark = pytest.mark.skipif(not _cpu_available(), reason="the cpu backend is not built yet")

CONFIGS = [
    lambda: O.SGD(0.01, momentum=0.9, nesterov=True, clipnorm=1.0),
    lambda: O.Adam(0.05, amsgrad=True, global_clipnorm=1.5),
    lambda: O.AdamW(0.05, weight_decay=0.1, gradient_accumulation_steps=3),
    lambda: O.RMSprop(0.01, momentum=0.5, centered=True, clipvalue=0.5),
    lambda: O.Adagrad(0.1), lambda: O.Adadelta(1.0), lambda: O.Adamax(0.05),
    lambda: O.Nadam(0.05, use_ema=True, ema_overwrite_frequency=4),
    lambda: O.Lion(0.01, weight_decay=0.1),
]


@pytest.mark.parametrize("make", CONFIGS, ids=lambda m: type(m()).__name__)
@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-9), ("float32", 1e-4)])
def test_cpu_backend_matches_reference(make, dtype, rtol):
    want = run_kiln(make(), steps=12, dtype=dtype, backend="reference")
    got = run_kiln(make(), steps=12, dtype=dtype, backend="cpu")
    assert_close(got, want, rtol=rtol, atol=1e-6 if dtype == "float32" else 1e-12)
