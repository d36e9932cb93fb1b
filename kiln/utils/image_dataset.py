"""``image_dataset_from_directory`` (``keras.utils``): a folder of class sub-folders of
images as a re-iterable dataset of ``(images, labels)`` batches. Images are decoded and
resized by Pillow (the optional ``images`` extra), batch by batch."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

import kiln.config
from kiln.utils import _directory
from kiln.utils.image_utils import _MODES, crop_box, pil_image, resample

ALLOWLIST_FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")
_FN = "image_dataset_from_directory"


def _loader(image_size: tuple[int, int], color_mode: str, interpolation: str,
            crop_to_aspect_ratio: bool, pad_to_aspect_ratio: bool, channels_first: bool):
    height, width = image_size
    mode = _MODES[color_mode]
    Image = pil_image()
    filt = resample(interpolation)

    def load(path: str) -> np.ndarray:
        with open(path, "rb") as f:
            img = Image.open(f)
            img.load()
        if img.mode != mode:
            img = img.convert(mode)
        w, h = img.size
        if crop_to_aspect_ratio:
            img = img.crop(crop_box(w, h, height, width))
        elif pad_to_aspect_ratio:
            pad_w = max(w, round(h * width / height))
            pad_h = max(h, round(w * height / width))
            canvas = Image.new(mode, (pad_w, pad_h))
            canvas.paste(img, ((pad_w - w) // 2, (pad_h - h) // 2))
            img = canvas
        if img.size != (width, height):
            img = img.resize((width, height), filt)
        x = np.asarray(img, dtype=kiln.config.floatx())
        if x.ndim == 2:
            x = x[:, :, None]
        return x.transpose(2, 0, 1) if channels_first else x

    return load


def image_dataset_from_directory(
        directory: str | os.PathLike[str], labels: Any = "inferred", label_mode: str | None = "int",
        class_names: Sequence[str] | None = None, color_mode: str = "rgb",
        batch_size: int | None = 32, image_size: tuple[int, int] = (256, 256),
        shuffle: bool = True, seed: int | None = None, validation_split: float | None = None,
        subset: str | None = None, interpolation: str = "bilinear", follow_links: bool = False,
        crop_to_aspect_ratio: bool = False, pad_to_aspect_ratio: bool = False,
        data_format: str | None = None, format: str = "tf",  # noqa: A002
        verbose: bool = True) -> Any:
    """Images in class sub-folders as a dataset, like
    ``keras.utils.image_dataset_from_directory``.

    ``directory/class_a/*.png, directory/class_b/*.jpg ...``: the classes are the sorted
    sub-folders (label ``i`` is ``class_names[i]``), files are found recursively (bmp, gif,
    jpeg, jpg, png) and sorted; with ``shuffle``, files and labels are shuffled by
    ``np.random.RandomState(seed)`` before the split, as in Keras (so ``subset="training"``
    and ``"validation"`` with the same seed do not overlap).

    Args:
        directory: The folder.
        labels: ``"inferred"`` (from the sub-folders), None (images only), or a list of
            integer labels, one per file in sorted path order.
        label_mode: ``"int"`` (int32), ``"categorical"`` (one-hot float), ``"binary"``
            (float ``(n, 1)``, exactly 2 classes) or None (images only).
        class_names: With ``labels="inferred"``: the sub-folders to use, in label order.
        color_mode: ``"grayscale"``, ``"rgb"`` or ``"rgba"`` (1, 3 or 4 channels).
        batch_size: Images per batch; None yields single images.
        image_size: ``(height, width)`` every image is resized to.
        shuffle: Shuffle the files (and reshuffle every later epoch).
        seed: Seed of the shuffle.
        validation_split: Fraction kept for validation (the last files, after shuffling).
        subset: ``"training"``, ``"validation"`` or ``"both"`` (returns both datasets).
        interpolation: Pillow resampling filter (``"bilinear"``, ``"nearest"`` ...).
        follow_links: Follow symbolic links to folders.
        crop_to_aspect_ratio: Center-crop to ``image_size``'s aspect ratio before resizing.
        pad_to_aspect_ratio: Pad (with zeros) to the aspect ratio instead.
        data_format: ``"channels_last"`` (default) or ``"channels_first"``.
        verbose: Print how many files were found and used.

    Returns:
        A dataset (iterable once per epoch, ``len()`` batches) of ``(images, labels)``:
        float images of values 0-255 and shape ``(batch, height, width, channels)``; it has
        ``class_names`` and ``file_paths``. With ``subset="both"``, a list
        ``[training, validation]``. With TensorFlow installed, a ``tf.data.Dataset`` of the
        same elements with ``class_names`` and ``file_paths``, as Keras returns
        (``kiln.utils.set_dataset_format("kiln")`` keeps kiln's :class:`kiln.utils.Dataset`).

    Raises:
        ImportError: Pillow is not installed (``pip install "kiln-nn[images]"``).
        ValueError: Bad arguments (each named with the value received), or no image found.

    Example:
        >>> train, val = kiln.utils.image_dataset_from_directory(
        ...     "flowers", image_size=(64, 64), validation_split=0.2, subset="both",
        ...     seed=1)  # doctest: +SKIP
        >>> model.fit(train, validation_data=val, epochs=5)  # doctest: +SKIP
    """
    if format != "tf":  # kiln returns its own dataset (batches of NumPy arrays)
        raise ValueError(f"image_dataset_from_directory: format={format!r} is not supported by "
                         "kiln; the default 'tf' returns kiln's dataset of NumPy batches")
    pil_image()  # fail early, with the install hint, when Pillow is missing
    if color_mode not in _MODES:
        raise ValueError(f"{_FN}: color_mode must be one of {sorted(_MODES)}, received "
                         f"{color_mode!r}")
    label_mode = _directory.check_label_mode(_FN, label_mode, labels)
    if (not isinstance(image_size, list | tuple) or len(image_size) != 2
            or not all(isinstance(d, int) and d > 0 for d in image_size)):
        raise ValueError(f"{_FN}: image_size must be (height, width) of positive integers, "
                         f"received {image_size!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or batch_size < 1):
        raise ValueError(f"{_FN}: batch_size must be a positive integer or None, received "
                         f"{batch_size!r}")
    if crop_to_aspect_ratio and pad_to_aspect_ratio:
        raise ValueError(f"{_FN}: crop_to_aspect_ratio and pad_to_aspect_ratio cannot both "
                         "be True")
    data_format = data_format or "channels_last"
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(f"{_FN}: data_format must be 'channels_last' or 'channels_first', "
                         f"received {data_format!r}")
    resample(interpolation)  # checks the name
    _directory.check_split_args(_FN, validation_split, subset, shuffle, seed)
    if seed is None and shuffle:
        seed = int(np.random.randint(1_000_000))
    paths, int_labels, names = _directory.index_directory(
        _FN, directory, labels, ALLOWLIST_FORMATS, class_names, shuffle, seed, follow_links,
        verbose)
    if label_mode == "binary" and len(names) != 2:
        raise ValueError(f"{_FN}: label_mode='binary' needs exactly 2 classes, found "
                         f"class_names={names}")
    if not paths:
        raise ValueError(f"{_FN}: no images found in directory {os.fspath(directory)!r}; "
                         f"allowed formats: {ALLOWLIST_FORMATS}")
    load = _loader(tuple(image_size), color_mode, interpolation, crop_to_aspect_ratio,
                   pad_to_aspect_ratio, data_format == "channels_first")

    def build(which: str) -> _directory.DirectoryDataset:
        p, lab = _directory.split(_FN, paths, int_labels, validation_split, which, verbose)
        y = _directory.encode_labels(_FN, lab, label_mode, len(names))
        return _directory.DirectoryDataset(p, y, load, np.stack, batch_size, shuffle, seed,
                                           names)

    if subset == "both":
        return _directory.finish([build("training"), build("validation")], True, False)
    return _directory.finish([build(subset or "training")], True, False)[0]
