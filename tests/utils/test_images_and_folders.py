"""load_img / img_to_array / array_to_img / save_img round trips (lossless PNG),
image_dataset_from_directory and text_dataset_from_directory against Keras' indexing,
shuffling and split written out here; fit on a folder of images."""

from __future__ import annotations

import builtins
import os

import numpy as np
import pytest

import kiln
from kiln import layers

PIL = pytest.importorskip("PIL")


def write_images(root, classes=("cat", "dog"), per_class=3, size=(5, 4), seed=0):
    """PNG files (lossless) root/<class>/img_<i>.png; returns {path: pixels (h, w, 3)}."""
    rng = np.random.default_rng(seed)
    out = {}
    for c in classes:
        os.makedirs(root / c, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
            path = root / c / f"img_{i}.png"
            kiln.utils.save_img(path, pixels, scale=False)
            out[str(path)] = pixels
    return out


def test_save_load_round_trip(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, size=(6, 7, 3), dtype=np.uint8)
    kiln.utils.save_img(tmp_path / "a.png", pixels, scale=False)
    assert sorted(os.listdir(tmp_path)) == ["a.png"]  # written via a temp file
    img = kiln.utils.load_img(tmp_path / "a.png")
    x = kiln.utils.img_to_array(img)
    assert x.dtype == np.float32 and x.shape == (6, 7, 3)
    np.testing.assert_array_equal(x, pixels)
    np.testing.assert_array_equal(kiln.utils.img_to_array(img, "channels_first"),
                                  pixels.transpose(2, 0, 1))
    gray = kiln.utils.img_to_array(kiln.utils.load_img(tmp_path / "a.png", "grayscale"))
    assert gray.shape == (6, 7, 1)
    small = kiln.utils.load_img(tmp_path / "a.png", target_size=(3, 2))
    assert small.size == (2, 3)  # PIL sizes are (width, height)
    # scale=True maps [min, max] to [0, 255]
    img = kiln.utils.array_to_img(np.array([[[0.0], [0.5]], [[1.0], [0.25]]]))
    np.testing.assert_array_equal(np.asarray(img), [[0, 127], [255, 63]])
    with pytest.raises(ValueError, match="unsupported channel number 2"):
        kiln.utils.array_to_img(np.zeros((2, 2, 2)))


def test_missing_pillow_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_pil(name, *args, **kwargs):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("No module named 'PIL'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    with pytest.raises(ImportError, match=r'pip install "kiln-nn\[images\]"'):
        kiln.utils.load_img("x.png")


def keras_index(files, classes, seed):
    """Keras' order: classes in order, files sorted in each, then one shuffle of paths and
    one of labels, each with RandomState(seed)."""
    paths, labels = [], []
    for i, c in enumerate(classes):
        mine = sorted(p for p in files if os.path.basename(os.path.dirname(p)) == c)
        paths += mine
        labels += [i] * len(mine)
    if seed is not None:
        np.random.RandomState(seed).shuffle(paths)
        np.random.RandomState(seed).shuffle(labels)
    return paths, np.array(labels)


def test_image_dataset_order_labels_and_split(tmp_path, capsys):
    files = write_images(tmp_path, per_class=4)
    train, val = kiln.utils.image_dataset_from_directory(
        tmp_path, image_size=(4, 5), batch_size=3, seed=9, validation_split=0.25,
        subset="both", label_mode="categorical")
    assert "Found 8 files belonging to 2 classes." in capsys.readouterr().out
    paths, labels = keras_index(files, ["cat", "dog"], 9)
    assert train.file_paths == paths[:6] and val.file_paths == paths[6:]
    assert train.class_names == ["cat", "dog"] and len(train) == 2 and len(val) == 1
    xs, ys = zip(*train)
    np.testing.assert_array_equal(np.concatenate(xs), np.stack([files[p] for p in paths[:6]]))
    np.testing.assert_array_equal(np.concatenate(ys), np.eye(2)[labels[:6]])
    assert xs[0].dtype == np.float32 and xs[0].shape == (3, 4, 5, 3)
    # no shuffle: sorted order; grayscale and int labels; a second epoch is the same
    ds = kiln.utils.image_dataset_from_directory(tmp_path, image_size=(2, 2), shuffle=False,
                                                 color_mode="grayscale", batch_size=8,
                                                 verbose=False)
    (x, y), = list(ds)
    assert x.shape == (8, 2, 2, 1) and y.dtype == np.int32 and y.tolist() == [0] * 4 + [1] * 4
    (x2, _), = list(ds)
    np.testing.assert_array_equal(x, x2)


@pytest.mark.parametrize("kwargs, match", [
    ({"label_mode": "binary", "class_names": ["cat"]}, "needs exactly 2 classes"),
    ({"validation_split": 0.2}, "if subset is set, validation_split must be set"),
    ({"validation_split": 0.2, "subset": "training"}, "pass a seed"),
    ({"class_names": ["cow"]}, r"class_names \['cow'\] do not match the sub-folders"),
    ({"labels": [0, 1]}, "len\\(labels\\) is 2 but 6 files"),
    ({"image_size": (0, 3)}, "image_size must be \\(height, width\\)"),
])
def test_image_dataset_bad_arguments(tmp_path, kwargs, match):
    write_images(tmp_path)
    with pytest.raises(ValueError, match=match):
        kiln.utils.image_dataset_from_directory(tmp_path, verbose=False, **kwargs)


def test_fit_on_image_folder(tmp_path):
    files = write_images(tmp_path, per_class=5, size=(4, 4))
    ds = kiln.utils.image_dataset_from_directory(tmp_path, image_size=(4, 4), batch_size=4,
                                                 shuffle=False, label_mode="binary",
                                                 verbose=False)
    x = np.stack([files[p] for p in ds.file_paths]).astype(np.float32)
    y = np.array([[0.0]] * 5 + [[1.0]] * 5, dtype=np.float32)

    def model():
        kiln.utils.set_random_seed(2)
        m = kiln.Sequential([kiln.Input((4, 4, 3)), layers.Lambda(lambda t: t * (1 / 255)),
                             layers.Flatten(), layers.Dense(1, activation="sigmoid")])
        m.compile("sgd", "binary_crossentropy")
        return m

    a, b = model(), model()
    a.fit(ds, epochs=2, verbose=0)
    b.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(wa, wb, rtol=1e-6)


def test_text_dataset(tmp_path):
    texts = {}
    for c in ("neg", "pos"):
        (tmp_path / c).mkdir()
        for i in range(3):
            path = tmp_path / c / f"{i}.txt"
            path.write_text(f"{c} review number {i} ünïcode", encoding="utf-8")
            texts[str(path)] = path.read_text(encoding="utf-8")
    (tmp_path / "pos" / "notes.md").write_text("ignored")
    ds = kiln.utils.text_dataset_from_directory(tmp_path, batch_size=4, seed=3, max_length=10,
                                                label_mode="binary", verbose=False)
    paths, labels = keras_index(texts, ["neg", "pos"], 3)
    assert ds.file_paths == paths
    got_t, got_y = zip(*ds)
    assert [t for b in got_t for t in b] == [texts[p][:10] for p in paths]
    np.testing.assert_array_equal(np.concatenate(got_y)[:, 0], labels)
    assert got_y[0].dtype == np.float32
    only = kiln.utils.text_dataset_from_directory(tmp_path, labels=None, shuffle=False,
                                                  batch_size=None, verbose=False)
    assert list(only) == [texts[p] for p in sorted(texts)]


def test_text_files_are_read_up_to_max_length_and_bad_utf8_names_the_file(tmp_path):
    """Only max_length bytes of each file are read (a character cut in two is dropped, as
    Keras' tf.strings.substr leaves it undecodable); a file that is not UTF-8 gives an error
    naming it."""
    import tracemalloc

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "big.txt").write_bytes(b"x" * (64 << 20))   # 64 MiB
    (tmp_path / "b" / "accent.txt").write_bytes("ab\u00e9cd".encode())  # e-acute: 2 bytes
    tracemalloc.start()
    ds = kiln.utils.text_dataset_from_directory(tmp_path, batch_size=None, max_length=3,
                                                shuffle=False)
    texts = sorted(str(t if isinstance(t, str) else t.decode()) for t, _ in
                   ((np.asarray(x).item(), y) for x, y in ds))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert texts == ["ab", "xxx"]  # "ab" + half of the e-acute: the half is dropped
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB for 3 bytes a file"
    (tmp_path / "b" / "bad.txt").write_bytes(b"ok \xff\xfe not utf-8")
    with pytest.raises(ValueError, match=r"bad.txt is not UTF-8 text \(invalid start byte at "
                                         r"byte 3\)"):
        list(kiln.utils.text_dataset_from_directory(tmp_path, batch_size=None, shuffle=False))
