"""Compiling without the cyclic garbage collector's pauses (docs/architecture.md, "The data
flow").

Building a function (its graph's passes, docs/architecture.md "Passes") and a plan allocates
tens of thousands of small objects, few of them garbage. Each 700 of them start a collection
of the youngest objects, each tenth of those a collection of the next generation, and about
each tenth of those a full collection, which walks every object of the process (NumPy's, the
backend's, llvmlite's): 17-28 ms on the 2-core test host. The MNIST convnet's first epoch in a
warm process ran 30 young and 3 middle collections, ~7 ms, and a full one; with :func:`paused`
around the model's step graphs (tracing, autodiff), the functions' passes and compilation and
the plans, 4 young ones and 1 middle one (~8 ms: each young one has more to walk) and no full
one.

:func:`paused` turns the collector off while the outermost of any nested or concurrent uses
runs, and back on after it, unless it was off already (a user's ``gc.disable()`` stays). The
objects stay counted: the first allocation after it collects the young generation as usual.
``gc.collect()`` works meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_state = {"depth": 0, "restore": False}


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No automatic garbage collection inside (see the module docstring)."""
    with _lock:
        if _state["depth"] == 0:
            _state["restore"] = gc.isenabled()
            if _state["restore"]:
                gc.disable()
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["restore"]:
                _state["restore"] = False
                gc.enable()
