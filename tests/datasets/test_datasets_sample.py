"""The MNIST sample shipped in the package, and the real Fashion-MNIST from Debian."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from kiln.datasets import _fetch, _source, fashion_mnist, mnist

DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")


def test_load_sample() -> None:
    (x_train, y_train), (x_test, y_test) = mnist.load_sample()
    assert x_train.shape == (10_000, 28, 28) and y_train.shape == (10_000,)
    assert x_test.shape == (2_000, 28, 28) and y_test.shape == (2_000,)
    for array in (x_train, y_train, x_test, y_test):
        assert array.dtype == np.uint8
    for labels in (y_train, y_test):
        counts = np.bincount(labels, minlength=10)
        assert len(counts) == 10 and counts.min() > 0.5 * counts.mean()
    assert x_train.max() == 255 and x_test.max() == 255
    assert (x_train.reshape(10_000, -1) > 0).any(axis=1).all()  # no blank image
    assert 0.1 < (x_train > 0).mean() < 0.3  # digits cover ~19% of the pixels
    assert y_train[:5].tolist() == [5, 0, 4, 1, 9]  # MNIST's first training labels
    assert y_test[:5].tolist() == [7, 2, 1, 0, 4]  # and test labels


def test_sample_files_ship_with_the_package() -> None:
    data = resources.files("kiln.datasets").joinpath("data")
    assert len(data.joinpath("mnist_sample.npz").read_bytes()) <= 4 * 1024 * 1024
    license_text = data.joinpath("LICENSE-MNIST.txt").read_text()
    for name in ("Yann LeCun", "Corinna Cortes", "Christopher J.C. Burges", "CC BY-SA 3.0"):
        assert name in license_text


def test_sample_is_the_start_of_full_mnist(helpers) -> None:
    folder = helpers.REAL_HOME / ".kiln" / "datasets" / "mnist"
    if _source.probe(mnist.dataset(), folder)[0] is None:
        pytest.skip(f"full MNIST not installed in {folder} (python -m kiln.datasets install mnist)")
    (x_train, y_train), (x_test, y_test) = mnist.load_data(folder)
    (sx_train, sy_train), (sx_test, sy_test) = mnist.load_sample()
    np.testing.assert_array_equal(sx_train, x_train[:10_000])
    np.testing.assert_array_equal(sy_train, y_train[:10_000])
    np.testing.assert_array_equal(sx_test, x_test[:2_000])
    np.testing.assert_array_equal(sy_test, y_test[:2_000])


@pytest.mark.skipif(not DEBIAN_FASHION.is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_full_fashion_mnist_from_debian(monkeypatch, helpers) -> None:
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", helpers.FASHION_SYSTEM_DIRS)
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_data()
    assert x_train.shape == (60_000, 28, 28) and y_train.shape == (60_000,)
    assert x_test.shape == (10_000, 28, 28) and y_test.shape == (10_000,)
    assert x_train.dtype == y_train.dtype == x_test.dtype == y_test.dtype == np.uint8
    assert np.bincount(y_train, minlength=10).tolist() == [6_000] * 10
    assert np.bincount(y_test, minlength=10).tolist() == [1_000] * 10
    assert y_train[0] == 9 and fashion_mnist.CLASS_NAMES[9] == "Ankle boot"


@pytest.mark.skipif(not DEBIAN_FASHION.is_dir(), reason="apt-get install dataset-fashion-mnist")
@pytest.mark.parametrize("name", sorted(fashion_mnist.SHA256))
def test_debian_fashion_files_pass_the_download_check(name: str) -> None:
    # Debian recompressed the upstream gz files; their payload hashes must still match.
    raw_sha256 = fashion_mnist.RAW_SHA256[name[:-3]]
    _fetch.verify(DEBIAN_FASHION / name, name, fashion_mnist.SHA256[name], raw_sha256)


@pytest.mark.parametrize("module", [mnist, fashion_mnist])
def test_checksum_tables_are_well_formed(module) -> None:
    assert sorted(module.SHA256) == sorted(f"{s}.gz" for s in _source.FILES)
    assert sorted(module.RAW_SHA256) == sorted(_source.FILES)
    for digest in [*module.SHA256.values(), *module.RAW_SHA256.values()]:
        assert len(digest) == 64 and int(digest, 16) >= 0
