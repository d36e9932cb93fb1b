"""Graph rewrites the CPU backend applies before planning: ops expressed through others.

* ``logsumexp(x)`` -> ``m = max(x)``, ``m0 = where(m - m == 0, m, 0)`` (0 where m is not
  finite, like the reference), ``log(sum(exp(x - m0))) + m0``: two generated reductions and
  one elementwise kernel;
* a fused node whose reduction epilogue is ``logsumexp`` -> its elementwise prefix as a fused
  node, then the lowered logsumexp.
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu import options
from kiln.core.ir import Graph, Node, rebuild
from kiln.core.ops.fused import fused
from kiln.core.ops.registry import apply
from kiln.core.ops.source import constant


def _logsumexp(x: Node, axis: tuple[int, ...], keepdims: bool) -> Node:
    zero = constant(np.asarray(0, dtype=x.dtype))
    m = apply("max", x, axis=axis, keepdims=True)
    finite = apply("equal", apply("sub", m, m), zero)
    m0 = apply("where", finite, m, zero)
    s = apply("sum", apply("exp", apply("sub", x, m0)), axis=axis, keepdims=True)
    out = apply("add", apply("log", s), m0)
    if not keepdims and axis:
        out = apply("squeeze", out, axis=axis)
    return out


def _lower_node(node: Node) -> Node | None:
    if node.op == "logsumexp":
        return _logsumexp(node.inputs[0], node.attrs["axis"], node.attrs["keepdims"])
    if node.op == "fused":
        program = node.attrs["program"]
        op, args, attrs = program[-1]
        if op != "logsumexp":
            return None
        src = args[0]
        x = node.inputs[-src - 1] if src < 0 else fused(node.inputs, program[:src + 1])
        a = dict(attrs)
        return _logsumexp(x, a["axis"], a["keepdims"])
    return None


def lower(graph: Graph) -> Graph:
    """``graph`` with the rewrites above applied (the same graph when nothing changes)."""
    if not any(_lowers(n) for n in graph.nodes):
        return graph
    new: dict[int, Node] = {}
    for node in graph.nodes:
        ins = [new[id(i)] for i in node.inputs]
        rebuilt = rebuild(node, ins) if node.inputs else node
        lowered = _lower_node(rebuilt)
        new[id(node)] = rebuilt if lowered is None else lowered
    return Graph(graph.inputs, [new[id(o)] for o in graph.outputs])


def _lowers(node: Node) -> bool:
    return node.op == "logsumexp" or (node.op == "fused"
                                      and node.attrs["program"][-1][0] == "logsumexp")


# ---- small work runs on the caller's thread ------------------------------------------------
# A kernel split over kiln's threads pays for waking them (a few us on an idle machine; up
# to milliseconds where the other cores are busy: issue 47, a batch-1 convnet call 1.3 ms on
# one thread against 47 ms split, 2-core host at load 11). A hand-written kernel of fewer
# multiply-adds than this runs its parts one after the other on the caller's thread
# (runtime/serial.py): ~20-80 us on one core of an AVX2 / AVX-512 CPU, where waking even one
# idle worker gains little. A count of the plan's own shapes, so one rule on every host
# (options.CpuOptions.serial_work). Multiply-adds one element read or written counts as
# (pooling, gathers, movement: work proportional to the data they touch): element_work.
# Products whose work is their output's elements times a contracted length.
_PRODUCTS = frozenset({"matmul", "gemm"})
_CONVS = frozenset({"conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"})


def kernel_work(node: Node, shape_of) -> int:
    """Multiply-adds (or their equivalent, ``element_work`` per element touched) of the
    kernel computing ``node`` at the shapes ``shape_of(node)`` gives."""
    size = _elements(shape_of(node))
    if node.op in _PRODUCTS and node.inputs and len(shape_of(node.inputs[0])):
        return size * int(shape_of(node.inputs[0])[-1])
    if node.op in _CONVS and len(node.inputs) == 2:
        # every conv op is N*OH*OW*KH*KW*CI*CO: the conv output's elements times the
        # kernel's per output channel (HWIO)
        y, w = {"conv2d": (node, node.inputs[1]),
                "conv2d_backprop_input": (node.inputs[0], node.inputs[1]),
                "conv2d_backprop_filter": (node.inputs[1], node)}[node.op]
        w_shape = shape_of(w)
        if len(w_shape) == 4 and w_shape[-1]:
            groups = int(node.attrs.get("groups", 1) or 1)
            return _elements(shape_of(y)) * _elements(w_shape) // int(w_shape[-1]) // groups
    touched = size + sum(_elements(shape_of(i)) for i in node.inputs)
    return touched * options.current().element_work


def runs_serial(node: Node, shape_of) -> bool:
    """Whether the hand-written kernel of ``node`` runs on the caller's thread alone."""
    return kernel_work(node, shape_of) < options.current().serial_work


def _elements(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


# ---- Winograd from a number of outputs -----------------------------------------------------
# A Winograd convolution transforms its kernel at every call (the weights may have changed)
# and sets its pipeline up: a fixed cost that scales with CI * CO like the saving per output
# position does, so the break-even is a number of output positions N * OH * OW. The MNIST
# convnet's 3x3 32 -> 64 convolution on 13 x 13 (121 positions a sample), one thread, 2-core
# Zen 5 host: direct register tiles 17.4 us a sample; Winograd 28 us (kernel transform) +
# 12 us + 8.5 us a sample: even at ~4.5 samples (~550 positions). Below this many output
# positions a forward convolution takes the direct kernels (issue 47: batch-1 serving):
# options.CpuOptions.winograd_min_outputs.


def winograd_pays(out_shape) -> bool:
    """Whether a forward convolution with an NHWC output of ``out_shape`` has enough output
    positions for Winograd's per-call setup to pay (``options.current().winograd_min_outputs``)."""
    return _elements(out_shape[:-1]) >= options.current().winograd_min_outputs
