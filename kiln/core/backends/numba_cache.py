"""numba's disk cache for kiln's kernel files, checked, so that a damaged cache never runs a
wrong kernel and never stops a run (docs/architecture.md, "The kernel cache").

numba caches a compiled function in ``__pycache__`` next to its file: an index
(``<file>.<function>-<line>.py311.nbi``: numba's version, a stamp of the source, signature ->
data file) and one data file per signature (``... .1.nbc``: a pickle holding the machine
code). numba trusts both: an empty, truncated or random file raises (EOFError,
UnpicklingError, LLVM errors, ModuleNotFoundError ...) in every later process, and a flipped
byte in the machine code or a data file swapped with another kernel's could run silently.
:class:`CheckedCache` (installed on a kernel's dispatcher by :func:`install`) keeps numba's
layout and logic with three changes:

* every file is sealed: ``MAGIC + sha256(file name, body) + body``. A file that is not sealed
  by its own name (damaged, truncated, written by another tool, swapped with another file) is
  a damaged entry, before anything in it is unpickled;
* the source stamp is the sha256 of the text kiln executed (:attr:`jit.Source.stamp`), not of
  what the file holds, and a loaded entry must name the kernel's own module, function and
  argument types;
* a damaged entry is discarded (the kernel is compiled again and the entry rewritten), and a
  cache that cannot be written (read-only, full) is switched off for the kernel: both warn
  once per process (:func:`kiln.core.backends.jit.warn_cache`).

The folders are created with mode 0700, like the rest of the cache.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

from numba.core import caching, sigutils

from kiln.core.backends.jit import (  # noqa: F401 - seal/unseal re-exported
    MAGIC,
    DamagedEntry,
    private_dir,
    seal,
    unseal,
    warn_cache,
)

# What rebuilding a sealed entry may raise when it is unusable after all (written by a numba
# whose pickles this one cannot read ...): the entry is discarded and compiled again.
REBUILD_ERRORS = (pickle.UnpicklingError, EOFError, ImportError, AttributeError, ValueError,
                  TypeError, KeyError, IndexError, RuntimeError, OSError)


class _Locator(caching._CacheLocator):
    """``__pycache__`` next to the kernel's file; the stamp is the executed text's hash."""

    def __init__(self, py_file: str, lineno: int, stamp: bytes):
        self._py_file = py_file
        self._lineno = lineno
        self._stamp = stamp
        self._cache_path = os.path.join(os.path.dirname(py_file), "__pycache__")

    def ensure_cache_path(self) -> None:
        private_dir(self._cache_path)

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> Any:
        return self._stamp

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:  # pragma: no cover - unused
        raise NotImplementedError("kiln builds its locator itself")


class _Impl(caching.CompileResultCacheImpl):
    """numba's CompileResult serialization with kiln's locator."""

    def __init__(self, py_func: Any, stamp: bytes):  # noqa: D107 - no super(): no locator search
        self._lineno = py_func.__code__.co_firstlineno
        path = py_func.__code__.co_filename
        self._locator = _Locator(path, self._lineno, stamp)
        modname = os.path.splitext(os.path.basename(path))[0]
        self._filename_base = self.get_filename_base(f"{modname}.{py_func.__qualname__}",
                                                     getattr(sys, "abiflags", ""))


class _CheckedFile(caching.IndexDataCacheFile):
    """numba's index and data files, sealed (see the module docstring)."""

    def _read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return unseal(path, f.read())

    def _load_index(self) -> dict:
        try:
            body = self._read(self._index_path)
        except FileNotFoundError:
            return {}
        try:
            version, stamp, overloads = pickle.loads(body)
        except REBUILD_ERRORS as exc:
            raise DamagedEntry(self._index_path, f"{type(exc).__name__}: {exc}") from exc
        if version != self._version or stamp != self._source_stamp:
            return {}  # another numba, another text: stale, overwritten by the next save
        return overloads

    def _save_index(self, overloads: dict) -> None:
        body = self._dump((self._version, self._source_stamp, overloads))
        with self._open_for_write(self._index_path) as f:
            f.write(seal(self._index_name, body))

    def _load_data(self, name: str) -> Any:
        path = self._data_path(name)
        body = self._read(path)
        try:
            return pickle.loads(body)
        except REBUILD_ERRORS as exc:
            raise DamagedEntry(path, f"{type(exc).__name__}: {exc}") from exc

    def _save_data(self, name: str, data: Any) -> None:
        with self._open_for_write(self._data_path(name)) as f:
            f.write(seal(name, self._dump(data)))

    def save(self, key: Any, data: Any) -> None:
        try:
            overloads = self._load_index()
        except DamagedEntry:
            overloads = {}  # rewritten below
        data_name = overloads.get(key)
        if data_name is None:
            taken = set(overloads.values())
            number = 1
            while self._data_name(number) in taken:
                number += 1
            data_name = self._data_name(number)
            overloads[key] = data_name
            self._save_index(overloads)
        self._save_data(data_name, data)

    def load(self, key: Any) -> Any:
        data_name = self._load_index().get(key)
        if data_name is None:
            return None
        try:
            return self._load_data(data_name)
        except FileNotFoundError:  # removed while the index still names it
            return None


class CheckedCache(caching.Cache):
    """numba's per-function disk cache over sealed files (see the module docstring).

    Args:
        py_func: the kernel's Python function (its ``co_filename`` is its file).
        stamp: the sha256 of the text the function was built from.
    """

    _impl_class = _Impl  # type: ignore[assignment]  # numba types the base attribute as None

    def __init__(self, py_func: Any, stamp: bytes):  # noqa: D107 - numba's, with the stamp
        self._name = repr(py_func)
        self._py_func = py_func
        self._impl = _Impl(py_func, stamp)
        self._cache_path = self._impl.locator.get_cache_path()
        self._cache_file = _CheckedFile(cache_path=self._cache_path,
                                        filename_base=self._impl.filename_base,
                                        source_stamp=stamp)
        self.enable()

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        """The cached compile result for ``sig``, or None (a miss, or a damaged entry: then
        discarded, so that numba compiles and saves it again)."""
        if not self._enabled:
            return None
        target_context.refresh()
        index = self._cache_file._index_path
        try:
            key = self._index_key(sig, target_context.codegen())
            data = self._cache_file.load(key)
            if data is None:
                return None
            cres = self._impl.rebuild(target_context, data)
        except DamagedEntry as exc:
            self._discard(exc.path, exc.reason)
            return None
        except OSError as exc:  # unreadable (permissions ...): not damaged, but unusable
            self._unusable(exc)
            return None
        except REBUILD_ERRORS as exc:
            self._discard(index, f"{type(exc).__name__}: {exc}")
            return None
        fn = self._py_func
        args = tuple(sigutils.normalize_signature(sig)[0])
        if (cres.fndesc.modname != fn.__module__ or cres.fndesc.qualname != fn.__qualname__
                or tuple(cres.signature.args) != args):
            self._discard(index, f"holds {cres.fndesc.modname}.{cres.fndesc.qualname}"
                          f"{tuple(cres.signature.args)}, not this kernel's entry")
            return None
        return cres

    def save_overload(self, sig: Any, data: Any) -> None:
        """Saves a compile result; a cache that cannot be written is switched off for this
        kernel (warned once)."""
        try:
            super().save_overload(sig, data)
        except OSError as exc:
            self._unusable(exc)

    def _discard(self, path: str, reason: str) -> None:
        reason = " ".join(reason.split())[:300]
        warn_cache("damaged", f"the kernel cache file {path!r} is damaged ({reason}); it is "
                   "discarded, the kernel compiled again and the entry rewritten")
        try:  # a damaged data file is also overwritten by the next save; an index must go
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self._unusable(exc)

    def _unusable(self, exc: OSError) -> None:
        self.disable()
        warn_cache("unusable", f"numba's cache of the kernels in {self._cache_path!r} cannot be "
                   f"written ({type(exc).__name__}: {exc}); kernels are compiled in memory "
                   "only. Point KILN_CACHE_DIR to a writable folder")


def install(dispatcher: Any, stamp: bytes) -> None:
    """Gives a numba dispatcher (made with ``cache=False``) kiln's checked disk cache."""
    dispatcher._cache = CheckedCache(dispatcher.py_func, stamp)


def has_entry(dispatcher: Any, sig: Any) -> bool:
    """Whether ``dispatcher``'s checked cache names an entry for ``sig`` in its index (the
    entry itself is checked when it is loaded); False without a checked cache, or when the
    index is missing, damaged or unreadable."""
    cache = getattr(dispatcher, "_cache", None)
    if not isinstance(cache, CheckedCache) or not cache._enabled:
        return False
    try:
        key = cache._index_key(sig, dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except (DamagedEntry, *REBUILD_ERRORS):
        return False


def has_cache(dispatcher: Any) -> bool:
    """Whether ``dispatcher`` has kiln's checked disk cache, enabled (what it compiles is
    written to disk, so another process can load it)."""
    cache = getattr(dispatcher, "_cache", None)
    return isinstance(cache, CheckedCache) and bool(cache._enabled)
