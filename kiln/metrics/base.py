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
from kiln.core import DISCARD_SYMBOLIC_ASSIGNS, Node
from kiln.layers import context as trace_context
from kiln.layers.base import get_mask
from kiln.losses.base import (
    _bind,
    _builtin,
    _float,
    _signature,
    _symbolic,
    squeeze_or_expand_to_same_rank,
)
from kiln.metrics import stateful


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
    #: a Keras-style subclass of a built-in metric: the built-in ``stats``/``merge``
    _builtin_stats: Callable | None = None
    _builtin_merge: Callable | None = None

    def __init__(self, dtype: Any = None, name: str | None = None):
        from kiln.layers.naming import snake_case

        self.name = name or snake_case(type(self).__name__)
        self.dtype = dtype or kiln.config.floatx()
        self._metric_variables: list[stateful.MetricVariable] = []
        # a Keras-style metric creates its variables after this; a subclass of a built-in
        # metric still needs the built-in state
        if not self._keras_style() or self._builtin_stats is not None:
            self.reset_state()

    # -- Keras-style variables (kiln/metrics/stateful.py)
    def add_variable(self, shape: Any = (), initializer: Any = "zeros", dtype: Any = None,
                     aggregation: str = "sum", name: str | None = None) -> Any:
        """Creates a state variable (Keras 3's ``Metric.add_variable``).

        Args:
            shape: its shape.
            initializer: a name, an Initializer or None (zeros).
            dtype: default the metric's dtype.
            aggregation: how processes combine it: ``"sum"`` (updates must be additive:
                ``assign_add``, see :mod:`kiln.metrics.stateful`).
            name: its name.

        Returns:
            A :class:`kiln.Variable`: read it with ``kiln.ops`` in ``update_state`` and
            ``result``, update it with ``assign``/``assign_add``.
        """
        var = stateful.make_variable(self.name, shape, initializer, dtype or self.dtype,
                                     aggregation, name, len(self._metric_variables))
        self._metric_variables.append(var)
        return var

    def add_weight(self, name: Any = None, shape: Any = (), initializer: Any = "zeros",
                   dtype: Any = None, aggregation: str = "sum") -> Any:
        """Like :meth:`add_variable` (Keras' older name; ``name`` may come first)."""
        if name is not None and not isinstance(name, str):  # add_weight(shape, ...)
            name, shape = None, name
        return self.add_variable(shape, initializer, dtype, aggregation, name)

    @classmethod
    def _keras_style(cls) -> bool:
        """Whether the class is a Keras-style metric: its own ``update_state`` and no
        ``stats`` (see :mod:`kiln.metrics.stateful`)."""
        return getattr(cls, "_user_update_state", None) is not None

    # -- graph half
    def stats(self, y_true: Node, y_pred: Node | None = None,
              sample_weight: Node | None = None) -> list[Node]:
        """The batch's statistics. A Keras-style metric: the increments its ``update_state``
        makes to its variables (:mod:`kiln.metrics.stateful`)."""
        if self._keras_style():
            args = (y_true,) if self.n_inputs == 1 else (y_true, y_pred)
            return stateful.traced_increments(
                self, lambda *a, **k: self._user_update_state(*a, **k), args, sample_weight)
        raise NotImplementedError(f"{type(self).__name__} must implement stats() (or "
                                  "update_state with variables, Keras' way)")

    # -- Python half
    def merge(self, values: list[np.ndarray]) -> None:
        if self._keras_style():
            n = len(self._metric_variables)
            for var, delta in zip(self._metric_variables, values[:n]):
                var.assign(var.value + np.asarray(delta, var.dtype))
            if self._builtin_stats is not None and len(values) > n:
                self._builtin_merge(values[n:])
            return
        raise NotImplementedError(f"{type(self).__name__} must implement merge()")

    def result(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement result()")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "result" in cls.__dict__:
            cls.result = _deferrable(  # type: ignore[method-assign]
                stateful.computed(cls.__dict__["result"]))
        if "update_state" in cls.__dict__ and "stats" not in cls.__dict__:
            # Keras-style: Metric.stats traces it, Metric.update_state runs it through the
            # compiled statistics. A subclass of a built-in metric (Mean ...) whose
            # update_state calls super().update_state(...) keeps the built-in statistics too.
            user = cls.__dict__["update_state"]
            if cls.stats is not Metric.stats:
                cls._builtin_stats = cls.stats
                cls._builtin_merge = cls.merge
                cls.stats = Metric.stats  # type: ignore[method-assign]
                cls.merge = Metric.merge  # type: ignore[method-assign]
            cls._user_update_state = user
            cls.n_inputs = stateful.n_tensor_args(user)
            cls.update_state = stateful.routed(user, Metric.update_state)  # type: ignore

    def reset_state(self) -> None:
        """Keras' default for a metric with variables: every variable back to zeros."""
        if self._metric_variables or self._keras_style():
            for var in self._metric_variables:
                var.assign(np.zeros(var.shape, var.dtype))
            return
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
        recorder = stateful.recorder(self)
        if recorder is not None:  # super().update_state(...) in a Keras-style update_state
            assert self._builtin_stats is not None
            recorder.append(list(self._builtin_stats(*args, sample_weight=sample_weight)))
            return
        if len(args) == self.n_inputs + 1 and sample_weight is None:
            *args, sample_weight = args  # Keras' update_state(y_true, y_pred, sample_weight)
        if len(args) != self.n_inputs:
            raise TypeError(f"{self.name}: update_state expects {self.n_inputs} arrays (and "
                            f"sample_weight=), received {len(args)}")
        if _symbolic(*args, sample_weight):
            ctx = trace_context.current()
            if ctx is None and DISCARD_SYMBOLIC_ASSIGNS.get():
                # a layer called on a functional model's symbolic inputs: Keras discards the
                # update (its StatelessScope); the model's traced steps replay call() and
                # record it there
                return
            if ctx is None:
                raise TypeError(f"{self.name}: update_state received symbolic tensors outside "
                                "a traced step (a layer's call or a train_step traced by fit); "
                                "pass NumPy arrays")
            # inside a traced step: the statistics become outputs of the compiled step, merged
            # into this metric after every run (kiln/models/custom_steps.py)
            nodes = list(self.stats(*args, sample_weight=sample_weight))
            ctx.metric_updates.append((self, nodes))
            return
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
    def variables(self) -> list[Any]:
        """The state: the Variables of a Keras-style metric; else, for a metric that keeps
        NumPy state, a Variable per slot holding its current value, whose ``assign`` writes
        the metric's state back."""
        if self._metric_variables:
            return list(self._metric_variables)
        return [stateful.StateVariable(self, i, v) for i, v in enumerate(self._state_values())]

    def _state_values(self) -> list[Any]:
        return [v.numpy() for v in self._metric_variables]

    # -- Keras 3's stateless API (kiln/layers/stateless.py): state in, new state out
    def _stateless(self, metric_variables: Any, fn: Any) -> Any:
        from kiln.layers.stateless import values_of
        saved = values_of(self._state_values())
        if metric_variables is not None and len(metric_variables) != len(saved):
            raise ValueError(f"{self.name}: `metric_variables` must be a list of "
                             f"{len(saved)} values corresponding 1:1 to its variables, "
                             f"received {len(metric_variables)}")
        try:
            if metric_variables is not None:
                self._set_state_values(values_of(metric_variables))
            return fn()
        finally:
            self._set_state_values(saved)

    def stateless_update_state(self, metric_variables: Any, *args: Any, **kwargs: Any
                               ) -> list[np.ndarray]:
        """The state after ``update_state(*args, **kwargs)`` from ``metric_variables`` (one
        value per :attr:`variables`); this metric's own state is unchanged."""
        from kiln.layers.jax_bridge import has_tracer
        from kiln.layers.stateless import values_of
        if has_tracer(metric_variables, args, kwargs):  # inside jax.jit: a host callback
            from kiln.layers.jax_bridge import host_call
            return host_call(
                lambda m, a, k: self.stateless_update_state(m, *a, **k),
                (list(metric_variables), list(args), dict(kwargs)),
                [(np.shape(v), np.asarray(v).dtype) for v in self._state_values()])

        def run() -> list[np.ndarray]:
            self.update_state(*args, **kwargs)
            return values_of(self._state_values())
        return self._stateless(metric_variables, run)

    def stateless_result(self, metric_variables: Any) -> Any:
        """:meth:`result` of the state ``metric_variables``."""
        from kiln.layers.jax_bridge import has_tracer
        if has_tracer(metric_variables):  # inside jax.jit: a host callback
            from kiln.layers.jax_bridge import host_call
            like = np.asarray(self.result())
            return host_call(lambda m: [self.stateless_result(m)], (list(metric_variables),),
                             [(like.shape, like.dtype)])[0]
        return self._stateless(metric_variables, lambda: np.asarray(self.result()))

    def stateless_reset_state(self) -> list[np.ndarray]:
        """The state :meth:`reset_state` sets (this metric's own state is unchanged)."""
        from kiln.layers.stateless import values_of

        def run() -> list[np.ndarray]:
            self.reset_state()
            return values_of(self._state_values())
        return self._stateless(None, run)

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
        for var, value in zip(self._metric_variables, values):
            var.assign(value)

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype}

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r}>"


def _deferrable(result: Callable) -> Callable:
    """``result`` that, while a custom train_step is traced, returns a
    :class:`~kiln.layers.context.DeferredResult` (the logs read the metric after each step)."""

    def wrapped(self: Metric) -> Any:
        ctx = trace_context.current()
        if ctx is not None and ctx.defer_results:
            return trace_context.DeferredResult(self)
        return result(self)

    wrapped.__name__ = result.__name__
    wrapped.__doc__ = result.__doc__
    wrapped.__wrapped__ = result  # type: ignore[attr-defined]
    return wrapped


def weights_like(sample_weight: Node | None, values: Node) -> Node | None:
    if sample_weight is None:
        return None
    sw = K.cast(sample_weight, values.dtype) if sample_weight.dtype != values.dtype else \
        sample_weight
    # weights of the values' own shape: (batch, 1) weights of (batch,) values are squeezed
    # (expanding the values instead, as Keras does, gives the same sums)
    _, sw = squeeze_or_expand_to_same_rank(values, sw, expand_rank_1=False)
    while sw.ndim < values.ndim:
        sw = K.expand_dims(sw, -1)
    return K.broadcast_like(sw, values)


def mean_stats(values: Node, sample_weight: Node | None = None) -> list[Node]:
    """``[sum(values * w), sum(w)]`` (``w`` = 1 without sample weights). Like Keras, a mask
    on the values (sparse cross-entropy's ``ignore_class``) zeroes the sample weights of the
    masked entries, and is not used without sample weights."""
    mask = get_mask(values)
    values = _float(values)
    if sample_weight is not None and mask is not None:
        sample_weight, m = squeeze_or_expand_to_same_rank(
            K.cast(sample_weight, values.dtype), K.cast(mask, values.dtype))
        sample_weight = sample_weight * m
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

    def __init__(self, name: str | None = "mean", dtype: Any = None):
        super().__init__(name=name, dtype=dtype)

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

    def __init__(self, name: str | None = "sum", dtype: Any = None):
        super().__init__(name=name, dtype=dtype)

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
                  doc: str, order: tuple[str, ...] | None = None) -> type[MeanMetricWrapper]:
    """Builds a Keras metric class (``BinaryAccuracy`` ...): the mean of ``fn``.

    ``order`` is Keras' argument order (default: name, dtype, then ``params``)."""
    defaults = {**params, "name": default_name, "dtype": None}
    signature = _signature(order or ("name", "dtype", *params), defaults)

    def __init__(self, *args: Any, **kwargs: Any):
        values = _bind(class_name, signature, defaults, args, kwargs)
        name, dtype = values.pop("name"), values.pop("dtype")
        MeanMetricWrapper.__init__(self, fn, name=name, dtype=dtype, **values)

    __init__.__signature__ = signature  # type: ignore[attr-defined]

    return type(class_name, (MeanMetricWrapper,), {"__init__": __init__, "__doc__": doc,
                                                   "__module__": "kiln.metrics"})

