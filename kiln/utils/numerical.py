"""``to_categorical`` and ``normalize`` (``keras.utils``), on NumPy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.config


def to_categorical(x: Any, num_classes: int | None = None) -> np.ndarray:
    """One-hot encodes integer class labels, like ``keras.utils.to_categorical``.

    A trailing axis of size 1 is replaced (labels of shape ``(n, 1)`` give ``(n, classes)``).

    Args:
        x: Integer labels (array-like) in ``[0, num_classes)``.
        num_classes: Number of classes; None means ``max(x) + 1``.

    Returns:
        A float array (``kiln.config.floatx()``) of shape ``x.shape + (num_classes,)``.

    Raises:
        ValueError: Labels that are negative, not integers, or not below ``num_classes``
            (Keras would wrap negative labels around silently).

    Example:
        >>> kiln.utils.to_categorical([0, 2, 1], num_classes=3)
        array([[1., 0., 0.],
               [0., 0., 1.],
               [0., 1., 0.]], dtype=float32)
    """
    a = np.asarray(x)
    if a.dtype.kind == "f":
        bad = (a != np.round(a)) | ~np.isfinite(a)
        if bad.any():
            raise ValueError("to_categorical: labels must be integers, received non-integer "
                             f"values such as {a[bad].flat[0].item()!r}")
    elif a.dtype.kind not in "iub":
        raise ValueError(f"to_categorical: labels must be integers, received dtype {a.dtype}")
    labels = a.astype(np.int64)
    shape = labels.shape
    if len(shape) > 1 and shape[-1] == 1:
        shape = shape[:-1]
    flat = labels.reshape(-1)
    if num_classes is not None and (isinstance(num_classes, bool) or int(num_classes) < 1):
        raise ValueError(f"to_categorical: num_classes must be a positive integer, received "
                         f"{num_classes!r}")
    if flat.size and flat.min() < 0:
        raise ValueError(f"to_categorical: labels must be non-negative, received "
                         f"{int(flat.min())}")
    n = int(num_classes) if num_classes else (int(flat.max()) + 1 if flat.size else 0)
    if flat.size and flat.max() >= n:
        raise ValueError(f"to_categorical: label {int(flat.max())} is out of range for "
                         f"num_classes={n}")
    out = np.zeros((flat.size, n), dtype=kiln.config.floatx())
    out[np.arange(flat.size), flat] = 1
    return out.reshape(shape + (n,))


def normalize(x: Any, axis: int | None = -1, order: int | float = 2) -> np.ndarray:
    """Scales ``x`` to unit ``order``-norm along ``axis``, like ``keras.utils.normalize``
    (vectors of norm 0 are left as they are).

    Args:
        x: Array to normalize.
        axis: Axis of the norm.
        order: Order of the norm (2 for L2, 1 for L1, ``np.inf`` ...).

    Returns:
        The normalized array (floating point).

    Example:
        >>> kiln.utils.normalize(np.array([[3.0, 4.0]]))
        array([[0.6, 0.8]])
    """
    a = np.asarray(x)
    if a.dtype.kind not in "fc":
        a = a.astype(kiln.config.floatx())
    axis = -1 if axis is None else axis
    if a.ndim == 0:
        raise ValueError("normalize: expected an array with at least one axis, received a "
                         "scalar")
    norm = np.atleast_1d(np.linalg.norm(a, order, axis))
    norm[norm == 0] = 1
    return a / np.expand_dims(norm, axis)
