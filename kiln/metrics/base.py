"""The Metric base class, the (weighted) mean metrics and the wrapper of per-sample functions.

A metric splits into two halves:

* ``stats(y_true, y_pred, sample_weight)`` builds graph nodes for one batch's sufficient
  statistics (``[sum of weighted values, sum of weights]``, confusion counts per threshold
  ...). The trainer adds them to the training/test graph, so metrics cost no extra pass over
  the data;
* ``merge(values)`` adds a batch's statistics (NumPy) into the metric's state, and
  ``result()`` turns the state into the metric's value, in Python.

``update_state(y_true, y_pred, sample_weight=None)`` on NumPy arrays runs the statistics
through kiln's one eager path (:mod:`kiln.eager`: compiled once per input signature) and
merges them, so a metric also works on its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

import kiln.config
import kiln.ops as K
from kiln import eager as eager_path
from kiln.core import Node
from kiln.losses.base import _builtin, _float, _symbolic, squeeze_or_expand_to_same_rank


class Metric:
    """Base class of stateful metrics.

    Args:
        name: the metric's name (its key in the logs).
        dtype: the float dtype of the statistics (default floatx).

    Subclasses implement :meth:`stats` (graph nodes for one batch), :meth:`merge` (add a
    batch's NumPy statistics to the state), :meth:`result` and :meth:`reset_state`.
    """

    #: number of tensor arguments of ``update_state`` before ``sample_weight``
    n_inputs = 2

    def __init__(self, name: str | None = None, dtype: Any = None):
        from kiln.layers.base import snake_case

        self.name = name or snake_case(type(self).__name__)
        self.dtype = dtype or kiln.config.floatx()
        self.reset_state()

    # -- graph half
    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None
              ) -> list[Node]:
        raise NotImplementedError(f"{type(self).__name__} must implement stats()")

    # -- Python half
    def merge(self, values: list[np.ndarray]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement merge()")

    def result(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement result()")

    def reset_state(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement reset_state()")

    def _graph_key(self) -> tuple:
        """What identifies the statistics' graph, besides the input signature."""
        config = {k: v for k, v in self.get_config().items() if k != "name"}
        return (type(self), json.dumps(config, sort_keys=True, default=repr))

    def update_state(self, *args: Any, sample_weight: Any = None) -> None:
        """Accumulates one batch given as NumPy arrays (compiled once per signature).

        kiln's own metrics share the compiled statistics by config (:data:`kiln.eager.SHARED`);
        other metrics keep theirs. The compiled call is thread-safe; the metric's state is
        not (use one metric per thread).
        """
        if len(args) != self.n_inputs:
            raise TypeError(f"{self.name}: update_state expects {self.n_inputs} arrays (and "
                            f"sample_weight=), received {len(args)}")
        if _symbolic(*args, sample_weight):
            raise TypeError(f"{self.name}: update_state takes NumPy arrays; inside a graph use "
                            "metric.stats(...) (models do this for compiled metrics)")
        arrays = list(args) + ([] if sample_weight is None else [sample_weight])
        n = self.n_inputs

        def graph(*phs: Node) -> list[Node]:
            return list(self.stats(*phs[:n], sample_weight=phs[n] if len(phs) > n else None))

        self.merge(eager_path.run(self._graph_key(), graph, arrays, self.dtype,
                                  owner=None if _builtin(self, "metrics") else self,
                                  name=f"{self.name}_update_state", who=self.name))

    def __call__(self, *args: Any, sample_weight: Any = None) -> Any:
        """Updates the state with one batch and returns the result."""
        self.update_state(*args, sample_weight=sample_weight)
        return self.result()

    @property
    def variables(self) -> list[np.ndarray]:
        return [np.asarray(v) for v in self._state_values()]

    def _state_values(self) -> list[Any]:
        return []

    def get_state(self) -> list:
        """The accumulated state as JSON-able lists (checkpoints store it mid-epoch, so that
        a resumed epoch logs the same values as an uninterrupted one)."""
        return [np.asarray(v, np.float64).tolist() for v in self._state_values()]

    def set_state(self, state: list) -> None:
        """Restores a state returned by :meth:`get_state`."""
        values = [np.asarray(v, np.float64) for v in state]
        if len(values) != len(self._state_values()):
            raise ValueError(f"{self.name}: a state of {len(values)} values does not fit this "
                             f"metric ({len(self._state_values())} values)")
        self._set_state_values(values)

    def _set_state_values(self, values: list[np.ndarray]) -> None:
        """Inverse of ``_state_values`` (stateless metrics have nothing to set)."""

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype}

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r}>"


def weights_like(sample_weight: Node | None, values: Node) -> Node | None:
    if sample_weight is None:
        return None
    sw = K.cast(sample_weight, values.dtype) if sample_weight.dtype != values.dtype else \
        sample_weight
    values, sw = squeeze_or_expand_to_same_rank(values, sw)
    while sw.ndim < values.ndim:
        sw = K.expand_dims(sw, -1)
    return K.broadcast_like(sw, values)


def mean_stats(values: Node, sample_weight: Node | None = None) -> list[Node]:
    """``[sum(values * w), sum(w)]`` (``w`` = 1 without sample weights)."""
    values = _float(values)
    sw = weights_like(sample_weight, values)
    if sw is None:
        return [K.sum(values), K.size_of(values)]
    return [K.sum(values * sw), K.sum(sw)]


class Mean(Metric):
    """The (weighted) mean of the values seen: ``update_state(values, sample_weight=None)``.

    Example:
        >>> m = kiln.metrics.Mean(); m.update_state(np.array([1., 3.])); m.result()
        2.0
    """

    n_inputs = 1

    def reset_state(self) -> None:
        self.total = 0.0
        self.count = 0.0

    def stats(self, values: Node, sample_weight: Node | None = None) -> list[Node]:  # type: ignore[override]
        return mean_stats(values, sample_weight)

    def merge(self, values: list[Any]) -> None:
        self.total += float(values[0])
        self.count += float(values[1])

    def result(self) -> float:
        return self.total / self.count if self.count else 0.0

    def _state_values(self) -> list[Any]:
        return [self.total, self.count]

    def _set_state_values(self, values: list[np.ndarray]) -> None:
        self.total, self.count = float(values[0]), float(values[1])


class Sum(Mean):
    """The (weighted) sum of the values seen."""

    def result(self) -> float:
        return self.total


class MeanMetricWrapper(Mean):
    """The mean of a per-sample function ``fn(y_true, y_pred, **kwargs)`` over all samples.

    Args:
        fn: per-sample metric function built with ``kiln.ops``.
        name: the metric's name.
        **kwargs: extra arguments of ``fn``.
    """

    n_inputs = 2

    def __init__(self, fn: Callable, name: str | None = None, dtype: Any = None,
                 **kwargs: Any):
        self._fn = fn
        self._fn_kwargs = kwargs
        super().__init__(name=name or getattr(fn, "__name__", None), dtype=dtype)

    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None  # type: ignore[override]
              ) -> list[Node]:
        return mean_stats(self._fn(y_true, y_pred, **self._fn_kwargs), sample_weight)

    def _graph_key(self) -> tuple:
        return super()._graph_key() + (self._fn,)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(self._fn_kwargs)
        if type(self) is MeanMetricWrapper:
            config["fn"] = getattr(self._fn, "__name__", repr(self._fn))
        return config

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        config = dict(config)
        if cls is MeanMetricWrapper:
            fn = config.pop("fn")
            from kiln.metrics.lookup import get

            return cls(get(fn)._fn if isinstance(fn, str) else fn, **config)
        return cls(**config)


def wrapper_class(class_name: str, fn: Callable, default_name: str, params: dict[str, Any],
                  doc: str) -> type[MeanMetricWrapper]:
    """Builds a Keras metric class (``BinaryAccuracy`` ...): the mean of ``fn``."""
    def __init__(self, *args: Any, name: str | None = default_name, dtype: Any = None,
                 **kwargs: Any):
        names = list(params)
        if len(args) > len(names):
            raise TypeError(f"{class_name}: too many positional arguments")
        values = dict(params)
        values.update(zip(names, args))
        for key in kwargs:
            if key not in params:
                raise TypeError(f"{class_name}: unexpected keyword argument {key!r}")
        values.update(kwargs)
        MeanMetricWrapper.__init__(self, fn, name=name, dtype=dtype, **values)

    return type(class_name, (MeanMetricWrapper,), {"__init__": __init__, "__doc__": doc,
                                                   "__module__": "kiln.metrics"})

