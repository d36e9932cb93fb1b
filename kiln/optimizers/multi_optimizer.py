"""MultiOptimizer and OptimizerMap: different optimizers for different variables (Keras 3)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any

from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.base import Optimizer


def _path(variable: Any) -> str:
    """A variable's path (Keras' ``variable.path``; kiln's layer weights are named
    ``layer/weight``)."""
    return str(getattr(variable, "path", None) or getattr(variable, "name", variable))


def _check_inner(optimizer: Any, where: str) -> None:
    from kiln.optimizers.loss_scale_optimizer import LossScaleOptimizer
    if not isinstance(optimizer, Optimizer):
        raise ValueError(f"{where}: optimizer must be a kiln Optimizer instance. "
                         f"Received: {optimizer!r}")
    if isinstance(optimizer, LossScaleOptimizer):
        raise ValueError(f"{where}: optimizer cannot be LossScaleOptimizer.")
    if isinstance(optimizer, MultiOptimizer):
        raise ValueError(f"{where}: optimizer cannot be MultiOptimizer.")


class OptimizerMap(MutableMapping):
    """Maps variable paths to optimizers: an exact key first, else the one key that
    ``re.fullmatch``-es the path (two matches are an error), else ``default_optimizer``.

    Args:
        default_optimizer: the Optimizer of every unmapped variable.
        optimizer_map: optional ``{path or regex: Optimizer}``.

    Example:
        >>> m = OptimizerMap(kiln.optimizers.SGD(0.1))
        >>> m["encoder/.*"] = kiln.optimizers.Adam()
        >>> opt = kiln.optimizers.MultiOptimizer(m)
    """

    def __init__(self, default_optimizer: Optimizer, optimizer_map: dict | None = None):
        if not isinstance(default_optimizer, Optimizer):
            raise TypeError("OptimizerMap: default_optimizer must be a kiln Optimizer "
                            f"instance. Received: {default_optimizer!r}")
        if optimizer_map is not None and not isinstance(optimizer_map, dict):
            raise TypeError("OptimizerMap: optimizer_map must be a dictionary. Received: "
                            f"{optimizer_map!r}")
        self._default_optimizer = default_optimizer
        self._optimizer_map: dict[str, Optimizer] = {}
        for key, opt in (optimizer_map or {}).items():
            self[key] = opt

    @property
    def default_optimizer(self) -> Optimizer:
        return self._default_optimizer

    def __getitem__(self, key: str) -> Optimizer:
        if key in self._optimizer_map:
            return self._optimizer_map[key]
        matching = [p for p in self._optimizer_map if re.fullmatch(p, key)]
        if len(matching) > 1:
            raise ValueError(f"OptimizerMap: multiple optimizers assigned to variable {key!r} "
                             f"(patterns {matching})")
        return self._optimizer_map[matching[0]] if matching else self._default_optimizer

    def __setitem__(self, key: str, optimizer: Optimizer) -> None:
        if key in self._optimizer_map:
            raise ValueError(f"OptimizerMap: {key!r} already exists in the OptimizerMap with "
                             f"value {self._optimizer_map[key]!r}. Please make sure to not use "
                             "duplicated keys.")
        if not isinstance(key, str):
            raise ValueError(f"OptimizerMap: key must be a string. Received: {key!r}")
        _check_inner(optimizer, "OptimizerMap")
        self._optimizer_map[key] = optimizer

    def __delitem__(self, key: str) -> None:
        del self._optimizer_map[key]

    def __len__(self) -> int:
        return len(self._optimizer_map)

    def __iter__(self) -> Iterator[str]:
        return iter(self._optimizer_map)

    def __call__(self, variable: Any) -> Optimizer:
        return self[_path(variable)]

    def get_config(self) -> dict[str, Any]:
        from kiln.optimizers import serialize
        return {"default_optimizer": serialize(self._default_optimizer),
                "optimizer_map": {k: serialize(v) for k, v in self._optimizer_map.items()}}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None
                    ) -> OptimizerMap:
        from kiln.optimizers import deserialize
        mapping = config.get("optimizer_map") or {}
        if isinstance(mapping, dict) and "class_name" in mapping and "config" in mapping:
            mapping = mapping["config"]  # Keras serializes the dict as an object
        return cls(deserialize(config["default_optimizer"], custom_objects),
                   {k: deserialize(v, custom_objects) for k, v in mapping.items()})


class MultiOptimizer(Optimizer):
    """Delegates each variable to the optimizer that ``optimizer_map`` gives for it, all in
    one compiled step (each inner optimizer keeps its own slots, learning rate and
    ``iterations``; this one counts the steps too).

    Args:
        optimizer_map: an :class:`OptimizerMap`, or a callable ``variable -> Optimizer``.
        loss_scale_factor: overrides the inner optimizers' ``loss_scale_factor``.
        name: the optimizer's name.

    Like Keras, it has no learning rate of its own: reading or setting ``learning_rate``
    raises AttributeError (use :attr:`optimizers`).

    Example:
        >>> opt = kiln.optimizers.MultiOptimizer(OptimizerMap(
        ...     kiln.optimizers.SGD(0.1), {"dense_1/.*": kiln.optimizers.Adam()}))
    """

    def __init__(self, optimizer_map: OptimizerMap | Callable[[Any], Optimizer],
                 loss_scale_factor: float | None = None, name: str | None = None):
        if not callable(optimizer_map):
            raise TypeError("MultiOptimizer: `optimizer_map` must be an OptimizerMap or a "
                            f"callable variable -> Optimizer, received {optimizer_map!r}")
        self._inner_optimizers: list[Optimizer] = []
        super().__init__(learning_rate=0.0, loss_scale_factor=loss_scale_factor,
                         name=name or "multi_optimizer")
        self._optimizer_map = optimizer_map
        candidates = list(optimizer_map.values()) if hasattr(optimizer_map, "values") else []
        default = getattr(optimizer_map, "default_optimizer", None)
        for opt in [*candidates, *([default] if default is not None else [])]:
            self._add_inner(opt)
        self._owner: dict[int, int] = {}

    def _add_inner(self, opt: Optimizer) -> int:
        for i, known in enumerate(self._inner_optimizers):
            if known is opt:
                return i
        _check_inner(opt, "MultiOptimizer")
        opt.loss_scale_factor = self.loss_scale_factor
        self._inner_optimizers.append(opt)
        return len(self._inner_optimizers) - 1

    @property
    def optimizers(self) -> list[Optimizer]:
        """The inner optimizers (those of the map, then the default, then any the callable
        returned)."""
        return self._inner_optimizers

    @property
    def loss_scale_factor(self) -> float | None:
        return self.__dict__.get("_loss_scale_factor")

    @loss_scale_factor.setter
    def loss_scale_factor(self, value: float | None) -> None:
        self.__dict__["_loss_scale_factor"] = value
        for opt in self.__dict__.get("_inner_optimizers", []):
            opt.loss_scale_factor = value

    @property
    def learning_rate(self) -> float:
        raise AttributeError("Learning rate cannot be accessed on a MultiOptimizer. Access "
                             "the learning rate on the individual sub-optimizers instead.")

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        raise AttributeError("Learning rate cannot be set on a MultiOptimizer. Set the "
                             "learning rate on the individual sub-optimizers instead.")

    def before_step(self) -> None:
        for opt in self._inner_optimizers:
            opt.before_step()

    # ---- variables -------------------------------------------------------------------------
    def build(self, variables: Sequence[Variable]) -> None:
        """Routes each new variable to its optimizer and builds the inner optimizers."""
        groups: dict[int, list[Variable]] = {}
        for v in variables:
            if not isinstance(v, Variable):
                raise TypeError(f"MultiOptimizer.build: expected kiln.Variable objects, "
                                f"received {type(v).__name__}")
            if id(v) in self._owner:
                continue
            opt = self._optimizer_map(v)
            if not isinstance(opt, Optimizer):
                raise ValueError(f"MultiOptimizer: the optimizer for variable {_path(v)!r} is "
                                 f"not an Optimizer instance, received {opt!r}")
            idx = self._add_inner(opt)
            self._owner[id(v)] = idx
            self._trainable_variables.append(v)
            groups.setdefault(idx, []).append(v)
        for idx, group in sorted(groups.items()):
            self._inner_optimizers[idx].build(group)
        self.built = True

    def _inner_of(self, variable: Variable) -> Optimizer:
        try:
            return self._inner_optimizers[self._owner[id(variable)]]
        except KeyError:
            raise KeyError(f"MultiOptimizer: variable {_path(variable)!r} was not built "
                           "with this optimizer") from None

    @property
    def variables(self) -> list[Variable]:
        """``iterations``, then every inner optimizer's variables in turn."""
        out = [self.iterations]
        for opt in self._inner_optimizers:
            out.extend(opt.variables)
        return out

    def get_slot(self, variable: Variable, slot: str) -> Variable:
        return self._inner_of(variable).get_slot(variable, slot)

    def finalize_variable_values(self, var_list: Sequence[Variable]) -> None:
        for opt, group in self._grouped(list(var_list)):
            opt.finalize_variable_values(group)

    def _grouped(self, variables: list[Variable]) -> list[tuple[Optimizer, list[Variable]]]:
        groups: dict[int, list[Variable]] = {}
        for v in variables:
            self._inner_of(v)
            groups.setdefault(self._owner[id(v)], []).append(v)
        return [(self._inner_optimizers[i], g) for i, g in sorted(groups.items())]

    # ---- the step --------------------------------------------------------------------------
    def update_nodes(self, grads: Sequence[Node | None],
                     variables: Sequence[Variable]) -> list[tuple[Variable, Node]]:
        """Each inner optimizer's update on its variables, and ``iterations + 1``."""
        grads, variables = list(grads), list(variables)
        if len(grads) != len(variables):
            raise ValueError(f"MultiOptimizer.update_nodes: received {len(grads)} gradients "
                             f"for {len(variables)} variables")
        self.build(variables)
        by_opt: dict[int, tuple[list, list]] = {}
        for g, v in zip(grads, variables):
            gs, vs = by_opt.setdefault(self._owner[id(v)], ([], []))
            gs.append(g)
            vs.append(v)
        updates: list[tuple[Variable, Node]] = []
        for idx, (gs, vs) in sorted(by_opt.items()):
            if any(g is not None for g in gs):
                updates += self._inner_optimizers[idx].update_nodes(gs, vs)
        if not updates:
            raise ValueError("MultiOptimizer: no gradients provided for any variable")
        updates.append((self.iterations, convert_to_tensor(self.iterations) + 1))
        return updates

    # ---- config ----------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        m = self._optimizer_map
        if not isinstance(m, OptimizerMap):
            raise TypeError("MultiOptimizer.get_config: an optimizer_map that is a callable "
                            f"({m!r}) cannot be serialized; use an OptimizerMap")
        return {"optimizer_map": {"class_name": "OptimizerMap", "config": m.get_config()},
                "loss_scale_factor": self.loss_scale_factor, "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None
                    ) -> MultiOptimizer:
        config = dict(config)
        m = config["optimizer_map"]
        if isinstance(m, dict):
            m = OptimizerMap.from_config(m.get("config", m), custom_objects)
        config["optimizer_map"] = m
        return cls(**config)

    def __repr__(self) -> str:
        names = ", ".join(type(o).__name__ for o in self._inner_optimizers)
        return f"<kiln.optimizers.MultiOptimizer {self.name!r} [{names}]>"
