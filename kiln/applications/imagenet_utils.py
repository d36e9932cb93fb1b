"""What every application shares (Keras' ``keras.applications.imagenet_utils``): the input
shape rules, ``preprocess_input`` in its three modes, ``decode_predictions``, and the model's
assembly (input, classifier top or pooling, pretrained weights from the local cache).

kiln never downloads weights: ``weights="imagenet"`` loads the file Keras would have cached
(``$KERAS_HOME/models/<file>``, by default ``~/.keras/models/<file>``) and otherwise raises
FileNotFoundError naming the file, its URL and the folder to put it in.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import numpy as np

CLASS_INDEX_FILE = "imagenet_class_index.json"
CLASS_INDEX_URL = "https://storage.googleapis.com/download.tensorflow.org/data/" + CLASS_INDEX_FILE
_CLASS_INDEX: dict | None = None

#: per mode: (scale applied first, mean subtracted, std divided, RGB->BGR)
_MODES = {
    "tf": None,
    "torch": (1 / 255.0, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), False),
    "caffe": (1.0, (103.939, 116.779, 123.68), None, True),
}


def _check_format(data_format: str | None, where: str) -> None:
    if data_format not in (None, "channels_last"):
        raise ValueError(f"{where}: kiln's applications support data_format='channels_last' "
                         f"only; received data_format={data_format!r}")


# ---- preprocessing ---------------------------------------------------------------------------
def preprocess_input(x: Any, data_format: str | None = None, mode: str = "caffe") -> Any:
    """Preprocesses a batch of images with values in [0, 255] for an ImageNet model.

    Args:
        x: a NumPy array or a kiln tensor, 3D or 4D, channels last, 3 channels. A float
            NumPy array is overwritten in place (as in Keras; pass ``np.copy(x)`` to keep it).
        data_format: ``None`` or ``"channels_last"``.
        mode: ``"caffe"`` (RGB -> BGR, minus the ImageNet mean per channel, no scaling),
            ``"tf"`` (scaled to [-1, 1]) or ``"torch"`` (scaled to [0, 1], then normalized
            per channel with ImageNet's mean and std).

    Returns:
        The preprocessed array (float32 for integer input) or tensor.

    Example:
        >>> preprocess_input(np.full((1, 2, 2, 3), 255.0), mode="tf")[0, 0, 0]
        array([1., 1., 1.])
    """
    if mode not in _MODES:
        raise ValueError("preprocess_input: expected mode to be one of 'caffe', 'tf' or "
                         f"'torch'; received mode={mode!r}")
    _check_format(data_format, "preprocess_input")
    if isinstance(x, np.ndarray | list | tuple | int | float):
        return _preprocess_numpy(np.asarray(x), mode)
    return _preprocess_tensor(x, mode)


def _preprocess_numpy(x: np.ndarray, mode: str) -> np.ndarray:
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float32)
    if x.ndim == 0 or x.shape[-1] != 3:
        raise ValueError("preprocess_input: expected images with 3 channels last; received "
                         f"shape {x.shape}")
    if mode == "tf":
        x /= 127.5
        x -= 1.0
        return x
    scale, mean, std, bgr = _MODES[mode]  # type: ignore[misc]
    if bgr:
        x = x[..., ::-1]
    if scale != 1.0:
        x *= scale
    x -= np.asarray(mean, x.dtype)
    if std is not None:
        x /= np.asarray(std, x.dtype)
    return x


def _preprocess_tensor(x: Any, mode: str) -> Any:
    from kiln import ops

    shape = tuple(x.shape)
    if not shape or shape[-1] != 3:
        raise ValueError("preprocess_input: expected images with 3 channels last; received "
                         f"shape {shape}")
    if mode == "tf":
        return x / 127.5 - 1.0
    scale, mean, std, bgr = _MODES[mode]  # type: ignore[misc]
    if bgr:
        x = ops.flip(x, axis=-1)
    if scale != 1.0:
        x = x * scale
    x = x - np.asarray(mean, np.float32)
    if std is not None:
        x = x / np.asarray(std, np.float32)
    return x


# ---- decoding --------------------------------------------------------------------------------
def keras_cache_dir() -> str:
    """The folder Keras caches application files in: ``$KERAS_HOME/models`` (default
    ``~/.keras/models``)."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(home, "models")


def cached_file(file_name: str, url: str, what: str) -> str:
    """The path of ``file_name`` in Keras' cache folder; FileNotFoundError naming the file,
    where it comes from and where to put it when it is absent (kiln never downloads)."""
    path = os.path.join(keras_cache_dir(), file_name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{what}: the file {file_name!r} is not in Keras' cache folder "
            f"{keras_cache_dir()!r}. kiln does not download files: fetch it from {url} and "
            f"put it at {path!r} (or set KERAS_HOME to the folder holding models/{file_name}).")
    return path


def decode_predictions(preds: Any, top: int = 5) -> list[list[tuple[str, str, float]]]:
    """Decodes the predictions of an ImageNet model into the ``top`` classes per sample.

    Args:
        preds: array of shape (samples, 1000).
        top: how many classes per sample.

    Returns:
        One list per sample of ``(class_name, class_description, score)``, best first.

    Raises:
        ValueError: ``preds`` is not of shape (samples, 1000).
        FileNotFoundError: ``imagenet_class_index.json`` is not in Keras' cache folder.
    """
    global _CLASS_INDEX
    preds = np.asarray(preds)
    if preds.ndim != 2 or preds.shape[1] != 1000:
        raise ValueError("decode_predictions: expects a batch of predictions (a 2D array of "
                         f"shape (samples, 1000)); received array with shape {preds.shape}")
    if _CLASS_INDEX is None:
        with open(cached_file(CLASS_INDEX_FILE, CLASS_INDEX_URL, "decode_predictions")) as f:
            _CLASS_INDEX = json.load(f)
    results = []
    for row in preds:
        best = np.argsort(row, kind="stable")[::-1][:top]
        results.append([(*_CLASS_INDEX[str(int(i))], row[i]) for i in best])
    return results


# ---- shapes ----------------------------------------------------------------------------------
def obtain_input_shape(input_shape: Any, default_size: int, min_size: int,
                       data_format: str | None, require_flatten: bool,
                       weights: Any = None, where: str = "application") -> tuple:
    """The model's input shape (H, W, C): validated when given, Keras' default otherwise."""
    _check_format(data_format, where)
    if input_shape is not None:
        input_shape = tuple(input_shape)
    if weights != "imagenet" and input_shape and len(input_shape) == 3:
        if input_shape[-1] not in (1, 3):
            warnings.warn(f"{where}: this model usually expects 1 or 3 input channels; "
                          f"received input_shape={input_shape}", stacklevel=3)
        default_shape = (default_size, default_size, input_shape[-1])
    else:
        default_shape = (default_size, default_size, 3)
    if weights == "imagenet" and require_flatten:
        if input_shape is not None and input_shape != default_shape:
            raise ValueError(f"{where}: with include_top=True and weights='imagenet', "
                             f"input_shape should be {default_shape}; received "
                             f"input_shape={input_shape}")
        return default_shape
    if input_shape:
        if len(input_shape) != 3:
            raise ValueError(f"{where}: input_shape must be a tuple of three integers; "
                             f"received input_shape={input_shape}")
        if input_shape[-1] != 3 and weights == "imagenet":
            raise ValueError(f"{where}: the input must have 3 channels with "
                             f"weights='imagenet'; received input_shape={input_shape}")
        if any(d is not None and d < min_size for d in input_shape[:2]):
            raise ValueError(f"{where}: input size must be at least {min_size}x{min_size}; "
                             f"received input_shape={input_shape}")
    elif require_flatten:
        input_shape = default_shape
    else:
        input_shape = (None, None, 3)
    if require_flatten and None in input_shape:
        raise ValueError(f"{where}: if include_top is True, you should specify a static "
                         f"input_shape; received input_shape={input_shape}")
    return input_shape


def correct_pad(inputs: Any, kernel_size: int | tuple) -> tuple:
    """Zero padding ((top, bottom), (left, right)) for a strided 'valid' convolution that
    matches 'same' padding the way TensorFlow pads (more at the end)."""
    size = tuple(inputs.shape)[1:3]
    if isinstance(kernel_size, int):
        kernel_size = (kernel_size, kernel_size)
    adjust = (1, 1) if size[0] is None else (1 - size[0] % 2, 1 - size[1] % 2)
    half = (kernel_size[0] // 2, kernel_size[1] // 2)
    return ((half[0] - adjust[0], half[0]), (half[1] - adjust[1], half[1]))


def validate_activation(classifier_activation: Any, weights: Any, where: str) -> None:
    """Pretrained weights allow only a softmax or linear classifier."""
    if weights is None:
        return
    from kiln import activations

    act = activations.get(classifier_activation)
    if act not in (activations.get("softmax"), activations.get(None)):
        raise ValueError(f"{where}: only None and 'softmax' are allowed for "
                         "classifier_activation when using pretrained weights with "
                         f"include_top=True; received "
                         f"classifier_activation={classifier_activation!r}")


# ---- assembly --------------------------------------------------------------------------------
def check_weights(weights: Any, include_top: bool, classes: int, where: str) -> None:
    """Keras' checks on ``weights`` and ``classes``."""
    if not (weights in ("imagenet", None) or
            (isinstance(weights, str | os.PathLike) and os.path.exists(weights))):
        raise ValueError(f"{where}: the weights argument should be either None (random "
                         "initialization), 'imagenet' (pre-training on ImageNet), or the path "
                         f"to the weights file to be loaded; received weights={weights!r}")
    if weights == "imagenet" and include_top and classes != 1000:
        raise ValueError(f"{where}: with weights='imagenet' and include_top=True, classes "
                         f"should be 1000; received classes={classes}")


def is_symbolic(x: Any) -> bool:
    """Whether ``x`` is a symbolic kiln tensor."""
    from kiln.utils import is_keras_tensor

    return is_keras_tensor(x)


def image_input(input_tensor: Any, input_shape: tuple, where: str) -> Any:
    """A new ``Input`` of ``input_shape``, or ``input_tensor`` (a symbolic tensor)."""
    from kiln import layers
    from kiln.utils import is_keras_tensor

    if input_tensor is None:
        return layers.Input(shape=input_shape)
    if not is_keras_tensor(input_tensor):
        raise ValueError(f"{where}: input_tensor must be a symbolic tensor (kiln.Input or a "
                         f"layer's output); received {type(input_tensor).__name__}")
    return input_tensor


def pooled(x: Any, pooling: str | None, avg_name: str | None = "avg_pool",
           max_name: str | None = "max_pool") -> Any:
    """The feature extractor's end: ``pooling`` None, "avg" or "max"."""
    from kiln import layers

    if pooling == "avg":
        return layers.GlobalAveragePooling2D(name=avg_name)(x)
    if pooling == "max":
        return layers.GlobalMaxPooling2D(name=max_name)(x)
    if pooling is not None:
        raise ValueError(f"pooling must be None, 'avg' or 'max'; received pooling={pooling!r}")
    return x


def finish(img_input: Any, input_tensor: Any, x: Any, name: str, weights: Any,
           imagenet_file: tuple[str, str] | None, where: str) -> Any:
    """The functional model from the input (or ``input_tensor``'s sources) to ``x``, with
    ``weights`` loaded: a path, or "imagenet" = ``imagenet_file`` (file name, URL) from
    Keras' cache folder."""
    from kiln.models import Model
    from kiln.utils import get_source_inputs

    inputs = get_source_inputs(input_tensor) if input_tensor is not None else img_input
    if isinstance(inputs, list) and len(inputs) == 1:
        inputs = inputs[0]
    model = Model(inputs, x, name=name)
    if weights == "imagenet":
        if imagenet_file is None:
            raise ValueError(f"{where}: Keras publishes no ImageNet weights for this "
                             "configuration")
        model.load_weights(cached_file(imagenet_file[0], imagenet_file[1], where))
    elif weights is not None:
        model.load_weights(weights)
    return model
