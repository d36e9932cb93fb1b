"""cifar10, cifar100, boston_housing, california_housing and reuters on tiny fixture files
written here in Keras' formats; downloads only from a local mirror on 127.0.0.1."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from kiln.datasets import (
    DatasetNotFoundError,
    boston_housing,
    california_housing,
    cifar10,
    cifar100,
    reuters,
)

MODULES = (boston_housing, california_housing, cifar10, cifar100, reuters)


@pytest.fixture(autouse=True)
def dead_mirrors(monkeypatch, helpers):
    dead = f"http://127.0.0.1:{helpers.closed_port()}/"
    for module in MODULES:
        monkeypatch.setattr(module, "BASE_URL", dead)


# ---- the regression sets ------------------------------------------------------------------
def keras_split(x, y, test_split, seed):
    """Keras' boston/california steps, written out."""
    rng = np.random.RandomState(seed)
    idx = np.arange(len(x))
    rng.shuffle(idx)
    x, y = x[idx], y[idx]
    cut = int(len(x) * (1 - test_split))
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


def test_boston_housing_split_and_seed(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(23, 13)), rng.normal(size=23)
    np.savez(tmp_path / "boston_housing.npz", x=x, y=y)
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path))
    for split, seed in ((0.2, 113), (0.5, 7), (0.0, 1)):
        got = boston_housing.load_data(test_split=split, seed=seed)
        want = keras_split(x, y, split, seed)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g[0], w[0])
            np.testing.assert_array_equal(g[1], w[1])
    assert len(boston_housing.load_data()[0][0]) == int(23 * 0.8)
    with pytest.raises(ValueError, match=r"test_split must be a float in \[0, 1\), received 1"):
        boston_housing.load_data(test_split=1)


def test_california_housing_versions(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(650, 8)), rng.normal(size=650)
    (tmp_path / "california_housing").mkdir()
    np.savez(tmp_path / "california_housing" / "california_housing.npz", x=x, y=y)
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path))
    (xt, yt), (xv, yv) = california_housing.load_data(version="small")
    (wxt, wyt), (wxv, wyv) = keras_split(x[:600], y[:600], 0.2, 113)
    assert xt.shape == (480, 8) and xv.shape == (120, 8)
    np.testing.assert_array_equal(xt, wxt)
    np.testing.assert_array_equal(yv, wyv)
    (xt, _), _ = california_housing.load_data()
    assert xt.shape == (520, 8)
    with pytest.raises(ValueError, match="version must be one of 'small', 'large'; received "
                                         "version='medium'"):
        california_housing.load_data(version="medium")


def test_regression_npz_with_pickles_is_refused(tmp_path):
    x = np.empty(3, dtype=object)
    np.savez(tmp_path / "bad.npz", x=x, y=np.zeros(3))
    with pytest.raises(ValueError, match="bad.npz: not a usable Boston housing .npz"):
        boston_housing.load_data(path=str(tmp_path / "bad.npz"))


def test_boston_download_from_local_mirror(tmp_path, monkeypatch, mirror):
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10.0)
    served = mirror.root / "boston_housing" / "boston_housing.npz"
    served.parent.mkdir()
    np.savez(served, x=x, y=y)
    monkeypatch.setenv("KILN_DATASETS_MIRROR", mirror.url)
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(boston_housing, "NPZ_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="checksum mismatch for boston_housing.npz"):
        boston_housing.load_data()
    assert not (tmp_path / "data" / "boston_housing").exists()  # nothing left behind
    monkeypatch.setattr(boston_housing, "NPZ_SHA256",
                        hashlib.sha256(served.read_bytes()).hexdigest())
    (xt, _), (xv, _) = boston_housing.load_data(test_split=0.3)
    assert (tmp_path / "data" / "boston_housing" / "boston_housing.npz").is_file()
    np.testing.assert_array_equal(np.sort(np.concatenate([xt, xv]), axis=0), x)
    assert mirror.requests == ["/boston_housing/boston_housing.npz"] * 2


def test_not_found_message_lists_places(monkeypatch):
    monkeypatch.setenv("KILN_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetNotFoundError) as info:
        reuters.load_data()
    msg = str(info.value)
    assert "reuters.npz was not found" in msg and "KILN_DATASETS_OFFLINE" in msg
    assert reuters.NPZ_SHA256 in msg and ".keras/datasets" in msg


# ---- reuters ------------------------------------------------------------------------------
def keras_reuters(xs, labels, num_words=None, skip_top=0, maxlen=None, test_split=0.2,
                  seed=113, start_char=1, oov_char=2, index_from=3):
    """Keras' reuters.load_data steps, written out on lists."""
    rng = np.random.RandomState(seed)
    idx = np.arange(len(xs))
    rng.shuffle(idx)
    xs, labels = [xs[i] for i in idx], labels[idx]
    if start_char is not None:
        xs = [[start_char] + [w + index_from for w in x] for x in xs]
    elif index_from:
        xs = [[w + index_from for w in x] for x in xs]
    if maxlen:
        keep = [len(x) < maxlen for x in xs]
        xs, labels = [x for x, k in zip(xs, keep) if k], labels[np.array(keep)]
    if not num_words:
        num_words = max(max(x) for x in xs)
    if oov_char is not None:
        xs = [[w if skip_top <= w < num_words else oov_char for w in x] for x in xs]
    else:
        xs = [[w for w in x if skip_top <= w < num_words] for x in xs]
    cut = int(len(xs) * (1 - test_split))
    return (xs[:cut], labels[:cut]), (xs[cut:], labels[cut:])


def write_reuters(folder: Path, n: int = 17) -> tuple[list, np.ndarray]:
    rng = np.random.default_rng(3)
    xs = [rng.integers(1, 40, size=int(rng.integers(2, 12))).tolist() for _ in range(n)]
    labels = rng.integers(0, 46, size=n)
    x = np.empty(n, dtype=object)
    for i, row in enumerate(xs):
        x[i] = row
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "reuters.npz", x=x, y=labels)  # an object array: stored as a pickle
    return xs, labels


@pytest.mark.parametrize("kwargs", [
    {}, {"num_words": 20, "skip_top": 4}, {"maxlen": 8, "seed": 5},
    {"oov_char": None, "num_words": 25}, {"start_char": None, "index_from": 0},
    {"test_split": 0.5}])
def test_reuters_matches_keras_steps(tmp_path, monkeypatch, kwargs):
    xs, labels = write_reuters(tmp_path / "reuters")
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path))
    got = reuters.load_data(**kwargs)
    want = keras_reuters(xs, labels, **kwargs)
    for (gx, gy), (wx, wy) in zip(got, want):
        assert gx.dtype == object and gx.ndim == 1
        assert [list(r) for r in gx] == wx
        np.testing.assert_array_equal(gy, wy)


def test_reuters_word_index_and_labels(tmp_path, monkeypatch):
    (tmp_path / "reuters").mkdir()
    (tmp_path / "reuters" / "reuters_word_index.json").write_text(json.dumps({"the": 1}))
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path))
    assert reuters.get_word_index() == {"the": 1}
    names = reuters.get_label_names()
    assert len(names) == 46 and names[3] == "earn" and names[-1] == "lead"


def test_reuters_hostile_pickle_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|O", "fortran_order": False,
                                               "shape": (1,)})
    pickle.dump(Evil(), buf, protocol=2)
    import zipfile
    with zipfile.ZipFile(tmp_path / "evil.npz", "w") as z:
        z.writestr("x.npy", buf.getvalue())
        z.writestr("y.npy", _npy(np.zeros(1, dtype=np.int64)))
    with pytest.raises(ValueError, match="only numpy's array reconstruction"):
        reuters.load_data(path=str(tmp_path / "evil.npz"))
    assert not (tmp_path / "pwned").exists()


def _npy(a):
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


# ---- cifar --------------------------------------------------------------------------------
def cifar_batch(n: int, seed: int, label_keys=("labels",), classes=10) -> tuple[bytes, dict]:
    """A CIFAR python-version batch as Keras reads it: a pickled dict, bytes keys."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    d = {b"batch_label": b"test", b"data": data, b"filenames": [b"a.png"] * n}
    for key in label_keys:
        d[key.encode()] = rng.integers(0, classes, size=n).tolist()
    return pickle.dumps(d, protocol=2), d


def write_tar(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, raw in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def test_cifar10_from_archive_in_keras_cache(isolated):
    members, batches = {}, []
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        raw, d = cifar_batch(2, i)
        members[f"cifar-10-batches-py/{name}"] = raw
        batches.append(d)
    cache = isolated / ".keras" / "datasets"
    cache.mkdir(parents=True)
    write_tar(cache / "cifar-10-python.tar.gz", members)
    (x_train, y_train), (x_test, y_test) = cifar10.load_data()
    assert x_train.shape == (10, 32, 32, 3) and x_train.dtype == np.uint8
    assert y_train.shape == (10, 1) and y_train.dtype == np.uint8
    want = np.concatenate([b[b"data"] for b in batches[:5]]).reshape(10, 3, 32, 32)
    np.testing.assert_array_equal(x_train, want.transpose(0, 2, 3, 1))
    # pixel (row 0, col 1, green) is entry 1024 + 1 of the flat record
    assert x_train[0, 0, 1, 1] == batches[0][b"data"][0, 1025]
    np.testing.assert_array_equal(y_train[:, 0], sum((b[b"labels"] for b in batches[:5]), []))
    np.testing.assert_array_equal(y_test[:, 0], batches[5][b"labels"])
    assert x_test.shape == (2, 32, 32, 3)


def test_cifar10_binary_folder(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    rng = np.random.default_rng(0)
    records = {}
    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        rec = rng.integers(0, 256, size=(3, 3073), dtype=np.uint8)
        rec[:, 0] %= 10
        records[name] = rec
        (folder / f"{name}.bin").write_bytes(rec.tobytes())
    (x_train, y_train), (x_test, y_test) = cifar10.load_data(path=folder)
    np.testing.assert_array_equal(y_test[:, 0], records["test_batch"][:, 0])
    np.testing.assert_array_equal(
        x_test, records["test_batch"][:, 1:].reshape(3, 3, 32, 32).transpose(0, 2, 3, 1))
    assert x_train.shape == (15, 32, 32, 3)


def test_cifar100_label_modes(tmp_path, monkeypatch):
    folder = tmp_path / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    raw_train, train = cifar_batch(3, 0, ("fine_labels", "coarse_labels"), 20)
    raw_test, test = cifar_batch(2, 1, ("fine_labels", "coarse_labels"), 20)
    (folder / "train").write_bytes(raw_train)
    (folder / "test").write_bytes(raw_test)
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path))
    for mode in ("fine", "coarse"):
        (x, y), (xt, yt) = cifar100.load_data(label_mode=mode)
        assert y.shape == (3, 1) and yt.shape == (2, 1)
        np.testing.assert_array_equal(y[:, 0], train[f"{mode}_labels".encode()])
        np.testing.assert_array_equal(yt[:, 0], test[f"{mode}_labels".encode()])
        np.testing.assert_array_equal(
            xt, test[b"data"].reshape(2, 3, 32, 32).transpose(0, 2, 3, 1))
    with pytest.raises(ValueError, match="label_mode must be one of 'fine', 'coarse'"):
        cifar100.load_data(label_mode="medium")


def test_cifar_hostile_pickle_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    (folder / "train").write_bytes(pickle.dumps({b"data": Evil()}, protocol=2))
    with pytest.raises(ValueError, match="refers to posix.system"):
        cifar100.load_data(path=folder)
    assert not (tmp_path / "pwned").exists()


def test_cifar10_download_from_local_mirror(tmp_path, monkeypatch, mirror):
    members = {f"cifar-10-batches-py/{n}": cifar_batch(1, i)[0] for i, n in enumerate(
        [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"])}
    (mirror.root / "cifar10").mkdir()
    served = mirror.root / "cifar10" / "cifar-10-python.tar.gz"
    write_tar(served, members)
    monkeypatch.setenv("KILN_DATASETS_MIRROR", mirror.url)
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(cifar10, "ARCHIVE_SHA256", hashlib.sha256(served.read_bytes())
                        .hexdigest())
    (x, y), _ = cifar10.load_data()
    assert x.shape == (5, 32, 32, 3)
    assert (tmp_path / "data" / "cifar10" / "cifar-10-python.tar.gz").is_file()
    cifar10.load_data()
    assert mirror.requests == ["/cifar10/cifar-10-python.tar.gz"]
