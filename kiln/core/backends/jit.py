"""The ONE JIT loader of kiln: generated kernel source -> a file in the cache -> a function.

Every kernel of every device (numba CPU kernels, numba-cuda kernels, the simulator's) is loaded
through :func:`load_source`, which owns the one cache-key scheme and the files:

* the key is a sha256 over the codegen version (:data:`CODEGEN_VERSION`), the numba (and, for a
  CUDA target, numba-cuda) version, the Python version, the target (``"cpu"``, ``"cuda"`` or
  ``"cudasim"``), the function's name, the jit options, the signature string and the full text
  of the file (:func:`kernel_key`);
* the text is written to ``KILN_CACHE_DIR/<target>/k_<key>.py`` atomically (temporary file +
  rename; the folders are created with mode 0700: whoever can write the cache can run code as
  the user), and never rewritten when identical, so numba's disk cache, which needs a
  function's file, works across processes;
* the module is built from the text kiln generated, never from what the file holds: a file
  whose content differs (truncated, edited, not UTF-8, swapped with another kernel's) is
  rewritten, no bytecode is read or written, and numba's cache of it is keyed by a hash of
  the text and checked (:mod:`.numba_cache`);
* a damaged cache never gives wrong results and never stops a run: a damaged entry is
  discarded, recompiled and rewritten; a cache folder that cannot be used (a file, read-only,
  a full disk) leaves the kernels compiled in memory only. Either warns once per process
  (:class:`KernelCacheWarning`, naming ``KILN_CACHE_DIR`` and the path).

The backends wrap the function in their own ``Kernel`` (``cpu/codegen/jit.py``: numba ``njit``;
``cuda/_jit.py``: ``cuda.jit`` and launches); neither writes files or computes keys.

Example:
    >>> src = load_source("cpu", "def f(o, a):\\n    o[0] = a[0]\\n", "f", header="")
    >>> src.function, src.path   # (<function f>, '.../cpu/k_<key>.py')
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kiln import config

# Bump when a code generator or a backend's Kernel wrapper changes in a way the text does not show.
CODEGEN_VERSION = "7"  # 7: numba's cache files are sealed (numba_cache.py)

TARGETS = ("cpu", "cuda", "cudasim")

_lock = threading.RLock()
_loaded: dict[str, Source] = {}
_versions: dict[str, str] = {}
_unusable: dict[str, str] = {}  # cache folder -> why it cannot be written (this process)
_warned: set[str] = set()


# Sealed cache files (numba's entries, the native loops' object files): see numba_cache.py.
MAGIC = b"kiln-nbc-1\n"
_DIGEST = 32


class DamagedEntry(Exception):
    """A cache file that is not what kiln wrote there."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def seal(name: str, body: bytes) -> bytes:
    """The bytes of the cache file called ``name`` holding ``body``."""
    return MAGIC + hashlib.sha256(name.encode() + b"\0" + body).digest() + body


def unseal(path: str, blob: bytes) -> bytes:
    """The body of the sealed file ``path``.

    Raises:
        DamagedEntry: ``blob`` is not sealed, or not by this file's name.
    """
    head = len(MAGIC) + _DIGEST
    if len(blob) < head or not blob.startswith(MAGIC):
        raise DamagedEntry(path, f"not a kiln cache file ({len(blob)} bytes)")
    body = blob[head:]
    name = os.path.basename(path)
    if hashlib.sha256(name.encode() + b"\0" + body).digest() != blob[len(MAGIC):head]:
        raise DamagedEntry(path, "checksum mismatch (corrupted, or another entry's file)")
    return body



class KernelLoadError(RuntimeError):
    """A generated kernel's source could not be executed (a bug in its generator)."""


class KernelCacheWarning(RuntimeWarning):
    """The kernel cache (``KILN_CACHE_DIR``) held a damaged entry, or cannot be used."""


def warn_cache(kind: str, message: str) -> None:
    """Warns once per process per ``kind`` (``"damaged"``, ``"unusable"``, ``"changed"``)
    about the kernel cache, naming ``KILN_CACHE_DIR``."""
    with _lock:
        if kind in _warned:
            return
        _warned.add(kind)
    warnings.warn(f"kiln: {message} (kernel cache: KILN_CACHE_DIR={config.cache_dir()!r}; "
                  "this is warned once per process)", KernelCacheWarning, stacklevel=3)


def private_dir(path: str) -> None:
    """Creates the folder ``path`` (and any missing parent) with mode 0700.

    Raises:
        OSError: it cannot be created, or is not a folder.
    """
    if not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent and parent != path and not os.path.isdir(parent):
            private_dir(parent)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if not os.path.isdir(path):
                raise NotADirectoryError(f"{path} exists and is not a folder") from None


@dataclass(frozen=True)
class Source:
    """A kernel's source file, imported.

    Attributes:
        target: ``"cpu"``, ``"cuda"`` or ``"cudasim"``.
        name: the function's name in the file.
        key: the cache key (part of the file name).
        path: the file.
        module: the module, built from the text.
        on_disk: whether ``path`` holds the text (False when the cache folder cannot be
            used: then nothing may be cached on disk for this kernel).
        stamp: the sha256 of the text (what numba's cache of the file is keyed by).
    """

    target: str
    name: str
    key: str
    path: str
    module: ModuleType
    on_disk: bool = True
    stamp: bytes = b""

    @property
    def function(self) -> Callable:
        """The (plain Python) function ``name`` of the module."""
        return getattr(self.module, self.name)


def _version(dist: str) -> str:
    """A package's version: its ``__version__`` (numba and numba-cuda are imported anyway;
    ``importlib.metadata`` would scan every installed distribution, ~30 ms at start-up)."""
    found = _versions.get(dist)
    if found is None:
        try:
            found = str(importlib.import_module(dist.replace("-", "_")).__version__)
        except (ImportError, AttributeError):
            from importlib import metadata  # ~12 ms to import: only where needed

            try:
                found = metadata.version(dist)
            except metadata.PackageNotFoundError:
                found = "none"
        _versions[dist] = found
    return found


def toolchain(target: str) -> str:
    """The versions a kernel of ``target`` depends on, as one string (part of the key)."""
    parts = [f"numba={_version('numba')}", f"python={sys.version.split()[0]}"]
    if target != "cpu":
        parts.append(f"numba-cuda={_version('numba-cuda')}")
    else:  # the cpu the code is generated for (the host or KILN_CPU's: cpu/target.py)
        from kiln.core.backends.cpu import target as cpu_target

        parts.append(cpu_target.process().cache_tag())
    return ";".join(parts)


def kernel_key(target: str, name: str, text: str, *, options: str = "",
               signature: str = "", tools: str | None = None) -> str:
    """The deterministic cache key of a kernel file.

    Args:
        target: ``"cpu"``, ``"cuda"`` or ``"cudasim"``.
        name: the function's name.
        text: the full text of the file (header included).
        options: the jit options, as a string.
        signature: what the source is specialized for (dtypes, ranks), as a string.
        tools: the compiler versions the kernel depends on; default :func:`toolchain`
            (numba's: the native loops give llvmlite's and LLVM's instead).

    Returns:
        24 hex digits of a sha256 over all of these, the codegen version and the toolchain.
    """
    if target not in TARGETS:
        raise ValueError(f"unknown JIT target {target!r}; expected one of {TARGETS}")
    tools = toolchain(target) if tools is None else tools
    fields = [CODEGEN_VERSION, tools, target, name, options, signature, text]
    return hashlib.sha256("\n\x00".join(fields).encode()).hexdigest()[:24]


def target_dir(target: str) -> str:
    """The folder holding ``target``'s kernel files (and numba's cache, in its __pycache__)."""
    return os.path.join(config.cache_dir(), target)


def write_source(path: str, text: str, *, force: bool = False) -> bool:
    """Writes ``text`` to ``path`` atomically unless an identical file exists (or ``force``).

    Returns:
        True when the file was written. An identical file is never rewritten; a different
        one (damaged) always is.

    Raises:
        OSError: the file could not be written (the folder cannot be created or written, the
            disk is full).
    """
    if not force and same_text(path, text):
        return False
    write_bytes(path, text.encode("utf-8"))
    return True


def write_bytes(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically (a temporary file renamed over it), creating its
    folder (mode 0700) if needed.

    Raises:
        OSError: the file could not be written.
    """
    private_dir(os.path.dirname(path))
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def same_text(path: str, text: str) -> bool:
    """Whether the file ``path`` holds exactly ``text`` (False when it is missing, unreadable,
    or not UTF-8)."""
    try:
        with open(path, "rb") as f:
            return f.read() == text.encode("utf-8")
    except OSError:
        return False


def module_from_text(modname: str, path: str, text: str) -> ModuleType:
    """A module called ``modname`` (not registered) built by executing ``text`` as if it were
    the file ``path`` (numba's cache and tracebacks name that file)."""
    module = ModuleType(modname)
    module.__file__ = path
    exec(compile(text, path, "exec"), module.__dict__)  # noqa: S102 - kiln's generated text
    return module


def import_file(modname: str, path: str) -> ModuleType:
    """Imports the Python file ``path`` as a module called ``modname`` (not registered); for
    tools that compile a recorded kernel file again (the loader itself never imports a file:
    :func:`module_from_text`)."""
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _store(path: str, text: str) -> tuple[bool, bool]:
    """Makes ``path`` hold ``text``: ``(written, on_disk)``. A folder that cannot be written
    is remembered (and warned about once): its kernels live in memory only, except those whose
    file is already there, identical (a read-only cache still serves)."""
    folder = os.path.dirname(path)
    if folder in _unusable:
        return False, same_text(path, text)
    try:
        return write_source(path, text), True
    except OSError as exc:
        unusable(folder, exc)
        return False, same_text(path, text)


def unusable(folder: str, exc: OSError | None = None) -> bool:
    """Whether the cache folder ``folder`` is known not to be writable in this process;
    with ``exc`` (a failed write there), records it and warns once."""
    if exc is not None and folder not in _unusable:
        _unusable[folder] = f"{type(exc).__name__}: {exc}"
        warn_cache("unusable", f"the kernel cache folder {folder!r} cannot be written "
                   f"({_unusable[folder]}); kernels are compiled in memory only, so the next "
                   "process compiles them again. Point KILN_CACHE_DIR to a writable folder")
    return folder in _unusable


def load_source(target: str, source: str, name: str, *, header: str, options: str = "",
                signature: str = "", prepare: Callable[[ModuleType], None] | None = None,
                counts: dict[str, Any] | None = None) -> Source:
    """Writes ``header + source`` to the cache (if needed) and builds its module from the text.

    Args:
        target: ``"cpu"``, ``"cuda"`` or ``"cudasim"``.
        source: the kernel's Python source.
        name: the function to take from it.
        header: what the file starts with (imports, shared helpers); part of the key.
        options: the jit options (part of the key).
        signature: what the source is specialized for (part of the key).
        prepare: called on a freshly built module (e.g. the simulator's ``math``).
        counts: a backend's counters; ``sources_written`` and ``modules_loaded`` are
            incremented here.

    Returns:
        A :class:`Source`; the same object for the same file within a process.

    Raises:
        KernelLoadError: the text could not be executed (a bug in its generator).
    """
    text = f"# kiln {target} kernel {name} [{signature}] {options}\n{header}{source}"
    key = kernel_key(target, name, text, options=options, signature=signature)
    path = os.path.join(target_dir(target), f"k_{key}.py")
    found = _loaded.get(path)
    if found is not None:
        return found
    with _lock:
        found = _loaded.get(path)
        if found is not None:
            return found
        # one module per file (the same key in another KILN_CACHE_DIR is another file)
        where = hashlib.sha256(path.encode()).hexdigest()[:8]
        modname = f"kiln_jit_{target}_k_{key}_{where}"
        written, on_disk = _store(path, text)
        module = sys.modules.get(modname)
        if module is None:
            try:
                module = module_from_text(modname, path, text)
            except Exception as exc:  # noqa: BLE001 - any error of generated code: name it
                raise KernelLoadError(
                    f"kiln: the generated {target} kernel {name!r} ({path}) cannot be "
                    f"executed: {type(exc).__name__}: {exc}") from exc
            if prepare is not None:
                prepare(module)
            sys.modules[modname] = module
            if counts is not None:
                counts["modules_loaded"] += 1
        if written and counts is not None:
            counts["sources_written"] += 1
        stamp = hashlib.sha256(text.encode("utf-8")).digest()
        found = Source(target, name, key, path, module, on_disk, stamp)
        _loaded[path] = found
        return found
