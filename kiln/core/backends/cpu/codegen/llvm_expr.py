"""Scalar Python expressions as LLVM IR, for the native loop generator (:mod:`.llvm_loop`).

An op's scalar body is a Python expression (``"np.exp({0})"``, ``"(0 if {0} <= 0 else
{0})"``: the one definition numba compiles and ``KILN_JIT=0`` runs). :class:`Expr` lowers
such an expression, parsed with :mod:`ast`, to LLVM instructions with numba's typing rules,
so that a loop generated here computes what the numba kernel of the same program computes:

* literals: ``int`` -> int64, ``float`` -> float64, ``bool`` -> boolean (the float32 programs
  wrap their literals in ``np.float32(...)``, ``spec.type_literals``);
* arithmetic: integers (and booleans) compute in int64 (numba's machine-int promotion; every
  instruction's result is cast back to its dtype, so wrapping is the same); floats in the
  wider of the two, float64 when mixed with an integer; ``/`` is true division (float64 for
  integers); ``**`` only on floats;
* integer ``<<``, ``>>`` (arithmetic), ``&`` and ``|`` in int32 when both sides are, else
  int64;
* ``x if c else y`` evaluates both sides (they have no side effects: a float division by zero
  is inf, not a trap) and selects; its type unifies both sides;
* ``max(a, b)`` / ``min(a, b)`` are Python's (``b if b > a else a``: ``max(nan, 1.0)`` is
  nan, ``max(1.0, nan)`` is 1.0), comparisons are ordered except ``!=``;
* calls: the ``np.float32`` ... constructors (casts; float to int truncates), ``np.exp``,
  ``np.log``, ``np.log1p``, ``np.expm1``, ``np.sqrt``, ``np.sin``, ``np.cos``, ``np.tanh``,
  ``np.floor``, ``np.ceil``, ``np.rint``, ``math.erf`` (in the argument's float type: float32
  calls ``expf`` ...), ``abs``, ``x.view(np.float32)`` (a bit cast), and the functions of
  ``scalars.py``, expanded in place from their source (straight-line assignments and
  ``if c: return v``, which becomes a select).

Anything else raises :class:`~kiln.core.backends.cpu.codegen.spec.CodegenError`: the caller then
uses the numba kernel of the same program.
"""

from __future__ import annotations

import ast
import math
import struct
from dataclasses import dataclass

import numpy as np

from kiln.core.backends.cpu.codegen.spec import CodegenError

# kiln dtype <-> expression type; an expression type's LLVM type
DTYPE_TYPE = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "b"}
LL = {"f32": "float", "f64": "double", "i32": "i32", "i64": "i64", "b": "i1"}
FLOATS = ("f32", "f64")
INTS = ("b", "i32", "i64")
_CTORS = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool_": "b"}
# integer bit operations (``>>`` is NumPy's on signed integers: arithmetic)
_BITS = {"<<": "shl", ">>": "ashr", "&": "and", "|": "or"}

# unary float functions: name -> (LLVM intrinsic or libm base name, is_intrinsic)
_FUNCS = {"exp": ("exp", True), "log": ("log", True), "sqrt": ("sqrt", True),
          "sin": ("sin", True), "cos": ("cos", True), "floor": ("floor", True),
          "ceil": ("ceil", True), "rint": ("rint", True), "log1p": ("log1p", False),
          "expm1": ("expm1", False), "tanh": ("tanh", False), "erf": ("erf", False)}
_NP_FUNCS = frozenset({"exp", "log", "sqrt", "sin", "cos", "floor", "ceil", "rint", "log1p",
                       "expm1", "tanh"})
_MATH_FUNCS = frozenset({"erf", "exp", "log", "sqrt", "sin", "cos", "floor", "ceil", "log1p",
                         "expm1", "tanh"})

# the libm functions a native kernel may call (resolved in this process when loading)
LIBM = tuple(sorted({n for n, (_, intr) in _FUNCS.items()} | {"pow"}))


@dataclass(frozen=True)
class Val:
    """An SSA value (or a constant's text) and its expression type."""

    ref: str
    ty: str


def const(value: float | int | bool, ty: str) -> Val:
    """A constant of type ``ty`` (floats as exact hex: LLVM takes a decimal float constant
    only when it is exact in its type)."""
    if ty == "b":
        return Val("true" if value else "false", ty)
    if ty in INTS:
        return Val(str(int(value)), ty)
    v = float(np.float32(value)) if ty == "f32" else float(value)
    bits = struct.unpack("<Q", struct.pack("<d", v))[0]
    return Val(f"0x{bits:016X}", ty)


def promote(a: str, b: str) -> str:
    """The type numba computes ``a op b`` in (arithmetic)."""
    if a in FLOATS or b in FLOATS:
        if a in FLOATS and b in FLOATS:
            return "f64" if "f64" in (a, b) else "f32"
        f, other = (a, b) if a in FLOATS else (b, a)
        return f if other == "b" else "f64"
    return "i64"


def unify(a: str, b: str) -> str:
    """The type of ``x if c else y`` for branch types ``a`` and ``b``."""
    return a if a == b else promote(a, b)


class Expr:
    """Emits the instructions of scalar expressions into ``lines`` (SSA names from one
    counter shared with the caller's other instructions).

    Args:
        lines: the instruction list (of the function being generated).
        counter: a one-element list, the next SSA number (shared with the caller).
        fast: LLVM fast-math flags for float instructions (``""`` or e.g.
            ``"reassoc nsz contract "``).
        declare: a set collecting the declarations the module needs (intrinsics, libm).
    """

    def __init__(self, lines: list[str], counter: list[int], fast: str, declare: set[str]):
        self.lines = lines
        self.counter = counter
        self.fast = fast
        self.declare = declare

    # ---- helpers -------------------------------------------------------------------------
    def tmp(self) -> str:
        self.counter[0] += 1
        return f"%t{self.counter[0]}"

    def op(self, text: str, ty: str) -> Val:
        name = self.tmp()
        self.lines.append(f"  {name} = {text}")
        return Val(name, ty)

    def cast(self, v: Val, ty: str) -> Val:
        """``v`` converted to ``ty`` as numba's casts do (float -> int truncates; -> bool is
        ``!= 0``, true for NaN)."""
        src = v.ty
        if src == ty:
            return v
        if ty == "b":
            if src in FLOATS:
                return self.op(f"fcmp une {LL[src]} {v.ref}, {const(0.0, src).ref}", "b")
            return self.op(f"icmp ne {LL[src]} {v.ref}, 0", "b")
        if src == "b":
            if ty in FLOATS:
                return self.op(f"uitofp i1 {v.ref} to {LL[ty]}", ty)
            return self.op(f"zext i1 {v.ref} to {LL[ty]}", ty)
        if src in FLOATS and ty in FLOATS:
            kind = "fpext" if ty == "f64" else "fptrunc"
            return self.op(f"{kind} {LL[src]} {v.ref} to {LL[ty]}", ty)
        if src in FLOATS:
            return self.op(f"fptosi {LL[src]} {v.ref} to {LL[ty]}", ty)
        if ty in FLOATS:
            return self.op(f"sitofp {LL[src]} {v.ref} to {LL[ty]}", ty)
        kind = "sext" if ty == "i64" else "trunc"
        return self.op(f"{kind} {LL[src]} {v.ref} to {LL[ty]}", ty)

    def call(self, fn: str, ty: str, *args: Val) -> Val:
        """A call of the float function ``fn`` (``_FUNCS`` or pow) in type ``ty``."""
        base, intrinsic = _FUNCS.get(fn, ("pow", True))
        t = LL[ty]
        if intrinsic:
            name = f"llvm.{base}.{'f32' if ty == 'f32' else 'f64'}"
        else:
            name = base + ("f" if ty == "f32" else "")
        params = ", ".join(t for _ in args)
        self.declare.add(f"declare {t} @{name}({params})")
        text = ", ".join(f"{t} {a.ref}" for a in args)
        return self.op(f"call {self.fast}{t} @{name}({text})", ty)

    def select(self, c: Val, a: Val, b: Val) -> Val:
        ty = unify(a.ty, b.ty)
        a, b = self.cast(a, ty), self.cast(b, ty)
        return self.op(f"select i1 {self.truth(c).ref}, {LL[ty]} {a.ref}, {LL[ty]} {b.ref}", ty)

    def truth(self, v: Val) -> Val:
        return self.cast(v, "b")

    def compare(self, op: str, a: Val, b: Val) -> Val:
        ty = promote(a.ty, b.ty) if a.ty != b.ty else a.ty
        a, b = self.cast(a, ty), self.cast(b, ty)
        if ty in FLOATS:
            pred = {"==": "oeq", "!=": "une", "<": "olt", "<=": "ole", ">": "ogt",
                    ">=": "oge"}[op]
            return self.op(f"fcmp {self.fast}{pred} {LL[ty]} {a.ref}, {b.ref}", "b")
        pred = {"==": "eq", "!=": "ne", "<": "slt", "<=": "sle", ">": "sgt", ">=": "sge"}[op]
        if ty == "b" and op not in ("==", "!="):
            a, b = self.cast(a, "i64"), self.cast(b, "i64")
            ty = "i64"
        return self.op(f"icmp {pred} {LL[ty]} {a.ref}, {b.ref}", "b")

    def arith(self, op: str, a: Val, b: Val) -> Val:
        if op == "/":
            ty = promote(a.ty, b.ty)
            ty = ty if ty in FLOATS else "f64"
        elif op == "**":
            ty = promote(a.ty, b.ty)
            if ty not in FLOATS:
                raise CodegenError("native loops: ** of integers is not generated")
            return self.call("pow", ty, self.cast(a, ty), self.cast(b, ty))
        elif op in _BITS:
            if a.ty not in INTS or b.ty not in INTS:
                raise CodegenError(f"native loops: {op} needs integers")
            ty = "i64" if "i64" in (a.ty, b.ty) else "i32" if a.ty == b.ty == "i32" else "i64"
            a, b = self.cast(a, ty), self.cast(b, ty)
            return self.op(f"{_BITS[op]} {LL[ty]} {a.ref}, {b.ref}", ty)
        else:
            ty = promote(a.ty, b.ty)
        a, b = self.cast(a, ty), self.cast(b, ty)
        if ty in FLOATS:
            code = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}[op]
            return self.op(f"{code} {self.fast}{LL[ty]} {a.ref}, {b.ref}", ty)
        code = {"+": "add", "-": "sub", "*": "mul"}[op]
        return self.op(f"{code} {LL[ty]} {a.ref}, {b.ref}", ty)

    # ---- the expression tree -------------------------------------------------------------
    def emit(self, text: str, env: dict[str, Val]) -> Val:
        """The value of the Python expression ``text`` with the names of ``env`` bound."""
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise CodegenError(f"native loops: cannot parse {text!r}") from exc
        return self.node(tree.body, env)

    def node(self, n: ast.AST, env: dict[str, Val]) -> Val:  # noqa: C901 - one case per node
        if isinstance(n, ast.Constant):
            v = n.value
            if isinstance(v, bool):
                return const(v, "b")
            if isinstance(v, int):
                return const(v, "i64")
            if isinstance(v, float):
                return const(v, "f64")
        elif isinstance(n, ast.Name):
            if n.id in env:
                return env[n.id]
        elif isinstance(n, ast.Attribute) and _dotted(n) in ("np.inf", "math.inf"):
            return const(math.inf, "f64")
        elif isinstance(n, ast.Attribute) and _dotted(n) in ("np.nan", "math.nan"):
            return const(math.nan, "f64")
        elif isinstance(n, ast.BinOp):
            sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**",
                   ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&",
                   ast.BitOr: "|"}.get(type(n.op))
            if sym is not None:
                return self.arith(sym, self.node(n.left, env), self.node(n.right, env))
        elif isinstance(n, ast.UnaryOp):
            x = self.node(n.operand, env)
            if isinstance(n.op, ast.Not):
                return self.op(f"xor i1 {self.truth(x).ref}, true", "b")
            if isinstance(n.op, ast.USub):
                if x.ty in FLOATS:
                    return self.op(f"fneg {self.fast}{LL[x.ty]} {x.ref}", x.ty)
                return self.arith("-", const(0, "i64"), x)
            if isinstance(n.op, ast.UAdd):
                return x
        elif isinstance(n, ast.Compare) and len(n.ops) == 1:
            sym = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
                   ast.GtE: ">="}.get(type(n.ops[0]))
            if sym is not None:
                return self.compare(sym, self.node(n.left, env),
                                    self.node(n.comparators[0], env))
        elif isinstance(n, ast.BoolOp):
            vals = [self.node(x, env) for x in n.values]
            if all(x.ty == "b" for x in vals):
                code = "and" if isinstance(n.op, ast.And) else "or"
                acc = vals[0]
                for x in vals[1:]:
                    acc = self.op(f"{code} i1 {acc.ref}, {x.ref}", "b")
                return acc
        elif isinstance(n, ast.IfExp):
            c = self.node(n.test, env)
            return self.select(c, self.node(n.body, env), self.node(n.orelse, env))
        elif isinstance(n, ast.Call) and not n.keywords:
            return self.call_node(n, env)
        raise CodegenError(f"native loops: {ast.unparse(n)!r} is not generated")

    def call_node(self, n: ast.Call, env: dict[str, Val]) -> Val:
        fname = _dotted(n.func)
        if isinstance(n.func, ast.Attribute) and n.func.attr == "view" and len(n.args) == 1:
            src = self.node(n.func.value, env)
            ty = _CTORS.get(_dotted(n.args[0]).rpartition(".")[2])
            if ty in ("f32", "i32") and src.ty in ("f32", "i32") or \
                    ty in ("f64", "i64") and src.ty in ("f64", "i64"):
                if ty == src.ty:
                    return src
                return self.op(f"bitcast {LL[src.ty]} {src.ref} to {LL[ty]}", ty)
            raise CodegenError(f"native loops: {ast.unparse(n)!r} is not generated")
        args = [self.node(a, env) for a in n.args]
        mod, _, short = fname.rpartition(".")
        if mod == "np" and short in _CTORS and len(args) == 1:
            return self.cast(args[0], _CTORS[short])
        if ((mod == "np" and short in _NP_FUNCS) or (mod == "math" and short in _MATH_FUNCS)) \
                and len(args) == 1:
            v = args[0]
            ty = v.ty if v.ty in FLOATS else "f64"
            return self.call(short, ty, self.cast(v, ty))
        if fname == "abs" and len(args) == 1:
            v = args[0]
            if v.ty in FLOATS:
                return self.call_intrinsic("fabs", v)
            v = self.cast(v, "i64") if v.ty == "b" else v
            neg = self.arith("-", const(0, v.ty), v)
            return self.select(self.compare("<", v, const(0, v.ty)), neg, v)
        if fname in ("max", "min") and len(args) >= 2:
            acc = args[0]
            for v in args[1:]:
                acc = self.select(self.compare(">" if fname == "max" else "<", v, acc), v, acc)
            return acc
        if fname in SCALAR_FUNCTIONS:
            return self.inline(fname, args)
        raise CodegenError(f"native loops: the call {ast.unparse(n)!r} is not generated")

    def call_intrinsic(self, base: str, v: Val) -> Val:
        t = LL[v.ty]
        name = f"llvm.{base}.{'f32' if v.ty == 'f32' else 'f64'}"
        self.declare.add(f"declare {t} @{name}({t})")
        return self.op(f"call {self.fast}{t} @{name}({t} {v.ref})", v.ty)

    def inline(self, fname: str, args: list[Val]) -> Val:
        """The body of a ``scalars.py`` function expanded with ``args`` bound."""
        fn = function_tree(fname)
        params = [a.arg for a in fn.args.args]
        if len(params) != len(args):
            raise CodegenError(f"native loops: {fname} takes {len(params)} arguments")
        env = dict(zip(params, args))
        early: list[tuple[Val, Val]] = []
        for st in fn.body:
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
                continue  # docstring
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                    isinstance(st.targets[0], ast.Name):
                env[st.targets[0].id] = self.node(st.value, env)
            elif isinstance(st, ast.If) and not st.orelse and len(st.body) == 1 and \
                    isinstance(st.body[0], ast.Return) and st.body[0].value is not None:
                early.append((self.node(st.test, env), self.node(st.body[0].value, env)))
            elif isinstance(st, ast.Return) and st.value is not None:
                result = self.node(st.value, env)
                for c, v in reversed(early):
                    result = self.select(c, v, result)
                return result
            else:
                raise CodegenError(f"native loops: {fname}: {ast.unparse(st)!r} is not "
                                   "generated")
        raise CodegenError(f"native loops: {fname} has no final return")


def _dotted(n: ast.AST) -> str:
    if isinstance(n, ast.Name):
        return n.id
    if isinstance(n, ast.Attribute):
        return f"{_dotted(n.value)}.{n.attr}"
    return ""


# the functions of scalars.py a generated body may call, under the names codegen imports
# them as (spec.FAST_F32) and their own (they call each other)
SCALAR_FUNCTIONS = {prefix + name: name
                    for name in ("tanh32", "sigmoid32", "exp_reduced32", "exp_neg32", "exp32",
                                 "log32", "log1p32", "expm1_32", "erf32", "trig_pick", "trig32",
                                 "sin32", "cos32")
                    for prefix in ("", "_")}
_trees: dict[str, ast.FunctionDef] = {}


def function_tree(fname: str) -> ast.FunctionDef:
    """The parsed source of a ``scalars.py`` function."""
    name = SCALAR_FUNCTIONS[fname]
    if not _trees:
        from kiln.core.backends.cpu.codegen import scalars

        try:  # the source read with the import (scalars.SOURCE), not the file as it is now
            module = ast.parse(scalars.SOURCE)
        except SyntaxError as exc:
            raise CodegenError("native loops: scalars.py's source does not parse") from exc
        _trees.update({n.name: n for n in module.body if isinstance(n, ast.FunctionDef)})
    tree = _trees.get(name)
    if tree is None:
        raise CodegenError(f"native loops: no source of scalars.{name}")
    return tree
