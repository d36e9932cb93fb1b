"""ONNX rules for the sources, linear algebra, softmax family, convolution and pooling, image
resizing, the ``fused`` groups of the fusion pass, and the ops that are not exportable, with
the reason (docs/features.md, "Export to ONNX").

kiln is channels-last (NHWC, kernels ``(kh, kw, Cin, Cout)``), ONNX's Conv and pools are
channels-first: each such op is written ``Transpose -> op -> Transpose`` (onnxruntime's layout
optimizer removes the pairs that meet), with the kernel transposed at export time.
"""

from __future__ import annotations

import numpy as np

from kiln import ops as K
from kiln.core import Node, TensorType, function
from kiln.export.onnx_emit import ONNX_DTYPES, Call, Emitter, ExportError, Rule

RULES: dict[str, Rule] = {}


def nn_rule(*names: str):
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn
    return register


#: op -> why it has no ONNX translation (tests/export checks that every registered op is
#: either here or has a rule).
NOT_EXPORTABLE: dict[str, str] = {
    "random_uniform": "kiln's counter-based generator (SplitMix64 of [seed, counter]) has no "
                      "ONNX equivalent; an inference graph draws no random numbers",
    "random_normal": "kiln's counter-based generator (SplitMix64 of [seed, counter]) has no "
                     "ONNX equivalent; an inference graph draws no random numbers",
    "conv2d_backprop_filter": "a gradient op: it appears only in training graphs",
    "max_pool2d_grad": "a gradient op: it appears only in training graphs",
    "avg_pool2d_grad": "a gradient op: it appears only in training graphs",
    "slice_grad": "a gradient op: it appears only in training graphs",
    "take_grad": "a gradient op: it appears only in training graphs",
    "take_along_axis_grad": "a gradient op: it appears only in training graphs",
    "argsort": "ONNX's TopK leaves the place of NaN to the runtime, where kiln's sort is "
               "stable with NaN last: an export could reorder a model's outputs silently",
    "allreduce": "a collective across processes (data-parallel training): an exported "
                 "inference graph runs in one process",
    **{op: "half of a split collective (data-parallel training's overlapped gradient sums): "
           "an exported inference graph runs in one process"
       for op in ("allreduce_start", "allreduce_wait")},
    "resize_grad": "a gradient op: it appears only in training graphs",
    "affine_transform_grad": "a gradient op: it appears only in training graphs",
    **{op: "a LAPACK factorization or solve (kiln.ops.linalg) with no ONNX operator"
       for op in ("cholesky", "solve_triangular", "solve", "inv", "eigh", "qr", "svd", "pinv",
                  "lu_factor")},
    "affine_transform": "ONNX has no exact equivalent of its sampling (GridSample lacks the "
                        "wrap and mirror fill modes and rounds differently); the random "
                        "augmentation layers that use it are the identity at inference",
}
NOT_EXPORTABLE.update({  # kiln/core/ops/bitwise.py
    name: "ONNX's bitwise ops need opset 18 (kiln exports 17 by default) and its BitShift "
          "takes unsigned integers only, where kiln's are signed int32/int64"
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_invert", "left_shift",
                 "right_shift")})


# ---- sources -------------------------------------------------------------------------------
@nn_rule("placeholder")
def _placeholder(ctx: Emitter, c: Call) -> str:
    name = c.attrs.get("name")
    raise ExportError(f"cannot export to ONNX: the graph reads placeholder "
                      f"{name or c.type!s} that is not one of its inputs")


@nn_rule("param")
def _param(ctx: Emitter, c: Call) -> str:
    assert c.node is not None
    return ctx.param(c.node)


@nn_rule("constant")
def _constant(ctx: Emitter, c: Call) -> str:
    return ctx.const(c.attrs["value"].array)


# ---- linear algebra and the softmax family -------------------------------------------------
@nn_rule("matmul")
def _matmul(ctx: Emitter, c: Call) -> str:
    return ctx.op("MatMul", c.inputs)  # NumPy's batch broadcasting, like kiln's


@nn_rule("gemm")
def _gemm(ctx: Emitter, c: Call) -> str:
    # alpha and beta are tensors (a learning rate may be a Variable), not Gemm's attributes
    a, b, acc, alpha, beta = c.inputs
    product = ctx.op("Mul", [ctx.op("MatMul", [a, b]), alpha])
    return ctx.op("Add", [product, ctx.op("Mul", [acc, beta])])


@nn_rule("softmax")
def _softmax(ctx: Emitter, c: Call) -> str:
    return ctx.op("Softmax", c.inputs, axis=int(c.attrs["axis"]))


@nn_rule("log_softmax")
def _log_softmax(ctx: Emitter, c: Call) -> str:
    return ctx.op("LogSoftmax", c.inputs, axis=int(c.attrs["axis"]))


@nn_rule("sparse_softmax_cross_entropy")
def _sparse_xent(ctx: Emitter, c: Call) -> str:
    logits, labels = c.inputs
    lsm = ctx.op("LogSoftmax", [logits], axis=-1)
    idx = ctx.op("Unsqueeze", [ctx.op("Cast", [labels], to=7), ctx.ints([-1])])
    picked = ctx.op("GatherElements", [lsm, idx], axis=-1)
    return ctx.op("Neg", [ctx.op("Squeeze", [picked, ctx.ints([-1])])], hint="xent")


@nn_rule("softmax_cross_entropy")
def _dense_xent(ctx: Emitter, c: Call) -> str:
    # like the reference: in float64, and a class whose label is 0 adds 0 even where its
    # log-probability is -inf
    logits, labels = (ctx.op("Cast", [v], to=ONNX_DTYPES["float64"]) for v in c.inputs)
    lsm = ctx.op("LogSoftmax", [logits], axis=-1)
    zero = ctx.scalar(0, "float64")
    safe = ctx.op("Where", [ctx.op("Not", [ctx.op("Equal", [labels, zero])]), lsm, zero])
    last = c.in_types[0].ndim - 1
    total = ctx.reduce("ReduceSum", ctx.op("Mul", [labels, safe]), [last], False)
    return ctx.op("Cast", [ctx.op("Neg", [total])], to=ONNX_DTYPES[c.dtype], hint="xent")


# ---- convolution and pooling ---------------------------------------------------------------
_TO_NCHW, _TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def window(size: int, k: int, stride: int, dilation: int, padding: str) -> tuple[int, int, int]:
    """``(out, pad_before, pad_after)`` of one spatial axis: TensorFlow's rule, the one
    ``kiln/core/ops/window.py`` defines for every backend."""
    keff = (k - 1) * dilation + 1
    if padding == "valid":
        return (size - keff) // stride + 1, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + keff - size, 0)
    return out, total // 2, total - total // 2


def _spatial(hw: tuple, k: tuple, strides: tuple, dilation: tuple, padding: str) -> dict:
    """The padding attributes of a Conv/pool: explicit pads when the spatial dims are known,
    else ``auto_pad`` (SAME_UPPER is TensorFlow's "same": the odd pad goes after)."""
    if padding == "valid":
        return {"pads": [0, 0, 0, 0]}
    if hw[0] is None or hw[1] is None:
        return {"auto_pad": "SAME_UPPER"}
    (_, t, b), (_, left, r) = (window(hw[i], k[i], strides[i], dilation[i], padding)
                               for i in range(2))
    return {"pads": [t, left, b, r]}


@nn_rule("conv2d")
def _conv2d(ctx: Emitter, c: Call) -> str:
    x, w = c.inputs
    wt = c.in_types[1]
    k = (wt.shape[0], wt.shape[1])
    strides, dilation = c.attrs["strides"], c.attrs["dilation"]
    # (kh, kw, Cin / groups, Cout) -> ONNX's (Cout, Cin / group, kh, kw); both split the
    # channels into consecutive blocks per group
    y = ctx.op("Conv", [ctx.transpose(x, _TO_NCHW), ctx.transpose(w, [3, 2, 0, 1])],
               kernel_shape=list(k), strides=list(strides), dilations=list(dilation),
               group=int(c.attrs.get("groups", 1)),
               **_spatial(c.in_types[0].shape[1:3], k, strides, dilation, c.attrs["padding"]))
    return ctx.transpose(y, _TO_NHWC)


@nn_rule("conv2d_backprop_input")
def _conv2d_transpose(ctx: Emitter, c: Call) -> str:
    # the transpose of a conv2d of an (H, W, Cin) input: ConvTranspose with that conv's pads;
    # the rows the conv never read (past its last window) come back as output_padding
    ct, w = c.inputs
    wt = c.in_types[1]
    k = (wt.shape[0], wt.shape[1])
    strides, dilation = c.attrs["strides"], c.attrs["dilation"]
    size = c.attrs["input_shape"][:2]
    pads, extra = [0, 0, 0, 0], [0, 0]
    for i in range(2):
        out, before, after = window(size[i], k[i], strides[i], dilation[i], c.attrs["padding"])
        keff = (k[i] - 1) * dilation[i] + 1
        pads[i], pads[i + 2] = before, after
        extra[i] = size[i] + before + after - ((out - 1) * strides[i] + keff)
    # ONNX's weight is (C_in of the ConvTranspose = Cout, Cin / group, kh, kw)
    y = ctx.op("ConvTranspose", [ctx.transpose(ct, _TO_NCHW), ctx.transpose(w, [3, 2, 0, 1])],
               kernel_shape=list(k), strides=list(strides), dilations=list(dilation),
               group=int(c.attrs.get("groups", 1)), pads=pads,
               output_padding=extra if any(extra) else None)
    return ctx.transpose(y, _TO_NHWC)


def _pool(onnx_op: str, **extra: int) -> Rule:
    def translate(ctx: Emitter, c: Call) -> str:
        ps, st = c.attrs["pool_size"], c.attrs["strides"]
        y = ctx.op(onnx_op, [ctx.transpose(c.inputs[0], _TO_NCHW)], kernel_shape=list(ps),
                   strides=list(st), **extra,
                   **_spatial(c.in_types[0].shape[1:3], ps, st, (1, 1), c.attrs["padding"]))
        return ctx.transpose(y, _TO_NHWC)
    return translate


# "same" max pooling: ONNX's pads never win the max; average pooling over the real elements
# only (count_include_pad=0), as the references do
RULES["max_pool2d"] = _pool("MaxPool")
RULES["avg_pool2d"] = _pool("AveragePool", count_include_pad=0)


# ---- images --------------------------------------------------------------------------------
def _evaluate(node: Node) -> np.ndarray:
    """The value of a node without inputs, by the ops' NumPy references."""
    return np.asarray(function([], node, backend="reference")())


@nn_rule("resize")
def _resize(ctx: Emitter, c: Call) -> str:
    # linear in the image and separable: (oh, h) @ image @ (w, ow), the two matrices made
    # at export time by the op's own reference resizing one-hot images
    _, h, w, _ = c.in_types[0].shape
    (oh, ow), interpolation = c.attrs["size"], c.attrs["interpolation"]
    rows = _evaluate(K.resize(K.constant(np.eye(h).reshape(h, h, 1, 1)), (oh, 1),
                              interpolation))[:, :, 0, 0].T
    cols = _evaluate(K.resize(K.constant(np.eye(w).reshape(w, 1, w, 1)), (1, ow),
                              interpolation))[:, 0, :, 0]
    y = ctx.op("MatMul", [ctx.root.const(rows.astype(c.dtype), hint="resize_rows"),
                          ctx.transpose(c.inputs[0], _TO_NCHW)])
    y = ctx.op("MatMul", [y, ctx.root.const(cols.astype(c.dtype), hint="resize_cols")])
    return ctx.transpose(y, _TO_NHWC)


# ---- fused groups --------------------------------------------------------------------------
_BOOL_OUT = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
             "logical_and", "logical_or", "logical_not"}


def _broadcast(shapes: list[tuple]) -> tuple:
    """NumPy broadcasting of shapes with unknown (None) dims."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        dims = [s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0]
        known = [d for d in dims if d is not None and d != 1]
        out.append(known[0] if known else (1 if all(d == 1 for d in dims) else None))
    return tuple(out)


def instruction_type(op: str, types: list[TensorType], attrs: dict) -> TensorType:
    """The result type of one instruction of a fused program (elementwise, or the reduction
    epilogue)."""
    if "axis" in attrs and "keepdims" in attrs:  # a reduction
        axes = attrs["axis"] if isinstance(attrs["axis"], tuple) else (attrs["axis"],)
        x = types[0]
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) \
            if attrs["keepdims"] else tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return TensorType(shape, "int64" if op in ("argmax", "argmin") else x.dtype)
    shape = _broadcast([t.shape for t in types])
    if op in _BOOL_OUT:
        dtype = "bool"
    elif op == "cast":
        dtype = attrs["dtype"]
    elif op == "where":
        dtype = types[1].dtype
    else:
        dtype = types[0].dtype
    return TensorType(shape, dtype)


@nn_rule("fused")
def _fused(ctx: Emitter, c: Call) -> str:
    # the program's instructions, each by its own op's rule
    values: list[str] = []
    types: list[TensorType] = []
    program = c.attrs["program"]
    for j, (op, args, attrs) in enumerate(program):
        ins = [c.inputs[-a - 1] if a < 0 else values[a] for a in args]
        in_types = [c.in_types[-a - 1] if a < 0 else types[a] for a in args]
        attrs = dict(attrs)
        out = c.type if j == len(program) - 1 else instruction_type(op, in_types, attrs)
        translate = ctx.rules.get(op)
        if translate is None:
            raise ExportError(f"cannot export to ONNX: op {op!r} inside a fused group"
                              f"{ctx.layer_of(c.node)} has no ONNX translation")
        values.append(translate(ctx, Call(op, attrs, ins, in_types, out, None)))
        types.append(out)
    return values[-1]

