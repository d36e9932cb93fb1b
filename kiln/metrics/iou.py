"""Intersection-over-union metrics (Keras 3's ``IoU``, ``MeanIoU``, ``BinaryIoU``,
``OneHotIoU``, ``OneHotMeanIoU``) from a weighted confusion matrix summed over batches."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.losses.base import EPSILON, _c, _float
from kiln.metrics.base import weights_like
from kiln.metrics.f_score import _Summed


def _positive_int(who: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{who}: `{name}` must be a positive integer, received {value!r}")
    return int(value)


class IoU(_Summed):
    """Intersection over union, averaged over ``target_class_ids`` (Keras 3).

    Per class ``iou = tp / (tp + fp + fn)`` from the weighted confusion matrix (rows: true
    class, columns: predicted class); the result is the mean over the target classes whose
    denominator is non-zero.

    Args:
        num_classes: the number of classes.
        target_class_ids: the class ids to average over.
        ignore_class: a label whose entries are ignored (weight 0), or None.
        sparse_y_true: labels are class ids (else one-hot/scores: argmax over ``axis``).
        sparse_y_pred: predictions are class ids (else scores: argmax over ``axis``).
        axis: the class axis of dense inputs.

    A class id outside ``[0, num_classes)`` raises IndexError when the batch runs.

    Example:
        >>> m = kiln.metrics.IoU(num_classes=2, target_class_ids=[0])
        >>> m.update_state([0, 0, 1, 1], [0, 1, 0, 1])
        >>> m.result()  # 1 / (2 + 2 - 1)
        0.3333...
    """

    def __init__(self, num_classes: int, target_class_ids: Any, name: str | None = None,
                 dtype: Any = None, ignore_class: int | None = None,
                 sparse_y_true: bool = True, sparse_y_pred: bool = True, axis: int = -1):
        who = type(self).__name__
        self.num_classes = _positive_int(who, "num_classes", num_classes)
        ids = [int(i) for i in np.atleast_1d(np.asarray(target_class_ids))]
        if not ids or any(not 0 <= i < self.num_classes for i in ids):
            raise ValueError(f"{who}: target_class_ids must be class ids in [0, "
                             f"{self.num_classes}), received {target_class_ids!r}")
        self.target_class_ids = ids
        self.ignore_class = None if ignore_class is None else int(ignore_class)
        self.sparse_y_true = bool(sparse_y_true)
        self.sparse_y_pred = bool(sparse_y_pred)
        self.axis = int(axis)
        super().__init__(name=name, dtype=dtype)

    def _prepare(self, y_true: Node, y_pred: Node) -> tuple[Node, Node]:
        return y_true, y_pred

    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None
              ) -> list[Node]:
        y_true, y_pred = self._prepare(y_true, y_pred)
        if not self.sparse_y_true:
            y_true = K.argmax(y_true, axis=self.axis)
        if not self.sparse_y_pred:
            y_pred = K.argmax(y_pred, axis=self.axis)
        dtype = self.dtype if self.dtype in ("float32", "float64") else "float32"
        ones = K.cast(K.ones_like(y_true), dtype) if y_true.dtype != dtype else \
            K.ones_like(y_true)
        sw = weights_like(sample_weight, ones)
        w = K.reshape(ones if sw is None else sw, (-1,))
        t = K.reshape(K.cast(y_true, "int64") if y_true.dtype != "int64" else y_true, (-1,))
        p = K.reshape(K.cast(y_pred, "int64") if y_pred.dtype != "int64" else y_pred, (-1,))
        if self.ignore_class is not None:
            valid = K.not_equal(t, K.constant(np.int64(self.ignore_class)))
            zero = K.zeros_like(t)
            t, p = K.where(valid, t, zero), K.where(valid, p, zero)
            w = w * K.cast(valid, w.dtype)
        # One-hot rows of the identity: `take` raises IndexError for an id out of range.
        eye = K.constant(np.eye(self.num_classes, dtype=dtype))
        true_1h = K.take(eye, t, axis=0)
        pred_1h = K.take(eye, p, axis=0) * K.expand_dims(w, -1)
        return [K.matmul(K.transpose(true_1h), pred_1h)]

    def result(self) -> float:
        if self._state is None:
            return 0.0
        cm = self._state[0]
        tp = np.diag(cm)
        denominator = cm.sum(axis=0) + cm.sum(axis=1) - tp
        ids = self.target_class_ids
        tp, denominator = tp[ids], denominator[ids]
        valid = np.sum(denominator > 1e-9)
        return float(np.sum(tp / (denominator + EPSILON)) / (valid + EPSILON))

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "num_classes": self.num_classes,
                "target_class_ids": self.target_class_ids, "ignore_class": self.ignore_class,
                "sparse_y_true": self.sparse_y_true, "sparse_y_pred": self.sparse_y_pred,
                "axis": self.axis}


class MeanIoU(IoU):
    """The mean :class:`IoU` over all ``num_classes`` classes."""

    def __init__(self, num_classes: int, name: str | None = None, dtype: Any = None,
                 ignore_class: int | None = None, sparse_y_true: bool = True,
                 sparse_y_pred: bool = True, axis: int = -1):
        n = _positive_int("MeanIoU", "num_classes", num_classes)
        super().__init__(n, list(range(n)), name=name, dtype=dtype, ignore_class=ignore_class,
                         sparse_y_true=sparse_y_true, sparse_y_pred=sparse_y_pred, axis=axis)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["target_class_ids"]
        return config


class BinaryIoU(IoU):
    """:class:`IoU` of binary labels, a prediction above ``threshold`` being class 1.

    Args:
        target_class_ids: a subset of ``(0, 1)`` (default both).
        threshold: predictions above it are class 1.
    """

    def __init__(self, target_class_ids: Any = (0, 1), threshold: float = 0.5,
                 name: str | None = None, dtype: Any = None):
        self.threshold = float(threshold)
        super().__init__(2, list(target_class_ids), name=name, dtype=dtype)

    def _prepare(self, y_true: Node, y_pred: Node) -> tuple[Node, Node]:
        y_pred = _float(y_pred)
        return y_true, K.cast(y_pred > _c(self.threshold, y_pred), "int64")

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype,
                "target_class_ids": self.target_class_ids, "threshold": self.threshold}


class OneHotIoU(IoU):
    """:class:`IoU` of one-hot labels (argmax over ``axis``) and scores (argmax too, unless
    ``sparse_y_pred``)."""

    def __init__(self, num_classes: int, target_class_ids: Any, name: str | None = None,
                 dtype: Any = None, ignore_class: int | None = None,
                 sparse_y_pred: bool = False, axis: int = -1):
        super().__init__(num_classes, target_class_ids, name=name, dtype=dtype,
                         ignore_class=ignore_class, sparse_y_true=False,
                         sparse_y_pred=sparse_y_pred, axis=axis)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["sparse_y_true"]
        return config


class OneHotMeanIoU(MeanIoU):
    """:class:`MeanIoU` of one-hot labels and scores (argmax over ``axis``)."""

    def __init__(self, num_classes: int, name: str | None = None, dtype: Any = None,
                 ignore_class: int | None = None, sparse_y_pred: bool = False, axis: int = -1):
        super().__init__(num_classes, name=name, dtype=dtype, ignore_class=ignore_class,
                         sparse_y_true=False, sparse_y_pred=sparse_y_pred, axis=axis)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["sparse_y_true"]
        return config
