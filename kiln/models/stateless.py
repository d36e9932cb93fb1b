"""The model half of Keras 3's stateless API (``kiln.layers.stateless``): ``metrics_variables``,
``stateless_compute_loss`` and the JAX trainer's ``compute_loss_and_updates``, eagerly on
NumPy arrays (and, given JAX values inside ``jax.grad``, through ``kiln.layers.jax_bridge``).
A JAX-style ``train_step(self, state, data)`` runs in ``kiln.models.jax_steps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.layers.jax_bridge import bridged, has_tracer
from kiln.layers.stateless import swapped, values_of


class StatelessModelMixin:
    """``Model.metrics_variables``, ``stateless_compute_loss`` and
    ``compute_loss_and_updates`` (see the module docstring)."""

    @property
    def metrics_variables(self) -> list[Any]:
        """The state of every metric in ``self.metrics``, in order (a metric's
        ``variables``)."""
        return [v for m in self.metrics for v in m.variables]  # type: ignore[attr-defined]

    def _swap_metrics(self, metrics: list, metrics_variables: Sequence[Any] | None) -> list:
        """Sets the metrics' states from ``metrics_variables``; returns the old states."""
        saved = [values_of(m._state_values()) for m in metrics]
        if metrics_variables is None:
            return saved
        want = sum(len(s) for s in saved)
        if len(metrics_variables) != want:
            raise ValueError(f"{self.name}: `metrics_variables` must be a list of {want} "  # type: ignore[attr-defined]
                             "values corresponding 1:1 to its metrics_variables, received "
                             f"{len(metrics_variables)}")
        at = 0
        for m, s in zip(metrics, saved):
            m._set_state_values(values_of(metrics_variables[at:at + len(s)]))
            at += len(s)
        return saved

    def stateless_compute_loss(self, trainable_variables: Sequence[Any],
                               non_trainable_variables: Sequence[Any],
                               metrics_variables: Sequence[Any], x: Any = None, y: Any = None,
                               y_pred: Any = None, sample_weight: Any = None,
                               training: bool = True) -> tuple[Any, tuple]:
        """``compute_loss`` with the given variable values (weight penalties read them):
        ``(loss, (trainable_variables, non_trainable_variables, metrics_variables))``, the
        last two as they are after the computation. The model is unchanged."""
        who = f"{self.name}.stateless_compute_loss"  # type: ignore[attr-defined]
        trainable = list(self.trainable_variables)  # type: ignore[attr-defined]
        non_trainable = list(self.non_trainable_variables)  # type: ignore[attr-defined]
        if has_tracer(trainable_variables, non_trainable_variables, y, y_pred, sample_weight):
            loss, new_nt = _jax_compute_loss(self, trainable, non_trainable,
                                             trainable_variables, non_trainable_variables,
                                             y, y_pred, sample_weight, training)
            return loss, (list(trainable_variables), new_nt, list(metrics_variables))
        metrics = list(self.metrics)  # type: ignore[attr-defined]
        saved = self._swap_metrics(metrics, metrics_variables)
        try:
            with swapped(trainable, trainable_variables, who, "trainable_variables"), \
                    swapped(non_trainable, non_trainable_variables, who,
                            "non_trainable_variables"):
                loss = self.compute_loss(  # type: ignore[attr-defined]
                    x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)
                new_non_trainable = values_of(non_trainable)
                new_metrics = [v for m in metrics for v in values_of(m._state_values())]
        finally:
            self._swap_metrics(metrics, [v for s in saved for v in s])
        return np.asarray(loss), (list(trainable_variables), new_non_trainable, new_metrics)

    def compute_loss_and_updates(self, trainable_variables: Sequence[Any],
                                 non_trainable_variables: Sequence[Any],
                                 metrics_variables: Sequence[Any], x: Any, y: Any,
                                 sample_weight: Any, training: bool = False,
                                 optimizer_variables: Any = None) -> tuple[Any, tuple]:
        """Keras' JAX trainer hook: the forward pass (``stateless_call``) and the loss
        (``stateless_compute_loss``, plus the ``add_loss`` values of the call):
        ``(loss, (unscaled_loss, y_pred, non_trainable_variables, metrics_variables))``.
        kiln has no loss scaling, so both losses are equal."""
        kwargs = {"training": training} if self._call_accepts("training") else {}  # type: ignore[attr-defined]
        y_pred, non_trainable_variables, losses = self.stateless_call(  # type: ignore[attr-defined]
            trainable_variables, non_trainable_variables, x, return_losses=True, **kwargs)
        loss, (_, non_trainable_variables, metrics_variables) = self.stateless_compute_loss(
            trainable_variables, non_trainable_variables, metrics_variables, x=x, y=y,
            y_pred=y_pred, sample_weight=sample_weight, training=training)
        penalties = len(self.regularization_losses())  # type: ignore[attr-defined]
        for extra in losses[penalties:]:  # compute_loss counted the penalties already
            loss = loss + (extra.sum() if hasattr(extra, "sum") else extra)
        return loss, (loss, y_pred, non_trainable_variables, metrics_variables)


def _jax_compute_loss(model: Any, trainable: list, non_trainable: list, trainable_values: Any,
                      non_trainable_values: Any, y: Any, y_pred: Any, sample_weight: Any,
                      training: bool) -> tuple[Any, list]:
    """``stateless_compute_loss`` on JAX values (inside ``jax.grad``): the compute_loss graph
    as a JAX function with its own VJP (``kiln.layers.jax_bridge``)."""
    from kiln.layers.base import flatten, map_structure
    parts = [y, y_pred, sample_weight]
    arrays = [a for a in flatten(parts) if a is not None]

    def build(phs: list) -> tuple:
        it = iter(phs)
        ys, preds, sws = map_structure(lambda a: None if a is None else next(it), parts)
        loss = model.compute_loss(x=None, y=ys, y_pred=preds, sample_weight=sws,
                                  training=training)
        return [loss], non_trainable, None

    key = ("compute_loss", id(model._compile_args), repr(map_structure(
        lambda a: a is None, parts)))
    diff, new_nt, _ = bridged(model, key, build, trainable + non_trainable,
                              list(trainable_values) + list(non_trainable_values), arrays,
                              training=bool(training))
    return diff[0], [n if n is not None else v for n, v in zip(new_nt, non_trainable_values)]


def eager_compute_loss(model: Any, x: Any, y: Any, y_pred: Any, sample_weight: Any,
                       training: bool) -> np.ndarray:
    """The built-in ``compute_loss`` on NumPy arrays outside a traced step: the same graph,
    compiled once per signature through kiln's eager path (weight penalties read the
    variables' current values)."""
    from kiln import eager
    from kiln.core import Node
    from kiln.layers.base import flatten

    def arrays(v: Any) -> list:
        return [] if v is None else [a for a in flatten(v) if a is not None]

    parts = {"y": y, "y_pred": y_pred, "sample_weight": sample_weight}
    if any(isinstance(a, Node) for v in parts.values() for a in arrays(v)):
        raise TypeError(f"{model.name}: compute_loss received symbolic tensors outside a "
                        "traced step; pass NumPy arrays")
    flat = [np.asarray(a) for v in parts.values() for a in arrays(v)]
    counts = [len(arrays(v)) for v in parts.values()]

    def rebuild(template: Any, it: Any) -> Any:
        if template is None:
            return None
        if isinstance(template, dict):
            return {k: rebuild(v, it) for k, v in template.items()}
        if isinstance(template, list | tuple):
            return type(template)(rebuild(v, it) for v in template)
        return next(it)

    def graph(*phs: Node) -> Node:
        it = iter(phs)
        ys, preds, sws = (rebuild(v, it) for v in parts.values())
        return model.compute_loss(x=None, y=ys, y_pred=preds, sample_weight=sws,
                                  training=training)

    key = ("compute_loss", id(model._compile_args), bool(training), tuple(counts),
           repr([type(v).__name__ for v in parts.values()]))
    return eager.run(key, graph, flat, model.dtype if model.dtype in ("float32", "float64")
                     else "float32", owner=model, name=f"{model.name}.compute_loss",
                     who=model.name)


__all__ = ["StatelessModelMixin", "eager_compute_loss"]
