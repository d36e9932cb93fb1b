"""Dataset readers bound what they read by what the dataset can hold (issue: a 2 MiB
imdb.npz reached 4.1 GiB of peak memory before it was refused): a zip member inflating past
the dataset's limit, an ``.npy`` header declaring more data than its member holds, and a
pickle whose rows alias one another are refused with an error naming the file and member,
before the memory is spent (checked with tracemalloc, which sees NumPy's allocations)."""

from __future__ import annotations

import io
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kiln.datasets import _idx, _npz, _regression, imdb


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=True)
    return buf.getvalue()


def write_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(f"{name}.npy", data)
    return path


def obj_array(items: list) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def small_imdb_members() -> dict[str, bytes]:
    rows = obj_array([[1, 5, 7], [1, 9]])
    labels = np.array([0, 1], np.int64)
    return {"x_train": npy_bytes(rows), "y_train": npy_bytes(labels),
            "x_test": npy_bytes(rows), "y_test": npy_bytes(labels)}


def peak_mib(fn) -> float:
    tracemalloc.start()
    try:
        fn()
    except ValueError:
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def test_a_member_that_inflates_past_the_limit_is_refused_before_reading(tmp_path):
    # 200 MiB of zeros deflate to ~0.2 MiB: over imdb's 128 MiB member limit
    members = small_imdb_members()
    members["y_train"] = npy_bytes(np.zeros(200 * 2**20 // 8, np.int64))
    path = write_zip(tmp_path / "imdb.npz", members)
    assert path.stat().st_size < 2**20
    with pytest.raises(ValueError, match=r"imdb.npz: not a usable IMDB .npz file: y_train.npy "
                                         r"declares 209,715,\d+ bytes uncompressed"):
        imdb.load_data(path)
    assert peak_mib(lambda: imdb.load_data(path)) < 16


def test_a_header_declaring_more_than_its_member_holds_is_refused(tmp_path):
    members = small_imdb_members()
    header = npy_bytes(np.zeros(2, np.int64))
    # the same header text with a shape of 10**9 elements, the data still 16 bytes
    forged = header.replace(b"(2,)", b"(1000000000,)")
    forged = forged[:8] + (len(forged) - 10 - 16).to_bytes(2, "little") + forged[10:]
    members["y_test"] = forged
    path = write_zip(tmp_path / "imdb.npz", members)
    with pytest.raises(ValueError, match=r"y_test.npy: its header declares shape "
                                         r"\(1000000000,\) of int64 \(8,000,000,000 bytes\)"):
        imdb.load_data(path)
    assert peak_mib(lambda: imdb.load_data(path)) < 16


def test_rows_aliasing_one_another_are_refused(tmp_path):
    """25,000 references to one 20,000-word review pickle to ~0.3 MB (memo references) but
    are 500 million words once each row is processed."""
    shared = list(range(1, 20001))
    members = small_imdb_members()
    members["x_train"] = npy_bytes(obj_array([shared] * 25000))
    members["y_train"] = npy_bytes(np.zeros(25000, np.int64))
    path = write_zip(tmp_path / "imdb.npz", members)
    with pytest.raises(ValueError, match=r"x_train: its rows hold 500,000,000 word indices, "
                                         r"more than its [\d,]+ bytes can spell"):
        imdb.load_data(path)
    assert peak_mib(lambda: imdb.load_data(path)) < 64


@pytest.mark.parametrize("reader,keys,title", [
    (lambda p: _regression.read_xy(p, "Boston housing"), ("x", "y"),
     "not a usable Boston housing .npz file"),
    (_idx.read_npz, _idx.NPZ_KEYS, "not a usable dataset .npz file"),
])
def test_numeric_readers_refuse_inflating_members(tmp_path, reader, keys, title):
    members = {k: npy_bytes(np.zeros(4, np.uint8)) for k in keys}
    members[keys[0]] = npy_bytes(np.zeros(300 * 2**20, np.uint8))  # over both limits
    path = write_zip(tmp_path / "bad.npz", members)
    with pytest.raises(ValueError, match=title + ".*declares 314,572,\\d+ bytes uncompressed"):
        reader(path)
    assert peak_mib(lambda: reader(path)) < 16


def test_legitimate_numeric_members_read_back_exactly(tmp_path):
    data = {"x": np.arange(24, dtype=np.float32).reshape(6, 4), "y": np.arange(6.0)}
    path = write_zip(tmp_path / "ok.npz", {k: npy_bytes(v) for k, v in data.items()})
    got = _npz.read_all(path, ("x", "y"), _npz.MiB)
    for k, v in data.items():
        np.testing.assert_array_equal(got[k], v)
        assert got[k].dtype == v.dtype
