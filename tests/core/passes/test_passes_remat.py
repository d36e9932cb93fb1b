"""remat under a memory budget: fits, gives bit-identical results, fails with the smallest
reachable peak; budget parsing; the remat_barrier op."""

from __future__ import annotations

import numpy as np
import pytest
from passes_helpers import feeds, mlp_train_step

import kiln
import kiln.ops as K
from kiln.core.backends.reference import evaluate
from kiln.core.ir import Graph
from kiln.core.ops.registry import get_op
from kiln.core.passes import optimize, parse_bytes
from kiln.core.passes.barrier import remat_barrier
from kiln.core.passes.remat import remat

BATCH = 256


@pytest.fixture(scope="module")
def deep_mlp():
    g, x, y, _ = mlp_train_step([16] * 33, optimizer="sgd")
    g1, r1 = optimize(g, batch_size=BATCH)
    return g, x, y, g1, r1


def _barriers(g: Graph) -> int:
    count = 0
    for n in g.nodes:
        if n.op == "remat_barrier":
            count += 1
        elif n.op == "fused":
            count += sum(1 for ins in n.attrs["program"] if ins[0] == "remat_barrier")
    return count


def test_half_budget_fits_and_is_bit_identical(deep_mlp):
    g, x, y, g1, r1 = deep_mlp
    budget = r1.peak_bytes // 2
    g2, r2 = optimize(g, memory_budget=budget, batch_size=BATCH)
    assert r2.peak_bytes <= budget < r1.peak_bytes
    assert r2.entry("remat").kernels_after > r1.num_kernels  # recomputation adds kernels
    assert _barriers(g2) > 0
    f = feeds(x, y, BATCH)
    for a, b in zip(evaluate(g1.outputs, f), evaluate(g2.outputs, f)):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_too_small_budget_names_the_smallest_reachable_peak(deep_mlp):
    g, *_ = deep_mlp
    with pytest.raises(ValueError, match=r"smallest peak reachable by recomputation is "
                                         r"(\d+) bytes") as info:
        optimize(g, memory_budget="10kB", batch_size=BATCH)
    msg = str(info.value)
    assert "10000 bytes" in msg and f"batch_size={BATCH}" in msg
    smallest = int(msg.split("recomputation is ")[1].split(" bytes")[0])
    g_ok, r_ok = optimize(g, memory_budget=smallest, batch_size=BATCH)  # reachable indeed
    assert r_ok.peak_bytes <= smallest


def test_budget_already_met_changes_nothing(deep_mlp):
    g, _, _, g1, r1 = deep_mlp
    assert remat(g1, r1.peak_bytes, batch_size=BATCH) is g1
    _, r = optimize(g, memory_budget="1GiB", batch_size=BATCH)
    assert r.entry("remat").nodes_after == r.entry("remat").nodes_before


@pytest.mark.parametrize("text, expected", [
    (1000, 1000), ("64MB", 64_000_000), ("1.5GiB", 1_610_612_736), ("512 KiB", 524_288),
    ("2kb", 2000), ("100B", 100), ("1e3", 1000), ("3 TiB", 3 * 2**40), ("7gb", 7 * 10**9),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad, error", [("lots", ValueError), ("12 parsecs", ValueError),
                                        (-5, ValueError), (0, ValueError), (True, TypeError),
                                        ([1], TypeError)])
def test_parse_bytes_rejects(bad, error):
    with pytest.raises(error, match="memory_budget"):
        parse_bytes(bad)


def test_remat_barrier_is_a_distinct_identity():
    x = kiln.placeholder((None, 3))
    e = K.exp(x)
    b1, b2 = remat_barrier(x, 1), remat_barrier(x, 2)
    assert b1 is not b2 and b1 is remat_barrier(x, 1)
    assert K.exp(b1) is not e
    op = get_op("remat_barrier")
    assert op.kind == "elementwise" and op.scalar == "{0}" and not op.differentiable
    v = np.arange(6, dtype="float32").reshape(2, 3)
    out = evaluate([b1, K.exp(b2), e], {x: v})
    np.testing.assert_array_equal(out[0], v)
    np.testing.assert_array_equal(out[1], out[2])
    for ex in op.examples(np.random.default_rng(0), "float32"):
        np.testing.assert_array_equal(op.ref(*ex.inputs), ex.inputs[0])
