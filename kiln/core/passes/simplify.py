"""simplify: algebraic identities and numerical stabilization.

Every rewrite keeps the node's type (shape and dtype) exactly; a rule that would change it
does not fire. Rules, applied bottom-up until none fires:

Identities
    ``x*1, 1*x, x+0, 0+x, x-0, x/1 -> x``; ``0 - x -> neg(x)``; ``neg(neg(x)) -> x``;
    ``neg(sum(neg(x))) -> sum(x)`` (also mean); transpose of transpose -> one transpose with the
    composed permutation (none when it is the identity); chains of reshape / expand_dims /
    squeeze -> one reshape (none when the shape comes back); broadcasts to the shape the
    tensor already has -> removed; a broadcast consumed by an elementwise op -> removed when
    the op's own broadcasting gives the same result type; sum / mean / max / min / prod over
    size-1 axes -> squeeze (or nothing with keepdims); cast to the same dtype -> removed;
    ``pow(x, 1) -> x``, ``pow(x, 2) -> x * x`` (the correctly rounded square, where libm's
    ``pow`` is a scalar call of ~8 ns: a focal loss's ``(1 - p) ** 2``).

Stabilization
    ``log(softmax(x)) -> log_softmax(x)``; ``-sum(y * log_softmax(x), axis=-1)`` in the forms
    kiln.ops builds (negation outside the sum, inside it, on either factor; with a mean on
    top) -> ``softmax_cross_entropy(x, y)``; ``log(sigmoid(x)) -> -softplus(-x)``;
    ``log(1 + x), log(x + 1) -> log1p(x)``; ``exp(x) - 1 -> expm1(x)``.
    The gradients that autodiff built from the naive forms divide by a probability
    (``ct / softmax(x)``, ``ct / sigmoid(x)``), which is 0/0 once the probability underflows;
    two rules cancel those divisions: ``(g / p) * p -> g`` and
    ``p * (g / p - t) -> g - p * t`` for ``p`` a softmax, sigmoid or exp.

Gradient routing
    ``max_pool2d_grad(relu(z), out, ct) * [z > 0] -> max_pool2d_grad(relu(z), out,
    ct * [out > 0])`` (see :func:`pool_mask`): relu's mask moves to the pooled side;
    ``sum(max_pool2d_grad(y, out, ct))`` over the spatial axes -> ``sum(ct)``
    (:func:`pool_sum`).

Layout
    ``matmul(transpose(x, perm), w)`` (``w`` a matrix, ``perm`` moving batch axes only) ->
    ``transpose(matmul(x, w), perm)`` (one GEMM over ``x``'s own layout); a transpose of a
    gather's index axes moves onto the indices (also in its gradient ``take_grad``); a sum of
    ``slice_grad``s tiling one axis of a tensor (the gradient of gates split from one
    product) -> ``concatenate`` of their cotangents.

Constant subexpressions that the rules create are folded (see constant_fold).

Example:
    >>> g = simplify(Graph([x], [kiln.ops.log(kiln.ops.softmax(x)) * 1.0]))
    >>> g.outputs[0].op
    'log_softmax'
"""

from __future__ import annotations

from kiln.core.ir import Graph, Node
from kiln.core.passes._util import (
    BROADCASTS,
    RESHAPES,
    build,
    first_rule,
    is_const,
    is_const_equal,
    is_elementwise,
    rewrite,
    same_type,
    try_build,
)
from kiln.core.passes.constant_fold import rule as fold_rule

PROBABILITIES = ("softmax", "sigmoid", "exp")


def _other(node: Node, value: float) -> Node | None:
    """For a binary commutative node with a constant ``value`` operand: the other operand."""
    a, b = node.inputs
    if is_const_equal(b, value):
        return a
    if is_const_equal(a, value):
        return b
    return None


def identities(node: Node) -> Node | None:
    op, ins = node.op, node.inputs
    if op in ("mul", "add"):
        x = _other(node, 1 if op == "mul" else 0)
        if x is not None and x.type == node.type:
            return x
    if op in ("sub", "div"):
        a, b = ins
        if is_const_equal(b, 0 if op == "sub" else 1) and a.type == node.type:
            return a
        if op == "sub" and is_const_equal(a, 0) and b.type == node.type:
            return build("neg", [b])
    if op == "neg":
        x = ins[0]
        if x.op == "neg":
            return x.inputs[0]
        if x.op in ("sum", "mean") and x.inputs[0].op == "neg":  # -(sum(-z)) = sum(z) exactly
            return build(x.op, [x.inputs[0].inputs[0]], **x.attrs)
    if op == "cast" and ins[0].dtype == node.attrs["dtype"]:
        return ins[0]
    if op == "pow" and ins[0].type == node.type:
        x, y = ins
        if is_const_equal(y, 1):
            return x
        if is_const_equal(y, 2) and x.dtype.startswith("float"):
            return build("mul", [x, x])
    return None


def movement(node: Node) -> Node | None:
    op, ins = node.op, node.inputs
    if op == "transpose":
        x = ins[0]
        perm = node.attrs["perm"]
        if x.op == "transpose":
            inner = x.attrs["perm"]
            perm = tuple(inner[p] for p in perm)
            x = x.inputs[0]
        if perm == tuple(range(len(perm))):
            return x
        if x is not ins[0]:
            return build("transpose", [x], perm=perm)
    if op in RESHAPES:
        x = ins[0]
        unknown = sum(1 for d in node.shape if d is None)
        if unknown <= 1 and x.type == node.type:
            return x
        if unknown <= 1 and x.op in RESHAPES:
            target = tuple(-1 if d is None else d for d in node.shape)
            base = x.inputs[0]
            if base.type == node.type:
                return base
            new = try_build("reshape", [base], shape=target)
            if same_type(new, node):
                return new
    if op in BROADCASTS and ins[0].type == node.type and (
            node.type.is_static or op == "broadcast_like"):
        return ins[0]
    if op in ("sum", "mean", "max", "min", "prod"):
        x = ins[0]
        axes = node.attrs["axis"]
        if all(x.shape[a] == 1 for a in axes):
            if node.attrs["keepdims"] or not axes:
                return x if x.type == node.type else None
            return build("squeeze", [x], axis=axes)
    return None


def drop_broadcast(node: Node) -> Node | None:
    """An elementwise op broadcasts by itself: feed it the broadcast's input instead."""
    if not is_elementwise(node) or node.op == "remat_barrier":
        return None
    ins = list(node.inputs)
    changed = False
    for k, i in enumerate(ins):
        if i.op in BROADCASTS:
            trial = ins[:k] + [i.inputs[0]] + ins[k + 1:]
            new = try_build(node.op, trial, **node.attrs)
            if same_type(new, node):
                ins, changed = trial, True
    return build(node.op, ins, **node.attrs) if changed else None


# ---- stabilization ----------------------------------------------------------------------------
def _peel_neg(node: Node) -> tuple[int, Node]:
    sign = 1
    while node.op == "neg":
        sign, node = -sign, node.inputs[0]
    return sign, node


def _ones_operand(node: Node) -> Node | None:
    """For ``add(x, 1)`` / ``add(1, x)``: ``x``."""
    if node.op != "add":
        return None
    return _other(node, 1)


def stabilize(node: Node) -> Node | None:
    op, ins = node.op, node.inputs
    if op == "log":
        x = ins[0]
        if x.op == "softmax":
            return build("log_softmax", [x.inputs[0]], **x.attrs)
        if x.op == "sigmoid":
            return build("neg", [build("softplus", [build("neg", [x.inputs[0]])])])
        inner = _ones_operand(x)
        if inner is not None and inner.type == node.type:
            return build("log1p", [inner])
    if op == "sub" and ins[0].op == "exp" and is_const_equal(ins[1], 1):
        x = ins[0].inputs[0]
        if x.type == node.type:
            return build("expm1", [x])
    if op == "add":
        for e, c in (ins, ins[::-1]):
            if e.op == "exp" and is_const_equal(c, -1) and e.inputs[0].type == node.type:
                return build("expm1", [e.inputs[0]])
    if op == "sum":
        return _cross_entropy(node)
    if op == "mul":
        return _cancel_probability(node)
    return None


def _cross_entropy(node: Node) -> Node | None:
    """``sum(+-y * +-log_softmax(x), axis=last)`` -> ``+-softmax_cross_entropy(x, y)``."""
    sign, m = _peel_neg(node.inputs[0])
    if m.op != "mul":
        return None
    for a, b in (m.inputs, m.inputs[::-1]):
        sa, y = _peel_neg(a)
        sb, ls = _peel_neg(b)
        if ls.op != "log_softmax":
            continue
        x = ls.inputs[0]
        last = x.ndim - 1
        if ls.attrs["axis"] != last or node.attrs["axis"] != (last,):
            continue
        if y.type != x.type or m.type != x.type:
            continue
        ce = build("softmax_cross_entropy", [x, y])  # = -sum(y * log_softmax(x), -1)
        out = ce if sign * sa * sb == -1 else build("neg", [ce])
        if node.attrs["keepdims"]:
            out = build("expand_dims", [out], axis=(last,))
        return out if out.type == node.type else None
    return None


def _cancel_probability(node: Node) -> Node | None:
    for p, other in (node.inputs, node.inputs[::-1]):
        if p.op not in PROBABILITIES:
            continue
        # (g / p) * p -> g
        if other.op == "div" and other.inputs[1] is p and other.inputs[0].type == node.type:
            return other.inputs[0]
        # p * (g / p - t) -> g - p * t
        if other.op == "sub" and other.inputs[0].op == "div" and other.inputs[0].inputs[1] is p:
            g, t = other.inputs[0].inputs[0], other.inputs[1]
            pt = try_build("mul", [p, t])
            new = try_build("sub", [g, pt]) if pt is not None else None
            if same_type(new, node):
                return new
    return None


def _positive_mask_input(m: Node) -> Node | None:
    """For ``m = cast(greater(z, 0))`` (relu's derivative): ``z``."""
    if m.op == "cast" and m.inputs[0].op == "greater":
        z, zero = m.inputs[0].inputs
        if is_const_equal(zero, 0):
            return z
    return None


def pool_mask(node: Node) -> Node | None:
    """``max_pool2d_grad(y, out, ct) * [z > 0]`` with ``y = relu(z)`` (or ``y = z``) ->
    ``max_pool2d_grad(y, out, ct * [out > 0])``.

    Exact: max pooling routes each window's cotangent to one element ``y[p]`` with
    ``y[p] == out[window]``, and ``z[p] > 0`` exactly when ``y[p] > 0``; so the mask can be
    applied to the pooled cotangent before routing. It then covers 1/(pool area) of the
    elements, and the pass over the full-size gradient (a read of two tensors and a write of
    one, the size of the convolution's output) disappears from relu - max-pool blocks.
    """
    if node.op != "mul":
        return None
    a, b = node.inputs
    for g, m in ((a, b), (b, a)):
        z = _positive_mask_input(m)
        if g.op != "max_pool2d_grad" or z is None or g.type != node.type or m.type != node.type:
            continue
        y, out, ct = g.inputs
        if not (z is y or (y.op == "relu" and y.inputs[0] is z)):
            continue
        zero = m.inputs[0].inputs[1]
        mask = try_build("cast", [build("greater", [out, zero])], dtype=m.attrs["dtype"])
        if mask is None or mask.type != ct.type:
            continue
        new = try_build("max_pool2d_grad", [y, out, build("mul", [ct, mask])], **g.attrs)
        if same_type(new, node):
            return new
    return None


def pool_sum(node: Node) -> Node | None:
    """``sum(max_pool2d_grad(y, out, ct), axis)`` over both spatial axes -> ``sum(ct, axis)``.

    Max pooling's gradient routes every cotangent value to exactly one input element, so a
    sum over the whole spatial extent is the same sum of the (pool-area times smaller)
    cotangent, up to the order of the additions: the bias gradient of a conv - relu - max-pool
    block no longer reads the full-size gradient.
    """
    if node.op != "sum" or node.inputs[0].op != "max_pool2d_grad":
        return None
    axes = set(node.attrs["axis"])
    if not {1, 2} <= axes:
        return None
    new = try_build("sum", [node.inputs[0].inputs[2]], **node.attrs)
    return new if same_type(new, node) else None


def matmul_layout(node: Node) -> Node | None:
    """``matmul(transpose(x, perm), w)`` with ``w`` a matrix and ``perm`` moving only batch
    axes -> ``transpose(matmul(x, w), perm)``: the product runs on ``x``'s own layout, so
    the batch axes fold into one GEMM (a sequence's input projection, time-major loops)."""
    if node.op != "matmul":
        return None
    a, w = node.inputs
    if w.ndim != 2 or a.op != "transpose" or a.ndim < 3:
        return None
    perm = tuple(a.attrs["perm"])
    if perm[-1] != a.ndim - 1:
        return None
    inner = try_build("matmul", [a.inputs[0], w])
    if inner is None:
        return None
    new = try_build("transpose", [inner], perm=perm)
    return new if same_type(new, node) else None


def _index_perm(perm: tuple, n_idx: int, ndim: int) -> tuple | None:
    """``perm`` if it moves only the first ``n_idx`` axes among themselves, else None."""
    perm = tuple(perm)
    if len(perm) != ndim or perm[n_idx:] != tuple(range(n_idx, ndim)):
        return None
    return perm[:n_idx]


def gather_layout(node: Node) -> Node | None:
    """A transpose of a gather's index axes moves onto the (small) indices:
    ``transpose(take(t, idx), perm) -> take(t, transpose(idx, perm))``, and its gradient
    ``take_grad(transpose(ct, perm), idx) -> take_grad(ct, transpose(idx, inverse))``: an
    embedding read time-major (an RNN's input) comes out contiguous, no copy either way."""
    if node.op == "transpose" and node.inputs[0].op == "take":
        take = node.inputs[0]
        table, idx = take.inputs
        if take.attrs["axis"] != 0:
            return None
        p = _index_perm(node.attrs["perm"], idx.ndim, node.ndim)
        if p is None or idx.ndim < 2:
            return None
        moved = try_build("transpose", [idx], perm=p)
        new = try_build("take", [table, moved], axis=0) if moved is not None else None
        return new if same_type(new, node) else None
    if node.op == "take_grad" and node.inputs[0].op == "transpose":
        ct, idx, table = node.inputs
        if node.attrs["axis"] != 0 or idx.ndim < 2:
            return None
        p = _index_perm(ct.attrs["perm"], idx.ndim, ct.ndim)
        if p is None:
            return None
        inverse = tuple(int(i) for i in sorted(range(len(p)), key=lambda k: p[k]))
        moved = try_build("transpose", [idx], perm=inverse)
        new = try_build("take_grad", [ct.inputs[0], moved, table], axis=0) \
            if moved is not None else None
        return new if same_type(new, node) else None
    return None


def _slice_grad_leaves(node: Node, out: list[Node]) -> bool:
    if node.op == "slice_grad":
        out.append(node)
        return True
    if node.op == "add":
        return all(_slice_grad_leaves(i, out) for i in node.inputs)
    return False


def slice_grads(node: Node) -> Node | None:
    """A sum of ``slice_grad``s of one tensor whose unit-step slices along one axis tile it
    exactly (the gradient of a split into gates) -> ``concatenate`` of their cotangents: no
    zero-filled full-size tensors and no additions."""
    if node.op != "add":
        return None
    leaves: list[Node] = []
    if not _slice_grad_leaves(node, leaves) or len(leaves) < 2:
        return None
    x = leaves[0].inputs[1]
    if any(g.inputs[1] is not x for g in leaves):
        return None
    pieces = []
    axis: int | None = None
    for g in leaves:
        spec = g.attrs["spec"]
        cut = [k for k, (lo, hi, st) in enumerate(spec) if (lo, hi, st) != (None, None, 1)]
        if len(cut) != 1 or (axis is not None and cut[0] != axis):
            return None
        axis = cut[0]
        lo, hi, st = spec[axis]
        size = x.shape[axis]
        if st != 1 or size is None:
            return None
        lo, hi, _ = slice(lo, hi).indices(size)
        pieces.append((lo, hi, g.inputs[0]))
    pieces.sort(key=lambda p: p[0])
    pos = 0
    for lo, hi, _ in pieces:
        if lo != pos or hi <= lo:
            return None
        pos = hi
    if axis is None or pos != x.shape[axis]:
        return None
    new = try_build("concatenate", [p[2] for p in pieces], axis=axis)
    return new if same_type(new, node) else None


def _fold(node: Node) -> Node | None:
    if node.op == "size_of" or (node.inputs and all(is_const(i) for i in node.inputs)):
        return fold_rule(node)
    return None


RULES = first_rule(identities, movement, drop_broadcast, stabilize, pool_mask, pool_sum,
                   matmul_layout, gather_layout, slice_grads, _fold)


def simplify(graph: Graph) -> Graph:
    """Returns ``graph`` with the identities and stabilizations of the module docstring."""
    return rewrite(graph, RULES)
