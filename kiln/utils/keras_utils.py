"""Small ``keras.utils`` names: :class:`Config`, :func:`clear_session`,
:func:`get_source_inputs`, :func:`is_keras_tensor`, :func:`pack_x_y_sample_weight` /
:func:`unpack_x_y_sample_weight`, :func:`standardize_dtype` and the interactive-logging
switch (:func:`enable_interactive_logging` ...), which :class:`~kiln.utils.progbar.Progbar`
and :func:`print_msg` follow.
"""

from __future__ import annotations

import copy
import difflib
import gc
import json
import logging
import sys
from typing import Any

import numpy as np

import kiln.config

# kiln.core, kiln.layers and kiln.models are imported inside the functions: `import
# kiln.utils` stays light.

__all__ = ["Config", "clear_session", "deserialize_keras_object", "get_source_inputs",
           "is_keras_tensor",
           "pack_x_y_sample_weight", "unpack_x_y_sample_weight", "standardize_dtype",
           "enable_interactive_logging", "disable_interactive_logging",
           "is_interactive_logging_enabled", "print_msg"]


class Config:
    """A dict of named values with attribute access, freezing and JSON (Keras'
    ``keras.utils.Config``).

    Example:
        >>> config = Config(learning_rate=0.1)
        >>> config.seed = 123
        >>> config["learning_rate"], config.seed
        (0.1, 123)
        >>> config.freeze()
        >>> config.seed = 1   # ValueError: the config is frozen
    """

    _OWN = ("_config", "_frozen")

    def __init__(self, **kwargs: Any):
        object.__setattr__(self, "_config", dict(kwargs))
        object.__setattr__(self, "_frozen", False)

    @property
    def frozen(self) -> bool:
        """Whether :meth:`freeze` was called (and not undone by :meth:`unfreeze`)."""
        return self._frozen

    def freeze(self) -> None:
        """Refuses every later change (setting, updating, popping, deleting)."""
        object.__setattr__(self, "_frozen", True)

    def unfreeze(self) -> None:
        object.__setattr__(self, "_frozen", False)

    def _check_mutable(self) -> None:
        if self._frozen:
            raise ValueError("Cannot mutate attribute(s) because the config is frozen.")

    def as_dict(self) -> dict:
        return copy.copy(self._config)

    def to_json(self) -> str:
        return json.dumps(self._config)

    def keys(self) -> Any:
        return self._config.keys()

    def values(self) -> Any:
        return self._config.values()

    def items(self) -> Any:
        return self._config.items()

    def get(self, keyname: str, value: Any = None) -> Any:
        return self._config.get(keyname, value)

    def pop(self, *args: Any) -> Any:
        self._check_mutable()
        return self._config.pop(*args)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._check_mutable()
        self._config.update(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._OWN or hasattr(type(self), name):
            object.__setattr__(self, name, value)
            return
        self._check_mutable()
        self._config[name] = value

    def __getattr__(self, name: str) -> Any:
        config = self.__dict__.get("_config", {})
        if name in config:
            return config[name]
        msg = f"Unknown attribute: '{name}'."
        close = difflib.get_close_matches(name, list(config), n=1, cutoff=0.7)
        if close:
            msg += f" Did you mean '{close[0]}'?"
        raise AttributeError(msg)

    def __setitem__(self, key: str, item: Any) -> None:
        self._check_mutable()
        self._config[key] = item

    def __getitem__(self, key: str) -> Any:
        return self._config[key]

    def __delitem__(self, key: str) -> None:
        self._check_mutable()
        del self._config[key]

    def __contains__(self, item: Any) -> bool:
        return item in self._config

    def __iter__(self) -> Any:
        return iter(sorted(self._config))

    def __len__(self) -> int:
        return len(self._config)

    def __repr__(self) -> str:
        return f"<Config {self._config}>"


def clear_session(free_memory: bool = True) -> None:
    """Resets kiln's global naming state, as Keras' ``clear_session``: the next ``Dense``
    is named ``"dense"`` again. With ``free_memory``, runs the garbage collector too."""
    from kiln.layers.naming import reset_names

    reset_names()
    if free_memory:
        gc.collect()


def is_keras_tensor(x: Any) -> bool:
    """Whether ``x`` is a symbolic kiln tensor (what ``kiln.Input`` and layer calls on it
    return), not a concrete array."""
    from kiln.core import Node

    return isinstance(x, Node)


def get_source_inputs(tensor: Any) -> list:
    """The input placeholders (``kiln.Input`` tensors) that ``tensor`` is computed from, in
    the order they are first reached.

    Raises:
        TypeError: ``tensor`` is not a symbolic tensor.
    """
    from kiln.core import Node

    if not isinstance(tensor, Node):
        raise TypeError("get_source_inputs: expected a symbolic tensor (from kiln.Input or a "
                        f"layer call), received {type(tensor).__name__} {tensor!r}")
    found: list = []
    seen: set[int] = set()
    stack = [tensor]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op == "placeholder":
            found.append(node)
            continue
        stack.extend(reversed([i for i in node.inputs if isinstance(i, Node)]))
    return found


def pack_x_y_sample_weight(x: Any, y: Any = None, sample_weight: Any = None) -> Any:
    """Keras' batch tuple: ``x`` alone (``(x,)`` when ``x`` is itself a tuple or list),
    ``(x, y)`` or ``(x, y, sample_weight)``."""
    if y is None:
        return x if not isinstance(x, tuple | list) else (x,)
    if sample_weight is None:
        return (x, y)
    return (x, y, sample_weight)


def unpack_x_y_sample_weight(data: Any) -> tuple:
    """``(x, y, sample_weight)`` of a batch ``x``, ``(x,)``, ``(x, y)`` or
    ``(x, y, sample_weight)`` (missing entries None)."""
    from kiln.models.custom_steps import unpack_x_y_sample_weight as unpack

    return unpack(data)


_ALLOWED_DTYPES = ("float16", "float32", "float64", "uint8", "uint16", "uint32", "uint64",
                   "int8", "int16", "int32", "int64", "bfloat16", "bool", "string",
                   "float8_e4m3fn", "float8_e5m2", "complex64", "complex128")
_PYTHON_DTYPES = {bool: "bool", int: "int32", float: "float32", str: "string",
                  "int": "int32", complex: "complex64"}


def standardize_dtype(dtype: Any) -> str:
    """The canonical name of ``dtype`` (a string, NumPy dtype or type, Python type, or a
    framework dtype object): ``None`` -> ``floatx()``, ``int`` -> ``"int32"``, ``float`` ->
    ``"float32"``, ``np.float64`` -> ``"float64"`` ...

    Raises:
        ValueError: ``Invalid dtype: ...`` for anything else.
    """
    if dtype is None:
        return kiln.config.floatx()
    try:
        dtype = _PYTHON_DTYPES.get(dtype, dtype)
    except TypeError:  # unhashable
        pass
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        dtype = np.dtype(dtype)
    if hasattr(dtype, "name"):
        dtype = dtype.name
    elif hasattr(dtype, "__name__"):
        dtype = dtype.__name__
    elif "torch" in str(dtype) or "jax.numpy" in str(dtype):
        dtype = str(dtype).split(".")[-1]
    if dtype not in _ALLOWED_DTYPES:
        raise ValueError(f"Invalid dtype: {dtype}")
    return dtype


# ---- interactive logging ------------------------------------------------------------------------
_interactive = [True]
_log = logging.getLogger("kiln")


def _config_fn(name: str) -> Any:
    fn = getattr(kiln.config, name, None)  # kiln.config's switch, where it has one
    return fn if callable(fn) else None


def enable_interactive_logging() -> None:
    """Progress bars and messages go to stdout (the default)."""
    fn = _config_fn("enable_interactive_logging")
    if fn is not None:
        fn()
    _interactive[0] = True


def disable_interactive_logging() -> None:
    """Progress bars and messages go to the ``"kiln"`` logger (INFO) instead of stdout, as
    Keras sends them to absl logging."""
    fn = _config_fn("disable_interactive_logging")
    if fn is not None:
        fn()
    _interactive[0] = False


def is_interactive_logging_enabled() -> bool:
    """Whether messages go to stdout (see :func:`disable_interactive_logging`)."""
    fn = _config_fn("is_interactive_logging_enabled")
    if fn is not None:
        return bool(fn())
    return _interactive[0]


def print_msg(message: str, line_break: bool = True) -> None:
    """Writes ``message`` to stdout, or to the ``"kiln"`` logger when interactive logging is
    disabled."""
    if is_interactive_logging_enabled():
        sys.stdout.write(message + ("\n" if line_break else ""))
        sys.stdout.flush()
    else:
        _log.info(message)


def deserialize_keras_object(config: Any, custom_objects: Any = None, safe_mode: bool = True,
                             **kwargs: Any) -> Any:
    """:func:`kiln.saving.deserialize_keras_object`, with kiln's model classes registered
    first (so a serialized ``Sequential``/``Functional`` model rebuilds too)."""
    import kiln.models  # noqa: F401  (registers Sequential, Functional, Model)
    from kiln.saving.keras_objects import deserialize_keras_object as deserialize

    return deserialize(config, custom_objects, safe_mode, **kwargs)
