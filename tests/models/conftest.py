"""Shared fixtures for the model tests: a fresh seed and fresh layer names per test."""

from __future__ import annotations

import pytest

import kiln
from kiln.layers.base import reset_names


@pytest.fixture(autouse=True)
def _fresh_state():
    reset_names()
    kiln.utils.set_random_seed(1234)
    yield
