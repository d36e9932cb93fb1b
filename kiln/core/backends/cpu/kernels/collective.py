"""``allreduce`` on the CPU: copy the input into the output buffer, then let the group sum the
buffer in place (an MPI transport reads and writes it directly; no pickling)."""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Node
from kiln.core.ops.collective import get_group


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
