"""The cuda backend's kernels: ``cuda.jit`` over the one JIT loader (:mod:`..jit`).

Every CUDA kernel of kiln is generated as Python source and loaded through :func:`load`:

* the source, after :data:`PRELUDE` (imports and the shared device functions), goes through
  :func:`kiln.core.backends.jit.load_source` with target ``"cuda"`` (or ``"cudasim"`` under the
  simulator), which keys it, writes it to ``KILN_CACHE_DIR/<target>/k_<key>.py`` and imports
  it, so that ``cuda.jit(cache=True)`` can cache the compiled kernels across processes;
* no large constants are baked in: arrays, shapes, strides and offsets are kernel arguments,
  so one kernel serves every batch size (numba compiles per argument *types* only);
* under the simulator (``NUMBA_ENABLE_CUDASIM=1``) the same source runs as Python threads,
  with ``math`` bound to NumPy scalar functions (GPU-like inf/nan instead of exceptions).
  This is the cuda backend's ``KILN_JIT=0``: plain Python, debuggable.

:data:`launches` records (when enabled) the source file, kernel name and argument types of
each launch, so a test can compile every kernel the simulator ran to PTX for a real GPU.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln import config
from kiln.core.backends.cuda._device import SIM_MATH, cuda_module, simulator_enabled
from kiln.core.backends.jit import import_file, load_source, target_dir

PRELUDE = '''import math

import numpy as np
from numba import cuda, float32, float64, int32, int64, uint64

bool_ = bool
_INF = math.inf
_GOLDEN = uint64(0x9E3779B97F4A7C15)
_M1 = uint64(0xBF58476D1CE4E5B9)
_M2 = uint64(0x94D049BB133111EB)
_SEED_MUL = uint64(0xD1B54A32D192ED03)
_SALT_MUL = uint64(0x8CB92BA72F3D8DD7)


@cuda.jit(device=True)
def _floor(x):
    if not (abs(x) < 4503599627370496.0):  # already integral, inf or nan
        return float64(x)
    return float64(math.floor(x))


@cuda.jit(device=True)
def _ceil(x):
    if not (abs(x) < 4503599627370496.0):
        return float64(x)
    return float64(math.ceil(x))


@cuda.jit(device=True)
def _rint(x):
    if not (abs(x) < 4503599627370496.0):
        return float64(x)
    f = float64(math.floor(x))
    d = float64(x) - f
    if d > 0.5 or (d == 0.5 and (f * 0.5) != float64(math.floor(f * 0.5))):
        f += 1.0
    return f


@cuda.jit(device=True)
def _maxn(a, b):
    return a if (a >= b or a != a) else b


@cuda.jit(device=True)
def _minn(a, b):
    return a if (a <= b or a != a) else b


@cuda.jit(device=True)
def _mix64(z):
    z = (z ^ (z >> uint64(30))) * _M1
    z = (z ^ (z >> uint64(27))) * _M2
    return z ^ (z >> uint64(31))


@cuda.jit(device=True)
def _stream_base(k0, k1, salt):
    base = _mix64(uint64(k0) * _SEED_MUL + uint64(salt) * _SALT_MUL)
    return _mix64(base ^ (uint64(k1) * _GOLDEN))


@cuda.jit(device=True)
def _uniform(base, i):
    h = _mix64(base + (uint64(i) + uint64(1)) * _GOLDEN)
    return float64(h >> uint64(40)) * (1.0 / 16777216.0)


'''

_kernels: dict[str, Kernel] = {}

# When a list, every launch appends (source path, kernel name, argument type descriptors).
launches: list[tuple[str, str, tuple]] | None = None
stats: dict[str, int] = {"sources_written": 0, "modules_loaded": 0, "launches": 0,
                         "direct_launches_bound": 0, "direct_launch_fallbacks": 0}


def kernel_dir() -> str:
    """The folder of this process's CUDA kernel files (``cuda``, or ``cudasim`` under the
    simulator)."""
    return target_dir("cudasim" if simulator_enabled() else "cuda")


def arg_type(a: Any) -> tuple:
    """A picklable description of a kernel argument's numba type."""
    if isinstance(a, bool | np.bool_):
        return ("bool",)
    if isinstance(a, int | np.integer):
        return ("int64",)
    if isinstance(a, float | np.floating):
        return ("float64",)
    return ("array", np.dtype(a.dtype).name, len(a.shape))


class Kernel:
    """A generated kernel: its source file, the Python function and the cuda dispatcher."""

    def __init__(self, name: str, path: str, py: Any, dispatcher: Any, sim: bool):
        self.name = name
        self.path = path
        self.py = py
        self.dispatcher = dispatcher
        self.sim = sim
        self._configured: dict[tuple, Any] = {}

    def launch(self, griddim: Any, blockdim: Any, *args: Any) -> None:
        """Launches on the default stream (asynchronous on a GPU)."""
        stats["launches"] += 1
        if launches is not None:
            launches.append((self.path, self.name, tuple(arg_type(a) for a in args)))
        cfg = self._configure(griddim, blockdim)
        if self.sim:
            with warnings.catch_warnings():  # uint64 wraparound and inf/nan in NumPy scalars
                warnings.simplefilter("ignore", RuntimeWarning)
                cfg(*args)
        else:
            cfg(*args)

    def _configure(self, griddim: Any, blockdim: Any) -> Any:
        key = (griddim, blockdim)
        cfg = self._configured.get(key)
        if cfg is None:
            with warnings.catch_warnings():  # numba-cuda warns about grids under 128 blocks
                warnings.simplefilter("ignore")
                cfg = self.dispatcher[griddim, blockdim]
            self._configured[key] = cfg
        return cfg

    def bind(self, griddim: Any, blockdim: Any, args: Sequence[Any]) -> Callable[[], None]:
        """A launch with fixed arguments, as a callable. On a GPU, after the first launch
        (which compiles through numba's dispatcher) it calls the compiled kernel for these
        argument types directly, skipping the dispatcher's per-call typing
        (``KILN_CUDA_FAST_LAUNCH=0`` turns that off)."""
        args = tuple(args)
        if self.sim or not config.env_flag("KILN_CUDA_FAST_LAUNCH", True):
            return lambda: self.launch(griddim, blockdim, *args)
        state: dict[str, Any] = {}

        def slow() -> None:
            self.launch(griddim, blockdim, *args)

        def run() -> None:
            go = state.get("go")
            if go is not None:
                go()
                return
            if "fast" in state:  # the first direct launch: fall back if the internals moved
                try:
                    state["fast"]()
                    state["go"] = state["fast"]
                    stats["direct_launches_bound"] += 1
                except (TypeError, AttributeError, ValueError, KeyError):
                    stats["direct_launch_fallbacks"] += 1
                    state["go"] = slow
                    slow()
                return
            slow()
            cfg = self._configure(griddim, blockdim)
            try:
                types = tuple(self.dispatcher.typeof_pyval(a) for a in args)
                launch = self.dispatcher.overloads[types].launch
                g, b, st, sm = cfg.griddim, cfg.blockdim, cfg.stream, cfg.sharedmem
                state["fast"] = lambda: launch(args, g, b, st, sm)
            except Exception:  # noqa: BLE001 - numba-cuda internals moved: keep dispatching
                stats["direct_launch_fallbacks"] += 1
                state["go"] = slow
        return run

    def __repr__(self) -> str:
        return f"<kiln cuda kernel {self.name} {os.path.basename(self.path)}>"


def _bind_sim_math(module: Any) -> None:
    module.math = SIM_MATH


def load(source: str, name: str) -> Kernel:
    """Loads kernel ``name`` from ``source`` (without the prelude) through the disk cache.

    Returns the same :class:`Kernel` for the same source within a process.
    """
    cuda = cuda_module()  # a clear error when numba-cuda is missing
    sim = simulator_enabled()
    src = load_source("cudasim" if sim else "cuda", source, name, header=PRELUDE,
                      options="" if sim else "cache=True",
                      prepare=_bind_sim_math if sim else None, counts=stats)
    found = _kernels.get(src.path)
    if found is None:
        dispatcher = cuda.jit(src.function) if sim else cuda.jit(cache=src.on_disk)(src.function)
        found = _kernels.setdefault(src.path, Kernel(name, src.path, src.function, dispatcher,
                                                     sim))
    return found


def compile_ptx(path: str, name: str, argtypes: Sequence[tuple], cc: tuple[int, int] = (9, 0)
                ) -> str:
    """Compiles a recorded kernel to PTX (needs NVVM, not a GPU); used by the tests."""
    from numba import cuda, types

    module = import_file(f"kiln_ptx_{abs(hash(path))}", path)
    sig = []
    for t in argtypes:
        if t[0] == "array":
            dt = types.boolean if t[1] == "bool" else getattr(types, t[1])
            sig.append(types.Array(dt, t[2], "C"))
        else:
            sig.append(getattr(types, "boolean" if t[0] == "bool" else t[0]))
    # device functions are compiled "for the current device": name one without a driver
    import numba.cuda.dispatcher as dispatcher

    class _Device:
        compute_capability = cc

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: _Device
    try:
        ptx, _ = cuda.compile_ptx(getattr(module, name), tuple(sig), cc=cc)
    finally:
        dispatcher.get_current_device = saved
    return ptx
