"""Clear errors: each names the layer and quotes the shape (or value) received."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln import layers as L


def ph(*shape, dtype="float32"):
    return kiln.placeholder(shape, dtype)


def test_dense_wrong_rank_and_last_dim() -> None:
    layer = L.Dense(3, name="head")
    with pytest.raises(ValueError, match=r"'head'.*min_ndim=2.*ndim=1.*\(None,\)"):
        layer(ph(None))
    layer(ph(None, 5))
    with pytest.raises(ValueError, match=r"'head'.*value 5.*\(None, 6\)"):
        layer(ph(None, 6))
    with pytest.raises(ValueError, match=r"'head'.*value 5.*\(None, 4\)"):
        layer(np.zeros((2, 4), np.float32))  # eager calls are checked too
    with pytest.raises(ValueError, match="known last dimension"):
        L.Dense(3)(ph(None, None))


@pytest.mark.parametrize("layer,shape,rank", [
    (L.Conv2D(2, 3, name="c2"), (None, 8, 8), 4),
    (L.Conv1D(2, 3, name="c1"), (None, 8, 8, 1), 3),
    (L.Conv2DTranspose(2, 3, name="ct"), (None, 8), 4),
    (L.MaxPooling2D(name="mp"), (None, 8, 8), 4),
    (L.AveragePooling1D(2, name="ap"), (None, 8), 3),
    (L.GlobalAveragePooling2D(name="gap"), (None, 8, 3), 4),
    (L.ZeroPadding2D(name="zp"), (None, 8, 3), 4),
    (L.UpSampling2D(name="up"), (None, 8, 3), 4),
    (L.RepeatVector(2, name="rv"), (None, 2, 3), 2),
    (L.Permute((2, 1), name="pm"), (None, 2), 3),
])
def test_wrong_rank_names_layer_and_shape(layer, shape, rank) -> None:
    text = "(" + ", ".join("None" if d is None else str(d) for d in shape) + \
        ("," if len(shape) == 1 else "") + ")"
    with pytest.raises(ValueError, match=rf"'{layer.name}'.*ndim={rank}.*{re.escape(text)}"):
        layer(ph(*shape))


def test_conv_wrong_channels_after_build() -> None:
    layer = L.Conv2D(4, 3, name="conv")
    layer(ph(None, 8, 8, 3))
    with pytest.raises(ValueError, match=r"'conv'.*value 3.*\(None, 8, 8, 2\)"):
        layer(ph(None, 8, 8, 2))


@pytest.mark.parametrize("cls,args", [
    (L.ConvLSTM2D, (2, 3)), (L.ConvLSTM1D, (2, 3)), (L.Resizing, (4, 4)),
    (L.SpatialDropout3D, (0.1,))])
def test_channels_first_is_refused_where_the_layer_cannot_run_it(cls, args) -> None:
    """The spatial layers run channels_first (tests/layers/test_channels_first.py)."""
    with pytest.raises(ValueError, match=rf"{cls.__name__}: data_format='channels_first' is not "
                                         "supported.*channels_last"):
        cls(*args, data_format="channels_first")


def test_invalid_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="padding must be one of 'valid', 'same'"):
        L.Conv2D(2, 3, padding="full")
    with pytest.raises(ValueError, match="kernel_size"):
        L.Conv2D(2, (3, 3, 3))
    with pytest.raises(ValueError, match="groups"):
        L.Conv2D(3, 3, groups=2)  # 3 filters do not split into 2 groups
    with pytest.raises(ValueError, match="dilation_rate"):
        L.Conv2D(2, 3, strides=2, dilation_rate=2)
    with pytest.raises(ValueError, match="output_padding"):
        L.Conv2DTranspose(2, 3, strides=2, output_padding=2)
    with pytest.raises(ValueError, match="units"):
        L.Dense(0)
    with pytest.raises(ValueError, match="rate"):
        L.Dropout(1.0)
    with pytest.raises(ValueError, match="invalid kernel_constraint: Unknown constraint"):
        L.Dense(2, kernel_constraint="max_nrom")
    with pytest.raises(ValueError, match="permutation"):
        L.Permute((1, 3))
    with pytest.raises(TypeError, match="unexpected keyword"):
        L.Dense(2, kernel_init="zeros")


def test_reshape_size_mismatch() -> None:
    with pytest.raises(ValueError, match=r"'rs'.*\(None, 3, 4\).*\(5, 2\)"):
        L.Reshape((5, 2), name="rs")(ph(None, 3, 4))
    with pytest.raises(ValueError, match=r"'rs2'.*unchanged.*\(None, 7\)"):
        L.Reshape((-1, 2), name="rs2")(ph(None, 7))


def test_merge_shape_errors_name_layer_and_shapes() -> None:
    with pytest.raises(ValueError, match=r"'add_x'.*incompatible.*\[\(None, 3\), \(None, 4\)\]"):
        L.Add(name="add_x")([ph(None, 3), ph(None, 4)])
    with pytest.raises(ValueError, match=r"'cat'.*except for the concatenation axis.*"
                                         r"\[\(None, 2, 3\), \(None, 4, 5\)\]"):
        L.Concatenate(axis=-1, name="cat")([ph(None, 2, 3), ph(None, 4, 5)])
    with pytest.raises(ValueError, match=r"'sub'.*exactly 2 inputs, received 3"):
        L.Subtract(name="sub")([ph(None, 2)] * 3)
    with pytest.raises(ValueError, match=r"'mul'.*list of tensors.*\(None, 2\)"):
        L.Multiply(name="mul")(ph(None, 2))
    with pytest.raises(ValueError, match="at least 2"):
        L.Maximum()([ph(None, 2)])


def test_normalization_errors() -> None:
    bn = L.BatchNormalization(name="bn")
    bn(ph(None, 4))
    with pytest.raises(ValueError, match=r"'bn'.*value 4.*\(None, 5\)"):
        bn(ph(None, 5))
    with pytest.raises(ValueError, match=r"'bn2'.*known sizes.*\(None, None\)"):
        L.BatchNormalization(name="bn2")(ph(None, None))
    with pytest.raises(ValueError, match=r"'ln'.*axis 3 is out of range.*rank 2"):
        L.LayerNormalization(axis=3, name="ln")(ph(None, 4))


def test_set_weights_checks_shapes() -> None:
    layer = L.Dense(2)
    layer(ph(None, 3))
    with pytest.raises(ValueError, match=r"shape \(3, 2\), received \(2, 2\)"):
        layer.set_weights([np.zeros((2, 2)), np.zeros(2)])
