"""Every layer through ``run_layer_test``: shape rules, parameter counts, config round trip
and a training step. One row per configuration; the expected shapes are worked out by hand
from the Keras shape rules quoted in each row's comment."""

from __future__ import annotations

import pytest
from layer_helpers import run_layer_test

from kiln import layers as L

# (class, kwargs, input shape, expected output shape, parameter count, extra options)
CASES = [
    # Dense: (..., in) -> (..., units); in * units + units parameters
    (L.Dense, {"units": 512}, (2, 784), (2, 512), 401_920, {}),
    (L.Dense, {"units": 4, "activation": "relu", "use_bias": False}, (2, 3, 5), (2, 3, 4), 20,
     {}),
    (L.Dense, {"units": 4, "activation": "gelu", "kernel_regularizer": "l2",
               "bias_regularizer": "l1", "activity_regularizer": "l1",
               "kernel_initializer": "he_normal", "bias_initializer": "ones"},
     (3, 6), (3, 4), 28, {}),
    (L.Activation, {"activation": "tanh"}, (2, 3), (2, 3), 0, {}),
    (L.Dropout, {"rate": 0.5}, (2, 3, 4), (2, 3, 4), 0, {}),
    (L.Dropout, {"rate": 0.3, "noise_shape": (None, 1, 4), "seed": 7}, (2, 3, 4), (2, 3, 4), 0,
     {}),
    # Flatten: (batch, d1, d2) -> (batch, d1 * d2)
    (L.Flatten, {}, (2, 3, 4), (2, 12), 0, {}),
    (L.Flatten, {}, (2,), (2, 1), 0, {}),
    (L.Reshape, {"target_shape": (4, 3)}, (2, 12), (2, 4, 3), 0, {}),
    (L.Reshape, {"target_shape": (-1, 2)}, (2, 3, 4), (2, 6, 2), 0, {}),
    # Permute: 1-indexed sample axes
    (L.Permute, {"dims": (2, 1)}, (2, 3, 4), (2, 4, 3), 0, {}),
    (L.Permute, {"dims": (3, 1, 2)}, (2, 3, 4, 5), (2, 5, 3, 4), 0, {}),
    (L.RepeatVector, {"n": 3}, (2, 4), (2, 3, 4), 0, {}),
    # Embedding: (batch, ...) ints -> (batch, ..., output_dim); input_dim * output_dim
    (L.Embedding, {"input_dim": 10, "output_dim": 4}, (2, 5), (2, 5, 4), 40,
     {"input_dtype": "int32"}),
    (L.Embedding, {"input_dim": 7, "output_dim": 3, "embeddings_regularizer": "l2"}, (2, 2, 3),
     (2, 2, 3, 3), 21, {"input_dtype": "int64", "int_high": 7}),
    # Conv1D: valid (n - keff) // s + 1; same ceil(n / s); causal n; k * cin * f + f
    (L.Conv1D, {"filters": 4, "kernel_size": 3}, (2, 10, 3), (2, 8, 4), 40, {}),
    (L.Conv1D, {"filters": 4, "kernel_size": 3, "strides": 2, "padding": "same"}, (2, 10, 3),
     (2, 5, 4), 40, {}),
    (L.Conv1D, {"filters": 2, "kernel_size": 3, "padding": "causal", "dilation_rate": 2,
                "activation": "relu", "use_bias": False}, (2, 10, 3), (2, 10, 2), 18, {}),
    # Conv2D: per axis as Conv1D; kh * kw * cin * f + f
    (L.Conv2D, {"filters": 8, "kernel_size": 3}, (2, 7, 7, 3), (2, 5, 5, 8), 224, {}),
    (L.Conv2D, {"filters": 4, "kernel_size": (3, 2), "strides": 2, "padding": "same"},
     (2, 7, 7, 3), (2, 4, 4, 4), 76, {}),
    (L.Conv2D, {"filters": 4, "kernel_size": 3, "dilation_rate": 2, "kernel_regularizer": "l2",
                "activity_regularizer": "l2"}, (2, 7, 7, 3), (2, 3, 3, 4), 112, {}),
    # Conv2DTranspose: same n * s; valid n * s + max(keff - s, 0);
    # with output_padding (n - 1) * s + keff - 2 * pad + output_padding; kh * kw * f * cin + f
    (L.Conv2DTranspose, {"filters": 4, "kernel_size": 3, "strides": 2, "padding": "same"},
     (2, 5, 5, 3), (2, 10, 10, 4), 112, {}),
    (L.Conv2DTranspose, {"filters": 4, "kernel_size": 3, "strides": 2}, (2, 5, 5, 3),
     (2, 11, 11, 4), 112, {}),
    (L.Conv2DTranspose, {"filters": 2, "kernel_size": (3, 2), "strides": 2,
                         "output_padding": 1}, (2, 5, 4, 3), (2, 12, 9, 2), 38, {}),
    # Pooling: valid (n - p) // s + 1; same ceil(n / s); strides default to pool_size
    (L.MaxPooling1D, {}, (2, 10, 3), (2, 5, 3), 0, {}),
    (L.AveragePooling1D, {"pool_size": 3, "strides": 2, "padding": "same"}, (2, 10, 3),
     (2, 5, 3), 0, {}),
    (L.MaxPooling2D, {}, (2, 6, 6, 3), (2, 3, 3, 3), 0, {}),
    (L.MaxPooling2D, {"pool_size": 3, "strides": 2, "padding": "same"}, (2, 7, 7, 3),
     (2, 4, 4, 3), 0, {}),
    (L.AveragePooling2D, {"pool_size": (3, 3), "strides": 2}, (2, 7, 7, 3), (2, 3, 3, 3), 0,
     {}),
    (L.GlobalAveragePooling1D, {}, (2, 5, 3), (2, 3), 0, {}),
    (L.GlobalMaxPooling1D, {"keepdims": True}, (2, 5, 3), (2, 1, 3), 0, {}),
    (L.GlobalAveragePooling2D, {"keepdims": True}, (2, 4, 4, 3), (2, 1, 1, 3), 0, {}),
    (L.GlobalMaxPooling2D, {}, (2, 4, 4, 3), (2, 3), 0, {}),
    (L.ZeroPadding2D, {"padding": ((1, 2), (3, 0))}, (2, 4, 4, 3), (2, 7, 7, 3), 0, {}),
    (L.ZeroPadding2D, {}, (2, 4, 4, 3), (2, 6, 6, 3), 0, {}),
    (L.UpSampling2D, {"size": (2, 3)}, (2, 3, 4, 2), (2, 6, 12, 2), 0, {}),
    # BatchNormalization: 4 * channels (gamma, beta trainable; moving stats not)
    (L.BatchNormalization, {}, (4, 3), (4, 3), 12,
     {"expected_num_non_trainable": 2, "expect_training_updates": True}),
    (L.BatchNormalization, {"momentum": 0.9, "gamma_regularizer": "l2"}, (4, 5, 5, 3),
     (4, 5, 5, 3), 12, {"expected_num_non_trainable": 2, "expect_training_updates": True}),
    (L.BatchNormalization, {"axis": 1, "center": False}, (4, 3, 5), (4, 3, 5), 9,
     {"expected_num_non_trainable": 2, "expect_training_updates": True}),
    # LayerNormalization: 2 * prod(normalized dims)
    (L.LayerNormalization, {}, (2, 3, 4), (2, 3, 4), 8, {}),
    (L.LayerNormalization, {"axis": [1, 2], "epsilon": 1e-5}, (2, 3, 4), (2, 3, 4), 24, {}),
    (L.LayerNormalization, {"rms_scaling": True}, (2, 3, 4), (2, 3, 4), 4, {}),
    # Merging: elementwise (broadcasting size-1 dims); Concatenate sums the axis
    (L.Add, {}, [(2, 3), (2, 3), (2, 3)], (2, 3), 0, {}),
    (L.Add, {}, [(2, 3, 4), (2, 1, 4)], (2, 3, 4), 0, {}),
    (L.Subtract, {}, [(2, 3), (2, 3)], (2, 3), 0, {}),
    (L.Multiply, {}, [(2, 3), (2, 3)], (2, 3), 0, {}),
    (L.Average, {}, [(2, 3), (2, 3)], (2, 3), 0, {}),
    (L.Maximum, {}, [(2, 3), (2, 3)], (2, 3), 0, {}),
    (L.Minimum, {}, [(2, 3), (2, 3)], (2, 3), 0, {}),
    (L.Concatenate, {}, [(2, 3), (2, 5)], (2, 8), 0, {}),
    (L.Concatenate, {"axis": 1}, [(2, 2, 3), (2, 4, 3)], (2, 6, 3), 0, {}),
]


def _id(case: tuple) -> str:
    cls, kwargs = case[0], case[1]
    args = ",".join(f"{k}={v}" for k, v in kwargs.items())
    return f"{cls.__name__}({args})"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_layer(case: tuple) -> None:
    cls, kwargs, in_shape, out_shape, n_params, options = case
    run_layer_test(cls, kwargs, in_shape, out_shape, n_params, **options)


def test_layer_float64() -> None:
    run_layer_test(L.Dense, {"units": 3}, (2, 4), (2, 3), 15, dtype="float64")
    run_layer_test(L.Conv2D, {"filters": 2, "kernel_size": 2}, (2, 3, 3, 1), (2, 2, 2, 2), 10,
                   dtype="float64")
