"""The loop op on the CPU: ``scan`` runs its body as a compiled sub-program once per step.

The body graph (optimized by the ``loops`` pass, docs/architecture.md "Loops") becomes its
own :class:`~kiln.core.backends.cpu.runtime.program.CpuProgram` with one plan for the step's shapes.
Each outer plan owns its body program, so two compiled functions never share its buffers.

Per step, the body's kernels run on:

* the carries: copied into the body's feed buffers (small), the new ones copied back;
* the step's inputs and the consts: **bound**, not copied, when they are C-contiguous and
  every kernel argument reading the feed buffer lies inside it: those arguments are views of
  ``xs[t]`` (of the const), as the executor binds large feeds (``feeds.feed_binding``);
  else copied;
* the per-step outputs: bound the same way to their slot ``ys[t]`` of the loop's packed
  output (the kernel computing an output writes it there), else copied after the step.

The inputs, consts and output slots are fixed arrays of the outer plan, so every step's call
list is built once per plan: the loop itself only calls kernels and copies the carries.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.backends.cpu.registry import builder
from kiln.core.backends.cpu.runtime import parts, poison
from kiln.core.ir import Graph
from kiln.core.layout import prod
from kiln.core.ops.scan_body import offsets, output_types

_bounds = np.lib.array_utils.byte_bounds


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def binding(steps: list, target: np.ndarray) -> list[tuple[int, int, int, tuple, tuple]] | None:
    """The kernel arguments viewing ``target``'s memory as ``(step, position, byte offset,
    shape, strides)``, or None when one cannot be rebuilt around another array of its size
    (an argument reaching outside ``target``, a closure holding it)."""
    from kiln.core.backends.cpu.runtime.feeds import closure_arrays

    lo, hi = _bounds(target)
    refs = []
    for k, step in enumerate(steps):
        # arrays the step holds where they cannot be rebuilt: in its function's closure, or
        # inside an argument that is not an array (a Winograd pipeline's list of chunk calls).
        # Those would keep reading (writing) the body's own buffer while the bound steps move
        # to xs[t] (ys[t]): a step input never copied there, read uninitialised (issue: p51's
        # NaN kernel gradients, varying with what the memory held before)
        held = closure_arrays(step.fn) + closure_arrays(
            [a for a in step.args if not isinstance(a, np.ndarray)])
        if any(np.shares_memory(a, target) for a in held):
            return None
        for pos, a in enumerate(step.args):
            if not isinstance(a, np.ndarray) or not a.size or not np.shares_memory(a, target):
                continue
            a_lo, a_hi = _bounds(a)
            if a_lo < lo or a_hi > hi or a.dtype != target.dtype:
                return None
            refs.append((k, pos, _ptr(a) - _ptr(target), a.shape, a.strides))
    return refs


class _Calls:
    """The body plan's calls as a mutable list, with :meth:`bind` rebuilding arguments."""

    def __init__(self, plan: Any):
        self.calls = [(fn, list(args)) for fn, args in plan.calls]

    def bind(self, refs: list, src: np.ndarray) -> None:
        for k, pos, offset, shape, strides in refs:
            self.calls[k][1][pos] = np.ndarray(shape, src.dtype, buffer=src, offset=offset,
                                               strides=strides)

    def frozen(self) -> list[tuple[Any, tuple]]:
        return [(fn, tuple(args)) for fn, args in self.calls]


@builder("scan")
def build_scan(b, node) -> None:
    from kiln.core.backends.cpu.runtime.program import CpuProgram
    from kiln.core.passes import optimize

    body = node.attrs["body"]
    nc, nx, ny = body.n_carry, body.n_x, body.n_y
    graph = body.graph
    if not body.optimized:
        graph, _ = optimize(Graph(graph.inputs, graph.outputs))
    types = [b.static.type(i) for i in node.inputs]
    outs = output_types(types, body, node.attrs["length"])
    packed = b.out(node)
    views = [packed[o:o + prod(t.dims)].reshape(t.dims) for o, t in zip(offsets(outs), outs)]
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
    # its kernels split as before (runtime/serial.py): a step's kernels run `steps` times
    # a call, and the recurrent models were measured on that (issue 47)
    sub.serial_small = False
    shapes = ([c.shape for c in carries0] + [s.shape[1:] for s in seqs]
              + [c.shape for c in consts])
    plan = sub.plan([poison.empty(s, np.dtype(p.dtype)) for s, p in zip(shapes, graph.inputs)])
    feeds, results = plan.feed_buffers, plan.outputs
    carry_in, x_in, const_in = feeds[:nc], feeds[nc:nc + nx], feeds[nc + nx:]
    new_carry, y_out = results[:nc], results[nc:]
    calls = _Calls(plan)
    # what reads a step input or const, what writes a per-step output: bound where possible
    # (the layouts are this plan's, so which arrays are C-contiguous is known now)
    x_refs = [binding(plan.steps, buf) if seq.flags.c_contiguous else None
              for buf, seq in zip(x_in, seqs)]
    c_refs = [binding(plan.steps, buf) if src.flags.c_contiguous else None
              for buf, src in zip(const_in, consts)]
    y_refs = []
    for k, y in enumerate(y_out):
        aliased = any(np.shares_memory(y, f) for f in feeds) or any(
            np.shares_memory(y, o) for j, o in enumerate(results) if j != nc + k)
        y_refs.append(None if aliased else binding(plan.steps, y))
    copied_x = [k for k, r in enumerate(x_refs) if r is None]
    copied_c = [k for k, r in enumerate(c_refs) if r is None]
    copied_y = [k for k, r in enumerate(y_refs) if r is None]
    order = list(range(steps - 1, -1, -1) if node.attrs["reverse"] else range(steps))
    # every step's calls, built once per plan: the consts, the step's inputs and its output
    # slots are fixed arrays of this plan, so no argument is rebuilt while the loop runs
    for j, refs in enumerate(c_refs):
        if refs is not None:
            calls.bind(refs, consts[j])
    per_step = []
    for t in order:  # (``a[t, ...]``: a view even where ``a`` is 1-D; ``a[t]`` would be a
        # NumPy scalar there, a copy: a step's output written into it was lost, and a step
        # input bound to it kept the value of the plan's first call)
        for k, refs in enumerate(x_refs):
            if refs is not None:
                calls.bind(refs, seqs[k][t, ...])
        for k, refs in enumerate(y_refs):
            if refs is not None:
                calls.bind(refs, ys[k][t, ...])
        per_step.append((t, calls.frozen()))
    # a new carry that is a view of a feed buffer (a carry passed through, two carries
    # swapped) is staged, so that no carry is overwritten before it is read
    staged = [any(np.shares_memory(r, f) for f in feeds) for r in new_carry]
    stage = [np.empty_like(r) if s else None for r, s in zip(new_carry, staged)]
    python = plan.info.get("python")
    settled: list[bool] = []

    def run_loop() -> None:
        if not settled:  # the body's kernels were compiled with the outer plan's batch
            per_step[:] = [(t, [(parts.settled(fn), args) for fn, args in step_calls])
                           for t, step_calls in per_step]
            settled.append(True)
        for dst, src in zip(carry_in, carries0):
            np.copyto(dst, src)
        for j in copied_c:
            np.copyto(const_in[j], consts[j])
        with np.errstate(all="ignore" if python else "warn"):
            for t, step_calls in per_step:
                for k in copied_x:
                    np.copyto(x_in[k], seqs[k][t, ...])
                for fn, args in step_calls:
                    fn(*args)
                for k in copied_y:
                    np.copyto(ys[k][t, ...], y_out[k])
                for k in range(nc):
                    held = stage[k]
                    if held is not None:
                        np.copyto(held, new_carry[k])
                for k in range(nc):
                    held = stage[k]
                    np.copyto(carry_in[k], new_carry[k] if held is None else held)
        for dst, src in zip(finals, carry_in):
            np.copyto(dst, src)

    bound = (f"{nx - len(copied_x)}/{nx} inputs and {ny - len(copied_y)}/{ny} outputs bound")
    b.add(run_loop, (), label=f"scan {body.name} ({steps} steps, {len(plan.calls)} kernels/step,"
          f" {bound})")
