"""Reductions in multi-output loops and reductions on kiln's kernel threads
(kiln/core/passes/fuse.py ``group_chains``, kiln/core/backends/cpu/kernels/elementwise.py; docs/
architecture.md "Passes" and "Threads").

* A reduction that reads a member of a chain of same-shape elementwise kernels ends the chain:
  one loop stores the members and accumulates the reduction (a ReLU gradient and its bias
  gradient, BatchNormalization's gradient and its channel sums). Nothing joins after it.
* A large reduction runs on the threads: parts of its outer loop, each into its own partial
  result when that loop is reduced (then combined in part order), or into its own rows of
  the output when it is not.

Oracles: NumPy in float64, the reference backend, numba's kernel against the native one, and
the same program unsplit (a split sum is a different order of the same additions: within
float tolerance; max, min and the stored members are exact)."""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends.cpu.runtime import threads
from kiln.core.plan import program_order

RNG = np.random.default_rng(7)
FUSE = importlib.import_module("kiln.core.passes.fuse")  # the module (``fuse`` is its pass)


@pytest.fixture(autouse=True)
def small_loops_join(monkeypatch, pass_options):
    """The tests' loops are small; the size limit has a test of its own."""
    pass_options(fuse_tail_min_elements=0)


def _steps(fn):
    plan = next(iter(fn.program._plans.values()))
    return [(s.label, type(s.fn).__name__) for s in plan.steps]


def _groups(fn):
    _, groups = program_order(fn.optimized_graph, [])
    return [[n.op for n in g] for g in groups.values()]


@pytest.fixture
def split(monkeypatch, cpu_options):
    """Every loop split over ``n`` parts (kernels run as Python too: KILN_JIT=0)."""
    cpu_options(parallel_min_bytes=0)

    def parts(n: int) -> None:
        monkeypatch.setattr(threads, "kernel_threads", lambda: n)
    return parts


def _relu_grad_and_sums(dtype="float32"):
    """d = relu'(h) * g stored, with its column sum (the bias gradient) and a max and mean."""
    g = kiln.placeholder((None, 37), dtype)
    h = kiln.placeholder((None, 37), dtype)
    d = g * K.cast(h > 0, dtype)
    return [g, h], [d, K.sum(d, axis=0)]


def _feeds(shape=(29, 37), dtype="float32", count=2):
    return [RNG.normal(size=shape).astype(dtype) for _ in range(count)]


@pytest.mark.nojit
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_sum_of_a_stored_value_runs_in_its_loop(dtype):
    ins, outs = _relu_grad_and_sums(dtype)
    fn = kiln.function(ins, outs)
    gv, hv = _feeds(dtype=dtype)
    d, s = fn(gv, hv)
    want = gv.astype(np.float64) * (hv > 0)
    np.testing.assert_array_equal(d, want.astype(dtype))
    np.testing.assert_allclose(s, want.sum(0), rtol=1e-5 if dtype == "float32" else 1e-12)
    assert _groups(fn) == [["fused", "sum"]]
    labels = [label for label, _ in _steps(fn)]
    assert labels == ["fused[greater,cast,mul]+sum"]  # one loop, no sum of its own


@pytest.mark.nojit
@pytest.mark.parametrize("reduce, axis", [("sum", 0), ("sum", (0, 1)), ("mean", (0, 1)),
                                          ("max", 1), ("min", (0, 2)), ("prod", 2),
                                          ("sum", None), ("mean", 2)])
def test_every_generated_reduction_ends_a_chain(reduce, axis):
    """Inner, outer and whole reductions of a stored chain (two members: a side output each,
    the second read in place of the first's storage where the planner puts it there), with a
    NaN that max and min must propagate."""
    x = kiln.placeholder((None, 5, 9))
    y = kiln.placeholder((None, 5, 9))
    a = K.exp(x * 0.3)            # stored: read again below
    b = a * y + 1.0               # reads a: a chain [a, b]
    r = getattr(K, reduce)(b * 0.5, axis=axis)
    fn = kiln.function([x, y], [a, b, r])
    xv, yv = _feeds((6, 5, 9))
    xv[2, 3, 4] = np.nan
    got = fn(xv, yv)
    a64 = np.exp(xv.astype(np.float64) * 0.3)
    b64 = a64 * yv + 1.0
    r64 = getattr(np, reduce)(b64 * 0.5, axis=axis)
    np.testing.assert_allclose(got[0], a64, rtol=1e-6)
    np.testing.assert_allclose(got[1], b64, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[2], r64, rtol=1e-5, atol=1e-6)
    assert np.isnan(got[2]).any() == np.isnan(r64).any()
    (group,) = _groups(fn)
    assert group[-1] == "fused" and len(group) >= 2
    assert any(label.endswith(reduce) or f",{reduce}]" in label for label, _ in _steps(fn))


def test_a_chain_ended_by_a_reduction_takes_nothing_after_it():
    x = kiln.placeholder((None, 8))
    d = K.relu(x * 2.0)
    s = K.sum(d, axis=0)
    z = d * 3.0 + s               # reads a member and the sum: a loop of its own
    fn = kiln.function([x], [d, s, z])
    xv = _feeds((11, 8), count=1)[0]
    d64 = np.maximum(xv.astype(np.float64) * 2, 0)
    got = fn(xv)
    np.testing.assert_allclose(got[2], d64 * 3 + d64.sum(0), rtol=1e-5)
    for g in _groups(fn):
        assert g[-1] in ("fused", "sum") and "sum" not in g[:-1]
    labels = [label for label, _ in _steps(fn)]
    assert sum("sum" in label for label in labels) == 1


@pytest.mark.parametrize("width, joins", [(4096, True), (512, False)])
def test_only_a_loop_past_the_caches_takes_its_reduction(monkeypatch, pass_options, width, joins):
    """By the static shape, unknown dims counted as the planner's batch (64): 64 x 4096
    elements join, 64 x 512 (the MLP's ReLU gradient) keep their sum apart."""
    pass_options(fuse_tail_min_elements=1 << 18)
    g, h = (kiln.placeholder((None, width)) for _ in range(2))
    d = g * K.cast(h > 0, "float32")
    fn = kiln.function([g, h], [d, K.sum(d, axis=0)])
    gv, hv = _feeds((3, width))
    got = fn(gv, hv)
    want = gv.astype(np.float64) * (hv > 0)
    np.testing.assert_allclose(got[1], want.sum(0), rtol=1e-5, atol=1e-6)
    assert (_groups(fn) == [["fused", "sum"]]) == joins


def test_a_reduction_of_another_shape_does_not_join():
    """sum(d[:, :4]) reads a slice: its loop walks another shape than the chain's."""
    x = kiln.placeholder((None, 8))
    d = K.relu(x - 0.5)
    fn = kiln.function([x], [d, K.sum(d[:, :4], axis=0)])
    xv = _feeds((7, 8), count=1)[0]
    got = fn(xv)
    d64 = np.maximum(xv.astype(np.float64) - 0.5, 0)
    np.testing.assert_allclose(got[1], d64[:, :4].sum(0), rtol=1e-5)
    assert _groups(fn) == []


@pytest.mark.nojit
@pytest.mark.parametrize("parts", [2, 3, 7])
@pytest.mark.parametrize("reduce, axis", [("sum", 0), ("mean", (0, 1)), ("max", (0, 1)),
                                          ("min", 0), ("prod", 0), ("sum", 2),
                                          ("mean", (1, 2)), ("sum", None)])
def test_split_reductions_match_numpy_and_the_unsplit_loop(split, parts, reduce, axis):
    """Outer loop reduced (partial results combined) or kept (each part its own output rows);
    odd sizes, more parts than some loops have rows; a stored member in the same loop."""

    def build():
        x = kiln.placeholder((None, 5, 9))
        y = kiln.placeholder((None, 5, 9))
        a = K.tanh(x) * y
        r = getattr(K, reduce)(a * 0.5 + 1.0, axis=axis)
        return kiln.function([x, y], [a, r])

    xv, yv = _feeds((11, 5, 9))
    xv[4, 1, 2] = np.nan if reduce in ("max", "min") else xv[4, 1, 2]
    split(1)
    want_a, want_r = build()(xv, yv)
    split(parts)
    fn = build()
    got_a, got_r = fn(xv, yv)
    np.testing.assert_array_equal(got_a, want_a)
    a64 = np.tanh(xv.astype(np.float64)) * yv
    r64 = getattr(np, reduce)(a64 * 0.5 + 1.0, axis=axis)
    if reduce == "prod":
        # each term a * 0.5 + 1 is rounded in float32 (relative error up to eps (|a / 2| + 1)
        # / |term|: large where the term is near zero), and the product adds its terms'
        # relative errors: the bound follows the data (the module's shared RNG gives each
        # test other values depending on the tests run before it in its process)
        terms = a64 * 0.5 + 1.0
        cond = np.sum((np.abs(a64 * 0.5) + 1.0) / np.abs(terms) + 2.0, axis=axis)
        bound = 2 * np.finfo(np.float32).eps * cond * np.abs(r64)
        assert np.all(np.abs(got_r - r64) <= bound), np.max(np.abs(got_r - r64) / bound)
        assert np.all(np.abs(got_r - want_r) <= 2 * bound)
    else:
        tol = dict(rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_r, r64, **tol)
        np.testing.assert_allclose(got_r, want_r, **tol)
    if reduce in ("max", "min"):
        np.testing.assert_array_equal(got_r, want_r)  # exact whatever the order
    kinds = dict(_steps(fn))
    reduced = [label for label in kinds if reduce in label and "partials" not in label]
    assert reduced and kinds[reduced[0]] == "SplitCall"
    outer_reduced = axis is None or 0 in np.atleast_1d(axis)
    assert any("(partials)" in label for label in kinds) == outer_reduced


@pytest.mark.nojit
def test_a_split_group_writes_each_part_of_its_members_once(split):
    """Repeated calls: a part's partial result starts from the identity every time (no
    accumulation across calls), and the stored member's parts cover it exactly."""
    ins, outs = _relu_grad_and_sums()
    split(3)
    fn = kiln.function(ins, outs)
    for _ in range(3):
        gv, hv = _feeds((40, 37))
        d, s = fn(gv, hv)
        want = gv.astype(np.float64) * (hv > 0)
        np.testing.assert_array_equal(d, want.astype(np.float32))
        np.testing.assert_allclose(s, want.sum(0), rtol=1e-5, atol=1e-6)
    assert ("fused[greater,cast,mul]+sum(partials)", "function") in _steps(fn)


def _bn_block(seed):
    """Conv -> BatchNormalization -> ReLU -> Add, twice, GAP, Dense: the training step's
    backward has the chains this file is about."""
    from kiln import layers as L

    kiln.utils.set_random_seed(seed)
    inputs = L.Input((6, 7, 3))
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(8, 3, padding="same")(inputs)))
    for _ in range(2):
        h = L.Add()([h, L.ReLU()(L.BatchNormalization()(L.Conv2D(8, 3, padding="same")(h)))])
    m = kiln.Model(inputs, L.Dense(5, activation="softmax")(L.GlobalAveragePooling2D()(h)))
    return m


@pytest.mark.nojit
@pytest.mark.parametrize("parts", [1, 2])
def test_batchnorm_training_matches_the_reference_backend(split, parts, monkeypatch):
    split(parts)
    x = RNG.random((9, 6, 7, 3)).astype(np.float32)
    y = RNG.integers(0, 5, 9).astype(np.int32)
    models = {}
    for backend in ("cpu", "reference"):
        monkeypatch.setenv("KILN_BACKEND", backend)
        m = _bn_block(3)
        m.compile("sgd", "sparse_categorical_crossentropy")
        models[backend] = (m, [float(m.train_on_batch(x, y)) for _ in range(3)])
    (cpu, lc), (ref, lr) = models["cpu"], models["reference"]
    np.testing.assert_allclose(lc, lr, rtol=1e-4)
    for a, b in zip(cpu.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
    plan = next(iter(cpu.train_function.program._plans.values()))
    assert sum("+sum" in s.label for s in plan.steps) >= 3
    # the two channel sums of the ReLU's gradient (for beta and for gamma) in its loop
    assert any("+sum+fused[" in s.label and s.label.endswith(",sum]") for s in plan.steps)


@pytest.mark.skipif(os.environ.get("KILN_JIT") == "0", reason="compares two compiled paths")
def test_native_and_numba_reduction_loops_agree(monkeypatch, tmp_path):
    from kiln.core.backends.cpu.codegen import native

    if not native.available():
        pytest.skip("llvmlite unusable here")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    xv, yv = _feeds((23, 5, 9))

    def run(flag):
        monkeypatch.setenv("KILN_NATIVE", flag)
        x = kiln.placeholder((None, 5, 9))
        y = kiln.placeholder((None, 5, 9))
        a = K.exp(x * 0.2) * y
        fn = kiln.function([x, y], [a, K.sum(a, axis=(0, 1)), K.max(a + x, axis=2)])
        return fn(xv, yv), _steps(fn)

    (nat, steps), (nb, _) = run("1"), run("0")
    np.testing.assert_array_equal(nat[0], nb[0])
    np.testing.assert_allclose(nat[1], nb[1], rtol=2e-6, atol=1e-6)
    assert any(label.endswith("+sum") for label, _ in steps)


@pytest.mark.nojit
@pytest.mark.parametrize("native", ["1", "0"])
def test_stored_members_keep_the_bits_of_their_loop_without_reduction(native, monkeypatch,
                                                                       tmp_path):
    """The accumulation may reassociate; the values stored beside it may not contract into
    FMAs: ``a * y + c`` stored by the loop that also sums it gives the bits of the loop that
    only stores it (special values included)."""
    monkeypatch.setenv("KILN_NATIVE", native)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    xv, yv, cv = _feeds((31, 45), count=3)
    xv.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30]

    def member(x, y, c):
        return K.exp(x * 0.5) * y + c

    x, y, c = (kiln.placeholder((None, 45)) for _ in range(3))
    a = member(x, y, c)
    fused = kiln.function([x, y, c], [a, K.sum(a, axis=0)])
    alone = kiln.function([x, y, c], [member(x, y, c)])
    got, total = fused(xv, yv, cv)
    (want,) = alone(xv, yv, cv)
    np.testing.assert_array_equal(got, want)
    assert any(label.endswith("+sum") for label, _ in _steps(fused))
    np.testing.assert_allclose(total, want.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.nojit
@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("axis", [(0, 1), (0,), (2,), None, (1, 2)])
def test_reductions_along_the_same_axes_share_one_loop(split, parts, axis):
    """BatchNormalization's backward has two channel sums of one stored gradient: a group
    ended by a reduction takes more reductions along the same axes, each into its own output
    (sum, max with a NaN, mean), in one loop, split over the threads or not."""
    split(parts)
    x, y = kiln.placeholder((None, 5, 33)), kiln.placeholder((None, 5, 33))
    b = kiln.placeholder((33,))
    d = K.relu(x * y + b)
    outs = [d, K.sum(d, axis=axis), K.sum(d * x, axis=axis), K.max(d - y, axis=axis),
            K.mean(d * 2.0, axis=axis)]
    fn = kiln.function([x, y, b], outs)
    xv, yv = _feeds((17, 5, 33))
    bv = RNG.normal(size=33).astype(np.float32)
    yv[3, 2, 7] = np.nan
    x64, y64 = xv.astype(np.float64), yv.astype(np.float64)
    d64 = np.maximum(x64 * y64 + bv, 0)
    d64[np.isnan(x64 * y64)] = np.nan
    want = [d64, d64.sum(axis), (d64 * x64).sum(axis), (d64 - y64).max(axis),
            (d64 * 2).mean(axis)]
    for _ in range(2):  # the accumulators start again at every call
        got = fn(xv, yv, bv)
        for k, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"output {k}")
    assert _groups(fn) == [["fused", "sum", "fused", "fused", "fused"]]
    loops = [label for label, _ in _steps(fn) if "(partials)" not in label]
    assert loops == ["fused[mul,add,relu]+sum+fused[mul,sum]+fused[sub,max]+fused[mul,mean]"]


def test_a_reduction_of_a_reduction_or_other_axes_stays_out():
    """A sum that reads the group's own sum (through its broadcast) needs it complete: it
    runs after the loop; a sum along other axes walks the outputs differently."""
    x = kiln.placeholder((None, 8))
    d = K.relu(x)
    s = K.sum(d, axis=0)
    late = K.sum(d * s, axis=0)     # reads s
    other = K.sum(d * x, axis=1)    # other axes
    fn = kiln.function([x], [d, s, late, other])
    xv = _feeds((9, 8), count=1)[0]
    d64 = np.maximum(xv.astype(np.float64), 0)
    got = fn(xv)
    np.testing.assert_allclose(got[2], (d64 * d64.sum(0)).sum(0), rtol=1e-5)
    np.testing.assert_allclose(got[3], (d64 * xv).sum(1), rtol=1e-5, atol=1e-6)
    assert _groups(fn) == [["relu", "sum"]]
