"""The idx and npz readers in kiln.datasets._idx."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from kiln.datasets import _idx


@pytest.mark.parametrize("name", ["images-idx3-ubyte", "images-idx3-ubyte.gz"])
def test_roundtrip_raw_and_gzipped(tmp_path: Path, name: str) -> None:
    images = np.arange(3 * 28 * 28, dtype=np.int64).reshape(3, 28, 28).astype(np.uint8)
    path = _idx.write_idx(tmp_path / name, images)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    got = _idx.read_idx(path)
    assert got.dtype == np.uint8 and got.shape == (3, 28, 28)
    np.testing.assert_array_equal(got, images)
    got[0, 0, 0] = 7  # writable, like Keras' arrays


def test_labels_header_is_the_mnist_one(tmp_path: Path) -> None:
    path = _idx.write_idx(tmp_path / "labels", np.array([5, 0, 4], dtype=np.uint8))
    assert path.read_bytes() == bytes.fromhex("00000801 00000003 050004")
    np.testing.assert_array_equal(_idx.read_idx(path), [5, 0, 4])


def test_gzip_is_detected_from_content(tmp_path: Path) -> None:
    path = tmp_path / "labels-idx1-ubyte"  # no .gz suffix
    path.write_bytes(gzip.compress(bytes.fromhex("00000801 00000002 0109")))
    np.testing.assert_array_equal(_idx.read_idx(path), [1, 9])


@pytest.mark.parametrize("gz", [False, True])
def test_bad_magic_names_the_file(tmp_path: Path, gz: bool) -> None:
    data = b"<html>not found</html>"
    path = tmp_path / ("train-images-idx3-ubyte" + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(ValueError, match="magic") as info:
        _idx.read_idx(path)
    assert str(path) in str(info.value)
    assert "not an idx file" in str(info.value)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.*not an idx file|not an idx file"):
        _idx.read_idx(path)


def test_non_uint8_payload_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "floats"
    path.write_bytes(bytes.fromhex("00000d01 00000001") + struct.pack(">f", 1.0))
    with pytest.raises(ValueError, match="unsupported idx data type 0x0d"):
        _idx.read_idx(path)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (bytes.fromhex("00000803 00000002 0000001c"), "truncated idx header"),
        (bytes.fromhex("00000801 00000004 010203"), "truncated idx payload"),
        (bytes.fromhex("00000801 00000002 010203"), "unexpected data after"),
    ],
)
def test_truncated_or_overlong(tmp_path: Path, payload: bytes, message: str) -> None:
    path = tmp_path / "bad-idx1-ubyte"
    path.write_bytes(payload)
    with pytest.raises(ValueError, match=message):
        _idx.read_idx(path)


def test_corrupt_gzip_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    blob = gzip.compress(bytes.fromhex("00000801 00000100") + bytes(range(256)) * 1)
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte.gz"):
        _idx.read_idx(path)


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        _idx.read_idx(tmp_path / "nope")


def test_read_npz(tmp_path: Path, helpers) -> None:
    want = helpers.write_npz(tmp_path / "mnist.npz")
    helpers.assert_same(_idx.read_npz(tmp_path / "mnist.npz"), want)


def test_npz_missing_key(tmp_path: Path) -> None:
    path = tmp_path / "mnist.npz"
    np.savez(path, x_train=np.zeros((1, 28, 28), np.uint8))
    with pytest.raises(ValueError, match=r"mnist\.npz.*missing arrays \['y_train'"):
        _idx.read_npz(path)


@pytest.mark.parametrize("content", [b"not a zip file at all", "npy"])
def test_not_an_npz(tmp_path: Path, content: bytes | str) -> None:
    path = tmp_path / "mnist.npz"
    if content == "npy":
        with open(path, "wb") as f:
            np.save(f, np.zeros(3, np.uint8))
    else:
        path.write_bytes(content)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a usable dataset .npz"):
        _idx.read_npz(path)


def test_check_splits(helpers) -> None:
    (x_train, y_train), test = helpers.make_splits()
    assert _idx.check_splits(((x_train, y_train), test), "src")[0][0] is x_train
    with pytest.raises(ValueError, match="src: train images .* do not match"):
        _idx.check_splits(((x_train, y_train[:-1]), test), "src")
    with pytest.raises(ValueError, match="must be uint8"):
        _idx.check_splits(((x_train.astype(np.float32), y_train), test), "src")
