"""Backends turn a graph into a runnable program: ``compile_graph(graph) -> program`` with
``program.run(feeds) -> outputs``. ``reference`` (NumPy) is the oracle; ``cpu`` (numba) is the
default once available; ``cuda`` is imported lazily.
"""

from __future__ import annotations

import importlib
from types import ModuleType

_NAMES = {"reference": "kiln.core.backends.reference", "cpu": "kiln.core.backends.cpu",
          "cuda": "kiln.core.backends.cuda"}


def get_backend(name: str) -> ModuleType:
    """The backend module called ``name``; falls back from cpu to reference when the cpu
    backend is not available."""
    if name not in _NAMES:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(_NAMES)}")
    try:
        return importlib.import_module(_NAMES[name])
    except ModuleNotFoundError as exc:
        if name == "cpu" and exc.name == _NAMES["cpu"]:
            return importlib.import_module(_NAMES["reference"])
        raise
