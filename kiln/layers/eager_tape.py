"""A layer's eager call as a :mod:`kiln.tape` record: the replay traces the layer on the
given nodes exactly as its eager build (``Layer._call_eager``) did; and a layer's call in
define-by-run (``compile(run_eagerly=True)``, docs/debugging.md)."""

from __future__ import annotations

import weakref
from typing import Any

import kiln.tape
from kiln import eager
from kiln.core import Variable, trace_variables
from kiln.layers.base import flatten, map_structure, ops_sum_scalar
from kiln.layers.context import trace
from kiln.ops import _eager as eager_ops


def record_call(layer: Any, key: Any, arrays: Any, tensor_kwargs: dict, args: tuple,
                kwargs: dict, training: Any, flat: list, outputs: list) -> None:
    """Records ``layer``'s eager call on the active GradientTapes.

    Args:
        key: the eager cache key of the call (its signature and non-array arguments).
        arrays: the input arrays, in their structure.
        tensor_kwargs: array keyword arguments (masks, initial states), in their structure.
        flat: the fed arrays: inputs, then keyword arrays, then the random key if any.
        outputs: the output arrays, then the ``add_loss`` values (``layer.losses``).
    """
    n_in = len(flatten(arrays))
    n_kw = len(flatten([tensor_kwargs[k] for k in sorted(tensor_kwargs)]))
    keyed = len(flat) > n_in + n_kw

    def replay(nodes: list) -> list:
        it = iter(nodes[:n_in])
        phs = map_structure(lambda _: next(it), arrays)
        it_kw = iter(nodes[n_in:n_in + n_kw])
        ph_kwargs = {k: map_structure(lambda _: next(it_kw), tensor_kwargs[k])
                     for k in sorted(tensor_kwargs)}
        rng_key = nodes[-1] if keyed else None
        with trace(training=bool(training), rng_key=rng_key) as ctx, trace_variables():
            out = layer(phs, *args, training=training, **kwargs, **ph_kwargs)
        outs = [t.__kiln_node__() if isinstance(t, Variable) else t for t in flatten(out)]
        return outs + [ops_sum_scalar(t) for t in ctx.losses]  # add_loss values: .losses

    dtypes = [eager.dtype_for(a, layer.dtype, "bool", who=layer.name)
              for a in flat[:n_in + n_kw]] + (["int64"] if keyed else [])
    kiln.tape.record(("layer", weakref.ref(layer), key), replay, flat, dtypes, outputs)


def by_run_call(layer: Any, run: Any, inputs: Any, args: tuple, training: Any,
                kwargs: dict) -> Any:
    """A layer called on arrays in define-by-run: kiln's own layers run their compiled eager
    call (``training`` inherited from the run); a user's layer runs its ``call()`` as Python
    on the arrays (:func:`call_direct`)."""
    if training is None:
        training = run.training
    if type(layer).__module__.startswith("kiln."):
        with eager.outside_run(), eager_ops.reading_values(False):
            out = layer._call_eager(inputs, *args, training=training, **kwargs)
        run.losses.extend(layer.__dict__.get("_eager_losses", ()))  # its add_loss values
        return out
    return call_direct(layer, inputs, args, training, kwargs)


def call_direct(layer: Any, inputs: Any, args: tuple, training: Any, kwargs: dict) -> Any:
    """``layer.call`` run as Python on arrays (define-by-run): built on the arrays' shapes
    first; its ``kiln.ops`` calls run eagerly (recorded on an active tape) and read its
    Variables as their values."""
    run = eager.by_run()
    if training is None:
        training = run.training if run is not None else False
    layer._maybe_build(inputs)
    if layer._call_accepts("training"):
        kwargs = dict(kwargs, training=bool(training))
    with eager.define_by_run(bool(training), run.losses if run is not None else None), \
            eager_ops.reading_values(True):
        return layer.call(inputs, *args, **kwargs)
