"""Adadelta, Keras 3's rules."""

from __future__ import annotations

from typing import Any

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, common_args


class Adadelta(Optimizer):
    """Adadelta (Zeiler), Keras 3's form (with a learning rate; use 1.0 for the paper's)::

        acc_g = rho * acc_g + (1 - rho) * g**2
        delta = -sqrt(acc_d + eps) * g / sqrt(acc_g + eps)
        acc_d = rho * acc_d + (1 - rho) * delta**2
        w += lr * delta

    Args:
        learning_rate: float, schedule or callable (0.001).
        rho: decay rate (0.95).
        epsilon: (1e-7).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.Adadelta(1.0)
    """

    _slot_groups = (("accumulated_grad", "accumulated_delta_var"),)

    def __init__(self, learning_rate: Any = 0.001, rho: float = 0.95, epsilon: float = 1e-7,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "adadelta",
                         **common_args(locals()),
                         **kwargs)
        self.rho = float(rho)
        self.epsilon = float(epsilon)

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        rho = self.rho
        g_slot = self.get_slot(variable, "accumulated_grad")
        d_slot = self.get_slot(variable, "accumulated_delta_var")
        acc_g = convert_to_tensor(g_slot) * rho + ops.square(gradient) * (1 - rho)
        acc_d = convert_to_tensor(d_slot)
        delta = -(ops.sqrt(acc_d + self.epsilon) * gradient / ops.sqrt(acc_g + self.epsilon))
        self.assign(g_slot, acc_g)
        self.assign(d_slot, acc_d * rho + ops.square(delta) * (1 - rho))
        return value + learning_rate * delta

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rho": self.rho, "epsilon": self.epsilon}
