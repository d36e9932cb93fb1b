"""eig, polar, view_as_complex, view_as_real (arrays; complex results) and rearrange (arrays
and graphs) against NumPy / closed forms and, where importable, Keras itself."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K

RNG = np.random.default_rng(0)


def _keras():
    """Keras as the oracle, or a skip; its NumPy and JAX backends also import scipy and jax."""
    keras = pytest.importorskip("keras")
    if keras.backend.backend() in ("numpy", "jax"):
        pytest.importorskip("scipy")
        pytest.importorskip("jax")
    return keras
IMG = RNG.random((4, 6, 8, 3)).astype("float32")

# (pattern, axes_lengths, NumPy oracle)
PATTERNS = [
    ("b h w c -> b c h w", {}, lambda x: x.transpose(0, 3, 1, 2)),
    ("b h w c -> (b h) w c", {}, lambda x: x.reshape(24, 8, 3)),
    ("b h w c -> h (b w) c", {}, lambda x: x.transpose(1, 0, 2, 3).reshape(6, 32, 3)),
    ("b h w c -> b (c h w)", {}, lambda x: x.transpose(0, 3, 1, 2).reshape(4, 144)),
    ("b (h1 h) (w1 w) c -> (b h1 w1) h w c", {"h1": 2, "w1": 2},
     lambda x: x.reshape(4, 2, 3, 2, 4, 3).transpose(0, 1, 3, 2, 4, 5).reshape(16, 3, 4, 3)),
    ("b (h h1) (w w1) c -> b h w (c h1 w1)", {"h1": 2, "w1": 2},
     lambda x: x.reshape(4, 3, 2, 4, 2, 3).transpose(0, 1, 3, 5, 2, 4).reshape(4, 3, 4, 12)),
]


@pytest.mark.parametrize("pattern,lengths,ref", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_rearrange_eager_and_graph(pattern, lengths, ref):
    want = ref(IMG)
    got = K.rearrange(IMG, pattern, **lengths)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, want)
    ph = kiln.placeholder(IMG.shape, "float32")
    out = K.rearrange(ph, pattern, **lengths)
    assert out.shape == want.shape
    np.testing.assert_array_equal(kiln.function([ph], out)(IMG), want)


@pytest.mark.parametrize("pattern,lengths,ref", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_rearrange_matches_keras(pattern, lengths, ref):
    keras = _keras()
    want = keras.ops.convert_to_numpy(keras.ops.rearrange(IMG, pattern, **lengths))
    np.testing.assert_array_equal(K.rearrange(IMG, pattern, **lengths), want)


def test_rearrange_unknown_batch_and_gradient():
    ph = kiln.placeholder((None, 6, 8, 3), "float64")
    out = K.rearrange(ph, "b (h h1) (w w1) c -> b h w (c h1 w1)", h1=2, w1=2)
    assert out.shape == (None, 3, 4, 12)
    w = RNG.standard_normal((2, 3, 4, 12))
    (g,) = kiln.grad(K.sum(out * K.constant(w)), [ph])
    x = RNG.standard_normal((2, 6, 8, 3))
    fv, gv = kiln.function([ph], [out, g])(x)
    np.testing.assert_array_equal(
        fv, x.reshape(2, 3, 2, 4, 2, 3).transpose(0, 1, 3, 5, 2, 4).reshape(2, 3, 4, 12))
    # the gradient of sum(out * w) is w moved back: the inverse rearrangement
    back = w.reshape(2, 3, 4, 3, 2, 2).transpose(0, 1, 4, 2, 5, 3).reshape(2, 6, 8, 3)
    np.testing.assert_array_equal(gv, back)


@pytest.mark.parametrize("pattern,lengths,match", [
    ("b h w -> b h w", {}, "names 3 input axes but the tensor has shape"),
    ("b h w c -> b h c", {}, "must be the same names"),
    ("b (h1 h) w c -> b h1 h w c", {}, "missing"),
    ("b (h1 h) w c -> b h1 h w c", {"h1": 4}, "does not divide the axis of size 6"),
    ("b h w c", {}, "must be a string 'input -> output'"),
])
def test_rearrange_errors(pattern, lengths, match):
    with pytest.raises(ValueError, match=match):
        K.rearrange(IMG, pattern, **lengths)


def test_view_as_real_and_complex_roundtrip():
    z = np.array([1 + 2j, 3 + 4j], np.complex64)
    r = K.view_as_real(z)
    np.testing.assert_array_equal(r, [[1.0, 2.0], [3.0, 4.0]])  # Keras' documented example
    assert r.dtype == np.float32
    c = K.view_as_complex(np.array([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_array_equal(c, [1 + 2j, 3 + 4j])
    assert c.dtype == np.complex64
    zz = (RNG.standard_normal((3, 5)) + 1j * RNG.standard_normal((3, 5))).astype(np.complex64)
    np.testing.assert_array_equal(K.view_as_complex(K.view_as_real(zz)), zz)
    with pytest.raises(ValueError, match=r"view_as_complex: the last dimension .* \(3, 3\)"):
        K.view_as_complex(np.zeros((3, 3), "float32"))


def test_view_as_real_symbolic_is_real_with_zero_imag():
    ph = kiln.placeholder((None, 3), "float32")
    out = K.view_as_real(ph)
    assert out.shape == (None, 3, 2)
    x = RNG.standard_normal((2, 3)).astype("float32")
    np.testing.assert_array_equal(kiln.function([ph], out)(x), np.stack([x, 0 * x], -1))
    with pytest.raises(TypeError, match="view_as_complex: kiln's graphs have no complex"):
        K.view_as_complex(kiln.placeholder((2, 2), "float32"))


def test_polar_closed_form():
    r = RNG.random((2, 3)).astype("float32")
    t = RNG.standard_normal((2, 3)).astype("float32")
    got = K.polar(r, t)
    assert got.dtype == np.complex64 and got.shape == (2, 3)
    np.testing.assert_allclose(got, r * np.exp(1j * t), rtol=1e-6, atol=1e-6)
    assert K.nn.polar is K.polar
    np.testing.assert_allclose(K.polar(np.float32([2.0]), np.float32([np.pi / 2])), [2j],
                               atol=1e-6)
    with pytest.raises(TypeError, match="polar: kiln's graphs have no complex dtype"):
        K.polar(kiln.placeholder((2,), "float32"), t[0, :2])


def test_eig_reconstructs_matrix():
    a = RNG.standard_normal((3, 4, 4))
    w, v = K.eig(a)
    assert w.shape == (3, 4) and v.shape == (3, 4, 4)
    # A v = v diag(w), column by column
    np.testing.assert_allclose(a @ v, v * w[:, None, :], atol=1e-10)
    w2, _ = K.linalg.eig(np.array([[0.0, -1.0], [1.0, 0.0]]))  # a rotation: +-i
    np.testing.assert_allclose(sorted(w2, key=lambda z: z.imag), [-1j, 1j], atol=1e-12)
    with pytest.raises(ValueError, match=r"eig: expected square matrices .* \(2, 3\)"):
        K.eig(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="eig: kiln's graphs have no complex dtype"):
        K.eig(kiln.placeholder((2, 2), "float32"))


def test_complex_ops_match_keras():
    keras = _keras()
    kops = keras.ops
    z = np.array([[1 + 2j, -3 + 0.5j]], np.complex64)
    np.testing.assert_allclose(K.view_as_real(z), kops.convert_to_numpy(kops.view_as_real(z)))
    pairs = RNG.standard_normal((2, 3, 2)).astype("float32")
    np.testing.assert_allclose(K.view_as_complex(pairs),
                               kops.convert_to_numpy(kops.view_as_complex(pairs)))
    r = RNG.random((2, 3)).astype("float32")
    t = RNG.standard_normal((2, 3)).astype("float32")
    np.testing.assert_allclose(K.polar(r, t), kops.convert_to_numpy(kops.polar(r, t)),
                               rtol=1e-5, atol=1e-6)
    a = np.array([[2.0, 1.0], [0.0, 3.0]], "float32")
    kw, _ = kops.eig(a)
    np.testing.assert_allclose(np.sort_complex(K.eig(a)[0]),
                               np.sort_complex(kops.convert_to_numpy(kw)), rtol=1e-5)
