"""Backends turn a graph into a runnable program: ``compile_graph(graph) -> program`` with
``program.run(feeds) -> outputs``. ``reference`` (NumPy) is the oracle; ``cpu`` (numba) is the
default; ``cuda`` is imported lazily. Every backend plans through ``kiln/core/plan.py`` and
loads kernels through ``kiln/core/backends/jit.py`` (docs/architecture.md, "Backends").
"""

from __future__ import annotations

import importlib
from types import ModuleType

_NAMES = {"reference": "kiln.core.backends.reference", "cpu": "kiln.core.backends.cpu",
          "cuda": "kiln.core.backends.cuda"}


def get_backend(name: str) -> ModuleType:
    """The backend module called ``name`` (imported on first use)."""
    if name not in _NAMES:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(_NAMES)}")
    return importlib.import_module(_NAMES[name])
