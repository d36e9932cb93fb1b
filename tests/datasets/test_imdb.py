"""kiln.datasets.imdb: Keras' processing, the search places, verified downloads from a
local HTTP mirror on 127.0.0.1, and the pickle-free reading of Keras' imdb.npz.

No test reaches the internet: the conftest gives every test a fresh HOME and no KILN_*
variables, and the fixture below points imdb.BASE_URL at a closed localhost port."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kiln.datasets import DatasetNotFoundError, imdb


@pytest.fixture(autouse=True)
def dead_mirror(monkeypatch, helpers) -> None:
    monkeypatch.setattr(imdb, "BASE_URL", f"http://127.0.0.1:{helpers.closed_port()}/imdb/")


def obj_array(items: list) -> np.ndarray:
    """A 1-D object array, as Keras' imdb.npz stores the reviews."""
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def fake_data(n_train: int = 40, n_test: int = 30, seed: int = 0) -> dict[str, np.ndarray]:
    """Reviews of 1 to 14 words drawn from indices 1..59 (Python ints). The first word
    of review i is 100 + i, and its label is i % 2, so alignment can be checked."""
    rng = np.random.default_rng(seed)
    out = {}
    for part, n, base in (("train", n_train, 100), ("test", n_test, 100 + n_train)):
        rows = [[base + i] + rng.integers(1, 60, rng.integers(0, 14)).tolist() for i in range(n)]
        out[f"x_{part}"] = obj_array(rows)
        out[f"y_{part}"] = (np.arange(n) % 2).astype(np.int64)
    return out


def write_fake(path: Path, **kwargs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **fake_data(**kwargs))  # numpy pickles the object arrays, like Keras' file
    return path


def keras_reference(
    path, num_words=None, skip_top=0, maxlen=None, seed=113, start_char=1, oov_char=2,
    index_from=3,
):  # fmt: skip
    """Keras' imdb.load_data as documented, on a trusted file written by these tests."""
    with np.load(path, allow_pickle=True) as f:
        parts = [(list(f["x_train"]), f["y_train"]), (list(f["x_test"]), f["y_test"])]
    rng = np.random.RandomState(seed)  # one generator: train shuffled first, then test
    shuffled = []
    for x, y in parts:
        perm = np.arange(len(x))
        rng.shuffle(perm)
        shuffled.append(([x[i] for i in perm], y[perm]))
    processed = []
    for x, y in shuffled:
        seqs = [([start_char] if start_char is not None else []) + [w + index_from for w in r]
                for r in x]  # fmt: skip
        if maxlen:  # keep only sequences strictly shorter than maxlen
            kept = [i for i, s in enumerate(seqs) if len(s) < maxlen]
            seqs, y = [seqs[i] for i in kept], y[np.array(kept, dtype=np.int64)]
        processed.append((seqs, y))
    if maxlen and not (processed[0][0] and processed[1][0]):
        raise ValueError("no sequence was kept")
    top = num_words or max(w for seqs, _ in processed for s in seqs for w in s)
    out = []
    for seqs, y in processed:
        if oov_char is not None:
            seqs = [[w if skip_top <= w < top else oov_char for w in s] for s in seqs]
        else:
            seqs = [[w for w in s if skip_top <= w < top] for s in seqs]
        out.append((seqs, y))
    return tuple(out)


def assert_like_keras(got, want) -> None:
    for (x, y), (wx, wy) in zip(got, want):
        assert isinstance(x, np.ndarray) and x.dtype == object and x.ndim == 1
        assert all(type(s) is list and all(type(w) is int for w in s) for s in x)
        assert [list(s) for s in x] == wx
        assert y.dtype == np.int64
        np.testing.assert_array_equal(y, wy)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ------------------------------------------------------------------------ Keras semantics


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"num_words": 30},
        {"num_words": 30, "skip_top": 5},
        {"skip_top": 10, "oov_char": None},
        {"num_words": 25, "oov_char": None},
        {"maxlen": 8},
        {"maxlen": 10, "num_words": 40, "skip_top": 4, "seed": 7},
        {"start_char": None},
        {"start_char": None, "index_from": 0},
        {"start_char": 1, "index_from": 0},
        {"start_char": 9, "oov_char": 5, "index_from": 10, "num_words": 50},
        {"num_words": 0},  # falsy: the largest index, like None
        {"seed": 0},
    ],
)
def test_matches_keras(tmp_path, kwargs) -> None:
    path = write_fake(tmp_path / "imdb.npz")
    assert_like_keras(imdb.load_data(path, **kwargs), keras_reference(path, **kwargs))


def test_labels_stay_with_their_reviews(tmp_path) -> None:
    path = write_fake(tmp_path / "imdb.npz")
    splits = imdb.load_data(path, num_words=1000, maxlen=9, index_from=0)
    for (x, y), base in zip(splits, (100, 140)):
        review_ids = [s[1] - base for s in x]  # s[0] is start_char
        assert review_ids != sorted(review_ids)  # shuffled
        assert y.tolist() == [i % 2 for i in review_ids]
    assert len(splits[0][0]) < 40 and len(splits[1][0]) < 30  # maxlen dropped some


def test_defaults_and_num_words_none_quirk(tmp_path) -> None:
    path = write_fake(tmp_path / "imdb.npz")
    (x_train, _), (x_test, _) = imdb.load_data(path)
    top = max(w for s in [*x_train, *x_test] for w in s if w != 2)
    assert all(s[0] == 1 for s in x_train)
    # as in Keras, num_words=None keeps indices below the largest one: that one becomes oov
    largest_raw = 100 + 40 + 30 - 1 + 3
    assert top < largest_raw and any(s[1] == 2 for s in x_test)


def test_equal_length_reviews_still_give_a_1d_object_array(tmp_path) -> None:
    data = {"x_train": obj_array([[5, 6], [7, 8]]), "y_train": np.array([0, 1]),
            "x_test": obj_array([[9, 10]]), "y_test": np.array([1])}  # fmt: skip
    np.savez(tmp_path / "eq.npz", **data)
    (x_train, _), (x_test, _) = imdb.load_data(tmp_path / "eq.npz", num_words=100)
    assert x_train.shape == (2,) and x_test.shape == (1,)
    assert sorted(x_train.tolist()) == [[1, 8, 9], [1, 10, 11]]


def test_maxlen_keeping_nothing_raises(tmp_path) -> None:
    path = write_fake(tmp_path / "imdb.npz")
    with pytest.raises(ValueError, match="no sequence was kept. Increase maxlen"):
        imdb.load_data(path, maxlen=2)


@pytest.mark.parametrize("bad", [{"num_words": 1.5}, {"skip_top": True}, {"maxlen": "10"}])
def test_argument_types(tmp_path, bad) -> None:
    path = write_fake(tmp_path / "imdb.npz")
    with pytest.raises(TypeError, match="must be an int"):
        imdb.load_data(path, **bad)


# ------------------------------------------------------------------ where the file is found


@pytest.mark.parametrize(
    "where",
    [
        "kiln_data_dir/imdb",
        "kiln_data_dir",
        "home/.kiln/datasets/imdb",
        "home/.keras/datasets",
    ],  # fmt: skip
)
def test_search_places(tmp_path, isolated, monkeypatch, where) -> None:
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "kiln_data_dir"))
    root = isolated if where.startswith("home/") else tmp_path
    path = write_fake(root / where.removeprefix("home/") / "imdb.npz")
    assert_like_keras(imdb.load_data(), keras_reference(path))


def test_data_dir_beats_keras_cache_and_names_are_relative(tmp_path, isolated, monkeypatch):
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "data"))
    write_fake(isolated / ".keras" / "datasets" / "imdb.npz", seed=1)
    mine = write_fake(tmp_path / "data" / "imdb" / "imdb.npz", seed=2)
    assert_like_keras(imdb.load_data(), keras_reference(mine))
    other = write_fake(tmp_path / "data" / "sub" / "small.npz", n_train=5, n_test=4)
    assert_like_keras(imdb.load_data("sub/small.npz"), keras_reference(other))
    (x_train, _), _ = imdb.load_data(tmp_path / "data" / "sub" / "small.npz")  # absolute
    assert len(x_train) == 5
    (x_train, _), _ = imdb.load_data(tmp_path / "data" / "imdb")  # a folder: its imdb.npz
    assert len(x_train) == 40


def test_not_found_lists_places_and_how_to_get(tmp_path, isolated, monkeypatch) -> None:
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "env"))
    with pytest.raises(FileNotFoundError) as info:
        imdb.load_data()
    assert isinstance(info.value, DatasetNotFoundError)
    message = str(info.value)
    for place in (tmp_path / "env" / "imdb", tmp_path / "env", isolated / ".keras" / "datasets"):
        assert f"{place / 'imdb.npz'} (" in message
    assert imdb.NPZ_SHA256 in message and "refused" in message.lower()
    assert "KILN_DATA_DIR" in message and "KILN_DATASETS_MIRROR" in message
    assert not (tmp_path / "env").exists()  # no empty folder left behind


def test_offline_switch(monkeypatch, mirror) -> None:
    monkeypatch.setattr(imdb, "BASE_URL", mirror.url)
    monkeypatch.setenv("KILN_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetNotFoundError, match="disabled by KILN_DATASETS_OFFLINE"):
        imdb.load_data()
    assert mirror.requests == []


# ------------------------------------------------------------------------------ downloads


def test_verified_download(tmp_path, monkeypatch, mirror) -> None:
    served = write_fake(mirror.root / "imdb.npz")
    monkeypatch.setattr(imdb, "NPZ_SHA256", hashlib.sha256(served.read_bytes()).hexdigest())
    monkeypatch.setattr(imdb, "BASE_URL", mirror.url)
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "data"))
    want = keras_reference(served, num_words=20)
    assert_like_keras(imdb.load_data(num_words=20), want)
    target = tmp_path / "data" / "imdb"
    assert leftovers(target) == ["imdb.npz"]  # atomically renamed, no .part file
    assert (target / "imdb.npz").read_bytes() == served.read_bytes()
    assert_like_keras(imdb.load_data(num_words=20), want)  # now found on disk
    assert mirror.requests == ["/imdb.npz"]


def test_env_mirror_into_home(isolated, monkeypatch, mirror) -> None:
    served = write_fake(mirror.root / "imdb" / "imdb.npz")
    monkeypatch.setattr(imdb, "NPZ_SHA256", hashlib.sha256(served.read_bytes()).hexdigest())
    monkeypatch.setenv("KILN_DATASETS_MIRROR", mirror.url)
    assert_like_keras(imdb.load_data(), keras_reference(served))
    assert (isolated / ".kiln" / "datasets" / "imdb" / "imdb.npz").is_file()
    assert mirror.requests == ["/imdb/imdb.npz"]


def test_wrong_file_is_rejected_and_not_kept(tmp_path, monkeypatch, mirror) -> None:
    served = write_fake(mirror.root / "imdb.npz")  # imdb.NPZ_SHA256 stays Keras' hash
    monkeypatch.setattr(imdb, "BASE_URL", mirror.url)
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(ValueError) as info:
        imdb.load_data()
    message = str(info.value)
    actual = hashlib.sha256(served.read_bytes()).hexdigest()
    assert "checksum mismatch for imdb.npz" in message
    assert imdb.NPZ_SHA256 in message and actual in message and "discarded" in message
    assert not (tmp_path / "data").exists()  # no file, no .part, no empty folder


def test_http_error_is_not_found(tmp_path, monkeypatch, mirror) -> None:
    monkeypatch.setattr(imdb, "BASE_URL", mirror.url + "nothing/")
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(DatasetNotFoundError, match="404"):
        imdb.load_data()
    assert not (tmp_path / "data").exists()


# --------------------------------------------------------------------------- the word index


def test_word_index_from_disk(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path))
    (tmp_path / "imdb").mkdir()
    (tmp_path / "imdb" / "imdb_word_index.json").write_text('{"the": 1, "and": 2, "a": 3}')
    assert imdb.get_word_index() == {"the": 1, "and": 2, "a": 3}
    (tmp_path / "bad.json").write_text('{"the": "one"}')
    with pytest.raises(ValueError, match="mapping words to integer"):
        imdb.get_word_index(tmp_path / "bad.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="not a JSON word index"):
        imdb.get_word_index(tmp_path / "broken.json")


def test_word_index_download_checks_md5(tmp_path, monkeypatch, mirror) -> None:
    body = json.dumps({"great": 5, "film": 7}).encode()
    (mirror.root / "imdb_word_index.json").write_bytes(body)
    monkeypatch.setattr(imdb, "BASE_URL", mirror.url)
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(ValueError, match="expected md5 bfafd718") as info:  # Keras' md5
        imdb.get_word_index()
    assert hashlib.md5(body).hexdigest() in str(info.value)
    assert not (tmp_path / "data").exists()
    monkeypatch.setattr(imdb, "WORD_INDEX_MD5", hashlib.md5(body).hexdigest())
    assert imdb.get_word_index() == {"great": 5, "film": 7}
    assert leftovers(tmp_path / "data" / "imdb") == ["imdb_word_index.json"]


# -------------------------------------------------------------- reading without unpickling


class _Evil:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def npy_bytes(header_dtype: str, shape: tuple, payload: bytes) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": header_dtype, "fortran_order": False, "shape": shape}
    )
    return out.getvalue() + payload


def write_npz_members(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for key, data in members.items():
            archive.writestr(f"{key}.npy", data)
    return path


def plain_members(**replace: bytes) -> dict[str, bytes]:
    members = {}
    for key, value in fake_data(n_train=4, n_test=3).items():
        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=True)
        members[key] = buf.getvalue()
    return {**members, **replace}


def test_hostile_pickle_is_refused_and_not_run(tmp_path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Evil(f"touch {marker}"), protocol=2)
    path = write_npz_members(
        tmp_path / "imdb.npz", plain_members(x_train=npy_bytes("|O", (1,), payload))
    )
    # The file is live: numpy's own loader with allow_pickle=True runs the command.
    code = f"import numpy as np; np.load({str(path)!r}, allow_pickle=True)['x_train']"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)
    assert marker.exists()
    marker.unlink()
    with pytest.raises(ValueError) as info:
        imdb.load_data(path)
    message = str(info.value)
    assert str(path) in message and "x_train" in message
    assert f"{os.system.__module__}.system" in message and "never runs code" in message
    assert not marker.exists()


@pytest.mark.parametrize(
    ("payload", "expect"),
    [
        (pickle.dumps(eval), "builtins.eval"),
        (pickle.dumps(np.ma.masked_array([[1]])), "numpy.ma.core._mareconstruct"),
        (pickle.dumps([[1, 2]]), "not an array"),
        (pickle.dumps(obj_array([["a"], ["b"]])), "holds str values"),
        (pickle.dumps(obj_array([[1.5]])), "holds float values"),
        (pickle.dumps(obj_array([3, 4])), "not a list of ints"),
        (b"\x80\x02garbage", "refused or unreadable pickle"),
    ],
)
def test_other_bad_pickles(tmp_path, payload, expect) -> None:
    members = plain_members(x_test=npy_bytes("|O", (2,), payload))
    path = write_npz_members(tmp_path / "imdb.npz", members)
    with pytest.raises(ValueError, match="not a usable IMDB .npz file") as info:
        imdb.load_data(path)
    assert expect in str(info.value)


@pytest.mark.parametrize("protocol", [0, 1, 2, 3])
def test_older_pickle_protocols_and_numpy_ints(tmp_path, protocol) -> None:
    """Pickle protocols 0-3 (older numpy and Python 2 wrote 2), numpy int scalars in the
    lists and big-endian int32 arrays as reviews (ways other writers store the same data)
    all read alike."""
    data = fake_data(n_train=6, n_test=5)
    members = {}
    for key, value in data.items():
        if key == "x_train":  # lists of numpy int64 scalars
            value = obj_array([[np.int64(w) for w in row] for row in value])
        elif key == "x_test":  # each review an int32 array
            value = obj_array([np.array(row, dtype=">i4") for row in value])
        if value.dtype == object:
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                header, np.lib.format.header_data_from_array_1_0(value)
            )
            members[key] = header.getvalue() + pickle.dumps(value, protocol=protocol)
        else:
            buf = io.BytesIO()
            np.save(buf, value)
            members[key] = buf.getvalue()
    path = write_npz_members(tmp_path / "odd.npz", members)
    reference = tmp_path / "plain.npz"
    np.savez(reference, **data)
    assert_like_keras(imdb.load_data(path, num_words=40), keras_reference(reference, num_words=40))


@pytest.mark.parametrize(
    ("members", "expect"),
    [
        ({"x_train": None}, "missing arrays ['x_train']"),
        ({"y_train": np.zeros(40, dtype=np.float32)}, "1-D integer array"),
        ({"y_test": np.zeros(2, dtype=np.int64)}, "30 x_test reviews but 2 y_test labels"),
    ],
)
def test_malformed_archives(tmp_path, members, expect) -> None:
    data = {**fake_data(), **members}
    np.savez(tmp_path / "imdb.npz", **{k: v for k, v in data.items() if v is not None})
    with pytest.raises(ValueError, match="not a usable IMDB .npz file") as info:
        imdb.load_data(tmp_path / "imdb.npz")
    assert expect in str(info.value)


def test_not_a_zip(tmp_path) -> None:
    (tmp_path / "imdb.npz").write_bytes(b"<html>not found</html>")
    with pytest.raises(ValueError, match="not a usable IMDB .npz file"):
        imdb.load_data(tmp_path / "imdb.npz")
