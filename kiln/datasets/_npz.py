"""Bounded reads of ``.npz`` archives: every loader reads a member only after checking what
it declares against what the dataset can hold, so a small hostile file (a zip member that
inflates to gigabytes, an ``.npy`` header declaring a huge shape, a pickle whose rows alias
one another) is refused before memory is spent on it.

Each limit is several times the largest member of the real dataset; the error names the file
member, what it declares and the limit.
"""

from __future__ import annotations

import zipfile
from typing import IO

import numpy as np

MiB = 1 << 20


def open_member(archive: zipfile.ZipFile, name: str, limit: int) -> IO[bytes]:
    """The stream of member ``name``, once its uncompressed size (the zip's own record,
    which ``zipfile`` enforces while reading) is at most ``limit`` bytes.

    Raises:
        ValueError: The member declares more than ``limit`` bytes.
    """
    info = archive.getinfo(name)
    if info.file_size > limit:
        raise ValueError(f"{name} declares {info.file_size:,} bytes uncompressed "
                         f"({info.compress_size:,} compressed), over the {limit:,}-byte limit "
                         "for this dataset")
    return archive.open(info)


def declared_nbytes(stream: IO[bytes]) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, bytes)`` an ``.npy`` header declares (the stream is left after it)."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    count = 1
    for d in shape:
        count *= int(d)
    return tuple(shape), dtype, count * dtype.itemsize


def read_numeric(archive: zipfile.ZipFile, key: str, limit: int) -> np.ndarray:
    """Member ``key`` (``key.npy``) as a numeric array, never unpickled, after checking that
    its header declares no more bytes than the member holds and the member fits ``limit``.

    Raises:
        ValueError: An object array, a size over the limit, or a header declaring more data
            than the member holds; names the member.
    """
    name = f"{key}.npy"
    size = archive.getinfo(name).file_size
    with open_member(archive, name, limit) as stream:
        shape, dtype, nbytes = declared_nbytes(stream)
    if dtype.hasobject:
        raise ValueError(f"{name}: an object array ({dtype}); numeric arrays only")
    if nbytes > size:
        raise ValueError(f"{name}: its header declares shape {shape} of {dtype} "
                         f"({nbytes:,} bytes) but the member holds {size:,} bytes")
    with archive.open(name) as stream:
        return np.lib.format.read_array(stream, allow_pickle=False)


def read_all(path: object, keys: tuple[str, ...], limit: int) -> dict[str, np.ndarray]:
    """The numeric arrays ``keys`` of the archive at ``path``, each read by
    :func:`read_numeric`.

    Raises:
        ValueError: A missing array (the message lists the expected keys) or any refusal of
            :func:`read_numeric`.
        zipfile.BadZipFile, OSError: Not a readable zip archive.
    """
    with zipfile.ZipFile(path) as archive:  # type: ignore[arg-type]
        names = set(archive.namelist())
        missing = [k for k in keys if f"{k}.npy" not in names]
        if missing:
            raise ValueError(f"missing arrays {missing}; expected keys {list(keys)}")
        return {k: read_numeric(archive, k, limit) for k in keys}
