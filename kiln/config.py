"""Global settings and environment switches.

Every ``KILN_*`` environment variable kiln reads is listed, with its values, in
docs/configuration.md (tests/test_configuration.py keeps that page and the code in step); the
readers below raise a ValueError naming the variable when its value is bad.

Environment variables (read when kiln is imported; the setters below change them later):
    KILN_BACKEND   default backend for compiled functions: "cpu" (compiled kernels) or
                   "reference".
    KILN_JIT=0     run every generated kernel as plain Python (debugging); the ops whose one
                   kernel is native run their NumPy references (as with KILN_NATIVE=0).
    KILN_NATIVE=0  compile the generated loops with numba instead of from LLVM IR, and run the
                   ops whose one kernel is native (conv, pooling, softmax rows ...) on their
                   NumPy references (backends/cpu/codegen/native.py).
    KILN_WINOGRAD  CPU float32 3x3 / 1x3 / stride-2 4x4 convolutions: 4 (default) Winograd
                   F(4x4, 3x3), 2 F(2x2, 3x3), 0 im2col + GEMM
                   (backends/cpu/kernels/conv/winograd.py; read into CpuOptions.winograd_m
                   by backends/cpu/options.py when a program is compiled).
    KILN_BLAS      the BLAS of the CPU backend's GEMMs: auto (default: a private copy of
                   NumPy's OpenBLAS, with NumPy's kernels or AVX-512 ones where NumPy's picked
                   AVX2 ones on an AVX-512 CPU by itself), numpy, or an OpenBLAS core name
                   (backends/cpu/gemm/blas.py).
    KILN_DEBUG=1   verify graph invariants after every optimization pass.
    KILN_CACHE_DIR where generated kernel source, native object files and numba's cache live
                   (~/.cache/kiln; created with mode 0700, checked on every load:
                   docs/architecture.md).
    KILN_DEVICE    "cpu" (default), "cuda" or "auto".
    KILN_PROFILE=1 print time per kernel after each compiled call.
    KILN_MAX_EPOCHS, KILN_MAX_STEPS_PER_EPOCH
                   caps on every ``fit`` (Keras' ``KERAS_MAX_EPOCHS`` /
                   ``KERAS_MAX_STEPS_PER_EPOCH``, also read): see :func:`set_max_epochs`.

Keras' ``keras.config`` names are here too (the second half of this module): ``backend``,
``epsilon``, ``image_data_format``, ``dtype_policy``, the interactive-logging,
traceback-filtering and flash-attention switches, ``enable_unsafe_deserialization`` and the
caps ``max_epochs`` (``fit``) / ``max_steps_per_epoch`` (every loop: ``fit``, its
validation, ``evaluate``, ``predict``).
"""

from __future__ import annotations

import os
from typing import Any

_FLOATX = "float32"


def floatx() -> str:
    """The default float dtype of layers and weights ("float32")."""
    return _FLOATX


def set_floatx(value: str) -> None:
    global _FLOATX
    if value not in ("float32", "float64"):
        raise ValueError(f"set_floatx: expected 'float32' or 'float64', received {value!r}")
    _FLOATX = value


_FALSE = ("0", "", "false", "no", "off")
_TRUE = ("1", "true", "yes", "on")


def env_flag(name: str, default: bool = False) -> bool:
    """The switch ``name``: 1/true/yes/on or 0/false/no/off (or empty); ``default`` unset.

    Raises:
        ValueError: another value, naming the variable and the value received.
    """
    value = os.environ.get(name)
    if value is None:
        return default
    word = value.strip().lower()
    if word in _FALSE:
        return False
    if word in _TRUE:
        return True
    raise ValueError(f"{name} must be 0 or 1 (or false/true, no/yes, off/on), got {value!r}")


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """The setting ``name`` (case-insensitive), one of ``choices``; ``default`` unset or empty.

    Raises:
        ValueError: another value, naming the variable, the choices and the value received.
    """
    value = os.environ.get(name, "")
    word = value.strip().lower()
    if not word:
        return default
    if word not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, "
                         f"got {value!r}")
    return word


def env_positive_int(name: str) -> int | None:
    """The positive integer ``name``, or None unset or empty.

    Raises:
        ValueError: ``"KILN_NUM_THREADS must be a positive integer, got '0'"``.
    """
    value = os.environ.get(name, "")
    if not value.strip():
        return None
    try:
        n = int(value.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return n


def env_positive_float(name: str, default: float) -> float:
    """The positive number ``name`` (seconds ...), ``default`` unset or empty.

    Raises:
        ValueError: not a number > 0, naming the variable and the value received.
    """
    value = os.environ.get(name, "")
    if not value.strip():
        return default
    try:
        x = float(value.strip())
    except ValueError:
        x = float("nan")
    if not x > 0 or x == float("inf"):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return x


def env_url(name: str) -> str | None:
    """The base URL ``name`` (http, https or file), or None unset or empty.

    Raises:
        ValueError: not such a URL, naming the variable and the value received.
    """
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https", "file") or not rest.strip("/"):
        raise ValueError(f"{name} must be an http://, https:// or file:// URL, got {value!r}")
    return value


def default_backend() -> str:
    return env_choice("KILN_BACKEND", ("cpu", "reference", "cuda"), "cpu")


def jit_enabled() -> bool:
    return env_flag("KILN_JIT", True)


def debug_enabled() -> bool:
    return env_flag("KILN_DEBUG", False)


def profile_enabled() -> bool:
    return env_flag("KILN_PROFILE", False)


def cache_dir() -> str:
    return os.environ.get("KILN_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "kiln")


def device() -> str:
    return env_choice("KILN_DEVICE", ("cpu", "cuda", "auto"), "cpu")


# ---- Keras' keras.config names ------------------------------------------------------------------
# Keras keeps these in keras/src/backend/config.py, utils/io_utils.py, utils/traceback_utils.py,
# dtype_policies/dtype_policy.py and saving/serialization_lib.py; kiln keeps them here, the
# lowest tier, so that every package may read them.
BACKEND_NAME = "kiln"
_STATE: dict = {"epsilon": 1e-7, "interactive_logging": True, "traceback_filtering": True,
                "flash_attention": None, "safe_mode": None, "dtype_policy": None,
                "max_epochs": None, "max_steps_per_epoch": None}


def backend() -> str:
    """The name of the backend: always ``"kiln"`` (kiln's own graph compiler; the device it
    compiles for is :func:`default_backend` / ``KILN_BACKEND``)."""
    return BACKEND_NAME


def set_backend(backend: str) -> None:
    """Keras' switch between JAX, TensorFlow and PyTorch. kiln has one backend, its own
    compiler: ``set_backend("kiln")`` is accepted (and does nothing), any other name raises.

    Raises:
        ValueError: any name but ``"kiln"``, naming it.
    """
    if backend != BACKEND_NAME:
        raise ValueError(f"kiln.config.set_backend: kiln runs on its own compiler only; "
                         f"backend must be {BACKEND_NAME!r}, received {backend!r}. kiln cannot "
                         "switch to Keras' jax/tensorflow/torch/numpy backends (choose the "
                         "device kiln compiles for with KILN_BACKEND=cpu|reference|cuda and "
                         "KILN_DEVICE)")


def epsilon() -> float:
    """The fuzz factor of numeric expressions (1e-7): the clipping of probabilities in the
    cross-entropies and the floor of the denominators in kiln's losses (Keras'
    ``backend.epsilon()``). A graph reads it when it is built (traced)."""
    return _STATE["epsilon"]


def set_epsilon(value: float) -> None:
    """Sets :func:`epsilon` (for graphs traced from now on).

    Raises:
        ValueError: not a finite number in (0, 0.5).
    """
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = float("nan")
    if isinstance(value, bool) or not 0.0 < x < 0.5:
        raise ValueError(f"kiln.config.set_epsilon: value must be a number in (0, 0.5), "
                         f"received {value!r}")
    _STATE["epsilon"] = x


def image_data_format() -> str:
    """The default ``data_format`` of image layers: ``"channels_last"`` unless
    :func:`set_image_data_format` chose ``"channels_first"`` (the spatial layers run it
    between two transposes: kiln/layers/channels_first.py; others refuse it clearly)."""
    return _STATE.get("image_data_format", "channels_last")


def set_image_data_format(data_format: str) -> None:
    """Sets the default ``data_format`` of layers made afterwards, as Keras'.

    Raises:
        ValueError: anything but ``"channels_last"``/``"channels_first"``, naming the value.
    """
    value = str(data_format).lower()
    if value not in ("channels_first", "channels_last"):
        raise ValueError("kiln.config.set_image_data_format: data_format must be one of "
                         f"{{'channels_first', 'channels_last'}}, received {data_format!r}")
    _STATE["image_data_format"] = value


class DTypePolicy:
    """The dtypes a layer computes in and keeps its variables in (Keras'
    ``keras.DTypePolicy``). kiln has no mixed precision: the policies are the float dtypes
    it computes in, ``"float32"`` and ``"float64"`` (compute dtype = variable dtype).

    Args:
        name: ``"float32"``, ``"float64"`` or None (:func:`floatx`).

    Raises:
        ValueError: another name (``"mixed_float16"``, ``"bfloat16"`` ...), naming it.
    """

    def __init__(self, name: str | None = None):
        name = floatx() if name is None else name
        if not isinstance(name, str):
            raise TypeError(f"DTypePolicy: name must be a string such as 'float32', "
                            f"received {name!r} (of type {type(name).__name__})")
        if name not in ("float32", "float64"):
            raise ValueError(f"DTypePolicy: kiln computes in float32 or float64 only (no mixed "
                             f"precision or quantization); received name={name!r}")
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def compute_dtype(self) -> str:
        return self._name

    @property
    def variable_dtype(self) -> str:
        return self._name

    @property
    def quantization_mode(self) -> None:
        return None

    def get_config(self) -> dict:
        return {"name": self._name}

    @classmethod
    def from_config(cls, config: dict) -> DTypePolicy:
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DTypePolicy) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("DTypePolicy", self._name))

    def __repr__(self) -> str:
        return f'<{type(self).__name__} "{self._name}">'


class FloatDTypePolicy(DTypePolicy):
    """Keras' alias of :class:`DTypePolicy` for float policies."""


def dtype_policy() -> DTypePolicy:
    """The global dtype policy (default: ``DTypePolicy(floatx())``)."""
    policy = _STATE["dtype_policy"]
    return policy if policy is not None else DTypePolicy(floatx())


def set_dtype_policy(policy: Any) -> None:
    """Sets the global dtype policy. kiln's layers compute in :func:`floatx`, so the policy
    must name it (``"float32"`` by default; ``"float64"`` after ``set_floatx("float64")``).

    Raises:
        ValueError: a mixed or other policy, or one that differs from ``floatx()``.
    """
    if isinstance(policy, str):
        policy = DTypePolicy(policy)
    if not isinstance(policy, DTypePolicy):
        raise ValueError("kiln.config.set_dtype_policy: expected the name of a policy (such "
                         f"as 'float32') or a DTypePolicy, received policy={policy!r} (of "
                         f"type {type(policy).__name__})")
    if policy.name != floatx():
        raise ValueError(f"kiln.config.set_dtype_policy: kiln's layers compute in floatx() "
                         f"({floatx()!r}); received policy {policy.name!r}. Call "
                         f"kiln.config.set_floatx({policy.name!r}) to compute in it")
    _STATE["dtype_policy"] = policy


def enable_interactive_logging() -> None:
    """Progress bars and epoch lines go to stdout (the default)."""
    _STATE["interactive_logging"] = True


def disable_interactive_logging() -> None:
    """``fit``'s progress output (and kiln.utils.Progbar's) goes to the ``"kiln"`` logger
    (``logging``, level INFO) instead of stdout, as Keras sends it to absl logging."""
    _STATE["interactive_logging"] = False


def is_interactive_logging_enabled() -> bool:
    """Whether progress output goes to stdout (True) or to the ``"kiln"`` logger."""
    return bool(_STATE["interactive_logging"])


def enable_traceback_filtering() -> None:
    """Keras' switch to hide its internal frames from tracebacks. kiln does not edit
    tracebacks (its errors name the layer, op and shapes instead): a recorded switch only."""
    _STATE["traceback_filtering"] = True


def disable_traceback_filtering() -> None:
    """See :func:`enable_traceback_filtering` (a recorded switch only)."""
    _STATE["traceback_filtering"] = False


def is_traceback_filtering_enabled() -> bool:
    """The switch of :func:`enable_traceback_filtering` (True by default)."""
    return bool(_STATE["traceback_filtering"])


def enable_flash_attention() -> None:
    """Keras' flash-attention switch. kiln's attention is one fused graph its compiler
    schedules itself; the switch is recorded (``is_flash_attention_enabled()`` -> None, "when
    available", as in Keras) and changes nothing."""
    _STATE["flash_attention"] = None


def disable_flash_attention() -> None:
    """See :func:`enable_flash_attention`: records False, changes nothing."""
    _STATE["flash_attention"] = False


def is_flash_attention_enabled() -> bool | None:
    """None (the default: "when available", as Keras) or False after
    :func:`disable_flash_attention`."""
    return _STATE["flash_attention"]


def is_nnx_enabled() -> bool:
    """Keras' Flax NNX switch (JAX backend only): always False in kiln."""
    return False


def enable_unsafe_deserialization() -> None:
    """Turns safe mode off for every later load, as Keras does: every load then behaves as
    with ``safe_mode=False``. kiln never runs Python code stored in a file, so a ``Lambda``
    layer still does not load from a file (the error then says so, instead of naming
    safe_mode); rebuild such a model in code and use ``load_weights``."""
    _STATE["safe_mode"] = False


def in_safe_mode() -> bool | None:
    """None (loads follow their ``safe_mode`` argument) or False after
    :func:`enable_unsafe_deserialization`."""
    return _STATE["safe_mode"]


def _env_cap(*names: str) -> int | None:
    for name in names:
        value = env_positive_int(name)
        if value is not None:
            return value
    return None


def _check_cap(where: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"kiln.config.{where}: expected a positive integer or None, "
                         f"received {value!r}")
    return int(value)


def set_max_epochs(max_epochs: int | None) -> None:
    """Caps the epochs of every ``fit`` (for quick debugging runs; Keras' rule): a call
    asking for more epochs runs ``max_epochs`` and warns "Limiting epochs to N". None lifts
    the cap. The environment variable ``KILN_MAX_EPOCHS`` (or ``KERAS_MAX_EPOCHS``) sets it
    too."""
    _STATE["max_epochs"] = _check_cap("set_max_epochs", max_epochs)


def set_max_steps_per_epoch(max_steps_per_epoch: int | None) -> None:
    """Caps the steps of every epoch of ``fit`` (Keras' rule: ``steps_per_epoch`` becomes
    ``max_steps_per_epoch`` when unset or larger, with a warning "Limiting steps_per_epoch to
    N"; an epoch with fewer batches ends with its data). None lifts the cap;
    ``KILN_MAX_STEPS_PER_EPOCH`` (or ``KERAS_MAX_STEPS_PER_EPOCH``) sets it too."""
    _STATE["max_steps_per_epoch"] = _check_cap("set_max_steps_per_epoch", max_steps_per_epoch)


def max_epochs() -> int | None:
    """The cap of :func:`set_max_epochs` (or the environment's), or None."""
    if _STATE["max_epochs"] is not None:
        return _STATE["max_epochs"]
    return _env_cap("KILN_MAX_EPOCHS", "KERAS_MAX_EPOCHS")


def max_steps_per_epoch() -> int | None:
    """The cap of :func:`set_max_steps_per_epoch` (or the environment's), or None."""
    if _STATE["max_steps_per_epoch"] is not None:
        return _STATE["max_steps_per_epoch"]
    return _env_cap("KILN_MAX_STEPS_PER_EPOCH", "KERAS_MAX_STEPS_PER_EPOCH")


def loop_limits(steps: int | None) -> tuple[int | None, int | None]:
    """``(steps, step_cap)`` of an ``evaluate`` / ``predict`` call (and fit's validation)
    under :func:`max_steps_per_epoch`, as Keras' epoch iterator caps every loop: ``steps``
    above the cap becomes the cap; unset, ``step_cap`` ends the pass after that many."""
    cap = max_steps_per_epoch()
    if not cap or (steps and steps <= cap):
        return steps, None
    import warnings

    warnings.warn(f"Limiting steps_per_epoch to {cap}", stacklevel=3)
    return (cap, None) if steps else (None, cap)


def fit_limits(epochs: int, steps_per_epoch: int | None
               ) -> tuple[int, int | None, int | None]:
    """``(epochs, steps_per_epoch, step_cap)`` of a ``fit`` call under the caps, warning as
    Keras does when a cap applies. A ``steps_per_epoch`` above the cap becomes the cap; when
    it is unset, ``step_cap`` ends each epoch after at most that many steps (an epoch of
    fewer batches ends with its data, as in Keras, instead of cycling it)."""
    import warnings

    cap = max_epochs()
    if cap and cap < epochs:
        warnings.warn(f"Limiting epochs to {cap}", stacklevel=3)
        epochs = cap
    cap = max_steps_per_epoch()
    step_cap = None
    if cap and (not steps_per_epoch or cap < steps_per_epoch):
        warnings.warn(f"Limiting steps_per_epoch to {cap}", stacklevel=3)
        if steps_per_epoch:
            steps_per_epoch = cap
        else:
            step_cap = cap
    return epochs, steps_per_epoch, step_cap
