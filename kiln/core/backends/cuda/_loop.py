"""The loop op on the GPU: ``scan`` runs its body's device program once per step (a host
loop over device launches; docs/architecture.md, "Loops").

The body graph (optimized by the ``loops`` pass) becomes its own
:class:`~kiln.core.backends.cuda._program.CudaProgram` planned once for the step's shapes, with
its own device arena. One launch step of the outer plan: the initial carries are copied into
the final-carry slots of the loop's packed output; each step copies the carries and the step's
inputs device-to-device into the body's feed ranges, runs the body's launches, and copies the
new carries back into the final-carry slots and the step's outputs into their stacked slots.
The consts are copied into the body's feeds once.
"""

from __future__ import annotations

from kiln.core.backends.cuda import _codegen as cg
from kiln.core.backends.cuda._lower import KERNELS
from kiln.core.ir import Graph, Node, TensorType
from kiln.core.layout import Layout, prod
from kiln.core.ops.scan_body import offsets, output_types


@KERNELS.register("scan")
def op_scan(self, node: Node, ins: list[Layout], t: TensorType) -> Layout:
    from kiln.core.backends.cuda._program import CudaProgram
    from kiln.core.passes import optimize

    body = node.attrs["body"]
    nc, nx = body.n_carry, body.n_x
    graph = body.graph
    if not body.optimized:
        graph, _ = optimize(Graph(graph.inputs, graph.outputs))
    in_types = [self.types[id(i)] for i in node.inputs]
    outs = output_types(in_types, body, node.attrs["length"])
    offs = offsets(outs)
    ins = [self.contig(lay, tt.dtype) for lay, tt in zip(ins, in_types)]
    out = self.fresh(t.dtype, t.shape)
    if body.n_y:
        steps = outs[nc].shape[0]
    elif nx:
        steps = in_types[nc].shape[0]
    else:
        steps = int(node.attrs["length"])
    step_shapes = ([tt.shape for tt in in_types[:nc]] + [tt.shape[1:] for tt in
                                                          in_types[nc:nc + nx]]
                   + [tt.shape for tt in in_types[nc + nx:]])
    sub = CudaProgram(graph)
    sub.keep_feeds = True
    plan = sub._plan(tuple(tuple(s) for s in step_shapes))
    if plan.params:
        raise cg.Untranslatable("a loop body that reads Variables")
    feed_of = {k: (arr, off, n) for k, arr, off, n in plan.feeds}
    sizes = [prod(o.dims) for o in outs]
    x_sizes = [prod(tt.dims[1:]) for tt in in_types[nc:nc + nx]]
    order = list(range(steps - 1, -1, -1) if node.attrs["reverse"] else range(steps))

    def bind(arr):
        src = [arr(lay.root) for lay in ins]
        dst = arr(out.root)
        base = out.offset

        def d2d(to, to_off, frm, frm_off, n):
            if n:
                to[to_off:to_off + n].copy_to_device(frm[frm_off:frm_off + n])

        def run() -> None:
            for k in range(nc):  # the final-carry slots hold the carry between steps
                d2d(dst, base + offs[k], src[k], ins[k].offset, sizes[k])
            for j in range(len(ins) - nc - nx):
                k = nc + nx + j
                if k in feed_of:
                    f_arr, f_off, n = feed_of[k]
                    d2d(f_arr, f_off, src[k], ins[k].offset, n)
            for s in order:
                for k in range(nc):
                    if k in feed_of:
                        f_arr, f_off, n = feed_of[k]
                        d2d(f_arr, f_off, dst, base + offs[k], n)
                for m in range(nx):
                    k = nc + m
                    if k in feed_of:
                        f_arr, f_off, n = feed_of[k]
                        d2d(f_arr, f_off, src[k], ins[k].offset + s * x_sizes[m], n)
                for fn in plan.fns:
                    fn()
                for k, (o_arr, o_off, shape, _) in enumerate(plan.outputs):
                    n = prod(shape)
                    at = base + offs[k] + (0 if k < nc else s * n)
                    d2d(dst, at, o_arr, o_off, n)
            for check in plan.checks:
                check()
        return run

    self.emit(f"scan {body.name} ({steps} steps)", ins, [out], bind)
    return out
