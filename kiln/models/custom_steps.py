"""Custom training steps, the static-graph way (docs/features.md, "Custom steps").

A model that overrides ``train_step(data)`` (or ``test_step``, ``predict_step``,
``compute_loss``, ``compute_metrics``) gets it TRACED, once per data signature, into ONE
compiled step, as TensorFlow's graph mode traced it: ``data`` is made of placeholders; inside,
``self(x, training=True)``, ``self.compute_loss(...)``, ``kiln.GradientTape`` /
``kiln.grad``, ``optimizer.apply(grads, variables)`` (any number of optimizers), metric
trackers' ``update_state``/``result`` and ``Variable.assign`` all build graph nodes:

* an optimizer's ``apply`` records its updates with ``Variable.assign``; later reads of an
  updated Variable in the same step see the new value (``kiln.core.trace_variables``), so a
  GAN's generator step sees the discriminator after its update, as in eager Keras;
* ``metric.update_state`` on symbolic tensors adds the metric's statistics to the step's
  outputs; they are merged into the metric after every run; ``metric.result()`` returns a
  :class:`~kiln.layers.context.DeferredResult`, read after the merge;
* the returned dict is the logs: symbolic entries are step outputs (their value at the last
  batch), deferred results the metrics' values.

An override that cannot be traced (NumPy conversions or Python branches on symbolic values)
raises :class:`StepTraceError` naming the model and the step, never silently ignored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.config
from kiln import ops
from kiln.core import Node, depends_on, is_tensor, placeholder, trace_variables
from kiln.eager import by_run
from kiln.layers.base import flatten
from kiln.layers.context import DeferredResult, current, trace
from kiln.models import distributed
from kiln.models.data import (
    ArrayAdapter,
    IterableAdapter,
    TensorSpec,
    flatten_data,
    is_iterable_data,
    train_validation_split,
)
from kiln.models.eager_loop import eager_extra_losses
from kiln.models.jax_steps import is_jax_style, jax_style_step
from kiln.models.stateless import eager_compute_loss
from kiln.tape import GradientTape

_OVERRIDABLE = ("train_step", "test_step", "predict_step", "compute_loss", "compute_metrics")


class StepTraceError(RuntimeError):
    """A custom ``train_step``/``test_step``/``predict_step`` could not be traced."""


def unpack_x_y_sample_weight(data: Any) -> tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` of a batch given as ``x``, ``(x,)``, ``(x, y)`` or
    ``(x, y, sample_weight)`` (Keras' ``keras.utils.unpack_x_y_sample_weight``)."""
    if isinstance(data, list):
        data = tuple(data)
    if not isinstance(data, tuple):
        return data, None, None
    if len(data) == 1:
        return data[0], None, None
    if len(data) == 2:
        return data[0], data[1], None
    if len(data) == 3:
        return data[0], data[1], data[2]
    raise ValueError("Data is expected to be in format `x`, `(x,)`, `(x, y)`, or "
                     f"`(x, y, sample_weight)`, found a tuple of {len(data)} items")


class CustomStepsMixin:
    """``train_step``/``test_step``/``predict_step`` and their helpers (Keras 3 names), and the
    tracing of overridden ones into compiled steps."""

    # ---- the Keras 3 defaults (traced; fit uses its faster built-in step unless overridden) --
    def train_step(self, data: Any) -> dict:
        """One training step on a batch ``data`` (symbolic, traced once). Override it to
        customize training; see the module docstring for what works inside."""
        x, y, sample_weight = unpack_x_y_sample_weight(data)
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                     training=True)
            self._loss_tracker.update_state(loss, sample_weight=_batch_size(x))
        variables = self.trainable_weights
        if variables:
            self.optimizer.apply(tape.gradient(loss, variables), variables)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def test_step(self, data: Any) -> dict:
        """One evaluation step on a batch (inference mode; traced once)."""
        x, y, sample_weight = unpack_x_y_sample_weight(data)
        y_pred = self(x, training=False)
        loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                 training=False)
        self._loss_tracker.update_state(loss, sample_weight=_batch_size(x))
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def predict_step(self, data: Any) -> Any:
        """The model's outputs on a batch (inference mode; traced once)."""
        x, _, _ = unpack_x_y_sample_weight(data)
        return self(x, training=False)

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None,
                     sample_weight: Any = None, training: bool = True) -> Node:
        """The total loss of a batch: the compiled losses of the outputs (weighted by
        ``loss_weights``), plus the regularization penalties and the losses layers added.
        On NumPy arrays outside a traced step: computed eagerly (a NumPy scalar)."""
        if current() is None and not _symbolic_data(y, y_pred):
            return eager_compute_loss(self, x, y, y_pred, sample_weight, training)
        specs = self._outputs_for(y)
        preds = flatten(y_pred) if y_pred is not None else []
        ys = _flat(y)
        sws = _flat(sample_weight)
        total: Node | None = None
        for i, o in enumerate(specs):
            if o.loss is None or i >= len(preds):
                continue
            if i >= len(ys):
                raise ValueError(f"{self.name}: output {o.name!r} has a loss but no targets "
                                 "were given")
            sw = sws[i] if i < len(sws) else (sws[0] if len(sws) == 1 else None)
            value = o.loss(ys[i], preds[i], sw)
            term = value if o.weight == 1.0 else value * o.weight
            total = term if total is None else total + term
        ctx = current()
        run = by_run()
        extra = (eager_extra_losses(self, run) if run is not None and ctx is None else
                 list(self.regularization_losses()) + (list(ctx.losses) if ctx else []))
        for term in extra:
            term = ops.convert_to_tensor(term) if not is_tensor(term) else term
            term = ops.sum(term) if term.ndim else term
            total = term if total is None else total + term
        if total is None:
            raise ValueError(f"{self.name}: no loss to compute; provide a `loss` argument in "
                             "compile() (or add losses in call() with add_loss)")
        return total

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None) -> dict:
        """Updates the compiled metrics with a batch and returns every metric's result."""
        specs = self._outputs_for(y)
        preds = flatten(y_pred) if y_pred is not None else []
        ys = _flat(y)
        sws = _flat(sample_weight)
        for i, o in enumerate(specs):
            if i >= len(preds) or i >= len(ys):
                continue
            sw = sws[i] if i < len(sws) else (sws[0] if len(sws) == 1 else None)
            for m in o.metrics:
                m.update_state(ys[i], preds[i])
            for m in o.weighted_metrics:
                m.update_state(ys[i], preds[i], sample_weight=sw)
        return self.get_metrics_result()

    def get_metrics_result(self) -> dict:
        """``{name: result}`` of every metric in :attr:`metrics`."""
        return {m.name: m.result() for m in self.metrics}

    def _outputs_for(self, y: Any) -> list:
        """The per-output losses and metrics of compile(), resolved at the first traced step
        from the targets' types (as the built-in step resolves them from the arrays)."""
        if self._outputs is None and self.compiled:
            ys = _flat(y)
            self._resolve_outputs([TensorSpec(tuple(t.shape), t.dtype) for t in ys]
                                  if ys and all(is_tensor(t) for t in ys) else None)
        return self._outputs or []

    # ---- which steps are custom --------------------------------------------------------------
    def _custom(self, mode: str) -> bool:
        """Whether ``mode`` ("train", "test", "predict") runs a traced custom step."""
        names = {"train": ("train_step", "compute_loss", "compute_metrics"),
                 "test": ("test_step", "compute_loss", "compute_metrics"),
                 "predict": ("predict_step",)}[mode]
        cls = type(self)
        return any(getattr(cls, n) is not getattr(CustomStepsMixin, n) for n in names)

    # ---- data ----------------------------------------------------------------------------------
    def _custom_adapter(self, x: Any, y: Any, sample_weight: Any, batch_size: int | None,
                        steps: int | None, shuffle: Any, what: str) -> tuple[Any, list, tuple]:
        """An adapter over the data as the user gave it (a custom step receives it unchanged,
        not conformed to the model's inputs), its first feeds and the batch's structure."""
        if is_iterable_data(x):
            if y is not None or sample_weight is not None:
                raise ValueError(f"{self.name}: when x is a generator/iterable, y and "
                                 "sample_weight must be None (the batches carry them)")
            structure: list = []

            def convert(item: Any) -> list:
                flat, struct = _flatten_batch(item, self.name, what)
                if not structure:
                    structure.append(struct)
                elif struct != structure[0]:
                    raise ValueError(f"{self.name}: {what}: a batch of another structure than "
                                     f"the first ({struct} vs {structure[0]})")
                return flat

            adapter = IterableAdapter(x, convert, steps, shuffle=bool(shuffle))
            first = adapter.convert(adapter.peek())
            return adapter, first, structure[0]
        item = x if y is None and sample_weight is None else (
            (x, y) if sample_weight is None else (x, y, sample_weight))
        flat, struct = _flatten_batch(item, self.name, what)
        n = {len(a) for a in flat}
        if len(n) != 1:
            raise ValueError(f"{self.name}: {what}: the arrays have different numbers of "
                             f"samples: {sorted(n)}")
        adapter = ArrayAdapter(flat, batch_size or 32, shuffle, steps)
        return adapter, [a[:1] for a in flat], struct

    def _custom_fit_data(self, x: Any, y: Any, sample_weight: Any, class_weight: Any,
                         batch_size: int | None, steps: int | None, shuffle: Any,
                         validation_split: float, validation_data: Any,
                         validation_batch_size: int | None, validation_steps: int | None
                         ) -> tuple[Any, list, Any, Any]:
        """fit's data and steps for an overridden train_step: ``(train adapter, its first
        feeds, validation adapter or None, the compiled train step)``; compiles before any
        update, so a step that cannot be traced changes nothing."""
        if class_weight is not None:
            raise ValueError(f"{self.name}: class_weight is not supported with a custom "
                             "train_step (weigh the samples in train_step)")
        val = None
        if validation_split and validation_data is None:
            if is_iterable_data(x):
                raise ValueError("fit: validation_split is only supported for array inputs; "
                                 "pass validation_data for generators")
            item = x if y is None and sample_weight is None else (
                (x, y) if sample_weight is None else (x, y, sample_weight))
            flat, structure = _flatten_batch(item, self.name, "fit")
            train_arrays, val_arrays = train_validation_split(flat, validation_split)
            train = ArrayAdapter(train_arrays, batch_size or 32, shuffle, steps)
            first = [a[:1] for a in train_arrays]
            val = ArrayAdapter(val_arrays, validation_batch_size or batch_size or 32, False,
                               validation_steps)
            val.custom_structure = structure  # type: ignore[attr-defined]
        else:
            train, first, structure = self._custom_adapter(x, y, sample_weight, batch_size,
                                                           steps, shuffle, "fit")
            if validation_data is not None:
                val = self._validation_for_custom(validation_data,
                                                  validation_batch_size or batch_size,
                                                  validation_steps)
        step = self._custom_step("train", first, structure)
        if val is not None and getattr(val, "custom_structure", None) is not None:
            vfirst = [a[:1] for a in val.arrays] if isinstance(val, ArrayAdapter) else \
                val.convert(val.peek())
            self._custom_step("test", vfirst, val.custom_structure)
        return train, first, val, step

    def _validation_for_custom(self, data: Any, batch_size: int | None,
                               steps: int | None) -> Any:
        if not self._custom("test"):  # the built-in test step on validation data
            val, vfirst = self._validation_adapter(data, batch_size, steps)
            self._test_step(*self._split_specs(vfirst))
            return val
        if is_iterable_data(data):
            adapter, _, structure = self._custom_adapter(data, None, None, batch_size, steps,
                                                         False, "validation_data")
        else:
            vx, vy, vsw = unpack_x_y_sample_weight(data)
            adapter, _, structure = self._custom_adapter(vx, vy, vsw, batch_size, steps, False,
                                                         "validation_data")
        adapter.custom_structure = structure
        return adapter

    def _custom_batch(self, mode: str, x: Any, y: Any, sample_weight: Any,
                      class_weight: Any) -> tuple[Any, list]:
        """The custom step (predict: its function) and feeds of one ``*_on_batch`` call."""
        if class_weight is not None:
            raise ValueError(f"{self.name}: class_weight is not supported with a custom "
                             "train_step (weigh the samples in train_step)")
        item = x if y is None and sample_weight is None else (
            (x, y) if sample_weight is None else (x, y, sample_weight))
        flat, structure = _flatten_batch(item, self.name, f"{mode}_on_batch")
        step = self._custom_step(mode, [a[:1] for a in flat], structure)
        if mode == "predict":
            return step.fn, flat
        self.__dict__["_batch_logs"] = step.logs
        return step, flat

    # ---- tracing -----------------------------------------------------------------------------
    def _custom_step(self, mode: str, first: list, structure: tuple) -> Any:
        from kiln.models.step_graphs import _Step

        if self.run_eagerly:  # define-by-run (kiln/models/eager_loop.py)
            return self._eager_custom_step(mode, structure)
        if distributed.active() is not None:
            raise NotImplementedError(f"{self.name}: a custom {mode}_step with "
                                      "kiln.distribution is not supported yet (the built-in "
                                      "steps are data-parallel)")
        if mode != "predict" and is_jax_style(self, mode):  # Keras' step(state, data)
            return jax_style_step(self, mode, first, structure)
        cache = self.__dict__.setdefault("_custom_steps", {})
        specs = tuple(((None,) + tuple(np.shape(a)[1:]), _dtype_of(a)) for a in first)
        key = (mode, specs, repr(structure))
        step = cache.get(key)
        if step is not None:
            return step
        phs = [placeholder(shape, dtype, name=f"data_{i}") for i, (shape, dtype)
               in enumerate(specs)]
        data = _pack_batch(phs, structure)
        rng_key = placeholder((2,), "int64", name="rng_key")
        method = {"train": self.train_step, "test": self.test_step,
                  "predict": self.predict_step}[mode]
        if mode == "train":
            self._build_optimizer_if_ready()
        with trace(training=mode == "train", rng_key=rng_key) as ctx, \
                trace_variables() as variables:
            ctx.defer_results = mode != "predict"
            try:
                returned = method(data)
            except (StepTraceError, KeyboardInterrupt):
                raise
            except Exception as exc:
                raise StepTraceError(
                    f"{self.name}: {mode}_step could not be traced into one compiled step: "
                    f"{type(exc).__name__}: {exc}. kiln runs {mode}_step once on symbolic "
                    "tensors (like TensorFlow's graph mode): use kiln.ops on them, not NumPy "
                    "conversions or Python branches on their values") from exc
        updates: dict[int, tuple] = {id(v): (v, n) for v, n in ctx.updates}
        updates.update({id(v): (v, n) for v, n in variables.update_list()})
        update_list = list(updates.values())
        if mode == "predict":
            outputs = list(flatten(returned))
            for o in outputs:
                if not is_tensor(o):
                    raise StepTraceError(f"{self.name}: predict_step must return tensors, "
                                         f"received {type(o).__name__}")
            logs = None
            slices: list = []
        else:
            if not isinstance(returned, dict):
                raise StepTraceError(f"{self.name}: {mode}_step must return a dict of logs "
                                     f"(name -> value), received {type(returned).__name__}")
            outputs, entries = [], []
            for name, value in _flat_logs(returned).items():
                if isinstance(value, DeferredResult):
                    entries.append((name, "metric", value.metric))
                elif is_tensor(value):
                    entries.append((name, "tensor", len(outputs)))
                    outputs.append(ops.convert_to_tensor(value))
                else:
                    entries.append((name, "value", value))
            slices = []
            for metric, nodes in ctx.metric_updates:
                slices.append((metric, len(outputs), len(outputs) + len(nodes)))
                outputs.extend(nodes)
            logs = entries
        uses_key = depends_on(outputs + [n for _, n in update_list], rng_key)
        feeds = phs + ([rng_key] if uses_key else [])
        fn = self._function(feeds, outputs, update_list or None, f"{mode}_function")
        step = _Step(_BeforeStep(fn, list(ctx.optimizers)), [], slices, uses_key)
        step.logs = None if logs is None else _LogReader(logs, step)
        cache[key] = step
        return step


class _BeforeStep:
    """The compiled step, preceded by the Python side of every optimizer it applies (a
    learning-rate schedule's value for this step)."""

    def __init__(self, fn: Any, optimizers: list):
        self.fn = fn
        self.before = [o.before_step for o in optimizers]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fn, name)

    def __call__(self, *feeds: Any) -> list:
        for b in self.before:
            b()
        return self.fn(*feeds)


class _LogReader:
    """The logs of a custom step after a run: metric results, the last batch's tensors."""

    def __init__(self, entries: list, step: Any):
        self.entries = entries
        self.step = step

    def __call__(self) -> dict:
        last = self.step.last
        out = {}
        for name, kind, value in self.entries:
            if kind == "metric":
                out[name] = value.result()
            elif kind == "tensor":
                v = np.asarray(last[value]) if last is not None else np.nan
                out[name] = float(v) if v.ndim == 0 else v
            else:
                out[name] = value
        return out


def _symbolic_data(*values: Any) -> bool:
    return any(is_tensor(a) for v in values for a in flatten(v) if a is not None)


def _flat_logs(logs: dict) -> dict:
    """``logs`` with nested dicts flattened into their entries (the inner names; a later
    entry of the same name wins), as Keras' ``pythonify_logs`` flattens a step's logs."""
    out: dict = {}
    for name, value in logs.items():
        if isinstance(value, dict):
            out.update(_flat_logs(value))
        else:
            out[name] = value
    return out


def _batch_size(x: Any) -> Node:
    first = next(t for t in flatten(x) if t is not None)
    if isinstance(first, np.ndarray):  # define-by-run (run_eagerly)
        return np.asarray(len(first), kiln.config.floatx())
    return ops.cast(ops.size_of(first, axis=0), kiln.config.floatx())


def _flat(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def _dtype_of(a: Any) -> str:
    kind = np.asarray(a).dtype.kind
    if kind == "f":
        return kiln.config.floatx()
    if kind in "iu":
        return "int64" if np.asarray(a).dtype.itemsize > 4 else "int32"
    if kind == "b":
        return "bool"
    raise TypeError(f"custom step data must be numeric arrays, received dtype "
                    f"{np.asarray(a).dtype}")


def _flatten_batch(item: Any, model_name: str, what: str) -> tuple[list, tuple]:
    """A batch as a flat list of arrays and a structure to pack it back with."""
    if isinstance(item, tuple | list) and not isinstance(item, np.ndarray):
        flats, structs = [], []
        for part in item:
            flat, struct = _flatten_batch(part, model_name, what)
            flats.extend(flat)
            structs.append(struct)
        return flats, ("tuple" if isinstance(item, tuple) else "list", tuple(structs))
    if isinstance(item, dict):
        flat, _ = flatten_data(item, None, None, what, model_name)
        return [np.asarray(a) for a in flat], ("dict", tuple(item))
    arr = np.asarray(item)
    dtype = _dtype_of(arr)
    return [arr if arr.dtype.name == dtype else arr.astype(dtype)], ("leaf",)


def _pack_batch(flat: list, structure: tuple) -> Any:
    it = iter(flat)

    def build(struct: tuple) -> Any:
        kind = struct[0]
        if kind == "leaf":
            return next(it)
        if kind == "dict":
            return {k: next(it) for k in struct[1]}
        parts = [build(s) for s in struct[1]]
        return tuple(parts) if kind == "tuple" else parts

    return build(structure)


__all__ = ["CustomStepsMixin", "GradientTape", "StepTraceError", "unpack_x_y_sample_weight"]
