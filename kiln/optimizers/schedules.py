"""Learning-rate schedules (Keras 3 names, arguments and formulas).

A schedule is called in Python with the optimizer's step count and returns a float; the
optimizer writes that value into its learning-rate Variable before each step
(``Optimizer.before_step``), so a schedule never changes the compiled graph.

Example:
    >>> lr = kiln.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1000, decay_rate=0.96)
    >>> opt = kiln.optimizers.SGD(learning_rate=lr)
    >>> lr(2000)
    0.09216
"""

from __future__ import annotations

import math
from typing import Any


class LearningRateSchedule:
    """Base class: subclasses implement ``__call__(step) -> float`` and ``get_config``.

    Example:
        >>> class InverseSqrt(LearningRateSchedule):
        ...     def __init__(self, lr): self.lr = lr
        ...     def __call__(self, step): return self.lr / math.sqrt(step + 1)
        ...     def get_config(self): return {"lr": self.lr}
    """

    def __call__(self, step: int) -> float:
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must "
                                  "override `__call__(self, step)`.")

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must "
                                  "override `get_config()` in order to be serializable.")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LearningRateSchedule:
        return cls(**config)

    def __repr__(self) -> str:
        try:
            args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        except NotImplementedError:
            args = ""
        return f"{type(self).__name__}({args})"


def _check_positive(owner: str, name: str, value: Any) -> None:
    if value <= 0:
        raise ValueError(f"{owner}: argument `{name}` must be > 0. Received: {name}={value}")


class ExponentialDecay(LearningRateSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``.

    Args:
        initial_learning_rate: the rate at step 0.
        decay_steps: positive; the rate is multiplied by ``decay_rate`` every that many steps.
        decay_rate: the decay factor.
        staircase: if True, ``step / decay_steps`` is floored (decay in discrete jumps).
        name: optional name.
    """

    def __init__(self, initial_learning_rate: float, decay_steps: float, decay_rate: float,
                 staircase: bool = False, name: str = "ExponentialDecay"):
        _check_positive("ExponentialDecay", "decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = name

    def __call__(self, step: int) -> float:
        p = float(step) / self.decay_steps
        if self.staircase:
            p = math.floor(p)
        return float(self.initial_learning_rate * self.decay_rate ** p)

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "decay_rate": self.decay_rate,
                "staircase": self.staircase, "name": self.name}


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[0]`` while ``step <= boundaries[0]``, ``values[1]`` while
    ``boundaries[0] < step <= boundaries[1]``, ..., ``values[-1]`` after the last boundary.

    Args:
        boundaries: strictly increasing step numbers.
        values: one more value than boundaries.
        name: optional name.
    """

    def __init__(self, boundaries: list[float], values: list[float],
                 name: str = "PiecewiseConstant"):
        boundaries, values = list(boundaries), list(values)
        if len(boundaries) != len(values) - 1:
            raise ValueError(
                "PiecewiseConstantDecay: the length of boundaries should be 1 less than the "
                f"length of values. Received: boundaries={boundaries} of length "
                f"{len(boundaries)}, and values={values} of length {len(values)}.")
        if any(a >= b for a, b in zip(boundaries, boundaries[1:])):
            raise ValueError(f"PiecewiseConstantDecay: boundaries must be strictly increasing, "
                             f"received {boundaries}")
        self.boundaries = boundaries
        self.values = values
        self.name = name

    def __call__(self, step: int) -> float:
        for b, v in zip(self.boundaries, self.values):
            if step <= b:
                return float(v)
        return float(self.values[-1])

    def get_config(self) -> dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class PolynomialDecay(LearningRateSchedule):
    """Polynomial decay from ``initial_learning_rate`` to ``end_learning_rate`` over
    ``decay_steps``: ``(initial - end) * (1 - min(step, decay_steps) / decay_steps) ** power
    + end``. With ``cycle=True`` the decay restarts, using the first multiple of
    ``decay_steps`` above ``step``.

    Args:
        initial_learning_rate: the rate at step 0.
        decay_steps: positive number of steps to decay over.
        end_learning_rate: the final rate (0.0001).
        power: the polynomial's power (1.0: linear).
        cycle: whether to cycle beyond ``decay_steps``.
        name: optional name.
    """

    def __init__(self, initial_learning_rate: float, decay_steps: float,
                 end_learning_rate: float = 0.0001, power: float = 1.0, cycle: bool = False,
                 name: str = "PolynomialDecay"):
        _check_positive("PolynomialDecay", "decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.cycle = cycle
        self.name = name

    def __call__(self, step: int) -> float:
        step = float(step)
        decay_steps = float(self.decay_steps)
        if self.cycle:
            multiplier = 1.0 if step == 0 else math.ceil(step / self.decay_steps)
            decay_steps = decay_steps * multiplier
        else:
            step = min(step, decay_steps)
        p = step / decay_steps
        return float((self.initial_learning_rate - self.end_learning_rate)
                     * (1 - p) ** self.power + self.end_learning_rate)

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "end_learning_rate": self.end_learning_rate,
                "power": self.power, "cycle": self.cycle, "name": self.name}


class InverseTimeDecay(LearningRateSchedule):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)`` (the quotient floored
    when ``staircase``).

    Args:
        initial_learning_rate: the rate at step 0.
        decay_steps: positive; how often the decay is applied.
        decay_rate: the decay rate.
        staircase: decay in discrete jumps.
        name: optional name.
    """

    def __init__(self, initial_learning_rate: float, decay_steps: float, decay_rate: float,
                 staircase: bool = False, name: str = "InverseTimeDecay"):
        _check_positive("InverseTimeDecay", "decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = name

    def __call__(self, step: int) -> float:
        p = float(step) / self.decay_steps
        if self.staircase:
            p = math.floor(p)
        return float(self.initial_learning_rate / (1 + self.decay_rate * p))

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "decay_rate": self.decay_rate,
                "staircase": self.staircase, "name": self.name}


class CosineDecay(LearningRateSchedule):
    """Cosine decay with optional linear warmup (SGDR without restarts).

    Without warmup (``warmup_target=None``): ``lr * ((1 - alpha) * 0.5 * (1 + cos(pi *
    min(step, decay_steps) / decay_steps)) + alpha)``. With warmup: a linear ramp from
    ``initial_learning_rate`` to ``warmup_target`` over ``warmup_steps``, then the cosine
    decay from ``warmup_target`` over ``decay_steps``.

    Args:
        initial_learning_rate: the rate at step 0.
        decay_steps: positive number of steps to decay over.
        alpha: the final rate as a fraction of the decayed-from rate.
        name: optional name.
        warmup_target: the rate reached at the end of the warmup (None: no warmup).
        warmup_steps: number of warmup steps.
    """

    def __init__(self, initial_learning_rate: float, decay_steps: float, alpha: float = 0.0,
                 name: str = "CosineDecay", warmup_target: float | None = None,
                 warmup_steps: float = 0):
        _check_positive("CosineDecay", "decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.alpha = alpha
        self.name = name
        self.warmup_steps = warmup_steps
        self.warmup_target = warmup_target

    def _decay(self, step: float, decay_from: float) -> float:
        cosine = 0.5 * (1.0 + math.cos(math.pi * step / self.decay_steps))
        return decay_from * ((1 - self.alpha) * cosine + self.alpha)

    def __call__(self, step: int) -> float:
        step = float(step)
        if self.warmup_target is None:
            return float(self._decay(min(step, self.decay_steps), self.initial_learning_rate))
        step = min(step, self.decay_steps + self.warmup_steps)
        if step < self.warmup_steps:
            fraction = step / self.warmup_steps
            return float((self.warmup_target - self.initial_learning_rate) * fraction
                         + self.initial_learning_rate)
        return float(self._decay(step - self.warmup_steps, self.warmup_target))

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "alpha": self.alpha, "name": self.name,
                "warmup_target": self.warmup_target, "warmup_steps": self.warmup_steps}


class CosineDecayRestarts(LearningRateSchedule):
    """Cosine decay with warm restarts (SGDR): the multiplier decays from 1 to ``alpha`` over
    ``first_decay_steps``, then restarts; each period is ``t_mul`` times longer and starts at
    ``m_mul`` times the previous initial rate.

    Args:
        initial_learning_rate: the rate at step 0.
        first_decay_steps: positive length of the first period.
        t_mul: period length factor (2.0).
        m_mul: restart rate factor (1.0).
        alpha: minimum rate as a fraction of ``initial_learning_rate``.
        name: optional name.
    """

    def __init__(self, initial_learning_rate: float, first_decay_steps: float,
                 t_mul: float = 2.0, m_mul: float = 1.0, alpha: float = 0.0,
                 name: str = "SGDRDecay"):
        _check_positive("CosineDecayRestarts", "first_decay_steps", first_decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.first_decay_steps = first_decay_steps
        self._t_mul = t_mul
        self._m_mul = m_mul
        self.alpha = alpha
        self.name = name

    def __call__(self, step: int) -> float:
        fraction = float(step) / self.first_decay_steps
        t_mul = float(self._t_mul)
        if t_mul == 1.0:
            i_restart = math.floor(fraction)
            fraction -= i_restart
        else:
            i_restart = math.floor(math.log(1.0 - fraction * (1.0 - t_mul)) / math.log(t_mul))
            sum_r = (1.0 - t_mul ** i_restart) / (1.0 - t_mul)
            fraction = (fraction - sum_r) / t_mul ** i_restart
        m_fac = self._m_mul ** i_restart
        cosine = 0.5 * m_fac * (1.0 + math.cos(math.pi * fraction))
        decayed = (1 - self.alpha) * cosine + self.alpha
        return float(self.initial_learning_rate * decayed)

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "first_decay_steps": self.first_decay_steps, "t_mul": self._t_mul,
                "m_mul": self._m_mul, "alpha": self.alpha, "name": self.name}


_SCHEDULES: dict[str, type[LearningRateSchedule]] = {
    c.__name__: c for c in (ExponentialDecay, PiecewiseConstantDecay, PolynomialDecay,
                            InverseTimeDecay, CosineDecay, CosineDecayRestarts)}


def serialize(learning_rate_schedule: LearningRateSchedule) -> dict[str, Any]:
    """A JSON-able dict ``{"module", "class_name", "config", "registered_name"}``.

    Example:
        >>> serialize(ExponentialDecay(0.1, 100, 0.9))["class_name"]
        'ExponentialDecay'
    """
    schedule = learning_rate_schedule
    if not isinstance(schedule, LearningRateSchedule):
        raise TypeError(f"schedules.serialize: expected a LearningRateSchedule, received "
                        f"{type(schedule).__name__}")
    builtin = _SCHEDULES.get(type(schedule).__name__) is type(schedule)
    return {"module": "kiln.optimizers.schedules" if builtin else type(schedule).__module__,
            "class_name": type(schedule).__name__, "config": schedule.get_config(),
            "registered_name": None if builtin else type(schedule).__name__}


def deserialize(config: dict[str, Any], custom_objects: dict[str, Any] | None = None
                ) -> LearningRateSchedule:
    """Rebuilds a schedule from :func:`serialize`'s output (or Keras's: same layout).

    Args:
        config: ``{"class_name": ..., "config": {...}}``.
        custom_objects: optional ``{name: class}`` for user-defined schedules.
    """
    if not isinstance(config, dict) or "class_name" not in config:
        raise TypeError(f"schedules.deserialize: expected a dict with 'class_name' and "
                        f"'config', received {config!r}")
    name = config["class_name"]
    table: dict[str, Any] = {**_SCHEDULES, **(custom_objects or {})}
    cls = table.get(name) or table.get(config.get("registered_name") or "")
    if cls is None:
        raise ValueError(f"schedules.deserialize: unknown schedule {name!r}; known: "
                         f"{sorted(table)}")
    return cls.from_config(dict(config.get("config", {})))


__all__ = ["LearningRateSchedule", "ExponentialDecay", "PiecewiseConstantDecay",
           "PolynomialDecay", "InverseTimeDecay", "CosineDecay", "CosineDecayRestarts",
           "serialize", "deserialize"]
