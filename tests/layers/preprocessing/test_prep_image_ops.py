"""The image ops ``resize`` and ``affine_transform`` (kiln/core/ops/image.py) on the CPU
kernels and the reference, against independent oracles: per-pixel NumPy loops written from
the documented formulas, closed forms (shifts, quarter turns), and torch's ``interpolate`` /
``grid_sample`` where torch is installed. The registry tests check the gradients."""

from __future__ import annotations

import numpy as np
import pytest
from prep_oracles import affine_loop, resize_loop

import kiln
import kiln.ops as K

BACKENDS = ["cpu", "reference"]


def run(fn, *arrays, backend="cpu"):
    phs = [kiln.placeholder(a.shape, a.dtype.name) for a in arrays]
    return kiln.function(phs, fn(*phs), backend=backend)(*arrays)


# ---- resize ------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
@pytest.mark.parametrize("size", [(7, 9), (2, 3), (5, 2), (4, 6)])
def test_resize_matches_the_pixel_loop(backend, interpolation, size):
    x = np.random.default_rng(0).normal(size=(2, 4, 6, 3)).astype("float32")
    got = run(lambda p: K.resize(p, size, interpolation), x, backend=backend)
    np.testing.assert_allclose(got, resize_loop(x.astype(np.float64), *size, interpolation),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.torch
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
@pytest.mark.parametrize("size", [(9, 13), (3, 2), (4, 8), (1, 1)])
def test_resize_matches_torch_interpolate(interpolation, size):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).normal(size=(2, 6, 5, 3))
    got = run(lambda p: K.resize(p, size, interpolation), x)
    tx = torch.tensor(x.transpose(0, 3, 1, 2))
    if interpolation == "bilinear":
        ref = torch.nn.functional.interpolate(tx, size=size, mode="bilinear",
                                              align_corners=False, antialias=False)
    else:
        ref = torch.nn.functional.interpolate(tx, size=size, mode="nearest-exact")
    np.testing.assert_allclose(got, ref.numpy().transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-12)


def test_resize_gradient_reaches_the_pixels():
    """d sum(w * resize(x)) / dx = resize^T(w): the bilinear weights scattered back."""
    x = np.random.default_rng(2).normal(size=(1, 3, 4, 2))
    w = np.random.default_rng(3).normal(size=(1, 5, 7, 2))
    p = kiln.placeholder(x.shape, "float64")
    (g,) = kiln.grad(K.sum(K.resize(p, (5, 7)) * K.constant(w)), [p])
    got = kiln.function([p], g, backend="cpu")(x)
    # the transpose of the pixel loop, column by column of the identity
    expected = np.zeros(x.size)
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = 1.0
        expected[k] = np.sum(w * resize_loop(e.reshape(x.shape), 5, 7, "bilinear"))
    np.testing.assert_allclose(got.reshape(-1), expected, rtol=1e-10, atol=1e-12)


def test_resize_errors_name_the_op_and_the_shape():
    with pytest.raises(ValueError, match=r"resize: expected images of rank 4.*\(2, 3\)"):
        K.resize(kiln.placeholder((2, 3)), (4, 4))
    with pytest.raises(ValueError, match="interpolation must be one of.*'bicubic'.*received "
                                         "interpolation='gaussian'"):
        K.resize(kiln.placeholder((1, 2, 2, 1)), (4, 4), "gaussian")
    with pytest.raises(ValueError, match=r"known height and width.*\(None, None, 3, 1\)"):
        K.resize(kiln.placeholder((None, None, 3, 1)), (4, 4))
    with pytest.raises(TypeError, match="resize: expected a float tensor"):
        K.resize(kiln.placeholder((1, 2, 2, 1), "int32"), (4, 4))


# ---- affine_transform ------------------------------------------------------------------------
def _transforms(rng, b):
    t = np.zeros((b, 8))
    angle = rng.uniform(-0.6, 0.6, b)
    t[:, 0], t[:, 1], t[:, 3], t[:, 4] = np.cos(angle), -np.sin(angle), np.sin(angle), \
        np.cos(angle)
    t[:, 0] *= rng.uniform(0.7, 1.4, b)
    t[:, 2], t[:, 5] = rng.uniform(-2.3, 2.3, b), rng.uniform(-2.3, 2.3, b)
    return t


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fill_mode", ["constant", "nearest", "wrap", "mirror", "reflect"])
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
def test_affine_transform_matches_the_pixel_loop(backend, fill_mode, interpolation):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 5, 6, 2))
    t = _transforms(rng, 3)
    t[2, 6:] = [0.03, -0.02]  # one projective row
    got = run(lambda p, q: K.affine_transform(p, q, interpolation, fill_mode, 0.7), x, t,
              backend=backend)
    np.testing.assert_allclose(got, affine_loop(x, t, interpolation, fill_mode, 0.7),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.torch
@pytest.mark.parametrize("fill_mode,padding", [("constant", "zeros"), ("nearest", "border"),
                                               ("mirror", "reflection")])
def test_affine_transform_matches_torch_grid_sample(fill_mode, padding):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    b, h, w = 2, 6, 7
    x = rng.normal(size=(b, h, w, 3))
    t = _transforms(rng, b)
    got = run(lambda p, q: K.affine_transform(p, q, "bilinear", fill_mode, 0.0), x, t)
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    xs = t[:, 0, None, None] * xx + t[:, 1, None, None] * yy + t[:, 2, None, None]
    ys = t[:, 3, None, None] * xx + t[:, 4, None, None] * yy + t[:, 5, None, None]
    grid = np.stack([2 * xs / (w - 1) - 1, 2 * ys / (h - 1) - 1], axis=-1)  # align_corners
    ref = torch.nn.functional.grid_sample(torch.tensor(x.transpose(0, 3, 1, 2)),
                                          torch.tensor(grid), mode="bilinear",
                                          padding_mode=padding, align_corners=True)
    np.testing.assert_allclose(got, ref.numpy().transpose(0, 2, 3, 1), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_affine_transform_closed_forms(backend):
    x = np.arange(2 * 4 * 4 * 1, dtype="float32").reshape(2, 4, 4, 1)
    # an integer shift by one row down and two columns right, fill 9
    shift = np.array([[1, 0, -2, 0, 1, -1, 0, 0]], "float32")
    got = run(lambda p, q: K.affine_transform(p, q, fill_value=9.0), x, shift, backend=backend)
    expected = np.full_like(x, 9.0)
    expected[:, 1:, 2:] = x[:, :-1, :-2]
    np.testing.assert_array_equal(got, expected)
    # a quarter turn about the center: np.rot90 (counter-clockwise, as Keras' positive angles)
    c = 1.5
    quarter = np.array([[0, -1, c + c, 1, 0, c - c, 0, 0]], "float32")
    for interpolation in ("nearest", "bilinear"):
        got = run(lambda p, q, i=interpolation: K.affine_transform(p, q, i), x, quarter,
                  backend=backend)
        np.testing.assert_allclose(got, np.rot90(x, k=1, axes=(1, 2)), atol=1e-5)


def test_affine_transform_errors():
    x = kiln.placeholder((2, 4, 4, 1))
    with pytest.raises(ValueError, match=r"transforms must have shape \(batch, 8\).*\(2, 6\)"):
        K.affine_transform(x, kiln.placeholder((2, 6)))
    with pytest.raises(ValueError, match=r"transforms must have shape.*\(3, 8\)"):
        K.affine_transform(x, kiln.placeholder((3, 8)))
    with pytest.raises(ValueError, match="fill_mode must be one of.*'edge'"):
        K.affine_transform(x, kiln.placeholder((2, 8)), fill_mode="edge")
    with pytest.raises(ValueError, match="interpolation must be one of.*'cubic'"):
        K.affine_transform(x, kiln.placeholder((2, 8)), interpolation="cubic")


def test_affine_transform_far_and_nan_coordinates_read_the_fill_value():
    x = np.ones((1, 3, 3, 1), "float32")
    for bad in (1e30, -1e30, np.nan):
        t = np.array([[1, 0, bad, 0, 1, 0, 0, 0]], "float32")
        got = run(lambda p, q: K.affine_transform(p, q, fill_value=-2.0), x, t)
        np.testing.assert_array_equal(got, np.full_like(x, -2.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_affine_transform_refuses_a_row_count_that_is_not_one_per_image(backend):
    x = kiln.placeholder((None, 3, 3, 1))
    t = kiln.placeholder((None, 8))
    fn = kiln.function([x, t], K.affine_transform(x, t), backend=backend)
    message = r"transforms must have shape \(batch, 8\).*received \(2, 8\)"
    with pytest.raises(ValueError, match=message):
        fn(np.ones((3, 3, 3, 1), "float32"), np.ones((2, 8), "float32"))
