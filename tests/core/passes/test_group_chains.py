"""group_chains: multi-output groups over a kernel order (kiln/core/passes/fuse.py)."""

import numpy as np

import kiln
import kiln.ops as K
from kiln.core.ir import Graph
from kiln.core.passes.fuse import group_chains
from kiln.core.plan import program_order
from kiln.core.schedule import schedule


def test_an_input_read_twice_joins_once():
    # y = x + 1 is needed later too, so it cannot be fused into z = y * y: a multi-output
    # group [y, z]; y is read twice by z and must appear once (it appeared twice, which the
    # memory planner rejected)
    x = kiln.placeholder((4, 3))
    y = K.exp(x)
    z = y * y
    g = Graph([x], [z, y])
    order, groups = group_chains(g, [], schedule(g))
    assert len(order) == len({id(n) for n in order}) == 2
    assert [[n.op for n in m] for m in groups.values()] == [["exp", "mul"]]


def test_function_runs_the_group_like_the_reference():
    x = kiln.placeholder((None, 3))
    y = K.exp(x)
    z = y * y
    xs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    cpu = kiln.function([x], [z, y])
    ref = kiln.function([x], [z, y], backend="reference")
    for a, b in zip(cpu(xs), ref(xs)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    order, _ = program_order(cpu.optimized_graph, [])
    assert len(order) == len({id(n) for n in order})
