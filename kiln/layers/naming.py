"""Layer names as Keras makes them: the class name in snake case (``Conv2D`` -> ``conv2d``),
made unique per process (``dense``, ``dense_1`` ...); ``reset_names`` restarts the counters
(Keras' ``clear_session``). Metrics and losses name themselves with ``snake_case`` too."""

from __future__ import annotations

import re

_NAME_COUNTS: dict[str, int] = {}


def snake_case(name: str) -> str:
    s = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    s = re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()
    return s.replace("2_d", "2d").replace("1_d", "1d").replace("3_d", "3d")


def unique_name(base: str) -> str:
    """``dense``, then ``dense_1``, ``dense_2`` ... (per process, like Keras)."""
    n = _NAME_COUNTS.get(base, 0)
    _NAME_COUNTS[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def reset_names() -> None:
    """Restarts the automatic name counters (Keras' ``clear_session`` equivalent)."""
    _NAME_COUNTS.clear()
