"""Layer tests run on the reference backend (the NumPy oracle), so that they check the layers
and not a backend in progress; set KILN_LAYER_TEST_BACKEND to try another one."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _reference_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_BACKEND", os.environ.get("KILN_LAYER_TEST_BACKEND", "reference"))
