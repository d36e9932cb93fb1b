"""``audio_dataset_from_directory`` (``keras.utils``): a folder of class sub-folders of
``.wav`` files as a re-iterable dataset of ``(audio, labels)`` batches.

WAV files are read with the standard library's :mod:`wave` (PCM, 8/16/24/32-bit) and scaled
to float32 in [-1, 1) as ``tf.audio.decode_wav`` does (16-bit: ``value / 32768``). An audio
clip is ``(samples, channels)``. Indexing, labels, shuffling and the split follow Keras (as
:func:`~kiln.utils.image_dataset_from_directory` does).
"""

from __future__ import annotations

import os
import wave
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.utils import _directory

_FN = "audio_dataset_from_directory"


def read_wav(path: str) -> tuple[np.ndarray, int]:
    """``(audio, sample_rate)`` of a PCM WAV file; ``audio`` is float32 ``(samples,
    channels)`` in [-1, 1)."""
    try:
        with wave.open(path, "rb") as f:
            channels, width, rate = f.getnchannels(), f.getsampwidth(), f.getframerate()
            raw = f.readframes(f.getnframes())
    except (wave.Error, EOFError) as e:
        raise ValueError(f"{_FN}: cannot read {path!r} as a PCM WAV file: {e}") from None
    if width == 1:  # unsigned 8-bit
        data = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        data = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        data = v.astype(np.float32) / float(1 << 23)
    elif width == 4:
        data = (np.frombuffer(raw, "<i4").astype(np.float64) / 2.0 ** 31).astype(np.float32)
    else:
        raise ValueError(f"{_FN}: {path!r} has {8 * width}-bit samples; kiln reads 8, 16, 24 "
                         "and 32-bit PCM WAV files")
    return data.reshape(-1, channels), rate


def _fit_length(audio: np.ndarray, length: int) -> np.ndarray:
    if audio.shape[0] >= length:
        return audio[:length]
    pad = np.zeros((length - audio.shape[0], audio.shape[1]), np.float32)
    return np.concatenate([audio, pad])


def audio_dataset_from_directory(
        directory: str | os.PathLike[str], labels: Any = "inferred", label_mode: str | None = "int",
        class_names: Sequence[str] | None = None, batch_size: int | None = 32,
        sampling_rate: int | None = None, output_sequence_length: int | None = None,
        ragged: bool = False, shuffle: bool = True, seed: int | None = None,
        validation_split: float | None = None, subset: str | None = None,
        follow_links: bool = False, verbose: bool = True) -> Any:
    """WAV files in class sub-folders as a dataset, like
    ``keras.utils.audio_dataset_from_directory``.

    Args:
        directory: The folder (``directory/class_a/*.wav`` ...).
        labels: ``"inferred"``, None, or a list of integer labels in sorted path order.
        label_mode: ``"int"``, ``"categorical"``, ``"binary"`` or None.
        class_names: With ``labels="inferred"``: the sub-folders to use, in label order.
        batch_size: Clips per batch; None yields single clips.
        sampling_rate: The files' expected sample rate. kiln does not resample (Keras needs
            tensorflow-io for it): a file at another rate raises.
        output_sequence_length: Clips are cut or zero-padded to this many samples. Without
            it (and without ``ragged``), each batch is zero-padded to its longest clip.
        ragged: Batches are lists of clips of their own lengths (kiln has no ragged tensors).
        shuffle, seed, validation_split, subset, follow_links, verbose: As for images.

    Returns:
        A dataset of ``(audio, labels)`` with ``audio`` float32 ``(batch, samples,
        channels)``, with ``class_names``; ``[training, validation]`` with
        ``subset="both"``. With TensorFlow installed, a ``tf.data.Dataset`` as Keras returns
        (ragged batches: ``tf.RaggedTensor``); otherwise, or after
        ``kiln.utils.set_dataset_format("kiln")``, kiln's dataset (``len()`` batches,
        ``file_paths``; ragged batches are lists of arrays).

    Raises:
        ValueError: Bad arguments, no ``.wav`` file, or a file at another ``sampling_rate``.
    """
    label_mode = _directory.check_label_mode(_FN, label_mode, labels)
    if label_mode is None:  # Keras: no labels at all (files anywhere under directory)
        labels = None
    if ragged and output_sequence_length is not None:
        raise ValueError(f"{_FN}: cannot set both ragged=True and output_sequence_length="
                         f"{output_sequence_length!r}")
    if sampling_rate is not None and (isinstance(sampling_rate, bool) or
                                      not isinstance(sampling_rate, int) or sampling_rate <= 0):
        raise ValueError(f"{_FN}: sampling_rate must be a positive integer, received "
                         f"sampling_rate={sampling_rate!r}")
    if output_sequence_length is not None and (isinstance(output_sequence_length, bool) or
                                               output_sequence_length < 1):
        raise ValueError(f"{_FN}: output_sequence_length must be a positive integer or None, "
                         f"received {output_sequence_length!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or batch_size < 1):
        raise ValueError(f"{_FN}: batch_size must be a positive integer or None, received "
                         f"{batch_size!r}")
    _directory.check_split_args(_FN, validation_split, subset, shuffle, seed)
    if seed is None and shuffle:
        seed = int(np.random.randint(1_000_000))
    paths, int_labels, names = _directory.index_directory(
        _FN, directory, labels, (".wav",), class_names, shuffle, seed, follow_links, verbose)
    if label_mode == "binary" and len(names) != 2:
        raise ValueError(f"{_FN}: label_mode='binary' needs exactly 2 classes, found "
                         f"class_names={names}")
    if not paths:
        raise ValueError(f"{_FN}: no .wav files found in directory {os.fspath(directory)!r}")

    def load(path: str) -> np.ndarray:
        audio, rate = read_wav(path)
        if sampling_rate is not None and rate != sampling_rate:
            raise ValueError(f"{_FN}: {path!r} is sampled at {rate} Hz, not sampling_rate="
                             f"{sampling_rate}; kiln does not resample audio")
        if output_sequence_length is not None:
            audio = _fit_length(audio, output_sequence_length)
        return audio

    def stack(clips: list) -> Any:
        if ragged:
            return list(clips)
        longest = max(c.shape[0] for c in clips)
        channels = {c.shape[1] for c in clips}
        if len(channels) != 1:
            raise ValueError(f"{_FN}: a batch mixes clips of {sorted(channels)} channels")
        return np.stack([_fit_length(c, longest) for c in clips])

    def build(which: str) -> _directory.DirectoryDataset:
        p, lab = _directory.split(_FN, paths, int_labels, validation_split, which, verbose)
        y = _directory.encode_labels(_FN, lab, label_mode, len(names))
        return _directory.DirectoryDataset(p, y, load, stack, batch_size, shuffle, seed, names)

    from kiln.utils.tf_interop import dataset_format

    parts = [build("training"), build("validation")] if subset == "both" else \
        [build(subset or "training")]
    if dataset_format() == "tf":
        parts = [_to_tf(d, shuffle and k == 0, ragged, output_sequence_length)
                 for k, d in enumerate(parts)]
    return parts if subset == "both" else parts[0]


def _to_tf(d: _directory.DirectoryDataset, shuffle: bool, ragged: bool,
           length: int | None) -> Any:
    """Keras' ``tf.data`` pipeline over the same files: (path, label) pairs shuffled with a
    buffer of ``8 * batch_size`` (the validation part of ``subset="both"`` unshuffled), read
    by kiln's WAV reader, then ``padded_batch`` (or ``batch``, ``ragged_batch``)."""
    import tensorflow as tf

    channels = d._load(d.file_paths[0]).shape[1]
    ds = tf.data.Dataset.from_tensor_slices(d.file_paths)
    if d.labels is not None:
        ds = tf.data.Dataset.zip((ds, tf.data.Dataset.from_tensor_slices(d.labels)))
    if shuffle:
        ds = ds.shuffle(buffer_size=d.batch_size * 8 if d.batch_size else 1024, seed=d.seed)

    def read(path: Any) -> Any:
        audio = tf.numpy_function(lambda p: d._load(p.decode()), [path], tf.float32)
        audio.set_shape((length, channels))
        return audio

    if d.labels is not None:
        ds = ds.map(lambda p, y: (read(p), y), num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = ds.map(read, num_parallel_calls=tf.data.AUTOTUNE)
    if d.batch_size is not None:
        if ragged:
            ds = ds.ragged_batch(d.batch_size)
        elif length is None:
            ds = ds.padded_batch(d.batch_size)
        else:
            ds = ds.batch(d.batch_size)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    ds.class_names = d.class_names if d.labels is not None else None  # as Keras
    return ds
