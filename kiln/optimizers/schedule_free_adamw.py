"""Schedule-Free AdamW, Keras 3's rule."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, _const, common_args


class ScheduleFreeAdamW(Optimizer):
    """Schedule-Free AdamW (Defazio et al., 2024), in Keras 3's form. The slot ``momentum``
    (``z``, starting as a copy of the variable) takes the Adam steps; the variable holds
    ``y``, the interpolation between ``z`` and the running average ``x``::

        t = iterations + 1;  lr_t = lr * min(t / warmup_steps, 1)   # warmup_steps > 0
        v += (g**2 - v) * (1 - beta_2)
        z_new = z - lr_t * g / (sqrt(v / (1 - beta_2**t)) + epsilon)
        x = (y - (1 - beta_1) * z) / beta_1
        x = (1 - 1/t) * x + z_new / t;  y = (1 - beta_1) * z_new + beta_1 * x

    Args:
        learning_rate: float, schedule or callable (0.0025).
        beta_1: interpolation between ``z`` and ``x`` (0.9).
        beta_2: decay of the second moment (0.999).
        epsilon: (1e-8).
        warmup_steps: linear warmup of the learning rate over that many steps (0).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.ScheduleFreeAdamW(0.0025, warmup_steps=100)
    """

    _slot_groups = (("momentum", "velocity"),)

    def __init__(self, learning_rate: Any = 0.0025, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-8, warmup_steps: int = 0, weight_decay: Any = None,
                 clipnorm: Any = None, clipvalue: Any = None, global_clipnorm: Any = None,
                 use_ema: bool = False, ema_momentum: float = 0.99,
                 ema_overwrite_frequency: Any = None, loss_scale_factor: Any = None,
                 gradient_accumulation_steps: Any = None, name: str | None = None,
                 **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "schedule_free_adamw",
                         **common_args(locals()), **kwargs)
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int | np.integer) \
                or warmup_steps < 0:
            raise ValueError("ScheduleFreeAdamW: `warmup_steps` must be an integer >= 0, "
                             f"received {warmup_steps!r}")
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.warmup_steps = int(warmup_steps)

    def _add_slot(self, var: Variable, slot: str, initial: float) -> Variable:
        s = super()._add_slot(var, slot, initial)
        if slot == "momentum":  # z starts at the variable's value (Keras copies it at build)
            s.assign(var.numpy())
        return s

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        dtype = variable.dtype
        t = self.local_step(dtype)
        lr = learning_rate
        if self.warmup_steps > 0:
            lr = lr * ops.minimum(t / float(self.warmup_steps), 1.0)
        z_slot = self.get_slot(variable, "momentum")
        v_slot = self.get_slot(variable, "velocity")
        z_old = convert_to_tensor(z_slot)
        v = convert_to_tensor(v_slot)
        v = v + (ops.square(gradient) - v) * (1.0 - self.beta_2)
        bias_correction_2 = 1.0 - ops.pow(_const(self.beta_2, dtype), t)
        z = z_old - lr * gradient / (ops.sqrt(v / bias_correction_2) + self.epsilon)
        self.assign(v_slot, v)
        self.assign(z_slot, z)
        weight = 1.0 / t
        x_old = (value - z_old * (1.0 - self.beta_1)) / self.beta_1
        x_new = x_old * (1.0 - weight) + z * weight
        return z * (1.0 - self.beta_1) + x_new * self.beta_1

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon, "warmup_steps": self.warmup_steps}
