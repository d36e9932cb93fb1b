"""``run_layer_test``: the one check every layer goes through (after Keras' own helper).

It checks, for one layer configuration:

1. the symbolic output shape (batch dimension None) against the documented shape rule, and
   ``compute_output_shape``;
2. the parameter count (and the trainable / non-trainable split);
3. an eager call on data: the output shape with the concrete batch size, finite values;
4. ``get_config`` / ``from_config``: the config is JSON-serializable, a layer rebuilt from it
   (directly and through JSON) has the same config, and with the same weights gives the same
   output;
5. one SGD training step compiled with ``kiln.function(..., updates=...)`` inside a training
   trace: every trainable weight changes; non-trainable weights change only when the layer
   records updates in training (BatchNormalization's moving statistics), and an inference
   trace records none.

The loss of the training step is ``mean(square(layer(x) - target))`` with a fixed random
target (plus the layer's regularization and activity losses). The target matters for the
normalization layers: with ``mean(square(layer(x)))`` alone the gradient with respect to
``beta`` is exactly zero (the normalized output has zero mean), so ``beta`` could not change.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np

import kiln
import kiln.ops as K
from kiln.layers.context import trace

BACKEND = "reference"


def make_inputs(input_shape: Any, input_dtype: str = "float32", int_high: int = 10,
                seed: int = 0) -> Any:
    """Random data of ``input_shape`` (a shape, or a list of shapes for merging layers)."""
    rng = np.random.default_rng(seed)

    def one(shape: tuple) -> np.ndarray:
        if input_dtype.startswith("int"):
            return rng.integers(0, int_high, size=shape).astype(input_dtype)
        return rng.normal(size=shape).astype(input_dtype)

    if isinstance(input_shape, list):
        return [one(tuple(s)) for s in input_shape]
    return one(tuple(input_shape))


def _placeholders(data: Any) -> Any:
    def one(a: np.ndarray) -> kiln.Tensor:
        return kiln.placeholder((None,) + a.shape[1:], a.dtype.name)

    return [one(a) for a in data] if isinstance(data, list) else one(data)


def _flat(x: Any) -> list:
    return list(x) if isinstance(x, list) else [x]


def run_layer_test(cls: type, init_kwargs: dict, input_shape: Any, expected_output_shape: tuple,
                   expected_num_params: int, *, expected_num_trainable: int | None = None,
                   expected_num_non_trainable: int = 0, input_dtype: str | None = None,
                   input_data: Any = None, int_high: int = 10,
                   expect_training_updates: bool = False, dtype: str = "float32",
                   rtol: float = 1e-6, atol: float = 1e-6) -> kiln.layers.Layer:
    """Runs the standard checks on ``cls(**init_kwargs)`` (see the module docstring).

    Args:
        cls: the layer class.
        init_kwargs: constructor arguments.
        input_shape: the data's shape including the batch size (or a list of shapes).
        expected_output_shape: the output shape for that data, from the documented shape rule.
        expected_num_params: total parameter count.
        expected_num_trainable: number of trainable weight tensors (default: all of them).
        expected_num_non_trainable: number of non-trainable weight tensors.
        input_dtype: dtype of the generated data (default ``dtype``; "int32" for Embedding).
        input_data: explicit data instead of generated data.
        expect_training_updates: whether a training trace updates non-trainable weights.
        dtype: the layer's dtype.

    Returns:
        The tested layer (built).
    """
    input_dtype = input_dtype or dtype
    data = input_data if input_data is not None else make_inputs(input_shape, input_dtype,
                                                                 int_high)
    kwargs = dict(init_kwargs)
    if dtype != "float32":
        kwargs["dtype"] = dtype
    layer = cls(**kwargs)

    # 1. symbolic shape
    phs = _placeholders(data)
    out = layer(phs)
    want = (None,) + tuple(expected_output_shape[1:])
    assert out.shape == want, f"{cls.__name__}: symbolic output {out.shape}, expected {want}"
    shapes = [tuple(p.shape) for p in phs] if isinstance(phs, list) else tuple(phs.shape)
    assert tuple(layer.compute_output_shape(shapes)) == want

    # 2. parameters
    assert layer.count_params() == expected_num_params, (
        f"{cls.__name__}: {layer.count_params()} parameters, expected {expected_num_params}")
    n_weights = len(layer.weights)
    n_trainable = (n_weights - expected_num_non_trainable if expected_num_trainable is None
                   else expected_num_trainable)
    assert len(layer.trainable_weights) == n_trainable
    assert len(layer.non_trainable_weights) == expected_num_non_trainable

    # 3. eager call
    y = layer(data)
    assert y.shape == tuple(expected_output_shape), (
        f"{cls.__name__}: eager output {y.shape}, expected {expected_output_shape}")
    assert np.all(np.isfinite(y))

    # 4. config round trip
    config = layer.get_config()
    text = json.dumps(config)
    for rebuilt in (cls.from_config(copy.deepcopy(config)), cls.from_config(json.loads(text))):
        assert json.dumps(rebuilt.get_config()) == text
        rebuilt(_placeholders(data))
        rebuilt.set_weights(layer.get_weights())
        np.testing.assert_allclose(rebuilt(data), y, rtol=rtol, atol=atol)

    # 5. one training step
    _training_step(layer, data, y, expect_training_updates)
    return layer


def _training_step(layer: Any, data: Any, y: np.ndarray, expect_updates: bool) -> None:
    rng = np.random.default_rng(1)
    phs = _placeholders(data)
    key = kiln.placeholder((2,), "int64", name="rng_key")
    with trace(training=False) as ctx:
        layer(_placeholders(data))
    assert ctx.updates == [], "an inference trace must not record updates"
    with trace(training=True, rng_key=key) as ctx:
        out = layer(phs)
    target = K.constant(rng.normal(size=y.shape).astype(out.dtype))
    loss = K.mean(K.square(out - target))
    for extra in list(layer.losses) + list(ctx.losses):
        loss = loss + extra
    trainable = layer.trainable_weights
    grads = kiln.grad(loss, trainable) if trainable else []
    lr = K.constant(0.1, out.dtype)
    updates = [(w, w - lr * g) for w, g in zip(trainable, grads)] + list(ctx.updates)
    if not expect_updates:
        assert ctx.updates == [], "unexpected updates recorded in the training trace"
    before = [w.numpy() for w in layer.weights]
    step = kiln.function(_flat(phs) + [key], loss, updates=updates, backend=BACKEND)
    value = step(*_flat(data), np.array([3, 0], np.int64))
    assert np.isfinite(value)
    for w, old in zip(layer.weights, before):
        changed = not np.array_equal(w.numpy(), old)
        if w in trainable:
            assert changed, f"trainable weight {w.name} did not change in a training step"
        else:
            assert changed == expect_updates, (
                f"non-trainable weight {w.name}: changed={changed}, expected {expect_updates}")
