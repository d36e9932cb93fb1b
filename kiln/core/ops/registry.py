"""The op registry: every op is declared exactly once, as an :class:`OpDef`.

An OpDef carries everything the rest of kiln derives from:

* ``infer(*input_types, **attrs) -> TensorType``: the shape/dtype rule; it raises a clear error
  naming the op and the shapes received;
* ``ref(*arrays, **attrs) -> ndarray``: the NumPy reference. It is the specification, the
  constant folder and the test oracle;
* ``vjp(ct, out, *inputs, **attrs) -> [grad or None per input]``: the gradient as graph nodes,
  or ``differentiable=False`` as an explicit decision;
* ``scalar``: for elementwise ops, the body of the scalar loop (``"math.exp({0})"``) that the
  CPU and CUDA kernels are generated from;
* ``examples(rng, dtype)``: concrete inputs for the registry-driven forward and gradient tests;
* ``view(node, in_layouts, out_shape) -> Layout | None``: for movement ops that every backend
  runs as a new layout of their first input's storage (no kernel); None when this case needs
  a copy (a reshape of strided data);
* ``shape_only``: positions of inputs whose values the op never reads, only their shapes
  (``broadcast_like``'s target): the planner does not keep them alive for it;
* ``multi_output`` / ``projection``: a node of a ``multi_output`` op (``scan``) computes several
  values packed in one buffer; ``projection`` ops (``scan_output``) are views picking one out,
  reading only their first input's values (the others give shapes). Autodiff hands the
  projections' cotangents to the multi-output op's VJP as ``(direct ct or None, {index: ct})``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType, make_node

ELEMENTWISE = "elementwise"
REDUCE = "reduce"
MOVEMENT = "movement"
LINALG = "linalg"
NN = "nn"
RANDOM = "random"
SOURCE = "source"
SHAPE = "shape"
FUSED = "fused"
LOOP = "loop"
COLLECTIVE = "collective"  # runs with other processes: never folded (ops/collective.py)
KINDS = (ELEMENTWISE, REDUCE, MOVEMENT, LINALG, NN, RANDOM, SOURCE, SHAPE, FUSED, LOOP,
         COLLECTIVE)


@dataclass(frozen=True)
class Example:
    """Concrete inputs for registry-driven tests.

    Args:
        inputs: NumPy arrays fed to the op, in order.
        attrs: attributes of the op.
        wrt: indices of inputs whose gradient is checked (default: every float input).
        fd_eps: step of the central finite difference for this example.
    """

    inputs: tuple[np.ndarray, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    wrt: tuple[int, ...] | None = None
    fd_eps: float = 1e-6


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    infer: Callable[..., TensorType]
    ref: Callable[..., np.ndarray]
    vjp: Callable[..., Sequence[Node | None]] | None = None
    differentiable: bool = True
    scalar: str | None = None
    examples: Callable[[np.random.Generator, str], list[Example]] | None = None
    doc: str = ""
    nondiff_reason: str = ""
    view: Callable[..., Any] | None = None
    shape_only: frozenset[int] = frozenset()
    multi_output: bool = False
    projection: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"op {self.name}: unknown kind {self.kind!r}")
        if self.differentiable and self.vjp is None:
            raise ValueError(f"op {self.name}: differentiable ops need a vjp")

    @property
    def infer_fn(self) -> Callable[..., TensorType]:
        return self.infer

    def data_inputs(self, n_inputs: int) -> list[int]:
        """Positions of the inputs whose values (not only shapes) the op reads."""
        if self.projection:
            return [0]
        return [i for i in range(n_inputs) if i not in self.shape_only]

    def __call__(self, *inputs: Node, **attrs: Any) -> Node:
        return make_node(self.name, inputs, attrs, self.infer)


_REGISTRY: dict[str, OpDef] = {}

# backend name -> op names with a kernel registered by that backend (filled by the backends).
KERNELS: dict[str, set[str]] = {}


def register(op: OpDef) -> OpDef:
    if op.name in _REGISTRY:
        raise ValueError(f"op {op.name!r} registered twice")
    _REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}") from None


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)


def apply(name: str, *inputs: Node, **attrs: Any) -> Node:
    """Builds (or finds) the node ``name(*inputs, **attrs)``."""
    op = get_op(name)
    return make_node(name, inputs, attrs, op.infer)
