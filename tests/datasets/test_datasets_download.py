"""Downloads from a local HTTP mirror on 127.0.0.1, checksums, and the not-found error."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from kiln.datasets import DatasetNotFoundError, _fetch, fashion_mnist, mnist
from kiln.datasets.__main__ import main


def serve(module: ModuleType, folder: Path, helpers, monkeypatch, seed: int = 0):
    """Write a small gz dataset into ``folder`` and patch its sha256 into ``module``."""
    splits = helpers.write_idx_set(folder, gz=True, seed=seed)
    for stem in helpers.STEMS:
        gz = folder / f"{stem}.gz"
        monkeypatch.setitem(module.SHA256, gz.name, hashlib.sha256(gz.read_bytes()).hexdigest())
        raw = hashlib.sha256(gzip.decompress(gz.read_bytes())).hexdigest()
        monkeypatch.setitem(module.RAW_SHA256, stem, raw)
    return splits


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_into_kiln_data_dir(tmp_path, monkeypatch, helpers, mirror) -> None:
    want = serve(mnist, mirror.root / "files", helpers, monkeypatch)
    monkeypatch.setattr(mnist, "BASE_URL", mirror.url + "files")  # no trailing slash
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "data"))
    helpers.assert_same(mnist.load_data(), want)
    target = tmp_path / "data" / "mnist"
    assert leftovers(target) == sorted(f"{s}.gz" for s in helpers.STEMS)  # no temp files
    assert len(mirror.requests) == 4
    helpers.assert_same(mnist.load_data(), want)  # now found on disk
    assert len(mirror.requests) == 4


def test_env_mirror_and_home_target(isolated, monkeypatch, helpers, mirror) -> None:
    want = serve(fashion_mnist, mirror.root / "fashion-mnist", helpers, monkeypatch, seed=5)
    monkeypatch.setenv("KILN_DATASETS_MIRROR", mirror.url)  # beats fashion_mnist.BASE_URL
    helpers.assert_same(fashion_mnist.load_data(), want)
    assert (
        isolated / ".kiln" / "datasets" / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz"
    ).is_file()
    assert all(r.startswith("/fashion-mnist/") for r in mirror.requests)


def test_only_missing_files_are_fetched(tmp_path, monkeypatch, isolated, helpers, mirror) -> None:
    want = serve(mnist, mirror.root, helpers, monkeypatch)
    monkeypatch.setattr(mnist, "BASE_URL", mirror.url)
    target = isolated / ".kiln" / "datasets" / "mnist"
    target.mkdir(parents=True)
    for stem in helpers.STEMS[:3]:
        (target / f"{stem}.gz").write_bytes((mirror.root / f"{stem}.gz").read_bytes())
    helpers.assert_same(mnist.load_data(), want)
    assert mirror.requests == ["/t10k-labels-idx1-ubyte.gz"]


def test_checksum_mismatch(tmp_path, monkeypatch, helpers, mirror) -> None:
    serve(mnist, mirror.root, helpers, monkeypatch)
    monkeypatch.setattr(mnist, "BASE_URL", mirror.url)
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "data"))
    name = "train-labels-idx1-ubyte.gz"
    actual = mnist.SHA256[name]
    monkeypatch.setitem(mnist.SHA256, name, "0" * 64)
    monkeypatch.setitem(mnist.RAW_SHA256, name[:-3], "1" * 64)
    with pytest.raises(ValueError) as info:
        mnist.load_data()
    message = str(info.value)
    assert name in message and "0" * 64 in message and actual in message
    target = tmp_path / "data" / "mnist"
    assert name not in leftovers(target)
    assert not [n for n in leftovers(target) if n.endswith(".part")]
    assert leftovers(target) == ["train-images-idx3-ubyte.gz"]  # fetched before the bad one


def test_recompressed_gz_is_accepted_by_payload_hash(tmp_path, monkeypatch, helpers, mirror):
    want = serve(mnist, mirror.root, helpers, monkeypatch)
    monkeypatch.setattr(mnist, "BASE_URL", mirror.url)
    monkeypatch.setitem(mnist.SHA256, "t10k-images-idx3-ubyte.gz", "f" * 64)  # other gzip bytes
    helpers.assert_same(mnist.load_data(), want)


def test_http_error_is_not_found(tmp_path, monkeypatch, mirror) -> None:
    monkeypatch.setattr(mnist, "BASE_URL", mirror.url + "empty/")
    with pytest.raises(DatasetNotFoundError, match="404"):
        mnist.load_data()


def test_unreachable_mirror_lists_places(tmp_path, monkeypatch, isolated) -> None:
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "env"))
    given = tmp_path / "given"
    with pytest.raises(FileNotFoundError) as info:
        mnist.load_data(given)
    assert isinstance(info.value, DatasetNotFoundError)
    message = str(info.value)
    for place in (given, tmp_path / "env" / "mnist", tmp_path / "env"):
        assert f"{place} (" in message
    assert str(isolated / ".kiln" / "datasets" / "mnist") in message
    assert mnist.BASE_URL in message and "refused" in message.lower()
    assert "python -m kiln.datasets install mnist" in message and "KILN_DATA_DIR" in message
    assert not (tmp_path / "env").exists()  # no empty folder left behind


def test_fashion_message_has_the_apt_recipe(monkeypatch) -> None:
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", (Path("/nonexistent/fashion"),))
    with pytest.raises(DatasetNotFoundError) as info:
        fashion_mnist.load_data()
    message = str(info.value)
    assert "apt-get install dataset-fashion-mnist" in message
    assert "/nonexistent/fashion (system folder): no such folder" in message


def test_offline_switch_skips_the_download(monkeypatch, mirror) -> None:
    monkeypatch.setattr(mnist, "BASE_URL", mirror.url)
    monkeypatch.setenv("KILN_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetNotFoundError, match="disabled by KILN_DATASETS_OFFLINE"):
        mnist.load_data()
    assert mirror.requests == []


def test_download_function_cleans_up(tmp_path: Path, mirror: SimpleNamespace) -> None:
    (mirror.root / "f.bin").write_bytes(b"payload")
    good = hashlib.sha256(b"payload").hexdigest()
    dest = tmp_path / "out" / "f.bin"
    assert _fetch.download(mirror.url + "f.bin", dest, good) == dest
    assert dest.read_bytes() == b"payload"
    with pytest.raises(_fetch.DownloadError):
        _fetch.download(mirror.url + "missing.bin", tmp_path / "out" / "g.bin", good)
    assert leftovers(tmp_path / "out") == ["f.bin"]


def test_cli_install(tmp_path, monkeypatch, helpers, mirror, capsys) -> None:
    serve(fashion_mnist, mirror.root, helpers, monkeypatch)
    monkeypatch.setattr(fashion_mnist, "BASE_URL", mirror.url)
    assert main(["install", "fashion_mnist", "--dir", str(tmp_path / "fm")]) == 0
    assert "6 training and 4 test images" in capsys.readouterr().out
    monkeypatch.setattr(fashion_mnist, "BASE_URL", mirror.url + "nothing/")
    assert main(["install", "fashion_mnist", "--dir", str(tmp_path / "other")]) == 1
    assert "could not download" in capsys.readouterr().err
