"""Code generation of elementwise and fused kernels (with an optional reduction epilogue).

A kernel is generated from a *program* in the format of :mod:`kiln.core.ops.fused` (a plain
elementwise or reduction node is a one-instruction program) and the ops' ``scalar`` bodies. It
is specialized on dtypes, on the loop rank and on a class per operand, never on sizes:

* ``"S"``: the operand is a single element (every stride 0): loaded once;
* ``"Z"``: its innermost stride is 0 (broadcast along the inner loop): loaded once per row;
* ``"N"``: anything else: loaded per element, strides are run-time values;
* ``"O"``: the operand IS the output (an in-place update: same storage, same layout): loaded
  through the output array at the output's index, so LLVM sees one array read then written
  element by element, and vectorizes (with two arrays that overlap, its run-time alias check
  fails and the scalar loop runs); ``"E0"``, ``"E1"`` ...: the same for a side output.

A loop may store side outputs (``extra``: instruction indices) besides its result: chains
like a momentum update (``v`` then ``p + v``) run as one pass over memory. Without reduction
they share the result's shape and layout (one offset each: ``out_index + d``); a reduction's
side outputs have the iteration space's shape and strides of their own (its output has
stride 0 along the reduced dims), so a value and its sum come from one pass (a ReLU gradient
and the bias gradient summed from it, BatchNormalization's gradient and its channel sums). A
reduction loop may hold more reductions along its axes inside its program
(:func:`inner_reductions`): each accumulates into an array ``r<k>`` of its own in the
output's layout (its offset closes ``p``), with its own identity, combine and mean.

Every array argument is a flat (1-D, C-contiguous) storage root; offsets, strides and sizes come
in one int64 array ``p`` (scalar arguments would cost ~1 us each). Indices are cast to uint64 so
numba emits no negative-index wraparound, which lets LLVM vectorize the inner loop (it versions
the loop on unit strides).

The output of a reduction has stride 0 along reduced dims; with class ``"Z"`` the inner loop
accumulates in a register (vectorized with fastmath reassociation), otherwise in memory. A
float32 sum or mean accumulates in float64 (:func:`wide_accumulators`: a float64 register, or a
scratch array of the output's size that the kernel allocates) and is rounded once at the end.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from kiln.core.ir import TensorType
from kiln.core.ops.registry import ELEMENTWISE, REDUCE, get_op

CTOR = {"float32": "np.float32", "float64": "np.float64", "int32": "np.int32",
        "int64": "np.int64", "bool": "np.bool_"}

_LITERAL = re.compile(r"(?<![\w.{])(\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+|\d+(?:[eE][-+]?\d+)?)"
                      r"(?![\w.}])")

REDUCE_OPS = ("sum", "mean", "max", "min", "prod")

_IDENTITY = {
    "sum": {"f": "0.0", "i": "0"},
    "mean": {"f": "0.0", "i": "0"},
    "prod": {"f": "1.0", "i": "1"},
    "max": {"f": "-np.inf", "int32": "-2147483648", "int64": "-9223372036854775808"},
    "min": {"f": "np.inf", "int32": "2147483647", "int64": "9223372036854775807"},
}

_COMBINE = {
    "sum": "{a} + {b}",
    "mean": "{a} + {b}",
    "prod": "{a} * {b}",
    "max": "({b} if ({b} > {a} or {b} != {b}) else {a})",
    "min": "({b} if ({b} < {a} or {b} != {b}) else {a})",
}


def identity(op: str, value_dtype: str) -> str:
    """The literal a reduction ``op`` of ``value_dtype`` values starts from."""
    kind = "f" if value_dtype.startswith("float") else value_dtype
    return _IDENTITY[op].get(kind) or _IDENTITY[op]["i"]


class CodegenError(ValueError):
    """The program cannot be generated (the executor then uses the reference)."""


# float32 bodies faster than numba's libm calls, of known accuracy (kiln/core/backends/cpu/
# scalars.py): op -> (body, the scalars function it calls).
FAST_F32: dict[str, tuple[str, str]] = {"tanh": ("_tanh32({0})", "tanh32"),
                                        "sigmoid": ("_sigmoid32({0})", "sigmoid32"),
                                        "erf": ("_erf32({0})", "erf32")}
# and the libm calls of every float32 body: NumPy's name -> the scalars function (which
# vectorizes, where a libm call keeps the loop scalar)
F32_CALLS = {"exp": "exp32", "log": "log32", "log1p": "log1p32", "expm1": "expm1_32",
             "sin": "sin32", "cos": "cos32"}
_F32_CALL = re.compile(r"\bnp\.(" + "|".join(F32_CALLS) + r")\(")


def loop_body(op_name: str, attrs: tuple, f32: bool) -> tuple[str, set[str]]:
    """The scalar body of ``op_name`` in a generated loop (``{0}``... its arguments) and the
    ``scalars.py`` functions it calls (imported as ``_<name>``): in a float32 loop the fast
    body of ``FAST_F32`` where there is one, else the op's own with float32 literals and
    ``F32_CALLS`` in place of NumPy's functions."""
    if f32 and op_name in FAST_F32:
        body, helper = FAST_F32[op_name]
        return body, {helper}
    body = type_literals(scalar_body(op_name, attrs), "float32" if f32 else "")
    if not f32:
        return body, set()
    used: set[str] = set()

    def swap(m: re.Match) -> str:
        used.add(F32_CALLS[m.group(1)])
        return f"_{F32_CALLS[m.group(1)]}("
    return _F32_CALL.sub(swap, body), used


def _scalars_hash() -> str:
    """A digest of scalars.py as this process imported it (the numba kernels calling its
    functions carry it in their text, so it keys their cache)."""
    from kiln.core.backends.cpu.codegen import scalars

    return hashlib.sha256(scalars.SOURCE.encode()).hexdigest()[:16]


SCALARS_HASH = _scalars_hash()


def scalar_body(op_name: str, attrs: tuple) -> str:
    op = get_op(op_name)
    if op.kind != ELEMENTWISE or op.scalar is None:
        raise CodegenError(f"op {op_name} has no scalar body")
    body = op.scalar(**dict(attrs)) if callable(op.scalar) else op.scalar
    if not isinstance(body, str):
        raise CodegenError(f"op {op_name}: scalar body must be a string, got {body!r}")
    return body


def type_literals(body: str, dtype: str) -> str:
    """Wraps numeric literals in ``np.float32(...)`` so float32 math stays float32."""
    if dtype != "float32":
        return body
    return _LITERAL.sub(lambda m: f"np.float32({m.group(1)})", body)


def program_dtypes(program: tuple, in_dtypes: tuple[str, ...]) -> list[str]:
    """The dtype of each instruction's result (a reduction's inferred on a rank-8 operand,
    enough for its axes)."""
    out: list[str] = []
    for op_name, args, attrs in program:
        shape = (1,) * 8 if get_op(op_name).kind == REDUCE else ()
        types = [TensorType(shape, in_dtypes[-a - 1] if a < 0 else out[a]) for a in args]
        out.append(get_op(op_name).infer(*types, **dict(attrs)).dtype)
    return out


def inner_reductions(program: tuple) -> list[tuple[int, str, int]]:
    """The reductions left inside a reduction loop's elementwise part (a group ending with
    several reductions over the same axes: kiln/core/passes/fuse.py): ``(instruction index,
    op, index of the value reduced)``. Each accumulates into an output array of its own with
    the loop's output layout; nothing in the loop reads them."""
    return [(j, op, args[0]) for j, (op, args, _) in enumerate(program)
            if get_op(op).kind == REDUCE]


# Reductions whose float32 sums accumulate in float64 (``wide_accumulators``): a float32 running
# sum over the 73,728 values of a BatchNormalization channel (batch 32, 48 x 48) drifted by
# ~sqrt(n) ulps, and the gradient through the batch statistics multiplies that drift by n (the
# conv+BN SGD step was off by 4e-4 to 2e-2 relative to float64; with float64 accumulators 1e-6).
WIDE_OPS = ("sum", "mean")


def wide_accumulators(spec: LoopSpec) -> list[bool]:
    """Per accumulator of a reduction loop (its result's, then each inner reduction's): whether
    it is a float32 sum or mean of a long loop (``spec.wide``), which the loop accumulates in a
    float64 scratch array of the output's size (indexed relative to the output's offset) and
    rounds once at the end."""
    if spec.reduce is None:
        return []
    if not spec.wide:
        return [False] * (1 + len(inner_reductions(spec.program)))
    dtypes = program_dtypes(spec.program, spec.in_dtypes)
    return ([spec.reduce in WIDE_OPS and spec.out_dtype == "float32"]
            + [op in WIDE_OPS and dtypes[j] == "float32"
               for j, op, _ in inner_reductions(spec.program)])


@dataclass(frozen=True)
class LoopSpec:
    """What a generated loop kernel is specialized on (its cache identity)."""

    program: tuple            # elementwise instructions (the reduction split off)
    reduce: str | None        # sum / mean / max / min / prod, or None
    in_dtypes: tuple[str, ...]
    out_dtype: str
    rank: int
    classes: tuple[str, ...]  # per input: S / Z / N / O / E<k>
    out_class: str            # N, or Z for a reduction along the innermost loop
    extra: tuple[int, ...] = ()       # side outputs: instruction indices
    extra_dtypes: tuple[str, ...] = ()
    wide: bool = False        # float32 sums and means accumulate in float64 (long reductions)

    def signature(self) -> str:
        side = f" extra={self.extra}:{','.join(self.extra_dtypes)}" if self.extra else ""
        return (f"in={','.join(self.in_dtypes)} out={self.out_dtype} rank={self.rank} "
                f"classes={'.'.join(self.classes)}.{self.out_class} reduce={self.reduce}{side}"
                + (" wide" if self.wide else ""))


def split_program(program: tuple) -> tuple[tuple, str | None, tuple]:
    """(elementwise part, reduction op or None, reduction attrs)."""
    last_op, last_args, last_attrs = program[-1]
    if get_op(last_op).kind == REDUCE:
        if last_op not in REDUCE_OPS:
            raise CodegenError(f"reduction epilogue {last_op} is not generated")
        if len(program) == 1:
            # a plain reduction: the elementwise part is the identity on the input
            return (("stop_gradient", last_args, ()),), last_op, last_attrs
        # the reduced value is the result of instruction last_args[0] (or an input)
        head = program[:-1]
        src = last_args[0]
        if src != len(head) - 1:
            head = head + (("stop_gradient", (src,), ()),)
        return head, last_op, last_attrs
    return program, None, ()


# Operands of these ops are put in one order (bit for bit the same result in IEEE arithmetic),
# so that programs built from differently ordered graphs share a kernel: the LSTM model's two
# Adam updates (embedding and dense weights) were `v5 * t2` and `t2 * v5`, two compiles.
COMMUTATIVE = frozenset({"add", "mul"})


def canonical(program: tuple) -> tuple:
    """``program`` with the operands of its commutative instructions sorted."""
    return tuple((op, tuple(sorted(args)) if op in COMMUTATIVE and len(args) == 2 else args,
                  attrs) for op, args, attrs in program)


def params_index(rank: int, n_in: int) -> dict[str, Any]:
    """Where the parameter array ``p`` of a loop kernel keeps what: the sizes, the output's
    offset then strides, each input's offset then strides, then the output's size, the
    reduction count and the side outputs' offsets (from ``"extra"`` on), and in a reduction
    loop each side output's strides after those offsets (``extra + 2 + n_extra + k * rank``)."""
    base_in = 2 * rank + 1
    return {"sizes": 0, "out": rank, "inputs": [base_in + k * (rank + 1) for k in range(n_in)],
            "extra": base_in + n_in * (rank + 1)}


def params_length(rank: int, n_in: int, n_extra: int = 0, reduce: bool = False) -> int:
    """The parameters' length, without the offsets of the inner reductions' outputs of a
    reduction loop (``reduce``), which come last from there."""
    return params_index(rank, n_in)["extra"] + 2 + n_extra * (1 + rank * reduce)


def generate(spec: LoopSpec) -> str:
    """The source of ``kernel(o, a0, a1, ..., p)`` for ``spec``."""
    rank, n_in = spec.rank, len(spec.in_dtypes)
    idx = params_index(rank, n_in)
    dtypes = program_dtypes(spec.program, spec.in_dtypes)
    value_dtype = dtypes[-1]
    n_extra = len(spec.extra)
    own = spec.reduce is not None  # side outputs with strides of their own (module docstring)
    inner = inner_reductions(spec.program)
    wide = wide_accumulators(spec)  # float64 scratch arrays wo, wr<k>: relative indices
    if inner and (spec.reduce is None or any(op not in _COMBINE for _, op, _ in inner)):
        raise CodegenError("inner reductions need a generated reduction loop")
    args = ", ".join(["o"] + [f"e{k}" for k in range(n_extra)]
                     + [f"r{k}" for k in range(len(inner))] + [f"a{k}" for k in range(n_in)]
                     + ["p"])
    helpers: set[str] = set()
    lines = [f"def kernel({args}):"]
    ind = "    "
    emit = lines.append
    for d in range(rank):
        emit(f"{ind}n{d} = p[{d}]")
    emit(f"{ind}xo = p[{idx['out']}]")
    for d in range(rank):
        emit(f"{ind}so{d} = p[{idx['out'] + 1 + d}]")
    for k in range(n_extra):
        if own:
            emit(f"{ind}xe{k} = p[{idx['extra'] + 2 + k}]")
            for d in range(rank):
                emit(f"{ind}se{k}_{d} = p[{idx['extra'] + 2 + n_extra + k * rank + d}]")
        else:
            emit(f"{ind}d{k} = p[{idx['extra'] + 2 + k}] - xo")  # side output offset - xo
    for k in range(n_in):
        b = idx["inputs"][k]
        emit(f"{ind}x{k} = p[{b}]")
        if spec.classes[k] == "S":
            emit(f"{ind}v{k} = a{k}[np.uint64(x{k})]")
        elif spec.classes[k] in ("Z", "N"):
            for d in range(rank):
                emit(f"{ind}s{k}_{d} = p[{b + 1 + d}]")
    red = spec.reduce
    ctor_out = CTOR[spec.out_dtype]
    if red is not None and wide[0]:
        emit(f"{ind}wo = np.empty(p[{idx['extra']}], np.float64)")
        emit(f"{ind}for q in range(p[{idx['extra']}]):")
        emit(f"{ind}    wo[q] = np.float64({identity(red, value_dtype)})")
    elif red is not None:
        emit(f"{ind}ident = {ctor_out}({identity(red, value_dtype)})")
        emit(f"{ind}for q in range(p[{idx['extra']}]):")
        emit(f"{ind}    o[np.uint64(xo + q)] = ident")
    base_r = idx["extra"] + 2 + n_extra * (1 + rank)
    for k, (j, op, src) in enumerate(inner):  # offsets relative to the output's, its layout
        src_dt = spec.in_dtypes[-src - 1] if src < 0 else dtypes[src]
        emit(f"{ind}dr{k} = p[{base_r + k}] - xo")
        if wide[1 + k]:
            emit(f"{ind}wr{k} = np.empty(p[{idx['extra']}], np.float64)")
        emit(f"{ind}for q in range(p[{idx['extra']}]):")
        if wide[1 + k]:
            emit(f"{ind}    wr{k}[q] = np.float64({identity(op, src_dt)})")
        else:
            emit(f"{ind}    r{k}[np.uint64(xo + dr{k} + q)] = {CTOR[dtypes[j]]}("
                 f"{identity(op, src_dt)})")
    # loop nest: per level offsets
    depth = 1
    last = rank - 1
    loop = f"range(n{last})"
    prev = {k: f"x{k}" for k in range(n_in)}
    prev_o = "xo"
    prev_e = {k: f"xe{k}" for k in range(n_extra)}
    for d in range(rank - 1):
        pad = ind * depth
        emit(f"{pad}for i{d} in range(n{d}):")
        pad = ind * (depth + 1)
        emit(f"{pad}xo_{d} = {prev_o} + i{d} * so{d}")
        prev_o = f"xo_{d}"
        for k in range(n_extra if own else 0):
            emit(f"{pad}xe{k}_{d} = {prev_e[k]} + i{d} * se{k}_{d}")
            prev_e[k] = f"xe{k}_{d}"
        for k in range(n_in):
            if spec.classes[k] not in ("Z", "N"):
                continue
            emit(f"{pad}x{k}_{d} = {prev[k]} + i{d} * s{k}_{d}")
            prev[k] = f"x{k}_{d}"
        depth += 1
    pad = ind * depth
    for k in range(n_in):
        if spec.classes[k] == "Z":
            emit(f"{pad}v{k} = a{k}[np.uint64({prev[k]})]")
    if red is not None and spec.out_class == "Z":
        emit(f"{pad}acc = wo[np.uint64({prev_o} - xo)]" if wide[0]
             else f"{pad}acc = o[np.uint64({prev_o})]")
        for k in range(len(inner)):
            emit(f"{pad}acc{k} = wr{k}[np.uint64({prev_o} - xo)]" if wide[1 + k]
                 else f"{pad}acc{k} = r{k}[np.uint64({prev_o} + dr{k})]")
    emit(f"{pad}for i{last} in {loop}:")
    pad = ind * (depth + 1)
    out_index = f"{prev_o} + i{last} * so{last}"
    for k in range(n_in):
        c = spec.classes[k]
        if c == "N":
            emit(f"{pad}v{k} = a{k}[np.uint64({prev[k]} + i{last} * s{k}_{last})]")
        elif c == "O":
            emit(f"{pad}v{k} = o[np.uint64({out_index})]")
        elif c.startswith("E"):
            j = int(c[1:])
            at = f"{prev_e[j]} + i{last} * se{j}_{last}" if own else f"{out_index} + d{j}"
            emit(f"{pad}v{k} = e{j}[np.uint64({at})]")
    inner_at = {j: k for k, (j, _, _) in enumerate(inner)}
    for j, (op_name, iargs, attrs) in enumerate(spec.program):
        names = [f"v{-a - 1}" if a < 0 else f"t{a}" for a in iargs]
        arg_dtypes = [spec.in_dtypes[-a - 1] if a < 0 else dtypes[a] for a in iargs]
        if j in inner_at:  # accumulated like the result (below), into its own array
            k, ctor = inner_at[j], CTOR[dtypes[j]]
            value = f"{ctor}({names[0]})"
            if wide[1 + k]:  # the float32 value, added in float64
                value, ctor = f"np.float64({value})", "np.float64"
            if spec.out_class == "Z":
                emit(f"{pad}acc{k} = {ctor}({_COMBINE[op_name].format(a=f'acc{k}', b=value)})")
            elif wide[1 + k]:
                at = f"np.uint64({prev_o} + i{last} * so{last} - xo)"
                emit(f"{pad}wr{k}[{at}] = {ctor}("
                     f"{_COMBINE[op_name].format(a=f'wr{k}[{at}]', b=value)})")
            else:
                at = f"np.uint64({prev_o} + i{last} * so{last} + dr{k})"
                emit(f"{pad}r{k}[{at}] = {ctor}("
                     f"{_COMBINE[op_name].format(a=f'r{k}[{at}]', b=value)})")
            continue
        floats = {t for t in arg_dtypes + [dtypes[j]] if t.startswith("float")}
        body, used = loop_body(op_name, attrs, floats == {"float32"})
        helpers |= used
        emit(f"{pad}t{j} = {CTOR[dtypes[j]]}({body.format(*names)})")
    result = f"t{len(spec.program) - 1}"
    if value_dtype != spec.out_dtype:
        emit(f"{pad}{result} = {ctor_out}({result})")
    for k, (j, dt) in enumerate(zip(spec.extra, spec.extra_dtypes)):
        value = f"t{j}" if dtypes[j] == dt else f"{CTOR[dt]}(t{j})"
        at = f"{prev_e[k]} + i{last} * se{k}_{last}" if own else f"{out_index} + d{k}"
        emit(f"{pad}e{k}[np.uint64({at})] = {value}")
    if red is None:
        emit(f"{pad}o[np.uint64({out_index})] = {result}")
    elif spec.out_class == "Z":
        if wide[0]:
            total = _COMBINE[red].format(a="acc", b=f"np.float64({result})")
            emit(f"{pad}acc = np.float64({total})")
            emit(f"{ind * depth}wo[np.uint64({prev_o} - xo)] = acc")
        else:
            emit(f"{pad}acc = {ctor_out}({_COMBINE[red].format(a='acc', b=result)})")
            emit(f"{ind * depth}o[np.uint64({prev_o})] = acc")
        for k in range(len(inner)):
            emit(f"{ind * depth}wr{k}[np.uint64({prev_o} - xo)] = acc{k}" if wide[1 + k]
                 else f"{ind * depth}r{k}[np.uint64({prev_o} + dr{k})] = acc{k}")
    elif wide[0]:
        emit(f"{pad}io = np.uint64({prev_o} + i{last} * so{last} - xo)")
        emit(f"{pad}wo[io] = np.float64("
             f"{_COMBINE[red].format(a='wo[io]', b=f'np.float64({result})')})")
    else:
        emit(f"{pad}io = np.uint64({prev_o} + i{last} * so{last})")
        emit(f"{pad}o[io] = {ctor_out}({_COMBINE[red].format(a='o[io]', b=result)})")
    # the float64 accumulators rounded once into their outputs (a mean divided first)
    accs = [("o", "wo", "xo", ctor_out, red)] if red is not None else []
    accs += [(f"r{k}", f"wr{k}", f"xo + dr{k}", CTOR[dtypes[j]], op)
             for k, (j, op, _) in enumerate(inner)]
    for (arr, w, start, ctor, op), is_wide in zip(accs, wide):
        if not is_wide:
            continue
        total = f"{w}[q] / p[{idx['extra'] + 1}]" if op == "mean" else f"{w}[q]"
        emit(f"{ind}for q in range(p[{idx['extra']}]):")
        emit(f"{ind}    {arr}[np.uint64({start} + q)] = {ctor}({total})")
    means = [("o", "xo", ctor_out)] if red == "mean" and not wide[0] else []
    means += [(f"r{k}", f"xo + dr{k}", CTOR[dtypes[j]])
              for k, (j, op, _) in enumerate(inner) if op == "mean" and not wide[1 + k]]
    for arr, start, ctor in means:
        at = f"np.uint64({start} + q)"
        emit(f"{ind}for q in range(p[{idx['extra']}]):")
        emit(f"{ind}    {arr}[{at}] = {ctor}({arr}[{at}] / p[{idx['extra'] + 1}])")
    prelude = "".join(f"from kiln.core.backends.cpu.codegen.scalars_numba import {h} as _{h}  "
                      f"# scalars {SCALARS_HASH}\n" for h in sorted(helpers))
    prelude += "\n\n" if prelude else ""
    return prelude + "\n".join(lines) + "\n"


def label(program: tuple) -> str:
    """A short human-readable name of a program (for the profiler)."""
    ops = [op for op, _, _ in program]
    if len(ops) == 1:
        return ops[0]
    return "fused[" + ",".join(ops) + "]"
