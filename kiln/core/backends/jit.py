"""The ONE JIT loader of kiln: generated kernel source -> a file in the cache -> a function.

Every kernel of every device (numba CPU kernels, numba-cuda kernels, the simulator's) is loaded
through :func:`load_source`, which owns the one cache-key scheme and the files:

* the key is a sha256 over the codegen version (:data:`CODEGEN_VERSION`), the numba (and, for a
  CUDA target, numba-cuda) version, the Python version, the target (``"cpu"``, ``"cuda"`` or
  ``"cudasim"``), the function's name, the jit options, the signature string and the full text
  of the file (:func:`kernel_key`);
* the text is written to ``KILN_CACHE_DIR/<target>/k_<key>.py`` atomically (temporary file +
  rename), and never rewritten when identical (numba's cache index checks its modification
  time), so numba's ``cache=True`` works across processes (functions built with ``exec`` from a
  string cannot be cached);
* a damaged cache never gives wrong results: a file whose content differs from the text wanted
  (truncated, edited, corrupted) is rewritten; a file whose import raises (a SyntaxError, stale
  or corrupt bytecode) is rewritten once, its bytecode dropped, and imported again; a second
  failure raises :class:`KernelLoadError` naming the file.

The backends wrap the function in their own ``Kernel`` (``cpu/jit.py``: numba ``njit``;
``cuda/_jit.py``: ``cuda.jit`` and launches); neither writes files or computes keys.

Example:
    >>> src = load_source("cpu", "def f(o, a):\\n    o[0] = a[0]\\n", "f", header="")
    >>> src.function, src.path   # (<function f>, '.../cpu/k_<key>.py')
"""

from __future__ import annotations

import glob
import hashlib
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Any

from kiln import config

# Bump when a code generator or a backend's Kernel wrapper changes in a way the text does not show.
CODEGEN_VERSION = "6"

TARGETS = ("cpu", "cuda", "cudasim")

_lock = threading.RLock()
_loaded: dict[str, Source] = {}
_versions: dict[str, str] = {}


class KernelLoadError(RuntimeError):
    """A cached kernel file could not be imported, even after rewriting it."""


@dataclass(frozen=True)
class Source:
    """A kernel's source file, imported.

    Attributes:
        target: ``"cpu"``, ``"cuda"`` or ``"cudasim"``.
        name: the function's name in the file.
        key: the cache key (part of the file name).
        path: the file.
        module: the imported module.
    """

    target: str
    name: str
    key: str
    path: str
    module: ModuleType

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
    return ";".join(parts)


def kernel_key(target: str, name: str, text: str, *, options: str = "",
               signature: str = "") -> str:
    """The deterministic cache key of a kernel file.

    Args:
        target: ``"cpu"``, ``"cuda"`` or ``"cudasim"``.
        name: the function's name.
        text: the full text of the file (header included).
        options: the jit options, as a string.
        signature: what the source is specialized for (dtypes, ranks), as a string.

    Returns:
        24 hex digits of a sha256 over all of these, the codegen version and the toolchain.
    """
    if target not in TARGETS:
        raise ValueError(f"unknown JIT target {target!r}; expected one of {TARGETS}")
    fields = [CODEGEN_VERSION, toolchain(target), target, name, options, signature, text]
    return hashlib.sha256("\n\x00".join(fields).encode()).hexdigest()[:24]


def target_dir(target: str) -> str:
    """The folder holding ``target``'s kernel files (and numba's cache, in its __pycache__)."""
    return os.path.join(config.cache_dir(), target)


def write_source(path: str, text: str, *, force: bool = False) -> bool:
    """Writes ``text`` to ``path`` atomically unless an identical file exists (or ``force``).

    Returns:
        True when the file was written. An identical file is never rewritten (numba's cache
        index checks its modification time); a different one (damaged) always is.
    """
    if not force:
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    return False
        except (OSError, UnicodeDecodeError):
            pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return True


def import_file(modname: str, path: str) -> ModuleType:
    """Imports the Python file ``path`` as a module called ``modname`` (not registered)."""
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _drop_bytecode(path: str) -> None:
    folder, base = os.path.split(path)
    stem = os.path.splitext(base)[0]
    for pyc in glob.glob(os.path.join(folder, "__pycache__", f"{stem}.*.pyc")):
        try:
            os.remove(pyc)
        except OSError:
            pass


def load_source(target: str, source: str, name: str, *, header: str, options: str = "",
                signature: str = "", prepare: Callable[[ModuleType], None] | None = None,
                counts: dict[str, Any] | None = None) -> Source:
    """Writes ``header + source`` to the cache (if needed), imports it, returns the module.

    Args:
        target: ``"cpu"``, ``"cuda"`` or ``"cudasim"``.
        source: the kernel's Python source.
        name: the function to take from it.
        header: what the file starts with (imports, shared helpers); part of the key.
        options: the jit options (part of the key).
        signature: what the source is specialized for (part of the key).
        prepare: called on a freshly imported module (e.g. the simulator's ``math``).
        counts: a backend's counters; ``sources_written`` and ``modules_loaded`` are
            incremented here.

    Returns:
        A :class:`Source`; the same object for the same file within a process.

    Raises:
        KernelLoadError: the file could not be imported, even after rewriting it.
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
        written = write_source(path, text)
        module = sys.modules.get(modname)
        if module is None:
            try:
                module = import_file(modname, path)
            except Exception as first:  # noqa: BLE001 - a damaged cache: rewrite, retry once
                _drop_bytecode(path)
                written = write_source(path, text, force=True)
                try:
                    module = import_file(modname, path)
                except Exception as exc:  # noqa: BLE001
                    raise KernelLoadError(
                        f"kiln: cannot import the {target} kernel {name!r} from {path} "
                        f"({type(exc).__name__}: {exc}; it was rewritten after a first "
                        f"failure: {type(first).__name__}: {first})") from exc
            if prepare is not None:
                prepare(module)
            sys.modules[modname] = module
            if counts is not None:
                counts["modules_loaded"] += 1
        if written and counts is not None:
            counts["sources_written"] += 1
        found = Source(target, name, key, path, module)
        _loaded[path] = found
        return found
