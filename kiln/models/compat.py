"""Keras names kept for compatibility on :class:`~kiln.models.Model`: ``model.input`` /
``model.output`` (the single symbolic input/output of a functional or Sequential model, or of a
subclassed model once called on symbolic tensors) and tf.keras' ``compiled_loss`` /
``compiled_metrics``, which Keras 3 still offers inside a custom ``train_step``.
"""

from __future__ import annotations

from typing import Any

from kiln.layers.base import Layer


class ModelCompatMixin:
    """``input``, ``output``, ``compiled_loss`` and ``compiled_metrics`` (see module doc)."""

    @property
    def input(self) -> Any:
        """The model's input tensor(s), as given to ``Model(inputs, outputs)`` (Keras 3:
        ``Functional.input`` is the constructor's structure); a built Sequential model's one
        input; a subclassed model's input once it was called on symbolic tensors."""
        return self._structure_of("input")

    @property
    def output(self) -> Any:
        """The model's output tensor(s); see :attr:`input`."""
        value = self.__dict__.get("_output_value")
        if value is not None:
            return value
        return self._structure_of("output")

    @output.setter
    def output(self, value: Any) -> None:
        self.__dict__["_output_value"] = value

    def _structure_of(self, what: str) -> Any:
        struct = self.__dict__.get(f"_{what}s_struct")
        if struct is not None:
            return struct
        flat = self.__dict__.get(f"{what}s")
        if flat:
            return flat[0] if len(flat) == 1 else list(flat)
        if self.__dict__.get("_inbound"):
            return getattr(Layer, what).fget(self)
        raise AttributeError(f"{type(self).__name__} {getattr(self, 'name', '')!r} has no "
                           f"defined {what}: it is not a functional model and has never been "
                           "called on symbolic tensors (call it on kiln.Input(...) first, or "
                           f"build a functional model)")

    def compiled_loss(self, y: Any, y_pred: Any, sample_weight: Any = None,
                      regularization_losses: Any = None) -> Any:
        """tf.keras' ``self.compiled_loss(y, y_pred)`` in a custom ``train_step``: the loss
        given to ``compile()`` (plus regularization and added losses, which kiln always
        includes, so ``regularization_losses`` is not added again), as Keras 3's
        ``compute_loss(x=None, y, y_pred, sample_weight)``."""
        del regularization_losses  # compute_loss includes them (as in Keras 3)
        return self.compute_loss(x=None, y=y, y_pred=y_pred, sample_weight=sample_weight)

    @property
    def compiled_metrics(self) -> _CompiledMetrics:
        """tf.keras' ``self.compiled_metrics``: ``update_state(y, y_pred, sample_weight=None)``
        updates the metrics given to ``compile()``."""
        return _CompiledMetrics(self)


class _CompiledMetrics:
    """What ``model.compiled_metrics`` returns (tf.keras' ``update_state``/``reset_state``
    and ``metrics``)."""

    def __init__(self, model: Any):
        self._model = model

    @property
    def metrics(self) -> list:
        specs = self._model._outputs or []
        return [m for o in specs for m in list(o.metrics) + list(o.weighted_metrics)]

    def update_state(self, y: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Updates the compiled metrics of every output with a batch (the metrics given
        ``weighted_metrics`` with ``sample_weight``)."""
        model = self._model
        if not getattr(model, "compiled", False):
            raise RuntimeError(f"{model.name}: compiled_metrics.update_state needs a compiled "
                               "model; call compile() first")
        from kiln.models.custom_steps import CustomStepsMixin

        CustomStepsMixin.compute_metrics(model, None, y, y_pred, sample_weight=sample_weight)

    def reset_state(self) -> None:
        for m in self.metrics:
            m.reset_state()
