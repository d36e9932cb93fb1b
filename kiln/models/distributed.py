"""The data-parallel side of the compiled steps (docs/features.md, "Collectives").

Under an active :mod:`kiln.distribution` (more than one rank) a step graph gets one more
placeholder, ``replica_weight`` = (samples of this rank's slice) / (samples of the global
batch). The step differentiates ``total * replica_weight``; the gradients, the weighted
losses, the metric statistics (sums over samples) and the layers' own float updates
(BatchNormalization's moving statistics, weighted) are flattened into one buffer per dtype and
summed by ONE ``allreduce`` node, so every rank gets the global batch's gradient, loss and
statistics and applies the same update. With ``DataParallel(bucket_bytes=n)`` they are summed
in buckets of about ``n`` bytes instead (:func:`buckets`: in the order the backward pass
computes them), each an ``allreduce_start`` that the scheduler runs as soon as its values are
computed and an ``allreduce_wait`` it runs after every kernel that does not need the sum: the
sums travel while the backward pass goes on. The same bits as one allreduce with 2 ranks
(each element is the sum of the same two values; with more ranks MPI's summation order may
depend on the buffer's size). :class:`ShardedFunction` wraps the compiled function:
it is called with the global batch's feeds (the loops need no change), slices this rank's rows,
appends the weight and makes the random key rank-specific (dropout masks differ per rank).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln import distribution as dist_module
from kiln import ops
from kiln.core import Node, placeholder
from kiln.random_state import numpy_rng


def active() -> Any:
    return dist_module.active()


def key() -> Any:
    """What distinguishes the steps compiled for the current distribution."""
    dist = dist_module.active()
    return None if dist is None else dist.group_name


def weight_placeholder() -> Node:
    import kiln.config
    return placeholder((), kiln.config.floatx(), name="replica_weight")


def reduce_values(dist: Any, weight: Node, grads: list, weighted: list, stats: list,
                  updates: list) -> tuple[list, list, list, list]:
    """``grads`` (already scaled by the weight), ``weighted`` (scaled here), ``stats`` (masked
    on an empty slice) and the float ``updates`` ((variable, value), weighted) summed over the
    ranks through one allreduce per dtype. Returns them in the same structure."""
    active_f = {}

    def mask(dtype: str) -> Node:
        if dtype not in active_f:
            active_f[dtype] = ops.cast(ops.greater(weight, ops.cast(0, weight.dtype)), dtype)
        return active_f[dtype]

    def scaled(v: Node) -> Node:
        return v * ops.cast(weight, v.dtype)

    float_updates = [(i, u) for i, u in enumerate(updates)
                     if u[1].dtype in ("float32", "float64") and None not in u[1].shape]
    values: list[Node] = (list(grads) + [scaled(v) for v in weighted]
                          + [s * mask(s.dtype) if s.dtype in ("float32", "float64") else s
                             for s in stats]
                          + [scaled(u[1]) for _, u in float_updates])
    reduced = _allreduce_flat(values, dist.group_name, getattr(dist, "bucket_bytes", None))
    g = len(grads)
    w = g + len(weighted)
    s = w + len(stats)
    new_updates = list(updates)
    for (i, (var, _)), value in zip(float_updates, reduced[s:]):
        new_updates[i] = (var, value)
    return reduced[:g], reduced[g:w], reduced[w:s], new_updates


def _allreduce_flat(values: list[Node], group: str,
                    bucket_bytes: int | None = None) -> list[Node]:
    """Each value summed over the ranks: float values of static shape share one flat buffer
    per dtype (one collective), or with ``bucket_bytes`` several buffers of about that size
    each; others (integer statistics) are cast to float64 and summed alone."""
    out: list[Node | None] = [None] * len(values)
    by_dtype: dict[str, list[int]] = {}
    for i, v in enumerate(values):
        if v.dtype in ("float32", "float64") and None not in v.shape:
            by_dtype.setdefault(v.dtype, []).append(i)
        else:
            summed = ops.allreduce(ops.cast(v, "float64"), group)
            out[i] = ops.cast(summed, v.dtype)
    for idx in by_dtype.values():
        if bucket_bytes is None:
            _reduce_bucket(values, idx, out, lambda x: ops.allreduce(x, group))
            continue
        for bucket in buckets(values, idx, bucket_bytes):
            _reduce_bucket(values, bucket, out, lambda x: ops.apply_op(
                "allreduce_wait", ops.apply_op("allreduce_start", x, group=group), group=group))
    return out  # type: ignore[return-value]


def _reduce_bucket(values: list[Node], idx: list[int], out: list, reduce: Callable) -> None:
    """The values ``idx`` flattened into one buffer, ``reduce``d, and sliced back into ``out``."""
    flats = [ops.reshape(values[i], (-1,)) for i in idx]
    buf = reduce(flats[0] if len(flats) == 1 else ops.concatenate(flats, axis=0))
    start = 0
    for i in idx:
        size = _size(values[i])
        out[i] = ops.reshape(buf[start:start + size], values[i].shape)
        start += size


def _size(v: Node) -> int:
    return int(np.prod(v.shape, dtype=np.int64))


def buckets(values: list[Node], idx: list[int], bucket_bytes: int) -> list[list[int]]:
    """The values ``idx`` (of one dtype) in buckets of at least ``bucket_bytes`` (the last one
    may be smaller), in the order the step computes them: by depth in the graph (the longest
    chain of ops from its sources), so the last layer's gradients, ready first in the backward
    pass, fill the first bucket, and each bucket's sum can start while the earlier layers'
    gradients are still being computed (PyTorch DDP's buckets, in reverse layer order)."""
    depth = _depths([values[i] for i in idx])
    ready = sorted(idx, key=lambda i: (depth[id(values[i])], i))
    out: list[list[int]] = []
    size = 0
    for i in ready:
        if not out or size >= bucket_bytes:
            out.append([])
            size = 0
        out[-1].append(i)
        size += _size(values[i]) * np.dtype(values[i].dtype).itemsize
    return out


def _depths(roots: list[Node]) -> dict[int, int]:
    """id(node) -> the longest chain of ops below it (0 for sources), for ``roots`` and every
    node they depend on."""
    depth: dict[int, int] = {}
    for root in roots:
        stack = [root]
        while stack:
            node = stack[-1]
            if id(node) in depth:
                stack.pop()
                continue
            todo = [i for i in node.inputs if id(i) not in depth]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            depth[id(node)] = 1 + max((depth[id(i)] for i in node.inputs), default=-1)
    return depth


def _slice_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    base, extra = divmod(n, world)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


class ShardedFunction:
    """A compiled step called with the global batch: runs this rank's rows.

    Args:
        fn: the compiled function (feeds: batch feeds, ``replica_weight``, then the rest).
        n_batch: how many leading feeds are per-sample (sliced).
        dist: the DataParallel.
        gather: predict: gather every rank's outputs (in rank order) into the global batch's.
    """

    def __init__(self, fn: Any, n_batch: int, dist: Any, gather: bool = False):
        self.fn = fn
        self.n_batch = n_batch
        self.dist = dist
        self.gather = gather

    def __getattr__(self, name: str) -> Any:  # profile(), graph, ... of the compiled function
        return getattr(self.fn, name)

    def __call__(self, *feeds: Any) -> list[np.ndarray]:
        dist = self.dist
        batch = feeds[:self.n_batch]
        n = len(batch[0])
        lo, hi = _slice_bounds(n, dist.rank, dist.world_size)
        if hi > lo:
            local = [f[lo:hi] for f in batch]
        else:  # fewer samples than ranks: run one row, weighted 0 (its sums are masked)
            local = [f[:1] for f in batch]
        rest = [_rank_key(f, dist.rank) for f in feeds[self.n_batch:]]
        if self.gather:
            outs = self.fn(*local, *rest)
            if hi == lo:
                outs = [o[:0] for o in outs]
            return [dist.group.allgather_rows(o) for o in outs]
        weight = np.asarray((hi - lo) / n if n else 0.0, dtype=_weight_dtype(self.fn))
        return self.fn(*local, weight, *rest)


def _weight_dtype(fn: Any) -> Any:
    import kiln.config
    return np.dtype(kiln.config.floatx())


def _rank_key(feed: Any, rank: int) -> Any:
    """The random key ``[seed, counter]`` made rank-specific (other feeds unchanged)."""
    if isinstance(feed, np.ndarray) and feed.dtype == np.int64 and feed.shape == (2,):
        key = feed.copy()
        key[0] = (int(key[0]) + 0x9E3779B1 * rank) % (2**62)
        return key
    return feed


def fault_guard(method: Callable) -> Callable:
    """Wraps fit/evaluate/predict and the batch methods: under an active distribution, any
    exception leaving them (``SystemExit`` and ``KeyboardInterrupt`` included) poisons the
    distribution and tells every other rank at once (``MpiGroup.poison``), so no rank waits
    for this one and none pairs its next collectives with the wrong ones."""

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except BaseException as exc:
            dist = dist_module.active()
            if dist is not None:
                dist.group.poison(_describe(exc, method.__name__))
            raise

    return guarded


def _describe(exc: BaseException, where: str) -> str:
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}) in {where}()"
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"raised {type(exc).__name__} in {where}(): {text}"


def start(model: Any, what: str, signature: dict) -> bool:
    """At the start of fit/evaluate/predict: makes rank 0's layer random streams everyone's,
    checks that every rank runs the same model (its config), compiled alike (loss, metrics,
    optimizer) on the same data shapes (a clear error naming the first difference
    otherwise), then makes rank 0's weights, optimizer state and random state everyone's.

    Returns:
        True when this rank's layer streams changed: its compiled steps were dropped and the
        caller must build its step again.
    """
    dist = dist_module.active()
    if dist is None:
        return False
    changed = _share_layer_streams(model, dist)
    mine = dict(signature)
    mine["what"] = what
    mine["model"] = _jsonable_config(model.get_config)
    mine["compile"] = _jsonable_config(getattr(model, "get_compile_config", lambda: None))
    mine["variables"] = [[v.name, list(v.value.shape), str(v.value.dtype)]
                         for v in _state_variables(model)]
    everyone = dist.group.allgather_json(mine)
    ref = everyone[0]
    bad = [r for r, sig in enumerate(everyone) if sig != ref]
    if bad:
        other = everyone[bad[0]]
        keys = sorted(set(ref) | set(other))
        diffs = [_first_difference(k, ref.get(k), other.get(k)) for k in keys
                 if ref.get(k) != other.get(k)]
        raise dist_module.DistributionError(
            f"{model.name}: {what}: ranks {bad} disagree with rank 0; rank {bad[0]} vs rank 0: "
            f"{'; '.join(diffs)} (every rank must build the same model and call it with the "
            "same data)")
    for v in _state_variables(model):
        buf = v.value
        if buf.flags.c_contiguous:
            dist.group.broadcast(buf)
            v.assign(buf)  # written in place: its version moves (a predict plan's cached
            # Winograd kernel transform is made again: kernels/conv/winograd_cache.py)
        else:
            tmp = np.ascontiguousarray(buf)
            dist.group.broadcast(tmp)
            v.assign(tmp)
    rng = numpy_rng()
    state = dist.group.allgather_json(
        [_jsonable(rng.bit_generator.state), model._rng_seed, model._rng_counter])[0]
    rng.bit_generator.state = state[0]
    model._rng_seed, model._rng_counter = state[1], int(state[2])
    return changed


def _jsonable_config(get: Callable[[], Any]) -> Any:
    """A config as plain JSON values (anything else by its repr), for comparing the ranks."""
    try:
        config = get()
    except NotImplementedError:  # a subclassed model without get_config: its variables
        return None              # and data shapes are still compared
    return json.loads(json.dumps(config, sort_keys=True, default=repr))


def _random_layers(model: Any) -> list:
    """The layers (nested ones included, in a fixed order) that drew their own random stream
    because the user gave no seed."""
    out, stack, seen = [], [model], set()
    while stack:
        layer = stack.pop(0)
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if getattr(layer, "_stream", None) is not None and getattr(layer, "seed", 0) is None:
            out.append(layer)
        sub = getattr(layer, "_sublayers", None)
        stack.extend(sub() if callable(sub) else [])
    return out


def _share_layer_streams(model: Any, dist: Any) -> bool:
    """Rank 0's drawn layer streams (Dropout's and other random layers' masks) for every
    rank, so the ranks' masks derive from rank 0's seed whatever seed each rank set."""
    layers = _random_layers(model)
    streams = dist.group.allgather_json([int(layer._stream) for layer in layers])
    ref = streams[0]
    if len(ref) != len(layers):
        return False  # the models differ: the config comparison names how
    changed = False
    for layer, stream in zip(layers, ref):
        if layer._stream != stream:
            layer._stream = stream
            changed = True
    if changed:  # the streams are attributes of the traced graphs: trace again
        model._train_fns, model._test_fns, model._predict_fns = {}, {}, {}
        model._batch_cache = {}
    return changed


def _first_difference(key: str, a: Any, b: Any) -> str:
    """``key``'s first differing entry (lists and dicts compared item by item, recursively),
    as ``other != rank 0``."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                if k not in a or k not in b:
                    return f"{key}.{k} {b.get(k)!r} != {a.get(k)!r}"
                return _first_difference(f"{key}.{k}", a[k], b[k])
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                if isinstance(x, dict) and isinstance(y, dict):  # a layer's config
                    return _first_difference(f"{key}[{i}]", x, y)
                return f"{key}[{i}] {y!r} != {x!r}"
        return f"{key} has {len(b)} entries != {len(a)}"
    return f"{key} {b!r} != {a!r}"


def _state_variables(model: Any) -> list:
    out = list(model.variables)
    opt = getattr(model, "optimizer", None)
    if opt is not None and getattr(opt, "variables", None) is not None:
        seen = {id(v) for v in out}
        out += [v for v in opt.variables if id(v) not in seen]
    return out


def _jsonable(state: dict) -> dict:
    return {k: (_jsonable(v) if isinstance(v, dict) else
                int(v) if isinstance(v, np.integer | int) else v) for k, v in state.items()}


__all__ = ["ShardedFunction", "active", "fault_guard", "key", "reduce_values", "start",
           "weight_placeholder"]
