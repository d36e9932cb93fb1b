"""Keras-style layers (Keras 3 names, arguments and defaults), channels-last.

Example:
    >>> import kiln
    >>> x = kiln.layers.Input((28, 28, 1))
    >>> y = kiln.layers.Conv2D(32, 3, activation="relu")(x)
    >>> y = kiln.layers.MaxPooling2D()(y)
    >>> y = kiln.layers.Dense(10, activation="softmax")(kiln.layers.Flatten()(y))
"""

from kiln.layers.attention import AdditiveAttention, Attention, EinsumDense, MultiHeadAttention
from kiln.layers.base import Layer
from kiln.layers.convolutional import Conv1D, Conv2D, Conv2DTranspose
from kiln.layers.core import Activation, Dense, Dropout, Embedding, Lambda, Masking
from kiln.layers.input_layer import Input, InputLayer
from kiln.layers.merging import Add, Average, Concatenate, Maximum, Minimum, Multiply, Subtract
from kiln.layers.normalization import BatchNormalization, LayerNormalization
from kiln.layers.pooling import (
    AveragePooling1D,
    AveragePooling2D,
    AvgPool1D,
    AvgPool2D,
    GlobalAveragePooling1D,
    GlobalAveragePooling2D,
    GlobalAvgPool1D,
    GlobalAvgPool2D,
    GlobalMaxPool1D,
    GlobalMaxPool2D,
    GlobalMaxPooling1D,
    GlobalMaxPooling2D,
    MaxPool1D,
    MaxPool2D,
    MaxPooling1D,
    MaxPooling2D,
)
from kiln.layers.reshaping import (
    Flatten,
    Permute,
    RepeatVector,
    Reshape,
    UpSampling2D,
    ZeroPadding2D,
)
from kiln.layers.rnn import GRU, LSTM, RNN, SimpleRNN
from kiln.layers.rnn_cells import GRUCell, LSTMCell, SimpleRNNCell
from kiln.layers.wrappers import Bidirectional, TimeDistributed

Convolution1D, Convolution2D, Convolution2DTranspose = Conv1D, Conv2D, Conv2DTranspose

__all__ = [
    "Layer", "Input", "InputLayer",
    "Dense", "Activation", "Dropout", "Embedding", "Lambda", "Masking",
    "RNN", "SimpleRNN", "LSTM", "GRU", "SimpleRNNCell", "LSTMCell", "GRUCell",
    "Bidirectional", "TimeDistributed",
    "Flatten", "Reshape", "Permute", "RepeatVector", "ZeroPadding2D", "UpSampling2D",
    "Conv1D", "Conv2D", "Conv2DTranspose",
    "Convolution1D", "Convolution2D", "Convolution2DTranspose",
    "MaxPooling1D", "MaxPooling2D", "AveragePooling1D", "AveragePooling2D",
    "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "MaxPool1D", "MaxPool2D", "AvgPool1D", "AvgPool2D", "GlobalAvgPool1D", "GlobalAvgPool2D",
    "GlobalMaxPool1D", "GlobalMaxPool2D",
    "BatchNormalization", "LayerNormalization",
    "Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Concatenate",
    "EinsumDense", "MultiHeadAttention", "Attention", "AdditiveAttention",
]

# more layers (issue 15)
from kiln.layers.activation_layers import ELU, Identity, LeakyReLU, PReLU, ReLU, Softmax  # noqa: E402
from kiln.layers.convolutional import Conv1DTranspose  # noqa: E402
from kiln.layers.convolutional_depthwise import (  # noqa: E402
    DepthwiseConv1D,
    DepthwiseConv2D,
    SeparableConv1D,
    SeparableConv2D,
)
from kiln.layers.merging import (  # noqa: E402
    Dot,
    add,
    average,
    concatenate,
    dot,
    maximum,
    minimum,
    multiply,
    subtract,
)
from kiln.layers.noise import (  # noqa: E402
    GaussianDropout,
    GaussianNoise,
    SpatialDropout1D,
    SpatialDropout2D,
)
from kiln.layers.normalization_more import GroupNormalization, UnitNormalization  # noqa: E402
from kiln.layers.reshaping import Cropping1D, Cropping2D, UpSampling1D, ZeroPadding1D  # noqa: E402

Convolution1DTranspose = Conv1DTranspose
SeparableConvolution1D, SeparableConvolution2D = SeparableConv1D, SeparableConv2D
__all__ += [
    "ReLU", "LeakyReLU", "ELU", "PReLU", "Softmax", "Identity",
    "Conv1DTranspose", "Convolution1DTranspose", "DepthwiseConv1D", "DepthwiseConv2D",
    "SeparableConv1D", "SeparableConv2D", "SeparableConvolution1D", "SeparableConvolution2D",
    "Dot", "add", "subtract", "multiply", "average", "maximum", "minimum", "concatenate", "dot",
    "GaussianNoise", "GaussianDropout", "SpatialDropout1D", "SpatialDropout2D",
    "UnitNormalization", "GroupNormalization",
    "Cropping1D", "Cropping2D", "ZeroPadding1D", "UpSampling1D",
]

# preprocessing (kiln/layers/preprocessing)
from kiln.layers.preprocessing import (  # noqa: E402
    CategoryEncoding,
    CenterCrop,
    Discretization,
    Hashing,
    IntegerLookup,
    Normalization,
    RandomBrightness,
    RandomContrast,
    RandomCrop,
    RandomFlip,
    RandomRotation,
    RandomTranslation,
    RandomZoom,
    Rescaling,
    Resizing,
    StringLookup,
    TextVectorization,
)

__all__ += [
    "Rescaling", "Normalization", "Discretization", "CategoryEncoding", "Resizing", "CenterCrop",
    "RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation", "RandomContrast",
    "RandomBrightness", "RandomCrop", "StringLookup", "IntegerLookup", "Hashing",
    "TextVectorization",
]

# Keras' layers.serialize / deserialize (kiln/layers/serialization.py)
from kiln.layers.serialization import deserialize, serialize  # noqa: E402

__all__ += ["serialize", "deserialize"]
