"""The Optimizer base class: slots, learning rate, and the update of one step as graph nodes.

An optimizer never touches NumPy buffers during training. ``update_nodes(grads, variables)``
returns the *new values* of every variable, every slot and the step counter as graph nodes,
and the trainer compiles them into the training step with ``kiln.function(..., updates=...)``.
Everything Keras does around the per-variable rule happens in the same graph, in Keras's order
(``keras/src/optimizers/base_optimizer.py``):

1. gradients are unscaled (``loss_scale_factor``);
2. with ``gradient_accumulation_steps=N`` the gradient is added to an accumulator slot, and on
   every N-th step the mean of the last N gradients is used (both branches are computed and
   ``kiln.ops.where`` on the step count picks one, since the graph has no control flow);
3. clipping (``clipnorm``, ``global_clipnorm`` or ``clipvalue``);
4. decoupled weight decay ``var -= var * weight_decay * lr``;
5. the optimizer's own rule (``update_step``);
6. the EMA of the weights (``use_ema``), optionally copied into the weights every
   ``ema_overwrite_frequency`` steps;
7. ``iterations += 1``.

The learning rate is read from the float32 scalar Variable ``learning_rate_variable``, so
changing it (by hand, by a callback, or by a schedule in :meth:`Optimizer.before_step`) never
recompiles anything.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln import constraints, ops
from kiln.core import Node, Variable, convert_to_tensor
from kiln.optimizers.applying import ApplyMixin
from kiln.optimizers.clipping import clip_by_global_norm, clip_by_norm
from kiln.optimizers.schedules import LearningRateSchedule
from kiln.optimizers.schedules import deserialize as _deserialize_schedule
from kiln.optimizers.schedules import serialize as _serialize_schedule

_NAME_COUNTS: dict[str, int] = {}


def _auto_name(base: str) -> str:
    key = re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", base).lower()
    n = _NAME_COUNTS.get(key, 0)
    _NAME_COUNTS[key] = n + 1
    return key if n == 0 else f"{key}_{n}"


def _const(value: float, dtype: str) -> Node:
    return ops.constant(np.asarray(value, dtype=dtype))


def _divisible(count: Node, k: int) -> Node:
    """``count % k == 0`` for an int64 scalar node (exact below 2**50, through float64, since
    the core has no integer modulo)."""
    c = ops.cast(count, "float64")
    return ops.equal(ops.floor(c / float(k)) * float(k), c)


def _number(name: str, value: Any, owner: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{owner}: `{name}` must be a number, received {value!r} "
                        f"({type(value).__name__})")
    return float(value)


_COMMON = ("weight_decay", "clipnorm", "clipvalue", "global_clipnorm", "use_ema", "ema_momentum",
           "ema_overwrite_frequency", "loss_scale_factor", "gradient_accumulation_steps")


def common_args(local: dict) -> dict:
    """The base Optimizer's arguments (Keras' shared tail) from a subclass's ``locals()``."""
    return {k: local[k] for k in _COMMON if k in local}


class Optimizer(ApplyMixin):
    """Base class of kiln's optimizers (Keras 3 arguments and semantics).

    Subclasses declare their slots in ``_slot_groups`` (lists of slot names; the names of one
    group are created interleaved per variable, as Keras's ``add_optimizer_variables`` does)
    and implement :meth:`update_step` with graph ops.

    Args:
        learning_rate: a float, a
            :class:`~kiln.optimizers.schedules.LearningRateSchedule` (called with the step
            count before each step), or a zero-argument callable returning the rate.
        weight_decay: float or None; decoupled weight decay ``var -= var * wd * lr`` applied
            before the update rule.
        clipnorm: clip each gradient to this L2 norm.
        clipvalue: clip each gradient elementwise to ``[-clipvalue, clipvalue]``.
        global_clipnorm: clip all gradients together to this global L2 norm. At most one of
            the three clipping arguments may be set.
        use_ema: keep an exponential moving average of the weights (slots named
            ``average``); see :meth:`finalize_variable_values` and :meth:`swap_ema_weights`.
        ema_momentum: momentum of that average (0.99).
        ema_overwrite_frequency: if an int, copy the averages into the weights every that
            many steps.
        loss_scale_factor: if set, gradients are divided by it first.
        gradient_accumulation_steps: int >= 2: accumulate gradients in slots and apply their
            mean every that many steps.
        name: the optimizer's name (prefix of its slot names).

    Example:
        >>> opt = kiln.optimizers.Adam(1e-3)
        >>> opt.build([w, b])
        >>> gw, gb = kiln.grad(loss, [w, b])
        >>> step = kiln.function([x, y], loss, updates=opt.update_nodes([gw, gb], [w, b]))
        >>> opt.before_step(); step(xb, yb)
    """

    _slot_groups: tuple[tuple[str, ...], ...] = ()
    _default_name = "optimizer"

    def __init__(self, learning_rate: Any, weight_decay: float | None = None,
                 clipnorm: float | None = None, clipvalue: float | None = None,
                 global_clipnorm: float | None = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: int | None = None,
                 loss_scale_factor: float | None = None,
                 gradient_accumulation_steps: int | None = None, name: str | None = None,
                 **kwargs: Any):
        cls = type(self).__name__
        if kwargs.pop("decay", None) is not None:
            warnings.warn("Argument `decay` is no longer supported and will be ignored.",
                          stacklevel=2)
        if kwargs:
            raise ValueError(f"{cls}: argument(s) not recognized: {kwargs}")
        self.name = name if name is not None else _auto_name(cls)
        self.weight_decay = (None if weight_decay is None
                             else _number("weight_decay", weight_decay, cls))
        self.clipnorm = None if clipnorm is None else _number("clipnorm", clipnorm, cls)
        self.clipvalue = None if clipvalue is None else _number("clipvalue", clipvalue, cls)
        self.global_clipnorm = (None if global_clipnorm is None
                                else _number("global_clipnorm", global_clipnorm, cls))
        if sum(a is not None for a in (clipnorm, clipvalue, global_clipnorm)) > 1:
            raise ValueError(
                f"{cls}: only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. "
                f"Received: clipnorm={clipnorm}, clipvalue={clipvalue}, "
                f"global_clipnorm={global_clipnorm}")
        self.use_ema = bool(use_ema)
        self.ema_momentum = _number("ema_momentum", ema_momentum, cls)
        self.ema_overwrite_frequency = ema_overwrite_frequency
        if use_ema:
            if not 0 <= self.ema_momentum <= 1:
                raise ValueError(f"{cls}: `ema_momentum` must be in the range [0, 1]. "
                                 f"Received: ema_momentum={ema_momentum}")
            if ema_overwrite_frequency and (not isinstance(ema_overwrite_frequency, int)
                                            or ema_overwrite_frequency < 1):
                raise ValueError(f"{cls}: `ema_overwrite_frequency` must be an integer >= 1 "
                                 f"or None. Received: {ema_overwrite_frequency!r}")
        self.loss_scale_factor = (None if loss_scale_factor is None
                                  else _number("loss_scale_factor", loss_scale_factor, cls))
        if gradient_accumulation_steps:
            if (not isinstance(gradient_accumulation_steps, int | np.integer)
                    or gradient_accumulation_steps < 2):
                raise ValueError(f"{cls}: `gradient_accumulation_steps` must be an integer "
                                 f">= 2. Received: {gradient_accumulation_steps!r}")
            gradient_accumulation_steps = int(gradient_accumulation_steps)
        self.gradient_accumulation_steps = gradient_accumulation_steps or None

        self.iterations = Variable(np.int64(0), name=f"{self.name}/iteration", trainable=False,
                                   dtype="int64")
        self.learning_rate_variable = Variable(np.float32(0.0), name=f"{self.name}/learning_rate",
                                               trainable=False, dtype="float32")
        self._learning_rate: Any = None
        self._set_learning_rate(learning_rate, initial=True)

        self.built = False
        self._trainable_variables: list[Variable] = []
        self._var_index: dict[int, int] = {}
        self._slots: dict[tuple[int, str], Variable] = {}
        self._slot_variables: list[Variable] = []
        self._exclude_ids: set[int] = set()
        self._exclude_pattern: re.Pattern | None = None
        self._pending: dict[int, tuple[Variable, Node]] = {}
        self._compiled: dict[tuple, Any] = {}

    # ---- learning rate ---------------------------------------------------------------------
    def _set_learning_rate(self, value: Any, initial: bool = False) -> None:
        cls = type(self).__name__
        if isinstance(value, LearningRateSchedule) or callable(value):
            self._learning_rate = value
            self.learning_rate_variable.assign(self._current_scheduled_value())
            return
        if isinstance(self._learning_rate, LearningRateSchedule) and not initial:
            raise TypeError(
                f"{cls} was created with a LearningRateSchedule as its `learning_rate`, hence "
                "its learning rate is not settable. Pass a float `learning_rate` to the "
                "constructor if you need to set it, or assign a new schedule.")
        if isinstance(value, Variable):
            value = float(value.numpy())
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer |
                                                     np.floating | np.ndarray):
            raise TypeError(
                f"{cls}: `learning_rate` should be a float, a LearningRateSchedule or a "
                f"zero-argument callable. Received: learning_rate={value!r}")
        self._learning_rate = float(value)
        self.learning_rate_variable.assign(np.float32(value))

    def _current_scheduled_value(self) -> float:
        lr = self._learning_rate
        if isinstance(lr, LearningRateSchedule):
            return float(lr(int(self.iterations.value)))
        if callable(lr):
            return float(lr())
        return float(self.learning_rate_variable.value)

    @property
    def learning_rate(self) -> float:
        """The current learning rate as a float. Setting it takes a float (written into
        ``learning_rate_variable``: no recompilation), a schedule or a callable."""
        if isinstance(self._learning_rate, LearningRateSchedule) or callable(self._learning_rate):
            return self._current_scheduled_value()
        return float(self.learning_rate_variable.value)

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._set_learning_rate(value)

    def before_step(self) -> None:
        """Python side of a step, called by the trainer before running it: writes the value
        of a schedule (at the current ``iterations``) or callable learning rate into
        ``learning_rate_variable``."""
        if isinstance(self._learning_rate, LearningRateSchedule) or callable(self._learning_rate):
            self.learning_rate_variable.assign(np.float32(self._current_scheduled_value()))

    # ---- variables -------------------------------------------------------------------------
    def build(self, variables: Sequence[Variable]) -> None:
        """Creates the slot Variables of ``variables``.

        Idempotent: variables already known are skipped, so building twice with the same
        list is a no-op; new variables get their slots appended (the order of existing slots
        never changes). Slots are created group by group and, within a group, interleaved per
        variable (Adam: ``m(v0), v(v0), m(v1), v(v1) ...``), like Keras.
        """
        variables = list(variables)
        for v in variables:
            if not isinstance(v, Variable):
                raise TypeError(f"{type(self).__name__}.build: expected kiln.Variable objects, "
                                f"received {type(v).__name__}")
        new: list[Variable] = []
        for v in variables:
            if id(v) not in self._var_index and all(v is not n for n in new):
                new.append(v)
        if not new and self.built:
            return
        for v in new:
            if v.dtype not in ("float32", "float64"):
                raise TypeError(f"{type(self).__name__}: can only optimize float variables, "
                                f"received {v.name!r} of dtype {v.dtype}")
            self._var_index[id(v)] = len(self._trainable_variables)
            self._trainable_variables.append(v)
        groups: list[tuple[str, ...]] = []
        if self.use_ema:
            groups.append(("average",))
        if self.gradient_accumulation_steps:
            groups.append(("gradient_accumulator",))
        groups.extend(self._active_slot_groups())
        for group in groups:
            for v in new:
                for slot in group:
                    self._add_slot(v, slot, self._slot_initial_value(slot))
        first_build = not self.built
        self.built = True
        if first_build:
            self._build_extra(self._trainable_variables)

    def _active_slot_groups(self) -> list[tuple[str, ...]]:
        return list(self._slot_groups)

    def _slot_initial_value(self, slot: str) -> float:
        return 0.0

    def _build_extra(self, variables: list[Variable]) -> None:
        """Hook for slots that are not per variable (Nadam's ``u_product``)."""

    def _add_slot(self, var: Variable, slot: str, initial: float) -> Variable:
        name = f"{self.name}/{var.name.replace('/', '_')}_{slot}"
        s = Variable(np.full(var.shape, initial, dtype=var.dtype), name=name, trainable=False,
                     dtype=var.dtype)
        self._slots[(id(var), slot)] = s
        self._slot_variables.append(s)
        return s

    def add_variable(self, shape: Sequence[int], initial: float = 0.0, dtype: str = "float32",
                     name: str | None = None) -> Variable:
        """Adds a non-per-variable optimizer Variable (tracked in :attr:`variables`)."""
        s = Variable(np.full(tuple(shape), initial, dtype=dtype),
                     name=f"{self.name}/{name or 'var'}", trainable=False, dtype=dtype)
        self._slot_variables.append(s)
        return s

    def stateless_apply(self, optimizer_variables: Sequence[Any], grads: Sequence[Any],
                        trainable_variables: Sequence[Any]) -> tuple[list, list]:
        """Keras 3's stateless ``apply`` (``kiln.layers.stateless``): one update of the
        given values with NumPy ``grads``, returning ``(new trainable values, new optimizer
        values)`` (in the order of the variables the optimizer was built with, and of
        :attr:`variables`); the optimizer's and the model's variables are unchanged."""
        from kiln.layers.stateless import swapped, values_of
        if not self.built:
            raise ValueError(f"To call stateless_apply, {type(self).__name__} must be built "
                             "(its variables must exist): call optimizer.build("
                             "trainable_variables) first")
        who = f"{type(self).__name__}.stateless_apply"
        targets, own = list(self._trainable_variables), list(self.variables)
        from kiln.layers.jax_bridge import has_tracer
        if has_tracer(optimizer_variables, grads, trainable_variables):  # inside jax.jit
            from kiln.layers.jax_bridge import host_call
            out = host_call(lambda o, g, t: sum(self.stateless_apply(o, g, t), []),
                            (list(optimizer_variables), list(grads), list(trainable_variables)),
                            [(v.shape, v.dtype) for v in targets + own])
            return out[:len(targets)], out[len(targets):]
        with swapped(targets, trainable_variables, who, "trainable_variables"), \
                swapped(own, optimizer_variables, who, "optimizer_variables"):
            self.apply(grads)
            return values_of(targets), values_of(own)

    def get_slot(self, variable: Variable, slot: str) -> Variable:
        """The slot Variable ``slot`` (e.g. ``"momentum"``) of ``variable``."""
        try:
            return self._slots[(id(variable), slot)]
        except KeyError:
            names = sorted({k[1] for k in self._slots})
            raise KeyError(f"{type(self).__name__}: no slot {slot!r} for variable "
                           f"{getattr(variable, 'name', variable)!r} (built: {self.built}; "
                           f"slots: {names})") from None

    @property
    def variables(self) -> list[Variable]:
        """``iterations`` then every slot, in creation order (stable, for checkpoints)."""
        return [self.iterations, *self._slot_variables]

    def get_weights(self) -> list[np.ndarray]:
        """Copies of :attr:`variables`' values."""
        return [v.numpy() for v in self.variables]

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Assigns values to :attr:`variables` (same order and shapes)."""
        current = self.variables
        if len(weights) != len(current):
            raise ValueError(f"{type(self).__name__}.set_weights: expected {len(current)} "
                             f"arrays, received {len(weights)}")
        for var, w in zip(current, weights):
            w = np.asarray(w)
            if w.shape != var.shape:
                raise ValueError(f"{type(self).__name__}.set_weights: variable {var.name!r} has "
                                 f"shape {var.shape}, received {w.shape}")
            var.assign(w)

    def exclude_from_weight_decay(self, var_list: Sequence[Variable] | None = None,
                                  var_names: Sequence[str] | None = None) -> None:
        """Excludes variables (or variables whose name contains one of ``var_names``) from
        weight decay."""
        self._exclude_ids = {id(v) for v in var_list or []}
        self._exclude_pattern = re.compile("|".join(map(re.escape, var_names))) if var_names \
            else None

    def _weight_decay_for(self, var: Variable) -> float | None:
        """The decoupled weight decay of ``var`` (None: none); Muon picks one per variable."""
        return self.weight_decay if self._use_weight_decay(var) else None

    def scale_loss(self, loss: Any) -> Any:
        """``loss * loss_scale_factor`` when that is set (the trainer differentiates the
        scaled loss; :meth:`update_nodes` divides the gradients back), else ``loss``."""
        if self.loss_scale_factor is None:
            return loss
        return loss * self.loss_scale_factor

    def _use_weight_decay(self, var: Variable) -> bool:
        if id(var) in self._exclude_ids:
            return False
        return not (self._exclude_pattern is not None
                    and self._exclude_pattern.search(var.name) is not None)

    # ---- the step as graph nodes -----------------------------------------------------------
    def assign(self, slot: Variable, value: Node) -> None:
        """Records the new value of an optimizer slot for the step being built."""
        self._pending[id(slot)] = (slot, convert_to_tensor(value, slot.dtype))

    def _step_count(self) -> Node:
        """The int64 step count the rules see: ``iterations``, or with gradient accumulation
        the number of applied updates ``iterations // N`` (like Keras)."""
        it = convert_to_tensor(self.iterations)
        if not self.gradient_accumulation_steps:
            return it
        n = float(self.gradient_accumulation_steps)
        return ops.cast(ops.floor(ops.cast(it, "float64") / n), "int64")

    def local_step(self, dtype: str) -> Node:
        """``iterations + 1`` (the 1-based number of this update) as a ``dtype`` scalar."""
        return ops.cast(self._step_count() + 1, dtype)

    def update_step(self, gradient: Node, variable: Variable, value: Node,
                    learning_rate: Node) -> Node:
        """The optimizer's rule for one variable: returns its new value.

        Args:
            gradient: the (processed) gradient, in the variable's dtype.
            variable: the Variable (to look up slots with :meth:`get_slot`).
            value: its current value after weight decay.
            learning_rate: the learning rate, a scalar in the variable's dtype.

        Slot updates are recorded with :meth:`assign`.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement update_step")

    def _before_update_steps(self, variables: list[Variable]) -> None:
        """Hook run before the per-variable rules (Nadam updates ``u_product`` here)."""

    def update_nodes(self, grads: Sequence[Node | None],
                     variables: Sequence[Variable]) -> list[tuple[Variable, Node]]:
        """Graph nodes for one optimization step.

        Args:
            grads: one gradient node per variable (None: that variable is left alone).
            variables: the Variables to update (the optimizer is built on them if needed).

        Returns:
            ``(Variable, new value node)`` pairs for each updated variable, each slot written
            by the step, and ``iterations`` (+1); pass them to ``kiln.function(updates=...)``.
        """
        cls = type(self).__name__
        grads, variables = list(grads), list(variables)
        if len(grads) != len(variables):
            raise ValueError(f"{cls}.update_nodes: received {len(grads)} gradients for "
                             f"{len(variables)} variables")
        if len({id(v) for v in variables}) != len(variables):
            raise ValueError(f"{cls}.update_nodes: a variable appears twice in "
                             f"{[v.name for v in variables]}")
        self.build(variables)
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        missing = [v.name for g, v in zip(grads, variables) if g is None]
        if not pairs:
            raise ValueError(f"{cls}: no gradients provided for any variable")
        if missing:
            warnings.warn(f"{cls}: gradients do not exist for variables {missing}; they are "
                          "not updated", stacklevel=2)
        gs: list[Node] = []
        vs: list[Variable] = []
        for g, v in pairs:
            g = convert_to_tensor(g, v.dtype)
            if g.dtype not in ("float32", "float64"):
                raise TypeError(f"{cls}: gradient of {v.name!r} must be float, received "
                                f"{g.type}")
            if tuple(g.shape) != tuple(v.shape):
                raise ValueError(f"{cls}: gradient of {v.name!r} has shape {g.shape}, the "
                                 f"variable has shape {v.shape}")
            gs.append(ops.cast(g, v.dtype))
            vs.append(v)

        self._pending = {}
        if self.loss_scale_factor is not None:
            gs = [g / self.loss_scale_factor for g in gs]
        accumulate = self.gradient_accumulation_steps
        is_update: Node | None = None
        if accumulate:
            is_update = _divisible(convert_to_tensor(self.iterations) + 1, accumulate)
            accs = [self.get_slot(v, "gradient_accumulator") for v in vs]
            step_grads = [(g + convert_to_tensor(a)) / float(accumulate) for g, a in zip(gs, accs)]
        else:
            step_grads = gs
        step_grads = self._clip_gradients(step_grads)

        lr32 = convert_to_tensor(self.learning_rate_variable)
        values: list[Node] = []
        for v in vs:
            x = convert_to_tensor(v)
            wd = self._weight_decay_for(v)
            if wd is not None:
                x = x - x * wd * ops.cast(lr32, v.dtype)
            values.append(x)
        self._before_update_steps(vs)
        new_values = [self.update_step(g, v, x, ops.cast(lr32, v.dtype))
                      for g, v, x in zip(step_grads, vs, values)]

        if accumulate:
            assert is_update is not None
            new_values = [ops.where(is_update, n, convert_to_tensor(v))
                          for n, v in zip(new_values, vs)]
            self._pending = {k: (s, ops.where(is_update, n, convert_to_tensor(s)))
                             for k, (s, n) in self._pending.items()}
            for g, a in zip(gs, accs):
                acc = convert_to_tensor(a)
                self.assign(a, ops.where(is_update, ops.zeros_like(acc), acc + g))

        if self.use_ema:
            step = self._step_count()
            all_new = {id(v): n for v, n in zip(vs, new_values)}
            for v in self._trainable_variables:
                avg = self.get_slot(v, "average")
                current = all_new.get(id(v), convert_to_tensor(v))
                not_first = ops.cast(ops.not_equal(step, 0), v.dtype)
                momentum = not_first * self.ema_momentum
                new_avg = momentum * convert_to_tensor(avg) + (1.0 - momentum) * current
                self.assign(avg, new_avg)
                if self.ema_overwrite_frequency:
                    overwrite = _divisible(step + 1, self.ema_overwrite_frequency)
                    all_new[id(v)] = ops.where(overwrite, new_avg, current)
            vs = [v for v in self._trainable_variables if id(v) in all_new]
            new_values = [all_new[id(v)] for v in vs]

        # Keras applies each variable's constraint after the step (EMA included)
        new_values = [constraints.apply(v, n, cls) for v, n in zip(vs, new_values)]
        updates: list[tuple[Variable, Node]] = list(zip(vs, new_values))
        order = {id(s): i for i, s in enumerate(self._slot_variables)}
        updates += sorted(self._pending.values(), key=lambda p: order[id(p[0])])
        updates.append((self.iterations, convert_to_tensor(self.iterations) + 1))
        self._pending = {}
        return updates

    # ---- clipping --------------------------------------------------------------------------
    def _clip_gradients(self, grads: list[Node]) -> list[Node]:
        if self.clipnorm and self.clipnorm > 0:
            return [clip_by_norm(g, self.clipnorm) for g in grads]
        if self.global_clipnorm and self.global_clipnorm > 0:
            return clip_by_global_norm(grads, self.global_clipnorm)
        if self.clipvalue and self.clipvalue > 0:
            c = self.clipvalue
            return [ops.clip(g, -c, c) for g in grads]
        return grads

    def finalize_variable_values(self, var_list: Sequence[Variable]) -> None:
        """With ``use_ema``, overwrites the variables with their moving averages (Keras calls
        this at the end of ``fit``)."""
        if self.use_ema:
            for v in var_list:
                v.assign(self.get_slot(v, "average").value)

    def swap_ema_weights(self, variables: Sequence[Variable] | None = None) -> None:
        """Swaps the values of ``variables`` with their EMA copies (call again to swap back),
        e.g. to evaluate with the averaged weights."""
        if not self.use_ema:
            raise ValueError(f"{type(self).__name__}.swap_ema_weights: the optimizer was "
                             "created with use_ema=False")
        for v in (self._trainable_variables if variables is None else variables):
            avg = self.get_slot(v, "average")
            tmp = v.numpy()
            v.assign(avg.value)
            avg.assign(tmp)

    # ---- config ----------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The constructor arguments (a schedule is serialized as a dict)."""
        lr = self._learning_rate
        if isinstance(lr, LearningRateSchedule):
            learning_rate: Any = _serialize_schedule(lr)
        elif callable(lr):
            warnings.warn(f"{type(self).__name__}.get_config: a callable learning rate cannot "
                          "be serialized; its current value is stored instead", stacklevel=2)
            learning_rate = float(lr())
        else:
            learning_rate = float(self.learning_rate_variable.value)
        return {
            "name": self.name,
            "learning_rate": learning_rate,
            "weight_decay": self.weight_decay,
            "clipnorm": self.clipnorm,
            "global_clipnorm": self.global_clipnorm,
            "clipvalue": self.clipvalue,
            "use_ema": self.use_ema,
            "ema_momentum": self.ema_momentum,
            "ema_overwrite_frequency": self.ema_overwrite_frequency,
            "loss_scale_factor": self.loss_scale_factor,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None) -> Optimizer:
        """Creates an optimizer from :meth:`get_config`'s output."""
        config = dict(config)
        if isinstance(config.get("learning_rate"), dict):
            config["learning_rate"] = _deserialize_schedule(config["learning_rate"],
                                                            custom_objects)
        return cls(**config)

    def __repr__(self) -> str:
        return f"<kiln.optimizers.{type(self).__name__} {self.name!r} lr={self.learning_rate:g}>"

