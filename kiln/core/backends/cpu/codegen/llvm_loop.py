"""A generated loop (:class:`~kiln.core.backends.cpu.codegen.spec.LoopSpec`) as an LLVM module, for
the native path of the CPU backend (:mod:`.native`; docs/architecture.md, "Native loops").

The module holds two functions:

* ``@<name>(ptr o, ptr e0 ..., ptr a0 ..., ptr p)``: the loop itself, the same loop nest,
  operand classes, reduction and side outputs as :func:`codegen.generate`'s numba source
  (read that module's docstring for the classes and the parameter array ``p``), with the
  instructions' scalar bodies lowered by :class:`.llvm_expr.Expr` under numba's typing
  rules; indices are int64 (``getelementptr inbounds``: no wraparound test), loop counters
  live in allocas that LLVM promotes to registers. A reduction's accumulation gets
  numba's ``FASTMATH_REDUCE`` flags (``reassoc contract``: no ``nsz``, which let LLVM cancel
  a NaN away), a float max or min ``llvm.maximum`` / ``llvm.minimum``; every other
  instruction none, so computed values keep their strict bits. A float32 sum or mean
  accumulates in float64 (``spec.wide_accumulators``; the scratch array from ``malloc``,
  :func:`_scratch`), rounded once into its output after the loop;
* ``@<name>_py``: a CPython ``METH_FASTCALL`` function taking the arrays: it checks the
  argument count, reads each array's data pointer (``PyArrayObject->data``, at byte
  :data:`DATA_OFFSET`: :mod:`.native` checks it on this interpreter before using the path),
  releases the GIL around the loop (as numba's ``nogil``) and returns ``None``. The plan
  guarantees the arrays' dtypes (checked once when the kernel is specialized).
"""

from __future__ import annotations

from kiln.core.backends.cpu.codegen.llvm_expr import DTYPE_TYPE, FLOATS, LL, Expr, Val
from kiln.core.backends.cpu.codegen.spec import (
    _COMBINE,
    CTOR,
    LoopSpec,
    identity,
    inner_reductions,
    loop_body,
    params_index,
    program_dtypes,
    wide_accumulators,
)

DATA_OFFSET = 16  # bytes from a PyObject* ndarray to its data pointer (PyObject_HEAD first)
MEM = {"float32": "float", "float64": "double", "int32": "i32", "int64": "i64", "bool": "i8"}
FAST_REDUCE = "reassoc contract "


class Func:
    """The body of the loop function being generated: blocks, SSA names, loops."""

    def __init__(self, fast: str):
        self.allocas: list[str] = []
        self.lines: list[str] = []
        self.counter = [0]
        self.declare: set[str] = set()
        self.expr = Expr(self.lines, self.counter, fast, self.declare)
        self.labels = 0
        self.vars: dict[str, str] = {}
        self.fails: set[int] = set()

    def emit(self, text: str) -> None:
        self.lines.append("  " + text)

    def tmp(self) -> str:
        return self.expr.tmp()

    def param(self, k: int) -> str:
        """``p[k]`` (int64)."""
        g, v = self.tmp(), self.tmp()
        self.emit(f"{g} = getelementptr inbounds i64, ptr %p, i64 {k}")
        self.emit(f"{v} = load i64, ptr {g}")
        return v

    def add(self, a: str, b: str) -> str:
        v = self.tmp()
        self.emit(f"{v} = add nsw i64 {a}, {b}")
        return v

    def mul(self, a: str, b: str) -> str:
        v = self.tmp()
        self.emit(f"{v} = mul nsw i64 {a}, {b}")
        return v

    def load(self, arr: str, dtype: str, index: str) -> Val:
        g, v = self.tmp(), self.tmp()
        self.emit(f"{g} = getelementptr inbounds {MEM[dtype]}, ptr {arr}, i64 {index}")
        self.emit(f"{v} = load {MEM[dtype]}, ptr {g}")
        if dtype == "bool":
            b = self.tmp()
            self.emit(f"{b} = icmp ne i8 {v}, 0")
            return Val(b, "b")
        return Val(v, DTYPE_TYPE[dtype])

    def store(self, arr: str, dtype: str, index: str, value: Val) -> None:
        value = self.expr.cast(value, DTYPE_TYPE[dtype])
        ref = value.ref
        if dtype == "bool":
            ref = self.tmp()
            self.emit(f"{ref} = zext i1 {value.ref} to i8")
        g = self.tmp()
        self.emit(f"{g} = getelementptr inbounds {MEM[dtype]}, ptr {arr}, i64 {index}")
        self.emit(f"store {MEM[dtype]} {ref}, ptr {g}")

    def begin(self, count: str, start: str = "0") -> tuple[str, str]:
        """Opens ``for i in range(start, count)``: (i's SSA name, the loop's label)."""
        self.labels += 1
        lab = f"L{self.labels}"
        self.allocas.append(f"  %{lab}.i = alloca i64")
        self.emit(f"store i64 {start}, ptr %{lab}.i")
        self.emit(f"br label %{lab}.head")
        self.lines.append(f"{lab}.head:")
        i, c = f"%{lab}.v", self.tmp()
        self.emit(f"{i} = load i64, ptr %{lab}.i")
        self.emit(f"{c} = icmp slt i64 {i}, {count}")
        self.emit(f"br i1 {c}, label %{lab}.body, label %{lab}.exit")
        self.lines.append(f"{lab}.body:")
        return i, lab

    def end(self, i: str, lab: str) -> None:
        nxt = self.tmp()
        self.emit(f"{nxt} = add nsw i64 {i}, 1")
        self.emit(f"store i64 {nxt}, ptr %{lab}.i")
        self.emit(f"br label %{lab}.head")
        self.lines.append(f"{lab}.exit:")

    def scalar(self, text: str, env: dict[str, Val]) -> Val:
        return self.expr.emit(text, env)

    # ---- scalar variables and branches (the hand-written native kernels) -------------------
    def var(self, name: str, init: Val) -> None:
        """A mutable scalar ``name`` of ``init``'s type (an alloca, promoted by LLVM)."""
        self.allocas.append(f"  %var.{name} = alloca {LL[init.ty]}")
        self.vars[name] = init.ty
        self.set(name, init)

    def get(self, name: str) -> Val:
        v = self.tmp()
        self.emit(f"{v} = load {LL[self.vars[name]]}, ptr %var.{name}")
        return Val(v, self.vars[name])

    def set(self, name: str, value: Val) -> None:
        value = self.expr.cast(value, self.vars[name])
        self.emit(f"store {LL[value.ty]} {value.ref}, ptr %var.{name}")

    def when(self, cond: Val) -> str:
        """Opens ``if cond:``; returns the label that :meth:`done` closes."""
        self.labels += 1
        lab = f"B{self.labels}"
        self.emit(f"br i1 {self.expr.truth(cond).ref}, label %{lab}.then, label %{lab}.end")
        self.lines.append(f"{lab}.then:")
        return lab

    def done(self, lab: str) -> None:
        self.emit(f"br label %{lab}.end")
        self.lines.append(f"{lab}.end:")

    def fail_when(self, cond: Val, status: int) -> None:
        """``if cond: return status`` (the kernel's error exit)."""
        self.labels += 1
        lab = f"B{self.labels}"
        self.emit(f"br i1 {self.expr.truth(cond).ref}, label %fail{status}, label %{lab}.ok")
        self.lines.append(f"{lab}.ok:")
        self.fails.add(status)

    def function(self, symbol: str, args: list[str], errors: dict | None = None,
                 noalias: bool | frozenset = False) -> str:
        """The module: ``@symbol(ptr args...)`` (returning i32 0, or a status of ``fails``
        when ``errors`` is given; ``noalias``: the arrays never overlap, or the names of
        those that overlap no other) and its entry point ``@symbol_py``."""
        ret = "i32" if errors else "void"
        self.emit("ret i32 0" if errors else "ret void")
        tail = [f"fail{s}:\n  ret i32 {s}" for s in sorted(self.fails)]
        marked = set(args) if noalias is True else set(noalias or ())
        params = ", ".join(("ptr noalias %" if a in marked else "ptr %") + a for a in args)
        head = [f"define {ret} @{symbol}({params}) nounwind {{",
                "entry:"]
        return "\n".join(sorted(self.declare) + head + self.allocas + self.lines + tail
                         + ["}", ""] + wrapper(symbol, len(args), errors))


def _body(op_name: str, attrs: tuple, arg_dtypes: list[str], out_dtype: str) -> str:
    floats = {t for t in arg_dtypes + [out_dtype] if t.startswith("float")}
    return loop_body(op_name, attrs, floats == {"float32"})[0]


def generate_ir(spec: LoopSpec, name: str) -> str:
    """The LLVM module (text) of the loop ``spec``: ``@name`` and ``@name_py``.

    Raises:
        CodegenError: an instruction's body is not generated natively (the caller then
            uses the numba kernel).
    """
    rank, n_in = spec.rank, len(spec.in_dtypes)
    idx = params_index(rank, n_in)
    dtypes = program_dtypes(spec.program, spec.in_dtypes)
    n_extra = len(spec.extra)
    red = spec.reduce
    own = red is not None  # side outputs with strides of their own (codegen's docstring)
    inner = inner_reductions(spec.program)  # more reductions, into arrays of their own
    # only a reduction's accumulation gets the fast-math flags (``_accumulate``): the values
    # computed in the loop keep the bits and the NaN of their loop without reduction
    f = Func("")
    names = (["%o"] + [f"%e{k}" for k in range(n_extra)] + [f"%r{k}" for k in range(len(inner))]
             + [f"%a{k}" for k in range(n_in)])
    n = [f.param(d) for d in range(rank)]
    xo = f.param(idx["out"])
    so = [f.param(idx["out"] + 1 + d) for d in range(rank)]
    dext, xe, se = [], [], []
    for k in range(n_extra):
        if own:
            xe.append(f.param(idx["extra"] + 2 + k))
            se.append([f.param(idx["extra"] + 2 + n_extra + k * rank + d) for d in range(rank)])
            continue
        v = f.tmp()
        f.emit(f"{v} = sub nsw i64 {f.param(idx['extra'] + 2 + k)}, {xo}")
        dext.append(v)
    x: dict[int, str] = {}
    s: dict[int, list[str]] = {}
    env: dict[str, Val] = {}
    for k in range(n_in):
        b = idx["inputs"][k]
        x[k] = f.param(b)
        c = spec.classes[k]
        if c == "S":
            env[f"v{k}"] = f.load(f"%a{k}", spec.in_dtypes[k], x[k])
        elif c in ("Z", "N"):
            s[k] = [f.param(b + 1 + d) for d in range(rank)]
    out_dt = spec.out_dtype
    wide = wide_accumulators(spec)
    size = f.param(idx["extra"]) if red is not None else "0"
    # where each accumulator lives: (array, dtype), the float64 scratch of a float32 sum or mean
    # (``spec.wide_accumulators``), addressed by the indices of the array it stands for
    acc_at = {"%o": _scratch(f, "%o", xo, size) if red is not None and wide[0]
              else ("%o", out_dt)}
    if red is not None:
        arr, dt = acc_at["%o"]
        ident = f.scalar(f"{CTOR[dt]}({identity(red, dtypes[-1])})", {})
        q, lab = f.begin(size)
        f.store(arr, dt, f.add(xo, q), ident)
        f.end(q, lab)
    base_r = idx["extra"] + 2 + n_extra * (1 + rank)
    dr: list[str] = []
    for k, (j, op, src) in enumerate(inner):  # offsets relative to the output's, its layout
        v = f.tmp()
        f.emit(f"{v} = sub nsw i64 {f.param(base_r + k)}, {xo}")
        dr.append(v)
        src_dt = spec.in_dtypes[-src - 1] if src < 0 else dtypes[src]
        acc_at[f"%r{k}"] = (_scratch(f, f"%r{k}", f.add(xo, v), size) if wide[1 + k]
                            else (f"%r{k}", dtypes[j]))
        arr, dt = acc_at[f"%r{k}"]
        ident = f.scalar(f"{CTOR[dt]}({identity(op, src_dt)})", {})
        q, lab = f.begin(size)
        f.store(arr, dt, f.add(f.add(xo, v), q), ident)
        f.end(q, lab)
    opened = []
    prev = dict(x)
    prev_o = xo
    for d in range(rank - 1):
        i, lab = f.begin(n[d])
        opened.append((i, lab))
        prev_o = f.add(prev_o, f.mul(i, so[d]))
        for k in s:
            prev[k] = f.add(prev[k], f.mul(i, s[k][d]))
        xe = [f.add(x_k, f.mul(i, se[k][d])) for k, x_k in enumerate(xe)]
    last = rank - 1
    for k in range(n_in):
        if spec.classes[k] == "Z":
            env[f"v{k}"] = f.load(f"%a{k}", spec.in_dtypes[k], prev[k])
    acc_slot = None
    if red is not None and spec.out_class == "Z":
        acc_slot = "%acc"
        arr, dt = acc_at["%o"]
        f.allocas.append(f"  %acc = alloca {LL[DTYPE_TYPE[dt]]}")
        first = f.load(arr, dt, prev_o)
        f.emit(f"store {LL[first.ty]} {first.ref}, ptr %acc")
        for k in range(len(inner)):
            arr, dt = acc_at[f"%r{k}"]
            f.allocas.append(f"  %acc{k} = alloca {LL[DTYPE_TYPE[dt]]}")
            first = f.load(arr, dt, f.add(prev_o, dr[k]))
            f.emit(f"store {LL[first.ty]} {first.ref}, ptr %acc{k}")
    i, lab = f.begin(n[last])
    out_index = f.add(prev_o, f.mul(i, so[last]))
    for k in range(n_in):
        c = spec.classes[k]
        if c == "N":
            env[f"v{k}"] = f.load(f"%a{k}", spec.in_dtypes[k],
                                  f.add(prev[k], f.mul(i, s[k][last])))
        elif c == "O":
            env[f"v{k}"] = f.load("%o", spec.in_dtypes[k], out_index)
        elif c.startswith("E"):
            j = int(c[1:])
            at = f.add(xe[j], f.mul(i, se[j][last])) if own else f.add(out_index, dext[j])
            env[f"v{k}"] = f.load(f"%e{j}", spec.in_dtypes[k], at)
    inner_at = {j: k for k, (j, _, _) in enumerate(inner)}
    for j, (op_name, iargs, attrs) in enumerate(spec.program):
        vars_ = [f"v{-a - 1}" if a < 0 else f"t{a}" for a in iargs]
        arg_dtypes = [spec.in_dtypes[-a - 1] if a < 0 else dtypes[a] for a in iargs]
        if j in inner_at:  # accumulated like the result (below), into its own array
            k = inner_at[j]
            slot = f"%acc{k}" if acc_slot is not None else None
            arr, dt = acc_at[f"%r{k}"]
            value = f.expr.cast(env[vars_[0]], DTYPE_TYPE[dtypes[j]])  # as numba's ctor
            _accumulate(f, arr, dt, f.add(out_index, dr[k]), slot, op_name, value)
            continue
        body = _body(op_name, attrs, arg_dtypes, dtypes[j])
        value = f.scalar(body.format(*vars_), env)
        env[f"t{j}"] = f.expr.cast(value, DTYPE_TYPE[dtypes[j]])
    result = env[f"t{len(spec.program) - 1}"]
    result = f.expr.cast(result, DTYPE_TYPE[out_dt])
    for k, (j, dt) in enumerate(zip(spec.extra, spec.extra_dtypes)):
        at = f.add(xe[k], f.mul(i, se[k][last])) if own else f.add(out_index, dext[k])
        f.store(f"%e{k}", dt, at, env[f"t{j}"])
    if red is None:
        f.store("%o", out_dt, out_index, result)
    else:
        _accumulate(f, *acc_at["%o"], out_index, acc_slot, red, result)
    f.end(i, lab)
    if acc_slot is not None:
        for held, at, slot in [("%o", prev_o, "%acc")] + [
                (f"%r{k}", f.add(prev_o, dr[k]), f"%acc{k}") for k in range(len(inner))]:
            arr, dt = acc_at[held]
            cur = f.tmp()
            f.emit(f"{cur} = load {LL[DTYPE_TYPE[dt]]}, ptr {slot}")
            f.store(arr, dt, at, Val(cur, DTYPE_TYPE[dt]))
    for i, lab in reversed(opened):
        f.end(i, lab)
    if any(wide):  # the float64 accumulators rounded once (a mean divided first)
        cnt = Val(f.param(idx["extra"] + 1), "i64")
        starts = [xo] + [f.add(xo, d) for d in dr]
        for k, ((held, (arr, dt)), is_wide) in enumerate(zip(acc_at.items(), wide)):
            if not is_wide:
                continue
            acc_op = red if not k else inner[k - 1][1]
            out_dt_k = out_dt if not k else dtypes[inner[k - 1][0]]
            q, lab = f.begin(size)
            at = f.add(starts[k], q)
            total = f.load(arr, dt, at)
            f.store(held, out_dt_k, at, f.expr.arith("/", total, cnt) if acc_op == "mean"
                    else total)
            f.end(q, lab)
            f.emit(f"call void @free(ptr {arr}.base)")
    means = [("%o", out_dt)] if red == "mean" and not wide[0] else []
    means += [(f"%r{k}", dtypes[j]) for k, (j, op, _) in enumerate(inner)
              if op == "mean" and not wide[1 + k]]
    for arr, dt in means:
        rk = None if arr == "%o" else int(arr[2:])
        cnt = Val(f.param(idx["extra"] + 1), "i64")
        q, lab = f.begin(f.param(idx["extra"]))
        at = f.add(xo, q) if rk is None else f.add(f.add(xo, dr[rk]), q)
        total = f.load(arr, dt, at)
        f.store(arr, dt, at, f.expr.arith("/", total, cnt))
        f.end(q, lab)
    # a reduction's result is a buffer of its own (the planner never writes a reduction over
    # its inputs): with side outputs stored in the same loop, LLVM would otherwise need a
    # run-time overlap check of the accumulator against every array, over its limit of 8, and
    # leave the loop scalar (BatchNormalization's gradient and its channel sum: 8.5 ms)
    only = (frozenset({"o", *(f"r{k}" for k in range(len(inner)))})
            if red is not None and (n_extra or inner) else frozenset())
    return f.function(name, [a.lstrip("%") for a in names] + ["p"], noalias=only)


def _scratch(f: Func, arr: str, start: str, size: str) -> tuple[str, str]:
    """A float64 scratch of ``size`` elements standing for ``arr[start:start + size]``: the
    pointer ``<arr>.wide``, addressed with ``arr``'s indices (``<arr>.wide.base``, from malloc,
    is freed after the loop; a failed allocation traps)."""
    name = f"{arr}.wide"
    nbytes = f.mul(size, "8")
    f.declare.update({"declare noalias ptr @malloc(i64)", "declare void @free(ptr)",
                      "declare void @llvm.trap()"})
    f.emit(f"{name}.base = call ptr @malloc(i64 {nbytes})")
    ok = f.tmp()
    f.emit(f"{ok} = icmp eq ptr {name}.base, null")
    f.labels += 1
    lab = f"B{f.labels}"
    f.emit(f"br i1 {ok}, label %{lab}.oom, label %{lab}.ok")
    f.lines.append(f"{lab}.oom:")
    f.emit("call void @llvm.trap()")
    f.emit("unreachable")
    f.lines.append(f"{lab}.ok:")
    neg = f.tmp()
    f.emit(f"{neg} = sub i64 0, {start}")
    f.emit(f"{name} = getelementptr double, ptr {name}.base, i64 {neg}")
    return name, "float64"


def _accumulate(f: Func, arr: str, dtype: str, index: str, slot: str | None, op: str,
                value: Val) -> None:
    """``acc = op(acc, value)`` for a reduction: the accumulator in ``slot`` (a register,
    class "Z") or in ``arr[index]``; with the fast-math flags a reduction may reassociate
    under (the values around it keep theirs)."""
    t = LL[DTYPE_TYPE[dtype]]
    if slot is not None:
        cur = f.tmp()
        f.emit(f"{cur} = load {t}, ptr {slot}")
        acc = Val(cur, DTYPE_TYPE[dtype])
    else:
        acc = f.load(arr, dtype, index)
    if op in ("max", "min") and acc.ty in FLOATS and value.ty == acc.ty:
        # IEEE 754-2019's maximum / minimum: NaN from either operand, as the select of
        # ``_COMBINE`` gives, but a recurrence LLVM's vectorizer reduces (the select is one
        # only under ``nnan``; docs/architecture.md, "Native loops")
        name = f"@llvm.{'maximum' if op == 'max' else 'minimum'}.{acc.ty}"  # f32 / f64
        f.declare.add(f"declare {t} {name}({t}, {t})")
        combined = f.expr.op(f"call {t} {name}({t} {acc.ref}, {t} {value.ref})", acc.ty)
    else:
        strict = f.expr.fast
        f.expr.fast = FAST_REDUCE
        combined = f.expr.cast(f.scalar(_COMBINE[op].format(a="a", b="b"),
                                        {"a": acc, "b": value}), DTYPE_TYPE[dtype])
        f.expr.fast = strict
    if slot is not None:
        f.emit(f"store {t} {combined.ref}, ptr {slot}")
    else:
        f.store(arr, dtype, index, combined)


def wrapper(name: str, n_args: int, errors: dict[int, tuple[str, str]] | None = None) -> list[str]:
    """``@name_py``: the METH_FASTCALL entry point CPython calls (see the module docstring).

    Args:
        name: the kernel function: ``void @name(ptr ...)``, or with ``errors``
            ``i32 @name(ptr ...)`` returning 0, or a status that ``errors`` maps to an
            exception (``"index"`` or ``"type"``) and its message.
    """
    msgs = {0: f"kiln native kernel {name}: expected {n_args} arrays"}
    for status, (_, text) in (errors or {}).items():
        msgs[status] = text
    lines = []
    for status, msg in msgs.items():
        data = "".join(f"\\{b:02X}" if b < 32 or b in (34, 92) else chr(b)
                       for b in msg.encode())
        lines.append(f"@{name}_msg{status} = private unnamed_addr constant "
                     f'[{len(msg.encode()) + 1} x i8] c"{data}\\00"')
    lines += [f"define ptr @{name}_py(ptr %self, ptr %args, i64 %nargs) {{",
              "entry:",
              f"  %ok = icmp eq i64 %nargs, {n_args}",
              "  br i1 %ok, label %go, label %bad0",
              "go:"]
    ptrs = []
    for k in range(n_args):
        lines += [f"  %g{k} = getelementptr inbounds ptr, ptr %args, i64 {k}",
                  f"  %obj{k} = load ptr, ptr %g{k}",
                  f"  %f{k} = getelementptr inbounds i8, ptr %obj{k}, i64 {DATA_OFFSET}",
                  f"  %d{k} = load ptr, ptr %f{k}"]
        ptrs.append(f"ptr %d{k}")
    lines.append("  %ts = call ptr @PyEval_SaveThread()")
    if errors:
        lines += [f"  %st = call i32 @{name}({', '.join(ptrs)})",
                  "  call void @PyEval_RestoreThread(ptr %ts)",
                  "  switch i32 %st, label %done [" + " ".join(
                      f"i32 {s}, label %bad{s}" for s in errors) + "]"]
    else:
        lines += [f"  call void @{name}({', '.join(ptrs)})",
                  "  call void @PyEval_RestoreThread(ptr %ts)",
                  "  br label %done"]
    lines += ["done:",
              "  call void @Py_IncRef(ptr @kiln_py_none)",
              "  ret ptr @kiln_py_none"]
    kinds = {0: "type", **{s: kind for s, (kind, _) in (errors or {}).items()}}
    for status in msgs:
        lines += [f"bad{status}:",
                  f"  call void @PyErr_SetString(ptr @kiln_py_{kinds[status]}_error, "
                  f"ptr @{name}_msg{status})",
                  "  ret ptr null"]
    lines += ["}",
              "declare ptr @PyEval_SaveThread()",
              "declare void @PyEval_RestoreThread(ptr)",
              "declare void @Py_IncRef(ptr)",
              "declare void @PyErr_SetString(ptr, ptr)",
              # the objects themselves (their addresses: native._init), under names of
              # kiln's own (numba's symbols share the process-wide table)
              "@kiln_py_none = external global i8"]
    lines += [f"@kiln_py_{kind}_error = external global i8" for kind in sorted(set(kinds.values()))]
    if errors:  # the mark of a kernel returning a status (spin_pool.kernel_of: not for the
        # trampolines, which drop it)
        lines.append(f"@{name}_fails = constant i8 1")
    return lines
