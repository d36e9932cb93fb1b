"""``compile(run_eagerly=True)``: the steps run define-by-run (docs/debugging.md).

kiln is define-and-run: ``fit`` normally compiles ONE graph per step. With ``run_eagerly``
the same loops (``fit``/``evaluate``/``predict``/``*_on_batch``, callbacks, metrics, History)
call a step made here instead, which runs op by op on concrete arrays:

* a model's ``call()`` runs as Python on NumPy arrays (``print(x)``, ``np.asarray(x)``, ``if
  ops.sum(x) > 0:`` work; errors raise at the user's line); the layers and ``kiln.ops`` it
  calls run through kiln's eager path (each compiled once per signature, :mod:`kiln.eager`);
* the gradients come from :class:`kiln.GradientTape` (replayed and differentiated, cached);
* the optimizer applies them eagerly (``optimizer.apply``), the metrics merge the batch's
  statistics as in compiled mode, so the two modes give the same weights (up to float32
  rounding) on the same batches.

A step here has the interface of a compiled ``_Step`` (``fn(*feeds) -> outputs``, trackers,
metric slices, logs), so :mod:`.loops` does not know which mode runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.config
from kiln import eager, ops
from kiln.core import is_tensor
from kiln.layers.base import flatten, map_structure
from kiln.models.data import TensorSpec, structure_of
from kiln.ops import _eager as eager_ops
from kiln.tape import GradientTape, stop_recording


class EagerLoopMixin:
    """``Model.run_eagerly`` and the define-by-run steps (see the module docstring)."""

    @property
    def run_eagerly(self) -> bool:
        """Whether ``fit``/``evaluate``/``predict`` run define-by-run (Keras' attribute;
        set by ``compile(run_eagerly=...)`` or directly)."""
        return bool(self.__dict__.get("_run_eagerly", False))

    @run_eagerly.setter
    def run_eagerly(self, value: bool) -> None:
        self.__dict__["_run_eagerly"] = bool(value)
        self.__dict__["_batch_cache"] = {}  # *_on_batch cached the other mode's steps

    # ---- steps -------------------------------------------------------------------------------
    def _eager_step(self, mode: str, y_specs: list, sw_specs: list) -> Any:
        """The built-in train ("train") or test ("test") step, define-by-run."""
        from kiln.models.step_graphs import _Step

        _refuse_distribution(self, mode)
        if self._outputs is None:
            self._resolve_outputs(list(y_specs) or None)
        specs = self._model_input_specs() or []
        n_x, n_y = len(specs), len(y_specs)
        step = _Step(None, [], [], False)
        training = mode == "train"

        def fn(*feeds: Any) -> list:
            xs, ys, sws = list(feeds[:n_x]), list(feeds[n_x:n_x + n_y]), list(feeds[n_x + n_y:])
            with eager.define_by_run(training) as run:
                if training:
                    with GradientTape() as tape:
                        outputs = self(self._pack_inputs(xs), training=True)
                        total, out_losses = _losses(self, outputs, ys, sws, run)
                    variables = self.trainable_weights
                    if variables:
                        self._build_optimizer_if_ready()
                        self.optimizer.apply(tape.gradient(total, variables), variables)
                else:
                    outputs = self(self._pack_inputs(xs), training=False)
                    total, out_losses = _losses(self, outputs, ys, sws, run)
            trackers, stats, slices = _metric_stats(self, outputs, ys, sws, len(out_losses))
            step.trackers, step.metric_slices = trackers, slices
            return [np.asarray(total)] + [np.asarray(v) for v in out_losses] + stats

        step.fn = fn
        step.trackers = [self._loss_tracker] + [o.tracker for o in self._outputs or []
                                                if o.loss is not None and o.tracker is not None]
        return step

    def _eager_predict_fn(self) -> Any:
        _refuse_distribution(self, "predict")

        def predict_function(*feeds: Any) -> list:
            with eager.define_by_run(False):
                out = self(self._pack_inputs(list(feeds)), training=False)
            return [np.asarray(o) for o in flatten(out)]
        return predict_function

    def _eager_custom_step(self, mode: str, structure: tuple) -> Any:
        """An overridden ``train_step``/``test_step``/``predict_step``, called on the batch's
        arrays (define-by-run) instead of traced."""
        from kiln.models.custom_steps import _pack_batch
        from kiln.models.step_graphs import _Step

        _refuse_distribution(self, mode)
        method = {"train": self.train_step, "test": self.test_step,
                  "predict": self.predict_step}[mode]
        if mode == "train":
            self._build_optimizer_if_ready()
        step = _Step(None, [], [], False)
        returned: dict = {}

        def fn(*feeds: Any) -> list:
            data = _pack_batch(list(feeds), structure)
            with eager.define_by_run(mode == "train"):
                out = method(data)
            if mode == "predict":
                return [np.asarray(o) for o in flatten(out)]
            if not isinstance(out, dict):
                raise TypeError(f"{self.name}: {mode}_step must return a dict of logs (name "
                                f"-> value), received {type(out).__name__}")
            returned.clear()
            returned.update(out)
            return []

        def logs() -> dict:
            return {k: _log_value(v) for k, v in returned.items()}

        step.fn = fn
        step.logs = None if mode == "predict" else logs
        return step

    # ---- building without a symbolic trace -----------------------------------------------------
    def _eager_buildable(self) -> bool:
        """A subclassed model (its input specs come from its first call, not from Inputs)."""
        from kiln.models.standardize import StandardizeMixin

        return not self._is_graph_network and (
            type(self)._model_input_specs is StandardizeMixin._model_input_specs)

    def _eager_build(self, flat: list[np.ndarray], specs: list, structure: tuple) -> None:
        """Builds an unbuilt run_eagerly model by calling it on its first sample (inference,
        define-by-run): a symbolic trace would fail on the Python that ``call()`` runs on
        values. Also records the output specs (no trace needed later)."""
        from kiln.models.data import pack

        self._build_input_spec = pack(specs, structure)
        self.build_input_shape = map_structure(lambda s: s.shape, self._build_input_spec)
        self.built = True
        sample = [a[:1] if a.dtype.name == s.dtype else a[:1].astype(s.dtype)
                  for a, s in zip(flat, specs)]
        with eager.define_by_run(False):
            out = self(self._pack_inputs(sample), training=False)
        self._record_output_specs(out)
        self._after_build()

    def _record_output_specs(self, out: Any) -> None:
        self._output_structure_cache = structure_of(out)
        self._output_specs_cache = [TensorSpec((None,) + np.shape(o)[1:], _dtype(o))
                                    for o in flatten(out)]

    def _eager_output_specs(self) -> list:
        """The output specs of a built run_eagerly model, by one call on zeros."""
        specs = self._model_input_specs()
        zeros = [np.zeros((1,) + tuple(1 if d is None else d for d in s.shape[1:]), s.dtype)
                 for s in specs or []]
        with eager.define_by_run(False):
            out = self(self._pack_inputs(zeros), training=False)
        self._record_output_specs(out)
        return self._output_specs_cache


def call_direct(model: Any, inputs: Any, args: tuple, training: Any, kwargs: dict) -> Any:
    """``model(arrays)`` define-by-run: ``model.call`` runs as Python on the arrays."""
    run = eager.by_run()
    if training is None:
        training = run.training if run is not None else False
    if not model.built:
        model._build_input_spec = map_structure(
            lambda a: TensorSpec((None,) + np.shape(a)[1:], _dtype(np.asarray(a))), inputs)
        model.build_input_shape = map_structure(lambda s: s.shape, model._build_input_spec)
        model.built = True
    if model._call_accepts("training"):
        kwargs = dict(kwargs, training=bool(training))
    with eager.define_by_run(bool(training), run.losses if run is not None else None), \
            eager_ops.reading_values(True):
        return model.call(inputs, *args, **kwargs)


def can_call_directly(model: Any) -> bool:
    """Whether ``model.call`` can run on arrays: any model but a functional one with raw
    ops between its layers (those replay as graph nodes only)."""
    calls = getattr(model, "_calls", None)
    return not model._is_graph_network or calls is None or all(
        c.layer is not None for c in calls)


def eager_extra_losses(model: Any, run: Any) -> list:
    """The regularization penalty (one recorded eager value) and the ``add_loss`` values of
    a define-by-run call, as arrays."""
    extra = [v for v in (_regularization(model),) if v is not None]
    return extra + [ops.sum(v) if np.ndim(v) else v for v in run.losses]


# ---- helpers -------------------------------------------------------------------------------------
def _refuse_distribution(model: Any, mode: str) -> None:
    from kiln.models import distributed

    if distributed.active() is not None:
        raise NotImplementedError(f"{model.name}: run_eagerly with kiln.distribution is not "
                                  f"supported ({mode}); the compiled steps are data-parallel")


def _regularization(model: Any) -> Any:
    """The weights' regularization penalty as one eager call (recorded on an active tape, so
    its gradient reaches the weights); None without regularizers."""
    with eager_ops.reading_values(False):
        nodes = tuple(model.regularization_losses())
    if not nodes:
        return None

    def total(*terms: Any) -> Any:
        out = None
        for t in terms:
            t = ops.sum(t) if t.ndim else t
            out = t if out is None else out + t
        return out

    return eager_ops.call("regularization", total, nodes, {})


def _losses(model: Any, outputs: Any, ys: list, sws: list, run: Any) -> tuple[Any, list]:
    """Total loss and the per-output losses (tracked ones) of an eager step, in the order of
    the compiled step (``StepGraphsMixin._loss_and_stats``)."""
    outs = flatten(outputs)
    specs = model._outputs or []
    if len(outs) != len(specs):
        raise ValueError(f"{model.name}: the model returned {len(outs)} outputs, but "
                         f"compile() configured {len(specs)}")
    total, out_losses = None, []
    for i, (o, pred) in enumerate(zip(specs, outs)):
        if o.loss is None:
            continue
        if i >= len(ys):
            raise ValueError(f"{model.name}: output {o.name!r} has a loss but no targets "
                             "were given")
        value = o.loss(ys[i], pred, sws[i] if i < len(sws) else None)
        if o.tracker is not None:
            out_losses.append(value)
        term = value if o.weight == 1.0 else ops.multiply(value, o.weight)
        total = term if total is None else ops.add(total, term)
    for term in eager_extra_losses(model, run):  # regularizers, add_loss values of the run
        total = term if total is None else ops.add(total, term)
    if total is None:
        raise ValueError(f"{model.name}: no loss to compute; pass `loss` to compile() (or "
                         "add losses in call() with add_loss)")
    return total, out_losses


def _metric_stats(model: Any, outputs: Any, ys: list, sws: list, n_losses: int
                  ) -> tuple[list, list, list]:
    """Trackers, the metrics' batch statistics (arrays) and their slices of the outputs."""
    trackers = [model._loss_tracker]
    stats: list = []
    slices: list = []
    offset = 1 + n_losses
    for o in model._outputs or []:
        if o.loss is not None and o.tracker is not None:
            trackers.append(o.tracker)
    with stop_recording():
        for i, (o, pred) in enumerate(zip(model._outputs or [], flatten(outputs))):
            y = ys[i] if i < len(ys) else None
            sw = sws[i] if i < len(sws) else None
            for group, weight in ((o.metrics, None), (o.weighted_metrics, sw)):
                for m in group:
                    if y is None:
                        raise ValueError(f"{model.name}: metric {m.name!r} of output "
                                         f"{o.name!r} needs targets")
                    values = _stats(m, y, pred, weight)
                    slices.append((m, offset + len(stats), offset + len(stats) + len(values)))
                    stats.extend(values)
    return trackers, stats, slices


def _stats(metric: Any, y: Any, pred: Any, sample_weight: Any) -> list:
    """One metric's statistics of a batch, compiled once per signature (the arrays that
    ``Metric.update_state`` merges)."""
    arrays = [np.asarray(y), np.asarray(pred)] + (
        [] if sample_weight is None else [np.asarray(sample_weight)])

    def graph(*phs: Any) -> list:
        return list(metric.stats(phs[0], phs[1], sample_weight=phs[2] if len(phs) > 2
                                 else None))

    out = eager.run(("run_eagerly.stats", metric._graph_key()), graph, arrays, metric.dtype,
                    owner=metric, name=f"{metric.name}_stats", who=metric.name)
    return [np.asarray(v) for v in (out if isinstance(out, list) else [out])]


def _dtype(a: Any) -> str:
    kind = np.asarray(a).dtype.kind
    if kind in "iu":
        return "int64" if np.asarray(a).dtype.itemsize > 4 else "int32"
    if kind == "b":
        return "bool"
    return kiln.config.floatx() if np.asarray(a).dtype.itemsize < 8 else "float64"


def _log_value(v: Any) -> Any:
    if is_tensor(v) and not isinstance(v, np.ndarray):
        raise TypeError(f"run_eagerly: a step returned a symbolic tensor in its logs ({v!r})")
    a = np.asarray(v) if isinstance(v, np.ndarray | np.generic | float | int) else v
    return float(a) if isinstance(a, np.ndarray) and a.ndim == 0 else a


__all__ = ["EagerLoopMixin", "call_direct", "can_call_directly", "eager_extra_losses"]
