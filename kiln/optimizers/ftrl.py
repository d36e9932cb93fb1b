"""FTRL-Proximal, Keras 3's rule."""

from __future__ import annotations

from typing import Any

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, common_args


class Ftrl(Optimizer):
    """Follow The Regularized Leader (McMahan et al., 2013), in Keras 3's form::

        p = -learning_rate_power;  l2 = l2_regularization_strength + beta / (2 * lr)
        g_s = g + 2 * l2_shrinkage_regularization_strength * w
        n_new = n + g**2
        z += g_s - (n_new**p - n**p) / lr * w
        w = (clip(z, -l1, l1) - z) / (n_new**p / lr + 2 * l2);  n = n_new

    Args:
        learning_rate: float, schedule or callable (0.001).
        learning_rate_power: <= 0 (-0.5); 0 gives a fixed learning rate.
        initial_accumulator_value: >= 0, start of the accumulators ``n`` (0.1).
        l1_regularization_strength: >= 0 (0.0).
        l2_regularization_strength: >= 0 (0.0), the stabilization penalty.
        l2_shrinkage_regularization_strength: >= 0 (0.0), the magnitude penalty.
        beta: added to the L2 strength as ``beta / (2 * lr)`` (0.0).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.Ftrl(0.1, l1_regularization_strength=0.01)
    """

    _slot_groups = (("accumulator", "linear"),)

    def __init__(self, learning_rate: Any = 0.001, learning_rate_power: float = -0.5,
                 initial_accumulator_value: float = 0.1,
                 l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0,
                 l2_shrinkage_regularization_strength: float = 0.0, beta: float = 0.0,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "ftrl",
                         **common_args(locals()), **kwargs)
        checks = (("initial_accumulator_value", initial_accumulator_value, "positive or zero"),
                  ("l1_regularization_strength", l1_regularization_strength, "positive or zero"),
                  ("l2_regularization_strength", l2_regularization_strength, "positive or zero"),
                  ("l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength,
                   "positive or zero"))
        for arg, value, what in checks:
            if value < 0.0:
                raise ValueError(f"Ftrl: `{arg}` needs to be {what}. Received: {arg}={value}.")
        if learning_rate_power > 0.0:
            raise ValueError("Ftrl: `learning_rate_power` needs to be negative or zero. "
                             f"Received: learning_rate_power={learning_rate_power}.")
        self.learning_rate_power = float(learning_rate_power)
        self.initial_accumulator_value = float(initial_accumulator_value)
        self.l1_regularization_strength = float(l1_regularization_strength)
        self.l2_regularization_strength = float(l2_regularization_strength)
        self.l2_shrinkage_regularization_strength = float(l2_shrinkage_regularization_strength)
        self.beta = float(beta)

    def _slot_initial_value(self, slot: str) -> float:
        return self.initial_accumulator_value if slot == "accumulator" else 0.0

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        n_slot = self.get_slot(variable, "accumulator")
        z_slot = self.get_slot(variable, "linear")
        n = convert_to_tensor(n_slot)
        z = convert_to_tensor(z_slot)
        power = -self.learning_rate_power
        l2 = self.l2_regularization_strength + self.beta / (2.0 * learning_rate)
        g_shrunk = gradient + value * (2.0 * self.l2_shrinkage_regularization_strength)
        n_new = n + ops.square(gradient)
        n_pow = ops.power(n_new, power)
        z = z + g_shrunk - (n_pow - ops.power(n, power)) / learning_rate * value
        quadratic = n_pow / learning_rate + 2.0 * l2
        l1 = self.l1_regularization_strength
        self.assign(z_slot, z)
        self.assign(n_slot, n_new)
        return (ops.clip(z, -l1, l1) - z) / quadratic

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "learning_rate_power": self.learning_rate_power,
                "initial_accumulator_value": self.initial_accumulator_value,
                "l1_regularization_strength": self.l1_regularization_strength,
                "l2_regularization_strength": self.l2_regularization_strength,
                "l2_shrinkage_regularization_strength":
                    self.l2_shrinkage_regularization_strength,
                "beta": self.beta}
