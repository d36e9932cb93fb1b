"""TensorBoard event files, written (and read back) without TensorFlow.

The format (TensorFlow's ``core/lib/io/record_writer`` and ``core/util/event.proto``): a
file is a sequence of records, each

    uint64 length (little-endian) | uint32 masked_crc32c(length bytes) |
    data (length bytes)           | uint32 masked_crc32c(data)

with ``masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2**32)``, ``c`` the
CRC-32C (Castagnoli) of ``x``. Each record's data is a serialized ``Event`` protobuf; the
first one carries ``file_version = "brain.Event:2"``. The few protobuf fields used are
encoded by hand here:

    Event:          wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
                    summary = 5 (Summary)
    Summary:        value = 1 (repeated Summary.Value)
    Summary.Value:  tag = 1 (string), simple_value = 2 (float), histo = 5 (HistogramProto)
    HistogramProto: min = 1, max = 2, num = 3, sum = 4, sum_squares = 5 (doubles),
                    bucket_limit = 6, bucket = 7 (packed repeated doubles)
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Any

import numpy as np

# ---- CRC-32C ------------------------------------------------------------------------------
_POLY = 0x82F63B78  # Castagnoli, reflected


def _table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        out.append(c)
    return out


_TABLE = _table()


def crc32c(data: bytes) -> int:
    """The CRC-32C of ``data`` (``crc32c(b"123456789") == 0xE3069283``)."""
    c = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, its masked CRC."""
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + data
            + struct.pack("<I", masked_crc32c(data)))


# ---- protobuf encoding ---------------------------------------------------------------------
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 as two's complement, as protobuf does
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, wire: int) -> bytes:
    return _varint((number << 3) | wire)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _field(number, 2) + _varint(len(payload)) + payload


def _double_field(number: int, value: float) -> bytes:
    return _field(number, 1) + struct.pack("<d", value)


def encode_event(wall_time: float, step: int, file_version: str | None = None,
                 values: list[bytes] | None = None) -> bytes:
    """A serialized ``Event``; ``values`` are serialized ``Summary.Value`` messages."""
    out = _double_field(1, wall_time) + _field(2, 0) + _varint(int(step))
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())
    if values:
        out += _bytes_field(5, b"".join(_bytes_field(1, v) for v in values))
    return out


def scalar_value(tag: str, value: float) -> bytes:
    """A ``Summary.Value`` with ``simple_value`` (a float32, as TensorBoard stores it)."""
    return _bytes_field(1, tag.encode()) + _field(2, 5) + struct.pack("<f", value)


def histogram_value(tag: str, values: np.ndarray, bins: int = 30) -> bytes:
    """A ``Summary.Value`` with a ``HistogramProto`` of ``values`` (``bins`` equal-width
    buckets; bucket ``i`` counts the values in ``(bucket_limit[i-1], bucket_limit[i]]``)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    if v.size == 0:
        limits, counts = np.array([0.0]), np.array([0.0])
        lo = hi = 0.0
    else:
        lo, hi = float(v.min()), float(v.max())
        if lo == hi:
            limits, counts = np.array([hi]), np.array([float(v.size)])
        else:
            counts, edges = np.histogram(v, bins=bins, range=(lo, hi))
            limits, counts = edges[1:], counts.astype(np.float64)
    histo = (_double_field(1, lo) + _double_field(2, hi) + _double_field(3, float(v.size))
             + _double_field(4, float(v.sum())) + _double_field(5, float((v * v).sum()))
             + _bytes_field(6, limits.astype("<f8").tobytes())
             + _bytes_field(7, counts.astype("<f8").tobytes()))
    return _bytes_field(1, tag.encode()) + _bytes_field(5, histo)


# ---- the writer ----------------------------------------------------------------------------
_COUNTER = [0]


class EventFileWriter:
    """Appends events to one new file ``events.out.tfevents.<time>.<host>.<pid>.<n>.v2`` in
    ``logdir`` (created on the first write). An event file is a stream: records are appended
    and flushed, so a reader (TensorBoard) sees whole records as they come."""

    def __init__(self, logdir: str | os.PathLike[str]):
        self.logdir = os.fspath(logdir)
        self.path: str | None = None
        self._file: Any = None

    def _open(self) -> Any:
        if self._file is None:
            os.makedirs(self.logdir, exist_ok=True)
            _COUNTER[0] += 1
            name = (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
                    f"{os.getpid()}.{_COUNTER[0]}.v2")
            self.path = os.path.join(self.logdir, name)
            self._file = open(self.path, "ab")
            self._file.write(frame(encode_event(time.time(), 0, "brain.Event:2")))
        return self._file

    def write(self, step: int, values: list[bytes]) -> None:
        """Appends one event holding the ``Summary.Value`` messages ``values``."""
        self._open().write(frame(encode_event(time.time(), step, values=values)))

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


# ---- the reader (tests, and anyone without TensorBoard) --------------------------------------
def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, Any]]:
    out, i = [], 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = _read_varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((number, value))
    return out


def _decode_value(buf: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in _fields(buf):
        if number == 1:
            out["tag"] = value.decode()
        elif number == 2:
            out["simple_value"] = struct.unpack("<f", value)[0]
        elif number == 5:
            h: dict[str, Any] = {}
            names = {1: "min", 2: "max", 3: "num", 4: "sum", 5: "sum_squares"}
            for n2, v2 in _fields(value):
                if n2 in names:
                    h[names[n2]] = struct.unpack("<d", v2)[0]
                elif n2 in (6, 7):
                    h["bucket_limit" if n2 == 6 else "bucket"] = np.frombuffer(
                        v2, dtype="<f8").tolist()
            out["histo"] = h
    return out


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of a file, each ``{"wall_time", "step", "file_version"?, "values"?}``.

    Raises:
        ValueError: A record whose length or data CRC does not match (names the file and
            the record's offset).
    """
    with open(path, "rb") as f:
        data = f.read()
    events, i = [], 0
    while i < len(data):
        header = data[i:i + 8]
        if len(header) < 8 or struct.unpack("<I", data[i + 8:i + 12])[0] != masked_crc32c(
                header):
            raise ValueError(f"{path}: bad record length CRC at offset {i}")
        n = struct.unpack("<Q", header)[0]
        body = data[i + 12:i + 12 + n]
        if len(body) < n or struct.unpack("<I", data[i + 12 + n:i + 16 + n])[0] != \
                masked_crc32c(body):
            raise ValueError(f"{path}: bad record data CRC at offset {i}")
        event: dict[str, Any] = {"step": 0}
        for number, value in _fields(body):
            if number == 1:
                event["wall_time"] = struct.unpack("<d", value)[0]
            elif number == 2:
                event["step"] = value - (1 << 64) if value >= 1 << 63 else value
            elif number == 3:
                event["file_version"] = value.decode()
            elif number == 5:
                event["values"] = [_decode_value(v) for num, v in _fields(value) if num == 1]
        events.append(event)
        i += 16 + n
    return events
