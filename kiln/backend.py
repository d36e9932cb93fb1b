"""Keras' ``keras.backend`` names (Keras 3.15): the backend's name, the global numeric
settings, dtype helpers and the session's naming state.

kiln has one backend, its own compiler: :func:`backend` is ``"kiln"``. The settings are
:mod:`kiln.config`'s (one state, two names, as in Keras); :func:`result_type` is Keras' type
promotion lattice (adapted by Keras from JAX).

Example:
    >>> kiln.backend.result_type("int32", "float32")
    'float32'
    >>> kiln.backend.standardize_dtype(float)
    'float32'
"""

from __future__ import annotations

import functools
from typing import Any

from kiln.config import (
    backend,
    epsilon,
    floatx,
    image_data_format,
    set_epsilon,
    set_floatx,
    set_image_data_format,
)
from kiln.utils.keras_utils import clear_session as _clear_session
from kiln.utils.keras_utils import is_keras_tensor, standardize_dtype

__all__ = ["backend", "clear_session", "epsilon", "floatx", "get_uid", "image_data_format",
           "is_float_dtype", "is_int_dtype", "is_keras_tensor", "result_type", "set_epsilon",
           "set_floatx", "set_image_data_format", "standardize_dtype"]


def clear_session(free_memory: bool = True) -> None:
    """Resets kiln's global naming state (the next ``Dense`` is ``"dense"`` again, and
    :func:`get_uid` restarts); with ``free_memory``, runs the garbage collector too."""
    _clear_session(free_memory)


def get_uid(prefix: str = "") -> int:
    """The next integer of ``prefix``'s counter: 1, 2, 3 ... (Keras' ``get_uid``). It is the
    counter of kiln's automatic layer names, so after one ``Dense`` is made,
    ``get_uid("dense")`` is 2, and :func:`clear_session` restarts it."""
    from kiln.layers import naming

    counts = naming._NAME_COUNTS
    counts[prefix] = counts.get(prefix, 0) + 1
    return counts[prefix]


def is_float_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` (anything :func:`standardize_dtype` takes) is a float dtype
    (float16/32/64, bfloat16, float8)."""
    name = standardize_dtype(dtype)
    return name.startswith("float") or name.startswith("bfloat")


def is_int_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is a signed or unsigned integer dtype (not bool)."""
    name = standardize_dtype(dtype)
    return name.startswith("int") or name.startswith("uint")


# ---- type promotion ------------------------------------------------------------------------------
# Keras' lattice (keras/src/backend/common/dtypes.py, after JAX): each dtype -> the dtypes
# immediately above it; "int" and "float" are the weak types of Python ints and floats.
_LATTICE = {
    "bool": ("int",), "uint8": ("int16", "uint16"), "uint16": ("int32", "uint32"),
    "uint32": ("int64", "uint64"), "uint64": ("float",), "int": ("uint8", "int8", "complex64"),
    "int8": ("int16",), "int16": ("int32",), "int32": ("int64",), "int64": ("float",),
    "float": ("bfloat16", "float16"), "bfloat16": ("float32",), "float16": ("float32",),
    "float32": ("float64", "complex64"), "float64": ("complex128",),
    "complex64": ("complex128",), "complex128": (),
}
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
# Keras narrows 64-bit results to 32 bits on JAX, torch and NumPy (x64 off); kiln computes in
# int64 and float64 where asked (as Keras' TensorFlow backend), and narrows only these.
_NARROW = {"uint64": "uint32", "complex128": "complex64"}


def _upper_bounds() -> dict[str, frozenset[str]]:
    bounds: dict[str, frozenset[str]] = {}

    def up(node: str) -> frozenset[str]:
        if node not in bounds:
            bounds[node] = frozenset({node}).union(*(up(n) for n in _LATTICE[node]))
        return bounds[node]

    for node in _LATTICE:
        up(node)
    return bounds


_UB = _upper_bounds()


@functools.lru_cache(256)
def _least_upper_bound(*nodes: str) -> str:
    for node in nodes:
        if node not in _UB:
            raise ValueError(f"kiln.backend.result_type: dtype={node!r} has no place in the "
                             "type promotion lattice")
    common = frozenset.intersection(*(_UB[n] for n in nodes))
    least = set(common & set(nodes)) or {c for c in common if common <= _UB[c]}
    if len(least) != 1:
        raise ValueError(f"kiln.backend.result_type: dtypes {nodes} have no implicit "
                         "promotion path; cast them explicitly")
    return next(iter(least))


def _weak(dtype: str) -> str:
    if dtype == "bool":
        return dtype
    for kind in ("float", "int", "complex"):
        if kind in dtype:
            return kind
    raise ValueError(f"kiln.backend.result_type: invalid dtype {dtype!r}")


def result_type(*dtypes: Any) -> str:
    """The dtype of an operation on values of ``dtypes`` (Keras' promotion rules): dtypes
    meet at their least upper bound on Keras' lattice (``int32 + float32 -> float32``,
    ``int8 + uint8 -> int16``); Python ``int`` and ``float`` are weak
    (``result_type(int, "int8") == "int8"``, ``result_type(float, "int32") == floatx()``);
    ``None`` is ``floatx()``; no argument gives ``floatx()``.

    Raises:
        ValueError: a float8 dtype (no implicit conversions), or an unknown dtype.
    """
    if not dtypes:
        return floatx()
    for dtype in dtypes:
        if isinstance(dtype, str) and dtype in _FLOAT8:
            raise ValueError("kiln.backend.result_type: there is no implicit conversion from "
                             f"float8 dtypes to others; cast explicitly. Received: {dtypes}")
    args = [floatx() if d is None else d for d in dtypes]
    names = [standardize_dtype(d) for d in args]
    weak = [d is int or d is float for d in args]
    if len(names) == 1:
        out, out_weak = names[0], weak[0]
    elif len(set(names)) == 1 and not all(weak):
        out, out_weak = names[0], False
    elif all(weak):
        out, out_weak = _least_upper_bound(*sorted(set(names))), True
    else:
        out = _least_upper_bound(*sorted({_weak(n) if w else n for n, w in zip(names, weak)}))
        out_weak = out in ("int", "float", "complex")
    if out != "bool" and out_weak:
        bits = floatx()[-2:]
        kind = "f" if out == "bfloat16" else out[:1]
        out = {"b": "bool", "i": f"int{bits}", "u": f"uint{bits}"}.get(kind, f"float{bits}")
    return _NARROW.get(out, out)
