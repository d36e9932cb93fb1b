"""Adam (with AMSGrad) and AdamW, Keras 3's rules."""

from __future__ import annotations

from typing import Any

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, _const, common_args


class Adam(Optimizer):
    """Adam (Kingma & Ba), in Keras 3's form with ``epsilon`` outside the square root and
    the bias correction folded into the step size::

        t = iterations + 1
        alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)
        m += (g - m) * (1 - beta_1);  v += (g**2 - v) * (1 - beta_2)
        v_hat = max(v_hat, v)                      # amsgrad only, used in place of v
        w -= m * alpha / (sqrt(v) + epsilon)

    Args:
        learning_rate: float, schedule or callable (0.001).
        beta_1: decay of the first moment (0.9).
        beta_2: decay of the second moment (0.999).
        epsilon: "epsilon hat" of the paper (1e-7).
        amsgrad: use the AMSGrad variant (False).
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.Adam(1e-3, amsgrad=True)
    """

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, amsgrad: bool = False,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None,
                 **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "adam", **common_args(locals()),
                         **kwargs)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.amsgrad = bool(amsgrad)

    def _active_slot_groups(self) -> list[tuple[str, ...]]:
        groups = [("momentum", "velocity")]
        if self.amsgrad:
            groups.append(("velocity_hat",))
        return groups

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        dtype = variable.dtype
        t = self.local_step(dtype)
        beta_1_power = ops.pow(_const(self.beta_1, dtype), t)
        beta_2_power = ops.pow(_const(self.beta_2, dtype), t)
        alpha = learning_rate * ops.sqrt(1.0 - beta_2_power) / (1.0 - beta_1_power)
        m_slot = self.get_slot(variable, "momentum")
        v_slot = self.get_slot(variable, "velocity")
        m = convert_to_tensor(m_slot)
        v = convert_to_tensor(v_slot)
        m = m + (gradient - m) * (1 - self.beta_1)
        v = v + (ops.square(gradient) - v) * (1 - self.beta_2)
        self.assign(m_slot, m)
        self.assign(v_slot, v)
        if self.amsgrad:
            vh_slot = self.get_slot(variable, "velocity_hat")
            v = ops.maximum(convert_to_tensor(vh_slot), v)
            self.assign(vh_slot, v)
        return value - (m * alpha) / (ops.sqrt(v) + self.epsilon)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon, "amsgrad": self.amsgrad}


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): before the Adam rule,
    ``w -= w * weight_decay * lr``.

    Args:
        learning_rate: float, schedule or callable (0.001).
        weight_decay: the decay (0.004); must be a float.
        beta_1, beta_2, epsilon, amsgrad: as for :class:`Adam`.
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.AdamW(1e-3, weight_decay=0.01)
    """

    def __init__(self, learning_rate: Any = 0.001, weight_decay: float = 0.004,
                 beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7,
                 amsgrad: bool = False,
                 clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, **kwargs: Any):
        if weight_decay is None:
            raise ValueError("AdamW: argument `weight_decay` must be a float. Received: "
                             "weight_decay=None")
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
                         epsilon=epsilon, amsgrad=amsgrad, name=name or "adamw",
                         **common_args(locals()), **kwargs)
