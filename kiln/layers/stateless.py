"""Keras 3's stateless API (the JAX style): state in, new state out, the object's own
variables untouched.

``layer.stateless_call(trainable_variables, non_trainable_variables, *args)`` runs the layer
with the given weight values and returns ``(outputs, new non-trainable values)``;
``Optimizer.stateless_apply``, ``Metric.stateless_update_state``/``stateless_result``/
``stateless_reset_state`` and ``Model.stateless_compute_loss``/``compute_loss_and_updates``
follow the same pattern. kiln runs them eagerly on NumPy arrays, through its one eager path:
the given values are swapped into the variables, the ordinary (compiled, cached) call runs,
the new values are read back and the old ones restored (:func:`swapped`). So a stateless call
gives exactly the stateful call's numbers, and is not thread-safe against other uses of the
same object (as a stateful call is not).

What kiln cannot do is what the JAX backend does with them: differentiate them with
``jax.grad`` (kiln is not traced by JAX); differentiate with ``kiln.GradientTape`` or write a
TensorFlow-style ``train_step(self, data)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, Variable


def _value(x: Any) -> np.ndarray:
    if isinstance(x, Node):
        raise TypeError("kiln's stateless API runs eagerly on arrays, received a symbolic "
                        "tensor (inside a traced train_step, call the layer itself)")
    return np.array(x.numpy() if isinstance(x, Variable) else x, copy=True)


def values_of(variables: Sequence[Any]) -> list[np.ndarray]:
    """Copies of the variables' current values."""
    return [_value(v) for v in variables]


@contextmanager
def swapped(variables: Sequence[Variable], values: Sequence[Any], who: str,
            what: str) -> Iterator[None]:
    """Runs the block with ``values`` in ``variables`` (checked 1:1, shapes included), then
    puts the variables' own values back, whatever happens."""
    variables = list(variables)
    if values is None or len(values) != len(variables):
        got = "None" if values is None else f"a list of {len(values)}"
        raise ValueError(f"{who}: `{what}` must be a list of values corresponding 1:1 to "
                         f"its {what} ({len(variables)}), received {got}")
    new = [_value(x) for x in values]
    for i, (var, x) in enumerate(zip(variables, new)):
        if x.shape != tuple(var.shape):
            raise ValueError(f"{who}: {what}[{i}] (for {var.name!r}) must have shape "
                             f"{tuple(var.shape)}, received shape {x.shape}")
    saved = values_of(variables)
    try:
        for var, x in zip(variables, new):
            var.assign(x)
        yield
    finally:
        for var, x in zip(variables, saved):
            var.assign(x)


class StatelessLayerMixin:
    """``Layer.stateless_call`` (see the module docstring)."""

    def stateless_call(self, trainable_variables: Sequence[Any],
                       non_trainable_variables: Sequence[Any], *args: Any,
                       return_losses: bool = False, **kwargs: Any) -> tuple:
        """Calls the layer with the given variable values, without side effects.

        Args:
            trainable_variables: one value per ``self.trainable_variables``.
            non_trainable_variables: one value per ``self.non_trainable_variables``.
            *args, **kwargs: the call's arguments (NumPy arrays), e.g. ``x, training=True``.
            return_losses: also return the losses of the call (weight penalties and
                ``add_loss`` values, as ``self.losses``).

        Returns:
            ``(outputs, non_trainable_variables)``, or ``(outputs, non_trainable_variables,
            losses)``: the new non-trainable values (BatchNormalization's moving statistics
            after a training call ...) as NumPy arrays. The layer's variables are unchanged.
        """
        if not self.built:  # type: ignore[attr-defined]
            raise ValueError(f"To call stateless_call, {type(self).__name__} "
                             f"'{self.name}' must be built (its variables must exist); "  # type: ignore[attr-defined]
                             "build it by calling it on some data")
        trainable = list(self.trainable_variables)  # type: ignore[attr-defined]
        non_trainable = list(self.non_trainable_variables)  # type: ignore[attr-defined]
        who = f"{type(self).__name__} '{self.name}'.stateless_call"  # type: ignore[attr-defined]
        from kiln.layers.jax_bridge import has_tracer
        if has_tracer(trainable_variables, non_trainable_variables, args, kwargs):
            return _jax_stateless_call(self, trainable, non_trainable, trainable_variables,
                                       non_trainable_variables, args, kwargs, return_losses)
        with swapped(trainable, trainable_variables, who, "trainable_variables"), \
                swapped(non_trainable, non_trainable_variables, who,
                        "non_trainable_variables"):
            outputs = self(*args, **kwargs)  # type: ignore[operator]
            outputs = _copies(outputs)
            new_non_trainable = values_of(non_trainable)
            losses = _losses(self) if return_losses else []
        if return_losses:
            return outputs, new_non_trainable, losses
        return outputs, new_non_trainable


def _is_array(v: Any) -> bool:
    return hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, Node | Variable)


def _jax_stateless_call(layer: Any, trainable: list, non_trainable: list, trainable_values: Any,
                        non_trainable_values: Any, args: tuple, kwargs: dict,
                        return_losses: bool) -> tuple:
    """``stateless_call`` on JAX values (inside ``jax.grad``): kiln's graph as a JAX
    function with its own VJP (``kiln.layers.jax_bridge``)."""
    from kiln.layers.base import flatten, map_structure
    from kiln.layers.context import current
    from kiln.layers.jax_bridge import bridged
    kwargs = dict(kwargs)
    training = kwargs.pop("training", None)
    arrays = [v for v in flatten([list(args), kwargs]) if _is_array(v)]
    for what, vals, want in (("trainable_variables", trainable_values, trainable),
                             ("non_trainable_variables", non_trainable_values, non_trainable)):
        if len(vals) != len(want):
            raise ValueError(f"{layer.name}.stateless_call: `{what}` must be a list of "
                             f"values corresponding 1:1 to its {what} ({len(want)}), "
                             f"received a list of {len(vals)}")

    def build(phs: list) -> tuple:
        it = iter(phs)
        a, kw = map_structure(lambda v: next(it) if _is_array(v) else v, [list(args), kwargs])
        out = layer(*a, training=training, **kw)
        flat = flatten(out)
        extra: list = []
        if return_losses:
            ctx = current()
            extra = list(layer.regularization_losses()) + list(ctx.losses if ctx else [])
            extra = [K.sum(e) if getattr(e, "ndim", 0) else e for e in extra]
        return flat + extra, non_trainable, (out, len(flat), len(extra))

    diff, new_nt, (template, n_out, _) = bridged(
        layer, ("stateless_call", repr([type(a).__name__ for a in args]), repr(
            sorted((k, repr(v)) for k, v in kwargs.items() if not _is_array(v))),
            bool(return_losses)),
        build, trainable + non_trainable, list(trainable_values) + list(non_trainable_values),
        arrays, training=bool(training))
    it = iter(diff[:n_out])
    outputs = map_structure(lambda _: next(it), template)
    new_non_trainable = [n if n is not None else v
                         for n, v in zip(new_nt, non_trainable_values)]
    if return_losses:
        return outputs, new_non_trainable, list(diff[n_out:])
    return outputs, new_non_trainable


def _losses(layer: Any) -> list[np.ndarray]:
    """``layer.losses`` as arrays: the weight penalties (graph nodes of the variables)
    evaluated through the eager path, then the ``add_loss`` values of the last call."""
    from kiln import eager
    penalties = layer.regularization_losses()
    values = []
    if penalties:
        out = eager.run(("regularization_losses", len(penalties)),
                        lambda: layer.regularization_losses(), [], layer.dtype
                        if layer.dtype in ("float32", "float64") else "float32", owner=layer,
                        name=f"{layer.name}.losses", who=layer.name)
        values = [np.asarray(v) for v in (out if isinstance(out, list) else [out])]
    return values + [np.asarray(v) for v in layer.__dict__.get("_eager_losses", ())]


def _copies(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _copies(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return type(x)(_copies(v) for v in x)
    return np.array(x, copy=True) if isinstance(x, np.ndarray) else x


__all__ = ["StatelessLayerMixin", "swapped", "values_of"]
