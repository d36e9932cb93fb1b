"""loops: one forward loop per sequence, only the outputs that are used, optimized bodies.

For every ``scan`` node (docs/architecture.md, "Loops"):

1. **merge**: differentiating a loop rebuilds it with an *augmented* body that also stacks the
   residuals the backward loop reads (``Body.base`` is the original body). The original loop,
   when the same inputs feed both, is replaced by the augmented one: its outputs are the first
   outputs of the augmented loop, so the forward pass runs once;
2. **optimize**: the body graph goes through the whole pipeline (:func:`kiln.core.passes.
   optimize`): fusion of its elementwise ops, constant folding, CSE, nested loops. The body's
   report is kept on it (``Body.report``) and shown in the compile report under the loop;
3. **prune**, until nothing changes: per-step outputs that nothing reads are dropped from the
   body (the residuals of a loop that was differentiated and then not trained, ``ys`` a
   caller ignores), and so are the sequences and consts the body no longer reads (an
   optimized backward body may not need a residual it read only for its shape).

Example:
    >>> g = loops(graph)
"""

from __future__ import annotations

from kiln.core.ir import Graph, Node, rebuild, toposort
from kiln.core.ops.scan_body import Body, _scan_node, scan_output


def _key(node: Node, body: Body) -> tuple:
    return (id(body), tuple(id(i) for i in node.inputs), node.attrs["length"],
            node.attrs["reverse"])


def _merge(graph: Graph) -> Graph:
    augmented = {}
    for n in graph.nodes:
        if n.op == "scan" and n.attrs["body"].base is not None:
            augmented[_key(n, n.attrs["body"].base)] = n
    if not augmented:
        return graph
    mapping: dict[Node, Node] = {}
    for n in graph.nodes:
        if n.op == "scan_output" and n.inputs[0].op == "scan":
            loop = n.inputs[0]
            target = augmented.get(_key(loop, loop.attrs["body"]))
            if target is not None and target is not loop:
                mapping[n] = scan_output(target, n.attrs["index"])
    return graph.substitute(mapping) if mapping else graph


def _rebuild(loop: Node, used: set[int], optimize_body: bool) -> tuple[Node, dict[int, int]]:
    """``loop`` with a body computing only the ``used`` outputs (the carries are always
    computed) and reading only the sequences and consts it needs, optimized when asked;
    returns the new loop and old index -> new index (``loop`` itself when nothing changes)."""
    from kiln.core.passes import optimize

    body: Body = loop.attrs["body"]
    nc, nx = body.n_carry, body.n_x
    keep_ys = [k for k in range(body.n_y) if nc + k in used]
    outputs = body.new_carries + [body.ys[k] for k in keep_ys]
    report = body.report
    optimize_body = optimize_body and not body.optimized
    if optimize_body:
        graph, report = optimize(Graph(body.graph.inputs, outputs))
        outputs = graph.outputs
    read = {id(n) for n in toposort(outputs)}
    xs_kept = [k for k in range(nx) if id(body.xs[k]) in read]
    if not xs_kept and nx and loop.attrs["length"] is None:
        xs_kept = [0]  # the number of steps comes from a sequence
    consts_kept = [j for j in range(len(body.consts)) if id(body.consts[j]) in read]
    if not optimize_body and len(keep_ys) == body.n_y and len(xs_kept) == nx and \
            len(consts_kept) == len(body.consts):
        return loop, {k: k for k in range(nc + body.n_y)}
    new_body = Body(body.carries, [body.xs[k] for k in xs_kept],
                    [body.consts[j] for j in consts_kept], outputs[:nc], outputs[nc:],
                    name=body.name)
    new_body.optimized = body.optimized or optimize_body
    new_body.report = report
    ins = loop.inputs
    new_inputs = (list(ins[:nc]) + [ins[nc + k] for k in xs_kept]
                  + [ins[nc + nx + j] for j in consts_kept])
    new_loop = _scan_node(new_body, new_inputs, loop.attrs["length"], loop.attrs["reverse"])
    index = {k: k for k in range(nc)}
    index.update({nc + k: nc + m for m, k in enumerate(keep_ys)})
    return new_loop, index


def _sweep(graph: Graph, optimize_bodies: bool) -> Graph:
    """One walk over ``graph`` rebuilding every loop whose packed buffer is read only through
    ``scan_output`` views (see :func:`_rebuild`); ``graph`` itself when nothing changed."""
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    new: dict[int, Node] = {}
    remap: dict[int, dict[int, int]] = {}
    changed = False
    for n in graph.nodes:
        ins = [new.get(id(i), i) for i in n.inputs]
        if n.op == "scan" and id(n) not in outputs and all(
                u.op == "scan_output" and u.inputs[0] is n for u in users[id(n)]):
            # (a use of the packed buffer itself keeps every output)
            used = {u.attrs["index"] for u in users[id(n)]}
            loop = rebuild(n, ins)
            new[id(n)], remap[id(n)] = _rebuild(loop, used, optimize_bodies)
            changed = changed or new[id(n)] is not loop or loop is not n
        elif n.op == "scan_output" and id(n.inputs[0]) in remap:
            new[id(n)] = scan_output(new[id(n.inputs[0])], remap[id(n.inputs[0])][
                n.attrs["index"]])
        else:
            new[id(n)] = rebuild(n, ins)
    if not changed:
        return graph
    return Graph(graph.inputs, [new[id(o)] for o in graph.outputs])


def loops(graph: Graph) -> Graph:
    """Merges, prunes and optimizes every loop of ``graph`` (see the module docstring)."""
    if not any(n.op == "scan" for n in graph.nodes):
        return graph
    graph = _sweep(_merge(graph), optimize_bodies=True)
    # an optimized backward body may no longer read a residual (one it needed only for a
    # shape): its input goes, then the forward loop's output, then what computed it
    for _ in range(8):
        pruned = _sweep(graph, optimize_bodies=False)
        if pruned is graph:
            break
        graph = pruned
    return graph
