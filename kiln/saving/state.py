"""Training state beyond the weights: optimizer variables, learning rate, RNG streams,
epoch/step counters and callback states. Everything is checked before it is applied."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from kiln.saving.h5util import (
    FileFormatError,
    json_attr,
    list_attr,
    read_dataset,
    set_json_attr,
    set_list_attr,
)
from kiln.saving.weights import _fmt_shape

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


def read_optimizer(group: Any) -> dict:
    names = list_attr(group, "variable_names") or []
    arrays = []
    for i in range(len(names)):
        if str(i) not in group:
            raise FileFormatError(f"optimizer variable {i} ({names[i]!r}) is missing from "
                                  "the file (truncated or edited file?)")
        arrays.append(read_dataset(group[str(i)]))
    lr = group.attrs.get("learning_rate")
    return {"names": names, "arrays": arrays,
            "learning_rate": None if lr is None else float(lr),
            "learning_rate_fixed": bool(group.attrs.get("learning_rate_fixed", True)),
            "built": bool(group.attrs.get("built", True)),
            "class_name": group.attrs.get("class_name"),
            "config": json_attr(group, "config")}


def plan_optimizer(model: Any, saved: dict, source: str, what: str = "load",
                   strict: bool = True) -> tuple[list[tuple[Any, np.ndarray]], float | None]:
    """Checks saved optimizer variables against the model's optimizer (building it first if
    needed) and returns ``(Variable, array)`` pairs plus the learning rate to restore."""
    opt = get_optimizer(model)
    if opt is None:
        return [], None
    if not saved["built"] and len(saved["arrays"]) <= 1:
        # The optimizer had not been built when saved (no step taken): iterations only.
        return [(opt.iterations, saved["arrays"][0])] if saved["arrays"] else [], \
            saved["learning_rate"] if saved["learning_rate_fixed"] else None
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
            if tuple(arr.shape) != tuple(var.shape):
                problem = (f"{what}: optimizer variable {getattr(var, 'name', '?')!r}: the "
                           f"model expects shape {_fmt_shape(tuple(var.shape))}, {source} "
                           f"has shape {_fmt_shape(tuple(arr.shape))} (saved as {name!r})")
                break
    if problem:
        if strict:
            raise ValueError(problem)
        warnings.warn(problem + "; the optimizer starts fresh", stacklevel=3)
        return [], None
    lr = saved["learning_rate"] if saved["learning_rate_fixed"] and lr_is_fixed(opt) else None
    return list(zip(variables, arrays)), lr


def keras_optimizer_arrays(opt: Any) -> list[np.ndarray]:
    """The optimizer's variables in Keras 3's order: iteration, learning_rate (absent for a
    schedule), then the slots."""
    variables = list(opt.variables)
    out = [np.asarray(variables[0].value)]
    if lr_is_fixed(opt):
        out.append(np.asarray(current_lr(opt), dtype=np.float32))
    return out + [np.asarray(v.value) for v in variables[1:]]


def plan_keras_optimizer(model: Any, arrays: list[np.ndarray], source: str,
                         strict: bool) -> tuple[list[tuple[Any, np.ndarray]], float | None]:
    """Maps Keras 3 optimizer variables (``optimizer/vars``) onto the model's optimizer."""
    opt = get_optimizer(model)
    if opt is None or not arrays:
        return [], None
    ensure_optimizer_built(model, opt)
    variables = list(opt.variables)
    fixed = lr_is_fixed(opt)
    expected = len(variables) + (1 if fixed else 0)
    if len(arrays) != expected:
        msg = (f"load: the optimizer {type(opt).__name__} has {expected} variables in Keras' "
               f"layout, {source} has {len(arrays)}")
        if strict:
            raise ValueError(msg)
        warnings.warn(msg + "; the optimizer starts fresh", stacklevel=3)
        return [], None
    lr = float(arrays[1]) if fixed else None
    rest = arrays[2:] if fixed else arrays[1:]
    pairs = [(variables[0], arrays[0])] + list(zip(variables[1:], rest))
    for var, arr in pairs:
        if tuple(arr.shape) != tuple(var.shape):
            msg = (f"load: optimizer variable {getattr(var, 'name', '?')!r}: the model expects "
                   f"shape {_fmt_shape(tuple(var.shape))}, {source} has "
                   f"{_fmt_shape(tuple(arr.shape))}")
            if strict:
                raise ValueError(msg)
            warnings.warn(msg + "; the optimizer starts fresh", stacklevel=3)
            return [], None
    return pairs, lr


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
    from kiln import random_state

    for key in ("rng_seed", "rng_counter"):
        if key in state and state[key] is not None and hasattr(model, "_" + key):
            current = getattr(model, "_" + key)
            if hasattr(current, "assign"):
                current.assign(np.asarray(state[key]))
            elif isinstance(current, np.ndarray):
                current[...] = np.asarray(state[key], dtype=current.dtype)
            else:
                setattr(model, "_" + key, state[key])
    if include_global and state.get("numpy_generator"):
        gen_state = state["numpy_generator"]
        gen = random_state._state.get("rng")
        if gen is None or type(gen.bit_generator).__name__ != gen_state.get("bit_generator"):
            import numpy.random as npr

            bitgen = getattr(npr, gen_state["bit_generator"])()
            gen = np.random.Generator(bitgen)
            random_state._state["rng"] = gen
        gen.bit_generator.state = gen_state
        if state.get("global_seed") is not None:
            random_state._state["seed"] = state["global_seed"]


def check_rng_state(state: Any, source: str) -> None:
    if not isinstance(state, dict):
        raise FileFormatError(f"{source}: the RNG state is not a dict")
    gen = state.get("numpy_generator")
    if gen is not None:
        import numpy.random as npr

        name = gen.get("bit_generator") if isinstance(gen, dict) else None
        if not isinstance(name, str) or not hasattr(npr, name):
            raise FileFormatError(f"{source}: unknown NumPy bit generator {name!r}")


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
