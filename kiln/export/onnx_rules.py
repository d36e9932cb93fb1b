"""ONNX rules for the elementwise, reduction and movement ops (docs/features.md,
"Export to ONNX"). Each rule reproduces the op's NumPy reference (its specification in
``kiln/core/ops/``); where ONNX has no single op with those semantics the rule writes a
composite (``expm1``, ``logsumexp``, ``one_hot`` ...).
"""

from __future__ import annotations

import numpy as np

from kiln.export.onnx_emit import ONNX_DTYPES, Call, Emitter, ExportError, Rule

RULES: dict[str, Rule] = {}

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def rule(*names: str):
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn
    return register


# ---- elementwise ---------------------------------------------------------------------------
_UNARY = {"neg": "Neg", "abs": "Abs", "sign": "Sign", "exp": "Exp", "log": "Log",
          "sqrt": "Sqrt", "reciprocal": "Reciprocal", "sin": "Sin", "cos": "Cos",
          "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf", "floor": "Floor", "ceil": "Ceil",
          "round": "Round", "logical_not": "Not", "softplus": "Softplus"}
_NARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
         "maximum": "Max", "minimum": "Min", "equal": "Equal", "less": "Less",
         "less_equal": "LessOrEqual", "greater": "Greater", "greater_equal": "GreaterOrEqual",
         "logical_and": "And", "logical_or": "Or", "where": "Where"}


def _direct(onnx_op: str) -> Rule:
    def translate(ctx: Emitter, c: Call) -> str:
        return ctx.op(onnx_op, c.inputs, hint=c.op)
    return translate


for _kiln, _onnx in (_UNARY | _NARY).items():
    RULES[_kiln] = _direct(_onnx)
RULES["det"] = _direct("Det")  # kiln.ops.linalg.det (opset 11)


@rule("identity", "stop_gradient", "remat_barrier", "custom_vjp")
def _alias(ctx: Emitter, c: Call) -> str:
    return c.inputs[0]  # the value itself: a copy in kiln, nothing in a dataflow graph


@rule("expm1")
def _expm1(ctx: Emitter, c: Call) -> str:
    return ctx.op("Sub", [ctx.op("Exp", c.inputs), ctx.scalar(1, c.dtype)], hint="expm1")


@rule("log1p")
def _log1p(ctx: Emitter, c: Call) -> str:
    return ctx.op("Log", [ctx.op("Add", [c.inputs[0], ctx.scalar(1, c.dtype)])], hint="log1p")


@rule("rsqrt")
def _rsqrt(ctx: Emitter, c: Call) -> str:
    return ctx.op("Reciprocal", [ctx.op("Sqrt", c.inputs)], hint="rsqrt")


@rule("square")
def _square(ctx: Emitter, c: Call) -> str:
    return ctx.op("Mul", [c.inputs[0], c.inputs[0]], hint="square")


@rule("relu")
def _relu(ctx: Emitter, c: Call) -> str:
    if c.dtype in ("float32", "float64"):
        return ctx.op("Relu", c.inputs)
    return ctx.op("Max", [c.inputs[0], ctx.scalar(0, c.dtype)], hint="relu")


@rule("not_equal")
def _not_equal(ctx: Emitter, c: Call) -> str:
    return ctx.op("Not", [ctx.op("Equal", c.inputs)], hint="not_equal")


@rule("cast")
def _cast(ctx: Emitter, c: Call) -> str:
    if c.in_types[0].dtype == c.dtype:
        return c.inputs[0]
    return ctx.op("Cast", c.inputs, to=ONNX_DTYPES[c.dtype])


@rule("clip")
def _clip(ctx: Emitter, c: Call) -> str:
    # min(max(x, lo), hi) like the reference; ONNX Clip takes scalar bounds only
    x, lo, hi = c.inputs
    return ctx.op("Min", [ctx.op("Max", [x, lo]), hi], hint="clip")


# ---- reductions ----------------------------------------------------------------------------
def _reduction(onnx_op: str) -> Rule:
    def translate(ctx: Emitter, c: Call) -> str:
        axes = list(c.attrs["axis"])
        if not axes:  # nothing reduced: the reference returns x
            return c.inputs[0]
        return ctx.reduce(onnx_op, c.inputs[0], axes, c.attrs["keepdims"])
    return translate


for _kiln, _onnx in {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax",
                     "min": "ReduceMin", "prod": "ReduceProd"}.items():
    RULES[_kiln] = _reduction(_onnx)


@rule("logsumexp")
def _logsumexp(ctx: Emitter, c: Call) -> str:
    # max-shifted like the reference, the shift zeroed where the max is not finite
    x, axes, keep = c.inputs[0], list(c.attrs["axis"]), c.attrs["keepdims"]
    if not axes:
        return x
    m = ctx.reduce("ReduceMax", x, axes, True)
    bad = ctx.op("Or", [ctx.op("IsInf", [m]), ctx.op("IsNaN", [m])])
    m = ctx.op("Where", [bad, ctx.scalar(0, c.dtype), m])
    total = ctx.reduce("ReduceSum", ctx.op("Exp", [ctx.op("Sub", [x, m])]), axes, True)
    out = ctx.op("Add", [ctx.op("Log", [total]), m], hint="logsumexp")
    return out if keep else ctx.op("Squeeze", [out, ctx.ints(axes)])


@rule("argmax", "argmin")
def _arg(ctx: Emitter, c: Call) -> str:
    # ONNX picks the first extreme index by default, like NumPy
    return ctx.op("ArgMax" if c.op == "argmax" else "ArgMin", c.inputs,
                  axis=int(c.attrs["axis"]), keepdims=int(bool(c.attrs["keepdims"])))


@rule("size_of")
def _size_of(ctx: Emitter, c: Call) -> str:
    axes = list(c.attrs["axis"])
    dims = [c.in_types[0].shape[a] for a in axes]
    if all(d is not None for d in dims):
        return ctx.scalar(int(np.prod(dims, dtype=np.int64)), c.dtype)
    picked = ctx.op("Gather", [ctx.op("Shape", [c.inputs[0]]), ctx.ints(axes)], axis=0)
    count = ctx.reduce("ReduceProd", picked, None, False)
    return ctx.op("Cast", [count], to=ONNX_DTYPES[c.dtype], hint="size_of")


# ---- movement ------------------------------------------------------------------------------
@rule("reshape")
def _reshape(ctx: Emitter, c: Call) -> str:
    shape = c.type.shape if c.type.is_static else tuple(c.attrs["shape"])
    if 0 in shape:
        if ctx.opset < 14:
            raise ExportError(f"cannot export to ONNX: reshape to {shape} (a zero-size dim) "
                              f"needs opset >= 14{ctx.layer_of(c.node)}")
        return ctx.op("Reshape", [c.inputs[0], ctx.ints(shape)], allowzero=1)
    return ctx.op("Reshape", [c.inputs[0], ctx.ints(shape)])


@rule("reshape_like")
def _reshape_like(ctx: Emitter, c: Call) -> str:
    return ctx.op("Reshape", [c.inputs[0], ctx.shape_of(c.inputs[1], c.in_types[1])])


@rule("transpose")
def _transpose(ctx: Emitter, c: Call) -> str:
    return ctx.transpose(c.inputs[0], c.attrs["perm"])


@rule("broadcast_to")
def _broadcast_to(ctx: Emitter, c: Call) -> str:
    return ctx.op("Expand", [c.inputs[0], ctx.ints(c.attrs["shape"])])


@rule("broadcast_like")
def _broadcast_like(ctx: Emitter, c: Call) -> str:
    if c.type.is_static:
        return ctx.op("Expand", [c.inputs[0], ctx.ints(c.type.shape)])
    return ctx.op("Expand", [c.inputs[0], ctx.op("Shape", [c.inputs[1]])])


@rule("expand_dims")
def _expand_dims(ctx: Emitter, c: Call) -> str:
    return ctx.op("Unsqueeze", [c.inputs[0], ctx.ints(c.attrs["axis"])])


@rule("squeeze")
def _squeeze(ctx: Emitter, c: Call) -> str:
    if not c.attrs["axis"]:
        return c.inputs[0]
    return ctx.op("Squeeze", [c.inputs[0], ctx.ints(c.attrs["axis"])])


@rule("concatenate")
def _concatenate(ctx: Emitter, c: Call) -> str:
    return ctx.op("Concat", c.inputs, axis=int(c.attrs["axis"]))


@rule("slice")
def _slice(ctx: Emitter, c: Call) -> str:
    # Python slice semantics: ONNX clamps starts/ends the same way; an omitted bound becomes
    # the extreme int64 in the direction of the step
    starts, ends, axes, steps = [], [], [], []
    for axis, (start, stop, step) in enumerate(c.attrs["spec"]):
        step = 1 if step is None else int(step)
        if start is None and stop is None and step == 1:
            continue
        starts.append(int(start) if start is not None else (0 if step > 0 else INT64_MAX))
        ends.append(int(stop) if stop is not None else (INT64_MAX if step > 0 else INT64_MIN))
        axes.append(axis)
        steps.append(step)
    if not axes:
        return c.inputs[0]
    return ctx.op("Slice", [c.inputs[0], ctx.ints(starts), ctx.ints(ends), ctx.ints(axes),
                            ctx.ints(steps)])


@rule("pad")
def _pad(ctx: Emitter, c: Call) -> str:
    pads = c.attrs["pads"]
    flat = [lo for lo, _ in pads] + [hi for _, hi in pads]
    if not any(flat):
        return c.inputs[0]
    return ctx.op("Pad", [c.inputs[0], ctx.ints(flat), ctx.scalar(c.attrs["value"], c.dtype)],
                  mode="constant")


@rule("take")
def _take(ctx: Emitter, c: Call) -> str:
    return ctx.op("Gather", c.inputs, axis=int(c.attrs["axis"]))


@rule("take_along_axis")
def _take_along_axis(ctx: Emitter, c: Call) -> str:
    return ctx.op("GatherElements", c.inputs, axis=int(c.attrs["axis"]))


@rule("one_hot")
def _one_hot(ctx: Emitter, c: Call) -> str:
    # idx[..., None] == arange(depth), like the reference (an out-of-range index gives zeros)
    idx = c.inputs[0]
    depth = ctx.const(np.arange(int(c.attrs["depth"]), dtype=c.in_types[0].dtype), hint="arange")
    hit = ctx.op("Equal", [ctx.op("Unsqueeze", [idx, ctx.ints([-1])]), depth])
    return ctx.op("Cast", [hit], to=ONNX_DTYPES[c.dtype], hint="one_hot")
