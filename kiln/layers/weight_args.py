"""The arguments of ``Layer.add_weight``: Keras 3's positional form ``(shape, initializer,
dtype)``, kiln's older one that starts with the name, and the checks of the rest."""

from __future__ import annotations

from typing import Any

_LEGACY = ("name", "shape", "initializer", "regularizer", "trainable", "dtype", "constraint")
_AGGREGATIONS = (None, "none", "mean", "sum", "only_first_replica")


def resolve(layer_name: str, args: tuple, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` (add_weight's keyword arguments) updated from the positional ``args``, with
    Keras' defaults filled in; raises naming the layer on a bad combination."""
    out = dict(given)
    if args and isinstance(args[0], str):  # kiln's older form: a string cannot be a shape
        if len(args) > len(_LEGACY):
            raise TypeError(f"{layer_name}: add_weight() takes at most {len(_LEGACY)} "
                            f"positional arguments, received {len(args)}")
        out.update(zip(_LEGACY, args))
    elif args:
        if len(args) > 3:
            raise TypeError(f"{layer_name}: add_weight() takes at most 3 positional "
                            f"arguments (shape, initializer, dtype), received {len(args)}")
        for key, value in zip(("shape", "initializer", "dtype"), args):
            if out[key] is not None:
                raise ValueError(f"{layer_name}: add_weight() received `{key}` both "
                                 "positionally and as a keyword argument")
            out[key] = value
    if out["aggregation"] not in _AGGREGATIONS:
        raise ValueError(f"{layer_name}: add_weight(aggregation={out['aggregation']!r}): "
                         "expected one of 'none', 'mean', 'sum', 'only_first_replica'")
    if out["overwrite_with_gradient"]:
        raise NotImplementedError(f"{layer_name}: add_weight(overwrite_with_gradient=True) "
                                  "is not supported by kiln")
    out["shape"] = () if out["shape"] is None else out["shape"]
    return out
