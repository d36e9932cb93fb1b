"""Native loops: the CPU backend's generated loops compiled from LLVM IR by llvmlite, without
numba's front end (docs/architecture.md, "Native loops").

numba spends most of a generated loop's compile time before LLVM sees it (typing, lowering, its
pipeline and wrappers: 0.25-0.8 s a kernel on this machine, ~9 s for the LSTM model's 16 loops);
the same loop emitted as IR (:mod:`.llvm_loop`) and optimized at LLVM's O3 takes ~0.03-0.2 s.
The hand-written kernels written as IR (convolutions, pooling, softmax and cross-entropy rows,
one_hot, the uniform generator, products) have no other implementation (docs/architecture.md,
"One implementation per kernel"). numba stays the compiler of any loop :mod:`.llvm_loop` does
not generate (a :class:`~kiln.core.backends.cpu.codegen.spec.CodegenError` there falls back to
the numba kernel of the same program), of the few hand-written kernels without IR, and of
``KILN_JIT=0``'s plain Python. ``KILN_NATIVE=0`` turns the path off: the generated loops are
numba's, and the ops whose one kernel is native run their NumPy references.

* Compilation: the module is optimized for this host (its CPU name and features, part of the
  cache key with the IR, kiln's codegen version and llvmlite's / LLVM's versions) and emitted
  as an object file, under the compile batch's compiler lock (so that its ``fork`` never
  inherits LLVM in the middle of a compilation).
* Cache: the object file is ``KILN_CACHE_DIR/cpu/n_<key>.o``, keyed by the kernel's label and
  dtypes, the host and a digest of this package's sources (:func:`generators`: the code that
  generates every kernel's IR), so a warm start loads the file without generating the IR
  (~0.02 s for the MNIST convnet's 30 kernels); sealed like numba's entries
  (``numba_cache.seal``: a file not sealed by its own name is damaged: compiled again and
  rewritten, warned once); written atomically; a folder that cannot be written leaves the
  kernel in memory.
* Loading: one MCJIT engine per process takes the object files; the symbols they call are
  resolved in this process (libm's functions, ``memset``/``memcpy``, and the C API functions
  of the wrapper). The wrapper ``@<name>_py`` becomes a builtin function (``METH_FASTCALL``,
  :func:`_callable`): calling it costs ~0.1 us against ~0.3-1 us for a numba entry point.
* Compile batches: :class:`NativeKernel` has the interface of ``jit.Kernel`` that
  :mod:`.compile_batch` uses (deferred calls, workers compiling into the cache), so native
  loops compile in the batch's processes beside numba's kernels.

The path is used only when llvmlite initializes, and an ndarray's data pointer is at
``llvm_loop.DATA_OFFSET`` on this interpreter (checked once); else every loop is numba's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln import config
from kiln.core.backends import jit as jit_loader
from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import jit
from kiln.core.backends.cpu.codegen.llvm_expr import LIBM
from kiln.core.backends.cpu.codegen.llvm_loop import DATA_OFFSET, generate_ir
from kiln.core.backends.cpu.codegen.spec import (
    CodegenError,
    LoopSpec,
    inner_reductions,
    program_dtypes,
)

NATIVE_VERSION = "1"
METH_FASTCALL = 0x0080
# A native kernel's compile cost in the compile batch's units (jit.Kernel.size: characters of
# numba source, ~0.3 ms each, plus CpuOptions.compile_kernel_base_cost per kernel): 0.02 per
# character of IR (CpuOptions.compile_cost_per_ir_char). Only the order of the batch's queue
# depends on it (largest first).

_lock = threading.RLock()
_state: dict[str, Any] = {}
_kernels: dict[tuple, NativeKernel] = {}
_loaded: dict[str, Callable] = {}
_unsupported: set[tuple] = set()  # (label, dtypes) not generated natively: numba's
_keep: list[Any] = []  # method definitions and names the builtin functions point into


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("meth", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


def enabled() -> bool:
    """Whether generated loops are compiled natively (JIT on, ``KILN_NATIVE`` not 0, and
    llvmlite usable here)."""
    return config.jit_enabled() and config.env_flag("KILN_NATIVE", True) and available()


def available() -> bool:
    """Whether the native path works in this process (initializes it once)."""
    ok = _state.get("ok")
    if ok is None:
        with _lock:
            ok = _state.get("ok")
            if ok is None:
                try:
                    _init()
                    ok = True
                except (ImportError, OSError, RuntimeError) as exc:
                    # no usable llvmlite, libm or layout here: numba compiles every kernel
                    _state["why"] = f"{type(exc).__name__}: {exc}"
                    ok = False
                _state["ok"] = ok
    return ok


def data_offset_checked() -> bool:
    """Whether this process found an ndarray's data pointer at ``llvm_loop.DATA_OFFSET`` (the
    native path initialized; nothing is initialized here)."""
    return bool(_state.get("ok"))


def _address(lib: Any, name: str) -> int | None:
    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        return None


def _symbol(llvm: Any, name: str, address: int | None) -> None:
    """Registers ``name`` for the object files (RuntimeError when this process lacks it)."""
    if not address:
        raise RuntimeError(f"the symbol {name} is not in this process")
    llvm.add_symbol(name, address)


def _init() -> None:
    import llvmlite
    import llvmlite.binding as llvm

    for api in ("create_pass_builder", "create_pipeline_tuning_options", "add_symbol"):
        if not hasattr(llvm, api):  # llvmlite < 0.44 (numba < 0.61): numba's loops
            raise RuntimeError(f"llvmlite {llvmlite.__version__} has no {api}")
    probe = np.arange(3.0)
    if ctypes.c_void_p.from_address(id(probe) + DATA_OFFSET).value != probe.ctypes.data:
        raise RuntimeError("ndarray's data pointer is not where llvm_loop reads it")
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    py = ctypes.pythonapi
    for name in ("PyEval_SaveThread", "PyEval_RestoreThread", "Py_IncRef", "PyErr_SetString"):
        _symbol(llvm, name, _address(py, name))
    # objects the wrapper uses, at their addresses (numba registers "PyExc_TypeError" as the
    # object, where C's symbol is a pointer to it: kiln's names are its own)
    llvm.add_symbol("kiln_py_none", id(None))
    llvm.add_symbol("kiln_py_type_error", id(TypeError))
    llvm.add_symbol("kiln_py_index_error", id(IndexError))
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libc = ctypes.CDLL(None)
    for base in LIBM + ("fmod",):
        for name in (base, base + "f"):
            addr = _address(libm, name) or _address(libc, name)
            if addr:
                llvm.add_symbol(name, addr)
    for name in ("memset", "memcpy", "memmove", "malloc", "free"):  # malloc: wide sums
        _symbol(llvm, name, _address(libc, name))
    for name in ("syscall", "sched_yield"):  # the spin pool's futex and yield (spin_pool.py)
        addr = _address(libc, name)
        if addr:
            llvm.add_symbol(name, addr)
    from kiln.core.backends.cpu import target as cpu_target

    chosen = cpu_target.process()  # the host, or KILN_CPU's cpu (target.py)
    cpu, features = chosen.name, chosen.llvm_features
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(cpu=cpu, features=features, opt=3,
                                      codemodel="jitdefault", jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    _state.update(llvm=llvm, tm=tm, engine=engine,
                  host=f"native={NATIVE_VERSION};python={sys.version.split()[0]};"
                       f"llvmlite={llvmlite.__version__};"
                       f"llvm={'.'.join(map(str, llvm.llvm_version_info))};"
                       f"{chosen.cache_tag()}")


def compile_object(ir: str) -> bytes:
    """The object file of the LLVM module ``ir``, optimized at O3 for this host."""
    from kiln.core.backends.cpu.codegen.compile_batch import compiler_lock

    llvm, tm = _state["llvm"], _state["tm"]
    with compiler_lock():
        mod = llvm.parse_assembly(ir)
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        return tm.emit_object(mod)


def _callable(name: str, obj: bytes) -> Callable:
    """Loads the object file ``obj`` into this process's engine and returns ``@name_py`` as
    a builtin function (the same object for the same name)."""
    found = _loaded.get(name)
    if found is not None:
        return found
    with _lock:
        found = _loaded.get(name)
        if found is not None:
            return found
        llvm, engine = _state["llvm"], _state["engine"]
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        addr = engine.get_function_address(f"{name}_py")
        if not addr:
            raise CodegenError(f"native loop {name}: entry point not found after loading")
        raw = name.encode()
        md = _MethodDef(raw, addr, METH_FASTCALL, None)
        new = ctypes.pythonapi.PyCFunction_NewEx
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]
        found = new(ctypes.addressof(md), None, None)
        _keep.append((raw, md))
        _loaded[name] = found
    return found


class NativeKernel:
    """A kernel compiled natively from LLVM IR: the interface of ``jit.Kernel`` that plans and
    :mod:`.compile_batch` use (one signature, ``()``: the IR fixes every argument's type).

    Attributes:
        name: the symbol (``kiln_<hash>``). key: the cache key. path: the object file.
        ir: the module's text. dtypes: the arrays' dtypes, in argument order (all flat and
        C-contiguous). label: what it computes (for messages). size: the compile batch's
        cost estimate.
    """

    jitted = True
    scalars = False

    def __init__(self, ir: str | Callable[[], str], key: str, symbol: str,
                 dtypes: Sequence[str], label: str):
        self._ir = ir  # the text, or a function generating it (called once, when needed)
        self.key = key
        self.name = symbol
        self.label = label
        self.path = os.path.join(jit.kernel_dir(), f"n_{key}.o")
        self.dtypes = list(dtypes)
        self._entries: dict[tuple, Callable] = {}

    @property
    def ir(self) -> str:
        """The module's text (generated on first use where the kernel was made without it)."""
        if callable(self._ir):
            self._ir = self._ir()
        return self._ir

    @property
    def size(self) -> int:
        return int(len(self.ir) * options.current().compile_cost_per_ir_char)

    def __repr__(self) -> str:
        return f"<kiln native kernel {self.key} [{self.label}]>"

    def check(self, args: Sequence[Any]) -> None:
        """Raises TypeError unless ``args`` are flat C-contiguous arrays of this kernel's
        dtypes (the entry point reads their data pointers unchecked)."""
        if len(args) != len(self.dtypes):
            raise TypeError(f"{self!r}: {len(self.dtypes)} arrays expected, got {len(args)}")
        for k, (a, dt) in enumerate(zip(args, self.dtypes)):
            if not (isinstance(a, np.ndarray) and a.ndim == 1 and a.flags.c_contiguous
                    and a.dtype == np.dtype(dt)):
                got = (f"{a.dtype}{a.shape} (c_contiguous={a.flags.c_contiguous})"
                       if isinstance(a, np.ndarray) else type(a).__name__)
                raise TypeError(f"{self!r}: argument {k} must be a flat C-contiguous {dt} "
                                f"array, got {got}")

    def specialize(self, args: Sequence[Any]) -> Callable:
        """The entry point for ``args`` (checked), deferred inside a compile batch."""
        self.check(args)
        entry = self._entries.get(())
        if entry is not None:
            return entry
        from kiln.core.backends.cpu.codegen import compile_batch

        deferred = compile_batch.defer(self, ())
        return deferred if deferred is not None else self.compile(())

    def has_disk_cache(self) -> bool:
        """Whether what this kernel compiles is written to disk (its folder is writable)."""
        return not jit_loader.unusable(os.path.dirname(self.path))

    def cached(self, sig: tuple = ()) -> bool:
        return os.path.isfile(self.path)

    def _read(self) -> bytes | None:
        """The cached object file, or None (missing; damaged: warned, and removed)."""
        try:
            with open(self.path, "rb") as f:
                blob = f.read()
        except OSError:
            return None
        try:
            return jit_loader.unseal(self.path, blob)
        except jit_loader.DamagedEntry as exc:
            jit_loader.warn_cache("damaged", f"a damaged kernel cache entry was discarded "
                                  f"and compiled again ({exc.path}: {exc.reason})")
            return None

    def _write(self, obj: bytes) -> None:
        folder = os.path.dirname(self.path)
        if jit_loader.unusable(folder):
            return
        if sources_changed():  # ~0.1 ms, against the compile's 20-200
            jit_loader.warn_cache("changed", "kiln's source files changed since this process "
                                  "imported them (upgraded or edited under it?): its new "
                                  "native kernels stay in memory, not in the cache; restart "
                                  "Python to cache them")
            return
        try:
            jit_loader.write_bytes(self.path, jit_loader.seal(os.path.basename(self.path),
                                                              obj))
        except OSError as exc:
            jit_loader.unusable(folder, exc)

    def compile_to_cache(self, sig: tuple = ()) -> None:
        """A compile worker's part: compiles and writes the cache file."""
        self._write(compile_object(self.ir))

    def compile(self, sig: tuple = (), *, by_worker: bool = False) -> Callable:
        """The entry point: loaded from the disk cache, else compiled (and cached); counted in
        ``jit.stats`` as numba kernels are (``by_worker``: a compile worker wrote it)."""
        entry = self._entries.get(())
        if entry is not None:
            return entry
        with _lock:
            entry = self._entries.get(())
            if entry is not None:
                return entry
            t0 = time.perf_counter()
            obj = self._read()
            if obj is not None:
                if by_worker:
                    jit.stats["compiled"] += 1
                    jit.stats["compiled_by_workers"] += 1
                else:
                    jit.stats["cache_hits"] += 1
            else:
                obj = compile_object(self.ir)
                self._write(obj)
                jit.stats["compiled"] += 1
            entry = _callable(self.name, obj)
            jit.stats["compile_seconds"] += time.perf_counter() - t0
            self._entries[()] = entry
        return entry


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _files() -> list[str]:
    """The CPU backend's source files (``kiln/core/backends/cpu`` and its subpackages)."""
    return sorted(os.path.join(d, n) for d, _, names in os.walk(_ROOT) for n in names
                  if n.endswith(".py"))


def _stamps() -> tuple:
    """The package's source files' names, sizes and modification times (~0.1 ms)."""
    try:
        return tuple((p, st.st_size, st.st_mtime_ns) for p in _files() for st in [os.stat(p)])
    except OSError:
        return ()


def _digest() -> str:
    """A digest of the sources of this package (``kiln/core/backends/cpu``: every module that
    generates a native kernel's IR or the label it is cached under) as they are on disk now;
    "" where they cannot be read."""
    digest = hashlib.sha256()
    try:
        for path in _files():
            with open(path, "rb") as f:
                digest.update(os.path.relpath(path, _ROOT).encode() + b"\0" + f.read()
                              + b"\0")
    except OSError:
        return ""
    return digest.hexdigest()[:24]


def generators() -> str:
    """The digest of this package's sources that keys the native kernels' cache files, read
    with this module's import (with the package's: the code this process runs), "" where
    they cannot be read (each kernel is then keyed by its IR text)."""
    found = _state.get("generators")
    if found is None:
        _state["stamps"] = _stamps()
        found = _state["generators"] = _digest()
    return found


def sources_changed() -> bool:
    """Whether this package's files differ from the ones this process imported (kiln upgraded
    or edited under it): its new kernels would then be generated by the old code and cached
    under the new code's key, which the new code's processes would load. Their sizes and
    times first (~0.1 ms); where those moved, their digest (~1.2 ms: a file touched but not
    changed is the same)."""
    if not generators():
        return False
    if _stamps() == _state.get("stamps"):
        return False
    return _digest() != generators()


generators()  # at import


def kernel(label: str, dtypes: Sequence[str], make_ir: Callable[[str], str]) -> NativeKernel:
    """The native kernel ``make_ir(symbol)`` (the same object within a process and cache
    folder): ``label`` names what it computes (with the dtypes, it picks the symbol: equal
    labels must mean equal IR, for the same sources of this package), ``dtypes`` its arrays'
    dtypes. The cache file's key covers the label, dtypes, host and :func:`generators`, so
    where that file exists the IR is not generated (only to compile it again, damaged).

    Raises:
        CodegenError: ``make_ir`` does not generate it (the caller then takes another
            kernel, numba's or the op's NumPy reference).
    """
    memo = (label, tuple(dtypes), jit.kernel_dir())
    known = _kernels.get(memo)
    if known is not None:
        return known
    if memo[:2] in _unsupported:
        raise CodegenError(f"native: {label} is not generated")
    host = _state["host"]
    signature = f"{label} {list(dtypes)}"
    symbol = f"kiln_{jit_loader.kernel_key('cpu', 'native', signature, tools=host)}"
    sources = generators()
    if sources:
        key = jit_loader.kernel_key("cpu", symbol, sources, tools=host, signature=signature)
        found = NativeKernel(lambda: make_ir(symbol), key, symbol, dtypes, label)
        if found.cached():
            with _lock:
                return _kernels.setdefault(memo, found)
    try:
        ir = make_ir(symbol)
    except CodegenError:
        _unsupported.add(memo[:2])
        raise
    if sources:
        found._ir = ir
    else:  # the file's key covers the IR text (a generator change)
        key = jit_loader.kernel_key("cpu", symbol, ir, tools=host, signature=label)
        found = NativeKernel(ir, key, symbol, dtypes, label)
    with _lock:
        return _kernels.setdefault(memo, found)


def loop_kernel(spec: LoopSpec) -> NativeKernel | None:
    """The native kernel of the generated loop ``spec``, or None when this path is not
    available or :mod:`.llvm_loop` does not generate it (the caller then uses numba's)."""
    if not available():
        return None
    inner = [program_dtypes(spec.program, spec.in_dtypes)[j]
             for j, _, _ in inner_reductions(spec.program)]
    dtypes = ([spec.out_dtype] + list(spec.extra_dtypes) + inner + list(spec.in_dtypes)
              + ["int64"])
    try:
        return kernel(f"{spec.signature()} {spec.program!r}", dtypes,
                      lambda symbol: generate_ir(spec, symbol))
    except CodegenError:
        return None


def try_kernel(label: str, arrays: Sequence[np.ndarray], params: Sequence[int],
               make_ir: Callable[[str], str]) -> tuple[Callable, tuple] | None:
    """``(entry point, args)`` of the native kernel ``make_ir`` over the flat views of
    ``arrays`` (C-contiguous) and an int64 parameter array ``params``, or None when the path
    is off, an array is not C-contiguous, or ``make_ir`` does not generate these dtypes
    (raises CodegenError): the caller then takes another kernel (numba's, or the op's NumPy
    reference)."""
    if not enabled() or not all(a.flags.c_contiguous for a in arrays):
        return None
    dtypes = [a.dtype.name for a in arrays] + ["int64"]
    try:
        k = kernel(label, dtypes, make_ir)
    except CodegenError:
        return None
    args = (*(a.reshape(-1) for a in arrays), np.asarray(params, np.int64))
    return k.specialize(args), args
