"""A layer's eager call as a :mod:`kiln.tape` record: the replay traces the layer on the
given nodes exactly as its eager build (``Layer._call_eager``) did."""

from __future__ import annotations

import weakref
from typing import Any

import kiln.tape
from kiln import eager
from kiln.core import Variable, trace_variables
from kiln.layers.base import flatten, map_structure, ops_sum_scalar
from kiln.layers.context import trace


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
