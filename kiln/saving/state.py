"""Training state beyond the weights: optimizer variables, learning rate, RNG streams,
epoch/step counters and callback states. Everything is checked before it is applied (the
checks of a checkpoint's training state are in :mod:`kiln.saving.validate`)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from kiln.saving.h5util import (
    FileFormatError,
    attr,
    json_attr,
    list_attr,
    set_json_attr,
    set_list_attr,
    stored,
)
from kiln.saving.weights import _fmt_shape, read_pairs

OPTIMIZER_GROUP = "optimizer"


# ---- optimizer ---------------------------------------------------------------------------------
def get_optimizer(model: Any) -> Any:
    return getattr(model, "optimizer", None)


def ensure_optimizer_built(model: Any, opt: Any) -> None:
    """Creates the optimizer's slots for the model's trainable weights (in the order the
    trainer uses), so that saved slots have somewhere to go (Keras issue #19389)."""
    if opt is None or getattr(opt, "built", True):
        return
    hook = getattr(model, "_build_optimizer_if_ready", None)
    if callable(hook):
        hook()
    if not getattr(opt, "built", True):
        opt.build(list(model.trainable_weights))


def lr_is_fixed(opt: Any) -> bool:
    """True when the learning rate is a number (not a schedule or a callable)."""
    lr = getattr(opt, "_learning_rate", None)
    return lr is None or isinstance(lr, int | float | np.floating | np.integer)


def current_lr(opt: Any) -> float | None:
    var = getattr(opt, "learning_rate_variable", None)
    if var is not None:
        return float(np.asarray(var.value))
    try:
        return float(opt.learning_rate)
    except (TypeError, ValueError, AttributeError):
        return None


def write_optimizer(group: Any, opt: Any) -> None:
    """kiln's optimizer group: ``0..n-1`` = ``opt.variables`` (iterations, then the slots in
    creation order), attrs ``class_name``, ``config``, ``variable_names``,
    ``learning_rate`` (the current value) and ``learning_rate_fixed``."""
    from kiln.saving.serialization import serialize

    variables = list(opt.variables)
    group.attrs["class_name"] = type(opt).__name__
    try:
        set_json_attr(group, "config", serialize(opt))
    except (TypeError, ValueError) as exc:
        warnings.warn(f"save: the optimizer config could not be serialized ({exc}); only "
                      "its state is saved", stacklevel=3)
    set_list_attr(group, "variable_names", [str(getattr(v, "name", i)) for i, v in
                                            enumerate(variables)])
    lr = current_lr(opt)
    if lr is not None:
        group.attrs["learning_rate"] = np.float64(lr)
    group.attrs["learning_rate_fixed"] = bool(lr_is_fixed(opt))
    group.attrs["built"] = bool(getattr(opt, "built", True))
    for i, v in enumerate(variables):
        group.create_dataset(str(i), data=np.asarray(v.value))


def read_optimizer(group: Any, source: str = "the file") -> dict:
    """kiln's optimizer group, its datasets not read yet (``arrays`` are
    :class:`~kiln.saving.h5util.Stored`; :func:`plan_optimizer` checks them first)."""
    names = list_attr(group, "variable_names") or []
    arrays = []
    for i in range(len(names)):
        if str(i) not in group:
            raise FileFormatError(f"{source}: optimizer variable {i} ({names[i]!r}) is missing "
                                  "from the file (truncated or edited file?)")
        arrays.append(stored(group[str(i)], f"optimizer variable {i}"))
    return {"names": names, "arrays": arrays,
            "learning_rate": scalar_attr(group, "learning_rate", source, "rate"),
            "learning_rate_fixed": scalar_attr(group, "learning_rate_fixed", source, "bool",
                                               True),
            "built": scalar_attr(group, "built", source, "bool", True),
            "class_name": attr(group, "class_name"),
            "config": json_attr(group, "config", source=source)}


def scalar_attr(obj: Any, name: str, source: str, kind: str, default: Any = None) -> Any:
    """A scalar attribute checked for its kind: ``"bool"`` or ``"rate"`` (a finite,
    non-negative number); anything else is a FileFormatError naming the attribute."""
    if name not in obj.attrs:
        return default
    value = obj.attrs[name]
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if kind == "bool" and isinstance(value, bool | np.bool_ | int | np.integer) and \
            int(value) in (0, 1):
        return bool(value)
    if kind == "rate" and isinstance(value, int | float | np.integer | np.floating) and \
            not isinstance(value, bool | np.bool_) and np.isfinite(value) and value >= 0:
        return float(value)
    expected = "True or False" if kind == "bool" else "a finite, non-negative number"
    raise FileFormatError(f"{source}: attribute {name!r} of {obj.name!r} should be "
                          f"{expected}, received {value!r}")


def _check_stored(var: Any, arr: Any, name: Any, source: str, what: str) -> str | None:
    if tuple(arr.shape) != tuple(var.shape):
        return (f"{what}: optimizer variable {getattr(var, 'name', '?')!r}: the model expects "
                f"shape {_fmt_shape(tuple(var.shape))}, {source} has shape "
                f"{_fmt_shape(tuple(arr.shape))} (saved as {name!r})")
    if arr.dtype.kind not in "biuf":
        return (f"{what}: optimizer variable {getattr(var, 'name', '?')!r}: {source} stores "
                f"dtype {arr.dtype} (saved as {name!r}), expected a numeric array")
    return None


def plan_optimizer(model: Any, saved: dict, source: str, what: str = "load",
                   strict: bool = True) -> tuple[list[tuple[Any, np.ndarray]], float | None]:
    """Checks saved optimizer variables (declared shapes and dtypes) against the model's
    optimizer (building it first if needed), then reads them; returns ``(Variable, array)``
    pairs plus the learning rate to restore."""
    opt = get_optimizer(model)
    if opt is None:
        return [], None
    lr = saved["learning_rate"] if saved["learning_rate_fixed"] else None
    if not saved["built"] and len(saved["arrays"]) <= 1:
        # The optimizer had not been built when saved (no step taken): iterations only.
        if not saved["arrays"]:
            return [], lr
        problem = _check_stored(opt.iterations, saved["arrays"][0], "iterations", source, what)
        if problem:
            raise ValueError(problem)
        return read_pairs([(opt.iterations, saved["arrays"][0])], source, what), lr
    ensure_optimizer_built(model, opt)
    variables = list(opt.variables)
    arrays = saved["arrays"]
    problem = None
    if len(arrays) != len(variables):
        problem = (f"{what}: the optimizer {type(opt).__name__} has {len(variables)} variables "
                   f"but {source} has {len(arrays)} ({saved['class_name']}); different "
                   "optimizer or different trainable weights")
    else:
        for var, arr, name in zip(variables, arrays, saved["names"]):
            problem = _check_stored(var, arr, name, source, what)
            if problem:
                break
    if problem:
        if strict:
            raise ValueError(problem)
        warnings.warn(problem + "; the optimizer starts fresh", stacklevel=3)
        return [], None
    lr = lr if lr_is_fixed(opt) else None
    return read_pairs(list(zip(variables, arrays)), source, what), lr


def keras_optimizer_arrays(opt: Any) -> list[np.ndarray]:
    """The optimizer's variables in Keras 3's order: iteration, learning_rate (absent for a
    schedule), then the slots."""
    variables = list(opt.variables)
    out = [np.asarray(variables[0].value)]
    if lr_is_fixed(opt):
        out.append(np.asarray(current_lr(opt), dtype=np.float32))
    return out + [np.asarray(v.value) for v in variables[1:]]


def plan_keras_optimizer(model: Any, arrays: list[Any], source: str,
                         strict: bool) -> tuple[list[tuple[Any, np.ndarray]], float | None]:
    """Maps Keras 3 optimizer variables (``optimizer/vars``, not read yet) onto the model's
    optimizer: counts, declared shapes and dtypes are checked before anything is read."""
    opt = get_optimizer(model)
    if opt is None or not arrays:
        return [], None
    ensure_optimizer_built(model, opt)
    variables = list(opt.variables)
    fixed = lr_is_fixed(opt)
    expected = len(variables) + (1 if fixed else 0)
    msg = None
    if len(arrays) != expected:
        msg = (f"load: the optimizer {type(opt).__name__} has {expected} variables in Keras' "
               f"layout, {source} has {len(arrays)}")
    rest = arrays[2:] if fixed else arrays[1:]
    pairs = [(variables[0], arrays[0])] + list(zip(variables[1:], rest))
    if msg is None and fixed and (tuple(arrays[1].shape) not in ((), (1,)) or
                                  arrays[1].dtype.kind not in "iuf"):
        msg = (f"load: {source}: the learning rate (optimizer variable 1) should be a number, "
               f"found shape {_fmt_shape(tuple(arrays[1].shape))} dtype {arrays[1].dtype}")
    for var, arr in pairs if msg is None else []:
        msg = _check_stored(var, arr, getattr(arr, "name", "?"), source, "load")
        if msg:
            break
    if msg:
        if strict:
            raise ValueError(msg)
        warnings.warn(msg + "; the optimizer starts fresh", stacklevel=3)
        return [], None
    lr = None
    if fixed:
        lr = float(np.ravel(arrays[1].read())[0])
        if not np.isfinite(lr) or lr < 0:
            raise FileFormatError(f"load: {source}: the learning rate is {lr}; expected a "
                                  "finite, non-negative number")
    return read_pairs(pairs, source, "load"), lr


def set_lr(model: Any, lr: float | None) -> None:
    opt = get_optimizer(model)
    if opt is None or lr is None or not lr_is_fixed(opt):
        return
    var = getattr(opt, "learning_rate_variable", None)
    try:
        opt.learning_rate = float(lr)
    except (TypeError, AttributeError):
        if var is not None:
            var.assign(np.float32(lr))
        return
    if var is not None:  # keep the exact float32 value that was saved
        var.assign(np.asarray(lr, dtype=var.dtype))


def refresh_scheduled_lr(model: Any) -> None:
    """After ``iterations`` is restored, a schedule's current value follows from it."""
    opt = get_optimizer(model)
    if opt is not None and not lr_is_fixed(opt) and hasattr(opt, "before_step"):
        opt.before_step()


# ---- RNG ----------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    if hasattr(value, "value") and hasattr(value, "assign"):  # a Variable
        return np.asarray(value.value).tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def get_rng_state(model: Any) -> dict:
    """The model's dropout stream (``_rng_seed``, ``_rng_counter``) and kiln's global NumPy
    generator (initializers, shuffling)."""
    from kiln import random_state

    out: dict[str, Any] = {}
    for key in ("_rng_seed", "_rng_counter"):
        if hasattr(model, key):
            out[key.lstrip("_")] = _plain(getattr(model, key))
    gen = random_state._state.get("rng")
    if gen is not None:
        out["numpy_generator"] = gen.bit_generator.state
    out["global_seed"] = random_state._state.get("seed")
    return out


def set_rng_state(model: Any, state: dict, include_global: bool = True) -> None:
    """Applies an RNG state checked by :func:`check_rng_state` (so nothing here can fail)."""
    from kiln import random_state

    for key in ("rng_seed", "rng_counter"):
        if key in state and state[key] is not None and hasattr(model, "_" + key):
            current = getattr(model, "_" + key)
            if hasattr(current, "assign"):
                current.assign(np.asarray(state[key]))
            elif isinstance(current, np.ndarray):
                current[...] = np.asarray(state[key], dtype=current.dtype)
            else:
                setattr(model, "_" + key, int(state[key]))
    if include_global and state.get("numpy_generator"):
        set_generator_state(state["numpy_generator"])
        if state.get("global_seed") is not None:
            random_state._state["seed"] = int(state["global_seed"])


#: The NumPy bit generators a file may name. A generator state names its class; kiln builds
#: only these (never whatever ``numpy.random`` attribute a file names).
BIT_GENERATORS: dict[str, Any] = {
    "PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM, "MT19937": np.random.MT19937,
    "Philox": np.random.Philox, "SFC64": np.random.SFC64}


def check_generator_state(state: Any, source: str, field: str) -> None:
    """Refuses a NumPy generator state unless it names one of :data:`BIT_GENERATORS` and a
    fresh generator of that class accepts it."""
    if not isinstance(state, dict):
        raise FileFormatError(f"{source}: {field} should be a NumPy generator state (a dict), "
                              f"received {_short(state)}")
    name = state.get("bit_generator")
    cls = BIT_GENERATORS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise FileFormatError(f"{source}: {field} names the bit generator {_short(name)}; "
                              f"kiln restores only {sorted(BIT_GENERATORS)}")
    try:
        cls().state = state
    except (TypeError, ValueError, KeyError, OverflowError, AttributeError, IndexError) as exc:
        raise FileFormatError(f"{source}: {field} is not a valid {name} state ({exc})") \
            from exc


def set_generator_state(state: dict) -> None:
    """Makes kiln's global generator continue from ``state`` (checked by
    :func:`check_generator_state`), replacing it when its class differs."""
    from kiln import random_state

    cls = BIT_GENERATORS[state["bit_generator"]]
    gen = random_state._state.get("rng")
    if gen is None or type(gen.bit_generator) is not cls:
        gen = np.random.Generator(cls())
        random_state._state["rng"] = gen
    gen.bit_generator.state = state


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def check_int(value: Any, source: str, field: str, low: int = 0, high: int = 2**63 - 1,
              none: bool = False) -> None:
    """Refuses anything but an integer (not a bool, not a float) in ``[low, high]``."""
    if value is None and none:
        return
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or \
            not low <= int(value) <= high:
        raise FileFormatError(f"{source}: {field} should be an integer in [{low}, {high}]"
                              f"{' or null' if none else ''}, received {_short(value)}")


def check_rng_state(state: Any, source: str) -> None:
    """Checks a saved RNG state (``{"rng_seed", "rng_counter", "numpy_generator",
    "global_seed"}``) completely, so that :func:`set_rng_state` cannot fail and the next
    ``fit`` gets a valid dropout key."""
    if not isinstance(state, dict):
        raise FileFormatError(f"{source}: the RNG state should be a dict, received "
                              f"{_short(state)}")
    check_int(state.get("rng_seed"), source, "rng.rng_seed", -2**63, 2**63 - 1, none=True)
    check_int(state.get("rng_counter"), source, "rng.rng_counter", none=True)
    check_int(state.get("global_seed"), source, "rng.global_seed", -2**63, 2**63 - 1,
              none=True)
    if state.get("numpy_generator") is not None:
        check_generator_state(state["numpy_generator"], source, "rng.numpy_generator")


# ---- callbacks ----------------------------------------------------------------------------------
def callback_keys(callbacks: list[Any]) -> list[str]:
    """Stable keys for callbacks across restarts: class name, then ``_1``, ``_2`` for more of
    the same class (in the order they were passed to ``fit``)."""
    used: dict[str, int] = {}
    keys = []
    for cb in callbacks:
        base = type(cb).__name__
        n = used.get(base, -1) + 1
        used[base] = n
        keys.append(base if n == 0 else f"{base}_{n}")
    return keys


def get_callback_states(callbacks: list[Any]) -> dict[str, Any]:
    out = {}
    for key, cb in zip(callback_keys(callbacks), callbacks):
        fn = getattr(cb, "get_state", None)
        if callable(fn):
            state = fn()
            if state:
                out[key] = state
    return out


def set_callback_states(callbacks: list[Any], states: dict[str, Any]) -> None:
    for key, cb in zip(callback_keys(callbacks), callbacks):
        if key in states and callable(getattr(cb, "set_state", None)):
            cb.set_state(states[key])


class preserve_global_rng:  # noqa: N801 - used as a context manager
    """Keeps kiln's global NumPy generator where it was: rebuilding a model while loading it
    draws initial weights that are then overwritten, and those draws must not shift the
    shuffling of the training that follows (a load must not change what training does)."""

    def __enter__(self) -> preserve_global_rng:
        from kiln import random_state

        gen = random_state._state.get("rng")
        self._gen = gen
        self._state = None if gen is None else gen.bit_generator.state
        self._seed = random_state._state.get("seed")
        return self

    def __exit__(self, *exc: Any) -> None:
        from kiln import random_state

        if self._gen is not None:
            self._gen.bit_generator.state = self._state
            random_state._state["rng"] = self._gen
        random_state._state["seed"] = self._seed
