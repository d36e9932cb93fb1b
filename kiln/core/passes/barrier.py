"""The ``remat_barrier`` op: an identity that makes a recomputation a distinct node.

Nodes are hash-consed, so re-applying an op to the same inputs returns the original node,
not a second computation. The remat pass makes a recomputed chain distinct by reading one of
its inputs through ``remat_barrier(x, tag)``: ``tag`` is an int64 scalar constant, different
for each recomputation, so the barrier (and everything computed from it) is a new node. The
tag is an *input*, not an attribute, so that every barrier has the same program text and a
backend's kernel cache keeps one kernel for all of them.

It is an ELEMENTWISE op with scalar body ``"{0}"`` (a copy of ``x``; the tag is never read),
so backends run it, alone or inside a fused group, with their generic elementwise path.
"""

from __future__ import annotations

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops.registry import ELEMENTWISE, Example, OpDef, apply, register
from kiln.core.ops.source import constant


def _infer(x: TensorType, tag: TensorType) -> TensorType:
    if tag.shape != () or tag.dtype not in ("int32", "int64"):
        raise TypeError(f"remat_barrier: tag must be an integer scalar, received {tag}")
    return x


def _ref(x: np.ndarray, tag: np.ndarray) -> np.ndarray:
    return np.array(x, copy=True)


def _examples(rng: np.random.Generator, dtype: str) -> list[Example]:
    return [Example((rng.normal(size=(3, 4)).astype(dtype), np.asarray(1, np.int64)), wrt=()),
            Example((rng.normal(size=()).astype(dtype), np.asarray(7, np.int64)), wrt=())]


register(OpDef("remat_barrier", ELEMENTWISE, _infer, _ref, differentiable=False, scalar="{0}",
               examples=_examples,
               nondiff_reason="inserted by the remat pass, after autodiff; an identity"))


def tag_node(tag: int) -> Node:
    """The constant used as a barrier's tag."""
    return constant(np.asarray(tag, dtype=np.int64))


def remat_barrier(x: Node, tag: int) -> Node:
    """``x`` (copied), as a node distinct from ``x`` and from barriers with other tags."""
    return apply("remat_barrier", x, tag_node(tag))
