"""``kiln.GradientTape``: gradients of eager code, and of traced steps (docs/features.md,
"Eager tape").

kiln is define-and-run, so an eager call (an op, a layer, a model, a loss on NumPy arrays) is
already a small graph traced on placeholders and compiled (``kiln/ops/_eager.py``,
``kiln/eager.py``, ``Layer._call_eager``). While a tape is active, each such call also
*records* itself here: how to rebuild its graph from input nodes (``replay``), the concrete
input arrays and the output arrays. ``tape.gradient(target, sources)`` then

1. walks back from the target's record through the records whose outputs fed it,
2. replays them on placeholders (the model's own ``kiln.Variable``\\ s appear as themselves),
3. takes :func:`kiln.grad` of the replayed target with respect to the sources,
4. compiles that with :func:`kiln.function` - cached by the structure of the records, so the
   next batch of a training loop reuses it - and runs it on the recorded arrays.

No second gradient implementation: the VJP rules are the graph's. Arrays are identified by
their memory (data address, shape, strides, dtype), so ``np.asarray`` views of an output
still count as that output; the tape keeps every recorded array alive while it lives. NumPy
arithmetic on the arrays is NOT recorded (use ``kiln.ops``).

On symbolic tensors (a traced ``train_step``) the tape records nothing and ``gradient`` is
:func:`kiln.grad` on that graph.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import numpy as np

import kiln.config
import kiln.core
from kiln.core import Variable, depends_on, grad, is_tensor

_LOCAL = threading.local()
#: the most compiled gradient functions kept (least recently used dropped beyond it)
MAXSIZE = 64
_CACHE: OrderedDict[Hashable, Any] = OrderedDict()
_LOCK = threading.RLock()
_STATS = {"compiles": 0}


def _stack() -> list:
    stack = getattr(_LOCAL, "stack", None)
    if stack is None:
        stack = _LOCAL.stack = []
    return stack


_OPEN = [0]  # tapes open in any thread: none (the serving case), and recording() is one read
_OPEN_LOCK = threading.Lock()


def recording() -> bool:
    """Whether an eager call on this thread should record itself (a tape is active and
    recording is not paused)."""
    if not _OPEN[0]:
        return False
    return bool(getattr(_LOCAL, "stack", None)) and not getattr(_LOCAL, "paused", 0)


@contextlib.contextmanager
def _paused() -> Iterator[None]:
    _LOCAL.paused = getattr(_LOCAL, "paused", 0) + 1
    try:
        yield
    finally:
        _LOCAL.paused -= 1


def ident(a: Any) -> tuple | None:
    """What identifies an array on the tape: its memory and layout (None for non-arrays and
    empty arrays)."""
    if not isinstance(a, np.ndarray) or a.size == 0:
        return None
    return (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)


#: NumPy ufuncs that a :class:`TapeArray` routes to kiln.ops while a tape records
_UFUNCS = {"add": "add", "subtract": "subtract", "multiply": "multiply",
           "true_divide": "divide", "negative": "negative", "power": "power",
           "matmul": "matmul", "exp": "exp", "log": "log", "sqrt": "sqrt", "square": "square",
           "absolute": "absolute", "maximum": "maximum", "minimum": "minimum", "tanh": "tanh"}


class TapeArray(np.ndarray):
    """The arrays kiln's eager calls return while a tape records: plain NumPy arrays, except
    that NumPy arithmetic on them (``+ - * / ** @``, ``np.exp`` ... and ``+=``, which then
    makes a new array as TensorFlow's immutable tensors do) runs through ``kiln.ops`` while a
    tape records, so it is recorded too (``loss += sum(model.losses)``)."""

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        name = _UFUNCS.get(ufunc.__name__)
        if name is not None and method == "__call__" and not kwargs and recording():
            import kiln.ops  # noqa: PLC0415 (kiln.ops imports this module)

            args = [np.asarray(a) if isinstance(a, np.ndarray) else a for a in inputs]
            return getattr(kiln.ops, name)(*args)
        plain = [np.asarray(a) if isinstance(a, np.ndarray) else a for a in inputs]
        outs = kwargs.get("out")
        if outs is not None:
            kwargs["out"] = tuple(np.asarray(o) if isinstance(o, np.ndarray) else o
                                  for o in outs)
        result = getattr(ufunc, method)(*plain, **kwargs)
        if outs is not None:
            return outs[0] if len(outs) == 1 else outs
        kind = type(self)  # as NumPy does for subclasses: results keep the class

        def view(r: Any) -> Any:
            return r.view(kind) if type(r) is np.ndarray else r
        return tuple(view(r) for r in result) if isinstance(result, tuple) else view(result)

    def __getitem__(self, index: Any) -> Any:
        if recording() and _plain_index(index):
            from kiln.ops import _eager  # noqa: PLC0415 (kiln.ops imports this module)

            return _eager.call(f"getitem{index!r}", lambda t: t[index], (np.asarray(self),),
                               {})
        return super().__getitem__(index)

    def __repr__(self) -> str:  # printing inside a tape block is not recorded
        return repr(np.asarray(self)) if recording() else super().__repr__()

    def __str__(self) -> str:
        return str(np.asarray(self)) if recording() else super().__str__()

    def _inplace(self, other: Any, ufunc: Any) -> Any:
        if recording():
            return ufunc(self, other)  # a new (recorded) array, not an in-place update
        ufunc(np.asarray(self), other, out=np.asarray(self))
        return self

    def __iadd__(self, other: Any) -> Any:  # type: ignore[misc]
        return self._inplace(other, np.add)

    def __isub__(self, other: Any) -> Any:  # type: ignore[misc]
        return self._inplace(other, np.subtract)

    def __imul__(self, other: Any) -> Any:  # type: ignore[misc]
        return self._inplace(other, np.multiply)

    def __itruediv__(self, other: Any) -> Any:  # type: ignore[misc]
        return self._inplace(other, np.true_divide)


def _plain_index(index: Any) -> bool:
    """Integers, slices, None and Ellipsis (or a tuple of them): what a graph slice takes."""
    parts = index if isinstance(index, tuple) else (index,)
    return all(p is None or p is Ellipsis or isinstance(p, int | slice | np.integer)
               for p in parts)


def wrap(value: Any) -> Any:
    """``value`` (an array, or a list/tuple of them) viewed as :class:`TapeArray` while a tape
    records; unchanged otherwise or for other values."""
    if not recording():
        return value
    if isinstance(value, list | tuple):
        return type(value)(wrap(v) for v in value)
    if type(value) is np.ndarray:
        return value.view(TapeArray)
    return value


class Record:
    """One eager call: ``replay(nodes) -> list of output nodes`` rebuilds its graph from one
    node per input; ``specs`` are the inputs' ``(shape, dtype)`` placeholders; ``key``
    identifies the graph ``replay`` builds (None: not cacheable)."""

    __slots__ = ("key", "replay", "inputs", "specs", "outputs")

    def __init__(self, key: Hashable | None, replay: Callable[[list], list], inputs: list,
                 specs: list, outputs: list):
        self.key, self.replay, self.inputs, self.specs, self.outputs = (
            key, replay, inputs, specs, outputs)


def record(key: Hashable | None, replay: Callable[[list], list], inputs: list, dtypes: list,
           outputs: list) -> None:
    """Records an eager call on every active tape (no-op when none records).

    Args:
        key: what identifies the graph ``replay`` builds (with the inputs' shapes and dtypes);
            None when it cannot be keyed.
        replay: builds the call's output nodes (a list, one per output) from one node per input.
        inputs: the input arrays, as passed.
        dtypes: the graph dtype of each input's placeholder.
        outputs: the output arrays, as returned.
    """
    if not recording():
        return
    inputs = [np.asarray(a) for a in inputs]
    specs = [(a.shape, str(d)) for a, d in zip(inputs, dtypes)]
    if key is not None:
        try:
            hash(key)
        except TypeError:
            key = None
    rec = Record(key, replay, inputs, specs, list(outputs))
    for tape in _stack():
        tape._add(rec)


def _forget_with_owners(key: Any) -> None:
    """Drops the cache entry ``key`` when a layer it names (weakly) is freed: the compiled
    function's graph holds that layer's Variables, which would otherwise outlive the model
    until 64 newer gradients pushed the entry out."""
    for rec_key in key[0]:
        ref = rec_key[1] if isinstance(rec_key, tuple) and len(rec_key) > 1 else None
        owner = ref() if isinstance(ref, weakref.ref) else None
        if owner is not None:
            weakref.finalize(owner, _forget, key)


def _forget(key: Hashable) -> None:
    with _LOCK:
        _CACHE.pop(key, None)


def cache_info() -> dict:
    """``{"size": compiled gradient functions kept, "compiles": compiles so far}``."""
    with _LOCK:
        return {"size": len(_CACHE), "compiles": _STATS["compiles"]}


def clear() -> None:
    """Empties the compiled-gradient cache."""
    with _LOCK:
        _CACHE.clear()


@contextlib.contextmanager
def stop_recording() -> Iterator[None]:
    """Eager calls inside this block are not recorded (TensorFlow's
    ``tape.stop_recording()``)."""
    with _paused():
        yield


class GradientTape:
    """Records eager kiln calls and differentiates them (TensorFlow's ``GradientTape``).

    Args:
        persistent: allow several :meth:`gradient` calls (else one).
        watch_accessed_variables: every ``kiln.Variable`` read by a recorded call is a
            possible source; with False only Variables passed to :meth:`watch` are.

    Example:
        >>> with kiln.GradientTape() as tape:
        ...     logits = model(x_batch, training=True)
        ...     loss = loss_fn(y_batch, logits)
        >>> grads = tape.gradient(loss, model.trainable_weights)
        >>> optimizer.apply(grads, model.trainable_weights)
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True):
        self.persistent = bool(persistent)
        self.watch_accessed_variables = bool(watch_accessed_variables)
        self._records: list[Record] = []
        self._made: dict[Any, tuple[int, int]] = {}  # output ident -> (record, output)
        self._watched: dict[Any, Any] = {}
        self._watched_vars: dict[int, Variable] = {}
        self._used = False

    # ---- recording -----------------------------------------------------------------------
    def __enter__(self) -> GradientTape:
        if self._used and not self.persistent:
            raise RuntimeError("GradientTape: a non-persistent tape was already used for "
                               "gradient(); make a new one")
        with _OPEN_LOCK:
            _stack().append(self)
            _OPEN[0] += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        stack = _stack()
        if self in stack:
            with _OPEN_LOCK:
                del stack[len(stack) - 1 - stack[::-1].index(self)]
                _OPEN[0] -= 1

    def stop_recording(self) -> contextlib.AbstractContextManager:
        """A block whose eager calls are not recorded."""
        return stop_recording()

    def _add(self, rec: Record) -> None:
        i = len(self._records)
        self._records.append(rec)
        for j, out in enumerate(rec.outputs):
            k = ident(out)
            if k is not None:
                self._made[k] = (i, j)

    def watch(self, tensor: Any) -> None:
        """Makes ``tensor`` (an array, a Variable, or a list of them) a source; symbolic
        tensors need no watching."""
        if isinstance(tensor, list | tuple):
            for t in tensor:
                self.watch(t)
            return
        if isinstance(tensor, Variable):
            self._watched_vars[id(tensor)] = tensor
        elif isinstance(tensor, np.ndarray):
            k = ident(tensor)
            if k is not None:
                self._watched[k] = tensor
        elif not is_tensor(tensor):
            raise TypeError("GradientTape.watch: expected a NumPy array, a kiln.Variable or a "
                            f"symbolic tensor, received {type(tensor).__name__}")

    def reset(self) -> None:
        """Forgets everything recorded so far."""
        self._records.clear()
        self._made.clear()

    def watched_variables(self) -> list:
        """The Variables passed to :meth:`watch`."""
        return list(self._watched_vars.values())

    # ---- differentiating -----------------------------------------------------------------
    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: Any = None) -> Any:
        """Gradients of ``target`` (summed if not scalar) with respect to ``sources`` (a
        Variable/array/tensor or a nested list/tuple/dict of them), in the same structure.

        ``unconnected_gradients``: None or "none" gives None for a source the target does not
        depend on, "zero" (or ``kiln.UnconnectedGradients.ZERO``-like values) zeros. In a
        traced step (symbolic target) the gradient nodes are returned (zeros when unconnected).

        Raises:
            RuntimeError: a second call on a non-persistent tape.
            ValueError: the target was not computed by a kiln call recorded on this tape.
        """
        leaves, rebuild = _flatten_structure(sources)
        if is_tensor(target) and not isinstance(target, np.ndarray):
            return rebuild(grad(target, leaves, seed=output_gradients) if leaves else [])
        if self._used and not self.persistent:
            raise RuntimeError("GradientTape.gradient can only be called once on a "
                               "non-persistent tape; use GradientTape(persistent=True)")
        zeros = _zeros_mode(unconnected_gradients)
        results = self._eager_gradient(target, leaves, output_gradients, zeros)
        if not self.persistent:
            self._used = True
            self.reset()
        return rebuild(results)

    def _eager_gradient(self, target: Any, sources: list, seed: Any, zeros: bool) -> list:
        target = np.asarray(target) if isinstance(target, np.ndarray) else target
        where = self._made.get(ident(target)) if isinstance(target, np.ndarray) else None
        if where is None:
            raise ValueError(
                "GradientTape.gradient: the target was not computed by a kiln call recorded on "
                "this tape (a layer, model, loss or kiln.ops call on arrays inside the `with` "
                "block); NumPy arithmetic is not recorded, use kiln.ops. Received "
                f"{type(target).__name__} of shape {np.shape(target)}")
        plan = _Plan(self, where, sources, seed)
        key = plan.key(zeros)
        entry = None
        if key is not None:
            with _LOCK:
                entry = _CACHE.get(key)
                if entry is not None:
                    _CACHE.move_to_end(key)
        if entry is None:
            from kiln.ops import _eager  # noqa: PLC0415 (kiln.ops imports this module)

            with _paused(), _eager.reading_values(False):
                entry = plan.compile(zeros)
            if key is not None:
                with _LOCK:
                    _CACHE[key] = entry
                    while len(_CACHE) > MAXSIZE:
                        _CACHE.popitem(last=False)
                _forget_with_owners(key)
        function, connected = entry
        feeds = plan.feeds(function)
        values = iter(list(function(*feeds)) if function is not None else [])
        out = [next(values) if c else (np.zeros(np.shape(s), _dtype_of(s)) if zeros else None)
               for c, s in zip(connected, sources)]
        if recording() and function is not None:  # nested tapes: this gradient is a record
            record(None if key is None else ("tape.gradient", key), plan.replay_gradient(zeros),
                   plan.leaf_values, [d for _, d in plan.leaf_specs],
                   [o for o, c in zip(out, connected) if c])
        return out


def _zeros_mode(value: Any) -> bool:
    name = getattr(value, "value", getattr(value, "name", value))
    if value is None or str(name).lower() in ("none",):
        return False
    if str(name).lower() in ("zero", "zeros"):
        return True
    raise ValueError("GradientTape.gradient: unconnected_gradients must be None, 'none' or "
                     f"'zero', received {value!r}")


def _dtype_of(source: Any) -> str:
    return str(getattr(source, "dtype", "float32"))


class _Plan:
    """The records a target needs, wired: which input is a leaf (a placeholder fed with the
    recorded array) and which is an earlier record's output."""

    def __init__(self, tape: GradientTape, where: tuple[int, int], sources: list, seed: Any):
        records = tape._records
        needed: set[int] = set()
        todo = [where[0]]
        while todo:  # the records the target depends on
            i = todo.pop()
            if i in needed:
                continue
            needed.add(i)
            for a in records[i].inputs:
                src = tape._made.get(ident(a))
                if src is not None and src[0] < i:
                    todo.append(src[0])
        self.order = sorted(needed)
        self.records = [records[i] for i in self.order]
        pos = {i: n for n, i in enumerate(self.order)}
        leaf_index: dict[Any, int] = {}
        self.leaf_values: list[np.ndarray] = []
        self.leaf_specs: list[tuple] = []
        self.wiring: list[tuple] = []  # per record: per input ("leaf", n) or ("rec", r, j)

        def leaf(a: np.ndarray, spec: tuple) -> int:
            k = (ident(a) or ("anon", len(self.leaf_values)), spec)
            if k not in leaf_index:
                leaf_index[k] = len(self.leaf_values)
                self.leaf_values.append(a)
                self.leaf_specs.append(spec)
            return leaf_index[k]

        for i, rec in zip(self.order, self.records):
            wires: list[tuple] = []
            for a, spec in zip(rec.inputs, rec.specs):
                src = tape._made.get(ident(a))
                if src is not None and src[0] < i and src[0] in pos:
                    wires.append(("rec", pos[src[0]], src[1], spec[1]))
                else:
                    wires.append(("leaf", leaf(a, spec)))
            self.wiring.append(tuple(wires))
        self.target = (pos[where[0]], where[1])
        # sources: ("var", Variable) / ("rec", r, j) / ("leaf", n) / None (unconnected)
        self.sources: list[Any] = []
        for s in sources:
            if isinstance(s, Variable):
                ok = tape.watch_accessed_variables or id(s) in tape._watched_vars
                self.sources.append(("var", s) if ok else None)
            elif isinstance(s, np.ndarray) and ident(s) is not None:
                k = ident(s)
                src = tape._made.get(k)
                if src is not None and src[0] in pos:
                    self.sources.append(("rec", pos[src[0]], src[1]))
                elif k in tape._watched:
                    n = next((leaf_index[lk] for lk in leaf_index if lk[0] == k), None)
                    self.sources.append(None if n is None else ("leaf", n))
                else:
                    self.sources.append(None)
            else:
                self.sources.append(None)
        self.seed = None if seed is None else np.asarray(seed)

    def key(self, zeros: bool) -> Hashable | None:
        if any(r.key is None for r in self.records):
            return None
        srcs = tuple(None if s is None else (s[0], id(s[1])) if s[0] == "var" else s
                     for s in self.sources)
        seed = None if self.seed is None else (self.seed.shape, self.seed.dtype.str)
        return (tuple(r.key for r in self.records), tuple(self.wiring), tuple(self.leaf_specs),
                self.target, srcs, seed, zeros, kiln.config.floatx(), kiln.config.device(),
                kiln.config.default_backend())

    def _forward(self, leaves: list) -> list[list]:
        import kiln.ops  # noqa: PLC0415 (kiln.ops imports this module)

        outs: list[list] = []
        for rec, wires in zip(self.records, self.wiring):
            nodes = []
            for w in wires:
                if w[0] == "leaf":
                    nodes.append(leaves[w[1]])
                else:
                    node = outs[w[1]][w[2]]
                    nodes.append(node if node.dtype == w[3] else kiln.ops.cast(node, w[3]))  # type: ignore[attr-defined]
            outs.append(list(rec.replay(nodes)))
        return outs

    def _graph(self, leaves: list, seed: Any) -> tuple[list, list[bool]]:
        outs = self._forward(leaves)
        y = outs[self.target[0]][self.target[1]]
        wrt: list[Any] = []
        connected = []
        for s in self.sources:
            node = None if s is None else s[1] if s[0] == "var" else (
                leaves[s[1]] if s[0] == "leaf" else outs[s[1]][s[2]])
            probe = node.__kiln_node__() if isinstance(node, Variable) else node
            ok = probe is not None and (probe is y or depends_on([y], probe))
            connected.append(ok)
            if ok:
                wrt.append(node)
        grads = grad(y, wrt, seed=seed) if wrt else []
        return list(grads), connected

    def compile(self, zeros: bool) -> tuple[Any, list[bool]]:
        leaves = [kiln.core.placeholder(shape, dtype) for shape, dtype in self.leaf_specs]
        seed = None if self.seed is None else kiln.core.placeholder(
            self.seed.shape, str(self.seed.dtype))
        grads, connected = self._graph(leaves, seed)
        with _LOCK:
            _STATS["compiles"] += 1
        if not grads:
            return None, connected
        inputs = leaves + ([seed] if seed is not None else [])
        return kiln.core.function(inputs, grads, name="GradientTape.gradient"), connected

    def feeds(self, function: Any) -> list:
        values = self.leaf_values + ([self.seed] if self.seed is not None else [])
        if function is None:
            return []
        return [v if v.dtype == np.dtype(p.dtype) else v.astype(p.dtype)
                for v, p in zip(values, function.inputs)]

    def replay_gradient(self, zeros: bool) -> Callable[[list], list]:
        def replay(nodes: list) -> list:
            grads, _ = self._graph(nodes, None if self.seed is None else
                                   kiln.core.constant(self.seed))
            return grads
        return replay


def _flatten_structure(value: Any) -> tuple[list, Any]:
    if isinstance(value, dict):
        keys = list(value)
        parts = [_flatten_structure(value[k]) for k in keys]
    elif isinstance(value, list | tuple):
        keys = None
        parts = [_flatten_structure(v) for v in value]
    else:
        return [value], lambda flat: flat[0]
    sizes = [len(p[0]) for p in parts]
    leaves = [leaf for p in parts for leaf in p[0]]

    def rebuild(flat: list) -> Any:
        out, start = [], 0
        for (_, sub), n in zip(parts, sizes):
            out.append(sub(flat[start:start + n]))
            start += n
        if keys is not None:
            return dict(zip(keys, out))
        return type(value)(out) if isinstance(value, tuple) else out

    return leaves, rebuild


# ---- tf.GradientTape over kiln values ---------------------------------------------------------
_TF_TAPE_CALLS = ("gradient", "jacobian", "batch_jacobian", "watch")


def _tf_tape_probe(self: Any) -> Any:
    """``_should_act_as_resource_variable``, which TensorFlow asks (``hasattr``) of every
    target and source of ``tf.GradientTape.gradient``: there, a kiln Variable or eager array
    gets an error naming ``kiln.GradientTape`` (TensorFlow's tape cannot see kiln's compiled
    computations; without this it fails with "'numpy.ndarray' object has no attribute
    '_id'"). Anywhere else the attribute does not exist."""
    frame = sys._getframe(1)
    for _ in range(16):
        if frame is None:
            break
        path = frame.f_code.co_filename.replace("\\", "/")
        if path.endswith("tensorflow/python/eager/backprop.py") and \
                frame.f_code.co_name in _TF_TAPE_CALLS:
            what = f"the kiln Variable {self.name!r}" if isinstance(self, Variable) else \
                f"a kiln array of shape {tuple(self.shape)}"
            raise TypeError(
                f"tf.GradientTape.{frame.f_code.co_name}() was given {what}: TensorFlow's "
                "tape cannot see kiln's computations (they run in kiln's compiled graphs). "
                "Use kiln.GradientTape (keras.GradientTape), which records kiln's eager calls "
                "the same way: `with kiln.GradientTape() as tape: loss = loss_fn(y, model(x, "
                "training=True))`, then `tape.gradient(loss, model.trainable_weights)`")
        frame = frame.f_back
    raise AttributeError("_should_act_as_resource_variable")


Variable._should_act_as_resource_variable = property(_tf_tape_probe)  # type: ignore[attr-defined]

TapeArray._should_act_as_resource_variable = property(_tf_tape_probe)  # type: ignore[attr-defined]


__all__ = ["GradientTape", "TapeArray", "cache_info", "clear", "record", "recording",
           "stop_recording", "wrap"]
