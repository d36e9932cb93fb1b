"""kiln.utils.split_dataset and audio_dataset_from_directory against Keras (live, where
installed) and closed forms."""

from __future__ import annotations

import wave

import numpy as np
import pytest

import kiln
import kiln.utils as U


def _as_list(ds):
    return [tuple(np.asarray(v).tolist() for v in e) if isinstance(e, tuple)
            else np.asarray(e).tolist() for e in ds]


def test_split_sizes_and_order():
    x = np.arange(20).reshape(10, 2)
    left, right = U.split_dataset(x, left_size=0.8)
    assert len(left) == 8 and len(right) == 2
    assert _as_list(left) == x[:8].tolist() and _as_list(right) == x[8:].tolist()
    left, right = U.split_dataset((x, np.arange(10)), left_size=3, right_size=2)
    assert _as_list(left) == [(x[i].tolist(), i) for i in range(3)]
    assert _as_list(right) == [(x[i].tolist(), i) for i in (8, 9)]  # the last right_size
    ds = kiln.utils.Dataset.from_tensor_slices(np.arange(5))
    left, right = U.split_dataset(ds, right_size=0.4)
    assert _as_list(left) == [0, 1, 2] and _as_list(right) == [3, 4]
    left, right = U.split_dataset({"a": np.arange(4)}, left_size=1)
    assert [e["a"].item() for e in left] == [0] and [e["a"].item() for e in right] == [1, 2, 3]


@pytest.mark.parametrize("kwargs, message", [
    ({}, "at least one of left_size and right_size"),
    ({"left_size": 10}, "left_size must be a positive integer smaller than"),
    ({"left_size": 1.5}, "left_size must be a positive integer"),
    ({"left_size": 0.7, "right_size": 0.5}, "is above 1"),
    ({"left_size": "half"}, "left_size must be an int, a float or None"),
    ({"left_size": 0.01}, "leave the left split empty"),
    ({"left_size": 5, "preferred_backend": "jax"}, "preferred_backend must be one of"),
])
def test_split_argument_errors(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        U.split_dataset(np.arange(10), **kwargs)


def test_split_matches_keras_with_shuffle():
    keras = pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    x, y = np.arange(30).reshape(15, 2), np.arange(15) * 10
    for kwargs in ({"left_size": 0.6, "shuffle": True, "seed": 7},
                   {"right_size": 4, "shuffle": True, "seed": 123},
                   {"left_size": 5, "right_size": 6}):
        ours = U.split_dataset((x, y), **kwargs)
        theirs = keras.utils.split_dataset((x, y), **kwargs)
        for a, b in zip(ours, theirs):
            assert _as_list(a) == _as_list(b.as_numpy_iterator()), kwargs


def test_split_of_a_tf_dataset_gives_tf_datasets():
    tf = pytest.importorskip("tensorflow")
    ds = tf.data.Dataset.from_tensor_slices(np.arange(10)).batch(3)
    left, right = U.split_dataset(ds, left_size=0.5)
    assert isinstance(left, tf.data.Dataset)
    assert [b.tolist() for b in left.as_numpy_iterator()] == [[0, 1, 2], [3, 4]]
    assert [b.tolist() for b in right.as_numpy_iterator()] == [[5, 6, 7], [8, 9]]
    left, _ = U.split_dataset(np.arange(4), left_size=2, preferred_backend="tensorflow")
    assert isinstance(left, tf.data.Dataset)


def test_split_for_torch_matches_keras():
    keras = pytest.importorskip("keras")
    torch = pytest.importorskip("torch")
    x, y = np.arange(24, dtype="float32").reshape(12, 2), np.arange(12)
    ours = U.split_dataset((x, y), left_size=0.75, shuffle=True, seed=11,
                           preferred_backend="torch")
    theirs = keras.utils.split_dataset((x, y), left_size=0.75, shuffle=True, seed=11,
                                       preferred_backend="torch")
    for a, b in zip(ours, theirs, strict=True):
        assert isinstance(a, torch.utils.data.Dataset) and len(a) == len(b)
        for i in range(len(a)):
            assert [t.tolist() for t in a[i]] == [t.tolist() for t in b[i]]
    left, right = U.split_dataset(torch.utils.data.TensorDataset(torch.arange(5)), left_size=2)
    assert [e[0].item() for e in left] == [0, 1] and [e[0].item() for e in right] == [2, 3, 4]


# ---- audio ------------------------------------------------------------------------------------
def _write_wav(path, samples, rate=16000, width=2):
    samples = np.asarray(samples)
    channels = 1 if samples.ndim == 1 else samples.shape[1]
    with wave.open(str(path), "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(width)
        f.setframerate(rate)
        if width == 1:
            f.writeframes(samples.astype(np.uint8).tobytes())
        elif width == 3:
            v = samples.astype(np.int64).reshape(-1) % (1 << 24)
            raw = np.stack([v & 255, (v >> 8) & 255, (v >> 16) & 255], 1).astype(np.uint8)
            f.writeframes(raw.tobytes())
        else:
            f.writeframes(samples.astype("<i2").tobytes())


@pytest.fixture
def audio_dir(tmp_path):
    rng = np.random.default_rng(0)
    clips = {}
    for cls, lengths in (("dog", (5, 9, 7)), ("cat", (6, 4))):
        (tmp_path / cls).mkdir()
        for i, n in enumerate(lengths):
            s = rng.integers(-32768, 32767, size=n)
            _write_wav(tmp_path / cls / f"{i}.wav", s)
            clips[f"{cls}/{i}"] = s
    return tmp_path, clips


def test_audio_batches_labels_and_padding(audio_dir):
    root, clips = audio_dir
    ds = U.audio_dataset_from_directory(root, batch_size=2, shuffle=False, verbose=False)
    assert ds.class_names == ["cat", "dog"] and len(ds) == 3
    batches = list(ds)
    audio, labels = batches[0]  # cat/0 (6 samples), cat/1 (4): padded to 6
    assert audio.dtype == np.float32 and audio.shape == (2, 6, 1)
    np.testing.assert_array_equal(audio[0, :, 0], clips["cat/0"] / 32768.0)
    np.testing.assert_array_equal(audio[1, :4, 0], clips["cat/1"] / 32768.0)
    assert np.all(audio[1, 4:] == 0) and labels.tolist() == [0, 0]
    assert batches[1][0].shape == (2, 9, 1) and batches[1][1].tolist() == [1, 1]
    fixed = U.audio_dataset_from_directory(root, batch_size=None, shuffle=False,
                                           output_sequence_length=5, label_mode="categorical",
                                           verbose=False)
    clip, label = next(iter(fixed))
    assert clip.shape == (5, 1) and label.tolist() == [1.0, 0.0]
    np.testing.assert_array_equal(clip[:, 0], clips["cat/0"][:5] / 32768.0)  # truncated
    ragged = U.audio_dataset_from_directory(root, batch_size=2, shuffle=False, ragged=True,
                                            verbose=False)
    first, _ = next(iter(ragged))
    assert [c.shape for c in first] == [(6, 1), (4, 1)]
    train, val = U.audio_dataset_from_directory(root, validation_split=0.4, subset="both",
                                                seed=1, verbose=False)
    assert len(train.file_paths) == 3 and len(val.file_paths) == 2


def test_audio_matches_keras(audio_dir):
    keras = pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    root, _ = audio_dir
    for kwargs in ({}, {"output_sequence_length": 6}, {"label_mode": "categorical"}):
        ours = list(U.audio_dataset_from_directory(root, batch_size=2, shuffle=False,
                                                   verbose=False, **kwargs))
        theirs = list(keras.utils.audio_dataset_from_directory(
            str(root), batch_size=2, shuffle=False, verbose=False, **kwargs))
        assert len(ours) == len(theirs)
        for (a, y), (b, z) in zip(ours, theirs):
            np.testing.assert_array_equal(a, b.numpy())
            np.testing.assert_array_equal(y, z.numpy())


def test_audio_sample_widths_channels_and_errors(tmp_path):
    (tmp_path / "a").mkdir()
    _write_wav(tmp_path / "a" / "8bit.wav", np.array([0, 128, 255]), width=1)
    _write_wav(tmp_path / "a" / "24bit.wav", np.array([-(1 << 23), 0, (1 << 22)]), width=3)
    _write_wav(tmp_path / "a" / "stereo.wav", np.array([[1, -1], [16384, -16384]]))
    from kiln.utils.audio_dataset import read_wav

    np.testing.assert_array_equal(read_wav(str(tmp_path / "a" / "8bit.wav"))[0][:, 0],
                                  [-1.0, 0.0, 127 / 128])
    np.testing.assert_array_equal(read_wav(str(tmp_path / "a" / "24bit.wav"))[0][:, 0],
                                  [-1.0, 0.0, 0.5])
    stereo, rate = read_wav(str(tmp_path / "a" / "stereo.wav"))
    assert rate == 16000 and stereo.shape == (2, 2) and stereo[1].tolist() == [0.5, -0.5]
    with pytest.raises(ValueError, match="sampled at 16000 Hz, not sampling_rate=8000"):
        list(U.audio_dataset_from_directory(tmp_path, sampling_rate=8000, verbose=False,
                                            batch_size=None))
    with pytest.raises(ValueError, match="cannot set both ragged=True and "
                                         "output_sequence_length"):
        U.audio_dataset_from_directory(tmp_path, ragged=True, output_sequence_length=3)
    (tmp_path / "empty" / "class_a").mkdir(parents=True)
    with pytest.raises(ValueError, match="no .wav files found"):
        U.audio_dataset_from_directory(tmp_path / "empty", verbose=False)


def test_audio_as_tf_data_matches_keras_with_shuffling(audio_dir):
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")
    root, _ = audio_dir
    U.set_dataset_format("tf")
    try:
        for kwargs in ({"shuffle": True, "seed": 3}, {"shuffle": False, "label_mode": None},
                       {"shuffle": True, "seed": 5, "output_sequence_length": 8}):
            ours = U.audio_dataset_from_directory(root, batch_size=2, verbose=False, **kwargs)
            theirs = keras.utils.audio_dataset_from_directory(str(root), batch_size=2,
                                                              verbose=False, **kwargs)
            assert isinstance(ours, tf.data.Dataset) and ours.class_names == theirs.class_names
            for a, b in zip(ours.as_numpy_iterator(), theirs.as_numpy_iterator(),
                            strict=True):
                for u, v in zip(a if isinstance(a, tuple) else (a,),
                                b if isinstance(b, tuple) else (b,), strict=True):
                    np.testing.assert_array_equal(u, v)
        ragged = U.audio_dataset_from_directory(root, batch_size=2, shuffle=False, ragged=True,
                                                verbose=False)
        clips, _ = next(iter(ragged))
        assert isinstance(clips, tf.RaggedTensor)
        assert clips.row_lengths().numpy().tolist() == [6, 4]
    finally:
        U.set_dataset_format("kiln")
