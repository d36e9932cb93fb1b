"""kiln.ops: Keras 3's ops, on symbolic tensors and on NumPy arrays.

Every op works in two modes with one semantics (docs/ops.md):

* **graph**: when an argument is symbolic (a ``kiln.core.Node``, a ``kiln.Variable``, anything
  with ``__kiln_node__``) or a step is being traced, the op builds graph nodes (see
  ``kiln.core.ops`` for the definitions);
* **eager**: otherwise (NumPy arrays, Python numbers) it returns NumPy arrays, computed by the
  same graph compiled once per signature and cached (``kiln/ops/_eager.py``).

The namespaces ``kiln.ops.numpy``, ``kiln.ops.nn`` and ``kiln.ops.image`` are Keras 3's; the
top level holds all of them, like ``keras.ops``.

Example:
    >>> import kiln, kiln.ops as K
    >>> x = kiln.placeholder((None, 4))
    >>> y = K.relu(K.matmul(x, w) + b)          # a node
    >>> K.relu(np.array([-1.0, 2.0]))           # eager
    array([0., 2.], dtype=float32)
"""

from __future__ import annotations

# This module re-exports the op builders: unused-import warnings do not apply.
# ruff: noqa: F401, A001
import builtins
import functools
import inspect
from types import SimpleNamespace

import numpy as np

from kiln.core import variable as _variable_module
from kiln.core.autodiff import grad
from kiln.core.ir import Node
from kiln.core.ops import attention as _attention
from kiln.core.ops import collective as _collective
from kiln.core.ops import conv as _conv
from kiln.core.ops import einsum as _einsum
from kiln.core.ops import elementwise as _elementwise
from kiln.core.ops import image as _image
from kiln.core.ops import linalg as _linalg
from kiln.core.ops import movement as _movement
from kiln.core.ops import nn as _nn
from kiln.core.ops import pool as _pool
from kiln.core.ops import random as _random
from kiln.core.ops import reduce as _reduce
from kiln.core.ops import sort as _sort
from kiln.core.ops._rules import as_node as _as_node
from kiln.core.ops.registry import apply as _apply
from kiln.core.ops.registry import get_op as _get_op
from kiln.core.ops.scan import scan as _scan
from kiln.core.ops.source import constant, placeholder
from kiln.core.variable import _TRACE
from kiln.core.variable import EAGER_READS as _EAGER_READS
from kiln.core.variable import Variable as _Variable
from kiln.ops import _eager

# ---- the graph builders of the core, for kiln.ops' own modules (which may not import
# kiln.core.<module>: tests/test_layering.py) -------------------------------------------------
_G = SimpleNamespace(
    **_elementwise.BUILDERS, **_reduce.BUILDERS, **_sort.BUILDERS, as_node=_as_node, apply=_apply,
    constant=constant, placeholder=placeholder, Node=Node,
    cast=_elementwise.cast, clip=_elementwise.clip, where=_elementwise.where,
    ones_like=_elementwise.ones_like, zeros_like=_elementwise.zeros_like,
    identity=_elementwise.identity, size_of=_reduce.size_of, matmul=_linalg.matmul,
    einsum=_einsum.einsum, softmax=_nn.softmax, log_softmax=_nn.log_softmax,
    softmax_cross_entropy=_nn.softmax_cross_entropy,
    sparse_softmax_cross_entropy=_nn.sparse_softmax_cross_entropy,
    conv1d=_conv.conv1d, conv2d=_conv.conv2d, conv2d_transpose=_conv.conv2d_transpose,
    max_pool1d=_pool.max_pool1d, max_pool2d=_pool.max_pool2d, avg_pool1d=_pool.avg_pool1d,
    avg_pool2d=_pool.avg_pool2d, dot_product_attention=_attention.dot_product_attention,
    resize=_image.resize, affine_transform=_image.affine_transform,
    reshape=_movement.reshape, transpose=_movement.transpose,
    broadcast_to=_movement.broadcast_to, broadcast_like=_movement.broadcast_like,
    expand_dims=_movement.expand_dims, squeeze=_movement.squeeze,
    concatenate=_movement.concatenate, stack=_movement.stack, slice=_movement.slice_,
    pad=_movement.pad, take=_movement.take, one_hot=_movement.one_hot,
    getitem=_movement.getitem,
)


# ---- dispatch ----------------------------------------------------------------------------------
def _symbolic(values) -> bool:
    for v in values:
        if isinstance(v, Node) or hasattr(v, "__kiln_node__") and not _read(v):
            return True
        if type(v) is list or type(v) is tuple:
            for w in v:
                if isinstance(w, Node) or hasattr(w, "__kiln_node__") and not _read(w):
                    return True
                if isinstance(w, SymbolicDim):  # a shape holding ops.shape(x)[i]
                    return True
    return False


def _read(v) -> bool:
    """A Variable read as its value: define-by-run (``run_eagerly``) in a user's call()."""
    return isinstance(v, _Variable) and _EAGER_READS.get()


_variable_module.eager_operator = _eager.variable_operator


def is_symbolic(*values) -> bool:
    """Whether ops on ``values`` build graph nodes: one of them is symbolic (a Node, a
    Variable, anything with ``__kiln_node__``, also inside a list or tuple) or a step is
    being traced (``kiln.core.trace_variables``)."""
    return _TRACE.get() is not None or _symbolic(values)


# Arguments that are part of an op's structure, never tensors: a NumPy integer given for one
# (``axis=np.int64(0)``, ``reshape(x, np.array([3, 2]))``) is a Python int, not a placeholder.
_STATIC_PARAMS = frozenset({
    "axis", "axes", "shape", "newshape", "perm", "repeats", "num_classes", "depth",
    "pad_width", "indices_or_sections", "k", "pool_size", "strides", "dilation_rate", "size",
    "output_padding", "decimals", "groups", "keepdims", "ord"})


def _static_value(v):
    if isinstance(v, np.ndarray | np.generic) and v.dtype.kind in "iub":
        return v.item() if v.ndim == 0 else _static_value(tuple(v.tolist()))
    if type(v) is list or type(v) is tuple:
        return type(v)(_static_value(w) for w in v)
    return v


def _static_positions(graph_fn) -> tuple[int, ...]:
    try:
        params = list(inspect.signature(graph_fn).parameters)
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return ()
    return tuple(i for i, p in enumerate(params) if p in _STATIC_PARAMS)


def _dual(graph_fn, name: str | None = None, first: str = "tensor"):
    """The public op of a graph builder: graph mode on symbolic arguments or inside a traced
    step, else the eager path. ``first`` says what a Python value in the first position is:
    ``"tensor"`` (converted to an array when no other argument is one), ``"tensors"`` (a list of
    tensors: each item converted) or ``"value"`` (kept: a shape, an equation ...). NumPy
    integers given for structural arguments (:data:`_STATIC_PARAMS`) become Python ints."""
    name = name or graph_fn.__name__
    static = _static_positions(graph_fn)

    @functools.wraps(graph_fn)
    def op(*args, **kwargs):
        if static and builtins.any(i < len(args) for i in static):
            args = tuple(_static_value(a) if i in static else a for i, a in enumerate(args))
        if kwargs and not _STATIC_PARAMS.isdisjoint(kwargs):
            kwargs = {k: _static_value(v) if k in _STATIC_PARAMS else v
                      for k, v in kwargs.items()}
        if _TRACE.get() is not None or _symbolic(args) or (kwargs and _symbolic(kwargs.values())):
            return graph_fn(*args, **kwargs)
        if args and first != "value":
            args = _arrays_first(args, kwargs, first)
        return _eager.call(name, graph_fn, args, kwargs)

    op.graph = graph_fn
    return op


def _is_array(v) -> bool:
    return isinstance(v, np.ndarray | np.generic)


def _arrays_first(args: tuple, kwargs: dict, first: str) -> tuple:
    a0 = args[0]
    if first == "tensors" and type(a0) in (list, tuple):
        return (type(a0)(x if _is_array(x) else _eager.to_array(x) for x in a0),) + args[1:]
    if _is_array(a0) or not isinstance(a0, bool | int | float | list | tuple):
        return args
    others = list(args[1:]) + list(kwargs.values())
    if builtins.any(_is_array(v) for v in others):
        return args  # a Python number next to an array takes the array's dtype (graph rule)
    return (_eager.to_array(a0),) + args[1:]


def convert_to_tensor(x, dtype=None, sparse=None, ragged=None):
    """``x`` as a tensor: a node in graph mode (Variables read as their node), else a NumPy
    array (Python floats as floatx, Python ints as int32), cast to ``dtype`` when given.
    kiln tensors are dense: ``sparse=True`` or ``ragged=True`` raise."""
    for arg, value in (("sparse", sparse), ("ragged", ragged)):
        if value:
            raise ValueError(f"convert_to_tensor: {arg}=True is not supported (kiln tensors "
                             "are dense)")
    if is_symbolic(x):
        node = _as_node(x) if _symbolic((x,)) else _as_node(x, dtype)
        return node if dtype is None or node.dtype == dtype else _elementwise.cast(node, dtype)
    arr = _eager.to_array(x)
    return arr if dtype is None else arr.astype(dtype)


def convert_to_numpy(x):
    """``x`` as a NumPy array (a Variable's current value); symbolic tensors have no value."""
    if isinstance(x, Node):
        raise TypeError(f"convert_to_numpy: a symbolic tensor of shape {x.shape} has no value "
                        "until the graph runs; compile it with kiln.function")
    return np.asarray(x)


def stop_gradient(variable):
    """``variable`` (any tensor) in the forward pass; no gradient flows through it."""
    return _apply("stop_gradient", _as_node(variable))


def scan(f, init, xs=None, length=None, reverse=False, unroll=1, *, name="scan"):
    """A loop in the graph, ``f(carry, x) -> (new_carry, y)`` (see ``kiln.core``'s scan).
    ``unroll`` is a speed hint in Keras; kiln's loop is one graph op and runs the same
    either way, so any value is accepted."""
    return _scan(f, init, xs, length=length, reverse=reverse, name=name)


def _apply_graph(op_name, *inputs, **attrs):
    try:
        _get_op(op_name)
    except KeyError:
        raise ValueError(f"kiln.ops.apply_op: unknown op {op_name!r} (the registered ops are "
                         "kiln.core.ops.all_ops())") from None
    nodes = [_as_node(x) for x in inputs]
    try:
        return _apply(op_name, *nodes, **attrs)
    except TypeError as e:  # wrong inputs or attrs for the op's shape rule
        raise TypeError(f"kiln.ops.apply_op({op_name!r}): {e}; received inputs of shapes "
                        f"{[n.shape for n in nodes]} and attrs {sorted(attrs)}") from e


def apply_op(name, *inputs, **attrs):
    """The registered graph op ``name`` (``kiln.core.ops.all_ops()``) on ``inputs`` with
    ``attrs``: a node on symbolic inputs, else eager (compiled once per signature, the attrs
    part of the cache key, and recorded on an active ``kiln.GradientTape``). Python values
    among ``inputs`` become arrays (floats as floatx, ints as int32).

    Example:
        >>> kiln.ops.apply_op("sum", np.ones((2, 3)), axis=(1,), keepdims=False)
        array([3., 3.])
    """
    if is_symbolic(*inputs):
        return _apply_graph(name, *inputs, **attrs)
    inputs = tuple(x if _is_array(x) else _eager.to_array(x) for x in inputs)
    return _eager.call(f"apply_op.{name}", _apply_graph, (name,) + inputs, attrs)


def reshape_like(x, like):
    """``x`` reshaped to the (run-time) shape of ``like``; only ``like``'s shape is read."""
    return _apply("reshape_like", _as_node(x), _as_node(like))


broadcast_like = _movement.broadcast_like
size_of = _reduce.size_of
gather = _movement.take
allreduce = _collective.allreduce
dropout = _random.dropout
random_normal = _random.random_normal
random_uniform = _random.random_uniform
conv1d = _dual(_conv.conv1d)
conv2d = _dual(_conv.conv2d)
conv2d_transpose = _dual(_conv.conv2d_transpose)
max_pool1d = _dual(_pool.max_pool1d)
max_pool2d = _dual(_pool.max_pool2d)
avg_pool1d = _dual(_pool.avg_pool1d)
avg_pool2d = _dual(_pool.avg_pool2d)
softmax_cross_entropy = _dual(_nn.softmax_cross_entropy)
sparse_softmax_cross_entropy = _dual(_nn.sparse_softmax_cross_entropy)
stop_gradient = _dual(stop_gradient)


def _broadcast_to(x, shape):  # noqa: F811 (Keras names the argument shape)
    from kiln.ops._shapes import broadcast_to_symbolic

    out = broadcast_to_symbolic(x, shape)  # ops.shape(x) in the shape (Keras code)
    return _movement.broadcast_to(x, shape) if out is None else out


broadcast_to = _dual(_broadcast_to)

# ---- the Keras namespaces, shapes and creation with symbolic dimensions (kiln/ops/_shapes.py)
from kiln.ops import image, nn, numpy  # noqa: E402
from kiln.ops._shapes import SymbolicDim, full, like_shape, ones, shape, zeros  # noqa: E402
from kiln.ops.image import affine_transform, resize  # noqa: E402
from kiln.ops.nn import *  # noqa: E402, F403
from kiln.ops.numpy import *  # noqa: E402, F403


def _eager_random(kind, key, shape_, salt, dtype):
    """NumPy draws of the counter-based generator (what the compiled op computes)."""
    ref = _random._normal_ref if kind == "normal" else _random._uniform_ref
    return ref(np.asarray(key, np.int64), np.zeros(shape_, dtype), salt=int(salt), dtype=dtype)


# ---- issue 44: more keras.ops.nn / image / linalg / math / core names (kiln/ops/_more.py)
from kiln.ops import _more  # noqa: E402
from kiln.ops._more import *  # noqa: E402, F403
