"""kiln's GEMMs: on a private instance of NumPy's OpenBLAS that kiln alone uses, so that kiln
sets its threads, and that runs this CPU's best kernels where NumPy's picked slower ones on
their own (docs/architecture.md, "BLAS").

* Batches of products (the Winograd convolutions' 16-64 GEMMs of a few hundred to a few
  thousand rows, those ``native_gemm``'s kernel does not take): OpenBLAS threads each small
  product on its own and waits for its threads every time. kiln splits the batch over its
  own threads, each running its share on one BLAS thread (the instance's thread count set to
  1 for the call: nobody else uses it, and kiln's GEMMs run one at a time,
  ``products.matmul``; measured in docs/performance.md, "BLAS").
* Kernels: OpenBLAS built with ``DYNAMIC_ARCH`` (NumPy's wheels) picks its kernels from the
  CPU model when it loads, or takes ``OPENBLAS_CORETYPE``. Where NumPy's instance runs AVX2
  kernels (``Haswell``, ``Zen``) on a CPU with the AVX-512 subsets of ``SkylakeX`` (F, CD,
  BW, DQ, VL) and the user did not ask for them (no ``OPENBLAS_CORETYPE``: an OpenBLAS that
  does not know the CPU), the copy loads ``SkylakeX``'s: 2048^3 sgemm 210-225 against 376-430
  GFLOPS on the Zen 5 host (whose OpenBLAS 0.3.31 knows it; measured with the test machine's
  ``OPENBLAS_CORETYPE=Haswell`` and ``KILN_BLAS=SkylakeX``). Where the user set
  ``OPENBLAS_CORETYPE``, the copy runs what NumPy's runs.
* Thread placement: kiln knows the copy's worker threads (those that appear while it loads)
  and moves them off the CPU of the thread calling a GEMM (:func:`place`), which it cannot do
  for NumPy's instance. A Linux guest whose other virtual CPUs have idled wakes a sleeping
  OpenBLAS worker on its waker's CPU, where it waits for the next balancing tick: on the
  2-core Zen 4 test host, a GEMM right after the process idled 0.2 s took ~10 ms through
  NumPy's instance in 8-12 calls of 12 ((64 x 128) @ (128 x 128): 11.4 ms against 0.3 ms
  placed; ``bench_overhead.py --blas``), and ``predict`` on 256 samples after a pause 10.9
  -> 2.2 ms. So single products go through the copy wherever its threads are known, even
  with NumPy's own kernels.

The copy is the same library file's bytes in an anonymous memory file (``memfd``: nothing on
disk to damage), opened with ``OPENBLAS_CORETYPE`` set to its core for the moment of loading
and ``RTLD_LOCAL | RTLD_DEEPBIND`` (its symbols bind inside itself; NumPy's instance, and the
user's own NumPy GEMMs, are untouched); it is used only if it reports that core. It loads at
the first GEMM (where NumPy's instance runs more than one thread or its kernels are worse;
else at the first batch of products): ~18 ms, and ~25 MB of memory. :func:`matmul` runs a
GEMM through it (``cblas_?gemm``, one ctypes call of ~1.5 us per product) where the operands
are BLAS-shaped and the work large enough; single products where its kernels are better or
its threads known (:func:`singles`); anything else is ``np.matmul``'s. A plan step keeps the
call it derived (``products.MatmulCall``: :func:`prepare`, :func:`run`; ``products.GemmCall``:
:func:`prepare_gemm`, :func:`run_gemm`).

``KILN_BLAS`` (read once): ``auto`` (default: as above), ``numpy`` (never the copy), or a core
name of :data:`CORES` (the copy with those kernels whatever NumPy's runs, where the CPU has
their instructions).
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

import numpy as np

from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.runtime import cpus
from kiln.core.backends.cpu.runtime import parts as workers

# Core names whose kernels are AVX2 at most; the cores KILN_BLAS may name, with the CPU
# features their kernels use (LLVM's names).
AVX2_CORES = {"haswell", "zen", "sandybridge", "nehalem", "core2", "prescott", "atom",
              "barcelona", "bulldozer", "piledriver", "steamroller", "excavator"}
_AVX512 = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
CORES = {"SkylakeX": _AVX512, "Cooperlake": (*_AVX512, "avx512bf16"),
         "Haswell": ("avx2", "fma"), "Zen": ("avx2", "fma"), "SandyBridge": ("avx",)}
# Below this many multiply-adds in all (or with an edge under the minimum), np.matmul is at least
# as fast: the ~5 us of checks and ctypes call here against its ~2 us (2-core Zen 5, us, NumPy /
# copy: 32x32x64 2.3 / 7.4, 64x128x128 23.9 / 25.1, 128^3 22.3 / 20.0, 256^3 156 / 91; 36
# products of 64^3 186 / 143): options.CpuOptions.blas_min_work / blas_min_edge.
# Where kiln places the copy's threads (:func:`place`), single products above OpenBLAS's own
# threading threshold (it runs products of at most 4 x 65536 multiply-adds on one thread,
# GEMM_MULTITHREAD_THRESHOLD) go through the copy: NumPy's instance would wake threads kiln
# cannot place (options.CpuOptions.blas_placed_min_work).

_lock = threading.Lock()
_state: dict[str, Any] = {}
_open_files: list[int] = []  # the memory files of the loaded copies
# (symbol prefix, suffix, integer type) of the OpenBLAS builds we know: NumPy's 64-bit-index
# scipy-openblas, its 32-bit one, a distribution's ILP64 and LP64 libopenblas.
_FLAVOURS = (("scipy_", "64_", ctypes.c_int64), ("scipy_", "", ctypes.c_int32),
             ("", "64_", ctypes.c_int64), ("", "", ctypes.c_int32))


def mode() -> str:
    """``KILN_BLAS``: ``auto``, ``numpy`` or an OpenBLAS core name of :data:`CORES`."""
    env = os.environ.get("KILN_BLAS", "").strip()
    if not env or env.lower() == "auto":
        return "auto"
    if env.lower() == "numpy":
        return "numpy"
    for core in CORES:
        if env.lower() == core.lower():
            return core
    raise ValueError(f"KILN_BLAS must be 'auto', 'numpy' or an OpenBLAS core name "
                     f"({', '.join(CORES)}), got {env!r}")


def wanted_core(numpy_core: str | None, features: dict[str, bool], setting: str,
                user_core: str | None = None) -> str | None:
    """The core the private copy loads with, or None for no copy: ``setting`` is
    :func:`mode`, ``numpy_core`` the kernels NumPy's OpenBLAS reports (None: not OpenBLAS),
    ``features`` the host's CPU features, ``user_core`` the user's ``OPENBLAS_CORETYPE``
    (what NumPy's runs then, and so the copy).

    Raises:
        ValueError: ``setting`` names a core whose instructions this CPU lacks (OpenBLAS
            would load it and crash at the first GEMM).
    """
    if numpy_core is None or setting == "numpy":
        return None
    if setting != "auto":
        missing = [f for f in CORES[setting] if not features.get(f)]
        if missing:
            raise ValueError(f"KILN_BLAS={setting}: this CPU lacks {', '.join(missing)}, "
                             f"which {setting}'s kernels use")
        return setting
    if (not user_core and numpy_core.lower() in AVX2_CORES
            and all(features.get(f) for f in CORES["SkylakeX"])):
        return "SkylakeX"
    return numpy_core


def _numpy_openblas() -> tuple[str, Any, tuple] | None:
    """(path, handle, flavour) of the OpenBLAS NumPy loaded, or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f
                            if "openblas" in line.lower() and ".so" in line})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for flavour in _FLAVOURS:
            prefix, suffix, _ = flavour
            if hasattr(lib, f"{prefix}cblas_sgemm{suffix}") and hasattr(
                    lib, f"{prefix}openblas_get_corename{suffix}"):
                return path, lib, flavour
    return None


def _corename(lib: Any, flavour: tuple) -> str:
    fn = getattr(lib, f"{flavour[0]}openblas_get_corename{flavour[1]}")
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    return fn().decode()


class Library:
    """A loaded OpenBLAS instance's GEMM entry points (``cblas_sgemm`` / ``cblas_dgemm``) and
    its thread count (``threads``: what it runs with; ``set_threads(k)`` changes it)."""

    def __init__(self, lib: Any, flavour: tuple, core: str, threads: int = 1):
        prefix, suffix, index = flavour
        self.core = core
        self.handle = lib
        self.threads = threads
        self.running = threads  # what it runs with now: fewer on a busy machine (place)
        self.better = True  # its kernels beat NumPy's: single products go through it too
        # its worker threads (thread ids, the CPUs each started with) that :func:`place`
        # moves off the caller's CPU, in the process that loaded it; empty where unknown
        self.workers: list[tuple[int, frozenset[int]]] = []
        # whether its workers were found when it loaded: then single products go through it,
        # for the life of the process (GEMMs never switch instances: two instances' threads
        # spinning against each other cost a training step a third more)
        self.placeable = False
        self.stale = False  # OpenBLAS stopped its threads (a fork): find them again
        self.pid = os.getpid()
        self.placed_for = -1  # the caller CPU the workers were last moved off
        self.shutdown = getattr(lib, "blas_thread_shutdown_", None)
        if self.shutdown is not None:
            self.shutdown.restype, self.shutdown.argtypes = ctypes.c_int, []
        self.gemm = {}
        for dtype, name, scalar in ((np.float32, "sgemm", ctypes.c_float),
                                    (np.float64, "dgemm", ctypes.c_double)):
            fn = getattr(lib, f"{prefix}cblas_{name}{suffix}")
            fn.restype = None
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, index, index, index,
                           scalar, ctypes.c_void_p, index, ctypes.c_void_p, index, scalar,
                           ctypes.c_void_p, index]
            self.gemm[np.dtype(dtype)] = fn
        self.axpy = {}
        for dtype, name, scalar in ((np.float32, "saxpy", ctypes.c_float),
                                    (np.float64, "daxpy", ctypes.c_double)):
            fn = getattr(lib, f"{prefix}cblas_{name}{suffix}", None)
            if fn is not None:
                fn.restype = None
                fn.argtypes = [index, scalar, ctypes.c_void_p, index, ctypes.c_void_p, index]
                self.axpy[np.dtype(dtype)] = fn
        self.set_threads = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}")
        self.set_threads.restype, self.set_threads.argtypes = None, [ctypes.c_int]


def load_copy(core: str) -> Library | None:
    """A private instance of NumPy's OpenBLAS with ``core``'s kernels, or None where NumPy's
    BLAS is not OpenBLAS, memory files are missing (not Linux), or the copy does not report
    ``core`` (a build without those kernels). ``core`` must be one the CPU can run
    (:func:`wanted_core` checks)."""
    found = _numpy_openblas()
    if found is None or not hasattr(os, "memfd_create"):
        return None
    path, _, flavour = found
    try:
        fd = os.memfd_create("kiln-openblas")
    except OSError:
        return None
    try:
        _copy_file(path, fd)
        before = _tasks()
        saved = os.environ.get("OPENBLAS_CORETYPE")
        os.environ["OPENBLAS_CORETYPE"] = core
        try:
            lib = ctypes.CDLL(f"/proc/self/fd/{fd}",
                              mode=os.RTLD_LOCAL | getattr(os, "RTLD_DEEPBIND", 0))
        finally:
            if saved is None:
                del os.environ["OPENBLAS_CORETYPE"]
            else:
                os.environ["OPENBLAS_CORETYPE"] = saved
    except OSError:
        os.close(fd)
        return None
    # the file stays open with the library: dlopen knows a library by its path, and a later
    # copy at a reused /proc/self/fd/N would be handed this one
    _open_files.append(fd)
    got = _corename(lib, flavour)
    if got.lower() != core.lower():
        return None
    copy = Library(lib, flavour, got, _threads(found[1], flavour))
    copy.set_threads(copy.threads)
    copy.workers = _find_workers(copy, before)
    copy.placeable = bool(copy.workers)
    return copy


def _copy_file(path: str, fd: int) -> None:
    """Copies the file at ``path`` into the empty file ``fd``: by ``sendfile`` (in the kernel:
    13 ms for NumPy's 25 MB OpenBLAS, against 27 ms read and written through Python), else
    through Python; raises OSError where the copy is short."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        done = 0
        try:
            while done < size:
                sent = os.sendfile(fd, f.fileno(), done, size - done)
                if sent == 0:
                    break
                done += sent
        except OSError:
            done = -1
        if done != size:  # no sendfile for these files: through Python
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            f.seek(0)
            view = memoryview(f.read())
            while view:
                view = view[os.write(fd, view):]
    if os.fstat(fd).st_size != size:
        raise OSError("short copy")


def _tasks() -> set[int]:
    """The ids of this process's threads (empty where ``/proc`` cannot say)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except (OSError, ValueError):
        return set()


def _find_workers(lib: Library, before: set[int]) -> list[tuple[int, frozenset[int]]]:
    """The worker threads ``lib`` started (with the CPUs each may run on): the threads that
    appeared since ``before`` (taken just before it loaded), once a product large enough to
    run on all of its threads has made sure they exist. Empty (nothing is moved) where
    their number is not ``lib.threads - 1``: a thread the program started meanwhile is
    never taken for one of them."""
    if lib.threads < 2 or not before:
        return []
    a = np.ones((256, 256), np.float32)
    out = np.empty_like(a)
    call = _call(lib, a, a, out, 0)
    if call is not None:
        lib.set_threads(lib.threads)  # all of them, whatever a busy machine set (place)
        call[0](*_single_args(call))
        lib.set_threads(lib.running)
    new = sorted(_tasks() - before)
    if len(new) != lib.threads - 1:
        return []
    workers = []
    for tid in new:
        try:
            workers.append((tid, frozenset(os.sched_getaffinity(tid))))
        except OSError:  # gone already: not one of the library's
            return []
    return workers


def place(lib: Library) -> None:
    """Moves ``lib``'s worker threads off the CPU the caller runs on (each keeps the CPUs it
    started with but that one), when the caller is on another CPU than at the last call.

    A Linux guest whose other virtual CPUs have idled a while wakes a sleeping OpenBLAS
    worker on its waker's CPU, as it does kiln's pool workers (``threads.KernelPool``); the
    worker then waits there for the scheduler's next balancing tick while the caller spins
    at OpenBLAS's barrier: the first GEMM after ~0.2 s idle took ~10 ms instead of
    0.2-4 ms, about one time in two (docs/architecture.md, "BLAS"). Only the copy's own
    threads are touched: they exist for kiln's GEMMs alone. Nothing moves in a forked child
    (its thread ids are not these). On a busy machine the copy runs on fewer threads, the
    caller's alone where :func:`cpus.plan` says one (NumPy's instance is the user's)."""
    workers.park()
    want = min(lib.threads, cpus.plan().threads)
    if want != lib.running and lib is _state.get("lib"):
        lib.running = want
        lib.set_threads(want)
    if not lib.placeable or lib.pid != os.getpid():
        return
    if lib.stale:
        _find_again(lib)
    cpu = cpus.current_cpu()
    if cpu < 0 or cpu == lib.placed_for or not lib.workers:
        return
    lib.placed_for = cpu
    if not cpus.move_off(lib.workers, cpu):  # stopped and started anew: found again next call
        lib.stale = True


def _find_again(lib: Library) -> None:
    """``lib``'s workers found anew: OpenBLAS stops its threads before a fork (in the parent
    too) and starts other threads at its next call. Its threads are stopped here, then
    started again by one product while the process's threads are watched."""
    lib.stale = False
    lib.placed_for = -1
    lib.workers = []
    if lib.shutdown is not None:
        lib.shutdown()
        lib.workers = _find_workers(lib, _tasks())


def _after_fork_in_parent() -> None:
    lib = _state.get("lib")
    if lib is not None:
        lib.stale = True


if hasattr(os, "register_at_fork"):  # kiln forks its compile workers (compile_batch.py)
    os.register_at_fork(after_in_parent=_after_fork_in_parent)


def _threads(numpy_lib: Any, flavour: tuple) -> int:
    """The threads of NumPy's instance (a user's limit included), which the copy takes."""
    get = getattr(numpy_lib, f"{flavour[0]}openblas_get_num_threads{flavour[1]}", None)
    if get is None:
        return 1
    get.restype, get.argtypes = ctypes.c_int, []
    return max(1, int(get()))


def decide() -> tuple[str | None, bool]:
    """(the copy's core or None, whether its kernels differ from NumPy's); once per process,
    without loading anything."""
    found = _state.get("decision")
    if found is None:
        with _lock:
            found = _state.get("decision")
            if found is None:
                setting = mode()
                # the copy only on Linux where NumPy's BLAS is OpenBLAS (target.py)
                lib = (_numpy_openblas() if setting != "numpy" and _platform_allows_copy()
                       else None)
                numpy_core = _corename(lib[1], lib[2]) if lib else None
                core = wanted_core(numpy_core, _host_features(), setting,
                                   os.environ.get("OPENBLAS_CORETYPE", "").strip() or None)
                # (wanted_core gives a core only where NumPy's is known)
                found = (core, core is not None and numpy_core is not None
                         and core.lower() != numpy_core.lower())
                _state["numpy_core"] = numpy_core
                _state["decision"] = found
    return found


def library() -> Library | None:
    """The private OpenBLAS :func:`matmul` uses (loaded on first call), or None (NumPy's BLAS
    is not OpenBLAS, ``KILN_BLAS=numpy``, or the copy did not load)."""
    if "lib" in _state:
        return _state["lib"]
    core, better = decide()
    with _lock:
        if "lib" not in _state:
            lib = load_copy(core) if core else None
            if lib is not None:
                lib.better = better
            _state["lib"] = lib
    return _state["lib"]


def singles() -> Library | None:
    """The private copy where single products, ``gemm`` and ``axpy`` go through it (its
    kernels are better than NumPy's, or kiln knows its worker threads and so can place them:
    :func:`place`), loading it on first call; None where they stay with NumPy's instance
    (the same kernels on one thread: nothing to gain, and no copy is loaded for them)."""
    lib = _state.get("lib", False)
    if lib is False:
        core, better = decide()
        numpy_lib = numpy_library()
        if core is None or not (better or (numpy_lib is not None and numpy_lib.threads > 1)):
            return None
        lib = library()
    return lib if lib is not None and (lib.better or lib.placeable) else None


def _platform_allows_copy() -> bool:
    from kiln.core.backends.cpu import target

    return target.current().private_blas


def _host_features() -> dict[str, bool]:
    from kiln.core.backends.cpu import target

    return dict.fromkeys(target.current().features, True)


def _operand(shape: tuple, strides: tuple, size: int) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a matrix of ``shape`` with byte ``strides`` as
    a row-major BLAS operand, or None when neither axis is unit-stride."""
    rows, cols = shape
    s0, s1 = strides[0] // size, strides[1] // size
    if strides[1] == size and s0 >= cols and strides[0] % size == 0:
        return 111, s0  # CblasNoTrans
    if strides[0] == size and s1 >= rows and strides[1] % size == 0:
        return 112, s1  # CblasTrans: the row-major (cols, rows) matrix read transposed
    return None


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, opts: Any = None) -> bool:
    """``out = a @ b`` through the private OpenBLAS where it is loaded and the operands suit
    it (2-D, or 3-D with equal batch sizes; one dtype, float32 or float64; each matrix with a
    unit-stride axis, ``out`` row-major; no overlap with ``out``; enough work). Returns
    False, doing nothing, otherwise: the caller runs ``np.matmul``."""
    if a.ndim == 2:
        single = prepare(a, b, out, opts)
        if single is None:
            return False  # NumPy's own kernels, threads kiln cannot place: np.matmul
        run(single)
        return True
    lib, opts = library(), opts or options.current()
    if lib is None:
        return False
    call = _call(lib, a, b, out, opts.blas_min_work, opts.blas_min_edge)
    if call is None:
        return False
    fn, nb, (m, n, k), (ta, tb), (pa, lda, sa), (pb, ldb, sb), (pc, ldc, sc) = call

    def products(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            fn(101, ta, tb, m, n, k, 1.0, pa + i * sa, lda, pb + i * sb, ldb, 0.0,
               pc + i * sc, ldc)

    parts = min(nb, lib.threads)
    if parts < 2:
        place(lib)
        products(0, nb)
        return True
    # a batch: each of kiln's threads runs its share of the products on one BLAS thread
    bounds = [nb * j // parts for j in range(parts + 1)]
    lib.set_threads(1)
    try:
        workers.run_parts([(products, (bounds[j], bounds[j + 1])) for j in range(parts)])
    finally:
        lib.set_threads(lib.running)
    return True


def prepare(a: np.ndarray, b: np.ndarray, out: np.ndarray, opts: Any = None) -> tuple | None:
    """``(library, cblas function, arguments)`` of the single product ``out = a @ b`` (2-D)
    where it goes through the copy (:func:`singles`; the operands suit it and the work is
    large enough by ``opts``, default ``options.current()``), for :func:`run`; else None."""
    lib = singles()
    if lib is None:
        return None
    opts = opts or options.current()
    call = _call(lib, a, b, out, opts.blas_placed_min_work if lib.placeable
                 else opts.blas_min_work, opts.blas_min_edge)
    return None if call is None else (lib, call[0], _single_args(call))


def _single_args(call: tuple) -> tuple:
    """The ``cblas_?gemm`` arguments of a single product ``_call`` derived (row-major,
    ``alpha`` 1, ``beta`` 0: :func:`run_gemm` puts its own at positions 6 and 11)."""
    _, _, (m, n, k), (ta, tb), (pa, lda, _), (pb, ldb, _), (pc, ldc, _) = call
    return (101, ta, tb, m, n, k, 1.0, pa, lda, pb, ldb, 0.0, pc, ldc)


def run(single: tuple) -> None:
    """Runs a product :func:`prepare` made (its library's workers placed first)."""
    lib, fn, args = single
    place(lib)
    fn(*args)


def _call(lib: Library, a: np.ndarray, b: np.ndarray, out: np.ndarray, min_work: int,
          min_edge: int | None = None) -> tuple | None:
    """The cblas arguments of ``out = a @ b`` on ``lib`` (see :func:`matmul`), or None where the
    operands do not suit it."""
    min_edge = options.current().blas_min_edge if min_edge is None else min_edge
    dt = out.dtype
    fn = lib.gemm.get(dt)
    if fn is None or a.dtype != dt or b.dtype != dt or not a.ndim == b.ndim == out.ndim:
        return None
    if a.ndim == 2:
        nb, sa, sb, sc = 1, 0, 0, 0
        (m, k), n = a.shape, b.shape[1]
    elif a.ndim == 3 and a.shape[0] == b.shape[0] == out.shape[0]:
        nb, sa, sb, sc = a.shape[0], a.strides[0], b.strides[0], out.strides[0]
        (m, k), n = a.shape[1:], b.shape[2]
    else:
        return None
    if (b.shape[-2] != k or out.shape[-2:] != (m, n) or min(m, n, k) < min_edge
            or nb * m * n * k < min_work):
        return None
    size = dt.itemsize
    opa = _operand(a.shape[-2:], a.strides[-2:], size)
    opb = _operand(b.shape[-2:], b.strides[-2:], size)
    opc = _operand(out.shape[-2:], out.strides[-2:], size)
    if opa is None or opb is None or opc is None or opc[0] != 111:
        return None
    if nb > 1 and abs(sc) < ((m - 1) * opc[1] + n) * size:
        return None  # the outputs overlap one another: parts written at once would race
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    pa = a.__array_interface__["data"][0]
    pb = b.__array_interface__["data"][0]
    pc = out.__array_interface__["data"][0]
    return (fn, nb, (m, n, k), (opa[0], opb[0]), (pa, opa[1], sa), (pb, opb[1], sb),
            (pc, opc[1], sc))


def gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, alpha: float, beta: float) -> bool:
    """``out = alpha * (a @ b) + beta * out`` for matrices, in one BLAS call: through the
    OpenBLAS :func:`matmul` would use for this product (the private copy where single
    products go through it, else NumPy's own instance), whatever its size (the NumPy
    alternative takes several calls). Returns False, doing nothing, where neither is at hand
    or the operands do not suit it (see :func:`matmul`): the caller computes it with NumPy."""
    single = prepare_gemm(a, b, out)
    if single is None:
        return False
    run_gemm(single, alpha, beta)
    return True


def prepare_gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> tuple | None:
    """As :func:`prepare`, for :func:`gemm` (``alpha`` and ``beta`` given to
    :func:`run_gemm`); None where :func:`gemm` would return False."""
    if a.ndim != 2:
        return None
    lib = singles() or numpy_library()
    call = None if lib is None else _call(lib, a, b, out, 0, 1)
    return None if call is None else (lib, call[0], _single_args(call))


def run_gemm(single: tuple, alpha: float, beta: float) -> None:
    """Runs a product :func:`prepare_gemm` made, with these ``alpha`` and ``beta``."""
    lib, fn, args = single
    place(lib)
    fn(*args[:6], alpha, *args[7:11], beta, *args[12:])


def numpy_library() -> Library | None:
    """NumPy's own OpenBLAS as a :class:`Library` (its GEMMs with ``alpha`` and ``beta``,
    which ``np.matmul`` does not take), or None where NumPy's BLAS is not OpenBLAS."""
    if "numpy_lib" not in _state:
        with _lock:
            if "numpy_lib" not in _state:
                found = _numpy_openblas()
                lib = None
                if found is not None:
                    lib = Library(found[1], found[2], _corename(found[1], found[2]),
                                  _threads(found[1], found[2]))
                    lib.better = False
                _state["numpy_lib"] = lib
    return _state["numpy_lib"]


def axpy(x: np.ndarray, out: np.ndarray) -> bool:
    """``out += x`` (contiguous arrays of one shape and dtype, float32 or float64) by
    ``cblas_?axpy`` of the OpenBLAS :func:`gemm` uses; False, doing nothing, where there is
    none or the arrays do not suit it."""
    lib = singles() or numpy_library()
    if lib is None:
        return False
    fn = lib.axpy.get(out.dtype)
    if (fn is None or x.dtype != out.dtype or x.shape != out.shape
            or not (x.flags.c_contiguous and out.flags.c_contiguous)):
        return False
    place(lib)
    fn(out.size, 1.0, x.__array_interface__["data"][0], 1, out.__array_interface__["data"][0], 1)
    return True
