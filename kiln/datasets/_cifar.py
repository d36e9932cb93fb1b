"""Reading the CIFAR files: the python version (a pickled dict per batch) and the binary
version (fixed-size records), from an extracted folder or straight from the ``.tar.gz``.

**Never unpickled.** A python-version batch is a pickled dict ``{data, labels, ...}`` whose
``data`` is a numpy ``uint8`` array. It goes through IMDB's restricted unpickler
(``kiln/datasets/imdb.py``): only numpy's array reconstruction is resolved, to stand-ins that
record their arguments; this module then checks and builds the ``(n, 3072)`` array.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from kiln.datasets import imdb

PIXELS = 3 * 32 * 32


def _key(k: Any) -> Any:
    return k.decode("latin1") if isinstance(k, bytes) else k


def parse_python_batch(raw: bytes, label_key: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x of shape (n, 3, 32, 32) uint8, labels int64)`` of one pickled CIFAR batch.

    Raises:
        ValueError: A pickle naming anything but numpy's array reconstruction, a missing key,
            or arrays of the wrong size; names ``where``.
    """
    try:
        batch = imdb._Unpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # a hostile or damaged pickle can fail in any way: report it
        raise ValueError(f"{where}: refused or unreadable pickle ({type(exc).__name__}: "
                         f"{exc})") from exc
    if not isinstance(batch, dict):
        raise ValueError(f"{where}: expected a pickled dict, found a {type(batch).__name__}")
    batch = {_key(k): v for k, v in batch.items()}
    missing = [k for k in ("data", label_key) if k not in batch]
    if missing:
        raise ValueError(f"{where}: the batch has no {missing} (keys: {sorted(map(str, batch))})")
    data = _uint8_matrix(batch["data"], where)
    labels = batch[label_key]
    if isinstance(labels, imdb._ArrayStub):
        labels = imdb._materialize(labels, f"{where}: {label_key}").tolist()
    if not isinstance(labels, list) or not all(type(v) is int for v in labels):
        raise ValueError(f"{where}: {label_key} must be a list of ints")
    if len(labels) != len(data):
        raise ValueError(f"{where}: {len(data)} images but {len(labels)} labels")
    return data.reshape(len(data), 3, 32, 32), np.array(labels, dtype=np.int64)


def _uint8_matrix(stub: Any, where: str) -> np.ndarray:
    """The ``(n, 3072)`` uint8 array a recorded ``_reconstruct`` describes."""
    state = getattr(stub, "state", None)
    if not isinstance(stub, imdb._ArrayStub) or not isinstance(state, tuple) or len(
            state) not in (4, 5):
        raise ValueError(f"{where}: data is not a pickled numpy array")
    shape, dtype, _fortran, data = state[-4:]
    if not isinstance(dtype, imdb._DtypeStub) or dtype.describe(where) != np.dtype(np.uint8):
        raise ValueError(f"{where}: data must be a uint8 array")
    if not (isinstance(shape, tuple) and len(shape) == 2 and all(type(d) is int for d in shape)
            and shape[1] == PIXELS):
        raise ValueError(f"{where}: data must have shape (n, {PIXELS}), found {shape!r}")
    data = data.encode("latin1") if isinstance(data, str) else data
    if not isinstance(data, bytes) or len(data) != shape[0] * PIXELS:
        raise ValueError(f"{where}: malformed data array")
    return np.frombuffer(data, dtype=np.uint8).reshape(shape).copy()


def parse_binary_batch(raw: bytes, label_bytes: int, label_index: int, where: str
                       ) -> tuple[np.ndarray, np.ndarray]:
    """A binary-version batch: records of ``label_bytes`` label bytes + 3072 pixels."""
    size = label_bytes + PIXELS
    if len(raw) % size:
        raise ValueError(f"{where}: {len(raw)} bytes is not a whole number of {size}-byte "
                         "records")
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, size)
    x = records[:, label_bytes:].reshape(-1, 3, 32, 32).copy()
    return x, records[:, label_index].astype(np.int64)


class Source:
    """A CIFAR copy: an extracted folder or a ``.tar.gz``, whose members are read by name
    (``folder_name/member``)."""

    def __init__(self, path: Path, folder_name: str):
        self.path, self.folder_name = path, folder_name

    def read(self, member: str) -> bytes:
        if self.path.is_dir():
            file = self.path / member
            if not file.is_file():
                raise ValueError(f"{self.path}: no file {member}")
            return file.read_bytes()
        name = f"{self.folder_name}/{member}"
        try:
            with tarfile.open(self.path, "r:*") as tar:
                try:
                    info = tar.getmember(name)
                except KeyError:
                    raise ValueError(f"{self.path}: the archive has no {name}") from None
                f = tar.extractfile(info)  # a regular member's bytes; nothing is written
                if f is None:
                    raise ValueError(f"{self.path}: {name} is not a file")
                return f.read()
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ValueError(f"{self.path}: not a usable CIFAR archive ({exc})") from exc


def channels_last(x: np.ndarray) -> np.ndarray:
    """``(n, 3, 32, 32)`` -> ``(n, 32, 32, 3)`` (Keras' default image data format)."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def locate(name: str, archive: str, folder: str, places: list[tuple[str, Path]]
           ) -> tuple[Path | None, list[str]]:
    """The first extracted ``folder`` (also Keras 3's ``<folder>-target/<folder>``) or
    ``archive`` found in ``places``; and the lines saying where it looked."""
    looked = []
    for label, place in places:
        for cand in (place / folder, place / f"{folder}-target" / folder, place / archive):
            if cand.is_dir() or cand.is_file():
                return cand, looked
        looked.append(f"  - {place} ({label}): no {folder}/ or {archive}")
    return None, looked
