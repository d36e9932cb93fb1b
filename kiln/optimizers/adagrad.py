"""Adagrad, Keras 3's rules."""

from __future__ import annotations

from typing import Any

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, common_args


class Adagrad(Optimizer):
    """Adagrad (Duchi et al.), Keras 3's form with ``epsilon`` inside the square root::

        acc += g**2
        w -= lr * g / sqrt(acc + epsilon)

    Args:
        learning_rate: float, schedule or callable (0.001).
        initial_accumulator_value: starting value of the accumulators (0.1), >= 0.
        epsilon: (1e-7).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.Adagrad(0.01)
    """

    def __init__(self, learning_rate: Any = 0.001, initial_accumulator_value: float = 0.1,
                 epsilon: float = 1e-7,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "adagrad",
                         **common_args(locals()),
                         **kwargs)
        if initial_accumulator_value < 0:
            raise ValueError("Adagrad: `initial_accumulator_value` must be non-negative, "
                             f"received {initial_accumulator_value}")
        self.initial_accumulator_value = float(initial_accumulator_value)
        self.epsilon = float(epsilon)

    _slot_groups = (("accumulator",),)

    def _slot_initial_value(self, slot: str) -> float:
        return self.initial_accumulator_value if slot == "accumulator" else 0.0

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        acc_slot = self.get_slot(variable, "accumulator")
        acc = convert_to_tensor(acc_slot) + ops.square(gradient)
        self.assign(acc_slot, acc)
        return value - learning_rate * gradient / ops.sqrt(acc + self.epsilon)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(),
                "initial_accumulator_value": self.initial_accumulator_value,
                "epsilon": self.epsilon}
