"""``custom_vjp``: a value with a gradient rule supplied by the user (``keras.ops``'
``custom_gradient``).

``custom_vjp(y, *xs, rule=fn)`` is ``y`` in the forward pass (a view: no kernel, no copy);
autodiff sends nothing back into ``y``'s own graph and gives each ``xs[i]`` the i-th node of
``fn(ct)``. The rule is an attribute (hashed by identity), so two calls with different rules
are different nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import as_node
from kiln.core.ops.registry import MOVEMENT, Example, OpDef, apply, register


def _infer(y: TensorType, *xs: TensorType, rule: Callable[..., Any]) -> TensorType:
    return y


def _ref(y, *xs, rule):
    return np.array(y, copy=True)


def _vjp(ct, out, y, *xs, rule):
    grads = rule(ct)
    grads = list(grads) if isinstance(grads, list | tuple) else [grads]
    if len(grads) != len(xs):
        raise ValueError(f"custom_gradient: the gradient function returned {len(grads)} "
                         f"gradients for {len(xs)} inputs")
    out_grads: list[Node | None] = [None]
    for g, x in zip(grads, xs):
        if g is None:
            out_grads.append(None)
            continue
        g = as_node(g, x.dtype)
        out_grads.append(g if g.dtype == x.dtype else apply("cast", g, dtype=x.dtype))
    return out_grads


def _double(ct: Node) -> Node:
    return apply("mul", ct, as_node(2.0, ct.dtype))


def _double_sum(ct: Node) -> Node:
    from kiln.core.ops.reduce import BUILDERS

    return apply("mul", apply("broadcast_to", BUILDERS["sum"](ct), shape=(4,)),
                 as_node(2.0, ct.dtype))


def _examples(rng, dt):
    x = rng.normal(size=(3, 2)).astype(dt)
    w = rng.normal(size=(4,)).astype(dt)  # inputs need not broadcast with the value
    # the forward value is y; the rule is not the derivative of y (that is the point), so the
    # finite-difference check is skipped; tests/ops/test_ops_control.py checks the rule's use
    return [Example((x, x), {"rule": _double}, wrt=()),
            Example((x, w), {"rule": _double_sum}, wrt=())]


register(OpDef("custom_vjp", MOVEMENT, _infer, _ref, _vjp,
               examples=_examples, view=lambda node, ins, shape: ins[0]))


def custom_vjp(y: Any, xs: list[Any], rule: Callable[[Node], Any]) -> Node:
    """``y`` whose gradient with respect to ``xs`` is ``rule(cotangent)``."""
    return apply("custom_vjp", as_node(y), *[as_node(x) for x in xs], rule=rule)
