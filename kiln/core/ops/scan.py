"""The loop op: ``scan``, a body subgraph run once per step (docs/architecture.md, "Loops").

``kiln.ops.scan(fn, init, xs)`` has the semantics of ``jax.lax.scan``::

    carry = init
    for t in range(T):                    # reversed(range(T)) when reverse=True
        carry, y[t] = fn(carry, xs[t])
    return carry, stack(y)

``fn`` is traced ONCE on placeholders into a :class:`Body` (a graph). In the graph, a loop is
one ``scan`` node whose inputs are the initial carries, the sequences and the loop-invariant
values the body reads (``consts``: weights, masks, anything computed outside), and whose one
output is a flat *packed* buffer holding the final carries, then the stacked per-step outputs.
``scan_output`` nodes pick each of them out: they are views of the packed buffer (no copy), so
the planner, memory planner and every backend see a single-output node as for any other op.

Built here, once, at trace time:

* **lifting**: body nodes that depend on neither the carries nor the step inputs are computed
  outside the loop and enter as consts (loop-invariant code motion by construction);
* **hoisting**: a ``matmul`` of the step inputs by an invariant matrix (and the elementwise
  ops of the step inputs feeding it) is computed for every step at once before the loop (the
  input projection ``x_t @ W`` of an RNN becomes one GEMM over the whole sequence; the bias
  add after it stays in the body, fused into the gate kernel);

and when differentiated (``scan``'s VJP):

* the forward loop is rebuilt with an *augmented* body that also stacks the residuals the
  backward body needs (its per-step values that depend on the carries or inputs), and a pass
  (``passes/loops.py``) merges the original loop into it, so it runs once;
* the gradient is a reverse scan over the cotangents and residuals; gradients of the consts
  are summed in carries of the reverse scan; the step inputs' gradients are its outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.core.ir import Node, make_node, substitute, toposort
from kiln.core.ops._rules import as_node, fmt
from kiln.core.ops.registry import LOOP, MOVEMENT, Example, OpDef, get_op, register
from kiln.core.ops.scan_body import (
    Body,
    _check_inputs,
    _compatible,
    _out_infer,
    _out_ref,
    _out_view,
    _scan_infer,
    _scan_node,
    _scan_ref,
    offsets,
    output_types,
    scan_output,
)
from kiln.core.ops.scan_grad import _scan_vjp, _variant, grad_info
from kiln.core.ops.source import placeholder

__all__ = ["scan", "scan_output", "Body", "grad_info", "offsets", "output_types"]


# ---- building a loop ---------------------------------------------------------------------------
def _flatten(value: Any, what: str) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """A tensor, or a list/tuple of tensors (one level), and how to rebuild the structure."""
    if value is None:
        return [], lambda items: None
    if isinstance(value, list | tuple):
        kind = type(value)
        return list(value), lambda items: kind(items)
    return [value], lambda items: items[0]


def _batchable(n: Node, outer: dict[int, Node], xonly: set[int]) -> Node | None:
    """``n`` computed for every step at once (its step-input operands replaced by their whole
    sequences ``outer``), or None when ``n`` cannot be."""
    op = get_op(n.op)
    ins = []
    for i in n.inputs:
        if id(i) in xonly:
            if id(i) not in outer or i.ndim != n.ndim:
                return None
            ins.append(outer[id(i)])
        else:
            ins.append(i)  # loop-invariant (computed outside) or a constant
    if op.kind == "elementwise":
        if any(id(i) not in xonly and i.ndim > n.ndim for i in n.inputs):
            return None
    elif n.op == "matmul":
        a, b = n.inputs
        if id(a) not in xonly or id(b) in xonly or b.ndim != 2:
            return None
    else:
        return None
    return make_node(n.op, tuple(ins), dict(n.attrs), op.infer)


def scan(fn: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any = None,
         length: int | None = None, reverse: bool = False, name: str = "scan") -> tuple[Any, Any]:
    """A loop in the graph, in the style of ``jax.lax.scan`` (see the module docstring).

    Args:
        fn: ``fn(carry, x) -> (new_carry, y)``; ``carry`` has the structure of ``init`` (a
            tensor or a list/tuple of tensors), ``x`` the structure of ``xs`` with the leading
            time axis removed; ``y`` is a tensor, a list/tuple of tensors, or None. Traced ONCE.
        init: the initial carry; each new carry keeps its shape and dtype.
        xs: the sequences, time-major (``(T, ...)``), or None (then give ``length``). ``T``
            may be unknown (None) until run time: no recompile per sequence length.
        length: the number of steps when there are no sequences (or a check when there are).
        reverse: run from the last step to the first (``ys`` stay in time order).
        name: a name for error messages and the compile report.

    The body is traced once, so a random op inside it (``kiln.ops.dropout`` on a value of the
    step) draws the SAME numbers at every step, as a key reused in JAX would; draw per-step
    randomness outside the loop (over the whole sequence) and pass it in ``xs``.

    Returns:
        ``(final_carry, ys)``: ``ys`` stacked along a new leading time axis.

    Example:
        >>> def step(h, x):
        ...     h = kiln.ops.tanh(x @ W + h @ U)
        ...     return h, h
        >>> h_last, hs = kiln.ops.scan(step, h0, kiln.ops.transpose(x, (1, 0, 2)))
    """
    inits, rebuild_carry = _flatten(init, "init")
    seqs, rebuild_x = _flatten(xs, "xs")
    inits = [as_node(c) for c in inits]
    seqs = [as_node(x) for x in seqs]
    for k, x in enumerate(seqs):
        if x.ndim < 1:
            raise ValueError(f"{name}: xs[{k}] must have a leading time axis, received {x.type}")
    if not seqs and length is None:
        raise ValueError(f"{name}: give sequences xs or a length")
    known = {x.shape[0] for x in seqs if x.shape[0] is not None} | (
        set() if length is None else {int(length)})
    if len(known) > 1:
        raise ValueError(f"{name}: sequences of different lengths "
                         f"{[fmt(x.shape) for x in seqs]} (length={length})")
    carry_phs = [placeholder(c.shape, c.dtype, name=f"{name}_carry{k}")
                 for k, c in enumerate(inits)]
    x_phs = [placeholder(x.shape[1:], x.dtype, name=f"{name}_x{k}") for k, x in enumerate(seqs)]
    result = fn(rebuild_carry(list(carry_phs)), rebuild_x(list(x_phs)) if seqs else None)
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise TypeError(f"{name}: fn must return (new_carry, y), received {type(result).__name__}")
    new_c, rebuild_new = _flatten(result[0], "carry")
    ys_raw, rebuild_y = _flatten(result[1], "y")
    if len(new_c) != len(inits):
        raise ValueError(f"{name}: fn returned {len(new_c)} carries, init has {len(inits)}")
    new_c = [as_node(c, inits[k].dtype) for k, c in enumerate(new_c)]
    ys_nodes = [as_node(y, inits[0].dtype if inits else None) for y in ys_raw]
    for k, (c, ph) in enumerate(zip(new_c, carry_phs)):
        if not _compatible(c.type, ph.type):
            raise ValueError(f"{name}: fn returns carry {k} as {c.type}, it entered as "
                             f"{ph.type}; a carry must keep its shape and dtype")
    outputs = new_c + ys_nodes
    nodes = toposort(outputs)
    carry_dep = _variant(nodes, carry_phs)
    x_dep = _variant(nodes, x_phs)
    variant = carry_dep | x_dep
    out_ids = {id(o) for o in outputs}
    users: dict[int, list[Node]] = {}
    for n in nodes:
        for i in n.inputs:
            users.setdefault(id(i), []).append(n)
    # lifting: loop-invariant values read by the body become consts
    mapping: dict[Node, Node] = {}
    consts: list[Node] = []
    for n in nodes:
        if id(n) in variant or n.op == "constant":
            continue
        if id(n) in out_ids or any(id(u) in variant for u in users.get(id(n), [])):
            ph = placeholder(n.shape, n.dtype, name=f"{name}_const{len(consts)}")
            mapping[n] = ph
            consts.append(n)
    # hoisting: step-input-only elementwise/matmul chains run over the whole sequence
    xonly = x_dep - carry_dep
    outer: dict[int, Node] = {id(p): s for p, s in zip(x_phs, seqs)}
    for n in nodes:
        if id(n) in xonly and id(n) not in outer:
            batched = _batchable(n, outer, xonly)
            if batched is not None:
                outer[id(n)] = batched
    # only the matmuls and what feeds them leave the loop: an elementwise op after the last
    # matmul (a bias add) fuses into the body's kernels for free, where over the whole
    # sequence it would be one more pass over it
    needed: set[int] = set()
    for n in reversed(nodes):
        if id(n) in outer and (n.op == "matmul" or any(id(u) in needed
                                                        for u in users.get(id(n), []))):
            needed.add(id(n))
    outer = {k: v for k, v in outer.items() if k in needed or k in {id(p) for p in x_phs}}
    hoisted_phs: list[Node] = []
    hoisted_outer: list[Node] = []
    for n in nodes:
        if id(n) not in outer or n.op == "placeholder":
            continue
        if id(n) in out_ids or any(id(u) not in outer for u in users.get(id(n), [])):
            ph = placeholder(n.shape, n.dtype, name=f"{name}_hoisted{len(hoisted_phs)}")
            mapping[n] = ph
            hoisted_phs.append(ph)
            hoisted_outer.append(outer[id(n)])
    outs = substitute(outputs, mapping) if mapping else outputs
    read = {id(n) for n in toposort(outs)}
    consts = [c for c in consts if id(mapping[c]) in read]
    kept = [k for k, p in enumerate(x_phs) if id(p) in read]
    if not kept and not hoisted_phs and seqs and length is None:
        kept = [0]  # the loop's length comes from a sequence
    body = Body(carry_phs, [x_phs[k] for k in kept] + hoisted_phs,
                [mapping[c] for c in consts], outs[:len(inits)], outs[len(inits):], name=name)
    steps = length
    if seqs and length is None:
        steps = None
    node = _scan_node(body, inits + [seqs[k] for k in kept] + hoisted_outer + consts, steps,
                      reverse)
    if length is not None and seqs:
        _check_inputs([i.type for i in node.inputs], body, length)
    finals = [scan_output(node, k) for k in range(len(inits))]
    ys_out = [scan_output(node, len(inits) + k) for k in range(len(ys_nodes))]
    return rebuild_new(finals), rebuild_y(ys_out)


# ---- registration -------------------------------------------------------------------------------
def _example_body(dtype: str, kind: str) -> tuple[Body, list[Node]]:
    """Bodies for the registry tests: traced like a user's loop."""
    if kind == "rnn":  # h = tanh(x W + h U + b); y = h * 2 ; two carries (h, running sum)
        w = placeholder((3, 4), dtype)
        u = placeholder((4, 4), dtype)

        def step(carry, x):
            h, s = carry
            h = get_op("tanh")(get_op("add")(get_op("matmul")(x, w),
                                              get_op("matmul")(h, u)))
            return (h, get_op("add")(s, h)), get_op("mul")(h, as_node(2.0, dtype))

        h0, s0 = placeholder((2, 4), dtype), placeholder((2, 4), dtype)
        xs = placeholder((5, 2, 3), dtype)
        (_, _), ys = scan(step, (h0, s0), xs, name="rnn")
        node = ys.inputs[0]
        return node.attrs["body"], list(node.inputs)
    if kind == "nested":  # an inner loop over a second axis inside the outer body
        def outer_step(c, x):  # x: (3, 2)
            def inner(ci, xi):
                nxt = get_op("sin")(get_op("add")(ci, xi))
                return nxt, nxt
            c2, _ = scan(inner, c, x, name="inner")
            return c2, get_op("mul")(c2, c2)

        c0 = placeholder((2,), dtype)
        xs = placeholder((4, 3, 2), dtype)
        _, ys = scan(outer_step, c0, xs, reverse=True, name="outer")
        node = ys.inputs[0]
        return node.attrs["body"], list(node.inputs)
    raise ValueError(kind)


def _examples(rng: np.random.Generator, dtype: str) -> list[Example]:
    out = []
    for kind in ("rnn", "nested"):
        body, ins = _example_body(dtype, kind)
        arrays = tuple((rng.normal(size=i.type.dims) * 0.5).astype(dtype) for i in ins)
        attrs = {"body": body, "length": None, "reverse": kind == "nested"}
        out.append(Example(arrays, attrs))
    return out


def _out_examples(rng: np.random.Generator, dtype: str) -> list[Example]:
    result = []
    for ex in _examples(rng, dtype):
        body = ex.attrs["body"]
        packed = _scan_ref(*ex.inputs, **ex.attrs)
        for k in range(body.n_carry + body.n_y):
            result.append(Example((packed,) + ex.inputs, {"body": body, "length": None,
                                                          "index": k}, wrt=()))
    return result


register(OpDef("scan", LOOP, _scan_infer, _scan_ref, _scan_vjp, examples=_examples,
               multi_output=True,
               doc="a loop: the body subgraph once per step (kiln.ops.scan)"))
register(OpDef("scan_output", MOVEMENT, _out_infer, _out_ref, differentiable=False,
               view=_out_view, projection=True, examples=_out_examples,
               nondiff_reason="a view of a loop's output: autodiff hands its cotangent to the "
                              "loop's VJP (kiln.core.autodiff)"))
