"""Readers for idx files (the MNIST file format) and Keras-style ``.npz`` archives.

An idx file starts with a 4-byte magic number ``00 00 <type> <rank>``, followed by
``rank`` big-endian uint32 dimensions and the payload. Only unsigned-byte payloads
(type ``0x08``, what MNIST and Fashion-MNIST use) are supported. Files may be gzipped;
gzip is detected from the content, not the file name.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from kiln.datasets import _npz

Split = tuple[np.ndarray, np.ndarray]
Splits = tuple[Split, Split]

NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
# mnist.npz's largest member (x_train, 60,000 28x28 bytes) is 47 MB uncompressed.
MAX_MEMBER_BYTES = 256 * _npz.MiB
_GZIP_MAGIC = b"\x1f\x8b"
_UBYTE = 0x08


def _open(path: Path) -> BinaryIO:
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == _GZIP_MAGIC
    return gzip.open(path, "rb") if gzipped else open(path, "rb")  # type: ignore[return-value]


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    return data if data is not None else b""


def _read_header(stream: BinaryIO, path: Path) -> tuple[int, ...]:
    magic = _read_exact(stream, 4)
    if len(magic) < 4 or magic[0] != 0 or magic[1] != 0 or magic[3] == 0:
        raise ValueError(
            f"{path} is not an idx file: bad magic number 0x{magic.hex() or '(empty)'} "
            "(expected 0x0000TTRR, e.g. 0x00000803 for images, 0x00000801 for labels)"
        )
    if magic[2] != _UBYTE:
        raise ValueError(
            f"{path}: unsupported idx data type 0x{magic[2]:02x}; only unsigned bytes (0x08)"
        )
    rank = magic[3]
    dims = _read_exact(stream, 4 * rank)
    if len(dims) < 4 * rank:
        raise ValueError(f"{path}: truncated idx header (rank {rank})")
    return struct.unpack(f">{rank}I", dims)


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an idx file (raw or gzipped) into a writable ``uint8`` array.

    Args:
        path: The file, e.g. ``train-images-idx3-ubyte.gz`` or ``t10k-labels.idx1-ubyte``.

    Returns:
        An ``np.uint8`` array whose shape is given by the file header.

    Raises:
        ValueError: The file is not an idx file (bad magic number), has a non-uint8
            payload, is truncated, has trailing data or is a corrupt gzip stream.
            The message names the file.

    Example:
        >>> labels = read_idx("train-labels-idx1-ubyte.gz")  # doctest: +SKIP
        >>> labels.shape  # doctest: +SKIP
        (60000,)
    """
    path = Path(path)
    try:
        with _open(path) as stream:
            shape = _read_header(stream, path)
            out = np.empty(shape, dtype=np.uint8)
            view = memoryview(out.reshape(-1))
            filled = 0
            while filled < len(view):
                n = stream.readinto(view[filled:])
                if not n:
                    break
                filled += n
            if filled < len(view):
                raise ValueError(
                    f"{path}: truncated idx payload, {filled} of {len(view)} bytes "
                    f"for shape {shape}"
                )
            if _read_exact(stream, 1):
                raise ValueError(f"{path}: unexpected data after the idx payload")
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ValueError(f"{path}: corrupt gzip data ({exc})") from exc
    return out


def write_idx(path: str | os.PathLike[str], array: np.ndarray) -> Path:
    """Write a ``uint8`` array as an idx file, gzipped when the name ends in ``.gz``.

    Args:
        path: Destination file.
        array: Array of dtype ``uint8`` with 1 to 255 dimensions.

    Returns:
        The path written.

    Example:
        >>> write_idx("/tmp/labels-idx1-ubyte.gz", np.arange(10, dtype=np.uint8))  # doctest: +SKIP
    """
    path = Path(path)
    array = np.ascontiguousarray(array)
    if array.dtype != np.uint8 or not 1 <= array.ndim <= 255:
        raise ValueError(f"write_idx needs a uint8 array with 1-255 dims, got {array.dtype}")
    header = bytes([0, 0, _UBYTE, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header)
        f.write(array.tobytes())
    return path


def read_npz(path: str | os.PathLike[str]) -> Splits:
    """Read a Keras-style ``mnist.npz`` with arrays ``x_train, y_train, x_test, y_test``.

    Args:
        path: The ``.npz`` file.

    Returns:
        ``((x_train, y_train), (x_test, y_test))`` as in the archive.

    Raises:
        ValueError: The file is not an npz archive or lacks one of the four arrays.

    Example:
        >>> (x_train, y_train), (x_test, y_test) = read_npz("mnist.npz")  # doctest: +SKIP
    """
    path = Path(path)
    try:
        if not zipfile.is_zipfile(path):
            raise ValueError("not an .npz archive")
        arrays = _npz.read_all(path, NPZ_KEYS, MAX_MEMBER_BYTES)
        x_train, y_train, x_test, y_test = (arrays[key] for key in NPZ_KEYS)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, io.UnsupportedOperation) as exc:
        raise ValueError(f"{path}: not a usable dataset .npz file ({exc})") from exc
    return (x_train, y_train), (x_test, y_test)


def check_splits(splits: Splits, source: str) -> Splits:
    """Check that images are ``(n, h, w)`` and labels ``(n,)``, all ``uint8``.

    Args:
        splits: ``((x_train, y_train), (x_test, y_test))``.
        source: Where the arrays came from, used in error messages.

    Returns:
        ``splits`` unchanged.

    Raises:
        ValueError: On a wrong dtype, rank or a count mismatch between images and labels.
    """
    for part, (x, y) in zip(("train", "test"), splits):
        if x.dtype != np.uint8 or y.dtype != np.uint8:
            raise ValueError(f"{source}: {part} arrays must be uint8, got {x.dtype}/{y.dtype}")
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise ValueError(
                f"{source}: {part} images {x.shape} and labels {y.shape} do not match; "
                "expected (n, rows, cols) and (n,)"
            )
    return splits
