"""Adamax, Keras 3's rule."""

from __future__ import annotations

from typing import Any

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, _const, common_args


class Adamax(Optimizer):
    """Adamax (Adam with the infinity norm)::

        t = iterations + 1
        m += (g - m) * (1 - beta_1);  u = max(beta_2 * u, |g|)
        w -= lr * m / ((1 - beta_1**t) * (u + epsilon))

    Args:
        learning_rate: float, schedule or callable (0.001).
        beta_1: (0.9). beta_2: (0.999). epsilon: (1e-7).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.Adamax(2e-3)
    """

    _slot_groups = (("momentum", "norm"),)

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "adamax",
                         **common_args(locals()),
                         **kwargs)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        t = self.local_step(variable.dtype)
        beta_1_power = ops.pow(_const(self.beta_1, variable.dtype), t)
        m_slot = self.get_slot(variable, "momentum")
        u_slot = self.get_slot(variable, "norm")
        m = convert_to_tensor(m_slot)
        m = m + (gradient - m) * (1 - self.beta_1)
        u = ops.maximum(convert_to_tensor(u_slot) * self.beta_2, ops.abs(gradient))
        self.assign(m_slot, m)
        self.assign(u_slot, u)
        return value - learning_rate * m / ((1.0 - beta_1_power) * (u + self.epsilon))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon}
