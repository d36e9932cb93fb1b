"""RMSprop (plain, momentum, centered), Keras 3's rule."""

from __future__ import annotations

from typing import Any

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, common_args


class RMSprop(Optimizer):
    """RMSprop (Hinton), Keras 3's form with ``epsilon`` *inside* the square root::

        v = rho * v + (1 - rho) * g**2
        a = rho * a + (1 - rho) * g                 # centered only
        denom = v - a**2 + eps  (centered)  or  v + eps
        inc = lr * g / sqrt(denom)
        mom = momentum * mom + inc; w -= mom        # momentum > 0
        w -= inc                                    # otherwise

    Args:
        learning_rate: float, schedule or callable (0.001).
        rho: discount of the squared-gradient average (0.9).
        momentum: momentum (0.0).
        epsilon: added inside the square root (1e-7).
        centered: normalize by the estimated variance (False).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.RMSprop(1e-3, momentum=0.9, centered=True)
    """

    def __init__(self, learning_rate: Any = 0.001, rho: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-7, centered: bool = False,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None,
                 **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "rmsprop",
                         **common_args(locals()),
                         **kwargs)
        self.rho = float(rho)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.centered = bool(centered)

    def _active_slot_groups(self) -> list[tuple[str, ...]]:
        # Keras creates these one kind at a time (not interleaved).
        groups = [("velocity",)]
        if self.momentum > 0:
            groups.append(("momentum",))
        if self.centered:
            groups.append(("average_gradient",))
        return groups

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        rho = self.rho
        v_slot = self.get_slot(variable, "velocity")
        v = convert_to_tensor(v_slot) * rho + ops.square(gradient) * (1 - rho)
        self.assign(v_slot, v)
        if self.centered:
            a_slot = self.get_slot(variable, "average_gradient")
            a = convert_to_tensor(a_slot) * rho + gradient * (1 - rho)
            self.assign(a_slot, a)
            denominator = v - ops.square(a) + self.epsilon
        else:
            denominator = v + self.epsilon
        increment = learning_rate * gradient / ops.sqrt(denominator)
        if self.momentum > 0:
            mom_slot = self.get_slot(variable, "momentum")
            mom = convert_to_tensor(mom_slot) * self.momentum + increment
            self.assign(mom_slot, mom)
            return value - mom
        return value - increment

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rho": self.rho, "momentum": self.momentum,
                "epsilon": self.epsilon, "centered": self.centered}
