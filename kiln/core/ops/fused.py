"""The ``fused`` op: a group of elementwise ops (plus an optional reduction epilogue) that
the fusion pass collapsed into one node, so that a backend emits it as ONE kernel.

A fused node's inputs are the group's external inputs; its attribute ``program`` is a tuple of
instructions ``(op_name, args, attrs)``:

* ``args`` is a tuple of ints: ``-(k + 1)`` names external input ``k``; ``j >= 0`` names the
  result of instruction ``j`` (always an earlier one);
* ``attrs`` is the op's attributes as a sorted tuple of ``(key, value)`` pairs;
* every instruction is an ELEMENTWISE op (broadcasting like NumPy), except that the LAST one
  may be a REDUCE op (sum, mean, max, min, prod, logsumexp) over the elementwise result: the
  reduction epilogue;
* the result of the fused node is the result of the last instruction.

Fused nodes appear only after autodiff (the pipeline runs on finished graphs), so they are not
differentiable. The reference below interprets the program with each op's own NumPy reference;
the CPU and CUDA backends generate a single loop from the ops' ``scalar`` bodies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType, make_node
from kiln.core.ops.registry import ELEMENTWISE, FUSED, REDUCE, Example, OpDef, get_op, register

Instruction = tuple[str, tuple[int, ...], tuple[tuple[str, Any], ...]]


def check_program(program: Sequence[Instruction], n_inputs: int) -> None:
    if not program:
        raise ValueError("fused: empty program")
    for j, (op_name, args, _attrs) in enumerate(program):
        kind = get_op(op_name).kind
        if kind == REDUCE and j != len(program) - 1:
            raise ValueError(f"fused: reduction {op_name} must be the last instruction")
        if kind not in (ELEMENTWISE, REDUCE):
            raise ValueError(f"fused: {op_name} is not elementwise or a reduction")
        for a in args:
            if not (-n_inputs <= a < 0 or 0 <= a < j):
                raise ValueError(f"fused: instruction {j} ({op_name}) refers to {a}")


def _infer(*inputs: TensorType, program: tuple) -> TensorType:
    check_program(program, len(inputs))
    types: list[TensorType] = []
    for op_name, args, attrs in program:
        arg_types = [inputs[-a - 1] if a < 0 else types[a] for a in args]
        types.append(get_op(op_name).infer(*arg_types, **dict(attrs)))
    return types[-1]


def _ref(*inputs: np.ndarray, program: tuple) -> np.ndarray:
    values: list[np.ndarray] = []
    for op_name, args, attrs in program:
        arg_values = [inputs[-a - 1] if a < 0 else values[a] for a in args]
        values.append(np.asarray(get_op(op_name).ref(*arg_values, **dict(attrs))))
    return values[-1]


def _examples(rng: np.random.Generator, dtype: str) -> list[Example]:
    relu_affine = (("mul", (-1, -2), ()), ("add", (0, -3), ()), ("relu", (1,), ()))
    softplus_sum = (("softplus", (-1,), ()), ("sum", (0,), (("axis", (1,)), ("keepdims", False))))
    return [
        Example((rng.normal(size=(3, 4)).astype(dtype), rng.normal(size=(4,)).astype(dtype),
                 rng.normal(size=(3, 1)).astype(dtype)), {"program": relu_affine}, wrt=()),
        Example((rng.normal(size=(3, 4)).astype(dtype),), {"program": softplus_sum}, wrt=()),
    ]


register(OpDef("fused", FUSED, _infer, _ref, differentiable=False, examples=_examples,
               nondiff_reason="fusion runs after autodiff; fused nodes are never differentiated"))


def fused(inputs: Sequence[Node], program: Sequence[Instruction]) -> Node:
    """Builds a fused node from external ``inputs`` and a ``program`` (see module doc)."""
    prog = tuple((op, tuple(int(a) for a in args), tuple(sorted(dict(attrs).items())))
                 for op, args, attrs in program)
    return make_node("fused", tuple(inputs), {"program": prog}, _infer)


def program_of(node: Node) -> tuple[Instruction, ...]:
    """The program of a fused node (or a one-instruction program for a plain elementwise
    or reduction node), in the format described in the module docstring."""
    if node.op == "fused":
        return node.attrs["program"]
    args = tuple(-(k + 1) for k in range(len(node.inputs)))
    return ((node.op, args, tuple(sorted(node.attrs.items()))),)


def reduced_type(node: Node, input_types: Sequence[TensorType] | None = None
                 ) -> TensorType | None:
    """The type of the value that ``node`` (a reduction, or a fused node whose program ends
    with one) reduces: its iteration space; None for any other node. ``input_types`` (default:
    the inputs' static types) may give run-time shapes instead."""
    program = program_of(node)
    op_name, args, _ = program[-1]
    if get_op(op_name).kind != REDUCE:
        return None
    inputs = [i.type for i in node.inputs] if input_types is None else list(input_types)
    types: list[TensorType] = []
    for name, iargs, attrs in program[:-1]:
        types.append(get_op(name).infer(*[inputs[-a - 1] if a < 0 else types[a] for a in iargs],
                                        **dict(attrs)))
    src = args[0]
    return inputs[-src - 1] if src < 0 else types[src]


def combine(members: Sequence[Node]) -> tuple[list[Node], tuple, dict[int, int]]:
    """One program computing every node of ``members`` (in order; each an elementwise or
    reduction node or a fused node, reading earlier members or outside values).

    Returns:
        ``(inputs, program, result_of)``: the outside values read (the program's external
        inputs), the program, and id(member) -> index of the instruction holding its value.

    The fusion pass builds single-output fused nodes with it; backends build multi-output
    loops (a member's value stored as a side output) from the groups of
    :func:`kiln.core.passes.fuse.group_chains` with it.
    """
    inputs: list[Node] = []
    input_index: dict[int, int] = {}
    result_of: dict[int, int] = {}
    program: list[Instruction] = []
    for n in members:
        base = len(program)
        local: list[int] = []  # this member's input k -> reference in the combined program
        for i in n.inputs:
            if id(i) in result_of:
                local.append(result_of[id(i)])
                continue
            if id(i) not in input_index:
                input_index[id(i)] = len(inputs)
                inputs.append(i)
            local.append(-(input_index[id(i)] + 1))
        for op_name, args, attrs in program_of(n):
            program.append((op_name, tuple(local[-a - 1] if a < 0 else base + a for a in args),
                            attrs))
        result_of[id(n)] = len(program) - 1
    return inputs, tuple(program), result_of
