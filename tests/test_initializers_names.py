"""Keras 3.15's remaining initializer names: the lowercase exports, IdentityInitializer and
the STFT initializer (oracles: the closed-form DFT basis, SciPy's windows, Keras live)."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import initializers as I

ALIASES = {"glorot_normal": "GlorotNormal", "glorot_uniform": "GlorotUniform",
           "he_normal": "HeNormal", "he_uniform": "HeUniform", "lecun_normal": "LecunNormal",
           "lecun_uniform": "LecunUniform", "constant": "Constant", "ones": "Ones",
           "zeros": "Zeros", "orthogonal": "Orthogonal", "random_normal": "RandomNormal",
           "random_uniform": "RandomUniform", "truncated_normal": "TruncatedNormal",
           "variance_scaling": "VarianceScaling", "identity": "Identity",
           "IdentityInitializer": "Identity", "STFTInitializer": "STFT", "stft": "STFT"}


@pytest.mark.parametrize("alias, cls", sorted(ALIASES.items()))
def test_lowercase_names_are_keras_classes(alias, cls):
    assert getattr(I, alias) is getattr(I, cls)
    assert alias in I.__all__
    assert isinstance(I.get(alias), getattr(I, cls))


def test_function_style_names_draw_like_the_classes():
    a = I.glorot_uniform(seed=3)((4, 5))
    b = I.GlorotUniform(seed=3)((4, 5))
    np.testing.assert_array_equal(a, b)
    limit = np.sqrt(6.0 / (4 + 5))
    assert np.all(np.abs(a) <= limit)
    np.testing.assert_array_equal(I.constant(2.5)((2, 2)), np.full((2, 2), 2.5, "float32"))
    np.testing.assert_array_equal(I.identity(gain=3.0)((3, 3)), 3.0 * np.eye(3))


def _dft(frame, bins, side):
    t = np.arange(frame)[:, None, None]
    f = np.arange(bins)[None, None, :]
    angle = -2 * np.pi * t * f / (2 * (bins - 1))
    return np.cos(angle) if side == "real" else np.sin(angle)


@pytest.mark.parametrize("side", ["real", "imag"])
def test_stft_without_window_is_the_dft_basis(side):
    got = I.STFT(side, window=None)((16, 1, 9), dtype="float64")
    np.testing.assert_allclose(got, _dft(16, 9, side), atol=1e-12)
    # the real side at bin 0 is all ones; the imaginary side at bin 0 all zeros
    np.testing.assert_allclose(got[:, 0, 0], 1.0 if side == "real" else 0.0, atol=1e-12)


@pytest.mark.parametrize("window", ["hann", "hamming", "blackman", "bartlett", "boxcar"])
@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("scaling", ["density", "spectrum", None])
def test_stft_windows_match_scipy(window, periodic, scaling):
    signal = pytest.importorskip("scipy.signal")
    win = signal.get_window(window, 12, periodic)
    scale = {"density": np.sqrt(np.sum(win ** 2)), "spectrum": np.sum(np.abs(win)),
             None: 1.0}[scaling]
    expected = _dft(12, 7, "real") * win[:, None, None] / scale
    got = I.STFT("real", window, scaling, periodic)((12, 1, 7), dtype="float64")
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_stft_array_window_and_config_round_trip():
    win = np.linspace(0.1, 1.0, 8)
    init = I.STFT("imag", window=win, scaling="spectrum")
    np.testing.assert_allclose(init((8, 1, 5), "float64"),
                               _dft(8, 5, "imag") * win[:, None, None] / win.sum(), atol=1e-12)
    again = I.deserialize(I.serialize(init))
    assert isinstance(again, I.STFT) and again.get_config() == init.get_config()
    assert I.serialize(init)["class_name"] == "STFT"


def test_stft_bad_arguments_raise_clearly():
    with pytest.raises(ValueError, match="side should be 'real' or 'imag'"):
        I.STFT("both")
    with pytest.raises(ValueError, match="unknown window 'kaiserx'"):
        I.STFT(window="kaiserx")
    with pytest.raises(ValueError, match="scaling must be None, 'density' or 'spectrum'"):
        I.STFT(scaling="l2")
    with pytest.raises(ValueError, match=r"window must have shape \(8,\)"):
        I.STFT(window=np.ones(5))((8, 1, 5))
    with pytest.raises(ValueError, match=r"shape must be \(frame_length"):
        I.STFT()((8, 5))


@pytest.mark.parametrize("args", [("real", "hann", "density", False),
                                  ("imag", "hamming", "spectrum", True)])
def test_stft_matches_keras(args):
    keras = pytest.importorskip("keras")
    expected = keras.ops.convert_to_numpy(keras.initializers.STFT(*args)((20, 1, 11)))
    got = I.STFT(*args)((20, 1, 11))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
