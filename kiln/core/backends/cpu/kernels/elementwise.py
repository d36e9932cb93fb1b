"""Kernel builder for elementwise ops, fused nodes and the generated reductions.

The iteration space is the elementwise result's shape; each input is read through its layout
broadcast to it (stride 0 along broadcast dims); a reduction's output has stride 0 along the
reduced dims. The space is coalesced (:func:`layout.loop_nest`: by contiguity and broadcasting,
never by sizes), so a new batch size reuses the compiled kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import jit, native
from kiln.core.backends.cpu.codegen.spec import (
    LoopSpec,
    canonical,
    generate,
    inner_reductions,
    label,
    params_index,
    params_length,
    split_program,
)
from kiln.core.backends.cpu.gemm import products
from kiln.core.backends.cpu.runtime import parts as workers
from kiln.core.ir import Node, TensorType
from kiln.core.layout import Layout, contiguous_strides, loop_nest
from kiln.core.memory import planned_elements
from kiln.core.ops.fused import combine, program_of
from kiln.core.ops.registry import REDUCE, get_op

# Loop nests are not padded to a common rank: a loop over contiguous operands stays one flat
# loop. Padding every nest to rank 3 (one kernel for rank 1, 2 and 3 loops of the same
# expression) shared no kernel in the models measured, and a rank-3 loop compiles ~1.5x
# slower (0.38 against 0.24 s for relu(a + b)): the LSTM model's first step 7.9 -> 6.6 s,
# the MNIST convnet's 10.6 -> 9.4 s (cold, 2 compile processes, the same 18 / 24 kernels):
# options.CpuOptions.loop_min_rank.
# Loops without reduction that move at least this many bytes (outputs plus full-size reads)
# run on all threads: the serial kernel on parts of the outermost real loop, one per thread
# (runtime.parts.add_parts, kiln's workers; docs/architecture.md, "Threads"). The split changes
# only the parameter array (sizes and offsets), so one compiled kernel serves a loop split or
# not; numba's prange variant compiled 3-4x slower (the LSTM model's Adam update over its
# 20,000 x 128 embedding: 2.3 against 0.67 s). Waking the pool costs ~45 us
# (benchmarks/bench_overhead.py --parallel, 2 threads, AVX2 host), so a split pays once the
# loop leaves the caches: relu(2x - 1) (2 arrays) / the fused momentum update (5 arrays),
# serial against split: 2^18 elements (2 / 5 MB) 57 / 110 against 91 / 126 us; 2^19 (4 /
# 10 MB) 143 / 499 against 141 / 349 us; 2^20 (8 / 20 MB) 928 / 1291 against 502 / 1117 us.
# In a training step the loops after a GEMM pay less: OpenBLAS's thread spins on the other
# core for a while after each call (threads.BLAS_TIMEOUT), and the data just left the caches.
# The MLP step's momentum update of its 784 x 512 kernel (5 arrays, 8 MB) took 511 us split
# against 345 us serial there (125 us alone); the whole step 6.56 -> 6.18 ms with 16 MB
# (12 interleaved epochs, one process), and no workload of bench_suite.py slower
# (convnet, wide MLP, text classifier, Conv1D: 0.96-1.00x, 10 pairs each).
# options.CpuOptions.parallel_min_bytes, and spin_min_bytes where the spin pool runs the parts.
_kernels: dict[LoopSpec, jit.Kernel | native.NativeKernel] = {}


# Reductions over at least this many elements per output (unknown dims counted as
# PLANNER_BATCH) accumulate float32 sums and means in float64 (spec.wide_accumulators). Below
# it a float32 running sum stays within ~sqrt(n) ulps and the wider arithmetic would cost:
# a bias gradient over 128 x 512 took 6.7 us wide against 5.5, 4096 row sums of 256 48.4
# against 42.9 (2 shared cores, min of 15 x 200 calls): options.CpuOptions.wide_min_count.


def loop_kernel(spec: LoopSpec) -> jit.Kernel | native.NativeKernel:
    """The (cached) kernel for ``spec``: native (LLVM IR compiled by llvmlite,
    :mod:`..codegen.native`) when that path is on and generates ``spec``, else numba's of the
    generated source."""
    k: jit.Kernel | native.NativeKernel | None = (native.loop_kernel(spec) if native.enabled()
                                                   else None)
    if k is None:
        k = _kernels.get(spec)
        if k is None or isinstance(k, native.NativeKernel) or k.jitted != _jit_on():
            # numba's flags are the whole function's: a loop storing side outputs keeps
            # their strict bits (llvm_loop flags only its accumulation)
            fast = spec.reduce is not None and not spec.extra
            fastmath = jit.FASTMATH_REDUCE if fast else False
            k = jit.load(generate(spec), "kernel", signature=spec.signature(),
                         fastmath=fastmath)
    _kernels[spec] = k  # every loop kernel of the process, by spec (tests read it)
    return k


def _jit_on() -> bool:
    from kiln import config

    return config.jit_enabled()


def _shapes(program: tuple, in_shapes: list[tuple], in_dtypes: list[str]) -> list[tuple]:
    """Shapes of each instruction's result (None dims allowed: static shapes)."""
    types: list[TensorType] = []
    for op_name, args, attrs in program:
        arg_types = [TensorType(in_shapes[-a - 1], in_dtypes[-a - 1]) if a < 0 else types[a]
                     for a in args]
        types.append(get_op(op_name).infer(*arg_types, **dict(attrs)))
    return [t.shape for t in types]


def operand_strides(lay: Layout, static: tuple, it: tuple, static_it: tuple) -> tuple:
    """Strides of an input read across iteration shape ``it`` (NumPy broadcasting)."""
    rank = len(it)
    lead = rank - len(lay.shape)
    out = []
    for d in range(rank):
        j = d - lead
        if j < 0:
            out.append(0)
        elif lay.shape[j] == 1 and (it[d] != 1 or (static[j] == 1 and static_it[d] != 1)):
            out.append(0)
        else:
            out.append(lay.strides[j])
    return tuple(out)


def build_loop(b, node: Node) -> None:
    """Builder of elementwise ops, fused nodes and the generated reductions."""
    ins = [Operand(b.layout(i), i.shape, i.dtype, b.flat(i)) for i in node.inputs]
    out = Operand(b.layout(node), node.shape, node.dtype, b.flat(node))
    program = program_of(node)
    if program == AXPY and _axpy(b, node):
        return
    emit_loop(b, program, ins, out, label(program))


# An in-place sum of two large contiguous float arrays (SGD momentum's w + v after the velocity's
# gemm: kiln/core/passes/gemm.py) runs as BLAS's axpy (``products.axpy``): OpenBLAS's threads,
# still spinning on the other core after the GEMM before it, take half of it, where a split
# over kiln's own threads would first wake them (see parallel_min_bytes). Same bits: axpy
# with alpha 1 is one rounded add per element. MLP training step (784 x 512 update): about
# 3% less time (process A/B; docs/architecture.md, "Passes").
AXPY = (("add", (-1, -2), ()),)  # from options.CpuOptions.axpy_min_elements elements


def _axpy(b, node: Node) -> bool:
    """Adds ``out += x`` as ``products.axpy`` where ``node`` is such a sum (static shape, one
    operand the result's own storage in the same layout, the other contiguous); False
    otherwise."""
    if node.dtype not in ("float32", "float64") or any(d is None for d in node.shape):
        return False
    if int(np.prod(node.type.dims)) < options.current().axpy_min_elements:
        return False

    if products.products_native(b):  # a plan without BLAS calls: OpenBLAS's threads stay asleep
        return False
    out = b.out(node)
    if not out.flags.c_contiguous:
        return False
    arrays = [b.array(i) for i in node.inputs]
    if any(i.type != node.type for i in node.inputs):
        return False
    same = [_address(a) == _address(out) and a.strides == out.strides for a in arrays]
    if same.count(True) != 1 or not arrays[same.index(False)].flags.c_contiguous:
        return False
    other = arrays[same.index(False)]
    if np.may_share_memory(other, out):
        return False
    b.add(products.axpy, (other, out), label="add(axpy)")
    return True


@dataclass(frozen=True)
class Operand:
    """One array of a generated loop: its layout, static shape (None dims), dtype and root."""

    layout: Layout
    static: tuple
    dtype: str
    flat: np.ndarray


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def emit_loop(b, program: tuple, ins: list[Operand], out: Operand, name: str,
              extras: Sequence[tuple[int, Operand]] = (),
              reductions: Sequence[Operand] = ()) -> None:
    """Adds the generated loop computing ``program`` (fused-op format) over ``ins`` into
    ``out`` (a contiguous layout) to the plan; ``extras`` are side outputs (instruction index,
    operand): without reduction with ``out``'s shape and strides, in a reduction loop with
    the iteration space's shape, each in its own layout (codegen's module docstring);
    ``reductions`` the outputs of the reductions inside the program before its last one
    (``spec.inner_reductions``, in order), each in ``out``'s layout."""
    head, red, red_attrs = split_program(program)
    head = canonical(head)
    in_dtypes = [i.dtype for i in ins]
    it = _shapes(head, [i.layout.shape for i in ins], in_dtypes)[-1]
    static_it = _shapes(head, [i.static for i in ins], in_dtypes)[-1]
    if red is None:
        out_strides = contiguous_strides(it)
        count = 1
    else:
        axes = dict(red_attrs)["axis"]
        keep = tuple(1 if d in axes else n for d, n in enumerate(it))
        cs = contiguous_strides(keep)
        out_strides = tuple(0 if d in axes else cs[d] for d in range(len(it)))
        count = int(np.prod([it[d] for d in axes], dtype=np.int64))
    strides = [out_strides] + [operand_strides(i.layout, i.static, it, static_it) for i in ins]
    if red is not None:  # the side outputs walk the iteration space in their own layouts
        for _, e in extras:
            if tuple(e.layout.shape) != tuple(it):
                raise ValueError(f"{name}: a side output of shape {e.layout.shape} in a "
                                 f"reduction loop over {it}")
            strides.append(operand_strides(e.layout, e.static, it, static_it))
    drop = tuple(s == 1 for s in static_it)
    nest = loop_nest(it, strides, drop, options.current().loop_min_rank)
    classes = []
    outs = [("O", out)] + [(f"E{k}", e) for k, (_, e) in enumerate(extras)]
    # a loop of one element (static: e.g. the Adam update of a Dense(1) bias) classifies its
    # operands as the same program over many elements would (in place, else full-shape "N",
    # broadcast "S"), so that it reuses that kernel instead of compiling an all-"S" one
    one = bool(static_it) and all(d == 1 for d in static_it)
    # an input stored over by an output (same storage and walk: the planner's in-place
    # rule) is read through that output, so LLVM sees one array and needs no overlap check
    # (which fails at run time for such a pair, leaving the loop scalar); in a reduction loop
    # only a side output can be one
    walks = ([nest.strides[0]] * len(outs) if red is None
             else [None] + list(nest.strides[1 + len(ins):]))
    for i, st in zip(ins, nest.strides[1:]):
        alias = next((c for (c, o), w in zip(outs, walks) if st == w
                      and _address(i.flat) == _address(o.flat) and i.dtype == o.dtype
                      and i.layout.offset == o.layout.offset), None)
        if one and red is None and (alias is not None or tuple(i.static) == tuple(static_it)):
            classes.append(alias or "N")
        elif all(s == 0 for s in st):
            classes.append("S")
        elif alias is not None:
            classes.append(alias)  # in place
        elif st[-1] == 0:
            classes.append("Z")
        else:
            classes.append("N")
    out_class = "Z" if red is not None and nest.strides[0][-1] == 0 else "N"
    # threads or not is decided on the static shape (unknown dims counted as PLANNER_BATCH),
    # so that a new batch size never needs the other variant of the kernel
    size = planned_elements(static_it)
    # float64 accumulators where the reduction is long (decided on the static shape, as the
    # threads are: a new batch size never needs the other kernel)
    wide = red is not None and planned_elements(
        [static_it[d] for d in dict(red_attrs)["axis"]]) >= options.current().wide_min_count
    spec = LoopSpec(head, red, tuple(in_dtypes), out.dtype, nest.rank, tuple(classes),
                    out_class, tuple(j for j, _ in extras), tuple(e.dtype for _, e in extras),
                    wide)
    params = list(nest.sizes) + [out.layout.offset] + list(nest.strides[0])
    for i, st in zip(ins, nest.strides[1:]):
        params += [i.layout.offset] + list(st)
    params += [out.layout.size, count] + [e.layout.offset for _, e in extras]
    if red is not None:
        for k in range(len(extras)):
            params += list(nest.strides[1 + len(ins) + k])
    if len(reductions) != len(inner_reductions(head)):
        raise ValueError(f"{name}: {len(reductions)} outputs for the reductions inside")
    for r in reductions:  # in the output's layout: only their offsets
        if r.layout.size != out.layout.size or not r.layout.is_contiguous:
            raise ValueError(f"{name}: a reduction output {r.layout.shape} beside {out.static}")
        params.append(r.layout.offset)
    p = np.asarray(params, dtype=np.int64)
    args = (out.flat, *[e.flat for _, e in extras], *[r.flat for r in reductions],
            *[i.flat for i in ins], p)
    kernel = loop_kernel(spec)
    entry = kernel.specialize(args)
    # threads take the outermost real (not padding) loop; the choice is made on the static
    # shape (unknown dims counted as PLANNER_BATCH), so it does not depend on the batch size
    d = nest.padded
    ranges = [(0, 1)]
    if d < nest.rank and nest.sizes[d] > 1 and workers.count() > 1:
        disjoint = red is None or nest.strides[0][d] != 0  # (a row reduction's parts too)
        ranges = workers.split(nest.sizes[d],
                               work=size * _bytes_per_element(out, extras, ins, classes),
                               min_work=_min_bytes(b, kernel, disjoint))
    if len(ranges) > 1:
        parts = [_part(p, nest.rank, len(ins), len(extras), d, lo, hi, red is not None,
                       len(reductions)) for lo, hi in ranges]
        if red is None or nest.strides[0][d] != 0:  # the parts write disjoint outputs
            workers.add_parts(b, entry, args, ranges=ranges,
                              vary=lambda k, lo, hi: {-1: parts[k]}, label=name)
        else:
            ops = [red] + [op for _, op, _ in inner_reductions(head)]
            _split_reduction(b, entry, args, ranges, parts, ops, [out, *reductions], name,
                             nest.rank, len(extras),
                             params_length(nest.rank, len(ins), len(extras), True))
    else:
        b.add(entry, args, label=name)


def _min_bytes(b, kernel, plain: bool) -> int:
    """The bytes a loop moves from which its threads split it: ``spin_min_bytes`` for a
    native loop whose parts write disjoint outputs (``plain``: no reduction, or one along
    the other axes, a softmax gradient's or a layer norm's rows: no partials to combine) in
    a plan without BLAS calls (its parts go to the spin pool: a trivial kernel split in two
    takes 4.0 us a call there, its two parts one after the other 2.7; and no OpenBLAS thread
    spins on the other core: ``gemm.products.products_native``), else
    ``parallel_min_bytes`` (options.CpuOptions)."""
    opts = options.current()
    if (plain and workers.engine() == "spin" and isinstance(kernel, native.NativeKernel)
            and products.products_native(b)):
        return min(opts.spin_min_bytes, opts.parallel_min_bytes)
    return opts.parallel_min_bytes


# The binary ops that combine partial reductions (NaN-propagating like the kernels' max/min).
_PARTIALS = {"sum": np.add, "mean": np.add, "prod": np.multiply, "max": np.maximum,
             "min": np.minimum}


def _split_reduction(b, entry, args: tuple, ranges: list[tuple[int, int]],
                     parts: list[np.ndarray], ops: list[str], outs: list[Operand], name: str,
                     rank: int, n_extra: int, base_r: int) -> None:
    """A reduction whose threads split a reduced loop: part 0 reduces into the outputs (the
    result's, then those of the reductions inside), part k > 0 into scratch arrays of its own
    (offset 0, the outputs' layout), then one step combines them in part order (a
    deterministic result for a given thread count; a mean's parts each divide by the whole
    count). ``base_r``: where the parameters keep the inner reductions' offsets."""
    size = outs[0].layout.size
    scratch = [[np.empty(max(size, 1), o.flat.dtype) for o in outs] for _ in parts[1:]]
    for q in parts[1:]:
        q[params_index(rank, 0)["out"]] = 0  # the outputs' offsets: the scratch's start
        q[base_r:base_r + len(outs) - 1] = 0
    slots = [0] + [1 + n_extra + k for k in range(len(outs) - 1)]  # the outputs in the args

    def vary(k: int, lo: int, hi: int) -> dict[int, Any]:
        own = dict(zip(slots, scratch[k - 1])) if k else {}  # part k > 0: its scratch
        return {**own, len(args) - 1: parts[k]}

    workers.add_parts(b, entry, args, ranges=ranges, vary=vary, label=name)
    regions = [o.flat[o.layout.offset:o.layout.offset + size] for o in outs]

    def gather(*arrays: np.ndarray) -> None:
        for j, region in enumerate(arrays[:len(outs)]):
            combine = _PARTIALS[ops[j]]
            for part in arrays[len(outs) + j::len(outs)]:
                combine(region, part[:size], out=region)

    b.add(gather, (*regions, *[a for part in scratch for a in part]),
          label=f"{name}(partials)")


def _bytes_per_element(out: Operand, extras: Sequence[tuple[int, Operand]], ins: list[Operand],
                       classes: list[str]) -> int:
    """Bytes a loop moves per element: its outputs and its full-size reads (an in-place
    read counts: read then written; broadcast operands, S and Z, stay in cache)."""
    moved = np.dtype(out.dtype).itemsize + sum(np.dtype(e.dtype).itemsize for _, e in extras)
    return moved + sum(np.dtype(i.dtype).itemsize for i, c in zip(ins, classes)
                       if c not in ("S", "Z"))


def _part(p: np.ndarray, rank: int, n_in: int, n_extra: int, d: int, lo: int,
          hi: int, own: bool = False, n_red: int = 0) -> np.ndarray:
    """The parameters of the loop ``p`` restricted to ``lo <= i_d < hi`` along loop ``d``:
    that size, and every operand's offset moved by ``lo`` steps of its stride along ``d``
    (side outputs by the output's stride: they share its layout; ``own``: a reduction loop's,
    by their own strides)."""
    idx = params_index(rank, n_in)
    q = p.copy()
    q[idx["sizes"] + d] = hi - lo
    out = idx["out"]
    q[out] += lo * p[out + 1 + d]
    for b in idx["inputs"]:
        q[b] += lo * p[b + 1 + d]
    if own and p[out + 1 + d]:
        # a reduction's parts own disjoint rows of its output (d is outermost): each sets
        # up (and a mean divides) only its own, (hi - lo) steps of the output's stride
        q[idx["extra"]] = (hi - lo) * p[out + 1 + d]
    side = idx["extra"] + 2
    if own:  # a reduction loop's side outputs: strides of their own after the offsets
        for k in range(n_extra):
            q[side + k] += lo * p[side + n_extra + k * rank + d]
        base_r = side + n_extra * (1 + rank)  # the inner reductions': the output's layout
        q[base_r:base_r + n_red] += lo * p[out + 1 + d]
    else:
        q[side:side + n_extra] += lo * p[out + 1 + d]
    return q


def build_group(b, nodes: list[Node]) -> None:
    """One loop for a multi-output group of :func:`kiln.core.passes.fuse.group_chains` (same
    shape, each member after the first reads an earlier one): the last member's value is the
    result, the others side outputs."""
    ext, program, result_of = combine(nodes)
    ins = [Operand(b.layout(i), i.shape, i.dtype, b.flat(i)) for i in ext]
    last = nodes[-1]
    out = Operand(b.layout(last), last.shape, last.dtype, b.flat(last))
    # members before the last: stored values, or reductions accumulated beside the last one
    reduced = [get_op(program_of(n)[-1][0]).kind == REDUCE for n in nodes[:-1]]
    extras = [(result_of[id(n)], Operand(b.layout(n), n.shape, n.dtype, b.flat(n)))
              for n, r in zip(nodes[:-1], reduced) if not r]
    reductions = [Operand(b.layout(n), n.shape, n.dtype, b.flat(n))
                  for n, r in zip(nodes[:-1], reduced) if r]
    emit_loop(b, program, ins, out, "+".join(label(program_of(n)) for n in nodes), extras,
              reductions)
