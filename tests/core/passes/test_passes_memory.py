"""schedule and plan_memory: topological kernel order, buffer reuse, in place, batch sizes."""

from __future__ import annotations

import pytest
from passes_helpers import mlp_train_step

import kiln
import kiln.ops as K
from kiln.core.ir import Graph
from kiln.core.memory import plan_memory, type_nbytes
from kiln.core.passes import optimize
from kiln.core.schedule import schedule


def check_plan(graph: Graph, plan) -> None:
    """Every kernel once, inputs first; values sharing a buffer never overlap in time unless
    one is written in place over the other; buffers are big enough; outputs never reused."""
    kernels = [n for n in graph.nodes if n.op not in ("constant", "placeholder", "param")]
    assert sorted(map(id, plan.order)) == sorted(map(id, kernels))
    pos = {id(n): t for t, n in enumerate(plan.order)}
    for n in plan.order:
        assert all(pos.get(id(i), -1) < pos[id(n)] for i in n.inputs)
        assert plan.buffer_bytes[plan.buffer[id(n)]] >= plan.nbytes[id(n)]
    inplace = {(id(a), id(b)) for a, b in plan.inplace}
    groups: dict[int, list] = {}
    for n in plan.order:
        groups.setdefault(plan.buffer[id(n)], []).append(n)
    for values in groups.values():
        values.sort(key=lambda n: plan.first[id(n)])
        for a, b in zip(values, values[1:]):
            if (id(b), id(a)) in inplace:
                assert plan.last[id(a)] == plan.first[id(b)]
            else:
                assert plan.last[id(a)] < plan.first[id(b)], (a.op, b.op)
    assert plan.peak_bytes == sum(plan.buffer_bytes) <= plan.naive_bytes
    assert plan.live_peak_bytes <= plan.peak_bytes
    assert plan.arena_bytes >= plan.peak_bytes and all(o % 64 == 0 for o in plan.offsets)


def test_schedule_is_a_topological_order_of_the_kernels():
    g, *_ = mlp_train_step([6, 5, 4, 3])
    order = schedule(g)
    seen = set()
    for n in order:
        assert all(i.op in ("constant", "placeholder", "param") or id(i) in seen
                   for i in n.inputs)
        seen.add(id(n))
    assert len(order) == sum(1 for n in g.nodes if n.inputs)


def test_schedule_updates_the_last_layer_first():
    g, *_ = mlp_train_step([6, 5, 4, 3], optimizer="sgd")
    g, _ = optimize(g)
    order = schedule(g)
    pos = {id(n): t for t, n in enumerate(order)}
    w_first, w_last = g.outputs[1], g.outputs[5]  # new w0 and new w2
    assert pos[id(w_last)] < pos[id(w_first)]


def test_chain_reuses_buffers_and_goes_in_place():
    x = kiln.placeholder((None, 8))
    y = K.sin(K.exp(K.tanh(K.cos(x))))
    g = Graph([x], [y])
    plan = plan_memory(g, batch_size=4)
    check_plan(g, plan)
    assert len(plan.buffer_bytes) == 1 and len(plan.inplace) == 3
    assert plan.peak_bytes == 4 * 8 * 4 and plan.naive_bytes == 4 * plan.peak_bytes
    plan = plan_memory(g, batch_size=4, inplace=False)
    check_plan(g, plan)
    assert len(plan.buffer_bytes) == 2 and plan.inplace == []


def test_outputs_keep_their_buffers_and_no_broadcast_in_place():
    x = kiln.placeholder((None, 8))
    b = kiln.placeholder((8,))
    a = K.exp(b)  # (8,): may not be overwritten by the (None, 8) result
    out = K.sin(x) + a
    g = Graph([x, b], [K.exp(x), out])
    plan = plan_memory(g, batch_size=2)
    check_plan(g, plan)
    assert plan.buffer[id(g.outputs[0])] != plan.buffer[id(g.outputs[1])]
    assert all(i is not a for _, i in plan.inplace)


def test_none_dims_take_the_batch_size():
    x = kiln.placeholder((None, 3, 5))
    g = Graph([x], [K.exp(x)])
    assert plan_memory(g, batch_size=7).naive_bytes == 7 * 15 * 4
    assert type_nbytes(x.type, 2) == 120 and type_nbytes(K.sum(x).type) == 4


def test_plan_of_training_step_is_valid_and_smaller_than_naive():
    g, *_ = mlp_train_step([20, 16, 12, 10])
    g, _ = optimize(g)
    for bs in (1, 64):
        plan = plan_memory(g, batch_size=bs)
        check_plan(g, plan)
        assert plan.peak_bytes < plan.naive_bytes


def test_plan_rejects_a_bad_order():
    x = kiln.placeholder((None, 3))
    y = K.exp(x)
    z = K.log(y)
    g = Graph([x], [z])
    with pytest.raises(ValueError, match="computes later"):
        plan_memory(g, order=[z, y])
    with pytest.raises(ValueError, match="every kernel"):
        plan_memory(g, order=[y])
    order = plan_memory(g, order=[y, z]).order
    assert len(order) == 2 and order[0] is y and order[1] is z
