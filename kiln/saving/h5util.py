"""Small HDF5 helpers: opening files with clear errors, string / JSON / list attributes."""

from __future__ import annotations

import io
import json
import os
from typing import Any

import numpy as np

try:
    import h5py
except ImportError:  # pragma: no cover - h5py is a dependency
    h5py = None

# HDF5 object headers are limited to 64 KiB; longer list attributes are split in chunks
# ``name0, name1 ...`` (Keras' ``save_attributes_to_hdf5_group`` does the same).
HEADER_LIMIT = 64512


class FileFormatError(ValueError):
    """A file is not what kiln expected: not HDF5, truncated, or an unknown layout."""


def require_h5py() -> Any:
    if h5py is None:  # pragma: no cover
        raise ImportError("kiln.saving needs h5py: pip install h5py")
    return h5py


def open_h5(path: str | os.PathLike | io.BytesIO, what: str = "load") -> Any:
    """Opens an HDF5 file for reading, turning h5py's low-level errors into a clear one."""
    require_h5py()
    name = path if isinstance(path, io.BytesIO) else os.fspath(path)
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
        return h5py.File(name, "r")
    except OSError as exc:
        raise FileFormatError(f"{what}: cannot read {label} as HDF5; the file is truncated "
                              f"or corrupt ({exc})") from exc


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


def json_attr(obj: Any, name: str, default: Any = None) -> Any:
    text = attr(obj, name)
    if text is None:
        return default
    if isinstance(text, str) and text.startswith("__json_dataset__:"):
        text = bytes(obj[text.split(":", 1)[1]][()]).decode("utf-8")
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise FileFormatError(f"attribute {name!r} of {obj.name!r} is not valid JSON: "
                              f"{exc}") from exc


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
        value = decode(obj.attrs[name])
        return [value] if isinstance(value, str) else list(value)
    if f"{name}0" not in obj.attrs:
        return None
    out: list[str] = []
    i = 0
    while f"{name}{i}" in obj.attrs:
        value = decode(obj.attrs[f"{name}{i}"])
        out += [value] if isinstance(value, str) else list(value)
        i += 1
    return out


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


def read_dataset(ds: Any) -> np.ndarray:
    """A dataset's value as a NumPy array (scalars included); bfloat16 becomes float32."""
    try:
        value = ds[()]
    except OSError as exc:
        raise FileFormatError(f"cannot read dataset {ds.name!r}: the file is truncated or "
                              f"corrupt ({exc})") from exc
    arr = np.asarray(value)
    if attr(ds, "dtype") == "bfloat16":
        arr = _bfloat16_to_float32(arr)
    return arr


def _bfloat16_to_float32(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)
    bits = arr.view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32)
