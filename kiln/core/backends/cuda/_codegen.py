"""Code generation for elementwise ops, ``fused`` nodes and reductions, from the ops' scalar
bodies (``OpDef.scalar``), specialized per dtype, rank and input kind, never per shape.

A scalar body such as ``"np.exp({0})"`` becomes CUDA Python: ``np.NAME`` maps to ``math.NAME``
(or a prelude device function for floor/ceil/rint), numeric literals take the operands' dtype
(``float32(1.0)``, so float32 math stays float32 on the GPU) and each instruction's result is
converted to its dtype: ``v0 = float32(math.exp(x0))``.

Two kernel shapes come out of here:

* a grid-stride *loop kernel* over an iteration space (elementwise ops, fused groups, strided
  copies): each input is read as ``contig`` (``a[off + i]``), ``scalar`` or ``general`` (the
  flat index unravelled over the coalesced dims, dotted with the input's strides; broadcast
  axes have stride 0);
* a *reduction kernel* over (kept dims, reduced dims): ``block`` mode gives each output row a
  block and combines in shared memory with a tree; ``thread`` mode gives each row a thread
  (coalesced when the reduced axes are the leading ones, e.g. a bias gradient). The element
  expression is any elementwise program, which is how a fused reduction epilogue runs in one
  kernel.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from kiln.core.ir import TensorType
from kiln.core.ops.registry import ELEMENTWISE, REDUCE, get_op

CTOR = {"float32": "float32", "float64": "float64", "int32": "int32", "int64": "int64",
        "bool": "bool_"}

# np.NAME in scalar bodies -> CUDA Python (functions of `math` are kept as they are).
_NP = {"exp": "math.exp", "expm1": "math.expm1", "log": "math.log", "log1p": "math.log1p",
       "sqrt": "math.sqrt", "sin": "math.sin", "cos": "math.cos", "tan": "math.tan",
       "tanh": "math.tanh", "sinh": "math.sinh", "cosh": "math.cosh", "arctan": "math.atan",
       "arcsin": "math.asin", "arccos": "math.acos", "log2": "math.log2",
       "log10": "math.log10", "floor": "_floor", "ceil": "_ceil", "rint": "_rint",
       "round": "_rint", "abs": "abs", "absolute": "abs", "fabs": "abs", "pi": "math.pi",
       "e": "math.e", "inf": "_INF"}
_NP_RE = re.compile(r"\bnp\.(\w+)")
_MATH_RE = re.compile(r"\bmath\.(\w+)")
_LIT_RE = re.compile(r"(?<![\w.])(\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|"
                     r"\d+(?:[eE][-+]?\d+)?)(?![\w.])")


class Untranslatable(Exception):
    """A body or op the generator cannot turn into CUDA code (the op falls back to the host)."""


def scalar_body(op_name: str, attrs: dict[str, Any]) -> str:
    op = get_op(op_name)
    body = op.scalar
    if body is None:
        raise Untranslatable(f"{op_name} has no scalar body")
    if callable(body):
        try:
            body = body(**attrs)
        except TypeError:
            body = body(attrs)
    return str(body)


def translate(body: str, args: Sequence[str], literal_dtype: str | None) -> str:
    """A scalar body with operands ``args``, as CUDA Python."""
    def np_name(m: re.Match) -> str:
        name = m.group(1)
        if name not in _NP:
            raise Untranslatable(f"np.{name} has no CUDA equivalent in kiln's generator")
        return _NP[name]

    def math_name(m: re.Match) -> str:
        name = m.group(1)
        if name == "floor":
            return "_floor"
        if name == "ceil":
            return "_ceil"
        if not hasattr(math, name):
            raise Untranslatable(f"math.{name} is unknown")
        return m.group(0)

    text = _MATH_RE.sub(math_name, body)
    text = _NP_RE.sub(np_name, text)
    try:
        text = text.format(*args)
    except (IndexError, KeyError) as exc:
        raise Untranslatable(f"bad scalar body {body!r}: {exc}") from None
    if literal_dtype is not None and literal_dtype != "bool":
        ctor = CTOR[literal_dtype]
        is_int = literal_dtype.startswith("int")

        def lit(m: re.Match) -> str:
            s = m.group(1)
            if is_int and not re.fullmatch(r"\d+", s):
                return s  # a float literal with an int operand keeps NumPy's promotion
            return f"{ctor}({s})"

        text = _LIT_RE.sub(lit, text)
    return text


def instruction(op_name: str, attrs: dict[str, Any], args: Sequence[str],
                arg_dtypes: Sequence[str], out_dtype: str) -> str:
    """The expression computing one elementwise instruction, converted to ``out_dtype``."""
    if get_op(op_name).kind != ELEMENTWISE:
        raise Untranslatable(f"{op_name} is not elementwise")
    lit = next((d for d in arg_dtypes if d != "bool"), None)
    body = translate(scalar_body(op_name, attrs), args, lit)
    return f"{CTOR[out_dtype]}({body})"


def element_program(program: Sequence, in_types: Sequence[TensorType]
                    ) -> tuple[list[str], str, str, tuple | None]:
    """Lines computing a fused program's elementwise part from inputs ``x0, x1, ...``.

    Returns ``(lines, value_name, value_dtype, reduction)``: ``reduction`` is ``(op_name,
    attrs)`` of a trailing reduce instruction (whose operand is ``value_name``), else None.
    """
    names: list[str] = []
    types: list[TensorType] = []
    lines: list[str] = []
    reduction = None
    last = len(program) - 1

    def ref(a: int) -> tuple[str, TensorType]:
        return (f"x{-a - 1}", in_types[-a - 1]) if a < 0 else (names[a], types[a])

    for j, (op_name, args, attrs) in enumerate(program):
        attrs = dict(attrs)
        refs = [ref(a) for a in args]
        op = get_op(op_name)
        out_t = op.infer(*[t for _, t in refs], **attrs)
        if op.kind == REDUCE:
            if j != last or len(refs) != 1:
                raise Untranslatable("a reduction must be the last instruction")
            reduction = (op_name, attrs)
            return lines, refs[0][0], refs[0][1].dtype, reduction
        expr = instruction(op_name, attrs, [n for n, _ in refs], [t.dtype for _, t in refs],
                           out_t.dtype)
        lines.append(f"v{j} = {expr}")
        names.append(f"v{j}")
        types.append(out_t)
    return lines, names[-1], types[-1].dtype, reduction


# ---- loop kernels -------------------------------------------------------------------------
CONTIG, SCALAR, GENERAL = "contig", "scalar", "general"


def input_kind(shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    from kiln.core.layout import contiguous_strides

    if all(s == 0 for s in strides):
        return SCALAR
    if tuple(strides) == contiguous_strides(shape):
        return CONTIG
    return GENERAL


def loop_source(nd: int, out_kind: str, in_kinds: Sequence[str], lines: Sequence[str],
                result: str, name: str = "k_loop") -> str:
    """A grid-stride loop kernel. Arguments: ``n, d0.., out, oo, [os0..], then per input
    a_k, ao_k, [as_k_0..]`` (strides only for ``general`` operands)."""
    dims = [f"d{d}" for d in range(nd)]
    params = ["n", *dims, "out", "oo"]
    if out_kind == GENERAL:
        params += [f"os{d}" for d in range(nd)]
    for k, kind in enumerate(in_kinds):
        params += [f"a{k}", f"ao{k}"]
        if kind == GENERAL:
            params += [f"as{k}_{d}" for d in range(nd)]
    body = [f"def {name}({', '.join(params)}):"]
    for k, kind in enumerate(in_kinds):
        if kind == SCALAR:
            body.append(f"    x{k} = a{k}[ao{k}]")
    body += ["    i = cuda.grid(1)", "    step = cuda.gridsize(1)", "    while i < n:"]
    general = out_kind == GENERAL or GENERAL in in_kinds
    if general and nd:
        body.append("        r = i")
        for d in range(nd - 1, 0, -1):
            body.append(f"        c{d} = r % d{d}")
            body.append(f"        r = r // d{d}")
        body.append("        c0 = r")
    for k, kind in enumerate(in_kinds):
        if kind == CONTIG:
            body.append(f"        x{k} = a{k}[ao{k} + i]")
        elif kind == GENERAL:
            idx = " + ".join(f"c{d} * as{k}_{d}" for d in range(nd)) or "0"
            body.append(f"        x{k} = a{k}[ao{k} + {idx}]")
    body += [f"        {line}" for line in lines]
    if out_kind == GENERAL:
        idx = " + ".join(f"c{d} * os{d}" for d in range(nd)) or "0"
        body.append(f"        out[oo + {idx}] = {result}")
    else:
        body.append(f"        out[oo + i] = {result}")
    body += ["        i += step", ""]
    return "\n".join(body) + "\n"


# ---- reduction kernels --------------------------------------------------------------------
def _acc_dtype(op: str, in_dtype: str) -> str:
    if op == "mean" and not in_dtype.startswith("float"):
        return "float64"
    return in_dtype


def _extreme(dtype: str, low: bool) -> str:
    if dtype.startswith("float"):
        return "-_INF" if low else "_INF"
    bits = 31 if dtype == "int32" else 63
    return (f"{CTOR[dtype]}(-{2 ** bits - 1} - 1)" if low else f"{CTOR[dtype]}({2 ** bits - 1})")


def _simple(op: str, acc: str) -> tuple[str, str]:
    """(init, combine template with {a} and {b}) of a one-pass reduction."""
    c = CTOR[acc]
    return {
        "sum": (f"{c}(0)", "{a} + {b}"),
        "mean": (f"{c}(0)", "{a} + {b}"),
        "prod": (f"{c}(1)", "{a} * {b}"),
        "max": (_extreme(acc, True), "_maxn({a}, {b})"),
        "min": (_extreme(acc, False), "_minn({a}, {b})"),
    }[op]


REDUCE_OPS = frozenset({"sum", "mean", "prod", "max", "min", "logsumexp", "argmax", "argmin"})


def reduce_source(op: str, mode: str, block: int, nk: int, nr: int, in_kinds: Sequence[str],
                  lines: Sequence[str], value: str, value_dtype: str, out_dtype: str,
                  name: str = "k_red") -> str:
    """A reduction kernel (see the module docstring). Arguments: ``nrow, nred, k0.., r0..,
    out, oo, then per input a_k, ao_k, [ak_k_0.., ar_k_0..]`` (strides for ``general``)."""
    if op not in REDUCE_OPS:
        raise Untranslatable(f"no CUDA reduction for {op}")
    acc = _acc_dtype(op, value_dtype)
    c = CTOR[acc]
    params = ["nrow", "nred", *[f"k{d}" for d in range(nk)], *[f"r{d}" for d in range(nr)],
              "out", "oo"]
    for k, kind in enumerate(in_kinds):
        params += [f"a{k}", f"ao{k}"]
        if kind == GENERAL:
            params += [f"ak{k}_{d}" for d in range(nk)] + [f"ar{k}_{d}" for d in range(nr)]
    src = [f"def {name}({', '.join(params)}):"]
    block_mode = mode == "block"
    if block_mode:
        src.append(f"    sm = cuda.shared.array({block}, {c})")
        if op in ("argmax", "argmin"):
            src.append(f"    smi = cuda.shared.array({block}, int64)")
        src += ["    tid = cuda.threadIdx.x", "    row = cuda.blockIdx.x",
                "    rstep = cuda.gridDim.x"]
    else:
        src += ["    row = cuda.grid(1)", "    rstep = cuda.gridsize(1)"]
    for k, kind in enumerate(in_kinds):
        if kind == SCALAR:
            src.append(f"    x{k} = a{k}[ao{k}]")
    src.append("    while row < nrow:")
    ind = " " * 8
    if nk:
        src.append(f"{ind}q = row")
        for d in range(nk - 1, 0, -1):
            src += [f"{ind}e{d} = q % k{d}", f"{ind}q = q // k{d}"]
        src.append(f"{ind}e0 = q")
    for k, kind in enumerate(in_kinds):
        if kind == GENERAL:
            base = " + ".join([f"ao{k}"] + [f"e{d} * ak{k}_{d}" for d in range(nk)])
            src.append(f"{ind}b{k} = {base}")

    def loop(acc_lines_init: list[str], update: list[str]) -> list[str]:
        """The loop over this row's reduced elements: loads, element program, update."""
        out = list(acc_lines_init)
        start, step = ("tid", str(block)) if block_mode else ("0", "1")
        out += [f"{ind}j = {start}", f"{ind}while j < nred:"]
        inner = ind + "    "
        if nr and GENERAL in in_kinds:
            out.append(f"{inner}q = j")
            for d in range(nr - 1, 0, -1):
                out += [f"{inner}f{d} = q % r{d}", f"{inner}q = q // r{d}"]
            out.append(f"{inner}f0 = q")
        for k, kind in enumerate(in_kinds):
            if kind == GENERAL:
                idx = " + ".join([f"b{k}"] + [f"f{d} * ar{k}_{d}" for d in range(nr)])
                out.append(f"{inner}x{k} = a{k}[{idx}]")
        out += [f"{inner}{line}" for line in lines]
        out += [f"{inner}{u}" for u in update]
        out += [f"{inner}j += {step}"]
        return out

    def tree(combine: str) -> list[str]:
        """Block-wide combine of `acc` into sm[0] (then every thread reads it)."""
        return [f"{ind}sm[tid] = acc", f"{ind}cuda.syncthreads()", f"{ind}s = {block // 2}",
                f"{ind}while s > 0:", f"{ind}    if tid < s:",
                f"{ind}        sm[tid] = {combine.format(a='sm[tid]', b='sm[tid + s]')}",
                f"{ind}    cuda.syncthreads()", f"{ind}    s //= 2",
                f"{ind}acc = sm[0]", f"{ind}cuda.syncthreads()"]

    def store(expr: str) -> list[str]:
        line = f"out[oo + row] = {CTOR[out_dtype]}({expr})"
        if block_mode:
            return [f"{ind}if tid == 0:", f"{ind}    {line}"]
        return [f"{ind}{line}"]

    if op in ("sum", "mean", "prod", "max", "min"):
        init, combine = _simple(op, acc)
        src += loop([f"{ind}acc = {init}"],
                    [f"acc = {combine.format(a='acc', b=f'{c}({value})')}"])
        if block_mode:
            src += tree(combine)
        final = f"acc / {c}(nred)" if op == "mean" else "acc"
        src += store(final)
    elif op == "logsumexp":
        src += loop([f"{ind}acc = -_INF"], [f"acc = _maxn(acc, {c}({value}))"])
        if block_mode:
            src += tree("_maxn({a}, {b})")
        src += [f"{ind}m = acc", f"{ind}if not (m > -_INF and m < _INF):",
                f"{ind}    m = {c}(0)"]
        src += loop([f"{ind}acc = {c}(0)"], [f"acc = acc + {c}(math.exp({c}({value}) - m))"])
        if block_mode:
            src += tree("{a} + {b}")
        src += store("math.log(acc) + m")
    else:  # argmax / argmin: first index of the extreme value
        cmp = ">" if op == "argmax" else "<"
        src += loop([f"{ind}acc = {c}(0)", f"{ind}ai = nred"],
                    [f"w = {c}({value})",
                     f"if ai == nred or w {cmp} acc:",
                     "    acc = w",
                     "    ai = j"])
        if block_mode:
            src += [f"{ind}sm[tid] = acc", f"{ind}smi[tid] = ai", f"{ind}cuda.syncthreads()",
                    f"{ind}s = {block // 2}", f"{ind}while s > 0:", f"{ind}    if tid < s:",
                    f"{ind}        ov = sm[tid + s]", f"{ind}        oi = smi[tid + s]",
                    f"{ind}        mv = sm[tid]", f"{ind}        mi = smi[tid]",
                    f"{ind}        if oi < nred and (mi == nred or ov {cmp} mv or "
                    "(ov == mv and oi < mi)):",
                    f"{ind}            sm[tid] = ov", f"{ind}            smi[tid] = oi",
                    f"{ind}    cuda.syncthreads()", f"{ind}    s //= 2",
                    f"{ind}ai = smi[0]", f"{ind}cuda.syncthreads()"]
        src += store("ai")
    src += [f"{ind}row += rstep", ""]
    return "\n".join(src) + "\n"
