"""Keras' JAX-style steps: ``train_step(self, state, data)`` and ``test_step(self, state,
data)`` (the guide "Customizing what happens in fit() with JAX").

Where jax is installed, ``fit``/``evaluate`` run such a step eagerly, batch by batch, as
Keras' JAX trainer does (without ``jax.jit``): the state is the values of the model's
trainable and non-trainable variables, the optimizer's variables (training) and the metrics'
state (``metrics_variables``), as NumPy arrays; the step returns ``(logs, new state)`` and the
new state is written back into the variables. Inside the step, ``jax.value_and_grad`` of the
stateless methods works because they hand JAX kiln's compiled graphs with their own VJP
(``kiln.layers.jax_bridge``). Without jax, such a step is refused with an error naming the
TensorFlow-style alternative.
"""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any

import numpy as np

from kiln.layers.stateless import values_of
from kiln.models.data import TensorSpec

_TF_GUIDE = "https://keras.io/guides/custom_train_step_in_tensorflow/"


def is_jax_style(model: Any, mode: str) -> bool:
    """Whether ``{mode}_step`` takes ``(state, data)`` (two required arguments)."""
    method = getattr(model, f"{mode}_step", None)
    try:
        params = [p for p in inspect.signature(method).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is p.empty]
    except (TypeError, ValueError):
        return False
    return len(params) == 2


def jax_style_step(model: Any, mode: str, first: list, structure: tuple) -> Any:
    """The step object of a JAX-style ``train_step``/``test_step`` (see the module
    docstring), in the form the fit/evaluate loops run."""
    from kiln.models.custom_steps import StepTraceError, _pack_batch, unpack_x_y_sample_weight
    from kiln.models.step_graphs import _Step
    if importlib.util.find_spec("jax") is None:
        raise StepTraceError(
            f"{model.name}: {mode}_step(state, data) has the JAX backend's stateless signature "
            f"{mode}_step(self, state, data), which needs jax (not installed: it "
            "differentiates with jax.grad). Install jax, or write the TensorFlow-style "
            f"{mode}_step(self, data) of the guide 'Customizing what happens in fit() with "
            f"TensorFlow' ({_TF_GUIDE}), with kiln.GradientTape in place of tf.GradientTape")
    logs: dict = {}
    method = getattr(model, f"{mode}_step")
    # the compiled metrics exist before the loop starts (it resets them every epoch)
    _, y, _ = unpack_x_y_sample_weight(_pack_batch(list(first), structure))
    if model._outputs is None and model.compiled and y is not None:
        model._resolve_outputs([TensorSpec((None,) + np.shape(a)[1:],
                                           "int32" if np.asarray(a).dtype.kind in "iu"
                                           else "float32")
                                for a in (y if isinstance(y, list | tuple) else [y])])

    def run(*feeds: Any) -> list:
        data = _pack_batch(list(feeds), structure)
        trainable = list(model.trainable_variables)
        non_trainable = list(model.non_trainable_variables)
        metrics = list(model.metrics)
        optimizer = model.optimizer if mode == "train" else None
        if optimizer is not None and not optimizer.built:
            optimizer.build(trainable)
        state = [values_of(trainable), values_of(non_trainable)]
        if optimizer is not None:
            state.append(values_of(optimizer.variables))
        state.append([v for m in metrics for v in values_of(m._state_values())])
        returned = method(tuple(state), data)
        if not isinstance(returned, tuple) or len(returned) != 2:
            raise StepTraceError(f"{model.name}: a JAX-style {mode}_step must return "
                                 f"(logs, state), received {type(returned).__name__}")
        new_logs, new_state = returned
        if len(new_state) != len(state):
            raise StepTraceError(f"{model.name}: {mode}_step returned a state of "
                                 f"{len(new_state)} parts, expected {len(state)}")
        groups = [trainable, non_trainable] + ([optimizer.variables] if optimizer else [])
        for variables, values in zip(groups, new_state):
            for var, value in zip(variables, values):
                var.assign(np.asarray(value))
        at = 0
        for m in metrics:
            n = len(m._state_values())
            m._set_state_values(values_of(list(new_state[-1])[at:at + n]))
            at += n
        logs.clear()
        logs.update(new_logs)
        return []

    step = _Step(run, [], [], False)
    step.logs = lambda: {k: float(np.asarray(v)) if np.ndim(v) == 0 else np.asarray(v)
                         for k, v in logs.items()}
    return step


__all__ = ["is_jax_style", "jax_style_step"]
