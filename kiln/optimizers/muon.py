"""Muon, Keras 3's rule (AdamW for the variables Muon does not suit)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln import ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer, _const, common_args


def _swap_last(x: Node) -> Node:
    perm = list(range(len(x.shape)))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return ops.transpose(x, perm)


class Muon(Optimizer):
    """Muon (Jordan et al., 2024) with Moonlight's update scaling, in Keras 3's form.

    Rank-2 variables (not embeddings, not matched by ``exclude_layers``) follow Muon: the
    momentum ``m = momentum * m + g`` (Nesterov: ``g + momentum * m``) is orthogonalized by
    ``ns_steps`` quintic Newton-Schulz iterations ``X <- a X + (b A + c A A) X`` with
    ``A = X X^T`` (``X`` first divided by its Frobenius norm + 1e-7, the longer side last), and
    ``w -= lr * X * sqrt(max(rows, cols)) * rms_rate``. Every other variable follows AdamW
    with ``adam_beta_1``, ``adam_beta_2``, ``epsilon`` and the learning rate
    ``lr * adam_lr_ratio``. Weight decay is ``weight_decay`` for Muon's variables and
    ``adam_weight_decay`` for AdamW's.

    Args:
        learning_rate: float, schedule or callable (0.001).
        adam_beta_1, adam_beta_2: AdamW's moment decays (0.9, 0.999).
        adam_weight_decay: AdamW's decoupled weight decay (0.004).
        epsilon: AdamW's epsilon (1e-7).
        weight_decay: Muon's decoupled weight decay (0.004).
        exclude_layers: regular expressions; variables whose path matches one use AdamW.
        exclude_embeddings: variables with "embedding" in their path use AdamW (True).
        muon_a, muon_b, muon_c: Newton-Schulz coefficients (3.4445, -4.775, 2.0315).
        adam_lr_ratio: AdamW's learning rate relative to Muon's (1).
        momentum: Muon's momentum (0.95).
        ns_steps: Newton-Schulz iterations (5).
        nesterov: Nesterov momentum (True).
        rms_rate: Moonlight's RMS scale (0.2); None leaves the update unscaled.
        **kwargs: the common optimizer arguments (see :class:`Optimizer`).

    Example:
        >>> opt = kiln.optimizers.Muon(0.02, exclude_layers=["output"])
    """

    _slot_groups = (("momentum",),)

    def __init__(self, learning_rate: Any = 0.001, adam_beta_1: float = 0.9,
                 adam_beta_2: float = 0.999, adam_weight_decay: Any = 0.004,
                 epsilon: float = 1e-7, weight_decay: Any = 0.004, clipnorm: Any = None,
                 clipvalue: Any = None, global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None,
                 name: str | None = None, exclude_layers: Any = None,
                 exclude_embeddings: bool = True, muon_a: float = 3.4445,
                 muon_b: float = -4.7750, muon_c: float = 2.0315, adam_lr_ratio: float = 1,
                 momentum: float = 0.95, ns_steps: int = 5, nesterov: bool = True,
                 rms_rate: Any = 0.2, **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name or "muon",
                         **common_args(locals()), **kwargs)
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, int | np.integer) \
                or ns_steps < 0:
            raise ValueError(f"Muon: `ns_steps` must be an integer >= 0, received {ns_steps!r}")
        self.adam_beta_1 = float(adam_beta_1)
        self.adam_beta_2 = float(adam_beta_2)
        self.adam_weight_decay = None if adam_weight_decay is None else float(adam_weight_decay)
        self.epsilon = float(epsilon)
        self.exclude_layers = list(exclude_layers or [])
        self.exclude_embeddings = bool(exclude_embeddings)
        self.muon_a, self.muon_b, self.muon_c = float(muon_a), float(muon_b), float(muon_c)
        self.adam_lr_ratio = adam_lr_ratio
        self.momentum = float(momentum)
        self.ns_steps = int(ns_steps)
        self.nesterov = bool(nesterov)
        self.rms_rate = None if rms_rate is None else float(rms_rate)

    def _should_use_adamw(self, variable: Variable) -> bool:
        """True for the variables AdamW updates: rank != 2, embeddings (with
        ``exclude_embeddings``) and those whose path matches ``exclude_layers``."""
        if len(variable.shape) != 2:
            return True
        path = str(getattr(variable, "path", None) or variable.name)
        if self.exclude_embeddings and "embedding" in path.lower():
            return True
        return any(re.search(pattern, path) for pattern in self.exclude_layers)

    def build(self, variables: Sequence[Variable]) -> None:
        """Creates ``momentum`` for every variable and ``velocity`` for AdamW's."""
        variables = list(variables)
        new: list[Variable] = []
        for v in variables:
            if (isinstance(v, Variable) and id(v) not in self._var_index
                    and all(v is not n for n in new)):
                new.append(v)
        super().build(variables)
        for v in new:
            if self._should_use_adamw(v):
                self._add_slot(v, "velocity", 0.0)

    def _weight_decay_for(self, var: Variable) -> float | None:
        if not self._use_weight_decay(var):
            return None
        return self.adam_weight_decay if self._should_use_adamw(var) else self.weight_decay

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        if self._should_use_adamw(variable):
            return self._adamw_step(gradient, variable, value,
                                    learning_rate * float(self.adam_lr_ratio))
        m_slot = self.get_slot(variable, "momentum")
        m = convert_to_tensor(m_slot) * self.momentum + gradient
        self.assign(m_slot, m)
        g = gradient + m * self.momentum if self.nesterov else m
        update = self.zeropower_via_newtonschulz5(g, self.ns_steps) * learning_rate
        if self.rms_rate is not None:
            update = update * (float(np.sqrt(max(variable.shape))) * self.rms_rate)
        return value - update

    def _adamw_step(self, gradient: Node, variable: Variable, value: Node,
                    lr: Node) -> Node:
        dtype = variable.dtype
        t = self.local_step(dtype)
        b1_power = ops.pow(_const(self.adam_beta_1, dtype), t)
        b2_power = ops.pow(_const(self.adam_beta_2, dtype), t)
        alpha = lr * ops.sqrt(1.0 - b2_power) / (1.0 - b1_power)
        m_slot = self.get_slot(variable, "momentum")
        v_slot = self.get_slot(variable, "velocity")
        m = convert_to_tensor(m_slot)
        v = convert_to_tensor(v_slot)
        m = m + (gradient - m) * (1 - self.adam_beta_1)
        v = v + (ops.square(gradient) - v) * (1 - self.adam_beta_2)
        self.assign(m_slot, m)
        self.assign(v_slot, v)
        return value - (m * alpha) / (ops.sqrt(v) + self.epsilon)

    def zeropower_via_newtonschulz5(self, x: Node, steps: int) -> Node:
        """``steps`` quintic Newton-Schulz iterations towards the orthogonal factor of ``x``
        (rank >= 2; the last two axes are the matrix)."""
        if len(x.shape) < 2:
            raise ValueError("Muon: expected gradient or momentum to have at least 2 "
                             f"dimensions. Received: shape={tuple(x.shape)}")
        a, b, c = self.muon_a, self.muon_b, self.muon_c
        tall = x.shape[-2] > x.shape[-1]
        if tall:
            x = _swap_last(x)
        norm = ops.sqrt(ops.sum(ops.square(x), axis=(-2, -1), keepdims=True))
        x = x / (norm + 1e-7)
        for _ in range(steps):
            gram = ops.matmul(x, _swap_last(x))
            poly = gram * b + ops.matmul(gram, gram) * c
            x = x * a + ops.matmul(poly, x)
        return _swap_last(x) if tall else x

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "adam_beta_1": self.adam_beta_1,
                "adam_beta_2": self.adam_beta_2, "epsilon": self.epsilon,
                "exclude_layers": list(self.exclude_layers), "muon_a": self.muon_a,
                "muon_b": self.muon_b, "muon_c": self.muon_c,
                "adam_lr_ratio": self.adam_lr_ratio, "momentum": self.momentum,
                "ns_steps": self.ns_steps, "nesterov": self.nesterov,
                "exclude_embeddings": self.exclude_embeddings,
                "adam_weight_decay": self.adam_weight_decay, "rms_rate": self.rms_rate}
