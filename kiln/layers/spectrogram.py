"""STFTSpectrogram (Keras 3.15 arguments, defaults and weights): a short-time Fourier
transform computed as a strided 1-D convolution with the DFT's cosine and sine rows (Keras'
``real_kernel`` and ``imag_kernel`` weights, trainable as in Keras)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers._utils import normalize_data_format
from kiln.layers.base import Layer

_MODES = ("log", "magnitude", "psd", "real", "imag", "angle", "stft")
_WINDOWS = {"hann": np.hanning, "hanning": np.hanning, "hamming": np.hamming,
            "blackman": np.blackman, "bartlett": np.bartlett,
            "boxcar": np.ones, "rectangular": np.ones, "ones": np.ones}
_EPS = 1e-7


def window_values(window: Any, n: int, periodic: bool) -> np.ndarray | None:
    """SciPy's ``get_window(window, n, fftbins=periodic)`` for the common windows (a
    periodic window is the symmetric one of ``n + 1`` points without its last)."""
    if window is None:
        return None
    if isinstance(window, str):
        fn = _WINDOWS.get(window.lower())
        if fn is None:
            raise ValueError(f"STFTSpectrogram: window {window!r} is not supported by kiln; "
                             f"use one of {sorted(_WINDOWS)}, None or an array of "
                             "frame_length values")
        return fn(n + 1)[:-1] if periodic else fn(n)
    w = np.asarray(window, dtype="float64")
    if w.shape != (n,):
        raise ValueError(f"The shape of `window` must be equal to [frame_length]. Received: "
                         f"window shape={w.shape}")
    return w


def stft_kernel(side: str, frame_length: int, bins: int, window: Any, scaling: Any,
                periodic: bool) -> np.ndarray:
    """Keras' ``initializers.STFT``: ``cos`` (real) or ``sin`` (imag) of ``-2 pi t f /
    n_fft`` for ``t < frame_length``, ``f < bins`` (``n_fft = 2 (bins - 1)``), times the
    window and divided by its L2 norm ("density") or L1 norm ("spectrum")."""
    t = np.arange(frame_length, dtype="float64").reshape(-1, 1, 1)
    f = np.arange(bins, dtype="float64").reshape(1, 1, -1) / (2 * (bins - 1))
    args = -2.0 * t * f * math.pi
    kernel = np.cos(args) if side == "real" else np.sin(args)
    win = window_values(window, frame_length, periodic)
    if win is not None:
        scale = {"density": np.sqrt(np.sum(win ** 2)), "spectrum": np.sum(np.abs(win))}.get(
            scaling, 1.0)
        kernel = kernel * win.reshape(-1, 1, 1) / scale
    return kernel


class STFTSpectrogram(Layer):
    """Spectrogram of ``(batch, time, channels)`` signals (Keras' ``STFTSpectrogram``):
    frames of ``frame_length`` samples every ``frame_step``, windowed, their first
    ``fft_length // 2 + 1`` DFT bins, as ``mode``: ``"log"`` (log magnitude, default),
    ``"magnitude"``, ``"psd"`` (power, interior bins doubled), ``"real"``, ``"imag"`` or
    ``"stft"`` (real then imaginary bins). Output ``(batch, frames, channels * bins)``, or
    ``(batch, frames, bins, channels)`` with ``expand_dims``.

    Args:
        mode: see above ("angle" needs an arctan2 kiln does not have: refused).
        frame_length: samples per frame (default 256).
        frame_step: samples between frames (default ``frame_length // 2``).
        fft_length: DFT size (default: the power of two >= ``frame_length``).
        window: "hann" (default), "hamming", "blackman", "bartlett", "boxcar", None or an
            array of ``frame_length`` values.
        periodic: periodic rather than symmetric window (default False).
        scaling: "density" (default), "spectrum" or None.
        padding: "valid" (default) or "same".
        expand_dims: see above (default False).
        data_format: None or "channels_last".

    Weights: ``real_kernel`` and ``imag_kernel`` ``(frame_length, 1, fft_length // 2 + 1)``
    (only the one a "real" or "imag" mode needs).
    """

    def __init__(self, mode: str = "log", frame_length: int = 256, frame_step: int | None = None,
                 fft_length: int | None = None, window: Any = "hann", periodic: bool = False,
                 scaling: str | None = "density", padding: str = "valid",
                 expand_dims: bool = False, data_format: str | None = None, **kwargs: Any):
        if frame_step is not None and (frame_step > frame_length or frame_step < 1):
            raise ValueError("`frame_step` should be a positive integer not greater than "
                             f"`frame_length`. Received frame_step={frame_step}, "
                             f"frame_length={frame_length}")
        if fft_length is not None and fft_length < frame_length:
            raise ValueError("`fft_length` should be not less than `frame_length`. Received "
                             f"fft_length={fft_length}, frame_length={frame_length}")
        if mode not in _MODES:
            raise ValueError(f"Output mode is invalid, it must be one of {', '.join(_MODES)}. "
                             f"Received: mode={mode}")
        if mode == "angle":
            raise ValueError("STFTSpectrogram: mode='angle' needs arctan2, which kiln.ops does "
                             "not have yet; use mode='stft' and compute the angle outside")
        if scaling is not None and scaling not in ("density", "spectrum"):
            raise ValueError("Scaling is invalid, it must be `None`, 'density' or 'spectrum'. "
                             f"Received scaling={scaling}")
        if padding not in ("valid", "same"):
            raise ValueError("Padding is invalid, it should be 'valid', 'same'. Received: "
                             f"padding={padding}")
        window_values(window, int(frame_length), bool(periodic))  # checked here
        super().__init__(**kwargs)
        self.mode, self.frame_length = mode, int(frame_length)
        self.frame_step, self.fft_length = frame_step, fft_length
        self._frame_step = int(frame_step or self.frame_length // 2)
        self._fft_length = int(fft_length or 2 ** int(math.ceil(math.log2(self.frame_length))))
        self.window = list(window) if isinstance(window, np.ndarray | tuple) else window
        self.periodic, self.scaling = bool(periodic), scaling
        self.padding, self.expand_dims = padding, bool(expand_dims)
        self.data_format = normalize_data_format("STFTSpectrogram", data_format)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node) and (inputs.ndim != 3 or inputs.shape[-1] is None):
            raise ValueError(f"Layer '{self.name}' (STFTSpectrogram) expects (batch, time, "
                             f"channels) signals, received {format_shape(inputs.shape)}")

    def build(self, input_shape: Any) -> None:
        bins = self._fft_length // 2 + 1
        shape = (self.frame_length, 1, bins)
        args = (self.frame_length, bins, self.window, self.scaling, self.periodic)
        if self.mode != "imag":
            self.real_kernel = self.add_weight(
                "real_kernel", shape, lambda s, dtype=None: stft_kernel("real", *args).astype(
                    dtype or self.dtype))
        if self.mode != "real":
            self.imag_kernel = self.add_weight(
                "imag_kernel", shape, lambda s, dtype=None: stft_kernel("imag", *args).astype(
                    dtype or self.dtype))
        self.built = True

    def _conv(self, x: Node, kernel: Any) -> Node:
        """``(batch, channels, bins, frames)``."""
        t, c = x.shape[1], int(x.shape[2])
        flat = K.reshape(K.transpose(x, (0, 2, 1)), (-1, t if t is not None else -1, 1))
        y = K.conv1d(flat, kernel, strides=self._frame_step, padding=self.padding)
        y = K.transpose(y, (0, 2, 1))                              # (batch * c, bins, frames)
        return K.reshape(y, (-1, c) + tuple(y.shape[1:]))

    def _adjust(self, y: Node) -> Node:
        if self.expand_dims:
            return K.transpose(y, (0, 3, 2, 1))
        c, f, frames = y.shape[1], y.shape[2], y.shape[3]
        return K.transpose(K.reshape(y, (-1, c * f, frames)), (0, 2, 1))

    def call(self, inputs: Node) -> Node:
        if not inputs.dtype.startswith("float"):
            raise TypeError("Invalid input type. Expected `float16`, `float32` or `float64`. "
                            f"Received: input type={inputs.dtype}")
        re = self._conv(inputs, self.real_kernel) if self.mode != "imag" else None
        im = self._conv(inputs, self.imag_kernel) if self.mode != "real" else None
        if self.mode == "real":
            return self._adjust(re)
        if self.mode == "imag":
            return self._adjust(im)
        if self.mode == "stft":
            return self._adjust(K.concatenate([re, im], axis=2))
        power = K.square(re) + K.square(im)
        if self.mode == "psd":
            inner = K.slice(power, [(None, None, 1)] * 2 + [(1, -1, 1), (None, None, 1)], None)
            return self._adjust(power + K.pad(inner, ((0, 0), (0, 0), (1, 1), (0, 0))))
        eps = K.constant(_EPS, power.dtype)
        linear = self._adjust(K.sqrt(K.maximum(power, eps)))
        return linear if self.mode == "magnitude" else K.log(K.maximum(linear, eps))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"mode": self.mode, "frame_length": self.frame_length,
                       "frame_step": self.frame_step, "fft_length": self.fft_length,
                       "window": self.window, "periodic": self.periodic,
                       "scaling": self.scaling, "padding": self.padding,
                       "data_format": self.data_format, "expand_dims": self.expand_dims})
        return config


_MEL_BREAK_FREQUENCY_HERTZ = 700.0
_MEL_HIGH_FREQUENCY_Q = 1127.0


def _hertz_to_mel(f: Any) -> Any:
    return _MEL_HIGH_FREQUENCY_Q * np.log(1.0 + np.asarray(f) / _MEL_BREAK_FREQUENCY_HERTZ)


def linear_to_mel_weight_matrix(num_mel_bins: int, num_spectrogram_bins: int,
                                sampling_rate: float, lower_edge_hertz: float,
                                upper_edge_hertz: float) -> np.ndarray:
    """TensorFlow's / Keras' HTK mel filterbank ``(num_spectrogram_bins, num_mel_bins)``:
    triangles on the mel scale between ``num_mel_bins + 2`` evenly spaced edges; the DC bin
    gets no weight."""
    freqs = np.linspace(0.0, sampling_rate / 2.0, num_spectrogram_bins)[1:]
    bins_mel = _hertz_to_mel(freqs)[:, None]
    edges = np.linspace(_hertz_to_mel(lower_edge_hertz), _hertz_to_mel(upper_edge_hertz),
                        num_mel_bins + 2)
    lower, center, upper = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
    weights = np.maximum(0.0, np.minimum((bins_mel - lower) / (center - lower),
                                         (upper - bins_mel) / (upper - center)))
    return np.pad(weights, ((1, 0), (0, 0)))


class MelSpectrogram(Layer):
    """Mel spectrogram of ``(batch, samples)`` (or one ``(samples,)``) audio, as Keras'
    ``MelSpectrogram``: a centered STFT (reflect padding of ``fft_length // 2``, frames of
    ``sequence_length`` samples every ``sequence_stride`` with a periodic Hann or Hamming
    window centered in ``fft_length``), magnitude to the power ``mag_exp``, the HTK mel
    filterbank between ``min_freq`` and ``max_freq``, then (``power_to_db``) ``10 log10(max(x,
    min_power) / max(|ref_power|, min_power))`` floored at its maximum over the whole batch
    minus ``top_db``. Output ``(batch, num_mel_bins, frames)``, ``frames = samples //
    sequence_stride + 1``. No weights.

    Args:
        fft_length=2048, sequence_stride=512, sequence_length=None (``fft_length``),
        window="hann" ("hann", "hamming" or None), sampling_rate=16000, num_mel_bins=128,
        min_freq=20.0, max_freq=None (``sampling_rate / 2``), power_to_db=True,
        top_db=80.0, mag_exp=2.0, min_power=1e-10, ref_power=1.0.
    """

    def __init__(self, fft_length: int = 2048, sequence_stride: int = 512,
                 sequence_length: int | None = None, window: str | None = "hann",
                 sampling_rate: int = 16000, num_mel_bins: int = 128, min_freq: float = 20.0,
                 max_freq: float | None = None, power_to_db: bool = True, top_db: float = 80.0,
                 mag_exp: float = 2.0, min_power: float = 1e-10, ref_power: float = 1.0,
                 **kwargs: Any):
        self.fft_length, self.sequence_stride = int(fft_length), int(sequence_stride)
        self.sequence_length = int(sequence_length or fft_length)
        if self.fft_length < self.sequence_length:
            raise ValueError("`fft_length` must be greater than or equal to  `sequence_length`."
                             f" Received: `sequence_length`={self.sequence_length}, "
                             f"`fft_length`={self.fft_length}.")
        if window not in (None, "hann", "hamming"):
            raise ValueError('If a string is passed to `window`, it must be one of `"hann"`, '
                             f'`"hamming"`. Received: window={window}')
        self.window, self.sampling_rate = window, sampling_rate
        self.num_mel_bins, self.min_freq = int(num_mel_bins), min_freq
        self.max_freq = max_freq or int(sampling_rate / 2)
        self.power_to_db, self.top_db, self.mag_exp = bool(power_to_db), top_db, mag_exp
        self.min_power, self.ref_power = min_power, ref_power
        super().__init__(**kwargs)

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        from kiln.layers.base import is_symbolic
        if not is_symbolic(inputs) and np.ndim(inputs) == 1:  # one signal
            return super().__call__(np.asarray(inputs)[None], *args, **kwargs)[0]
        return super().__call__(inputs, *args, **kwargs)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node) and (inputs.ndim != 2 or inputs.shape[1] is None):
            raise ValueError(f"Layer '{self.name}' (MelSpectrogram) expects (batch, samples) "
                             f"audio with a known length, received {format_shape(inputs.shape)}")

    def _kernels(self, dtype: str) -> tuple[np.ndarray, np.ndarray]:
        n, seq = self.fft_length, self.sequence_length
        win = np.ones(seq) if self.window is None else window_values(self.window, seq, True)
        left = (n - seq) // 2
        win = np.pad(win, (left, n - seq - left))
        t = np.arange(n, dtype="float64").reshape(-1, 1, 1)
        f = np.arange(n // 2 + 1, dtype="float64").reshape(1, 1, -1)
        args = -2.0 * np.pi * t * f / n
        w = win.reshape(-1, 1, 1)
        return (np.cos(args) * w).astype(dtype), (np.sin(args) * w).astype(dtype)

    def call(self, inputs: Node) -> Node:
        x = inputs if inputs.dtype in ("float32", "float64") else K.cast(inputs, "float32")
        n, p = int(x.shape[1]), self.fft_length // 2
        if p >= n:
            raise ValueError(f"Layer '{self.name}' (MelSpectrogram): reflect padding of "
                             f"{p} needs more than {p} samples, received {n}")
        full = (None, None, 1)
        left = K.flip(K.slice(x, [full, (1, p + 1, 1)], None), axis=1)
        right = K.flip(K.slice(x, [full, (n - p - 1, n - 1, 1)], None), axis=1)
        x = K.expand_dims(K.concatenate([left, x, right], axis=1), -1)      # (batch, T, 1)
        re_k, im_k = self._kernels(x.dtype)
        re = K.conv1d(x, K.constant(re_k), strides=self.sequence_stride, padding="valid")
        im = K.conv1d(x, K.constant(im_k), strides=self.sequence_stride, padding="valid")
        spec = K.power(K.sqrt(K.square(re) + K.square(im)), K.constant(self.mag_exp, x.dtype))
        mel = K.constant(linear_to_mel_weight_matrix(
            self.num_mel_bins, self.fft_length // 2 + 1, self.sampling_rate,
            self.min_freq, self.max_freq).astype(x.dtype))
        out = K.matmul(spec, mel)                                   # (batch, frames, mels)
        if self.power_to_db:
            floor = K.constant(self.min_power, x.dtype)
            db = K.log(K.maximum(out, floor)) * K.constant(10.0 / np.log(10.0), x.dtype)
            ref = 10.0 * np.log10(max(abs(self.ref_power), self.min_power))
            db = db - K.constant(ref, x.dtype)
            out = K.maximum(db, K.max(db) - K.constant(self.top_db, x.dtype))
        out = K.transpose(out, (0, 2, 1))
        return out if out.dtype == self.dtype else K.cast(out, self.dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"fft_length": self.fft_length, "sequence_stride": self.sequence_stride,
                       "sequence_length": self.sequence_length, "window": self.window,
                       "sampling_rate": self.sampling_rate, "num_mel_bins": self.num_mel_bins,
                       "min_freq": self.min_freq, "max_freq": self.max_freq,
                       "power_to_db": self.power_to_db, "top_db": self.top_db,
                       "mag_exp": self.mag_exp, "min_power": self.min_power,
                       "ref_power": self.ref_power})
        return config
