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


def test_a_sum_joins_its_latest_producer_when_the_other_was_computed_long_before():
    # a residual x + relu(y): x (exp(a)) is read by a matmul in between, so the producers
    # cannot both move down to the sum; the sum (relu and add fused) moves up after y's
    # kernel, its other input being earlier, and the two run as one loop
    a = kiln.placeholder((4, 3))
    w = kiln.placeholder((3, 3))
    x = K.exp(a)
    y = K.tanh(K.matmul(x, w))
    s = x + K.relu(y)
    cpu = kiln.function([a, w], [s, y, x])
    order, groups = program_order(cpu.optimized_graph, [])
    (group,) = groups.values()
    assert [n.op for n in group] == ["tanh", "fused"]
    assert [op for op, _, _ in group[1].attrs["program"]] == ["relu", "add"]
    xs = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    ws = np.random.default_rng(2).normal(size=(3, 3)).astype(np.float32)
    ref = kiln.function([a, w], [s, y, x], backend="reference")
    for got, want in zip(cpu(xs, ws), ref(xs, ws)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
