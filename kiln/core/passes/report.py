"""DOT (Graphviz) text for a graph; fused nodes are drawn as clusters of their instructions.

Each plain node is a box ``op\\ntype``; sources are ellipses; a fused node becomes
``subgraph cluster_N`` holding one node per instruction (``f3_0: mul`` ...) with the edges of
the program; its external inputs point at the instructions that read them and its last
instruction stands for the fused node's result.
"""

from __future__ import annotations

from kiln.core.ir import Graph, Node


def _esc(*parts: str) -> str:
    """Escapes ``parts`` for a DOT string and joins them as separate lines."""
    return "\\n".join(p.replace("\\", "\\\\").replace('"', '\\"') for p in parts)


def _label(node: Node) -> str:
    if node.op == "constant":
        arr = node.attrs["value"].array
        body = repr(node.attrs["value"]) if arr.size <= 4 else f"constant {arr.shape}"
        return _esc(body, str(node.type))
    if node.name:
        return _esc(f"{node.op} {node.name!s}", str(node.type))
    return _esc(node.op, str(node.type))


def to_dot(graph: Graph, name: str = "kiln") -> str:
    """DOT text for ``graph`` (see the module docstring)."""
    ids: dict[int, str] = {}
    lines = [f'digraph "{_esc(name)}" {{', "  rankdir=TB;", '  node [shape=box, fontsize=10];']
    outputs = {id(o): k for k, o in reversed(list(enumerate(graph.outputs)))}
    n_clusters = 0
    for k, node in enumerate(graph.nodes):
        if node.op != "fused":
            ids[id(node)] = f"n{k}"
            shape = ', shape=ellipse' if not node.inputs else ""
            extra = ", peripheries=2" if id(node) in outputs else ""
            lines.append(f'  n{k} [label="{_label(node)}"{shape}{extra}];')
            for i in node.inputs:
                lines.append(f"  {ids[id(i)]} -> n{k};")
            continue
        program = node.attrs["program"]
        c = n_clusters
        n_clusters += 1
        lines.append(f"  subgraph cluster_{c} {{")
        title = _esc(f"fused #{c}: {len(program)} ops", str(node.type))
        lines.append(f'    label="{title}";')
        lines.append("    style=rounded; color=blue;")
        for j, (op, _args, attrs) in enumerate(program):
            attr_s = ", ".join(f"{a}={v}" for a, v in attrs)
            text = _esc(op, attr_s) if attr_s else _esc(op)
            lines.append(f'    f{c}_{j} [label="{text}"];')
        lines.append("  }")
        for j, (_op, args, _attrs) in enumerate(program):
            for a in args:
                src = ids[id(node.inputs[-a - 1])] if a < 0 else f"f{c}_{a}"
                lines.append(f"  {src} -> f{c}_{j};")
        ids[id(node)] = f"f{c}_{len(program) - 1}"
    for k, o in enumerate(graph.outputs):
        lines.append(f'  out{k} [label="output {k}", shape=plaintext];')
        lines.append(f"  {ids[id(o)]} -> out{k};")
    lines.append("}")
    return "\n".join(lines)
