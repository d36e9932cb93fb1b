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
    HashedCrossing,
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
    "TextVectorization", "HashedCrossing",
]

# Keras' layers.serialize / deserialize (kiln/layers/serialization.py)
from kiln.layers.serialization import deserialize, serialize  # noqa: E402

__all__ += ["serialize", "deserialize"]

# the missing Keras 3.15 layers (issue 44)
from kiln.layers.convolutional3d import (  # noqa: E402
    Conv3D,
    Conv3DTranspose,
    Convolution3D,
    Convolution3DTranspose,
)
from kiln.layers.pooling3d import (  # noqa: E402
    AdaptiveAveragePooling1D,
    AdaptiveAveragePooling2D,
    AdaptiveAveragePooling3D,
    AdaptiveMaxPooling1D,
    AdaptiveMaxPooling2D,
    AdaptiveMaxPooling3D,
    AveragePooling3D,
    AvgPool3D,
    GlobalAveragePooling3D,
    GlobalAvgPool3D,
    GlobalMaxPool3D,
    GlobalMaxPooling3D,
    MaxPool3D,
    MaxPooling3D,
)
from kiln.layers.reshaping3d import (  # noqa: E402
    Cropping3D,
    SpatialDropout3D,
    UpSampling3D,
    ZeroPadding3D,
)

__all__ += [
    "Conv3D", "Conv3DTranspose", "Convolution3D", "Convolution3DTranspose",
    "MaxPooling3D", "MaxPool3D", "AveragePooling3D", "AvgPool3D", "GlobalAveragePooling3D",
    "GlobalAvgPool3D", "GlobalMaxPooling3D", "GlobalMaxPool3D",
    "AdaptiveAveragePooling1D", "AdaptiveAveragePooling2D", "AdaptiveAveragePooling3D",
    "AdaptiveMaxPooling1D", "AdaptiveMaxPooling2D", "AdaptiveMaxPooling3D",
    "ZeroPadding3D", "Cropping3D", "UpSampling3D", "SpatialDropout3D",
]
from kiln.layers.input_spec import InputSpec  # noqa: E402
from kiln.layers.regularization_more import (  # noqa: E402
    ActivityRegularization,
    AlphaDropout,
    RMSNormalization,
)
from kiln.layers.wrapper import (  # noqa: E402
    FlaxLayer,
    JaxLayer,
    Pipeline,
    TFSMLayer,
    TorchModuleWrapper,
    Wrapper,
)

__all__ += [
    "InputSpec", "ActivityRegularization", "AlphaDropout", "RMSNormalization", "Wrapper",
    "Pipeline", "JaxLayer", "FlaxLayer", "TorchModuleWrapper", "TFSMLayer",
]
from kiln.layers.augment_color import (  # noqa: E402
    AutoContrast,
    RandomColorDegeneration,
    RandomColorJitter,
    RandomGrayscale,
    RandomHue,
    RandomInvert,
    RandomPosterization,
    RandomSaturation,
    RandomSharpness,
    Solarization,
)

__all__ += [
    "AutoContrast", "RandomColorDegeneration", "RandomColorJitter", "RandomGrayscale",
    "RandomHue", "RandomInvert", "RandomPosterization", "RandomSaturation", "RandomSharpness",
    "Solarization",
]
from kiln.layers.attention_gqa import GroupQueryAttention  # noqa: E402
from kiln.layers.rnn_more import ReversibleEmbedding, StackedRNNCells  # noqa: E402

__all__ += ["GroupQueryAttention", "ReversibleEmbedding", "StackedRNNCells"]
from kiln.layers.conv_lstm import ConvLSTM1D, ConvLSTM2D, ConvLSTM3D  # noqa: E402

__all__ += ["ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D"]
from kiln.layers.spectral_normalization import SpectralNormalization  # noqa: E402

__all__ += ["SpectralNormalization"]
from kiln.layers.augment_more import Equalization, RandomErasing, RandomGaussianBlur  # noqa: E402

__all__ += ["Equalization", "RandomErasing", "RandomGaussianBlur"]
from kiln.layers.augment_mix import CutMix, MixUp  # noqa: E402

__all__ += ["CutMix", "MixUp"]
from kiln.layers.augment_geometric import (  # noqa: E402
    MaxNumBoundingBoxes,
    RandomPerspective,
    RandomShear,
)

__all__ += ["MaxNumBoundingBoxes", "RandomPerspective", "RandomShear"]
from kiln.layers.spectrogram import MelSpectrogram, STFTSpectrogram  # noqa: E402

__all__ += ["MelSpectrogram", "STFTSpectrogram"]
from kiln.layers.augment_policy import AugMix, RandAugment  # noqa: E402

__all__ += ["AugMix", "RandAugment"]
from kiln.layers.preprocessing.clahe import (  # noqa: E402
    ContrastLimitedAdaptiveHistogramEqualization,
)

__all__ += ["ContrastLimitedAdaptiveHistogramEqualization"]
from kiln.layers.preprocessing.elastic import RandomElasticTransform  # noqa: E402

__all__ += ["RandomElasticTransform"]
# tf.keras 2.x's experimental RandomFourierFeatures (keras.io's Quasi-SVM example; not in Keras 3)
from kiln.layers.kernelized import RandomFourierFeatures  # noqa: E402

__all__ += ["RandomFourierFeatures"]
