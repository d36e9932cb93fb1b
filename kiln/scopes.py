"""Keras' top-level helpers that are not layers or models (``keras.device``,
``keras.name_scope``, ``keras.remat``, ``keras.RematScope``, ``keras.StatelessScope``,
``keras.SymbolicScope``, ``keras.Operation``, ``keras.Quantizer``, ``keras.version``), as
far as they mean something for kiln's static-graph compiler:

* :func:`device` selects the device kiln compiles for inside a ``with`` block.
* :class:`name_scope` keeps Keras' stack of scope names (:func:`current_path`); kiln's
  weight names do not use it.
* :func:`remat` and :class:`RematScope` change no value; kiln's compiler rematerializes by
  itself under ``compile(memory_budget=...)``.
* :class:`SymbolicScope` is a no-op: kiln's ops are symbolic exactly when given tensors.
* :class:`Operation` is a base class whose ``call`` is built from ``kiln.ops`` (so it works
  on arrays and on symbolic tensors); :class:`Quantizer` is Keras' abstract base class.
* :class:`StatelessScope` raises: kiln's variables live in compiled buffers, and a
  computation with other values is a :func:`kiln.function` (or a custom step).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

__all__ = ["device", "name_scope", "current_path", "remat", "RematScope", "StatelessScope",
           "SymbolicScope", "Operation", "Quantizer", "version"]


def version() -> str:
    """kiln's version (Keras' ``keras.version()`` gives Keras')."""
    import kiln

    return str(kiln.__version__)


# ---- device --------------------------------------------------------------------------------------
class _DeviceScope:
    def __init__(self, device_name: str, kiln_device: str):
        self.device_name = device_name
        self.kiln_device = kiln_device
        self._saved: list[str | None] = []

    def __enter__(self) -> _DeviceScope:
        self._saved.append(os.environ.get("KILN_DEVICE"))
        os.environ["KILN_DEVICE"] = self.kiln_device
        return self

    def __exit__(self, *exc: Any) -> None:
        saved = self._saved.pop()
        if saved is None:
            os.environ.pop("KILN_DEVICE", None)
        else:
            os.environ["KILN_DEVICE"] = saved

    def __repr__(self) -> str:
        return f"device({self.device_name!r})"


def device(device_name: str) -> _DeviceScope:
    """A ``with`` block in which kiln compiles for ``device_name``: ``"cpu"``/``"cpu:0"``, or
    ``"gpu"``/``"gpu:0"``/``"cuda"`` (kiln's CUDA backend). It sets ``kiln.config.device()``
    (``KILN_DEVICE``) for models compiled and eager calls made inside it.

    Raises:
        ValueError: another device name.
    """
    if not isinstance(device_name, str):
        raise ValueError(f"kiln.device: device_name must be a string such as 'cpu:0' or "
                         f"'gpu:0', received {device_name!r}")
    name = device_name.strip().lower().removeprefix("/device:").removeprefix("/")
    kind, _, index = name.partition(":")
    target = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda"}.get(kind)
    if target is None or (index and not index.isdigit()):
        raise ValueError(f"kiln.device: unknown device {device_name!r}; kiln compiles for "
                         "'cpu' or 'gpu' (CUDA), optionally with an index ('gpu:0')")
    return _DeviceScope(device_name, target)


# ---- names ---------------------------------------------------------------------------------------
_NAME_STACK: list[name_scope] = []


class name_scope:  # noqa: N801 - Keras' name
    """Keras' name scope: ``with kiln.name_scope("block"):`` pushes ``"block"`` on the stack
    that :func:`current_path` joins (``"outer/block"``). kiln names weights by layer, so the
    scope changes no weight name.

    Args:
        name: the scope's name (a non-empty string).
        caller: the object opening it; a scope with the caller and name of the enclosing one
            is not pushed again when ``deduplicate``.
        deduplicate: see ``caller``.
        override_parent: a path that replaces the enclosing scopes' path.
    """

    def __init__(self, name: str, caller: Any = None, deduplicate: bool = True,
                 override_parent: str | None = None):
        if not isinstance(name, str) or not name:
            raise ValueError(f"name_scope: name must be a non-empty string, received {name!r}")
        self.name = name
        self.caller = caller
        self.deduplicate = deduplicate
        self.override_parent = override_parent
        self._pushed = False

    def __enter__(self) -> name_scope:
        if self.deduplicate and _NAME_STACK:
            top = _NAME_STACK[-1]
            if self.caller is not None and self.caller is top.caller and self.name == top.name:
                return self
        _NAME_STACK.append(self)
        self._pushed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pushed and _NAME_STACK:
            _NAME_STACK.pop()
            self._pushed = False


def current_path() -> str:
    """The ``/``-joined names of the open :class:`name_scope` blocks (``""`` outside)."""
    parts: list[str] = []
    for scope in _NAME_STACK:
        if scope.override_parent is not None:
            parts = [p for p in scope.override_parent.split("/") if p]
        parts.append(scope.name)
    return "/".join(parts)


# ---- rematerialization and scopes ---------------------------------------------------------------
def remat(f: Callable) -> Callable:
    """Keras' gradient checkpointing of ``f``. The values are ``f``'s own; kiln's compiler
    decides what to recompute itself (its rematerialization pass, under
    ``model.compile(memory_budget=...)``), so the wrapper only calls ``f``."""
    if not callable(f):
        raise TypeError(f"kiln.remat: expected a callable, received {f!r}")

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return f(*args, **kwargs)

    return wrapped


_REMAT_MODES = (None, "full", "activations", "larger_than", "list_of_layers")


class RematScope:
    """Keras' rematerialization scope. It checks its arguments as Keras does and changes
    nothing: kiln's compiler rematerializes under ``model.compile(memory_budget=...)``.

    Raises:
        ValueError: an unknown ``mode``, or ``"list_of_layers"`` without ``layer_names``.
    """

    def __init__(self, mode: str | None = "full", output_size_threshold: int = 1024,
                 layer_names: list[str] | None = None):
        if mode not in _REMAT_MODES:
            raise ValueError(f"RematScope: mode must be one of {_REMAT_MODES}, received "
                             f"mode={mode!r}")
        if mode == "list_of_layers" and not layer_names:
            raise ValueError("RematScope: mode='list_of_layers' needs layer_names")
        self.mode = mode
        self.output_size_threshold = output_size_threshold
        self.layer_names = list(layer_names or [])

    def __enter__(self) -> RematScope:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class SymbolicScope:
    """Keras' marker of symbolic tracing; a no-op in kiln, whose ops build graph nodes
    exactly when they are given symbolic tensors."""

    def __init__(self, *args: Any, **kwargs: Any):
        if args or kwargs:
            raise TypeError(f"SymbolicScope takes no arguments, received {args} {kwargs}")

    def __enter__(self) -> SymbolicScope:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class StatelessScope:
    """Keras' scope that reads variables from a mapping and collects their updates instead
    of applying them. Not supported: constructing one raises NotImplementedError."""

    def __init__(self, state_mapping: Any = None, collect_losses: bool = False,
                 initialize_variables: bool = True):
        raise NotImplementedError(
            "kiln.StatelessScope is not supported: kiln's variables live in compiled buffers "
            "that a scope cannot swap. Build the computation as a graph instead: "
            "kiln.function(inputs, outputs) on placeholders (with the values as inputs), or "
            "a custom train_step")


# ---- base classes ---------------------------------------------------------------------------
class Operation:
    """Keras' base class of operations: subclass it and write ``call`` with ``kiln.ops``;
    calling the operation calls ``call``, which works eagerly on arrays and builds graph
    nodes on symbolic tensors (as every kiln op).

    Example:
        >>> class Scale(kiln.Operation):
        ...     def call(self, x):
        ...         return kiln.ops.multiply(x, 2.0)
        >>> Scale()(np.ones(3))
        array([2., 2., 2.], dtype=float32)
    """

    def __init__(self, name: str | None = None):
        if name is None:
            from kiln.layers.naming import snake_case, unique_name

            name = unique_name(snake_case(type(self).__name__))
        if not isinstance(name, str) or "/" in name:
            raise ValueError(f"{type(self).__name__}: name must be a string without '/', "
                             f"received {name!r}")
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)

    def call(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}: an Operation subclass must "
                                  "implement call()")

    def compute_output_spec(self, *args: Any, **kwargs: Any) -> Any:
        """The symbolic result of ``call`` (kiln traces ``call`` on the tensors)."""
        return self.call(*args, **kwargs)

    def get_config(self) -> dict:
        return {"name": self.name}

    @classmethod
    def from_config(cls, config: dict) -> Operation:
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}>"


class Quantizer:
    """Keras' abstract base class of quantizers (``__call__`` maps a tensor to its quantized
    values). kiln's layers have no quantized modes; a subclass is a plain callable."""

    def __init__(self, output_dtype: str = "int8"):
        self.output_dtype = output_dtype

    def __call__(self, x: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}: a Quantizer subclass must "
                                  "implement __call__")

    @classmethod
    def from_config(cls, config: dict) -> Quantizer:
        return cls(**config)

    def get_config(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_config()")
