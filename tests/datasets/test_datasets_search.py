"""Where load_data looks for files, and in which order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kiln.datasets import DatasetNotFoundError, _idx, _source, fashion_mnist, mnist


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("dotted", [False, True])
def test_folder_with_idx_files(tmp_path: Path, helpers, gz: bool, dotted: bool) -> None:
    want = helpers.write_idx_set(tmp_path / "d", gz=gz, dotted=dotted)
    (x_train, y_train), (x_test, y_test) = got = mnist.load_data(tmp_path / "d")
    assert x_train.shape == (6, 28, 28) and y_train.shape == (6,)
    assert x_test.shape == (4, 28, 28) and y_test.shape == (4,)
    helpers.assert_same(got, want)


def test_mixed_spellings_in_one_folder(tmp_path: Path, helpers) -> None:
    want = helpers.write_idx_set(tmp_path, gz=True)
    raw = helpers.file_name(helpers.STEMS[0], gz=False, dotted=True)
    (tmp_path / helpers.file_name(helpers.STEMS[0])).unlink()
    _idx.write_idx(tmp_path / raw, want[0][0])
    helpers.assert_same(mnist.load_data(str(tmp_path)), want)


def test_npz_file_and_npz_in_folder(tmp_path: Path, helpers) -> None:
    want = helpers.write_npz(tmp_path / "mnist.npz")
    helpers.assert_same(mnist.load_data(tmp_path / "mnist.npz"), want)
    helpers.assert_same(mnist.load_data(tmp_path), want)
    fashion = helpers.write_npz(tmp_path / "f" / "fashion-mnist.npz", seed=3)
    helpers.assert_same(fashion_mnist.load_data(tmp_path / "f"), fashion)


def test_path_beats_kiln_data_dir(tmp_path, monkeypatch, helpers) -> None:
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path / "env"))
    helpers.write_idx_set(tmp_path / "env" / "mnist", seed=1)
    want = helpers.write_idx_set(tmp_path / "given", seed=2)
    helpers.assert_same(mnist.load_data(tmp_path / "given"), want)


def test_kiln_data_dir_order(tmp_path, monkeypatch, isolated, helpers) -> None:
    env = tmp_path / "env"
    monkeypatch.setenv("KILN_DATA_DIR", str(env))
    home_set = helpers.write_idx_set(isolated / ".kiln" / "datasets" / "mnist", seed=1)
    root_set = helpers.write_idx_set(env, seed=2)
    named_set = helpers.write_idx_set(env / "mnist", seed=3)
    helpers.assert_same(mnist.load_data(), named_set)  # $KILN_DATA_DIR/mnist first
    for stem in helpers.STEMS:
        (env / "mnist" / helpers.file_name(stem)).unlink()
    helpers.assert_same(mnist.load_data(), root_set)  # then $KILN_DATA_DIR
    monkeypatch.delenv("KILN_DATA_DIR")
    helpers.assert_same(mnist.load_data(), home_set)  # then ~/.kiln/datasets/mnist


def test_missing_path_falls_through(tmp_path, isolated, helpers) -> None:
    want = helpers.write_idx_set(isolated / ".kiln" / "datasets" / "mnist")
    helpers.assert_same(mnist.load_data(tmp_path / "does-not-exist"), want)


def test_fashion_system_folder_comes_last(tmp_path, monkeypatch, isolated, helpers) -> None:
    system = tmp_path / "usr-share"
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", (system,))
    system_set = helpers.write_idx_set(system, seed=1)
    helpers.assert_same(fashion_mnist.load_data(), system_set)
    home_set = helpers.write_idx_set(isolated / ".kiln" / "datasets" / "fashion-mnist", seed=2)
    helpers.assert_same(fashion_mnist.load_data(), home_set)


def test_incomplete_folder_is_skipped(tmp_path, monkeypatch, isolated, helpers) -> None:
    partial = tmp_path / "partial"
    helpers.write_idx_set(partial)
    (partial / helpers.file_name(helpers.STEMS[3])).unlink()
    monkeypatch.setenv("KILN_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetNotFoundError, match="incomplete: .* lacks t10k-labels-idx1-ubyte"):
        mnist.load_data(partial)
    want = helpers.write_idx_set(isolated / ".kiln" / "datasets" / "mnist")
    helpers.assert_same(mnist.load_data(partial), want)


def test_found_but_corrupt_file_is_an_error(tmp_path: Path, helpers) -> None:
    helpers.write_idx_set(tmp_path)
    bad = tmp_path / helpers.file_name(helpers.STEMS[2])
    bad.write_bytes(b"garbage!")
    with pytest.raises(ValueError, match=str(bad)):
        mnist.load_data(tmp_path)


def test_mismatched_counts_are_an_error(tmp_path: Path, helpers) -> None:
    helpers.write_idx_set(tmp_path)
    labels = tmp_path / helpers.file_name(helpers.STEMS[1])
    _idx.write_idx(labels, np.zeros(5, np.uint8))
    with pytest.raises(ValueError, match="do not match"):
        mnist.load_data(tmp_path)


def test_places_are_listed_once_in_order(tmp_path, monkeypatch, isolated) -> None:
    monkeypatch.setenv("KILN_DATA_DIR", str(tmp_path))
    got = [p for _, p in _source.places(mnist.dataset(), tmp_path)]
    home = isolated / ".kiln" / "datasets" / "mnist"
    assert got == [tmp_path, tmp_path / "mnist", home]
    system = [p for _, p in _source.places(fashion_mnist.dataset(), None)]
    assert system[-1] == isolated / ".kiln" / "datasets" / "fashion-mnist"


def test_default_system_folder_is_debians(helpers) -> None:
    assert helpers.FASHION_SYSTEM_DIRS == (Path("/usr/share/datasets/fashion-mnist"),)
