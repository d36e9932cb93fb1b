"""kiln.utils.Dataset: each tf.data-style method against a NumPy/Python oracle (and against
tf.data itself where TensorFlow is installed); the dataset utilities return kiln's dataset or
TensorFlow's as the switch says; fit/evaluate/predict consume both."""

import numpy as np
import pytest

import kiln
from kiln.utils import Dataset, tf_interop
from kiln.utils.dataset_ops import INFINITE, UNKNOWN


def _lists(ds):
    return [np.asarray(e).tolist() for e in ds]


def test_from_tensor_slices_map_batch():
    ds = Dataset.from_tensor_slices(np.arange(10))
    assert len(ds) == 10 and ds.cardinality() == 10
    out = ds.map(lambda x: x * 2).batch(4)
    assert _lists(out) == [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]]
    assert len(out) == 3
    assert len(ds.batch(4, drop_remainder=True)) == 2
    assert _lists(ds.batch(4, drop_remainder=True))[-1] == [4, 5, 6, 7]


def test_tuple_and_dict_elements_batch_and_unbatch():
    x = np.arange(12.0).reshape(6, 2)
    y = np.arange(6)
    ds = Dataset.from_tensor_slices((x, y)).batch(4)
    (xb, yb), (xb2, yb2) = list(ds)
    np.testing.assert_array_equal(xb, x[:4])
    np.testing.assert_array_equal(yb2, y[4:])
    rows = list(ds.unbatch())
    assert len(rows) == 6 and isinstance(rows[0], tuple)
    np.testing.assert_array_equal(rows[5][0], x[5])
    d = Dataset.from_tensor_slices({"a": x, "b": y}).map(lambda e: {"s": e["a"].sum() + e["b"]})
    np.testing.assert_array_equal([e["s"] for e in d], x.sum(1) + y)
    # map unpacks tuple elements as tf.data does
    m = Dataset.from_tensor_slices((x, y)).map(lambda a, b: a[0] * b)
    np.testing.assert_array_equal(list(m), x[:, 0] * y)


def test_range_zip_enumerate_and_element_spec():
    assert _lists(Dataset.range(2, 8, 3)) == [2, 5] and len(Dataset.range(5)) == 5
    z = Dataset.zip(Dataset.range(3), Dataset.from_tensor_slices(np.array([1.5, 2.5, 3.5, 4.5])))
    assert len(z) == 3 and [(int(a), float(b)) for a, b in z] == [(0, 1.5), (1, 2.5), (2, 3.5)]
    assert [int(i) for i, _ in Dataset.range(3).enumerate(start=10)] == [10, 11, 12]
    x = np.zeros((5, 2), np.float32)
    spec = Dataset.from_tensor_slices((x, np.arange(5))).batch(2).element_spec
    assert spec == (((None, 2), np.dtype("float32")), ((None,), np.dtype("int64")))


def test_strings_batch_into_object_arrays():
    ds = Dataset.from_tensor_slices(np.array(["a b", "c", "d e f"])).map(str).batch(2)
    first = next(iter(ds))
    assert first.dtype == object and first.tolist() == ["a b", "c"]


def test_take_skip_repeat_concatenate_filter_rebatch():
    ds = Dataset.from_tensor_slices(np.arange(5))
    assert _lists(ds.take(2)) == [0, 1] and len(ds.take(2)) == 2
    assert _lists(ds.take(-1)) == [0, 1, 2, 3, 4]
    assert _lists(ds.skip(3)) == [3, 4] and len(ds.skip(9)) == 0
    assert _lists(ds.repeat(2)) == [0, 1, 2, 3, 4] * 2 and len(ds.repeat(2)) == 10
    assert ds.repeat().cardinality() == INFINITE
    assert _lists(ds.repeat().take(7)) == [0, 1, 2, 3, 4, 0, 1]
    assert _lists(ds.concatenate(ds.take(2))) == [0, 1, 2, 3, 4, 0, 1]
    ev = ds.filter(lambda x: x % 2 == 0)
    assert _lists(ev) == [0, 2, 4] and ev.cardinality() == UNKNOWN
    with pytest.raises(TypeError, match="unknown"):
        len(ev)
    assert _lists(ds.batch(2).rebatch(3)) == [[0, 1, 2], [3, 4]]
    with pytest.raises(ValueError, match="Dataset.batch: batch_size must be a positive"):
        ds.batch(0)
    with pytest.raises(ValueError, match="Dataset.take: count"):
        ds.take(-3)


def test_shuffle_is_a_permutation_seeded_and_reshuffled():
    ds = Dataset.from_tensor_slices(np.arange(50)).shuffle(100, seed=3)
    a, b = _lists(ds), _lists(ds)
    assert sorted(a) == list(range(50)) and sorted(b) == list(range(50))
    assert a != list(range(50)) and a != b  # a new order every iteration
    assert _lists(Dataset.from_tensor_slices(np.arange(50)).shuffle(100, seed=3)) == a
    fixed = Dataset.from_tensor_slices(np.arange(50)).shuffle(
        100, seed=1, reshuffle_each_iteration=False)
    assert _lists(fixed) == _lists(fixed)
    # a buffer of 1 keeps the order (tf.data's semantics)
    assert _lists(Dataset.from_tensor_slices(np.arange(9)).shuffle(1)) == list(range(9))


def test_cache_reads_the_source_once_and_prefetch_is_transparent():
    calls = []

    def gen():
        calls.append(1)
        yield from range(3)
    ds = Dataset.from_generator(gen, 3).cache().prefetch(2)
    assert _lists(ds) == [0, 1, 2] and _lists(ds) == [0, 1, 2]
    assert len(calls) == 1
    assert list(ds.as_numpy_iterator()) == [0, 1, 2]


def test_timeseries_dataset_has_the_dataset_methods():
    data = np.arange(20.0)
    ds = kiln.utils.timeseries_dataset_from_array(data, None, sequence_length=3, batch_size=4)
    assert isinstance(ds, Dataset) and len(ds) == 5
    windows = np.stack(list(ds.unbatch()))
    np.testing.assert_array_equal(windows, np.stack([data[i:i + 3] for i in range(18)]))
    assert len(list(ds.take(2))) == 2
    np.testing.assert_array_equal(next(iter(ds.map(lambda x: x.sum(1)))), [3, 6, 9, 12])


def test_text_dataset_has_class_names_after_map(tmp_path):
    for cls, texts in (("neg", ["bad", "awful"]), ("pos", ["good"])):
        (tmp_path / cls).mkdir()
        for i, t in enumerate(texts):
            (tmp_path / cls / f"{i}.txt").write_text(t)
    ds = kiln.utils.text_dataset_from_directory(tmp_path, shuffle=False, batch_size=2,
                                                verbose=False)
    assert ds.class_names == ["neg", "pos"]
    mapped = ds.map(lambda x, y: (x, y + 1))
    assert mapped.class_names == ["neg", "pos"]
    texts = [t for b, _ in mapped for t in b]
    assert texts == ["bad", "awful", "good"]


def test_text_max_length_counts_utf8_bytes_as_keras(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "0.txt").write_text("héllo wörld", encoding="utf-8")
    ds = kiln.utils.text_dataset_from_directory(tmp_path, max_length=6, batch_size=None,
                                                verbose=False)
    text, _ = next(iter(ds))
    assert text == "héllo"  # 6 bytes: h, é (2 bytes), l, l, o


def test_switch_and_env(monkeypatch):
    monkeypatch.setattr(tf_interop, "_format", [None])
    monkeypatch.setenv("KILN_DATASET", "kiln")
    assert tf_interop.dataset_format() == "kiln"
    monkeypatch.setenv("KILN_DATASET", "bogus")
    with pytest.raises(ValueError, match="KILN_DATASET must be one of"):
        tf_interop.dataset_format()
    with pytest.raises(ValueError, match="set_dataset_format: format must be one of"):
        kiln.utils.set_dataset_format("torch")
    # without TensorFlow: "auto" gives kiln's datasets, "tf" a clear error
    monkeypatch.setattr(tf_interop, "tf_available", lambda: False)
    monkeypatch.setenv("KILN_DATASET", "auto")
    assert tf_interop.dataset_format() == "kiln"
    ds = kiln.utils.timeseries_dataset_from_array(np.arange(6.0), None, 2, batch_size=2)
    assert isinstance(ds, Dataset)
    monkeypatch.setenv("KILN_DATASET", "tf")
    with pytest.raises(ImportError, match="TensorFlow is not installed"):
        tf_interop.dataset_format()


def _model():
    kiln.utils.set_random_seed(0)
    m = kiln.Sequential([kiln.Input((3, 1)), kiln.layers.Flatten(), kiln.layers.Dense(1)])
    m.compile("sgd", "mse")
    return m


def test_fit_consumes_kiln_dataset():
    x = np.random.RandomState(0).rand(32, 3, 1).astype("float32")
    y = x.sum((1, 2))[:, None]
    ds = Dataset.from_tensor_slices((x, y)).batch(8)
    m = _model()
    h = m.fit(ds, epochs=2, verbose=0)
    assert len(h.history["loss"]) == 2
    m2 = _model()
    m2.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    np.testing.assert_allclose(m.predict(ds, verbose=0), m2.predict(x, verbose=0), rtol=1e-5)
    assert np.isfinite(m.evaluate(ds, verbose=0))


# --- with TensorFlow: Keras' type, Keras' elements ------------------------------------------

def test_tf_timeseries_matches_keras(monkeypatch):
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    monkeypatch.setattr(tf_interop, "_format", ["tf"])
    data = np.arange(60.0).reshape(30, 2)
    args = dict(sequence_length=4, sequence_stride=2, sampling_rate=2, batch_size=3,
                shuffle=True, seed=11, start_index=1)
    ours = kiln.utils.timeseries_dataset_from_array(data, data[:, 0], **args)
    theirs = keras.utils.timeseries_dataset_from_array(data, data[:, 0], **args)
    assert isinstance(ours, tf.data.Dataset)
    assert int(ours.cardinality()) == int(theirs.cardinality()) == len(ours)
    for (a, b), (c, d) in zip(ours.as_numpy_iterator(), theirs.as_numpy_iterator()):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
        assert a.dtype == c.dtype and b.dtype == d.dtype
    assert theirs.element_spec[0].is_compatible_with(ours.element_spec[0])


def test_tf_text_dataset_matches_keras(tmp_path, monkeypatch):
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    monkeypatch.setattr(tf_interop, "_format", ["tf"])
    for cls, texts in (("a", ["one two", "three"]), ("b", ["four", "five six", "seven"])):
        (tmp_path / cls).mkdir()
        for i, t in enumerate(texts):
            (tmp_path / cls / f"{i}.txt").write_text(t)
    kw = dict(batch_size=2, seed=4, label_mode="categorical", verbose=False)
    ours = kiln.utils.text_dataset_from_directory(tmp_path, **kw)
    theirs = keras.utils.text_dataset_from_directory(tmp_path, **kw)
    assert isinstance(ours, tf.data.Dataset) and ours.class_names == theirs.class_names
    assert [s.dtype for s in ours.element_spec] == [s.dtype for s in theirs.element_spec]
    ot = [(x.tolist(), y.tolist()) for x, y in ours.as_numpy_iterator()]
    kt = [(x.tolist(), y.tolist()) for x, y in theirs.as_numpy_iterator()]
    assert ot == kt
    # fit consumes the tf.data dataset of strings after a map to numbers
    lengths = ours.map(lambda x, y: (tf.cast(tf.strings.length(x)[:, None], "float32"), y))
    m = kiln.Sequential([kiln.Input((1,)), kiln.layers.Dense(2, activation="softmax")])
    m.compile("sgd", "categorical_crossentropy")
    assert len(m.fit(lengths, epochs=1, verbose=0).history["loss"]) == 1


def test_tf_image_dataset_structure_matches_keras(tmp_path, monkeypatch):
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    Image = pytest.importorskip("PIL.Image")
    monkeypatch.setattr(tf_interop, "_format", ["tf"])
    rng = np.random.RandomState(0)
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.fromarray(rng.randint(0, 255, (4, 4, 3), dtype=np.uint8)).save(
                tmp_path / cls / f"{i}.png")
    kw = dict(image_size=(4, 4), batch_size=2, seed=7, validation_split=0.34, subset="both",
              verbose=False)
    ours = kiln.utils.image_dataset_from_directory(tmp_path, **kw)
    theirs = keras.utils.image_dataset_from_directory(tmp_path, **kw)
    for o, t in zip(ours, theirs):
        assert isinstance(o, tf.data.Dataset)
        assert o.class_names == t.class_names and o.file_paths == t.file_paths
        assert int(o.cardinality()) == int(t.cardinality())
        for so, st in zip(o.element_spec, t.element_spec):
            assert so.dtype == st.dtype and st.is_compatible_with(so)
        # same files in the same order: same labels, same pixels (no resize at this size)
        for (xo, yo), (xt, yt) in zip(o.as_numpy_iterator(), t.as_numpy_iterator()):
            np.testing.assert_array_equal(yo, yt)
            np.testing.assert_allclose(xo, xt)
