"""Every registered op on the CPU backend against its NumPy reference, on the registry examples:
plain inputs in float32 and float64, and (float32, to keep the JIT bill of a cold run small)
inputs that are transposed, strided (sliced) and broadcast views, so generated loops and
hand-written kernels see every kind of layout.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conv_cases import conv_block, conv_block_reference
from cpu_targets import AVX2, AVX512, cpu, set_cpu

import kiln
from kiln.core.backends.cpu import covered_ops, options, target
from kiln.core.ops import all_ops
from kiln.core.ops.registry import KERNELS, SOURCE, apply

OPS = all_ops()
NAMES = sorted(n for n, op in OPS.items() if op.kind != SOURCE)
VARIANTS = {"float32": ["plain", "transposed", "sliced", "broadcast"], "float64": ["plain"]}


def _examples(name: str, dtype: str):
    return OPS[name].examples(np.random.default_rng(abs(hash(name)) % 2**32), dtype)


def _variant_input(kind: str, a: np.ndarray):
    """(fed array, builder of the node from its placeholder, the value the op sees)."""
    if kind == "plain":
        return a, lambda ph: ph, a
    if kind == "transposed":
        perm = tuple(range(a.ndim))[::-1]
        return (np.ascontiguousarray(np.transpose(a, perm)),
                lambda ph: apply("transpose", ph, perm=perm), a)
    if kind == "sliced":
        big = np.zeros((2 * a.shape[0] + 1,) + a.shape[1:], a.dtype)
        big[1::2] = a
        spec = ((1, None, 2),) + ((None, None, 1),) * (a.ndim - 1)
        return big, lambda ph: apply("slice", ph, spec=spec), a
    row = a[:1]
    seen = np.broadcast_to(row, a.shape).copy()
    return row[0], lambda ph: apply("broadcast_to", ph, shape=a.shape), seen


def _check(name, example, kind, dtype):
    inputs = [np.asarray(a) for a in example.inputs]
    phs, nodes, feeds, seen = [], [], [], []
    changed = False
    for a in inputs:
        if a.dtype.kind == "f" and a.ndim >= 2:
            fed, build, value = _variant_input(kind, a)
            ph = kiln.placeholder(fed.shape, fed.dtype.name)
            node = build(ph)
            changed = True
        else:
            fed, value = a, a
            ph = node = kiln.placeholder(a.shape, a.dtype.name)
        phs.append(ph)
        nodes.append(node)
        feeds.append(fed)
        seen.append(value)
    if not changed and kind != "plain":
        return False
    out = apply(name, *nodes, **example.attrs)
    with np.errstate(all="ignore"):
        expected = np.asarray(OPS[name].ref(*seen, **example.attrs)).astype(out.dtype)
    fn = kiln.function(phs, out, backend="cpu", optimize=False)
    got = fn(*feeds)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol,
                               err_msg=f"{name} {kind} {example.attrs}")
    return True


@pytest.mark.nojit
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_op_matches_reference_on_views(name, dtype):
    for example in _examples(name, dtype):
        for kind in VARIANTS[dtype]:
            _check(name, example, kind, dtype)


def test_every_registered_op_is_covered_by_a_cpu_kernel():
    missing = [n for n in NAMES if n not in covered_ops()]
    assert not missing, f"ops without a CPU kernel (running on their reference): {missing}"
    assert set(NAMES) <= KERNELS["cpu"]


@pytest.mark.nojit
def test_broadcast_patterns_in_one_fused_loop():
    # rows, columns, scalars and a transposed operand in one elementwise expression
    x = kiln.placeholder((None, 5))
    col = kiln.placeholder((None, 1))
    row = kiln.placeholder((5,))
    sq = kiln.placeholder((5, 5))
    expr = kiln.ops.relu(x * col + row) - 2.0 * kiln.ops.exp(-x) + sq.T[:1] / 3.0
    f = kiln.function([x, col, row, sq], [expr, kiln.ops.sum(expr, axis=0),
                                          kiln.ops.max(expr, axis=1, keepdims=True)],
                      backend="cpu")
    rng = np.random.default_rng(0)
    for batch in (4, 1, 7):
        xv = rng.normal(size=(batch, 5)).astype("float32")
        cv = rng.normal(size=(batch, 1)).astype("float32")
        rv = rng.normal(size=(5,)).astype("float32")
        sv = rng.normal(size=(5, 5)).astype("float32")
        want = np.maximum(xv * cv + rv, 0) - 2 * np.exp(-xv) + sv.T[:1] / 3
        got = f(xv, cv, rv, sv)
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], want.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[2], want.max(1, keepdims=True), rtol=1e-6)


@pytest.mark.nojit
def test_reductions_over_every_axis_set_and_integer_dtypes():
    x = kiln.placeholder((None, 3, 4, 2))
    i = kiln.placeholder((None, 3), "int32")
    axes = [(0,), (1,), (3,), (0, 2), (1, 3), (0, 1, 2, 3), (1, 2)]
    outs = [kiln.ops.sum(x, a) for a in axes] + [kiln.ops.mean(x, a, keepdims=True) for a in axes]
    outs += [kiln.ops.min(x, (0, 3)), kiln.ops.prod(x, (2,)), kiln.ops.logsumexp(x, (1, 3)),
             kiln.ops.sum(i, 1), kiln.ops.max(i, 0), kiln.ops.argmax(x, 2), kiln.ops.argmin(i, 1)]
    f = kiln.function([x, i], outs, backend="cpu")
    rng = np.random.default_rng(1)
    xv = rng.normal(size=(5, 3, 4, 2)).astype("float32")
    iv = rng.integers(-50, 50, size=(5, 3)).astype("int32")
    got = f(xv, iv)
    want = [xv.sum(a) for a in axes] + [xv.mean(a, keepdims=True) for a in axes]
    lse = np.log(np.exp(xv).sum((1, 3)))
    want += [xv.min((0, 3)), xv.prod(2), lse, iv.sum(1), iv.max(0), xv.argmax(2), iv.argmin(1)]
    for g, w in zip(got, want):
        assert g.dtype == np.asarray(w).dtype or g.dtype.kind == np.asarray(w).dtype.kind
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.nojit
def test_nan_and_inf_follow_numpy():
    x = kiln.placeholder((3, 3))
    f = kiln.function([x], [kiln.ops.max(x, 1), kiln.ops.softmax(x), kiln.ops.logsumexp(x, 1),
                            kiln.ops.maximum(x, 0.0) * 1.0], backend="cpu", optimize=False)
    xv = np.array([[1, np.nan, 2], [-np.inf, -np.inf, -np.inf], [np.inf, 1, 0]], "float32")
    got = f(xv)
    with np.errstate(all="ignore"):
        want = [np.max(xv, 1), OPS["softmax"].ref(xv, axis=1),
                OPS["logsumexp"].ref(xv, axis=(1,), keepdims=False)]
    for g, w in zip(got[:3], want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g[~np.isnan(g)], w[~np.isnan(w)], rtol=1e-6)


def test_out_of_range_indices_raise():
    x = kiln.placeholder((4, 3))
    i = kiln.placeholder((2,), "int32")
    f = kiln.function([x, i], kiln.ops.take(x, i, axis=0), backend="cpu")
    xv = np.arange(12, dtype="float32").reshape(4, 3)
    np.testing.assert_array_equal(f(xv, np.array([-1, 0], "int32")), xv[[-1, 0]])
    with pytest.raises(IndexError, match="take"):
        f(xv, np.array([4, 0], "int32"))
    y = kiln.placeholder((2,), "int32")
    g = kiln.function([x, y], kiln.ops.sparse_softmax_cross_entropy(x[:2], y), backend="cpu")
    with pytest.raises(IndexError, match="sparse_softmax_cross_entropy"):
        g(xv, np.array([0, 3], "int32"))


@pytest.mark.nojit
@pytest.mark.parametrize("method", ["direct", "gemm"])
def test_both_convolution_methods_match_the_reference(method, monkeypatch):
    from kiln.core.backends.cpu.kernels.conv import conv

    monkeypatch.setattr(conv, "conv_method", lambda taps, op="conv2d", *a, **kw: method)
    for name in ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"):
        for example in _examples(name, "float32"):
            _check(name, example, "plain", "float32")


TILE_FORWARD_CASES = [
    ((3, 6, 5, 4), (3, 3, 4, 64), {}),                             # whole 4-pixel tiles
    ((1, 5, 7, 3), (2, 3, 3, 64), {"padding": "same"}),            # a 3-pixel tail, padding
    ((2, 9, 8, 1), (3, 3, 1, 32), {}),                             # 32 channels: padded kernel
    ((2, 9, 9, 2), (3, 2, 2, 5), {"strides": (2, 3), "padding": "same"}),
    ((1, 9, 10, 3), (2, 3, 3, 7), {"dilation": (2, 3)}),
    ((2, 15, 31, 2), (3, 3, 2, 17), {"padding": "same"}),          # 12-pixel blocks + tail
    ((1, 6, 27, 1), (1, 3, 1, 48), {"strides": (1, 2)}),           # 3 vectors
    ((2, 4, 4, 3), (3, 3, 3, 65), {}),                             # > 64 channels: not tiled
]


def _tile_paths(monkeypatch, native: bool, cpu_options) -> None:
    """The tiles on any host (chosen only with AVX-512), native_tile's kernels, or (native
    False: ``native_tile`` off) none: the direct loops or im2col + GEMM."""

    set_cpu(monkeypatch, avx512=True)
    cpu_options(native_tile=native)


def native_enabled() -> bool:
    from kiln.core.backends.cpu.codegen import native

    return native.enabled()


def _labels(f) -> list[str]:
    plan = next(iter(f.program._plans.values()))
    return [getattr(s, "label", "") for s in plan.steps]


@pytest.mark.nojit
@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("shape, kernel, attrs", TILE_FORWARD_CASES)
def test_conv2d_tile_kernels_match_the_reference(shape, kernel, attrs, native, monkeypatch,
                                                 cpu_options):
    """The float32 forward convolution with at most 64 output channels (AVX-512's tiles) against
    the float64 reference, with strides, dilation, padding, tail blocks and masked channel
    tails; native_tile's kernel, or with the tiles off the direct loops or im2col + GEMM (the
    op's NumPy reference where the native path is off, as under KILN_JIT=0)."""
    _tile_paths(monkeypatch, native, cpu_options)
    rng = np.random.default_rng(3)
    xv = rng.normal(size=shape).astype("float32")
    wv = rng.normal(size=kernel).astype("float32")
    x = kiln.placeholder((None,) + shape[1:])
    w = kiln.placeholder(kernel)
    attrs = {"strides": (1, 1), "padding": "valid", "dilation": (1, 1), **attrs}
    f = kiln.function([x, w], apply("conv2d", x, w, **attrs), backend="cpu", optimize=False)
    want = OPS["conv2d"].ref(xv.astype("float64"), wv.astype("float64"), **attrs)
    for _ in range(2):  # the padded copies are refreshed on every call
        np.testing.assert_allclose(f(xv, wv), want, rtol=1e-5, atol=1e-5)
        wv, xv = wv * 2, xv + 1
        want = OPS["conv2d"].ref(xv.astype("float64"), wv.astype("float64"), **attrs)
    labels = _labels(f)
    if not native_enabled():
        assert "conv2d(reference)" in labels, labels
        return
    assert ("conv2d:conv_tile" in labels) == (kernel[3] <= 64 and native)
    taps = kernel[0] * kernel[1] * kernel[2]
    other = "conv2d:conv_direct_kernel" if taps <= 16 else "conv2d:gemm"
    assert (other in labels) == (kernel[3] > 64 or not native), labels


@pytest.mark.nojit
@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("shape, kernel, attrs", [
    ((3, 6, 5, 4), (3, 3, 4, 64), {}),                      # K = 36 taps: whole 4-row tiles
    ((2, 9, 8, 3), (3, 3, 3, 64), {"padding": "same"}),     # K = 27: a 3-row tail of taps
    ((2, 9, 9, 2), (3, 3, 2, 64), {"strides": (2, 1), "dilation": (1, 2)}),
    ((2, 6, 6, 3), (3, 3, 3, 32), {}),                      # 27 taps, 32 channels (numba: BLAS)
    ((3, 11, 13, 1), (3, 3, 1, 32), {}),                    # 9 taps: one block
    ((2, 10, 9, 1), (5, 5, 1, 20), {"padding": "same"}),    # 25 taps: blocks + tail, masked
    ((2, 7, 8, 2), (3, 3, 2, 100), {"strides": (2, 2), "padding": "same"}),  # 7 vectors
    ((1, 9, 9, 1), (3, 3, 1, 3), {"dilation": (2, 2)}),     # one masked vector
])
def test_conv2d_kernel_gradient_tiles_match_the_reference(shape, kernel, attrs, native,
                                                           monkeypatch, cpu_options):
    """The float32 kernel gradient against the float64 reference: native_tile's kernel
    (any taps, at most 64 output channels; chunks of output rows that
    leave a partial last chunk, several partial sums), or with the tiles off the direct loops
    or im2col + GEMM (the op's NumPy reference where the native path is off)."""
    from kiln.core.backends.cpu.runtime import threads

    _tile_paths(monkeypatch, native, cpu_options)
    cpu_options(filter_chunk=10)
    monkeypatch.setattr(threads, "kernel_threads", lambda: 3)
    rng = np.random.default_rng(4)
    attrs = {"strides": (1, 1), "padding": "valid", "dilation": (1, 1), **attrs}
    xv = rng.normal(size=shape).astype("float32")
    ct_shape = OPS["conv2d"].ref(xv, rng.normal(size=kernel).astype("float32"), **attrs).shape
    ctv = rng.normal(size=ct_shape).astype("float32")
    x = kiln.placeholder((None,) + shape[1:])
    ct = kiln.placeholder((None,) + ct_shape[1:])
    node = apply("conv2d_backprop_filter", x, ct, kernel_size=kernel[:2], **attrs)
    f = kiln.function([x, ct], node, backend="cpu", optimize=False)
    want = OPS["conv2d_backprop_filter"].ref(xv.astype("float64"), ctv.astype("float64"),
                                             kernel_size=kernel[:2], **attrs)
    for _ in range(2):  # each call zeroes the partial sums again
        np.testing.assert_allclose(f(xv, ctv), want, rtol=1e-4, atol=1e-4)
    taps = kernel[0] * kernel[1] * kernel[2]
    labels = _labels(f)
    if not native_enabled():
        assert "conv2d_backprop_filter(reference)" in labels, labels
        return
    assert ("conv2d_backprop_filter:filter_tile" in labels) == (kernel[3] <= 64 and native)
    other = ("conv2d_backprop_filter:conv_filter_direct_kernel" if taps <= 16
             else "conv2d_backprop_filter:gemm")
    assert (other in labels) == (kernel[3] > 64 or not native), labels


@pytest.mark.parametrize("shape, kernel, attrs", [
    ((2, 9, 10, 32), (3, 3, 32, 1), {"padding": "same"}),    # a Conv2D(1) output layer
    ((3, 8, 7, 20), (3, 3, 20, 3), {"strides": (2, 1)}),     # 20 channels: a masked vector
    ((2, 11, 12, 16), (2, 3, 16, 4), {"padding": "same", "dilation": (2, 1)}),
    ((2, 6, 40, 8), (1, 3, 8, 2), {"padding": "same"}),      # 8 channels, 40-pixel rows
    ((1, 5, 5, 40), (5, 5, 40, 1), {}),                      # 25 taps: blocks + a tail
    ((2, 4, 5, 16), (3, 3, 16, 5), {}),                      # 5 outputs: the tiles instead
])
def test_convolutions_into_few_channels_match_the_reference(shape, kernel, attrs, monkeypatch,
                                                            cpu_options):
    """native_tile's dot kernels (vectors over the input channels) for the forward and the
    kernel gradient of a float32 convolution into at most 4 channels from at least 8."""
    from kiln.core.backends.cpu.runtime import threads

    _tile_paths(monkeypatch, True, cpu_options)
    cpu_options(filter_chunk=10)
    monkeypatch.setattr(threads, "kernel_threads", lambda: 3)
    rng = np.random.default_rng(8)
    attrs = {"strides": (1, 1), "padding": "valid", "dilation": (1, 1), **attrs}
    xv = rng.normal(size=shape).astype("float32")
    wv = rng.normal(size=kernel).astype("float32")
    want = OPS["conv2d"].ref(xv.astype("float64"), wv.astype("float64"), **attrs)
    ctv = rng.normal(size=want.shape).astype("float32")
    x, w = kiln.placeholder((None,) + shape[1:]), kiln.placeholder(kernel)
    ct = kiln.placeholder((None,) + want.shape[1:])
    f = kiln.function([x, w, ct], [apply("conv2d", x, w, **attrs), apply(
        "conv2d_backprop_filter", x, ct, kernel_size=kernel[:2], **attrs)], backend="cpu",
        optimize=False)
    want_dw = OPS["conv2d_backprop_filter"].ref(xv.astype("float64"), ctv.astype("float64"),
                                                kernel_size=kernel[:2], **attrs)
    for scale in (1, 2):  # the padded copy and the partial sums refreshed on every call
        y, dw = f(xv * scale, wv, ctv)
        np.testing.assert_allclose(y, want * scale, rtol=1e-5, atol=1e-5 * scale)
        np.testing.assert_allclose(dw, want_dw * scale, rtol=1e-4, atol=1e-4 * scale)
    labels = _labels(f)
    dot = kernel[3] <= options.CpuOptions.dot_max_out and native_enabled()
    assert ("conv2d:conv_dot" in labels) == dot
    assert ("conv2d_backprop_filter:conv_dot_filter" in labels) == dot


@pytest.mark.parametrize("activation, co", [("relu", 32), ("relu", 20), (None, 16),
                                            ("sigmoid", 32)])
def test_the_bias_and_relu_after_a_tiled_convolution_are_its_epilogue(activation, co,
                                                                       monkeypatch, cpu_options):
    """Conv2D(+bias, relu) -> max pooling: the convolution's kernel writes relu(conv + bias)
    (the fused add/relu pass gone), the same bits as without the epilogue; a sigmoid is no
    epilogue (it stays a pass of its own)."""

    _tile_paths(monkeypatch, True, cpu_options)
    rng = np.random.default_rng(12)
    xv = rng.normal(size=(3, 10, 9, 2)).astype("float32")
    xv[0, 0, 0, 0] = np.nan  # a NaN stays NaN through the epilogue's ReLU
    k = rng.normal(size=(3, 3, 2, co)).astype("float32")
    bias = rng.normal(size=co).astype("float32")

    attrs = {"strides": (1, 1), "padding": "same", "dilation": (1, 1)}
    f = conv_block(xv.shape, k, bias, activation, attrs)
    got = f(xv)
    labels = _labels(f)
    fused = activation != "sigmoid" and native_enabled()
    assert any(lab.startswith("conv2d:conv_tile_b") for lab in labels) == fused
    assert not any(lab.startswith("fused") or lab == "add" for lab in labels) or not fused
    cpu_options(conv_epilogue=False)
    np.testing.assert_array_equal(got, conv_block(xv.shape, k, bias, activation, attrs)(xv))
    ref, _ = conv_block_reference(xv, k, bias, activation, attrs)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_no_epilogue_where_the_convolution_has_other_readers(monkeypatch, cpu_options):
    # the convolution's value is an output too: it must be stored as it is
    _tile_paths(monkeypatch, True, cpu_options)
    rng = np.random.default_rng(13)
    xv = rng.normal(size=(2, 6, 6, 3)).astype("float32")
    k = rng.normal(size=(3, 3, 3, 16)).astype("float32")
    x = kiln.placeholder((None, 6, 6, 3))
    c = apply("conv2d", x, kiln.ops.constant(k), strides=(1, 1), padding="valid", dilation=(1, 1))
    f = kiln.function([x], [c, kiln.ops.relu(c + kiln.ops.constant(np.ones(16, "float32")))],
                      backend="cpu")
    y, r = f(xv)
    want = OPS["conv2d"].ref(xv.astype("float64"), k.astype("float64"), strides=(1, 1),
                             padding="valid", dilation=(1, 1))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r, np.maximum(want + 1, 0), rtol=1e-5, atol=1e-5)
    assert not any(lab.startswith("conv2d:conv_tile_b") for lab in _labels(f))


@pytest.mark.parametrize("length, ci, other_reader", [
    (40, 3, False),    # a tiled convolution (3 input channels)
    (40, 16, False),   # a Winograd pipeline (1 x 3 tiles)
    (40, 16, True),    # the squeezed value is an output too: no epilogue
])
def test_a_conv1ds_bias_and_relu_are_its_epilogue_through_the_squeeze(length, ci, other_reader,
                                                                      monkeypatch, cpu_options):
    # conv1d is conv2d on (N, 1, L, C), then a squeeze (a view, no kernel) that the bias add
    # reads: the epilogue sees through it (PlanBuilder.epilogue_input)

    _tile_paths(monkeypatch, True, cpu_options)
    rng = np.random.default_rng(14)
    xv = rng.normal(size=(3, length, ci)).astype("float32")
    k = rng.normal(size=(3, ci, 16)).astype("float32")
    bias = rng.normal(size=16).astype("float32")

    def build():
        x = kiln.placeholder((None, length, ci))
        c = kiln.ops.conv1d(x, kiln.ops.constant(k), padding="same")
        r = kiln.ops.relu(c + kiln.ops.constant(bias))
        return kiln.function([x], [r, c] if other_reader else [r], backend="cpu")

    f = build()
    got = f(xv)  # a list: the outputs are a list
    ref = OPS["conv2d"].ref(xv[:, None].astype("float64"), k[None].astype("float64"),
                            strides=(1, 1), padding="same", dilation=(1, 1))[:, 0]
    np.testing.assert_allclose(got[0], np.maximum(ref + bias, 0), rtol=1e-5, atol=1e-5)
    if other_reader:
        np.testing.assert_allclose(got[1], ref, rtol=1e-5, atol=1e-5)
    labels = _labels(f)
    absorbed = native_enabled() and not other_reader
    assert (not any(lab.startswith("fused") or lab == "add" for lab in labels)) == absorbed
    cpu_options(conv_epilogue=False)
    for a, b in zip(got, build()(xv), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("taps, op, dtype, cout, want", [
    (9, "conv2d", "float32", 32, "tile"), (9, "conv2d", "float64", 32, "direct"),
    (288, "conv2d", "float32", 65, "gemm"), (288, "conv2d", "float32", 64, "tile"),
    (288, "conv2d_backprop_filter", "float32", 64, "tile"),
    (288, "conv2d_backprop_filter", "float32", 32, "tile"),
    (288, "conv2d_backprop_filter", "float32", 65, "gemm"),
    (9, "conv2d_backprop_filter", "float32", 64, "tile"),
    (9, "conv2d_backprop_filter", "float32", 65, "direct"),
    (288, "conv2d_backprop_input", "float32", 64, "gemm"),
])
def test_conv_method_choices(taps, op, dtype, cout, want, monkeypatch):
    import dataclasses

    from kiln.core.backends.cpu.kernels.conv import conv

    untiled = ("direct" if taps <= 16 and op != "conv2d_backprop_input" else "gemm")
    with cpu(avx512=True):
        assert conv.conv_method(taps, op, dtype, cout) == want
    with cpu(avx512=False):  # AVX2 with FMA: the tiles at 8 lanes, four vectors of channels
        assert conv.conv_method(taps, op, dtype, cout) == (want if cout <= 32 else untiled)
    plain = dataclasses.replace(target.process(), name="x86-64", features=frozenset())
    with target.use(plain):  # no AVX2: no tiles
        assert conv.conv_method(taps, op, dtype, cout) == untiled


def test_the_tiles_are_chosen_where_the_cpu_has_avx512_or_avx2_with_fma():
    from kiln.core.backends.cpu.kernels.conv import conv

    for features, tiled in ((AVX512, True), (AVX2, True), (frozenset(), False),
                            (AVX512 - {"avx512vl"}, True), (AVX2 - {"fma"}, False)):
        with target.use(dataclasses.replace(target.process(), features=features)):
            assert (conv.conv_method(288, "conv2d", "float32", 32) == "tile") == tiled


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_a_pointwise_convolutions_input_gradient_is_one_gemm(padding):
    # 1x1, stride 1: dx (N*H*W, Cin) = dy (N*H*W, Cout) @ w^T, no im2col-sized buffer or col2im
    rng = np.random.default_rng(21)
    ct = rng.normal(size=(3, 5, 4, 6)).astype("float32")
    w = rng.normal(size=(1, 1, 7, 6)).astype("float32")
    attrs = {"strides": (1, 1), "padding": padding, "dilation": (1, 1)}
    c, k = kiln.placeholder((None, 5, 4, 6)), kiln.placeholder((1, 1, 7, 6))
    f = kiln.function([c, k], apply("conv2d_backprop_input", c, k, input_shape=(5, 4, 7),
                                    **attrs), backend="cpu")
    got = f(ct, w)
    want = all_ops()["conv2d_backprop_input"].ref(ct.astype("float64"), w.astype("float64"),
                                                  input_shape=(5, 4, 7), **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, (ct.reshape(-1, 6) @ w[0, 0].T).reshape(3, 5, 4, 7),
                               rtol=1e-6, atol=1e-6)
    labels = _labels(f)
    assert "conv2d_backprop_input:pointwise" in labels
    assert not any("col2im" in lab for lab in labels)


@pytest.mark.parametrize("kernel, dilation, padding", [((5, 5), (1, 1), "same"),
                                                       ((3, 3), (2, 2), "same"),
                                                       ((3, 2), (2, 3), "valid"),
                                                       ((5, 3), (1, 2), "valid")])
@pytest.mark.parametrize("avx512", [True, False])
def test_the_input_gradient_runs_as_a_forward_convolution_of_the_cotangent(kernel, dilation,
                                                                           padding, avx512,
                                                                           monkeypatch):
    # stride 1, any dilation, at most 64 input channels: the flipped kernel over the
    # cotangent padded by (k - 1) d - pad, through the forward tiles where the CPU has them
    set_cpu(monkeypatch, avx512)
    rng = np.random.default_rng(22)
    x_shape, co = (3, 11, 10, 19), 24
    attrs = {"strides": (1, 1), "padding": padding, "dilation": dilation}
    w = rng.normal(size=(*kernel, 19, co)).astype("float32")
    out_shape = all_ops()["conv2d"].ref(np.zeros(x_shape), w, **attrs).shape
    ct = rng.normal(size=out_shape).astype("float32")
    c, k = kiln.placeholder((None, *out_shape[1:])), kiln.placeholder(w.shape)
    f = kiln.function([c, k], apply("conv2d_backprop_input", c, k, input_shape=x_shape[1:],
                                    **attrs), backend="cpu")
    got = f(ct, w)
    want = all_ops()["conv2d_backprop_input"].ref(ct.astype("float64"), w.astype("float64"),
                                                  input_shape=x_shape[1:], **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert ("conv2d_backprop_input:conv_tile" in _labels(f)) == target.current().tile_conv
