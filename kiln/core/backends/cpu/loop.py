"""The loop op on the CPU: ``scan`` runs its body as a compiled sub-program once per step.

The body graph (optimized by the ``loops`` pass, docs/architecture.md "Loops") becomes its
own :class:`~kiln.core.backends.cpu.program.CpuProgram` with one plan for the step's shapes:
its feed buffers hold the carry, the step's inputs and the consts (copied once per run); each
step copies the step inputs in, calls the body's kernels and copies the new carries and the
step's outputs out (into the loop's packed output). Each outer plan owns its body program, so
two compiled functions sharing a body never share buffers.
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Graph
from kiln.core.layout import prod
from kiln.core.ops.scan_body import offsets, output_types


@builder("scan")
def build_scan(b, node) -> None:
    from kiln.core.backends.cpu.program import CpuProgram
    from kiln.core.passes import optimize

    body = node.attrs["body"]
    nc, nx, ny = body.n_carry, body.n_x, body.n_y
    graph = body.graph
    if not body.optimized:
        graph, _ = optimize(Graph(graph.inputs, graph.outputs))
    types = [b.static.type(i) for i in node.inputs]
    outs = output_types(types, body, node.attrs["length"])
    packed = b.out(node)
    views = [packed[o:o + prod(t.shape)].reshape(t.shape) for o, t in zip(offsets(outs), outs)]
    finals, ys = views[:nc], views[nc:]
    ins = [b.array(i) for i in node.inputs]
    carries0, seqs, consts = ins[:nc], ins[nc:nc + nx], ins[nc + nx:]
    if ny:
        steps = outs[nc].shape[0]
    elif nx:
        steps = seqs[0].shape[0]
    else:
        steps = int(node.attrs["length"])
    sub = CpuProgram(graph)
    sub.bind_feeds = False
    shapes = ([c.shape for c in carries0] + [s.shape[1:] for s in seqs]
              + [c.shape for c in consts])
    plan = sub.plan([np.empty(s, np.dtype(p.dtype)) for s, p in zip(shapes, graph.inputs)])
    feeds = plan.feed_buffers
    results = plan.outputs
    calls = plan.calls
    carry_in, x_in, const_in = feeds[:nc], feeds[nc:nc + nx], feeds[nc + nx:]
    new_carry, y_out = results[:nc], results[nc:]
    # a new carry that is a view of a feed buffer (a carry passed through, two carries
    # swapped) is staged, so that no carry is overwritten before it is read
    staged = [any(np.shares_memory(r, f) for f in feeds) for r in new_carry]
    stage = [np.empty_like(r) if s else None for r, s in zip(new_carry, staged)]
    order = range(steps - 1, -1, -1) if node.attrs["reverse"] else range(steps)
    python = plan.info.get("python")

    def run_loop() -> None:
        for dst, src in zip(carry_in, carries0):
            np.copyto(dst, src)
        for dst, src in zip(const_in, consts):
            np.copyto(dst, src)
        with np.errstate(all="ignore" if python else "warn"):
            for t in order:
                for dst, src in zip(x_in, seqs):
                    np.copyto(dst, src[t])
                for fn, args in calls:
                    fn(*args)
                for dst, src in zip(ys, y_out):
                    np.copyto(dst[t], src)
                for k in range(nc):
                    if stage[k] is not None:
                        np.copyto(stage[k], new_carry[k])
                for k in range(nc):
                    np.copyto(carry_in[k], new_carry[k] if stage[k] is None else stage[k])
        for dst, src in zip(finals, carry_in):
            np.copyto(dst, src)

    b.add(run_loop, (), label=f"scan {body.name} ({steps} steps, {len(calls)} kernels/step)")
