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
            inner = K.slice(power, [(None, None, 1)] * 2 + [(1, -1, 1), (None, None, 1)])
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
