"""The cuda backend's kernels, op by op: :class:`Lowering` emits the launches computing a
node (generated elementwise loops and reductions, GEMM, convolution as implicit GEMM, softmax
rows, pooling, gathers, copies) or, for an op without a kernel, its NumPy reference on the
host with a one-time warning (``_host_fallback.py``). ``_program._Planner`` (the planner's
side, :class:`PlannerSide`: roots, steps, arena) mixes it in; see docs/architecture.md,
"Backends".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kiln.core.backends.cuda import _codegen as cg
from kiln.core.backends.cuda import _kernels as kn
from kiln.core.backends.cuda._cublas import BLAS
from kiln.core.backends.cuda._device import LaunchConfig, blocks_for
from kiln.core.backends.cuda._host_fallback import host_fallback
from kiln.core.backends.cuda._jit import load
from kiln.core.backends.lowering import KernelTable, warn_fallback
from kiln.core.ir import Node, TensorType
from kiln.core.layout import Layout, coalesce, contiguous_strides, prod
from kiln.core.ops.fused import fused, program_of
from kiln.core.ops.registry import ELEMENTWISE, REDUCE, apply, get_op
from kiln.core.ops.window import window

#: op -> the Lowering method emitting its kernel (elementwise ops, fused nodes and reductions
#: are generated; views and plan constants are planned in kiln/core/plan.py)
KERNELS = KernelTable("cuda")

# gemm's epilogue over (product, alpha, c, beta): product * alpha + c * beta
GEMM_EPILOGUE = (("mul", (-1, -2), ()), ("mul", (-3, -4), ()), ("add", (0, 1), ()))
# Split-K of conv2d_backprop_filter (a GEMM with few outputs and N * OH * OW-long sums): -1
# picks the number of K pieces that fills the GPU, 0 turns it off, n > 0 forces n pieces.
CONV_SPLIT_K = -1


def geom_co(kind: str, geom: tuple, t: TensorType, node: Node, pl: Lowering) -> int:
    """The CO argument of the convolution kernels: output channels of the conv2d."""
    if kind == "fwd":
        return t.dims[3]
    if kind == "bpi":
        return pl.shape(node.inputs[0])[3]
    return t.dims[3]


def _no_groups(node: Node) -> None:
    # grouped convolution has no CUDA kernel yet: the (warned) host fallback runs its reference
    if node.attrs.get("groups", 1) != 1:
        raise cg.Untranslatable(f"groups={node.attrs['groups']}: no grouped/depthwise kernel")


class PlannerSide(Protocol):
    """What the planner (``_program._Planner``) provides to the kernels of :class:`Lowering`:
    fresh buffers, steps (``emit``; ``launch1`` for one 1-D launch), node types and shapes."""

    cfg: LaunchConfig
    types: dict[int, TensorType]
    keep: list[Node]

    def fresh(self, dtype: str, shape: tuple) -> Layout: ...
    def emit(self, label: str, reads: Sequence[Layout], writes: Sequence[Layout],
             bind: Callable[[Callable[[int], Any]], Callable[[], None]]) -> None: ...
    def dtype(self, node: Node) -> str: ...
    def shape(self, node: Node) -> tuple[int, ...]: ...
    def launch1(self, label: str, kernel: Any, n: int, reads: Sequence[Layout],
                out: Layout, args: Callable[[Callable[[int], Any]], tuple]) -> None: ...
    def rows(self, n: int) -> int: ...


class Lowering(PlannerSide):
    """The kernels of each op, as methods of the planner (``self``: a ``_Planner``, which
    implements :class:`PlannerSide` and adds ``roots``, steps and the arena)."""

    # ---- copies ---------------------------------------------------------------------------
    def copy_into(self, dst: Layout, src: Layout, dtype: str, label: str = "copy") -> None:
        shape = dst.shape
        src = src.broadcast(shape) if src.shape != shape else src
        shp, (ost, ist) = coalesce(shape, [dst.strides, src.strides])
        okind = cg.input_kind(shp, ost)
        okind = cg.CONTIG if okind == cg.CONTIG else cg.GENERAL
        ikind = cg.input_kind(shp, ist)
        kernel = load(cg.loop_source(len(shp), okind, [ikind], [], "x0"), "k_loop")
        n = prod(shp)

        def args(arr):
            a = [n, *shp, arr(dst.root), dst.offset]
            if okind == cg.GENERAL:
                a += list(ost)
            a += [arr(src.root), src.offset]
            if ikind == cg.GENERAL:
                a += list(ist)
            return tuple(a)
        self.launch1(label, kernel, n, [src], dst, args)

    def contig(self, layout: Layout, dtype: str) -> Layout:
        if layout.is_contiguous:
            return layout
        out = self.fresh(dtype, layout.shape)
        self.copy_into(out, layout, dtype, "materialize")
        return out

    def fill(self, out: Layout, dtype: str, value: float) -> None:
        n = out.size
        kernel = kn.fill(dtype)
        v = float(value) if dtype.startswith("float") else int(value)
        self.launch1("fill", kernel, n, [], out,
                     lambda arr: (n, arr(out.root), out.offset, v))

    def kernel(self, node: Node, ins: list[Layout], t: TensorType) -> Layout:
        """Emits the launches computing ``node``; returns the layout holding its value."""
        op = get_op(node.op)
        if op.view is not None:  # its view rule declined (a reshape of strided data): copy
            out = self.fresh(t.dtype, t.dims)
            self.copy_into(Layout.fresh(out.root, ins[0].shape), ins[0], t.dtype,
                           "materialize")
            return out
        try:
            if node.op == "fused" or op.kind == ELEMENTWISE:
                return self.elementwise(node, ins, t)
            if op.kind == REDUCE:
                return self.reduce(node, ins, t)
            emit = KERNELS.get(node.op)
            if emit is None:
                raise cg.Untranslatable("no kernel")
            return emit(self, node, ins, t)
        except cg.Untranslatable as exc:
            warn_fallback("cuda", node.op, str(exc), detail=" on the host (inputs copied to the "
                          "host and the result back)")
            return host_fallback(self, node, ins, t)

    # ---- elementwise, fused and reductions ------------------------------------------------
    def elementwise(self, node: Node, ins: list[Layout], t: TensorType) -> Layout:
        in_types = [self.types[id(i)] for i in node.inputs]
        lines, value, vdtype, red = cg.element_program(program_of(node), in_types)
        if red is not None:
            # iteration space: the shape of the reduction's operand
            iter_t = self._operand_type(node, in_types)
            return self.reduction(node, red[0], red[1], ins, iter_t.dims, lines, value,
                                  vdtype, t)
        shape = t.dims
        bst = [x.broadcast(shape).strides for x in ins]
        shp, sts = coalesce(shape, [contiguous_strides(shape)] + bst)
        kinds = [cg.input_kind(shp, s) for s in sts[1:]]
        kernel = load(cg.loop_source(len(shp), cg.CONTIG, kinds, lines, value), "k_loop")
        out = self.fresh(t.dtype, shape)
        n = prod(shape)

        def args(arr):
            a = [n, *shp, arr(out.root), out.offset]
            for x, kind, st in zip(ins, kinds, sts[1:]):
                a += [arr(x.root), x.offset]
                if kind == cg.GENERAL:
                    a += list(st)
            return tuple(a)
        self.launch1(node.op if node.op != "fused" else "fused", kernel, n, ins, out, args)
        return out

    def _operand_type(self, node: Node, in_types: list[TensorType]) -> TensorType:
        program = program_of(node)
        types: list[TensorType] = []
        for op_name, args, attrs in program:
            arg_t = [in_types[-a - 1] if a < 0 else types[a] for a in args]
            if get_op(op_name).kind == REDUCE:
                return arg_t[0]
            types.append(get_op(op_name).infer(*arg_t, **dict(attrs)))
        raise cg.Untranslatable("no reduction")  # pragma: no cover

    def reduce(self, node: Node, ins: list[Layout], t: TensorType) -> Layout:
        x_t = self.types[id(node.inputs[0])]
        attrs = dict(node.attrs)
        if node.op in ("argmax", "argmin"):
            attrs["axis"] = (attrs["axis"],)
        return self.reduction(node, node.op, attrs, ins, x_t.shape, [], "x0", x_t.dtype, t)

    def reduction(self, node: Node, op: str, attrs: dict, ins: list[Layout], shape: tuple,
                  lines: list[str], value: str, vdtype: str, t: TensorType) -> Layout:
        if op not in cg.REDUCE_OPS:
            raise cg.Untranslatable(f"reduction {op}")
        axes = tuple(attrs["axis"])
        kept = [d for d in range(len(shape)) if d not in axes]
        bst = [x.broadcast(shape).strides for x in ins]
        kshape, ksts = coalesce(tuple(shape[d] for d in kept),
                                [tuple(s[d] for d in kept) for s in bst])
        rshape, rsts = coalesce(tuple(shape[d] for d in axes),
                                [tuple(s[d] for d in axes) for s in bst])
        kinds = [cg.SCALAR if all(v == 0 for v in ks + rs) else cg.GENERAL
                 for ks, rs in zip(ksts, rsts)]
        nrow, nred = prod(kshape), prod(rshape)
        # block mode: a block per row when the reduced axes are long and include the
        # innermost (contiguous) axis; thread mode otherwise (coalesced over rows)
        inner_reduced = any(rst and rst[-1] == 1 for rst in rsts)
        small = nred <= min(32, self.cfg.tree)
        mode = "block" if not small and (inner_reduced or nrow < 64) else "thread"
        src = cg.reduce_source(op, mode, self.cfg.tree, len(kshape), len(rshape), kinds, lines,
                               value, vdtype, t.dtype)
        kernel = load(src, "k_red")
        out = self.fresh(t.dtype, t.dims)
        if mode == "block":
            grid, block = self.rows(nrow), self.cfg.tree
        else:
            grid, block = blocks_for(nrow, self.cfg), self.cfg.threads

        def bind(arr):
            a = [nrow, nred, *kshape, *rshape, arr(out.root), out.offset]
            for x, kind, kst, rst in zip(ins, kinds, ksts, rsts):
                a += [arr(x.root), x.offset]
                if kind == cg.GENERAL:
                    a += list(kst) + list(rst)
            if nrow == 0:
                return lambda: None
            return kernel.bind(grid, block, a)
        self.emit(node.op, ins, [out], bind)
        return out

    # ---- linear algebra -------------------------------------------------------------------
    @KERNELS.register("matmul")
    def op_matmul(self, node: Node, ins: list[Layout], t: TensorType) -> Layout:
        a, b = ins
        dtype = t.dtype
        out = self.fresh(dtype, t.dims)
        *batch_dims, m, n = t.dims
        k = self.shape(node.inputs[0])[-1]
        batch = tuple(batch_dims)
        al = a.broadcast(batch + tuple(a.shape[-2:]))
        bl = b.broadcast(batch + tuple(b.shape[-2:]))
        bshape, (abst, bbst, _) = coalesce(batch, [al.strides[:-2], bl.strides[:-2],
                                                   contiguous_strides(batch)])
        nb = prod(bshape)
        T, R = self.cfg.tile, self._micro(m * nb, n)
        kernel = kn.gemm(dtype, T, R, len(bshape))
        bm = T * R
        cap = self.cfg.max_rows  # the kernel loops over block rows/columns beyond the grid
        grid = (max(1, min(-(-n // bm), cap)), max(1, min(-(-m // bm), cap)),
                max(1, min(nb, cap)))
        use_blas = dtype in ("float32", "float64") and BLAS.get() is not None

        def bind(arr):
            args = (m, n, k, nb, *bshape, arr(out.root), out.offset, arr(a.root), a.offset,
                    al.strides[-2], al.strides[-1], *abst, arr(b.root), b.offset,
                    bl.strides[-2], bl.strides[-1], *bbst)
            if prod(t.dims) == 0:
                return lambda: None
            if k == 0:
                size = prod(t.dims)
                return kn.fill(dtype).bind(blocks_for(size, self.cfg), self.cfg.threads,
                                           (size, arr(out.root), out.offset, 0))

            own = kernel.bind(grid, (T, T), args)
            if not use_blas:
                return own
            views: list[Any] = []

            def blas() -> None:
                if BLAS.cp is None:
                    return own()
                try:
                    if not views:
                        views.extend([BLAS.view(arr(a.root), al, dtype),
                                      BLAS.view(arr(b.root), bl, dtype),
                                      BLAS.view(arr(out.root), out, dtype)])
                    BLAS.cp.matmul(views[0], views[1], out=views[2])
                except Exception as exc:  # noqa: BLE001
                    BLAS.disable(exc)
                    own()
            return blas
        self.emit("matmul", ins, [out], bind)
        return out

    @KERNELS.register("gemm")
    def op_gemm(self, node: Node, ins: list[Layout], t: TensorType) -> Layout:
        """``alpha * (a @ b) + beta * c``: the product (:meth:`op_matmul`), then one generated
        loop scales it and adds the scaled ``c``."""
        a, b, c, alpha, beta = node.inputs
        product = apply("matmul", a, b)
        combined = fused([product, alpha, c, beta], GEMM_EPILOGUE)
        self.keep += [product, combined]  # their ids key self.types while the plan lives
        self.types[id(product)] = t
        mm = self.op_matmul(product, ins[:2], t)
        return self.elementwise(combined, [mm, ins[3], ins[2], ins[4]], t)

    # ---- softmax family -------------------------------------------------------------------
    def _row(self, kind: str, label: str, x: Layout, y: Layout | None, shape: tuple, axis: int,
             out_shape: tuple, dtype: str, y_dtype: str | None) -> Layout:
        x = self.contig(x, dtype)
        if y is not None:
            y = self.contig(y, y_dtype or dtype)
        outer, A, inner = prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])
        nrow = outer * inner
        mode = "thread" if A <= min(32, self.cfg.tree) else "block"
        kernel = kn.row(kind, dtype, mode, self.cfg.tree)
        out = self.fresh(dtype, out_shape)
        if mode == "block":
            grid, block = self.rows(nrow), self.cfg.tree
        else:
            grid, block = blocks_for(nrow, self.cfg), self.cfg.threads
        yy = y if y is not None else x

        def bind(arr):
            a = (nrow, A, inner, arr(out.root), out.offset, arr(x.root), x.offset,
                 arr(yy.root), yy.offset)
            if nrow == 0 or A == 0:
                return lambda: None
            return kernel.bind(grid, block, a)
        self.emit(label, [x] + ([y] if y is not None else []), [out], bind)
        return out

    @KERNELS.register("softmax")
    def op_softmax(self, node, ins, t):
        return self._row("softmax", "softmax", ins[0], None, t.dims, node.attrs["axis"],
                         t.dims, t.dtype, None)

    @KERNELS.register("log_softmax")
    def op_log_softmax(self, node, ins, t):
        return self._row("log_softmax", "log_softmax", ins[0], None, t.dims,
                         node.attrs["axis"], t.dims, t.dtype, None)

    @KERNELS.register("sparse_softmax_cross_entropy")
    def op_sparse_softmax_cross_entropy(self, node, ins, t):
        shape = self.shape(node.inputs[0])
        return self._row("sparse_ce", node.op, ins[0], ins[1], shape, len(shape) - 1, t.dims,
                         t.dtype, self.dtype(node.inputs[1]))

    @KERNELS.register("softmax_cross_entropy")
    def op_softmax_cross_entropy(self, node, ins, t):
        shape = self.shape(node.inputs[0])
        return self._row("dense_ce", node.op, ins[0], ins[1], shape, len(shape) - 1, t.dims,
                         t.dtype, t.dtype)

    # ---- convolution and pooling ----------------------------------------------------------
    def _geom(self, x_shape: tuple, out_hw: tuple, k: tuple, strides: tuple, padding: str,
              dilation: tuple) -> tuple:
        n, h, w, c = x_shape
        oh, pt, _ = window(h, k[0], strides[0], dilation[0], padding)
        ow, pl, _ = window(w, k[1], strides[1], dilation[1], padding)
        assert (oh, ow) == tuple(out_hw), ((oh, ow), out_hw)
        return (n, h, w, c, oh, ow, k[0], k[1], strides[0], strides[1], dilation[0],
                dilation[1], pt, pl)

    def _micro(self, m: int, n: int) -> int:
        """The register micro-tile edge of a GEMM: the largest whose grid still has enough
        blocks to fill the GPU (small outputs get more, smaller blocks)."""
        choices = self.cfg.micro  # the simulator: (2,), to always exercise the micro-tiles
        for r in choices[:-1]:
            bm = self.cfg.tile * r
            if -(-m // bm) * -(-n // bm) >= self.cfg.fill_blocks:
                return r
        return choices[-1]

    def _conv(self, kind: str, node: Node, x: Layout, k: Layout, t: TensorType,
              geom: tuple, m: int, n: int, kk: int) -> Layout:
        """One implicit-GEMM convolution kernel (M x NN outputs, K-long sums)."""
        T = self.cfg.tile
        R = self._micro(m, n)
        bm = T * R
        cap = self.cfg.max_rows  # the kernels loop over block rows/columns beyond the grid
        gx, gy = max(1, min(-(-n // bm), cap)), max(1, min(-(-m // bm), cap))
        splits = 1
        if kind == "bpf" and CONV_SPLIT_K:
            want = -(-self.cfg.fill_blocks // (gx * gy)) if CONV_SPLIT_K < 0 else CONV_SPLIT_K
            splits = max(1, min(want, -(-kk // (4 * T)), cap))
        kchunk = -(-kk // splits)
        kchunk = -(-kchunk // T) * T
        splits = -(-kk // kchunk)
        kernel = kn.conv_gemm(kind, t.dtype, T, R, splits > 1)
        out = self.fresh(t.dtype, t.dims)
        if splits > 1:
            self.fill(out, t.dtype, 0)

        def bind(arr):
            args = (m, n, kk, kchunk, *geom, geom_co(kind, geom, t, node, self), arr(out.root),
                    out.offset, arr(x.root), x.offset, arr(k.root), k.offset)
            if m == 0 or n == 0:
                return lambda: None
            if kk == 0:
                return kn.fill(t.dtype).bind(blocks_for(m * n, self.cfg), self.cfg.threads,
                                             (m * n, arr(out.root), out.offset, 0))
            return kernel.bind((gx, gy, splits), (T, T), args)
        self.emit(node.op, [x, k] + ([out] if splits > 1 else []), [out], bind)
        return out

    @KERNELS.register("conv2d")
    def op_conv2d(self, node, ins, t):
        _no_groups(node)
        x, w = (self.contig(v, t.dtype) for v in ins)
        ws = self.shape(node.inputs[1])
        a = node.attrs
        geom = self._geom(self.shape(node.inputs[0]), t.dims[1:3], ws[:2], a["strides"],
                          a["padding"], a["dilation"])
        return self._conv("fwd", node, x, w, t, geom, prod(t.dims[:3]), ws[3],
                          ws[0] * ws[1] * ws[2])

    @KERNELS.register("conv2d_backprop_input")
    def op_conv2d_backprop_input(self, node, ins, t):
        _no_groups(node)
        ct, w = (self.contig(v, t.dtype) for v in ins)
        ws = self.shape(node.inputs[1])
        a = node.attrs
        geom = self._geom(t.dims, self.shape(node.inputs[0])[1:3], ws[:2], a["strides"],
                          a["padding"], a["dilation"])
        return self._conv("bpi", node, ct, w, t, geom, prod(t.dims[:3]), t.dims[3],
                          ws[0] * ws[1] * ws[3])

    @KERNELS.register("conv2d_backprop_filter")
    def op_conv2d_backprop_filter(self, node, ins, t):
        _no_groups(node)
        x, ct = (self.contig(v, t.dtype) for v in ins)
        cs = self.shape(node.inputs[1])
        a = node.attrs
        geom = self._geom(self.shape(node.inputs[0]), cs[1:3], a["kernel_size"], a["strides"],
                          a["padding"], a["dilation"])
        return self._conv("bpf", node, x, ct, t, geom, prod(t.dims[:3]), t.dims[3],
                          prod(cs[:3]))

    def _pool_geom(self, x_shape, out_shape, a):
        return self._geom(x_shape, out_shape[1:3], a["pool_size"], a["strides"], a["padding"],
                          (1, 1))

    def _pool(self, kind, node, ins, t):
        x = self.contig(ins[0], t.dtype)
        geom = self._pool_geom(self.shape(node.inputs[0]), t.dims, node.attrs)
        out = self.fresh(t.dtype, t.dims)
        n = prod(t.dims)
        self.launch1(node.op, kn.pool(kind, t.dtype), n, [x], out,
                     lambda arr: (n, *geom, arr(out.root), out.offset, arr(x.root), x.offset))
        return out

    @KERNELS.register("max_pool2d")
    def op_max_pool2d(self, node, ins, t):
        return self._pool("max", node, ins, t)

    @KERNELS.register("avg_pool2d")
    def op_avg_pool2d(self, node, ins, t):
        return self._pool("avg", node, ins, t)

    @KERNELS.register("max_pool2d_grad")
    def op_max_pool2d_grad(self, node, ins, t):
        x, y, ct = (self.contig(v, t.dtype) for v in ins)
        geom = self._pool_geom(t.dims, self.shape(node.inputs[1]), node.attrs)
        out = self.fresh(t.dtype, t.dims)
        n = prod(t.dims)
        self.launch1(node.op, kn.max_pool_grad(t.dtype), n, [x, y, ct], out,
                     lambda arr: (n, *geom, arr(out.root), out.offset, arr(x.root), x.offset,
                                  arr(y.root), y.offset, arr(ct.root), ct.offset))
        return out

    @KERNELS.register("avg_pool2d_grad")
    def op_avg_pool2d_grad(self, node, ins, t):
        ct = self.contig(ins[0], t.dtype)
        geom = self._pool_geom(t.dims, self.shape(node.inputs[0]), node.attrs)
        out = self.fresh(t.dtype, t.dims)
        n = prod(t.dims)
        self.launch1(node.op, kn.avg_pool_grad(t.dtype), n, [ct], out,
                     lambda arr: (n, *geom, arr(out.root), out.offset, arr(ct.root),
                                  ct.offset))
        return out

    # ---- gathers, scatters, movement with copies ------------------------------------------
    def _pjs(self, x_shape: tuple, idx_size: int, axis: int) -> tuple[int, int, int, int]:
        return (prod(x_shape[:axis]), x_shape[axis], idx_size, prod(x_shape[axis + 1:]))

    @KERNELS.register("take", "take_along_axis")
    def op_take(self, node, ins, t):
        along = node.op == "take_along_axis"
        x = self.contig(ins[0], t.dtype)
        idx = self.contig(ins[1], self.dtype(node.inputs[1]))
        x_shape, idx_shape = self.shape(node.inputs[0]), self.shape(node.inputs[1])
        p, A, J, S = self._gather_geometry(node, x_shape, idx_shape)
        out = self.fresh(t.dtype, t.dims)
        n = p * J * S
        check = kn.IndexCheck(self.prog.cuda, node.op)
        self.checks.append(check)
        self.launch1(node.op, kn.take(along), n, [x, idx], out,
                     lambda arr: (n, A, J, S, arr(out.root), out.offset, arr(x.root), x.offset,
                                  arr(idx.root), idx.offset, check.flag, 0))
        return out

    @KERNELS.register("take_grad", "take_along_axis_grad")
    def op_take_grad(self, node, ins, t):
        ct = self.contig(ins[0], t.dtype)
        idx = self.contig(ins[1], self.dtype(node.inputs[1]))
        p, A, J, S = self._gather_geometry(node, t.dims, self.shape(node.inputs[1]))
        out = self.fresh(t.dtype, t.dims)
        self.fill(out, t.dtype, 0)
        n = p * J * S
        check = kn.IndexCheck(self.prog.cuda, node.op)
        self.checks.append(check)
        self.launch1(node.op, kn.take_grad(node.op == "take_along_axis_grad"), n,
                     [ct, idx, out], out,
                     lambda arr: (n, A, J, S, arr(out.root), out.offset, arr(ct.root),
                                  ct.offset, arr(idx.root), idx.offset, check.flag, 0))
        return out

    def _gather_geometry(self, node, x_shape: tuple,
                         idx_shape: tuple) -> tuple[int, int, int, int]:
        """(P, A, J, S): x as (P, A, S) around the axis, the gathered side as (P, J, S); for
        the ``take_along_axis`` pair the indices have that shape, checked here."""
        axis = node.attrs["axis"]
        if not node.op.startswith("take_along_axis"):
            return self._pjs(x_shape, prod(idx_shape), axis)
        if tuple(x_shape[:axis] + x_shape[axis + 1:]) != tuple(idx_shape[:axis]
                                                              + idx_shape[axis + 1:]):
            raise ValueError(f"{node.op}: indices of shape {tuple(idx_shape)} and x of shape "
                             f"{tuple(x_shape)} differ off axis {axis}")
        return (prod(x_shape[:axis]), x_shape[axis], idx_shape[axis],
                prod(x_shape[axis + 1:]))

    @KERNELS.register("one_hot")
    def op_one_hot(self, node, ins, t):
        idx = self.contig(ins[0], self.dtype(node.inputs[0]))
        depth = node.attrs["depth"]
        out = self.fresh(t.dtype, t.dims)
        n = prod(t.dims)
        self.launch1("one_hot", kn.one_hot(t.dtype), n, [idx], out,
                     lambda arr: (n, depth, arr(out.root), out.offset, arr(idx.root),
                                  idx.offset))
        return out

    @KERNELS.register("concatenate")
    def op_concatenate(self, node, ins, t):
        axis = node.attrs["axis"]
        out = self.fresh(t.dtype, t.dims)
        start = 0
        for x in ins:
            size = x.shape[axis]
            spec = tuple((start, start + size, 1) if d == axis else (None, None, 1)
                         for d in range(len(t.dims)))
            self.copy_into(out.slice(spec), x, t.dtype, "concatenate")
            start += size
        return out

    @KERNELS.register("pad")
    def op_pad(self, node, ins, t):
        out = self.fresh(t.dtype, t.dims)
        self.fill(out, t.dtype, node.attrs["value"])
        spec = tuple((lo, lo + d, 1) for (lo, _), d in zip(node.attrs["pads"], ins[0].shape))
        self.copy_into(out.slice(spec), ins[0], t.dtype, "pad")
        return out

    @KERNELS.register("slice_grad")
    def op_slice_grad(self, node, ins, t):
        out = self.fresh(t.dtype, t.dims)
        self.fill(out, t.dtype, 0)
        self.copy_into(out.slice(node.attrs["spec"]), ins[0], t.dtype, "slice_grad")
        return out

    def _random(self, kind, node, ins, t):
        key = self.contig(ins[0], "int64")
        out = self.fresh(t.dtype, t.dims)
        n = prod(t.dims)
        salt = int(node.attrs["salt"])
        self.launch1(node.op, kn.random(kind, t.dtype), n, [key], out,
                     lambda arr: (n, arr(out.root), out.offset, arr(key.root), key.offset,
                                  salt))
        return out

    @KERNELS.register("random_uniform")
    def op_random_uniform(self, node, ins, t):
        return self._random("uniform", node, ins, t)

    @KERNELS.register("random_normal")
    def op_random_normal(self, node, ins, t):
        return self._random("normal", node, ins, t)
