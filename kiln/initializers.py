"""Weight initializers (Keras 3 names, arguments and defaults).

An initializer is called with a shape and a dtype and returns a NumPy array. Unseeded
initializers draw from kiln's process-wide generator (``kiln.random_state.numpy_rng()``), so
``kiln.utils.set_random_seed(s)`` makes every layer's initial weights reproducible; an
initializer given an integer ``seed`` draws from its own generator and returns the same values
on every call (as in Keras).

Fans follow Keras: a 2-D kernel ``(in, out)`` has ``fan_in = in`` and ``fan_out = out``; a
convolution kernel ``(*window, in, out)`` multiplies both by the receptive field size
``prod(window)``.

Example:
    >>> init = kiln.initializers.get("he_normal")
    >>> w = init((3, 3, 16, 32))
    >>> kiln.initializers.serialize(init)
    {'module': 'keras.initializers', 'class_name': 'HeNormal', 'config': {'seed': None, ...}, ...}
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kiln.config
from kiln.random_state import numpy_rng


def compute_fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight shape, like Keras (conv kernels: receptive field *
    channels)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[:-2], dtype=np.int64))
    return shape[-2] * receptive, shape[-1] * receptive


def _dtype(dtype: Any) -> np.dtype:
    return np.dtype(dtype or kiln.config.floatx())


class Initializer:
    """Base class: ``__call__(shape, dtype=None) -> np.ndarray`` and ``get_config``.

    Subclasses implement ``__call__`` and (when they take arguments) ``get_config``.
    """

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")

    def get_config(self) -> dict:
        return {}

    @classmethod
    def from_config(cls, config: dict) -> Initializer:
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class Zeros(Initializer):
    """All zeros."""

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        return np.zeros(tuple(shape), _dtype(dtype))


class Ones(Initializer):
    """All ones."""

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        return np.ones(tuple(shape), _dtype(dtype))


class Constant(Initializer):
    """Every entry equal to ``value`` (a scalar).

    Args:
        value: the constant (default 0.0).
    """

    def __init__(self, value: float = 0.0):
        self.value = value

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        return np.full(tuple(shape), self.value, _dtype(dtype))

    def get_config(self) -> dict:
        return {"value": self.value}


class Identity(Initializer):
    """``gain`` times the identity matrix (2-D shapes only).

    Args:
        gain: multiplicative factor (default 1.0).
    """

    def __init__(self, gain: float = 1.0):
        self.gain = gain

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        shape = tuple(shape)
        if len(shape) != 2:
            raise ValueError(f"Identity initializer needs a 2-D shape, received {shape}")
        return (self.gain * np.eye(*shape)).astype(_dtype(dtype))

    def get_config(self) -> dict:
        return {"gain": self.gain}


class RandomInitializer(Initializer):
    """Base of the random initializers: ``seed=None`` draws from kiln's global generator (see
    ``kiln.utils.set_random_seed``); an int seed gives the same values on every call."""

    def __init__(self, seed: int | None = None):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
            raise ValueError(f"{type(self).__name__}: seed must be an int or None, received "
                             f"{seed!r}")
        self.seed = None if seed is None else int(seed)

    def _rng(self) -> np.random.Generator:
        return numpy_rng() if self.seed is None else np.random.default_rng(self.seed)

    def get_config(self) -> dict:
        return {"seed": self.seed}


def _truncated_normal(rng: np.random.Generator, shape: tuple, mean: float,
                      stddev: float) -> np.ndarray:
    """Normal samples, redrawing those more than two standard deviations from the mean."""
    out = rng.standard_normal(shape)
    bad = np.abs(out) > 2.0
    while bad.any():
        out[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(out) > 2.0
    return mean + stddev * out


class RandomNormal(RandomInitializer):
    """Normal samples.

    Args:
        mean: mean (default 0.0).
        stddev: standard deviation (default 0.05).
        seed: optional int seed.
    """

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None):
        self.mean, self.stddev = mean, stddev
        super().__init__(seed)

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        out = self._rng().normal(self.mean, self.stddev, tuple(shape))
        return out.astype(_dtype(dtype))

    def get_config(self) -> dict:
        return {"seed": self.seed, "mean": self.mean, "stddev": self.stddev}


class TruncatedNormal(RandomInitializer):
    """Normal samples, redrawn when more than two standard deviations from the mean.

    Args:
        mean: mean (default 0.0).
        stddev: standard deviation before truncation (default 0.05).
        seed: optional int seed.
    """

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None):
        self.mean, self.stddev = mean, stddev
        super().__init__(seed)

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        out = _truncated_normal(self._rng(), tuple(shape), self.mean, self.stddev)
        return out.astype(_dtype(dtype))

    def get_config(self) -> dict:
        return {"seed": self.seed, "mean": self.mean, "stddev": self.stddev}


class RandomUniform(RandomInitializer):
    """Uniform samples in ``[minval, maxval)``.

    Args:
        minval: lower bound (default -0.05).
        maxval: upper bound (default 0.05).
        seed: optional int seed.
    """

    def __init__(self, minval: float = -0.05, maxval: float = 0.05, seed: int | None = None):
        self.minval, self.maxval = minval, maxval
        super().__init__(seed)

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        out = self._rng().uniform(self.minval, self.maxval, tuple(shape))
        return out.astype(_dtype(dtype))

    def get_config(self) -> dict:
        return {"seed": self.seed, "minval": self.minval, "maxval": self.maxval}


class VarianceScaling(RandomInitializer):
    """Samples scaled to the weight's fans.

    With ``n`` the fan_in, fan_out or their average (``mode``): ``"truncated_normal"`` draws a
    normal truncated at two standard deviations whose standard deviation after truncation is
    ``sqrt(scale / n)``; ``"untruncated_normal"`` a normal with that standard deviation;
    ``"uniform"`` draws from ``[-limit, limit]`` with ``limit = sqrt(3 * scale / n)``.

    Args:
        scale: positive scaling factor (default 1.0).
        mode: "fan_in" (default), "fan_out" or "fan_avg".
        distribution: "truncated_normal" (default; "normal" is an alias),
            "untruncated_normal" or "uniform".
        seed: optional int seed.
        input_axes, output_axes: accepted for newer Keras configs; must be None.
    """

    MODES = ("fan_in", "fan_out", "fan_avg")
    DISTRIBUTIONS = ("truncated_normal", "untruncated_normal", "uniform")

    def __init__(self, scale: float = 1.0, mode: str = "fan_in",
                 distribution: str = "truncated_normal", seed: int | None = None,
                 input_axes: Any = None, output_axes: Any = None):
        if input_axes is not None or output_axes is not None:
            raise ValueError(f"{type(self).__name__}: input_axes/output_axes are not supported "
                             f"by kiln (use None), received input_axes={input_axes!r}, "
                             f"output_axes={output_axes!r}")
        if scale <= 0.0:
            raise ValueError(f"VarianceScaling: scale must be positive, received {scale}")
        if mode not in self.MODES:
            raise ValueError(f"VarianceScaling: mode must be one of {', '.join(self.MODES)}; "
                             f"received {mode!r}")
        distribution = distribution.lower()
        if distribution == "normal":
            distribution = "truncated_normal"
        if distribution not in self.DISTRIBUTIONS:
            raise ValueError(f"VarianceScaling: distribution must be one of "
                             f"{', '.join(self.DISTRIBUTIONS)}; received {distribution!r}")
        self.scale, self.mode, self.distribution = scale, mode, distribution
        super().__init__(seed)

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        shape = tuple(int(d) for d in shape)
        fan_in, fan_out = compute_fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        scale = self.scale / max(1.0, n)
        rng = self._rng()
        if self.distribution == "truncated_normal":
            # 0.8796...: the standard deviation of a unit normal truncated at +-2.
            out = _truncated_normal(rng, shape, 0.0, math.sqrt(scale) / 0.87962566103423978)
        elif self.distribution == "untruncated_normal":
            out = rng.normal(0.0, math.sqrt(scale), shape)
        else:
            limit = math.sqrt(3.0 * scale)
            out = rng.uniform(-limit, limit, shape)
        return out.astype(_dtype(dtype))

    def get_config(self) -> dict:
        return {"seed": self.seed, "scale": self.scale, "mode": self.mode,
                "distribution": self.distribution, "input_axes": None, "output_axes": None}


class _FixedVarianceScaling(VarianceScaling):
    _ARGS: tuple[float, str, str] = (1.0, "fan_in", "truncated_normal")

    def __init__(self, seed: int | None = None, input_axes: Any = None, output_axes: Any = None):
        scale, mode, distribution = self._ARGS
        super().__init__(scale, mode, distribution, seed, input_axes, output_axes)

    def get_config(self) -> dict:
        return {"seed": self.seed, "input_axes": None, "output_axes": None}


class GlorotUniform(_FixedVarianceScaling):
    """Uniform in ``[-limit, limit]`` with ``limit = sqrt(6 / (fan_in + fan_out))`` (Keras'
    default kernel initializer)."""

    _ARGS = (1.0, "fan_avg", "uniform")


class GlorotNormal(_FixedVarianceScaling):
    """Truncated normal with ``stddev = sqrt(2 / (fan_in + fan_out))``."""

    _ARGS = (1.0, "fan_avg", "truncated_normal")


class HeNormal(_FixedVarianceScaling):
    """Truncated normal with ``stddev = sqrt(2 / fan_in)``."""

    _ARGS = (2.0, "fan_in", "truncated_normal")


class HeUniform(_FixedVarianceScaling):
    """Uniform in ``[-limit, limit]`` with ``limit = sqrt(6 / fan_in)``."""

    _ARGS = (2.0, "fan_in", "uniform")


class LecunNormal(_FixedVarianceScaling):
    """Truncated normal with ``stddev = sqrt(1 / fan_in)``."""

    _ARGS = (1.0, "fan_in", "truncated_normal")


class LecunUniform(_FixedVarianceScaling):
    """Uniform in ``[-limit, limit]`` with ``limit = sqrt(3 / fan_in)``."""

    _ARGS = (1.0, "fan_in", "uniform")


class Orthogonal(RandomInitializer):
    """A (semi-)orthogonal matrix times ``gain``, from the QR decomposition of a normal matrix.

    Shapes of rank > 2 are treated as ``(prod(shape[:-1]), shape[-1])``; with fewer rows than
    columns the rows are orthonormal, otherwise the columns.

    Args:
        gain: multiplicative factor (default 1.0).
        seed: optional int seed.
    """

    def __init__(self, gain: float = 1.0, seed: int | None = None):
        self.gain = gain
        super().__init__(seed)

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        shape = tuple(int(d) for d in shape)
        if len(shape) < 2:
            raise ValueError(f"Orthogonal initializer needs a shape of rank >= 2, received "
                             f"{shape}")
        rows = int(np.prod(shape[:-1], dtype=np.int64))
        cols = shape[-1]
        a = self._rng().standard_normal((max(rows, cols), min(rows, cols)))
        q, r = np.linalg.qr(a)
        q = q * np.where(np.diag(r) < 0, -1.0, 1.0)  # unique, uniformly distributed Q
        if rows < cols:
            q = q.T
        return (self.gain * q.reshape(shape)).astype(_dtype(dtype))

    def get_config(self) -> dict:
        return {"seed": self.seed, "gain": self.gain}


OrthogonalInitializer = Orthogonal

# the windows of the STFT initializer, computed with NumPy (SciPy's definitions; no SciPy at
# run time)
_STFT_WINDOWS = {"hann": np.hanning, "hanning": np.hanning, "hamming": np.hamming,
                 "blackman": np.blackman, "bartlett": np.bartlett, "boxcar": np.ones,
                 "box": np.ones, "ones": np.ones, "rectangular": np.ones}


def _stft_window(name: str, length: int, periodic: bool) -> np.ndarray:
    """SciPy's ``get_window(name, length, fftbins=periodic)`` for the windows above."""
    fn = _STFT_WINDOWS[name]
    if periodic:
        return np.asarray(fn(length + 1), np.float64)[:-1]
    return np.asarray(fn(length), np.float64)


class STFT(Initializer):
    """Initializer of Conv1D kernels computing a short-time Fourier transform.

    Args:
        side: ``"real"`` (cosines) or ``"imag"`` (negated sines), default ``"real"``.
        window: a window name (hann, hamming, blackman, bartlett, boxcar), an array of
            ``frame_length`` values, or ``None``; default ``"hann"``.
        scaling: ``"density"`` (divide by the window's L2 norm), ``"spectrum"`` (by its L1
            norm) or ``None``; default ``"density"``.
        periodic: use the periodic (DFT-even) form of a named window; default False.
    """

    def __init__(self, side: str = "real", window: Any = "hann", scaling: str | None = "density",
                 periodic: bool = False):
        if side not in ("real", "imag"):
            raise ValueError(f"STFT initializer: side should be 'real' or 'imag', not {side!r}")
        if isinstance(window, str) and window not in _STFT_WINDOWS:
            raise ValueError(f"STFT initializer: unknown window {window!r}; kiln supports "
                             f"{', '.join(sorted(_STFT_WINDOWS))}, an array or None")
        if scaling is not None and scaling not in ("density", "spectrum"):
            raise ValueError("STFT initializer: scaling must be None, 'density' or 'spectrum', "
                             f"received scaling={scaling!r}")
        self.side = side
        self.window = window
        self.scaling = scaling
        self.periodic = periodic

    def __call__(self, shape: Any, dtype: Any = None) -> np.ndarray:
        shape = tuple(int(d) for d in shape)
        if len(shape) != 3:
            raise ValueError("STFT initializer: shape must be (frame_length, input_channels, "
                             f"fft_length // 2 + 1), received {shape}")
        dtype = np.dtype(dtype or kiln.config.floatx())
        frame_length, _, bins = shape
        time = np.arange(frame_length, dtype=np.float64).reshape(frame_length, 1, 1)
        freq = np.arange(bins, dtype=np.float64).reshape(1, 1, bins) / ((bins - 1) * 2)
        angle = -2.0 * time * freq * np.pi
        kernel = np.cos(angle) if self.side == "real" else np.sin(angle)
        if self.window is not None:
            if isinstance(self.window, str):
                win = _stft_window(self.window, frame_length, bool(self.periodic))
            else:
                win = np.asarray(self.window, np.float64)
            if win.shape != (frame_length,):
                raise ValueError("STFT initializer: the window must have shape "
                                 f"({frame_length},) (frame_length), received {win.shape}")
            scale = 1.0
            if self.scaling == "density":
                scale = float(np.sqrt(np.sum(win * win)))
            elif self.scaling == "spectrum":
                scale = float(np.sum(np.abs(win)))
            kernel = kernel * win.reshape(frame_length, 1, 1) / scale
        return np.broadcast_to(kernel, shape).astype(dtype)

    def get_config(self) -> dict:
        window = self.window
        if window is not None and not isinstance(window, str):
            window = np.asarray(window).tolist()
        return {"side": self.side, "window": window, "periodic": self.periodic,
                "scaling": self.scaling}


STFTInitializer = STFT

# Keras' lowercase exports: the classes under their function-style names
IdentityInitializer = identity = Identity
constant, ones, zeros, orthogonal = Constant, Ones, Zeros, Orthogonal
random_normal, random_uniform, truncated_normal = RandomNormal, RandomUniform, TruncatedNormal
variance_scaling, glorot_normal, glorot_uniform = VarianceScaling, GlorotNormal, GlorotUniform
he_normal, he_uniform, lecun_normal, lecun_uniform = HeNormal, HeUniform, LecunNormal, LecunUniform
stft = STFT

_CLASSES: list[type[Initializer]] = [
    Zeros, Ones, Constant, Identity, RandomNormal, TruncatedNormal, RandomUniform,
    VarianceScaling, GlorotUniform, GlorotNormal, HeNormal, HeUniform, LecunNormal,
    LecunUniform, Orthogonal, STFT,
]
_ALIASES = ["IdentityInitializer", "identity", "constant", "ones", "zeros", "orthogonal",
            "random_normal", "random_uniform", "truncated_normal", "variance_scaling",
            "glorot_normal", "glorot_uniform", "he_normal", "he_uniform", "lecun_normal",
            "lecun_uniform", "STFTInitializer", "stft"]


def _snake(name: str) -> str:
    import re

    s = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


_ALL: dict[str, type[Initializer]] = {c.__name__: c for c in _CLASSES}
_ALL.update({_snake(c.__name__): c for c in _CLASSES})
_ALL.update({"uniform": RandomUniform, "normal": RandomNormal, "OrthogonalInitializer": Orthogonal,
             "orthogonal_initializer": Orthogonal, "one": Ones, "zero": Zeros,
             "IdentityInitializer": Identity, "STFTInitializer": STFT, "stft": STFT})


def serialize(initializer: Initializer) -> dict:
    """Keras' serialized form: ``{"module", "class_name", "config", "registered_name"}``.

    Example:
        >>> serialize(GlorotUniform())
        {'module': 'keras.initializers', 'class_name': 'GlorotUniform',
         'config': {'seed': None, 'input_axes': None, 'output_axes': None},
         'registered_name': None}
    """
    if not isinstance(initializer, Initializer):
        raise TypeError(f"initializers.serialize: expected an Initializer, received "
                        f"{initializer!r} (plain functions cannot be stored in a config; "
                        "subclass kiln.initializers.Initializer)")
    cls = type(initializer)
    builtin = _ALL.get(cls.__name__) is cls
    return {"module": "keras.initializers" if builtin else cls.__module__,
            "class_name": cls.__name__, "config": initializer.get_config(),
            "registered_name": None if builtin else cls.__name__}


def _lookup(name: str, custom_objects: dict | None = None) -> type[Initializer]:
    if custom_objects and name in custom_objects:
        return custom_objects[name]
    try:
        return _ALL[name]
    except KeyError:
        raise ValueError(f"Unknown initializer {name!r}; valid names: "
                         f"{', '.join(sorted(_ALL))}") from None


def deserialize(config: Any, custom_objects: dict | None = None) -> Initializer:
    """Rebuilds an initializer from ``serialize``'s dict (or a Keras 2 style
    ``{"class_name", "config"}`` dict, or a bare name)."""
    if isinstance(config, str):
        return _lookup(config, custom_objects)()
    if not isinstance(config, dict) or "class_name" not in config:
        raise TypeError(f"initializers.deserialize: expected a dict with 'class_name', received "
                        f"{config!r}")
    cls = _lookup(config["class_name"], custom_objects)
    return cls.from_config(dict(config.get("config") or {}))


def get(identifier: Any) -> Any:
    """Resolves an initializer: a name (``"glorot_uniform"``, ``"GlorotUniform"``), a config
    dict, an Initializer instance or class, or a callable ``(shape, dtype) -> array``.

    Returns ``None`` for ``None``.

    Raises:
        ValueError: for an unknown name (the message lists the valid names).
        TypeError: for anything else that is not callable.
    """
    if identifier is None:
        return None
    if isinstance(identifier, str | dict):
        return deserialize(identifier)
    if isinstance(identifier, type):
        return identifier()
    if callable(identifier):
        return identifier
    raise TypeError(f"Could not interpret initializer identifier {identifier!r}")


__all__ = [c.__name__ for c in _CLASSES] + _ALIASES + [
    "Initializer", "RandomInitializer", "OrthogonalInitializer", "compute_fans", "get",
    "serialize", "deserialize"]
