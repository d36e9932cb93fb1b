"""Models are freed once the user drops them (Keras and TF free them too).

The oracle is object liveness: a ``weakref.ref`` to each model, to its layers and to one of
its graph nodes must be dead after the last strong reference goes and ``gc.collect()`` runs.
Before the fix, ``HISTORY`` (tensor -> layer, weak on the tensor) held every layer strongly and
each layer held its output tensors in its call records, so no functional model was ever freed.
"""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import kiln
from kiln import layers

N_MODELS = 20


def _functional():
    x = kiln.Input(shape=(4,))
    h = layers.Dense(8, activation="relu")(x)
    y = layers.Dense(2)(layers.concatenate([h, x]))
    return kiln.Model(x, y)


def _masked():
    x = kiln.Input(shape=(5,), dtype="int32")
    e = layers.Embedding(10, 3, mask_zero=True)(x)
    y = layers.Dense(2)(layers.GlobalAveragePooling1D()(e))
    return kiln.Model(x, y)


def _sequential():
    return kiln.Sequential([kiln.Input(shape=(4,)), layers.Dense(8), layers.Dense(2)])


class _Sub(kiln.Model):
    def __init__(self):
        super().__init__()
        self.d1 = layers.Dense(8, activation="relu")
        self.d2 = layers.Dense(2)

    def call(self, x):
        return self.d2(self.d1(x))


def _subclassed():
    model = _Sub()
    model(np.zeros((2, 4), "float32"))
    return model


def _fitted(build, run_eagerly=False):
    def make():
        model = build()
        model.compile(optimizer="adam", loss="mse", run_eagerly=run_eagerly)
        model.fit(np.ones((4, 4), "float32"), np.zeros((4, 2), "float32"), batch_size=4,
                  epochs=1, verbose=0)
        model.predict(np.ones((2, 4), "float32"), verbose=0)
        return model
    return make


def _saved_loaded(tmp_path):
    def make():
        model = _fitted(_functional)()
        path = tmp_path / "m.keras"
        model.save(path)
        return kiln.models.load_model(path)
    return make


def _refs(model) -> list[weakref.ref]:
    """Weak references to the model, each of its layers and graph nodes it reaches."""
    refs = [weakref.ref(model)]
    refs += [weakref.ref(layer) for layer in model.layers]
    for t in (*kiln.layers.base.flatten(getattr(model, "outputs", None) or []),):
        if isinstance(t, kiln.core.Node):
            refs.append(weakref.ref(t))
    for layer in model.layers:
        for w in layer.weights:
            refs.append(weakref.ref(w))
    return refs


def _alive_after_loop(make, n: int = N_MODELS, collections: int = 1) -> list[str]:
    refs: list[weakref.ref] = []
    for _ in range(n):
        model = make()
        refs += _refs(model)
        del model
    for _ in range(collections):
        gc.collect()
    return [repr(r()) for r in refs if r() is not None]


@pytest.mark.parametrize("kind", ["functional", "masked", "sequential", "subclassed"])
def test_built_models_are_freed(kind):
    make = {"functional": _functional, "masked": _masked, "sequential": _sequential,
            "subclassed": _subclassed}[kind]
    alive = _alive_after_loop(make)
    assert not alive, f"{len(alive)} objects of dropped {kind} models alive: {alive[:5]}"


@pytest.mark.parametrize("kind", ["functional", "sequential", "subclassed"])
def test_fitted_models_are_freed(kind):
    build = {"functional": _functional, "sequential": _sequential,
             "subclassed": _subclassed}[kind]
    alive = _alive_after_loop(_fitted(build), n=5)
    assert not alive, f"{len(alive)} objects of dropped fitted {kind} models alive: {alive[:5]}"


def test_eagerly_fitted_models_are_freed():
    """``run_eagerly`` fits through ``kiln.GradientTape``, whose compiled-gradient cache (an
    LRU of 64) holds graphs over the layers' Variables: the entry is dropped when a layer it
    names is freed. That happens during the first collection, so the Variables (a cycle with
    their param nodes) go in the second one."""
    alive = _alive_after_loop(_fitted(_functional, run_eagerly=True), n=3, collections=2)
    assert not alive, f"{len(alive)} objects of dropped eager models alive: {alive[:5]}"


def test_saved_and_loaded_models_are_freed(tmp_path):
    alive = _alive_after_loop(_saved_loaded(tmp_path), n=4)
    assert not alive, f"{len(alive)} objects of dropped loaded models alive: {alive[:5]}"


def test_layer_history_survives_while_the_tensor_lives():
    """The functional API's record of a layer call lives as long as its output tensor, even
    when nothing else holds the layer (``y = Dense(2)(x)``, the layer never named)."""
    x = kiln.Input(shape=(3,))
    y = layers.Dense(2, name="only_held_by_its_output")(x)
    gc.collect()
    model = kiln.Model(x, y)
    assert [layer.name for layer in model.layers][-1] == "only_held_by_its_output"
    out = model.predict(np.ones((1, 3), "float32"), verbose=0)
    assert out.shape == (1, 2)


def test_memory_of_dropped_models_is_bounded():
    """Secondary check: building the same wide model again and again does not grow the traced
    memory by the model's size each time (its 256x256 float32 kernel is 256 KiB)."""
    def make():
        x = kiln.Input(shape=(256,))
        return kiln.Model(x, layers.Dense(256)(layers.Dense(256)(x)))

    for _ in range(3):  # warm caches (op rules, names) before measuring
        make()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(N_MODELS):
            make()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # 20 leaked models would hold 20 * 2 * 256 KiB = 10 MiB of kernels alone
    assert grown < 2 * 2**20, f"memory grew by {grown / 2**20:.1f} MiB over {N_MODELS} models"
