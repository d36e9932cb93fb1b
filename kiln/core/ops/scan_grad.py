"""The loop op's gradient (docs/architecture.md, "Loops"): per body, once, the residuals the
backward step reads, the augmented forward body that stacks them, and the backward body; per
loop node, the VJP building the augmented forward loop and the reverse loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.core.ir import FLOAT_DTYPES, Node, substitute, toposort
from kiln.core.ops.elementwise import zeros_like
from kiln.core.ops.registry import get_op
from kiln.core.ops.scan_body import Body, _pick, _scan_node, scan_output
from kiln.core.ops.source import placeholder


def _or_zeros(ct: Node | None, like: Node) -> Node:
    """``ct``, or zeros shaped like ``like`` where there is no cotangent."""
    return zeros_like(like) if ct is None else ct

def make_body(carries: Sequence[Node], xs: Sequence[Node], consts: Sequence[Node],
              new_carries: Sequence[Node], ys: Sequence[Node], name: str = "scan") -> Body:
    """A body over exactly these placeholders (internal loops: the backward body)."""
    return Body(carries, xs, consts, new_carries, ys, name=name)


# ---- the gradient --------------------------------------------------------------------------------
class GradInfo:
    """What differentiating a body needs, built once per body (see the module docstring)."""

    def __init__(self, body: Body):
        from kiln.core.autodiff import vjp_graph

        self.body = body
        outs = body.graph.outputs
        self.ct_phs = [placeholder(o.shape, o.dtype, name=f"ct{k}") for k, o in enumerate(outs)]
        inputs = body.graph.inputs
        self.wrt = [k for k, p in enumerate(inputs) if p.dtype in FLOAT_DTYPES]
        float_outs = [k for k, o in enumerate(outs) if o.dtype in FLOAT_DTYPES]
        grads = vjp_graph([outs[k] for k in float_outs], [self.ct_phs[k] for k in float_outs],
                          [inputs[k] for k in self.wrt])
        fwd_nodes = toposort(outs)
        fwd = {id(n) for n in fwd_nodes}
        carry_dep = _variant(fwd_nodes, body.carries)
        # residuals: carry-dependent forward values the backward graph reads (values of the
        # step inputs alone are recomputed from the sequences in the backward body)
        residuals: list[Node] = []
        seen: set[int] = set()
        roots = [g for g in grads if g is not None]

        def visit(n: Node) -> None:
            if id(n) in carry_dep and id(n) not in seen:
                seen.add(id(n))
                residuals.append(n)

        for n in toposort(roots):
            if id(n) in fwd:
                continue
            for i in n.inputs:
                if id(i) in fwd:
                    visit(i)
        for g in roots:
            if id(g) in fwd:
                visit(g)
        self.residuals = residuals
        # the packed buffer has one dtype: a bool or int residual (a mask of the carry) is
        # stored as that float and cast back in the backward body (exact for bool and int32)
        packed = next((o.dtype for o in outs if o.dtype in FLOAT_DTYPES), "float32")
        stored = [r if r.dtype == packed else get_op("cast")(r, dtype=packed)
                  for r in residuals]
        self.augmented = Body(body.carries, body.xs, body.consts, body.new_carries,
                              body.ys + stored, base=body, name=body.name)
        # the backward body: carries = (ct of the carries, sums of the consts' gradients);
        # xs = (cts of the ys, residuals, step inputs read); consts = the consts read
        res_phs = [placeholder(r.shape, packed, name=f"res{k}") for k, r in enumerate(residuals)]
        mapping = {r: (ph if r.dtype == packed else get_op("cast")(ph, dtype=r.dtype))
                   for r, ph in zip(residuals, res_phs)}
        nc, nx = body.n_carry, body.n_x
        g_by_input: dict[int, Node | None] = dict(zip(self.wrt, grads))
        grads_sub = substitute([g for g in grads if g is not None], mapping)
        it = iter(grads_sub)
        for k in self.wrt:
            if g_by_input[k] is not None:
                g_by_input[k] = next(it)
        read = {id(n) for n in toposort(grads_sub)}
        self.const_float = [j for j in range(len(body.consts))
                            if body.consts[j].dtype in FLOAT_DTYPES]

        self.x_float = [k for k in range(nx) if body.xs[k].dtype in FLOAT_DTYPES]
        self.xs_read = [k for k in range(nx) if id(body.xs[k]) in read]
        self.consts_read = [j for j in range(len(body.consts)) if id(body.consts[j]) in read]
        bwd_xs = self.ct_phs[nc:] + res_phs + [body.xs[k] for k in self.xs_read]
        new_carries = []
        for k in range(nc):
            new_carries.append(_or_zeros(g_by_input.get(k), self.ct_phs[k]))
        ys_out = []
        for k in self.x_float:
            ys_out.append(_or_zeros(g_by_input.get(nc + k), body.xs[k]))
        # a const's gradient is a sum over the steps. Its terms x_t^T @ b_t, with x_t a step
        # input of the backward loop (a residual: the previous state), leave the loop: b_t
        # becomes a per-step output and the sum is ONE GEMM over all steps after it (an RNN's
        # recurrent kernel gradient); the other terms are summed in a carry.
        position = {id(x): k for k, x in enumerate(bwd_xs)}
        self.acc_of: dict[int, int] = {}      # m (index in const_float) -> bwd carry index
        self.hoisted: list[tuple[int, int, int]] = []  # (m, bwd xs index, bwd ys index)
        acc_phs: list[Node] = []
        for m, j in enumerate(self.const_float):
            kept = []
            for term in _terms(g_by_input.get(nc + nx + j)):
                a = term.inputs[0] if term.op == "matmul" else None
                if (a is not None and term.ndim == 2 and a.op == "transpose"
                        and tuple(a.attrs["perm"]) == (1, 0)
                        and id(a.inputs[0]) in position and term.type == body.consts[j].type
                        and None not in (a.shape[0], term.shape[1])):
                    b = term.inputs[1]
                    at = next((i for i, y in enumerate(ys_out) if y is b), None)
                    if at is None:  # (often b_t is already an output: the inputs' gradient)
                        at = len(ys_out)
                        ys_out.append(b)
                    self.hoisted.append((m, position[id(a.inputs[0])], at))
                else:
                    kept.append(term)
            if kept:
                acc = placeholder(body.consts[j].shape, body.consts[j].dtype, name=f"acc{j}")
                total = kept[0]
                for t in kept[1:]:
                    total = get_op("add")(total, t)
                self.acc_of[m] = nc + len(acc_phs)
                acc_phs.append(acc)
                new_carries.append(get_op("add")(acc, _fit(total, acc)))
        bwd_carries = self.ct_phs[:nc] + acc_phs
        bwd_consts = [body.consts[j] for j in self.consts_read]
        self.backward = make_body(bwd_carries, bwd_xs, bwd_consts, new_carries, ys_out,
                                  name=f"{body.name}_grad")


def _terms(g: Node | None) -> list[Node]:
    """The summands of ``g`` (through nested adds of equal types)."""
    if g is None:
        return []
    if g.op == "add" and all(i.type == g.type for i in g.inputs):
        return _terms(g.inputs[0]) + _terms(g.inputs[1])
    return [g]


def _fit(g: Node, like: Node) -> Node:
    from kiln.core.autodiff import unbroadcast

    return unbroadcast(g, like)


def _variant(nodes: Sequence[Node], sources: Sequence[Node]) -> set[int]:
    """ids of the nodes that depend on any of ``sources``."""
    result = {id(s) for s in sources}
    for n in nodes:
        if any(id(i) in result for i in n.inputs):
            result.add(id(n))
    return result


def grad_info(body: Body) -> GradInfo:
    if body._grad is None:
        body._grad = GradInfo(body.base if body.base is not None else body)
    return body._grad


def _scan_vjp(ct: Any, out: Node, *inputs: Node, body: Body, length: int | None,
              reverse: bool) -> list[Node | None]:
    """``ct`` is ``(ct of the packed buffer or None, {output index: ct})`` (autodiff collects
    the cotangents of the ``scan_output`` views; see ``kiln.core.autodiff``)."""

    direct, per_output = ct if isinstance(ct, tuple) else (ct, {})
    info = grad_info(body)
    base = info.body
    n_out = base.n_carry + base.n_y
    cts: dict[int, Node] = dict(per_output)
    if direct is not None:  # a use of the packed buffer itself: split its cotangent
        for k in range(n_out):
            part = _pick(direct, inputs, body, length, k)
            cts[k] = part if k not in cts else get_op("add")(cts[k], part)
    nc, nx = base.n_carry, base.n_x
    fwd = _scan_node(info.augmented, inputs, length, reverse)
    outs = [scan_output(fwd, k) for k in range(n_out)]
    residuals = [scan_output(fwd, n_out + r) for r in range(len(info.residuals))]
    ct_carry = [_or_zeros(cts.get(k), outs[k]) for k in range(nc)]
    ct_ys = [_or_zeros(cts.get(k), outs[k]) for k in range(nc, n_out)]
    consts = list(inputs[nc + nx:])
    acc0 = [zeros_like(consts[info.const_float[m]]) for m in sorted(info.acc_of)]
    xs = list(inputs[nc:nc + nx])
    bwd_xs_in = ct_ys + residuals + [xs[k] for k in info.xs_read]
    bwd_in = (ct_carry + acc0 + bwd_xs_in + [consts[j] for j in info.consts_read])
    has_seq = bool(bwd_xs_in)
    bwd = _scan_node(info.backward, bwd_in, None if has_seq else length, not reverse)
    if not has_seq and length is None:
        raise ValueError(f"{base.name}: cannot differentiate a loop with no sequences and no "
                         "length")
    grads: list[Node | None] = [None] * len(inputs)
    for k in range(nc):
        if inputs[k].dtype in FLOAT_DTYPES:
            grads[k] = scan_output(bwd, k)
    n_bwd_carry = nc + len(info.acc_of)
    for m, j in enumerate(info.const_float):
        parts = [scan_output(bwd, info.acc_of[m])] if m in info.acc_of else []
        for mm, xi, yi in info.hoisted:
            if mm == m:  # sum_t x_t^T b_t: one GEMM over the folded steps and batch
                x_seq, b_seq = bwd_xs_in[xi], scan_output(bwd, n_bwd_carry + yi)
                x2 = get_op("reshape")(x_seq, shape=(-1, x_seq.shape[-1]))
                b2 = get_op("reshape")(b_seq, shape=(-1, b_seq.shape[-1]))
                parts.append(get_op("matmul")(get_op("transpose")(x2, perm=(1, 0)), b2))
        total = parts[0] if parts else zeros_like(consts[j])
        for p in parts[1:]:
            total = get_op("add")(total, p)
        grads[nc + nx + j] = total
    for m, k in enumerate(info.x_float):
        grads[nc + k] = scan_output(bwd, n_bwd_carry + m)
    return grads
