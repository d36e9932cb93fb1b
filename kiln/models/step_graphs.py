"""The compiled steps: one graph per train step, test step and predict function.

A train step is ONE graph (docs/architecture.md, "The data flow"): placeholders for the
inputs, targets, sample weights and the int64 random key ``[seed, counter]``; the model
traced inside ``trace(training=True, rng_key=key)``; the weighted losses, regularization
penalties and layer losses; the metrics' statistics; ``grad`` of the loss; the optimizer's
update nodes and the layers' own updates (BatchNormalization's moving statistics). Each step
is compiled once per target/sample-weight signature, with a ``None`` batch dimension, so the
last partial batch reuses it.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

import kiln.config
from kiln import core, ops
from kiln import losses as losses_module
from kiln.core import (
    Node,
    convert_to_tensor,
    depends_on,
    format_shape,
    gc_paused,
    grad,
    placeholder,
    trace_variables,
)
from kiln.layers.base import flatten
from kiln.layers.context import trace
from kiln.models import distributed
from kiln.models.data import TensorSpec, check_finite


class _Step:
    """A compiled train/test function and how to read its outputs: ``[total loss, per-output
    losses..., metric statistics...]``, the trackers of the losses and each metric's slice."""

    __slots__ = ("fn", "trackers", "metric_slices", "uses_key", "logs", "last")

    def __init__(self, fn: Any, trackers: list, metric_slices: list, uses_key: bool = False):
        self.fn = fn
        self.trackers = trackers
        self.metric_slices = metric_slices
        self.uses_key = uses_key
        self.logs: Any = None  # a custom step's logs reader (kiln/models/custom_steps.py)
        self.last: Any = None  # its last outputs (custom steps log their last batch's tensors)


def _signature(y_specs: list[TensorSpec], sw_specs: list[TensorSpec]) -> tuple:
    """The cache key of a step: the target and sample-weight specs, and the distribution
    (a step compiled for several ranks has the allreduce in it)."""
    return (tuple((s.shape, s.dtype) for s in y_specs),
            tuple((s.shape, s.dtype) for s in sw_specs), distributed.key())


class StepGraphsMixin:
    """Builds (and caches) the train/test steps and the predict function, and picks the step
    and feeds of one ``*_on_batch`` call."""

    def _function(self, inputs: list, outputs: list, updates: Any, name: str) -> Any:
        kwargs: dict[str, Any] = {"name": name}
        if getattr(self, "_memory_budget", None) is not None:
            kwargs["memory_budget"] = self._memory_budget
        kwargs["batch_size"] = getattr(self, "_plan_batch_size", None)
        # Looked up on kiln.core at each call, so a test can count compilations.
        return core.function(inputs, outputs, updates=updates,
                             backend=getattr(self, "_backend", None), **kwargs)

    def _feed_placeholders(self, y_specs: list[TensorSpec], sw_specs: list[TensorSpec]
                           ) -> tuple[list, list, list]:
        specs = self._model_input_specs()
        assert specs is not None
        static = self.__dict__.get("_x_static")
        shapes = [s.shape if static is None else (s.shape[0],) + tuple(dims)
                  for s, dims in zip(specs, static or [None] * len(specs))]
        x_phs = [placeholder(shape, s.dtype, name=s.name) for shape, s in zip(shapes, specs)]
        names = self.output_names
        y_phs = [placeholder(s.shape, s.dtype, name=f"{names[i]}_target")
                 for i, s in enumerate(y_specs)]
        sw_phs = [placeholder(s.shape, s.dtype, name=f"{names[i]}_sample_weight")
                  for i, s in enumerate(sw_specs)]
        return x_phs, y_phs, sw_phs

    def _loss_and_stats(self, outputs: Any, y_phs: list, sw_phs: list, ctx: Any
                        ) -> tuple[Node, list, list, list, list]:
        """Total loss, per-output losses (when several outputs), trackers, metric statistics
        and metric slices (``(metric, start, stop)`` into the step's outputs)."""
        outs = flatten(outputs)
        specs = self._outputs or []
        if len(outs) != len(specs):
            raise ValueError(f"{self.name}: the model returned {len(outs)} outputs, but "
                             f"compile() configured {len(specs)}")
        total: Node | None = None
        out_losses: list[Node] = []
        trackers: list = [self._loss_tracker]
        stats: list[Node] = []
        metric_slices: list = []
        for i, (o, pred) in enumerate(zip(specs, outs)):
            y = y_phs[i] if i < len(y_phs) else None
            sw = sw_phs[i] if i < len(sw_phs) else None
            if o.loss is not None:
                if y is None:
                    raise ValueError(f"{self.name}: output {o.name!r} has a loss but no "
                                     "targets were given")
                try:
                    value = o.loss(y, pred, sw)
                except (ValueError, TypeError) as exc:
                    raise type(exc)(f"{self.name}: loss {o.loss.name!r} of output {o.name!r} "
                                    f"(prediction shape {format_shape(pred.shape)}, target "
                                    f"shape {format_shape(y.shape)}): {exc}") from exc
                if o.tracker is not None:
                    out_losses.append(value)
                    trackers.append(o.tracker)
                term = value if o.weight == 1.0 else value * o.weight
                total = term if total is None else total + term
            for group, weight in ((o.metrics, None), (o.weighted_metrics, sw)):
                for m in group:
                    if y is None:
                        raise ValueError(f"{self.name}: metric {m.name!r} of output {o.name!r} "
                                         "needs targets")
                    nodes = m.stats(y, pred, weight)
                    metric_slices.append((m, len(stats), len(stats) + len(nodes)))
                    stats.extend(nodes)
        for term in list(self.regularization_losses()) + list(ctx.losses):
            term = _scalar(term)
            total = term if total is None else total + term
        if total is None:
            raise ValueError(f"{self.name}: no loss to compute; pass `loss` to compile() (or "
                             "add losses in call() with add_loss)")
        # metrics updated inside the model's call() (a layer's Metric, add_metric): reported
        # after the compiled ones, as Keras 3 lists its layers' metrics
        layer_metrics = self.__dict__.setdefault("_layer_metrics", [])
        for metric, nodes in ctx.metric_updates:
            metric_slices.append((metric, len(stats), len(stats) + len(nodes)))
            stats.extend(nodes)
            if all(metric is not m for m in layer_metrics):
                layer_metrics.append(metric)
        offset = 1 + len(out_losses)
        metric_slices = [(m, a + offset, b + offset) for m, a, b in metric_slices]
        return total, out_losses, trackers, stats, metric_slices

    def _train_step(self, y_specs: list[TensorSpec], sw_specs: list[TensorSpec]) -> _Step:
        if self.run_eagerly:  # define-by-run (kiln/models/eager_loop.py)
            return self._eager_step("train", y_specs, sw_specs)
        key = _signature(y_specs, sw_specs) + (self.__dict__.get("_x_static"),)
        step = self._train_fns.get(key)
        if step is not None:
            self.train_function = step.fn
            return step
        return self._with_static_inputs(self._new_train_step, key, y_specs, sw_specs)

    def _with_static_inputs(self, build: Any, key: tuple, y_specs: list[TensorSpec],
                            sw_specs: list[TensorSpec]) -> _Step:
        """``build(key, ...)``; when the step cannot be traced for inputs of unknown sizes (the
        gradient of a strided 'same' convolution over ``Input((None, None, 1))``), it is traced
        for the sizes of the batch at hand, as TensorFlow traces a step for its batch's shapes
        (batches of other sizes are then refused with the expected shape)."""
        try:
            return build(key, y_specs, sw_specs)
        except ValueError as exc:
            dims = self.__dict__.get("_x_feed_dims")
            specs = self._model_input_specs() or []
            if ("static" not in str(exc) or self.__dict__.get("_x_static") is not None
                    or not dims or len(dims) != len(specs)
                    or not any(None in s.shape[1:] for s in specs)):
                raise
            self.__dict__["_x_static"] = dims
            return build(key[:-1] + (dims,), y_specs, sw_specs)

    @gc_paused()  # tracing, autodiff, compiling: no collector pauses (core/gc_pause.py)
    def _new_train_step(self, key: tuple, y_specs: list[TensorSpec],
                        sw_specs: list[TensorSpec]) -> _Step:
        if self.optimizer is None:
            self._assert_compiled("fit")
        x_phs, y_phs, sw_phs = self._feed_placeholders(y_specs, sw_specs)
        rng_key = placeholder((2,), "int64", name="rng_key")
        dist = distributed.active()
        weight = None if dist is None else distributed.weight_placeholder()
        with trace(training=True, rng_key=rng_key, replica_weight=weight) as ctx, \
                trace_variables() as assigned:
            outputs = self(self._pack_inputs(x_phs), training=True)
        total, out_losses, trackers, stats, slices = self._loss_and_stats(
            outputs, y_phs, sw_phs, ctx)
        variables = self.trainable_weights
        if not variables:  # Keras trains it anyway (state updates, metrics), with a warning
            warnings.warn(f"{self.name}: the model does not have any trainable weights",
                          stacklevel=4)
        self._build_optimizer_if_ready()
        # as in Keras' JAX trainer (stateless_call keeps the non-trainable updates only), a
        # layer's assign to a weight the optimizer trains is the forward pass' value, not the
        # step's update (PixelCNN masks its kernel in call(): the optimizer's update wins)
        trained = {id(v) for v in variables}
        layer_updates = [(v, n) for v, n in _layer_updates(ctx, assigned)
                         if id(v) not in trained]
        if weight is None:
            # Keras differentiates optimizer.scale_loss(loss) (loss_scale_factor, the dynamic
            # scale of LossScaleOptimizer); the optimizer divides the gradients back
            grads = grad(self.optimizer.scale_loss(total), variables)
        else:  # data-parallel: one allreduce of everything the ranks must agree on
            grads = grad(self.optimizer.scale_loss(total * ops.cast(weight, total.dtype)),
                         variables)
            grads, losses_, stats, layer_updates = distributed.reduce_values(
                dist, weight, grads, [total] + out_losses, stats, layer_updates)
            total, out_losses = losses_[0], losses_[1:]
        updates = (list(self.optimizer.update_nodes(grads, variables)) if variables else []
                   ) + layer_updates
        outputs_list = [total] + out_losses + stats
        # Feed the random key only when the step uses it (Dropout ...).
        uses_key = depends_on(outputs_list + [v for _, v in updates], rng_key)
        batch_feeds = x_phs + y_phs + sw_phs
        feeds = batch_feeds + ([weight] if weight is not None else []) + (
            [rng_key] if uses_key else [])
        fn = self._function(feeds, outputs_list, updates, "train_function")
        if dist is not None:
            fn = distributed.ShardedFunction(fn, len(batch_feeds), dist)
        step = _Step(fn, trackers, slices, uses_key)
        self._train_fns[key] = step
        self.train_function = fn
        return step

    def _test_step(self, y_specs: list[TensorSpec], sw_specs: list[TensorSpec]) -> _Step:
        if self.run_eagerly:
            return self._eager_step("test", y_specs, sw_specs)
        key = _signature(y_specs, sw_specs) + (self.__dict__.get("_x_static"),)
        step = self._test_fns.get(key)
        if step is not None:
            self.test_function = step.fn
            return step
        return self._with_static_inputs(self._new_test_step, key, y_specs, sw_specs)

    @gc_paused()
    def _new_test_step(self, key: tuple, y_specs: list[TensorSpec],
                       sw_specs: list[TensorSpec]) -> _Step:
        x_phs, y_phs, sw_phs = self._feed_placeholders(y_specs, sw_specs)
        dist = distributed.active()
        weight = None if dist is None else distributed.weight_placeholder()
        with trace(training=False, replica_weight=weight) as ctx, \
                trace_variables() as assigned:
            outputs = self(self._pack_inputs(x_phs), training=False)
        total, out_losses, trackers, stats, slices = self._loss_and_stats(
            outputs, y_phs, sw_phs, ctx)
        batch_feeds = x_phs + y_phs + sw_phs
        updates = _layer_updates(ctx, assigned) or None
        if weight is None:
            fn = self._function(batch_feeds, [total] + out_losses + stats, updates,
                                "test_function")
        else:
            _, losses_, stats, _ = distributed.reduce_values(
                dist, weight, [], [total] + out_losses, stats, [])
            fn = self._function(batch_feeds + [weight], losses_ + stats, updates,
                                "test_function")
            fn = distributed.ShardedFunction(fn, len(batch_feeds), dist)
        step = _Step(fn, trackers, slices)
        self._test_fns[key] = step
        self.test_function = fn
        return step

    def _predict_fn(self) -> Any:
        if self.run_eagerly:
            self.predict_function = self._eager_predict_fn()
            return self.predict_function
        key = ("default", distributed.key())
        fn = self._predict_fns.get(key)
        if fn is None:
            fn = self._predict_fns[key] = self._new_predict_fn()
        self.predict_function = fn
        return fn

    @gc_paused()
    def _new_predict_fn(self) -> Any:
        specs = self._model_input_specs()
        assert specs is not None
        x_phs = [placeholder(s.shape, s.dtype, name=s.name) for s in specs]
        with trace(training=False) as ctx, trace_variables() as assigned:
            outputs = self(self._pack_inputs(x_phs), training=False)
        fn = self._function(x_phs, list(flatten(outputs)),
                            _layer_updates(ctx, assigned) or None, "predict_function")
        dist = distributed.active()
        if dist is not None:
            fn = distributed.ShardedFunction(fn, len(x_phs), dist, gather=True)
        return fn

    def _accumulate(self, step: _Step, outs: list, n: int) -> None:
        """Adds one batch of ``n`` samples (a step's outputs) to the trackers and metrics."""
        for i, t in enumerate(step.trackers):
            t.total += float(outs[i]) * n
            t.count += n
        for m, a, b in step.metric_slices:
            m.merge(outs[a:b])
        if step.logs is not None:
            step.last = outs

    def _batch_step(self, mode: str, x: Any, y: Any, sample_weight: Any, class_weight: Any,
                    check: bool = False) -> tuple[Any, list]:
        """The step (or predict function) and the feeds for one ``*_on_batch`` call;
        ``check``: refuse NaN/inf in the batch (``check_finite`` of train/test_on_batch).

        A single array ``x`` (and ``y``) whose signature was seen before skips the general
        standardization: only the dtype conversion and the label-range check remain, so a
        loop of ``train_on_batch`` costs little more than the compiled step itself.
        """
        self.__dict__["_batch_logs"] = None
        if self._custom(mode):  # an overridden step (kiln/models/custom_steps.py)
            return self._custom_batch(mode, x, y, sample_weight, class_weight)
        # raw strings go through a host prefix first: its output, not x, feeds the step
        fast = (sample_weight is None and class_weight is None and type(x) is np.ndarray
                and x.dtype.kind not in "OUS" and (y is None or type(y) is np.ndarray))
        if fast:
            key = (mode, x.shape[1:], x.dtype.str, None if y is None else
                   (y.shape[1:], y.dtype.str), distributed.key())
            entry = self._batch_cache.get(key)
            if entry is not None and len(x) and (y is None or len(y) == len(x)):
                step, xd, yd, n_classes = entry
                feeds = [x if x.dtype == xd else x.astype(xd)]
                if y is not None and yd is not None:
                    feeds.append(y if y.dtype == yd else y.astype(yd))
                    if n_classes is not None and (y.min() < 0 or y.max() >= n_classes):
                        entry = None  # the general path raises the error
                if entry is not None:
                    if check:
                        _check_batch(self.name, mode, feeds)
                    return step, feeds
        if mode == "predict":
            xs, ys, sws = self._standardize_x(x), [], []
            step = self._predict_fn()
        else:
            xs, ys, sws = self._prepare_arrays(x, y, sample_weight, class_weight, need_y=True)
            make = self._train_step if mode == "train" else self._test_step
            step = make(self._specs_of(ys), self._specs_of(sws))
        if fast and len(xs) == 1 and len(ys) <= 1 and not sws and xs[0].shape == x.shape and (
                not ys or ys[0].shape == y.shape):
            n_classes = None
            outs = self._outputs or []
            if ys and outs and outs[0].loss is not None and \
                    losses_module.is_sparse_categorical(outs[0].loss):
                n_classes = self._model_output_specs()[0].shape[-1]
            self._batch_cache[key] = (step, xs[0].dtype, ys[0].dtype if ys else None,
                                      n_classes)
        if check:
            _check_batch(self.name, mode, xs + ys + sws, len(xs), len(ys))
        return step, xs + ys + sws

    def compile_report(self) -> Any:
        """The compiler's report (passes, kernels, memory) of the training step; builds the
        train function on demand from the model's input and output shapes."""
        self._assert_compiled("compile_report")
        if self.train_function is None:
            if self._model_input_specs() is None:
                raise ValueError(f"{self.name}: build the model first (call it on data, "
                                 "build(input_shape) or fit())")
            out_specs = self._model_output_specs()
            self._resolve_outputs(None)
            y_specs = []
            for o, s in zip(self._outputs or [], out_specs):
                if o.loss is not None and losses_module.is_sparse_categorical(o.loss):
                    y_specs.append(TensorSpec(s.shape[:-1], "int32"))
                else:
                    y_specs.append(TensorSpec(s.shape, kiln.config.floatx()))
            self._train_step(y_specs, [])
        return self.train_function.report


def _layer_updates(ctx: Any, assigned: Any) -> list:
    """The state updates of a traced model call: the layers' ``add_update`` (BatchNormalization's
    moving statistics) and their symbolic ``Variable.assign`` calls; the last one wins."""
    updates = {id(v): (v, n) for v, n in ctx.updates}
    updates.update({id(v): (v, n) for v, n in assigned.update_list()})
    return list(updates.values())


def _scalar(term: Any) -> Node:
    """A loss term (a layer loss or regularization penalty) as a scalar node."""
    node = convert_to_tensor(term)
    return ops.sum(node) if node.ndim else node


def _check_batch(model_name: str, mode: str, feeds: list, n_x: int = 1, n_y: int = 1) -> None:
    """NaN/inf in one ``*_on_batch`` batch: the same error as ``fit`` (data.check_finite)."""
    labels = ([f"x[{i}]" if n_x > 1 else "x" for i in range(n_x)]
              + [f"y[{i}]" if n_y > 1 else "y" for i in range(n_y)])
    labels += [f"sample_weight[{i}]" for i in range(len(feeds) - len(labels))]
    check_finite(feeds, labels, model_name, f" ({mode}_on_batch)")


__all__ = ["StepGraphsMixin"]
