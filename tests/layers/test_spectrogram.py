"""STFTSpectrogram (issue 44): Keras live (every mode but "angle"), NumPy's rfft of windowed
frames, the standard layer checks and ``.keras`` round trips."""

from __future__ import annotations

import os

import numpy as np
import pytest
from layer_helpers import run_layer_test
from test_more_layers_saving import test_keras_file_round_trip as _round_trip

from kiln import layers as L

RNG = np.random.default_rng(11)
X = RNG.normal(size=(2, 100, 2)).astype("float32")

KW = [
    {"frame_length": 32},
    {"mode": "magnitude", "frame_length": 20, "frame_step": 7, "fft_length": 64,
     "window": "hamming", "periodic": True, "padding": "same"},
    {"mode": "psd", "frame_length": 16, "scaling": "spectrum", "expand_dims": True},
    {"mode": "stft", "frame_length": 16, "window": None},
    {"mode": "real", "frame_length": 16},
    {"mode": "imag", "frame_length": 16, "window": "blackman"},
]


@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    pytest.importorskip("scipy", reason="Keras' STFTSpectrogram imports scipy")
    return pytest.importorskip("keras")


@pytest.mark.parametrize("kwargs", KW, ids=[k.get("mode", "log") for k in KW])
def test_matches_keras(kwargs, keras):
    theirs = keras.layers.STFTSpectrogram(**kwargs)
    want = np.asarray(theirs(X))
    ours = L.STFTSpectrogram(**kwargs)
    got = np.asarray(ours(X))
    assert [w.name.split("/")[-1] for w in ours.weights] == [w.path.split("/")[-1]
                                                             for w in theirs.weights]
    assert ours.compute_output_shape((None, 100, 2)) == (None,) + want.shape[1:]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


def test_magnitude_is_numpys_rfft_of_the_windowed_frames():
    x = RNG.normal(size=(1, 64, 1))
    layer = L.STFTSpectrogram("magnitude", frame_length=16, frame_step=8, dtype="float64",
                              scaling=None)
    got = np.asarray(layer(x))[0]                                   # (frames, 9)
    win = np.hanning(16)
    frames = np.stack([x[0, i:i + 16, 0] for i in range(0, 64 - 16 + 1, 8)])
    want = np.abs(np.fft.rfft(frames * win, n=16))
    np.testing.assert_allclose(got, np.maximum(want, np.sqrt(1e-7)), rtol=1e-9, atol=1e-12)


def test_standard_checks_and_keras_file(tmp_path):
    case = (L.STFTSpectrogram, {"frame_length": 8, "mode": "psd"}, (2, 40, 3), (2, 9, 15),
            2 * 8 * 5, [(8, 1, 5), (8, 1, 5)])
    run_layer_test(*case[:5], rtol=1e-4, atol=1e-4)
    _round_trip(case, tmp_path)


@pytest.mark.parametrize("kwargs,match", [
    ({"mode": "angle"}, "arctan2"), ({"mode": "db"}, "mode is invalid"),
    ({"frame_length": 8, "frame_step": 9}, "frame_step"),
    ({"frame_length": 8, "fft_length": 4}, "fft_length"),
    ({"window": "kaiser"}, "not supported"), ({"padding": "causal"}, "Padding"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        L.STFTSpectrogram(**kwargs)


AUDIO = RNG.normal(size=(2, 4000)).astype("float32")
MEL = [
    {"fft_length": 256, "sequence_stride": 128, "num_mel_bins": 40},
    {"fft_length": 512, "sequence_length": 300, "sequence_stride": 100, "window": "hamming",
     "num_mel_bins": 20, "power_to_db": False, "mag_exp": 1.0, "sampling_rate": 8000,
     "max_freq": 3000},
    {"fft_length": 128, "sequence_stride": 64, "window": None, "top_db": 20.0,
     "ref_power": 2.0},
]


@pytest.mark.parametrize("kwargs", MEL, ids=["db", "linear-hamming", "no-window"])
def test_mel_spectrogram_matches_keras(kwargs, keras):
    want = np.asarray(keras.layers.MelSpectrogram(**kwargs)(AUDIO))
    layer = L.MelSpectrogram(**kwargs)
    got = np.asarray(layer(AUDIO))
    assert layer.compute_output_shape((None, 4000)) == (None,) + want.shape[1:]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-3)
    # one signal (the dB floor is the maximum over what is passed: the batch, or this signal)
    one = np.asarray(keras.layers.MelSpectrogram(**kwargs)(AUDIO[0]))
    np.testing.assert_allclose(layer(AUDIO[0]), one, rtol=1e-4, atol=2e-3)


def test_mel_filterbank_rows_are_triangles_summing_over_the_band():
    from kiln.layers.spectrogram import linear_to_mel_weight_matrix
    m = linear_to_mel_weight_matrix(10, 129, 16000, 20.0, 8000.0)
    assert m.shape == (129, 10) and np.all(m >= 0) and np.all(m[0] == 0)
    peaks = m.argmax(0)
    assert np.all(np.diff(peaks) > 0)  # centers increase with the mel index
    assert np.all(m.max(0) <= 1.0 + 1e-12)


def test_mel_spectrogram_round_trips(tmp_path):
    case = (L.MelSpectrogram, {"fft_length": 64, "sequence_stride": 32, "num_mel_bins": 8},
            (2, 256), None, None, [])
    _round_trip(case, tmp_path)
    with pytest.raises(ValueError, match="fft_length"):
        L.MelSpectrogram(fft_length=64, sequence_length=128)
    with pytest.raises(ValueError, match="window"):
        L.MelSpectrogram(window="blackman")
