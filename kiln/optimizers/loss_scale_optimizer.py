"""LossScaleOptimizer: dynamic loss scaling around another optimizer, Keras 3's rule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer

_BASE_DEFAULTS = {"weight_decay": None, "clipnorm": None, "global_clipnorm": None,
                  "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
                  "ema_overwrite_frequency": None, "loss_scale_factor": None,
                  "gradient_accumulation_steps": None}


def all_finite(grads: Sequence[Node]) -> Node:
    """A bool scalar node: every element of every gradient is finite."""
    flags = [ops.all(ops.isfinite(g)) for g in grads]
    out = flags[0]
    for f in flags[1:]:
        out = ops.logical_and(out, f)
    return out


class LossScaleOptimizer(Optimizer):
    """Wraps ``inner_optimizer`` with dynamic loss scaling (Keras 3's rule).

    The trainer differentiates ``scale_loss(loss) = loss * dynamic_scale``; the step divides
    the gradients by ``dynamic_scale`` and then, all in the compiled step:

    - if every gradient is finite, the inner optimizer's update is applied and
      ``step_counter`` counts up; after ``dynamic_growth_steps`` such steps in a row the scale
      doubles (and the counter restarts);
    - otherwise the step is skipped (variables, slots and the inner ``iterations`` keep their
      values), the scale halves and the counter restarts.

    kiln trains in float32 by default, where scaling rarely matters, but the skip of a step
    with non-finite gradients (an overflow, a NaN batch) works the same way.

    Args:
        inner_optimizer: the Optimizer to wrap.
        initial_scale: the first loss scale (2**15).
        dynamic_growth_steps: finite steps between doublings of the scale (2000).
        name: the optimizer's name.
        **kwargs: the common optimizer arguments are refused (set them on the inner
            optimizer), as in Keras.

    Example:
        >>> opt = kiln.optimizers.LossScaleOptimizer(kiln.optimizers.SGD(0.1))
        >>> model.compile(optimizer=opt, loss="mse")
    """

    def __init__(self, inner_optimizer: Optimizer, initial_scale: float = 2.0**15,
                 dynamic_growth_steps: int = 2000, name: str | None = None, **kwargs: Any):
        if not kwargs.pop("dynamic", True):
            raise ValueError("LossScaleOptimizer no longer supports `dynamic=False`. Instead, "
                             "simply set `loss_scale_factor` directly on the `inner_optimizer`.")
        for arg, default in _BASE_DEFAULTS.items():
            if arg in kwargs:
                value = kwargs.pop(arg)
                if value is not None if default is None else value != default:
                    raise ValueError(f"LossScaleOptimizer does not support `{arg}`. Instead, "
                                     f"set `{arg}` on the `inner_optimizer`.")
        if kwargs:
            raise ValueError("LossScaleOptimizer does not support arguments: "
                             f"`{'`, `'.join(kwargs)}`.")
        if isinstance(inner_optimizer, dict | str):
            from kiln.optimizers import get
            inner_optimizer = get(inner_optimizer)
        if not isinstance(inner_optimizer, Optimizer):
            raise TypeError("LossScaleOptimizer: `inner_optimizer` must be a kiln Optimizer, "
                            f"received {inner_optimizer!r}")
        if isinstance(dynamic_growth_steps, bool) or not isinstance(
                dynamic_growth_steps, int | np.integer) or dynamic_growth_steps < 1:
            raise ValueError("LossScaleOptimizer: `dynamic_growth_steps` must be an integer "
                             f">= 1, received {dynamic_growth_steps!r}")
        super().__init__(learning_rate=0.0, name=name or "loss_scale_optimizer")
        self.inner_optimizer = inner_optimizer
        self.initial_scale = float(initial_scale)
        self.dynamic_growth_steps = int(dynamic_growth_steps)
        inner_optimizer.loss_scale_factor = None
        # the inner optimizer's step count and learning rate are this optimizer's
        self.iterations = inner_optimizer.iterations
        self.learning_rate_variable = inner_optimizer.learning_rate_variable
        self.step_counter = Variable(np.int64(0), name=f"{self.name}/step_counter",
                                     trainable=False, dtype="int64")
        self.dynamic_scale = Variable(np.float32(self.initial_scale),
                                      name=f"{self.name}/dynamic_scale", trainable=False,
                                      dtype="float32")

    # ---- delegated to the inner optimizer --------------------------------------------------
    @property
    def _learning_rate(self) -> Any:  # read by saving (a schedule or a fixed rate)
        inner = self.__dict__.get("inner_optimizer")
        return self.__dict__.get("_own_lr") if inner is None else inner._learning_rate

    @_learning_rate.setter
    def _learning_rate(self, value: Any) -> None:
        self.__dict__["_own_lr"] = value

    @property
    def learning_rate(self) -> float:
        """The inner optimizer's learning rate (settable)."""
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self.inner_optimizer.learning_rate = value

    def before_step(self) -> None:
        self.inner_optimizer.before_step()

    def build(self, variables: Sequence[Variable]) -> None:
        """Builds the inner optimizer on ``variables``."""
        self.inner_optimizer.build(variables)
        self._trainable_variables = self.inner_optimizer._trainable_variables
        self.built = True

    @property
    def variables(self) -> list[Variable]:
        """The inner ``iterations``, ``step_counter``, ``dynamic_scale``, then the inner
        optimizer's slots."""
        inner = self.inner_optimizer.variables
        return [inner[0], self.step_counter, self.dynamic_scale, *inner[1:]]

    def get_slot(self, variable: Variable, slot: str) -> Variable:
        return self.inner_optimizer.get_slot(variable, slot)

    def finalize_variable_values(self, var_list: Sequence[Variable]) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    def swap_ema_weights(self, variables: Sequence[Variable] | None = None) -> None:
        self.inner_optimizer.swap_ema_weights(variables)

    @property
    def use_ema(self) -> bool:
        inner = self.__dict__.get("inner_optimizer")
        return bool(inner is not None and inner.use_ema)

    @use_ema.setter
    def use_ema(self, value: bool) -> None:  # the base constructor writes False
        pass

    # ---- the step --------------------------------------------------------------------------
    def scale_loss(self, loss: Any) -> Any:
        """``loss * dynamic_scale`` (the scale's current value, read by the compiled step)."""
        scale = convert_to_tensor(self.dynamic_scale)
        if isinstance(loss, Node):
            return loss * ops.cast(scale, loss.dtype)
        return loss * float(self.dynamic_scale.value)

    def update_nodes(self, grads: Sequence[Node | None],
                     variables: Sequence[Variable]) -> list[tuple[Variable, Node]]:
        """The inner optimizer's update on ``grads / dynamic_scale``, applied only where every
        gradient is finite, and the scale's own update."""
        grads, variables = list(grads), list(variables)
        self.build(variables)
        present = [convert_to_tensor(g) for g in grads if g is not None]
        if not present:
            raise ValueError("LossScaleOptimizer: no gradients provided for any variable")
        finite = all_finite(present)
        scale = convert_to_tensor(self.dynamic_scale)
        unscaled = [None if g is None else convert_to_tensor(g) / ops.cast(
            scale, convert_to_tensor(g).dtype) for g in grads]
        inner = self.inner_optimizer.update_nodes(unscaled, variables)
        updates = [(var, ops.where(finite, new, convert_to_tensor(var))) for var, new in inner]
        counter = convert_to_tensor(self.step_counter)
        grow = ops.equal(counter, self.dynamic_growth_steps - 1)
        zero = ops.zeros_like(counter)
        new_counter = ops.where(finite, ops.where(grow, zero, counter + 1), zero)
        new_scale = ops.where(finite, ops.where(grow, scale * 2.0, scale), scale * 0.5)
        return updates + [(self.step_counter, new_counter), (self.dynamic_scale, new_scale)]

    # ---- config ----------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        from kiln.optimizers import serialize
        return {"name": self.name, "inner_optimizer": serialize(self.inner_optimizer),
                "initial_scale": self.initial_scale,
                "dynamic_growth_steps": self.dynamic_growth_steps}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None
                    ) -> LossScaleOptimizer:
        from kiln.optimizers import deserialize
        config = dict(config)
        inner = deserialize(config.pop("inner_optimizer"), custom_objects)
        return cls(inner, **config)

    def __repr__(self) -> str:
        return (f"<kiln.optimizers.LossScaleOptimizer {self.name!r} around "
                f"{self.inner_optimizer!r}>")
