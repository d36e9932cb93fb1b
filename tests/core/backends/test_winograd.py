"""Winograd convolutions (kiln/core/backends/cpu/kernels/conv/winograd.py, native_winograd.py)
against the float64 reference: both tile sizes, odd image sizes (partial tiles), channel counts
that leave a tail of the 8-lane loop, both paddings, the three convolution ops."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
from conv_cases import conv_block, conv_block_reference

import kiln
import kiln.ops as K
from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.kernels.conv import native_winograd, winograd, winograd_ops
from kiln.core.ops import all_ops
from kiln.core.ops.registry import apply


@pytest.fixture(autouse=True)
def _winograd_at_any_size(monkeypatch, cpu_options):
    # these cases are small: Winograd's forward runs here from one output position (it
    # takes the direct kernels below lowering.WINOGRAD_MIN_OUTPUTS elsewhere)
    cpu_options(winograd_min_outputs=0)


OPS = all_ops()

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the native path")


def _labels(f) -> list[str]:
    plan = next(iter(f.program._plans.values()))
    return [getattr(s, "label", "") for s in plan.steps]


@pytest.mark.parametrize("m, r", [(2, 3), (4, 3), (3, 2)])
def test_transform_matrices_compute_a_correlation(m, r):
    """A^T [(G g G^T) * (B^T d B)] A is the valid r x r correlation of one alpha x alpha tile,
    in exact rational arithmetic."""
    bt, at, g = (np.array(native_winograd.matrix(m, k, r), dtype=object)
                 for k in ("BT", "AT", "G"))
    rng = np.random.default_rng(m)
    alpha = m + r - 1
    d = np.array([[Fraction(int(v)) for v in row] for row in rng.integers(-9, 9, (alpha, alpha))])
    k = np.array([[Fraction(int(v)) for v in row] for row in rng.integers(-9, 9, (r, r))])
    y = at.dot((g.dot(k).dot(g.T)) * (bt.dot(d).dot(bt.T))).dot(at.T)
    want = [[sum(d[i + a, j + b] * k[a, b] for a in range(r) for b in range(r))
             for j in range(m)] for i in range(m)]
    assert (y == np.array(want, dtype=object)).all()


CASES = [  # (x shape, kernel, Cout, padding, stride)
    ((2, 7, 9, 16), (3, 3), 16, "same", 1),      # odd sizes: partial tiles on both axes
    ((3, 8, 8, 19), (3, 3), 21, "valid", 1),     # 19 / 21 channels: the one-lane tail
    ((1, 5, 6, 24), (3, 3), 40, "same", 1),
    ((2, 4, 3, 16), (3, 3), 17, "valid", 1),     # output 2 x 1: one partial tile
    ((2, 1, 11, 16), (1, 3), 18, "same", 1),     # a 1x3 kernel (Conv1D): one-row tiles
    ((3, 2, 9, 17), (1, 3), 16, "valid", 1),     # two rows, 7 outputs: a partial tile
    ((2, 14, 14, 16), (4, 4), 16, "same", 2),    # stride 2, 4x4: four 2x2 phases
    ((2, 9, 11, 19), (4, 4), 17, "same", 2),     # odd sizes, channel tails
    ((3, 10, 9, 16), (4, 4), 24, "valid", 2),
    ((1, 7, 8, 16), (4, 4), 16, "same", 2),
    ((2, 9, 8, 16), (3, 3), 1, "same", 1),       # one output channel: forward, kernel grad
    ((2, 6, 7, 3), (3, 3), 8, "same", 1),        # 3 -> 8: the input gradient only
    ((2, 9, 10, 16), (3, 3), 16, "same", 2),     # 3x3 at stride 2: zero-padded phases
    ((2, 11, 8, 16), (3, 3), 8, "valid", 2),     # (allowed here only: slower than im2col)
]


def _attrs(padding):
    return {"strides": (1, 1), "padding": padding, "dilation": (1, 1)}


def _close(got, want):
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * scale * 3)


def _three_ops(rng, shape: tuple, kernel: tuple, attrs: dict) -> tuple:
    """A convolution's forward, input gradient and kernel gradient on random float32 values:
    ``(values (x, w, ct), placeholders (x, w, ct), the three op nodes, their float64
    references)``."""
    kh, kw = kernel[:2]
    xv = rng.normal(size=shape).astype("float32")
    wv = rng.normal(size=kernel).astype("float32")
    ct_shape = OPS["conv2d"].ref(xv, wv, **attrs).shape
    ctv = rng.normal(size=ct_shape).astype("float32")
    x, w = kiln.placeholder((None,) + shape[1:]), kiln.placeholder(kernel)
    ct = kiln.placeholder((None,) + ct_shape[1:])
    nodes = [apply("conv2d", x, w, **attrs),
             apply("conv2d_backprop_input", ct, w, input_shape=shape[1:], **attrs),
             apply("conv2d_backprop_filter", x, ct, kernel_size=(kh, kw), **attrs)]
    x64, w64, ct64 = (v.astype("float64") for v in (xv, wv, ctv))
    wants = [OPS["conv2d"].ref(x64, w64, **attrs),
             OPS["conv2d_backprop_input"].ref(ct64, w64, input_shape=shape[1:], **attrs),
             OPS["conv2d_backprop_filter"].ref(x64, ct64, kernel_size=(kh, kw), **attrs)]
    return (xv, wv, ctv), (x, w, ct), nodes, wants


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("shape, k, co, padding, stride", CASES)
def test_winograd_convolutions_match_the_reference(m, shape, k, co, padding, stride,
                                                  monkeypatch, cpu_options):

    cpu_options(winograd_m=m)
    # one output channel runs native_tile's dot kernels first on AVX-512 hosts; Winograd's
    # products into one column are what this covers
    cpu_options(dot_max_out=0)
    cpu_options(winograd_stride2_kernels=((4, 4), (3, 3)))
    kh, kw = k
    rng = np.random.default_rng(sum(shape) + co)
    attrs = {**_attrs(padding), "strides": (stride, stride)}
    kernel = (kh, kw, shape[3], co)
    (xv, wv, ctv), (x, w, ct), nodes, wants = _three_ops(rng, shape, kernel, attrs)
    runs = [(name, ins, vals, node, want) for name, ins, vals, node, want in zip(
        ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"),
        ([x, w], [ct, w], [x, ct]), ((xv, wv), (ctv, wv), (xv, ctv)), nodes, wants)]
    for name, ins, vals, node, want in runs:
        f = kiln.function(ins, node, backend="cpu", optimize=False)
        _close(f(*vals), want)
        used = winograd.usable(attrs, kernel, np.dtype("float32"), name)
        assert any("winograd" in lab for lab in _labels(f)) == bool(used), name
        _close(f(*(v * 2 for v in vals)), want * 4)  # buffers refreshed on every call


@pytest.mark.parametrize("alone", [False, True])
@pytest.mark.parametrize("chunk_bytes", [1, 1 << 20])  # 1: one image per chunk
@pytest.mark.parametrize("shape, k, co, padding, stride", [
    ((5, 7, 9, 16), (3, 3), 16, "same", 1),       # 5 images over 3 threads: uneven parts
    ((3, 8, 8, 24), (3, 3), 32, "valid", 1),
    ((4, 2, 9, 16), (1, 3), 16, "same", 1),       # one-row tiles
    ((5, 14, 14, 16), (4, 4), 16, "same", 2),     # stride 2: the four phases
    ((3, 9, 11, 8), (4, 4), 24, "valid", 2),
])
def test_the_pipelined_convolution_and_gradients_match_the_reference(
        shape, k, co, padding, stride, chunk_bytes, alone, monkeypatch, cpu_options):
    # the stride-1 forward and input gradient as one pass per chunk of images (input
    # transform, products, output transform on one thread); the kernel gradient then reads
    # the input tiles the pipeline wrote, in a pipeline of its own (the cotangent's transform
    # and the products added into one partial sum per thread). ``alone``: the kernel gradient
    # without the forward (a Conv2DTranspose's): each thread transforms its chunk's input too
    from kiln.core.backends.cpu.runtime import threads

    cpu_options(winograd_pipeline_bytes=chunk_bytes)
    cpu_options(winograd_pipeline_min_tiles=1)
    monkeypatch.setattr(threads, "kernel_threads", lambda: 3)
    rng = np.random.default_rng(5)
    attrs = {**_attrs(padding), "strides": (stride, stride)}
    (xv, wv, ctv), (x, w, ct), nodes, wants = _three_ops(rng, shape, (*k, shape[3], co), attrs)
    if alone:
        f = kiln.function([x, ct], nodes[2:], backend="cpu", optimize=False)
        calls = [((xv * scale, ctv * scale), (scale * scale,)) for scale in (1, 2)]
        wants = wants[2:]
    else:
        f = kiln.function([x, w, ct], nodes, backend="cpu", optimize=False)
        calls = [((xv * scale, wv, ctv * scale), (scale, scale, scale * scale))
                 for scale in (1, 2)]
    for args, factors in calls:  # every buffer refreshed on the second call
        for got, want, factor in zip(f(*args), wants, factors):
            _close(got, want * factor)
    labels = _labels(f)
    assert ("conv2d:winograd_pipeline" in labels) != alone
    assert "conv2d_backprop_filter:winograd_pipeline" in labels  # chunks summed per thread
    assert not any("winograd_input" in lab for lab in labels)  # no pass over the batch


def test_chunks_hold_at_least_the_minimum_of_tiles():
    # 256 channels in and out on 8 x 8 images (36 blocks, 4 tiles an image): the pipeline's
    # bytes alone would give chunks of 3 images, 12 tiles
    opts = options.current()
    assert opts.winograd_pipeline_bytes // (36 * 4 * 512 * 4) == 3
    assert winograd.chunk_images(36, 4, 512) == -(-opts.winograd_pipeline_min_tiles // 4)
    assert winograd.chunk_images(36, 1, 8) == opts.winograd_pipeline_bytes // (36 * 8 * 4)


@pytest.mark.parametrize("partial_bytes, pipelined", [(0, False), (1 << 30, True)])
def test_a_large_kernel_gradient_runs_without_per_thread_partials(partial_bytes, pipelined,
                                                                  monkeypatch, cpu_options):
    # above PARTIAL_BYTES of transformed gradient per thread, the kernel gradient runs the
    # products over the whole batch (split by blocks) instead of the pipeline's partials
    cpu_options(winograd_partial_bytes=partial_bytes)
    rng = np.random.default_rng(6)
    attrs = {**_attrs("same"), "strides": (1, 1)}
    (xv, wv, ctv), (x, w, ct), nodes, wants = _three_ops(rng, (3, 8, 8, 16), (3, 3, 16, 16),
                                                         attrs)
    f = kiln.function([x, w, ct], nodes, backend="cpu", optimize=False)
    for got, want in zip(f(xv, wv, ctv), wants):
        _close(got, want)
    labels = _labels(f)
    assert ("conv2d_backprop_filter:winograd_pipeline" in labels) == pipelined
    assert ("conv2d_backprop_filter:winograd_gemm" in labels) != pipelined


@pytest.mark.parametrize("lanes", [8, 16])
def test_transforms_in_either_vector_width_match_the_reference(lanes, monkeypatch, cpu_options):
    # 27 input / 24 output channels: 16-lane vectors, then 8-lane, then single channels
    cpu_options(winograd_transform_lanes=lanes)
    (xv, wv, ctv), (x, w, ct), nodes, wants = _three_ops(
        np.random.default_rng(9), (2, 7, 6, 27), (3, 3, 27, 24), ATTRS)
    f = kiln.function([x, w, ct], nodes, backend="cpu", optimize=False)
    for got, want in zip(f(xv, wv, ctv), wants):
        _close(got, want)
    assert any("winograd" in lab for lab in _labels(f))


@pytest.mark.parametrize("adjoint", [True, False])
@pytest.mark.parametrize("chunk_bytes", [1, 1 << 20])
@pytest.mark.parametrize("shape, co, kernel", [
    ((5, 13, 13, 32), 64, (3, 3)),    # the MNIST convnet's second layer: 3x3 tiles, not 4x4
    ((3, 9, 10, 16), 16, (3, 3)),     # 7 x 8 outputs: 2 x 2 tiles against 3 x 3
    ((2, 13, 7, 24), 17, (3, 3)),     # 17 cotangent channels: 16 + a scalar tail
    ((3, 2, 14, 16), 16, (1, 3)),     # one-row tiles (Conv1D): 3 against 4
])
def test_the_input_gradient_over_the_forward_tiles_matches_the_reference(
        shape, co, kernel, chunk_bytes, adjoint, monkeypatch, cpu_options):
    # a "valid" convolution's input gradient as the adjoint of the forward, over its tiles
    # (the windows of neighbouring tiles overlap and are added), against the float64
    # reference, one image per chunk or several, images over 3 threads
    from kiln.core.backends.cpu.runtime import threads

    cpu_options(winograd_adjoint=adjoint)
    cpu_options(winograd_pipeline_bytes=chunk_bytes)
    monkeypatch.setattr(threads, "kernel_threads", lambda: 3)
    rng = np.random.default_rng(10)
    attrs = _attrs("valid")
    wv = rng.normal(size=(*kernel, shape[3], co)).astype("float32")
    ct_shape = OPS["conv2d"].ref(np.zeros(shape), wv, **attrs).shape
    ctv = rng.normal(size=ct_shape).astype("float32")
    ct, w = kiln.placeholder((None,) + ct_shape[1:]), kiln.placeholder(wv.shape)
    f = kiln.function([ct, w], apply("conv2d_backprop_input", ct, w, input_shape=shape[1:],
                                     **attrs), backend="cpu", optimize=False)
    want = OPS["conv2d_backprop_input"].ref(ctv.astype("float64"), wv.astype("float64"),
                                            input_shape=shape[1:], **attrs)
    for scale in (1, 2):  # every image zeroed again before its tiles are added
        _close(f(ctv * scale, wv), want * scale)
    labels = _labels(f)
    # the forward's tiles are fewer here: the adjoint runs where it is on
    assert ("conv2d_backprop_input:winograd_adjoint" in labels) == adjoint
    assert ("conv2d_backprop_input:winograd_pipeline" in labels) == (not adjoint)


@pytest.mark.parametrize("activation", ["relu", None, "tanh"])
@pytest.mark.parametrize("kernel, stride, ci, co", [((3, 3), 1, 16, 32), ((4, 4), 2, 8, 16),
                                                    ((3, 3), 1, 24, 24)])
def test_the_bias_and_relu_are_the_output_transforms_epilogue(kernel, stride, ci, co,
                                                              activation, monkeypatch, cpu_options):
    # conv + bias (+ ReLU) with the pipeline: the output transform adds the bias and applies
    # the ReLU (the separate pass gone), the same bits as without; tanh is not folded

    rng = np.random.default_rng(15)
    xv = rng.normal(size=(3, 12, 10, ci)).astype("float32")
    xv[1, 3, 4, 0] = np.nan
    k = rng.normal(size=(*kernel, ci, co)).astype("float32")
    bias = rng.normal(size=co).astype("float32")
    attrs = {**ATTRS, "strides": (stride, stride)}
    f = conv_block(xv.shape, k, bias, activation, attrs)
    got = f(xv)
    labels = _labels(f)
    assert "conv2d:winograd_pipeline" in labels
    folded = activation != "tanh"
    assert (not any(lab.startswith("fused") or lab == "add" for lab in labels)) == folded
    cpu_options(conv_epilogue=False)
    np.testing.assert_array_equal(got, conv_block(xv.shape, k, bias, activation, attrs)(xv))
    # F(4x4)'s error is relative to the convolution's scale
    ref, scale = conv_block_reference(xv, k, bias, activation, attrs)
    assert np.isnan(got[np.isnan(ref)]).all()  # the NaN's windows stay NaN
    mask = np.isfinite(got)  # (a NaN spreads over its Winograd tile, not only its window)
    np.testing.assert_allclose(got[mask], ref[mask], rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("activation", ["relu", None, "tanh"])
@pytest.mark.parametrize("kernel, stride", [((3, 3), 1), ((4, 4), 2)])
def test_a_transposed_convolutions_bias_and_relu_are_its_epilogue(kernel, stride, activation,
                                                                  monkeypatch, cpu_options):
    # Conv2DTranspose (conv2d_backprop_input of its input) + bias (+ ReLU): the pipelined
    # output transforms (at stride 2 one per phase, every other row and column) add the bias
    # and apply the ReLU; the same bits as without; tanh is not folded

    rng = np.random.default_rng(16)
    ci, co = 16, 16  # the transposed convolution's input and output channels
    xv = rng.normal(size=(3, 7, 6, ci)).astype("float32")
    xv[1, 3, 4, 0] = np.nan
    k = rng.normal(size=(*kernel, co, ci)).astype("float32")
    bias = rng.normal(size=co).astype("float32")
    attrs = {**ATTRS, "strides": (stride, stride)}
    out_shape = (7 * stride, 6 * stride, co)
    acts = {"relu": K.relu, None: lambda h: h, "tanh": K.tanh}

    def build():
        x = kiln.placeholder((None,) + xv.shape[1:])
        h = apply("conv2d_backprop_input", x, K.constant(k), input_shape=out_shape, **attrs)
        return kiln.function([x], acts[activation](h + kiln.Variable(bias)), backend="cpu")

    f = build()
    got = f(xv)
    labels = _labels(f)
    assert "conv2d_backprop_input:winograd_pipeline" in labels
    folded = activation != "tanh"
    assert (not any(lab.startswith("fused") or lab == "add" for lab in labels)) == folded
    cpu_options(conv_epilogue=False)
    np.testing.assert_array_equal(got, build()(xv))
    pre = OPS["conv2d_backprop_input"].ref(xv.astype("float64"), k.astype("float64"),
                                           input_shape=out_shape, **attrs) + bias
    ref = {"relu": lambda r: np.maximum(r, 0), None: lambda r: r, "tanh": np.tanh}[
        activation](pre)
    mask = np.isfinite(got)  # (a NaN spreads over its Winograd tiles)
    assert not mask.all() and mask.mean() > 0.5
    np.testing.assert_allclose(got[mask], ref[mask], rtol=0,
                               atol=1e-5 * np.nanmax(np.abs(pre)))


def test_the_pipeline_can_be_turned_off(monkeypatch, cpu_options):
    cpu_options(winograd_pipeline=False)
    x, w = kiln.placeholder((None, 6, 6, 16)), kiln.placeholder((3, 3, 16, 16))
    f = kiln.function([x, w], apply("conv2d", x, w, **ATTRS), backend="cpu", optimize=False)
    rng = np.random.default_rng(6)
    xv, wv = (rng.normal(size=s).astype("float32") for s in ((2, 6, 6, 16), (3, 3, 16, 16)))
    _close(f(xv, wv), OPS["conv2d"].ref(xv.astype("float64"), wv.astype("float64"), **ATTRS))
    labels = _labels(f)
    assert "conv2d:winograd_gemm" in labels and "conv2d:winograd_pipeline" not in labels


ATTRS = {"strides": (1, 1), "padding": "same", "dilation": (1, 1)}


S2 = {**ATTRS, "strides": (2, 2)}


@pytest.mark.parametrize("attrs, shape, dtype, env, want", [
    (ATTRS, (3, 3, 16, 16), np.float32, "4", 1),
    (ATTRS, (3, 3, 16, 16), np.float32, "2", 1),
    (ATTRS, (3, 3, 16, 16), np.float32, "0", 0),            # turned off
    (ATTRS, (3, 3, 16, 16), np.float64, "4", 0),            # float32 only
    (ATTRS, (3, 3, 7, 16), np.float32, "4", 0),             # too few channels read
    (ATTRS, (3, 3, 8, 1), np.float32, "4", 1),              # any number written
    (ATTRS, (1, 3, 16, 16), np.float32, "4", 1),            # Conv1D's 1x3
    (ATTRS, (5, 5, 16, 16), np.float32, "4", 0),            # 3x3 and 1x3 only
    (ATTRS, (3, 1, 16, 16), np.float32, "4", 0),
    (ATTRS, (4, 4, 16, 16), np.float32, "4", 0),            # 4x4 only at stride 2
    (S2, (4, 4, 16, 16), np.float32, "4", 2),               # stride 2: four 2x2 phases
    (S2, (4, 4, 16, 16), np.float32, "0", 0),
    (S2, (3, 3, 16, 16), np.float32, "4", 0),               # 3x3 at stride 2: im2col
    ({**ATTRS, "strides": (1, 2)}, (4, 4, 16, 16), np.float32, "4", 0),
    ({**ATTRS, "dilation": (1, 2)}, (3, 3, 16, 16), np.float32, "4", 0),
    ({**ATTRS, "groups": 2}, (3, 3, 16, 16), np.float32, "4", 0),
    (ATTRS, (3, 3, 256, 256), np.float32, "4", 1),          # a 9.4 MB kernel transform
    (ATTRS, (3, 3, 512, 512), np.float32, "4", 0),          # 38 MB: im2col + GEMM
    (ATTRS, (3, 3, 512, 512), np.float32, "2", 1),          # F(2x2, 3x3): 16 MiB, the limit
])
def test_usable_only_where_the_transform_applies(attrs, shape, dtype, env, want, cpu_options):
    cpu_options(winograd_m=int(env))  # as KILN_WINOGRAD=env
    assert winograd.usable(attrs, shape, np.dtype(dtype)) == want
    assert winograd.usable(attrs, shape, np.dtype(dtype), "conv2d_backprop_filter") == want


@pytest.mark.parametrize("shape, want", [((3, 3, 16, 8), 1), ((3, 3, 1, 8), 1),
                                         ((3, 3, 16, 7), 0), ((3, 3, 16, 1), 0)])
def test_the_input_gradient_reads_the_output_channels(shape, want):
    assert winograd.usable(ATTRS, shape, np.dtype("float32"), "conv2d_backprop_input") == want


def test_interpreted_kernels_never_use_winograd(monkeypatch):
    monkeypatch.setenv("KILN_JIT", "0")
    assert not winograd.usable(ATTRS, (3, 3, 16, 16), np.dtype(np.float32))


@pytest.mark.parametrize("m, r, rows", [(4, 3, 3), (2, 3, 3), (4, 3, 1), (3, 2, 2)])
def test_kernel_transforms_match_the_float64_products(m, r, rows):
    """U = G g G^T and its adjoint as one float32 GEMM, into contiguous and strided outputs,
    against the two float64 products."""
    geo = winograd.Geometry(m, r, rows, (8, 8))
    rng = np.random.default_rng(m + r + rows)
    w = rng.normal(size=(rows, r, 5, 7)).astype("float32")
    gr, g = geo.g_rows, geo.g
    want = np.einsum("ia,jb,abco->ijco", gr, g, w.astype("float64")).reshape(geo.blocks, 5, 7)
    out = np.empty((geo.blocks, 5, 7), np.float32)
    geo.kernel_transform(w, out)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-6 * np.abs(want).max())
    strided = np.zeros((geo.blocks, 5, 14), np.float32)[:, :, ::2]
    geo.kernel_transform(w[:, :, :, :], strided)
    np.testing.assert_array_equal(strided, out)
    du = rng.normal(size=(geo.blocks, 5, 7)).astype("float32")
    back = np.einsum("ia,jb,ijco->abco", gr, g, du.reshape(len(gr), len(g), 5, 7))
    got = np.zeros((rows, r, 5, 14), np.float32)[..., 1::2]
    geo.kernel_untransform(du, got)
    np.testing.assert_allclose(got, back, rtol=0, atol=1e-6 * np.abs(back).max())


def test_bad_setting_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("KILN_WINOGRAD", "3")
    with pytest.raises(ValueError, match="KILN_WINOGRAD must be 0, 2 or 4, got '3'"):
        options.build()


@pytest.mark.parametrize("tiles, channels", [(4096, 64), (16384, 32), (7, 19), (1, 16)])
def test_block_stride_spreads_the_blocks_over_cache_sets(tiles, channels):
    s = winograd.block_stride(tiles, channels)
    assert s >= tiles * channels
    lines = {(xi * s * 4 % 4096) // 64 for xi in range(36)}
    assert len(lines) == 36  # the 36 blocks of F(4x4, 3x3): one tile's rows in distinct sets


def _model2d():
    return [kiln.Input((10, 9, 16)),
            kiln.layers.Conv2D(24, 3, padding="same", activation="relu"),
            kiln.layers.Conv2D(16, 3), kiln.layers.GlobalAveragePooling2D(),
            kiln.layers.Dense(3)]


def _model1d():
    return [kiln.Input((10, 9, 16)), kiln.layers.Reshape((90, 16)),
            kiln.layers.Conv1D(24, 3, padding="same", activation="relu"),
            kiln.layers.Conv1D(16, 3, padding="causal"), kiln.layers.GlobalAveragePooling1D(),
            kiln.layers.Dense(3)]


@pytest.mark.parametrize("layers", [_model2d, _model1d])
def test_a_training_step_with_winograd_matches_im2col(layers, monkeypatch):
    """A Conv2D / Conv1D model's weights after two steps with F(4x4, 3x3) / F(1x4, 1x3)
    against the im2col path."""
    rng = np.random.default_rng(7)
    xv = rng.normal(size=(4, 10, 9, 16)).astype("float32")
    results, built = [], []
    convolve = winograd_ops.convolve
    monkeypatch.setattr(winograd_ops, "convolve",
                        lambda *a, **k: built.append(1) or convolve(*a, **k))
    for env in ("4", "0"):
        built.clear()
        kiln.utils.set_random_seed(1)
        with options.use(dataclasses.replace(options.current(), winograd_m=int(env))):
            model = kiln.Sequential(layers())
            model.compile(optimizer="sgd", loss="mse")
            model.fit(xv, np.ones((4, 3), "float32"), epochs=2, batch_size=4, verbose=0)
        results.append([w.numpy() for w in model.weights])
        assert bool(built) == (env == "4")
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_training_step_runs_an_f2_forward_and_predict_f4(monkeypatch, cpu_options):
    """With ``winograd_training_forward_m=2`` (default 4: the same tiles everywhere), a
    float32 training plan's forward convolutions take F(2x2, 3x3) tiles (F(4x4)'s larger
    forward error flips more ReLU / max-pool masks), its two gradients F(4x4, 3x3); predict's
    forward F(4x4, 3x3); ``KILN_WINOGRAD`` overrides both."""
    monkeypatch.delenv("KILN_WINOGRAD", raising=False)
    cpu_options(winograd_training_forward_m=2)
    seen: list[tuple[str, int]] = []
    for name in ("convolve", "input_gradient", "kernel_gradient"):
        real = getattr(winograd_ops, name)

        def spy(*a, _real=real, _name=name, **k):
            seen.append((_name, a[7]))  # (b, x, key, w / ct, out, pads, stride, m)
            return _real(*a, **k)
        monkeypatch.setattr(winograd_ops, name, spy)
    xv = np.random.default_rng(3).normal(size=(4, 10, 9, 16)).astype("float32")
    y = np.ones((4, 3), "float32")
    kiln.utils.set_random_seed(1)
    model = kiln.Sequential(_model2d())
    model.compile(optimizer="sgd", loss="mse")
    model.train_on_batch(xv, y)
    assert sorted(set(seen)) == [("convolve", 2), ("input_gradient", 4),
                                 ("kernel_gradient", 4)], seen
    seen.clear()
    model.predict(xv, verbose=0)
    assert set(seen) == {("convolve", 4)}, seen
    # a Conv2DTranspose's forward is an input gradient: its predict is no training graph
    seen.clear()
    kiln.utils.set_random_seed(1)
    transposed = kiln.Sequential([kiln.Input((10, 9, 16)),
                                  kiln.layers.Conv2DTranspose(16, 3, padding="same"),
                                  kiln.layers.Conv2D(16, 3)])
    transposed.predict(xv, verbose=0)
    assert set(seen) == {("input_gradient", 4), ("convolve", 4)}, seen
    seen.clear()
    with options.use(options.build(environ={"KILN_WINOGRAD": "4"})):
        again = kiln.Sequential(_model2d())
        again.compile(optimizer="sgd", loss="mse")
        again.train_on_batch(xv, y)
    assert {m for _, m in seen} == {4}, seen
