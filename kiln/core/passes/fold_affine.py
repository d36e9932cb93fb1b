"""fold_affine: a per-channel scale and shift after a convolution -> the convolution's kernel
and bias.

An inference-mode BatchNormalization after a ``Conv2D`` computes
``((conv(x, W) + b - mean) * inv + beta)`` with per-channel ``mean``, ``inv`` (``gamma /
sqrt(var + eps)``) and ``beta``: a pass over the whole activation after the convolution. The
same values are ``conv(x, W * a) + c`` with ``a = inv`` and ``c = (b - mean) * inv + beta``:
a product over the (small) kernel, and a bias add that the CPU backend applies as the
convolution's epilogue with the activation after it (docs/architecture.md, "Passes"). The
reordered rounding is that of folding BatchNormalization into the kernel as inference
runtimes do (results within float tolerance of the unfused graph, not the same bits).

The chain folded starts at a ``conv2d`` read by nothing else (not a graph output) and follows
single readers (through ``identity`` nodes) while each is an ``add``, ``sub`` or ``mul`` of
the running value and a per-channel operand (shape ``(C,)`` or ``(1, ..., 1, C)``, the
value's dtype, not computed from the convolution: a training BatchNormalization's batch
statistics are, so training graphs keep theirs), without changing the value's type; a link
read elsewhere ends the chain (its readers get the folded value). It folds only a chain
that scales (a bias add alone is already the epilogue) and only where the activation has at
least ``PassOptions.fold_affine_min_ratio`` times the kernel's elements (unknown dims counted as
``memory.PLANNER_BATCH``): the kernel's product is paid at every call.

Example:
    >>> g = fold_affine(Graph([x], [(K.conv2d(x, w) - mean) * inv + beta]))
    >>> [n.op for n in g.nodes if n.op in ("conv2d", "mul")]
    ['mul', 'conv2d']
"""

from __future__ import annotations

import numpy as np

from kiln.core.ir import Graph, Node, depends_on
from kiln.core.memory import planned_elements
from kiln.core.ops.source import constant
from kiln.core.passes._util import build, options, rebuild, with_outputs

DTYPES = ("float32", "float64")

def _per_channel(node: Node, channels: int | None, dtype: str) -> bool:
    shape = node.shape
    return (node.dtype == dtype and len(shape) >= 1 and shape[-1] == channels
            and all(d == 1 for d in shape[:-1]))


def _chain(conv: Node, users: dict[int, list[Node]], outputs: set[int]
           ) -> tuple[list[tuple[str, Node, int]], Node] | None:
    """The links ``(op, per-channel operand, position of the running value)`` after ``conv``
    and the last node of the chain, or None where there is nothing to fold."""
    channels = conv.shape[-1]
    links: list[tuple[str, Node, int]] = []
    cur = conv
    while len(users[id(cur)]) == 1 and id(cur) not in outputs:
        (u,) = users[id(cur)]
        if u.op == "identity":  # a layer's output name: the same value
            cur = u
            continue
        if u.op not in ("add", "sub", "mul") or u.type != cur.type:
            break
        pos = 0 if u.inputs[0] is cur else 1
        other = u.inputs[1 - pos]
        if (other is cur or not _per_channel(other, channels, conv.dtype)
                or depends_on([other], conv)):
            break
        links.append((u.op, other, pos))
        cur = u
    if not any(op == "mul" for op, _, _ in links):
        return None
    return links, cur


def _fold(conv: Node, links: list[tuple[str, Node, int]], new: dict[int, Node]) -> Node:
    """``conv(x, W * a) + c`` for the chain ``links`` (a running ``a * y + c``), built from the
    rewritten graph's nodes ``new``."""
    channels = conv.shape[-1]

    def vec(n: Node) -> Node:
        n = new[id(n)]
        return n if n.shape == (channels,) else build("reshape", [n], shape=(channels,))

    a: Node | None = None
    c: Node | None = None
    for op, other, pos in links:
        o = vec(other)
        if op == "add":
            c = o if c is None else build("add", [c, o])
        elif op == "sub" and pos == 0:  # y - o
            c = build("neg", [o]) if c is None else build("sub", [c, o])
        elif op == "sub":  # o - y: the scale and the shift change sign
            a = _minus_one(conv) if a is None else build("neg", [a])
            c = o if c is None else build("sub", [o, c])
        else:  # mul
            a = o if a is None else build("mul", [a, o])
            c = None if c is None else build("mul", [c, o])
    x, w = (new[id(i)] for i in conv.inputs)
    assert a is not None  # _chain keeps only chains with a mul
    kernel = build("mul", [w, a])
    out = build("conv2d", [x, kernel], **conv.attrs)
    return out if c is None else build("add", [out, c])


def _minus_one(conv: Node) -> Node:
    return constant(np.full((conv.shape[-1],), -1, conv.dtype))


def fold_affine(graph: Graph) -> Graph:
    """Returns ``graph`` with the chains of the module docstring folded."""
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    ends: dict[int, tuple[Node, list]] = {}  # id(chain end) -> (conv, links)
    ratio = options().fold_affine_min_ratio
    for n in graph.nodes:
        if (n.op != "conv2d" or n.dtype not in DTYPES or n.shape[-1] is None
                or planned_elements(n.shape) < ratio * planned_elements(n.inputs[1].shape)):
            continue
        found = _chain(n, users, outputs)
        if found is not None:
            ends[id(found[1])] = (n, found[0])
    if not ends:
        return graph
    new: dict[int, Node] = {}
    for node in graph.nodes:
        if id(node) in ends:
            conv, links = ends[id(node)]
            folded = _fold(conv, links, new)
            new[id(node)] = folded if folded.type == node.type else rebuild(
                node, [new[id(i)] for i in node.inputs])
            continue
        new[id(node)] = rebuild(node, [new[id(i)] for i in node.inputs]) if node.inputs \
            else node
    return with_outputs(graph, [new[id(o)] for o in graph.outputs])
