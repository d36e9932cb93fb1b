"""``allreduce`` on the CPU: copy the input into the output buffer, then let the group sum the
buffer in place (an MPI transport reads and writes it directly; no pickling).

``allreduce_start`` copies its input into its output buffer (unless the planner put them in
the same buffer) and starts the group's in-place sum of that buffer; ``allreduce_wait`` waits
for the sum started on its input's buffer, which is usually its own output buffer too (the
planner runs it in place), else copies it out."""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Node
from kiln.core.ops.collective import get_group, start_sum, wait_sum


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


@builder("allreduce")
def build_allreduce(b, node: Node) -> None:
    src = b.array(node.inputs[0])
    out = b.out(node)
    name = node.attrs["group"]

    def run_allreduce() -> None:
        np.copyto(out, src)
        if out.flags.c_contiguous:
            get_group(name).allreduce_sum(out)
        else:  # a strided output view: sum a contiguous copy
            tmp = np.ascontiguousarray(out)
            get_group(name).allreduce_sum(tmp)
            np.copyto(out, tmp)

    b.add(run_allreduce, (), label=f"allreduce[{name}]")


@builder("allreduce_start")
def build_allreduce_start(b, node: Node) -> None:
    src = b.array(node.inputs[0])
    out = b.out(node)
    name = node.attrs["group"]
    if not out.flags.c_contiguous:  # kernel results are fresh contiguous buffers
        raise RuntimeError(f"allreduce_start[{name}]: its output buffer of shape {out.shape} "
                           "is not contiguous")

    def run_allreduce_start() -> None:
        if not _same(out, src):
            np.copyto(out, src)
        start_sum(get_group(name), out)

    b.add(run_allreduce_start, (), label=f"allreduce_start[{name}]")


@builder("allreduce_wait")
def build_allreduce_wait(b, node: Node) -> None:
    started = b.array(node.inputs[0])
    out = b.out(node)
    name = node.attrs["group"]

    def run_allreduce_wait() -> None:
        wait_sum(get_group(name), started)
        if not _same(out, started):
            np.copyto(out, started)

    b.add(run_allreduce_wait, (), label=f"allreduce_wait[{name}]")
