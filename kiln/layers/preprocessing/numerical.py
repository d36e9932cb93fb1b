"""Numerical preprocessing: Rescaling, Normalization (with ``adapt``), Discretization (with
``adapt``), in the graph (they can sit anywhere in a model)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers.base import Layer
from kiln.layers.preprocessing._base import check_choice
from kiln.layers.preprocessing.encoding import ENCODE_MODES, encode
from kiln.layers.preprocessing.tf_data import TFDataLayer

EPSILON = 1e-7  # Keras' backend.epsilon(): the smallest standard deviation divided by


def _from_numpy_config(value: Any) -> Any:
    """A scale/offset as Keras serializes NumPy arrays (``{"class_name": "__numpy__"}``)."""
    if isinstance(value, dict) and value.get("class_name") == "__numpy__":
        cfg = value.get("config", {})
        return np.asarray(cfg.get("value"), dtype=cfg.get("dtype", "float32"))
    return value


def _to_config(value: Any) -> Any:
    arr = np.asarray(value)
    return float(arr) if arr.ndim == 0 else arr.tolist()


class Rescaling(TFDataLayer, Layer):
    """Multiplies the inputs by ``scale`` and adds ``offset`` (Keras' ``Rescaling``): e.g.
    ``scale=1/255`` maps pixels to ``[0, 1]``, ``scale=1/127.5, offset=-1`` to ``[-1, 1]``.
    Integer inputs are cast to the layer's dtype first.

    Args:
        scale: a number, or an array broadcast against the last axes (per channel).
        offset: a number or an array, likewise.

    Example:
        >>> y = kiln.layers.Rescaling(1 / 255)(images)
    """

    supports_masking = True

    def __init__(self, scale: Any, offset: Any = 0.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.scale = _from_numpy_config(scale)
        self.offset = _from_numpy_config(offset)
        for name, v in (("scale", self.scale), ("offset", self.offset)):
            arr = np.asarray(v)
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"Rescaling: {name} must be a number or a numeric array, "
                                f"received {name}={v!r}")

    def call(self, inputs: Node) -> Node:
        x = inputs if inputs.dtype == self.dtype else K.cast(inputs, self.dtype)
        scale = K.constant(np.asarray(self.scale), self.dtype)
        offset = K.constant(np.asarray(self.offset), self.dtype)
        return x * scale + offset

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"scale": _to_config(self.scale), "offset": _to_config(self.offset)})
        return config


def _batches(layer: str, data: Any) -> Iterable[np.ndarray]:
    """``adapt``'s data: one array (one batch), or an iterable of batches (arrays, or
    ``(x, y)`` tuples whose first item is taken)."""
    if isinstance(data, np.ndarray) or np.isscalar(data):
        return [np.asarray(data)]
    if hasattr(data, "numpy") and callable(data.numpy):
        return [np.asarray(data.numpy())]
    if isinstance(data, Iterable):
        def gen() -> Iterable[np.ndarray]:
            for batch in data:
                yield np.asarray(batch[0] if isinstance(batch, tuple) else batch)
        return gen()
    raise TypeError(f"{layer}.adapt: expected a NumPy array or an iterable of batches, "
                    f"received {type(data).__name__}")


class Normalization(TFDataLayer, Layer):
    """Normalizes inputs to zero mean and unit variance per feature (Keras'
    ``Normalization``): ``(x - mean) / max(sqrt(variance), 1e-7)``, or with ``invert=True``
    ``mean + x * max(sqrt(variance), 1e-7)``.

    The statistics come from the ``mean``/``variance`` arguments, or from ``adapt(data)``
    (they are then non-trainable weights ``mean``, ``variance``, ``count``, saved with the
    model like Keras').

    Args:
        axis: the axis or axes that keep separate statistics (default -1: per feature);
            None computes one scalar mean and variance.
        mean, variance: given statistics (both or neither), broadcast to the kept axes.
        invert: apply the inverse transformation (de-normalize).

    Example:
        >>> norm = kiln.layers.Normalization()
        >>> norm.adapt(x_train)
        >>> y = norm(kiln.Input((8,)))
    """

    supports_masking = True

    def __init__(self, axis: Any = -1, mean: Any = None, variance: Any = None,
                 invert: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        if axis is None:
            self.axis: tuple[int, ...] = ()
        elif isinstance(axis, int):
            self.axis = (int(axis),)
        else:
            self.axis = tuple(int(a) for a in axis)
        if (mean is None) != (variance is None):
            raise ValueError("Normalization: set both mean and variance, or neither; received "
                             f"mean={mean!r}, variance={variance!r}")
        if mean is not None:
            if np.shape(mean) != np.shape(variance):
                raise ValueError(f"Normalization: mean and variance must have the same shape, "
                                 f"received {np.shape(mean)} and {np.shape(variance)}")
            if np.ndim(mean) > len(self.axis):
                raise ValueError(f"Normalization: the rank of mean ({np.ndim(mean)}) must not "
                                 f"exceed the number of axes {self.axis}")
        self.input_mean = None if mean is None else np.asarray(mean, np.float64)
        self.input_variance = None if variance is None else np.asarray(variance, np.float64)
        self.invert = bool(invert)

    def _axes(self, shape: tuple) -> tuple[tuple[int, ...], tuple[int, ...]]:
        ndim = len(shape)
        if any(a < -ndim or a >= ndim for a in self.axis):
            raise ValueError(f"Layer '{self.name}' (Normalization): axis {self.axis} out of "
                             f"range for inputs of shape {format_shape(shape)}")
        keep = tuple(sorted(a % ndim for a in self.axis))
        for a in keep:
            if shape[a] is None:
                raise ValueError(f"Layer '{self.name}' (Normalization): the kept axis {a} "
                                 f"must be known, received inputs of shape "
                                 f"{format_shape(shape)}")
        return keep, tuple(d for d in range(ndim) if d not in keep)

    def build(self, input_shape: Any) -> None:
        shape = tuple(input_shape)
        self._keep, self._reduce = self._axes(shape)
        self._stat_shape = tuple(int(shape[a]) for a in self._keep)
        self._bshape = tuple(int(shape[d]) if d in self._keep else 1 for d in range(len(shape)))
        if self.input_mean is None:
            self.adapt_mean = self.add_weight("mean", self._stat_shape, "zeros", trainable=False)
            self.adapt_variance = self.add_weight("variance", self._stat_shape, "ones",
                                                  trainable=False)
            self.count = self.add_weight("count", (), "zeros", trainable=False, dtype="int64")
        self.built = True

    def _given(self, value: np.ndarray) -> np.ndarray:
        """A given statistic broadcast to the kept axes (trailing dims match the last kept
        axes, as Keras aligns them)."""
        if value.ndim:
            expanded = [1] * len(self._bshape)
            for i in range(1, value.ndim + 1):
                expanded[self._keep[-i]] = value.shape[-i]
            value = value.reshape(expanded)
        return np.broadcast_to(value, self._bshape).astype(self.dtype)

    def call(self, inputs: Node) -> Node:
        x = inputs if inputs.dtype == self.dtype else K.cast(inputs, self.dtype)
        if self.input_mean is not None:
            mean = K.constant(self._given(self.input_mean), self.dtype)
            var = K.constant(self._given(self.input_variance), self.dtype)
        else:
            mean = K.reshape(self.adapt_mean, self._bshape)
            var = K.reshape(self.adapt_variance, self._bshape)
        std = K.maximum(K.sqrt(var), K.constant(EPSILON, self.dtype))
        return mean + x * std if self.invert else (x - mean) / std

    def adapt(self, data: Any) -> None:
        """Computes the mean and variance of ``data`` (an array, or an iterable of batches)
        over every axis but the kept ones, and stores them in the layer's weights."""
        if self.input_mean is not None:
            raise ValueError(f"Layer '{self.name}' (Normalization): adapt() cannot be used "
                             "when mean and variance were given")
        total, mean, var = 0, None, None
        for batch in _batches("Normalization", data):
            batch = batch.astype(np.float64)
            if not self.built:
                self.build((None,) + batch.shape[1:])
                self.build_input_shape = (None,) + batch.shape[1:]
            stat = tuple(batch.shape[a] for a in self._keep)
            if batch.ndim != len(self._bshape) or stat != self._stat_shape:
                raise ValueError(f"Layer '{self.name}' (Normalization): adapt() received data "
                                 f"of shape {batch.shape}, expected statistics of shape "
                                 f"{self._stat_shape} over axes {self._keep}")
            n = int(np.prod([batch.shape[d] for d in self._reduce], dtype=np.int64))
            b_mean = batch.mean(axis=self._reduce)
            b_var = batch.var(axis=self._reduce)
            if mean is None:
                total, mean, var = n, b_mean, b_var
                continue
            # Chan et al.'s parallel update of mean and (population) variance
            new_total = total + n
            delta = b_mean - mean
            mean = mean + delta * (n / new_total)
            var = (var * total + b_var * n + delta**2 * (total * n / new_total)) / new_total
            total = new_total
        if mean is None:
            raise ValueError(f"Layer '{self.name}' (Normalization): adapt() received no data")
        self.adapt_mean.assign(np.asarray(mean, self.dtype).reshape(self._stat_shape))
        self.adapt_variance.assign(np.asarray(var, self.dtype).reshape(self._stat_shape))
        self.count.assign(np.asarray(total, np.int64))
        self._eager_cache.clear()

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"axis": list(self.axis), "invert": self.invert,
                       "mean": None if self.input_mean is None else self.input_mean.tolist(),
                       "variance": None if self.input_variance is None else
                       self.input_variance.tolist()})
        return config


# ---- Discretization ----------------------------------------------------------------------------
def _summarize(values: np.ndarray, epsilon: float) -> np.ndarray:
    """A (2, n) summary of sorted values (boundaries, weights) with about 1/epsilon entries
    (Keras' approximate quantiles, so ``adapt`` finds the same boundaries)."""
    values = np.sort(values.reshape(-1))
    step = max(values.size * epsilon, 1.0)
    picked = values[int(step - 1)::int(step)]
    return np.stack([picked, np.full(picked.shape, step)])


def _compress(summary: np.ndarray, epsilon: float) -> np.ndarray:
    if summary.shape[1] * epsilon < 1:
        return summary
    percents = epsilon + np.arange(0.0, 1.0, epsilon)
    cum = summary[1].cumsum()
    frac = cum / cum[-1]
    bins = np.interp(percents, frac, summary[0])
    cum_new = np.interp(percents, frac, cum)
    weights = cum_new - np.concatenate(([0.0], cum_new[:-1]))
    return np.stack((bins, weights)).astype(np.float32)


class Discretization(TFDataLayer, Layer):
    """Buckets numbers by boundaries (Keras' ``Discretization``): the output index is the
    ``i`` with ``bin_boundaries[i-1] <= x < bin_boundaries[i]`` (``np.digitize``), then
    encoded by ``output_mode``.

    Args:
        bin_boundaries: sorted boundaries (``n`` boundaries make ``n + 1`` bins).
        num_bins: the number of bins ``adapt`` finds (approximate quantiles of the data).
        epsilon: ``adapt``'s approximation error (default 0.01).
        output_mode: ``"int"`` (default; int32 bin indices), ``"one_hot"``, ``"multi_hot"``
            or ``"count"`` (floats of depth ``len(bin_boundaries) + 1``).
        sparse: must be False.

    Example:
        >>> kiln.layers.Discretization([0.0, 1.0])(np.array([[-1.5, 0.5, 2.0]]))
        array([[0, 1, 2]], dtype=int32)
    """

    def __init__(self, bin_boundaries: Any = None, num_bins: int | None = None,
                 epsilon: float = 0.01, output_mode: str = "int", sparse: bool = False,
                 dtype: Any = None, name: str | None = None, **kwargs: Any):
        super().__init__(dtype=dtype, name=name, **kwargs)
        check_choice("Discretization", "output_mode", output_mode, ("int",) + ENCODE_MODES[:3])
        if sparse:
            raise ValueError("Discretization: sparse=True is not supported by kiln")
        if num_bins is not None and bin_boundaries is not None:
            raise ValueError("Discretization: set bin_boundaries or num_bins, not both; "
                             f"received bin_boundaries={bin_boundaries!r}, num_bins={num_bins}")
        if num_bins is None and bin_boundaries is None:
            raise ValueError("Discretization: set either bin_boundaries or num_bins")
        if num_bins is not None and (isinstance(num_bins, bool) or int(num_bins) < 0):
            raise ValueError(f"Discretization: num_bins must be >= 0, received {num_bins!r}")
        if bin_boundaries is not None:
            b = np.asarray(bin_boundaries, np.float64).reshape(-1)
            if np.any(np.diff(b) < 0):
                raise ValueError("Discretization: bin_boundaries must be sorted, received "
                                 f"{list(bin_boundaries)}")
            bin_boundaries = b.tolist()
        self.bin_boundaries = bin_boundaries
        self.num_bins = None if num_bins is None else int(num_bins)
        self.epsilon = float(epsilon)
        self.output_mode = output_mode
        self.sparse = False
        self._summary = np.zeros((2, 0), np.float32)

    def adapt(self, data: Any, steps: int | None = None) -> None:
        """Finds ``num_bins`` bins of about equal counts in ``data`` (an array or an
        iterable of batches)."""
        if self.num_bins is None:
            raise ValueError("Discretization: cannot adapt a layer built with bin_boundaries; "
                             "use num_bins")
        summary = np.zeros((2, 0), np.float32)
        for i, batch in enumerate(_batches("Discretization", data)):
            if steps is not None and i >= steps:
                break
            part = _summarize(batch.astype(np.float32), self.epsilon)
            merged = np.concatenate((summary, part), axis=1)
            summary = _compress(merged[:, np.argsort(merged[0], kind="stable")], self.epsilon)
        self.bin_boundaries = _compress(summary, 1.0 / self.num_bins)[0, :-1].tolist()
        self._eager_cache.clear()

    def call(self, inputs: Node) -> Node:
        if self.bin_boundaries is None:
            raise ValueError(f"Layer '{self.name}' (Discretization): pass bin_boundaries or "
                             "call adapt() before using the layer")
        x = inputs if inputs.dtype in ("float32", "float64") else K.cast(inputs, "float32")
        bounds = K.constant(np.asarray(self.bin_boundaries, x.dtype).reshape(-1), x.dtype)
        idx = K.sum(K.cast(K.greater_equal(K.expand_dims(x, -1), bounds), "int32"), axis=-1)
        return encode(idx, self.output_mode, len(self.bin_boundaries) + 1,
                      "int32" if self.output_mode == "int" else self.dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"bin_boundaries": self.bin_boundaries, "num_bins": self.num_bins,
                       "epsilon": self.epsilon, "output_mode": self.output_mode,
                       "sparse": self.sparse})
        return config

    @classmethod
    def from_config(cls, config: dict) -> Layer:
        config = dict(config)
        if config.get("bin_boundaries") is not None and config.get("num_bins") is not None:
            bounds = config.pop("bin_boundaries")  # an adapted layer: keep what it learned
            layer = cls(**config)
            layer.bin_boundaries = list(bounds)
            return layer
        return cls(**config)
