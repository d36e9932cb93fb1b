"""A layer called on arrays: kiln's one eager path (:mod:`kiln.eager`). The call is traced
on placeholders and compiled once per input signature, training flag and extra arguments;
the compiled functions live in the layer's own cache. Under ``run_eagerly`` (define-by-run)
the call runs op by op instead (:mod:`kiln.layers.eager_tape`); under an active
``GradientTape`` it is recorded. ``Layer._call_eager`` (kiln/layers/base.py) calls
:func:`call_eager`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import kiln.tape
from kiln import eager
from kiln.core import Node, Variable, depends_on, placeholder, trace_variables
from kiln.eager import by_run, define_by_run
from kiln.layers.base import flatten, get_mask, map_structure, ops_sum_scalar
from kiln.layers.context import trace


def call_eager(layer: Any, inputs: Any, *args: Any, training: bool | None = None,
               **kwargs: Any) -> Any:
    """``layer(inputs, *args, training=..., **kwargs)`` on arrays; returns arrays."""
    from kiln.core import function
    from kiln.random_state import next_seed

    if (run := by_run()) is not None:  # define-by-run (run_eagerly): eager_tape.py
        from kiln.layers.eager_tape import by_run_call
        return by_run_call(layer, run, inputs, args, training, kwargs)
    if runs_on_values(layer):
        return _call_on_values(layer, inputs, args, training, kwargs)
    arrays = map_structure(np.asarray, inputs)
    # Array keyword arguments (``mask=``, ``initial_state=``) are fed like the inputs
    tensor_kwargs = {k: map_structure(np.asarray, v) for k, v in kwargs.items()
                     if _is_arrays(v)}
    kwargs = {k: v for k, v in kwargs.items() if k not in tensor_kwargs}
    flat = flatten(arrays)
    flat_kw = flatten([tensor_kwargs[k] for k in sorted(tensor_kwargs)])
    key = (eager.signature(flat + flat_kw, who=layer.name), bool(training), repr(args),
           repr(sorted(kwargs.items())), tuple(sorted(tensor_kwargs)))

    def build(batch: bool) -> Callable[[], tuple[Any, Any]]:
        def fill() -> tuple[Any, Any]:
            def to_ph(a: np.ndarray) -> Node:
                return eager.placeholder_for(a, layer.dtype, "bool", batch=batch,
                                             who=layer.name)
            phs = map_structure(to_ph, arrays)
            ph_kwargs = {k: map_structure(to_ph, v) for k, v in tensor_kwargs.items()}
            # A training call carries a random key (Dropout ...), fed fresh on every call
            rng_key = placeholder((2,), "int64", name="rng_key") if training else None
            with trace(training=bool(training), rng_key=rng_key) as ctx, \
                    trace_variables() as assigned:
                out = layer(phs, *args, training=training, **kwargs, **ph_kwargs)
                # a returned Variable is its value after the call's updates
                out = map_structure(lambda t: t.__kiln_node__() if isinstance(
                    t, Variable) else t, out)
            # Updates recorded in the call (BatchNormalization's moving statistics in
            # training, a Variable.assign_add in call) apply on each eager call, as in Keras.
            updates = {id(v): (v, n) for v, n in ctx.updates}
            updates.update({id(v): (v, n) for v, n in assigned.update_list()})
            update_list = list(updates.values())
            if rng_key is not None and not depends_on(
                    flatten(out) + [v for _, v in update_list], rng_key):
                rng_key = None
            feeds = flatten(phs) + flatten([ph_kwargs[k] for k in sorted(ph_kwargs)]) + (
                [rng_key] if rng_key is not None else [])
            outs = flatten(out)
            masks = [get_mask(t) for t in outs]  # returned too: result._keras_mask
            added = [ops_sum_scalar(t) for t in ctx.losses]  # add_loss: layer.losses
            compiled = function(feeds, outs + [m for m in masks if m is not None] + added,
                                updates=update_list or None, name=f"{layer.name}_eager")
            return compiled, (out, rng_key is not None, [m is not None for m in masks],
                              len(added))
        return fill

    cache = eager.cache_for(layer)
    try:  # one function for every batch size, unless call() needs the concrete size
        entry = cache.lookup(key, build(True))
    except (TypeError, ValueError) as first:  # e.g. ops.zeros((inputs.shape[0], n))
        static = (eager.signature(flat + flat_kw, batch=False, who=layer.name),) + key[1:]
        try:
            entry = cache.lookup(static, build(False))
        except (TypeError, ValueError):
            raise first from None  # a genuine error: report it as the general trace did
    out_structure, keyed, has_mask, n_losses = entry.info
    flat = flat + flat_kw
    if keyed:  # a fresh key from kiln's global generator (set_random_seed reproduces it)
        flat = flat + [np.array([next_seed(), 0], dtype=np.int64)]
    values = entry(*flat)
    if kiln.tape.recording():  # an active GradientTape: record how to rebuild the call
        from kiln.layers.eager_tape import record_call
        losses = list(values[len(values) - n_losses:]) if n_losses else []
        record_call(layer, key, arrays, tensor_kwargs, args, kwargs, training, flat,
                    list(values[:len(has_mask)]) + losses)
        values = kiln.tape.wrap(list(values))
    layer.__dict__["_eager_losses"] = list(values[len(values) - n_losses:]) \
        if n_losses else []
    n = len(has_mask)
    masks = iter(values[n:])
    results = iter([eager.eager_result(v, next(masks) if m else None)
                    for v, m in zip(values[:n], has_mask)])
    return map_structure(lambda _: next(results), out_structure)



def runs_on_values(layer: Any) -> bool:
    """Whether ``layer`` called on arrays runs its ``call()`` on the arrays, as Keras' eager
    mode does (``print(x)``, ``np.asarray(x)``, ``if ops.sum(x) > 0:`` work inside): a
    user's layer, whose class is defined outside kiln. kiln's own layers, whose calls are
    pure ops, run the compiled eager call; so do models (``model(arrays)`` is the cached
    predict function, a training call one compiled call: ``Model._call_eager``), unless
    compiled with ``run_eagerly``."""
    return not type(layer).__module__.startswith("kiln.") and not hasattr(
        layer, "_is_graph_network")


def _call_on_values(layer: Any, inputs: Any, args: tuple, training: Any, kwargs: dict
                    ) -> Any:
    """``layer.call`` on the arrays, define-by-run (:func:`kiln.layers.eager_tape.
    call_direct`): the ``kiln.ops`` and kiln layers it calls run eagerly (recorded on an
    active GradientTape), its Variables read as their values, ``add_loss`` values become
    ``layer.losses``."""
    from kiln import ops
    from kiln.layers.eager_tape import call_direct

    losses: list = []
    with define_by_run(bool(training), losses):
        out = call_direct(layer, inputs, args, training, kwargs)
    layer.__dict__["_eager_losses"] = [ops.sum(v) if np.ndim(v) else v for v in losses]
    if kiln.tape.recording():
        return out

    def result(v: Any) -> Any:
        if isinstance(v, Variable):
            v = v.numpy()
        return eager.eager_result(v) if isinstance(v, np.ndarray | np.generic) else v
    return map_structure(result, out)


def _is_arrays(v: Any) -> bool:
    """An eager call's array keyword argument (a mask, initial states): a NumPy array or a
    non-empty list/tuple of them."""
    if isinstance(v, list | tuple):
        return bool(v) and all(isinstance(a, np.ndarray) for a in v)
    return isinstance(v, np.ndarray)
