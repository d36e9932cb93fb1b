"""Small HDF5 helpers: opening files with clear errors (and refusing what a weight file must
not do: read other files), string / JSON / list attributes, datasets read only after their
declared shape and dtype were checked (docs/security.md)."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np


class _LazyH5py:
    """h5py, imported at its first use: importing it costs ~30 ms of every program's start
    (``import kiln.models`` imports this module), and a program that never saves or loads
    never uses it."""

    def __getattr__(self, name: str) -> Any:
        try:
            import h5py as module
        except ImportError as exc:  # pragma: no cover - h5py is a dependency
            raise ImportError("kiln.saving needs h5py: pip install h5py") from exc
        globals()["h5py"] = module  # the module itself from now on
        return getattr(module, name)


h5py: Any = _LazyH5py()

# HDF5 object headers are limited to 64 KiB; longer list attributes are split in chunks
# ``name0, name1 ...`` (Keras' ``save_attributes_to_hdf5_group`` does the same).
HEADER_LIMIT = 64512
#: The largest JSON document (a model config, a training state) read from a file, in bytes,
#: unless the caller allows more (a checkpoint's training state grows with the model).
JSON_LIMIT = 16 << 20
#: The deepest nesting of lists and objects accepted in a JSON document. kiln's and Keras'
#: configs nest a few levels per layer and per nested model; a deeper document is refused
#: with a FileFormatError instead of a RecursionError somewhere in the loader.
JSON_DEPTH = 128
#: HDF5 filters that ship with HDF5 or h5py (deflate, shuffle, fletcher32, szip, n-bit,
#: scale-offset, lzf). Any other filter id would make HDF5 look for a plugin library.
BUILTIN_FILTERS = frozenset({1, 2, 3, 4, 5, 6, 32000})


class FileFormatError(ValueError):
    """A file is not what kiln expected: not HDF5, truncated, an unknown layout, or content
    kiln refuses to read (links to other files, declared sizes beyond what the model needs,
    invalid training state). The message names the file and what is wrong."""


def require_h5py() -> Any:
    """The h5py module (ImportError with the install command where it is missing)."""
    if isinstance(h5py, _LazyH5py):
        h5py.File  # noqa: B018 - imports it
    return globals()["h5py"]


def open_h5(path: str | os.PathLike | io.BytesIO, what: str = "load",
            label: str | None = None) -> Any:
    """Opens an HDF5 file for reading, turning h5py's low-level errors into a clear one, and
    refuses files that would read other files (:func:`check_self_contained`).

    Args:
        path: a file path or an in-memory file.
        what: the calling API, for messages (``"load_weights"``).
        label: how messages name the file (default: the path).
    """
    require_h5py()
    name = path if isinstance(path, io.BytesIO) else os.fspath(path)
    if label is None:
        label = "<in-memory file>" if isinstance(name, io.BytesIO) else repr(name)
    if not isinstance(name, io.BytesIO):
        if not os.path.exists(name):
            raise FileNotFoundError(f"{what}: no such file {name!r}")
        if os.path.isdir(name):
            raise FileFormatError(f"{what}: {name!r} is a folder, expected an HDF5 file")
        if not h5py.is_hdf5(name):
            size = os.path.getsize(name)
            raise FileFormatError(f"{what}: {name!r} is not an HDF5 file (no HDF5 signature "
                                  f"in its {size} bytes)")
    try:
        h5 = h5py.File(name, "r")
    except (OSError, RuntimeError, ValueError) as exc:
        raise FileFormatError(f"{what}: cannot read {label} as HDF5; the file is truncated "
                              f"or corrupt ({exc})") from exc
    try:
        with guard(label, what):
            check_self_contained(h5, label, what)
    except BaseException:
        h5.close()
        raise
    return h5


@contextlib.contextmanager
def guard(source: str, what: str) -> Iterator[None]:
    """Turns the errors h5py raises on a damaged file (OSError, RuntimeError, KeyError for an
    unreadable object header, TypeError for a type NumPy cannot hold) into a FileFormatError
    naming the file, and names the file in a FileFormatError raised without it."""
    try:
        yield
    except FileFormatError as exc:
        if source in str(exc):
            raise
        raise FileFormatError(f"{what}: {source}: {exc}") from exc
    except (OSError, RuntimeError, KeyError, TypeError) as exc:
        if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError):
            raise
        raise FileFormatError(f"{what}: cannot read {source}: the file is truncated or "
                              f"corrupt ({type(exc).__name__}: {exc})") from exc


def check_self_contained(h5: Any, source: str, what: str = "load") -> None:
    """Refuses an HDF5 file any of whose values lives outside it: external links (to another
    HDF5 file), datasets with external raw storage (any local file's bytes) and virtual
    datasets (mapped from other files), anywhere in the file; and datasets compressed with a
    filter that is not built into HDF5 (reading them would load a plugin library).

    Raises:
        FileFormatError: naming the file and the object.
    """
    found: list[str] = []

    def visit(raw: bytes, info: Any) -> Any:
        name = raw.decode("utf-8", "replace")
        if info.type == h5py.h5l.TYPE_EXTERNAL:
            link = h5.get(name, getlink=True)
            found.append(f"'/{name}' is an external link to {link.path!r} in file "
                         f"{link.filename!r}")
        elif info.type not in (h5py.h5l.TYPE_HARD, h5py.h5l.TYPE_SOFT):
            found.append(f"'/{name}' is a user-defined link (type {info.type})")
        return True if found else None  # a non-None value stops the walk

    h5.id.links.visit(visit, info=True)  # every link once; external links are not followed
    if not found:
        for name, obj in _datasets(h5):
            problem = _dataset_problem(obj)
            if problem:
                found.append(f"dataset '/{name}' {problem}")
                break
    if found:
        raise FileFormatError(f"{what}: {source}: {found[0]}. kiln reads only values stored "
                              "inside the file itself and refuses files that refer to other "
                              "files (docs/security.md)")


def _datasets(h5: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            out.append((name, obj))

    h5.visititems(visit)  # hard links only: each object once, cycles included
    return out


def _dataset_problem(ds: Any) -> str | None:
    if ds.is_virtual:
        return "is a virtual dataset (mapped from other files)"
    plist = ds.id.get_create_plist()
    if plist.get_external_count():
        files = [plist.get_external(i)[0].decode("utf-8", "replace")
                 for i in range(plist.get_external_count())]
        return f"stores its values in external file(s) {files}"
    for i in range(plist.get_nfilters()):
        code = plist.get_filter(i)[0]
        if code not in BUILTIN_FILTERS:
            return (f"is compressed with HDF5 filter {code}, which is not built into HDF5 "
                    "(reading it would load a plugin library)")
    return None


def decode(value: Any) -> Any:
    """bytes / numpy strings / arrays of them -> str / list[str]."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and value.size == 0:  # Keras writes [] as float64
            return []
        return [decode(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return decode(value.item())
    return value


def attr(obj: Any, name: str, default: Any = None) -> Any:
    """An attribute decoded to Python strings (or ``default``)."""
    if name not in obj.attrs:
        return default
    return decode(obj.attrs[name])


def set_json_attr(obj: Any, name: str, value: Any) -> None:
    text = json.dumps(value, default=json_default)
    if len(text.encode("utf-8")) > HEADER_LIMIT:
        # Too big for an attribute: store it as a UTF-8 byte dataset next to the attributes.
        data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        obj.create_dataset(f"__json__{name}", data=data)
        obj.attrs[name] = f"__json_dataset__:__json__{name}"
        return
    obj.attrs[name] = text


def load_json(text: str | bytes, source: str, field: str) -> Any:
    """Parses a JSON document from a file, refusing invalid JSON and nesting deeper than
    :data:`JSON_DEPTH` with a FileFormatError naming ``source`` and ``field``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise FileFormatError(f"{source}: {field} is nested too deeply (more than "
                              f"{JSON_DEPTH} levels are refused)") from None
    except (TypeError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise FileFormatError(f"{source}: {field} is not valid JSON ({exc})") from exc
    check_depth(value, source, field)
    return value


def check_depth(value: Any, source: str, field: str, limit: int = JSON_DEPTH) -> None:
    """Refuses lists/dicts nested deeper than ``limit`` (iteratively: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise FileFormatError(f"{source}: {field} is nested more than {limit} levels "
                                  "deep; refused")
        stack.extend((child, depth + 1) for child in children)


def json_attr(obj: Any, name: str, default: Any = None, source: str = "the file",
              limit: int = JSON_LIMIT) -> Any:
    """A JSON attribute (stored in a byte dataset when large, :func:`set_json_attr`), parsed
    with :func:`load_json`; a stored document larger than ``limit`` bytes is refused before
    it is read."""
    text = attr(obj, name)
    if text is None:
        return default
    field = f"attribute {name!r} of {obj.name!r}"
    if isinstance(text, str) and text.startswith("__json_dataset__:"):
        key = text.split(":", 1)[1]
        ds = obj.get(key) if key and "/" not in key else None
        if not isinstance(ds, h5py.Dataset) or ds.dtype != np.uint8 or ds.ndim != 1:
            raise FileFormatError(f"{source}: {field} points to {key!r}, which is not a 1-d "
                                  "uint8 dataset of this group")
        if ds.size > limit:
            raise FileFormatError(f"{source}: {field} declares {ds.size} bytes of JSON; at "
                                  f"most {limit} are read")
        text = ds[()].tobytes()
    elif not isinstance(text, str):
        raise FileFormatError(f"{source}: {field} is not a string (received "
                              f"{type(text).__name__})")
    return load_json(text, source, field)


def set_list_attr(obj: Any, name: str, values: list[str]) -> None:
    """A list of strings as a (chunked if needed) vlen-string attribute."""
    arr = np.array([v.encode("utf-8") for v in values], dtype=object)
    dt = h5py.string_dtype("utf-8")
    size = sum(len(v) + 16 for v in arr)
    if size <= HEADER_LIMIT:
        obj.attrs.create(name, arr, dtype=dt) if len(arr) else obj.attrs.create(
            name, np.array([], dtype=object), dtype=dt)
        return
    chunks = int(np.ceil(size / HEADER_LIMIT)) + 1
    for i, part in enumerate(np.array_split(arr, chunks)):
        obj.attrs.create(f"{name}{i}", part, dtype=dt)


def list_attr(obj: Any, name: str) -> list[str] | None:
    """Reads a list-of-strings attribute, also in chunks ``name0, name1 ...``."""
    if name in obj.attrs:
        return _strings(decode(obj.attrs[name]), obj, name)
    if f"{name}0" not in obj.attrs:
        return None
    out: list[str] = []
    i = 0
    while f"{name}{i}" in obj.attrs:
        out += _strings(decode(obj.attrs[f"{name}{i}"]), obj, f"{name}{i}")
        i += 1
    return out


def _strings(value: Any, obj: Any, name: str) -> list[str]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise FileFormatError(f"attribute {name!r} of {obj.name!r} should be a list of "
                              f"strings, received {str(value)[:200]}")
    return values


def json_default(obj: Any) -> Any:
    """JSON for NumPy scalars/arrays, tuples and sets in configs (no pickling, ever)."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    if isinstance(obj, np.dtype):
        return obj.name
    if isinstance(obj, bytes):
        return obj.decode("utf-8")
    get_config = getattr(obj, "get_config", None)
    if callable(get_config):
        from kiln.saving.serialization import serialize

        return serialize(obj)
    raise TypeError(f"cannot serialize {type(obj).__name__} {obj!r} to JSON")


# ---- datasets: declared shape and dtype first, values later -----------------------------------
@dataclass
class Stored:
    """A dataset of an open file, not read yet: its declared ``shape`` and the ``dtype`` it
    reads as (bfloat16 -> float32). Loaders compare these with the model before calling
    :meth:`read`, so a file declaring a huge array costs nothing to refuse."""

    ds: Any
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    bfloat16: bool = False

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def read(self) -> np.ndarray:
        """The values (the file must still be open)."""
        try:
            arr = np.asarray(self.ds[()])
        except (OSError, RuntimeError, KeyError, TypeError) as exc:
            raise FileFormatError(f"cannot read dataset {self.name!r}: the file is truncated "
                                  f"or corrupt ({exc})") from exc
        if self.bfloat16:
            arr = _bfloat16_to_float32(arr)
        if tuple(arr.shape) != self.shape:  # pragma: no cover - h5py reads what it declares
            raise FileFormatError(f"dataset {self.name!r} declared shape {self.shape} but "
                                  f"read {arr.shape}")
        return arr


def stored(obj: Any, where: str = "") -> Stored:
    """A :class:`Stored` for a dataset (a FileFormatError if ``obj`` is a group)."""
    if not isinstance(obj, h5py.Dataset):
        raise FileFormatError(f"{where or obj.name!r} should be a dataset, found a "
                              f"{type(obj).__name__}")
    if obj.shape is None:
        raise FileFormatError(f"dataset {obj.name!r} has no values (an empty dataspace)")
    shape = tuple(int(d) for d in obj.shape)
    dtype = obj.dtype
    bf16 = attr(obj, "dtype") == "bfloat16" and dtype.itemsize == 2 and dtype.kind in "uiVf"
    return Stored(obj, obj.name, shape, np.dtype(np.float32) if bf16 else dtype, bf16)


def read_dataset(ds: Any) -> np.ndarray:
    """A dataset's value as a NumPy array (scalars included); bfloat16 becomes float32. Only
    for datasets whose size is known to be small; weights go through :func:`stored`."""
    return stored(ds).read()


def _bfloat16_to_float32(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)
    bits = arr.view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32)
