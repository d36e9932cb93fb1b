"""ONNX rules for loops: ``scan`` and its ``scan_output`` views (docs/architecture.md, "Loops"
and docs/features.md, "Export to ONNX").

A kiln loop (inputs: initial carries, sequences, consts) becomes an ONNX ``Scan``: the carries
are its state variables, the sequences its scan inputs (read backwards with
``scan_input_directions`` when ``reverse``, the stacked outputs then written backwards too, so
``ys[t]`` stays the output of step ``t``), and the body reads the consts from the enclosing
graph by name. The sequence length stays dynamic. A loop without sequences (a static
``length``), or any loop of static length when ``unroll`` allows it, is unrolled instead: the
body is written once per step.

kiln's ``scan`` node has ONE packed output (the final carries then the stacked outputs,
flattened) that its ``scan_output`` nodes view; in ONNX the loop's outputs are separate
values, so ``scan_output`` picks one, and the packed buffer is a ``Concat`` that dead-code
removal drops when nothing else reads it.
"""

from __future__ import annotations

import numpy as np

from kiln.export.onnx_emit import Call, Emitter, ExportError, Rule, prune, value_info

RULES: dict[str, Rule] = {}


def _steps(c: Call) -> int | None:
    """The loop's number of steps when it is known at export time."""
    body = c.attrs["body"]
    if c.attrs["length"] is not None:
        return int(c.attrs["length"])
    nc = body.n_carry
    for t in c.in_types[nc:nc + body.n_x]:
        if t.shape[0] is not None:
            return int(t.shape[0])
    return None


def _scan(ctx: Emitter, c: Call) -> str:
    body = c.attrs["body"]
    reverse = bool(c.attrs["reverse"])
    nc, nx = body.n_carry, body.n_x
    carries, xs, consts = c.inputs[:nc], c.inputs[nc:nc + nx], c.inputs[nc + nx:]
    steps = _steps(c)
    unroll = ctx.options.unroll
    if nx == 0 or (unroll and steps is not None and steps <= unroll):
        outs = _unrolled(ctx, c, carries, xs, consts, steps)
    else:
        outs = _onnx_scan(ctx, c, carries, xs, consts, reverse)
    assert c.node is not None
    ctx.multi[id(c.node)] = outs
    if not outs:
        return ctx.const(np.zeros(0, c.dtype))
    flat = [ctx.op("Reshape", [o, ctx.ints([-1])]) for o in outs]
    return flat[0] if len(flat) == 1 else ctx.op("Concat", flat, axis=0, hint="packed")


def _onnx_scan(ctx: Emitter, c: Call, carries: list[str], xs: list[str], consts: list[str],
               reverse: bool) -> list[str]:
    body = c.attrs["body"]
    sub = ctx.child()
    env: dict[int, str] = {}
    inputs = []
    for ph in body.carries + body.xs:
        name = ctx.names.fresh(ph.attrs.get("name") or "step_in")
        env[id(ph)] = name
        inputs.append(value_info(ctx.onnx, name, ph.type))
    for ph, outer in zip(body.consts, consts):
        env[id(ph)] = outer  # read from the enclosing graph
    sub.emit(body.graph.nodes, env)
    outputs, names = [], []
    for o in body.new_carries + body.ys:
        name = sub.op("Identity", [env[id(o)]], hint=f"{body.name}_out")
        names.append(name)
        outputs.append(value_info(ctx.onnx, name, o.type))
    graph = ctx.onnx.helper.make_graph(prune(sub.nodes, names), ctx.names.fresh(body.name),
                                       inputs, outputs)
    n_out = body.n_carry + body.n_y
    outs = ctx.op("Scan", carries + xs, n_out=n_out, hint=body.name, body=graph,
                  num_scan_inputs=len(xs), scan_input_directions=[int(reverse)] * len(xs),
                  scan_output_directions=[int(reverse)] * body.n_y or None)
    return [outs] if n_out == 1 else list(outs)


def _unrolled(ctx: Emitter, c: Call, carries: list[str], xs: list[str], consts: list[str],
              steps: int | None) -> list[str]:
    body = c.attrs["body"]
    if steps is None:
        raise ExportError(f"cannot export to ONNX: loop {body.name!r}{ctx.layer_of(c.node)} has "
                          "no sequences and an unknown number of steps")
    if steps == 0 and body.n_y:
        raise ExportError(f"cannot export to ONNX: loop {body.name!r}{ctx.layer_of(c.node)} has "
                          "zero steps and per-step outputs")
    state = list(carries)
    ys: list[list[str]] = [[""] * steps for _ in range(body.n_y)]
    order = range(steps - 1, -1, -1) if c.attrs["reverse"] else range(steps)
    for t in order:
        env = {id(ph): v for ph, v in zip(body.carries, state)}
        for ph, x in zip(body.xs, xs):
            env[id(ph)] = ctx.op("Gather", [x, ctx.const(np.asarray(t, np.int64), hint="t")],
                                 axis=0, hint=f"{body.name}_x")
        env.update({id(ph): v for ph, v in zip(body.consts, consts)})
        ctx.emit(body.graph.nodes, env)
        state = [env[id(o)] for o in body.new_carries]
        for k, y in enumerate(body.ys):
            ys[k][t] = ctx.op("Unsqueeze", [env[id(y)], ctx.ints([0])])
    stacked = [row[0] if len(row) == 1 else ctx.op("Concat", row, axis=0, hint=f"{body.name}_ys")
               for row in ys]
    return state + stacked


def _scan_output(ctx: Emitter, c: Call) -> str:
    loop = c.node.inputs[0] if c.node is not None else None
    outs = ctx.multi.get(id(loop)) if loop is not None else None
    if outs is None:
        raise ExportError(f"cannot export to ONNX: scan_output of a {getattr(loop, 'op', '?')} "
                          f"node{ctx.layer_of(c.node)} (only a loop's own outputs are "
                          "exportable; a loop's cotangent appears only in training graphs)")
    return outs[int(c.attrs["index"])]


RULES["scan"] = _scan
RULES["scan_output"] = _scan_output
