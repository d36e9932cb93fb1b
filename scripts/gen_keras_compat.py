"""Writes docs/keras-compatibility.md: which Keras 3 names kiln has, family by family, and
the hand-written notes on what differs and why.

The Keras names are embedded below (``KERAS_NAMES``: the public names of ``keras.<family>``
in Keras 3, as listed on keras.io/api), since Keras is not importable next to kiln. kiln's
names are read from its modules. Run it after changing kiln's public API::

    python scripts/gen_keras_compat.py            # rewrites docs/keras-compatibility.md
    python scripts/gen_keras_compat.py --check    # exit 1 if the file is out of date

``tests/programs/test_keras_compat_doc.py`` regenerates into a temp file and compares.
"""

# ruff: noqa: E501  (the markdown table rows in HEADER are long lines by nature)

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "keras-compatibility.md"

# Keras 3's public names (keras.io/api), per family, as of this version:
KERAS_VERSION = '3.15.1'
KERAS_NAMES = {
    'layers': (
        'Activation', 'ActivityRegularization', 'AdaptiveAveragePooling1D',
        'AdaptiveAveragePooling2D', 'AdaptiveAveragePooling3D', 'AdaptiveMaxPooling1D',
        'AdaptiveMaxPooling2D', 'AdaptiveMaxPooling3D', 'Add', 'AdditiveAttention',
        'AlphaDropout', 'Attention', 'AugMix', 'AutoContrast', 'Average', 'AveragePooling1D',
        'AveragePooling2D', 'AveragePooling3D', 'AvgPool1D', 'AvgPool2D', 'AvgPool3D',
        'BatchNormalization', 'Bidirectional', 'CategoryEncoding', 'CenterCrop', 'Concatenate',
        'ContrastLimitedAdaptiveHistogramEqualization', 'Conv1D', 'Conv1DTranspose', 'Conv2D',
        'Conv2DTranspose', 'Conv3D', 'Conv3DTranspose', 'ConvLSTM1D', 'ConvLSTM2D', 'ConvLSTM3D',
        'Convolution1D', 'Convolution1DTranspose', 'Convolution2D', 'Convolution2DTranspose',
        'Convolution3D', 'Convolution3DTranspose', 'Cropping1D', 'Cropping2D', 'Cropping3D',
        'CutMix', 'Dense', 'DepthwiseConv1D', 'DepthwiseConv2D', 'Discretization', 'Dot',
        'Dropout', 'ELU', 'EinsumDense', 'Embedding', 'Equalization', 'Flatten', 'FlaxLayer',
        'GRU', 'GRUCell', 'GaussianDropout', 'GaussianNoise', 'GlobalAveragePooling1D',
        'GlobalAveragePooling2D', 'GlobalAveragePooling3D', 'GlobalAvgPool1D', 'GlobalAvgPool2D',
        'GlobalAvgPool3D', 'GlobalMaxPool1D', 'GlobalMaxPool2D', 'GlobalMaxPool3D',
        'GlobalMaxPooling1D', 'GlobalMaxPooling2D', 'GlobalMaxPooling3D', 'GroupNormalization',
        'GroupQueryAttention', 'HashedCrossing', 'Hashing', 'Identity', 'Input', 'InputLayer',
        'InputSpec', 'IntegerLookup', 'JaxLayer', 'LSTM', 'LSTMCell', 'Lambda', 'Layer',
        'LayerNormalization', 'LeakyReLU', 'Masking', 'MaxNumBoundingBoxes', 'MaxPool1D',
        'MaxPool2D', 'MaxPool3D', 'MaxPooling1D', 'MaxPooling2D', 'MaxPooling3D', 'Maximum',
        'MelSpectrogram', 'Minimum', 'MixUp', 'MultiHeadAttention', 'Multiply', 'Normalization',
        'PReLU', 'Permute', 'Pipeline', 'RMSNormalization', 'RNN', 'RandAugment',
        'RandomBrightness', 'RandomColorDegeneration', 'RandomColorJitter', 'RandomContrast',
        'RandomCrop', 'RandomElasticTransform', 'RandomErasing', 'RandomFlip',
        'RandomGaussianBlur', 'RandomGrayscale', 'RandomHue', 'RandomInvert', 'RandomPerspective',
        'RandomPosterization', 'RandomRotation', 'RandomSaturation', 'RandomSharpness',
        'RandomShear', 'RandomTranslation', 'RandomZoom', 'ReLU', 'RepeatVector', 'Rescaling',
        'Reshape', 'Resizing', 'ReversibleEmbedding', 'STFTSpectrogram', 'SeparableConv1D',
        'SeparableConv2D', 'SeparableConvolution1D', 'SeparableConvolution2D', 'SimpleRNN',
        'SimpleRNNCell', 'Softmax', 'Solarization', 'SpatialDropout1D', 'SpatialDropout2D',
        'SpatialDropout3D', 'SpectralNormalization', 'StackedRNNCells', 'StringLookup',
        'Subtract', 'TFSMLayer', 'TextVectorization', 'TimeDistributed', 'TorchModuleWrapper',
        'UnitNormalization', 'UpSampling1D', 'UpSampling2D', 'UpSampling3D', 'Wrapper',
        'ZeroPadding1D', 'ZeroPadding2D', 'ZeroPadding3D', 'add', 'average', 'concatenate',
        'deserialize', 'dot', 'maximum', 'minimum', 'multiply', 'serialize', 'subtract',
    ),
    'losses': (
        'BinaryCrossentropy', 'BinaryFocalCrossentropy', 'CTC', 'CategoricalCrossentropy',
        'CategoricalFocalCrossentropy', 'CategoricalGeneralizedCrossEntropy', 'CategoricalHinge',
        'Circle', 'CosineSimilarity', 'Dice', 'Hinge', 'Huber', 'KLDivergence', 'LogCosh', 'Loss',
        'MeanAbsoluteError', 'MeanAbsolutePercentageError', 'MeanSquaredError',
        'MeanSquaredLogarithmicError', 'Poisson', 'SparseCategoricalCrossentropy', 'SquaredHinge',
        'Tversky', 'binary_crossentropy', 'binary_focal_crossentropy', 'categorical_crossentropy',
        'categorical_focal_crossentropy', 'categorical_generalized_cross_entropy',
        'categorical_hinge', 'circle', 'cosine_similarity', 'ctc', 'deserialize', 'dice', 'get',
        'hinge', 'huber', 'kl_divergence', 'log_cosh', 'mean_absolute_error',
        'mean_absolute_percentage_error', 'mean_squared_error', 'mean_squared_logarithmic_error',
        'poisson', 'serialize', 'sparse_categorical_crossentropy', 'squared_hinge', 'tversky',
    ),
    'metrics': (
        'AUC', 'Accuracy', 'BinaryAccuracy', 'BinaryCrossentropy', 'BinaryIoU',
        'CategoricalAccuracy', 'CategoricalCrossentropy', 'CategoricalHinge',
        'ConcordanceCorrelation', 'CosineSimilarity', 'F1Score', 'FBetaScore', 'FalseNegatives',
        'FalsePositives', 'Hinge', 'IoU', 'KLDivergence', 'LogCoshError', 'Mean',
        'MeanAbsoluteError', 'MeanAbsolutePercentageError', 'MeanIoU', 'MeanMetricWrapper',
        'MeanSquaredError', 'MeanSquaredLogarithmicError', 'Metric', 'OneHotIoU', 'OneHotMeanIoU',
        'PearsonCorrelation', 'Poisson', 'Precision', 'PrecisionAtRecall', 'R2Score', 'Recall',
        'RecallAtPrecision', 'RootMeanSquaredError', 'SensitivityAtSpecificity',
        'SparseCategoricalAccuracy', 'SparseCategoricalCrossentropy',
        'SparseTopKCategoricalAccuracy', 'SpecificityAtSensitivity', 'SquaredHinge', 'Sum',
        'TopKCategoricalAccuracy', 'TrueNegatives', 'TruePositives', 'binary_accuracy',
        'binary_crossentropy', 'binary_focal_crossentropy', 'categorical_accuracy',
        'categorical_crossentropy', 'categorical_focal_crossentropy', 'categorical_hinge',
        'concordance_correlation', 'deserialize', 'get', 'hinge', 'huber', 'kl_divergence',
        'log_cosh', 'mean_absolute_error', 'mean_absolute_percentage_error', 'mean_squared_error',
        'mean_squared_logarithmic_error', 'pearson_correlation', 'poisson', 'serialize',
        'sparse_categorical_accuracy', 'sparse_categorical_crossentropy',
        'sparse_top_k_categorical_accuracy', 'squared_hinge', 'top_k_categorical_accuracy',
    ),
    'optimizers': (
        'Adadelta', 'Adafactor', 'Adagrad', 'Adam', 'AdamW', 'Adamax', 'Ftrl', 'Lamb', 'Lion',
        'LossScaleOptimizer', 'MultiOptimizer', 'Muon', 'Nadam', 'Optimizer', 'OptimizerMap',
        'RMSprop', 'SGD', 'ScheduleFreeAdamW', 'deserialize', 'get', 'serialize',
    ),
    'callbacks': (
        'BackupAndRestore', 'CSVLogger', 'Callback', 'CallbackList', 'EarlyStopping', 'History',
        'LambdaCallback', 'LearningRateScheduler', 'ModelCheckpoint', 'OrbaxCheckpoint',
        'ProgbarLogger', 'ReduceLROnPlateau', 'RemoteMonitor', 'SwapEMAWeights', 'TensorBoard',
        'TerminateOnNaN',
    ),
    'activations': (
        'celu', 'deserialize', 'elu', 'exponential', 'gelu', 'get', 'glu', 'hard_shrink',
        'hard_sigmoid', 'hard_silu', 'hard_swish', 'hard_tanh', 'leaky_relu', 'linear',
        'log_sigmoid', 'log_softmax', 'mish', 'relu', 'relu6', 'selu', 'serialize', 'sigmoid',
        'silu', 'soft_shrink', 'softmax', 'softplus', 'softsign', 'sparse_plus', 'sparse_sigmoid',
        'sparsemax', 'squareplus', 'swish', 'tanh', 'tanh_shrink', 'threshold',
    ),
    'initializers': (
        'Constant', 'GlorotNormal', 'GlorotUniform', 'HeNormal', 'HeUniform', 'Identity',
        'IdentityInitializer', 'Initializer', 'LecunNormal', 'LecunUniform', 'Ones', 'Orthogonal',
        'OrthogonalInitializer', 'RandomNormal', 'RandomUniform', 'STFT', 'STFTInitializer',
        'TruncatedNormal', 'VarianceScaling', 'Zeros', 'constant', 'deserialize', 'get',
        'glorot_normal', 'glorot_uniform', 'he_normal', 'he_uniform', 'identity', 'lecun_normal',
        'lecun_uniform', 'ones', 'orthogonal', 'random_normal', 'random_uniform', 'serialize',
        'stft', 'truncated_normal', 'variance_scaling', 'zeros',
    ),
    'regularizers': (
        'L1', 'L1L2', 'L2', 'OrthogonalRegularizer', 'Regularizer', 'deserialize', 'get', 'l1',
        'l1_l2', 'l2', 'orthogonal_regularizer', 'serialize',
    ),
    'constraints': (
        'Constraint', 'MaxNorm', 'MinMaxNorm', 'NonNeg', 'UnitNorm', 'deserialize', 'get',
        'max_norm', 'min_max_norm', 'non_neg', 'serialize', 'unit_norm',
    ),
    'random': (
        'SeedGenerator', 'beta', 'binomial', 'categorical', 'dropout', 'gamma', 'normal',
        'randint', 'shuffle', 'truncated_normal', 'uniform',
    ),
    'utils': (
        'Config', 'CustomObjectScope', 'FeatureSpace', 'Progbar', 'PyDataset', 'Sequence',
        'array_to_img', 'audio_dataset_from_directory', 'clear_session', 'custom_object_scope',
        'deserialize_keras_object', 'disable_interactive_logging', 'enable_interactive_logging',
        'get_custom_objects', 'get_file', 'get_registered_name', 'get_registered_object',
        'get_source_inputs', 'image_dataset_from_directory', 'img_to_array',
        'is_interactive_logging_enabled', 'is_keras_tensor', 'load_img', 'model_to_dot',
        'normalize', 'pack_x_y_sample_weight', 'pad_sequences', 'plot_model',
        'register_keras_serializable', 'save_img', 'serialize_keras_object', 'set_random_seed',
        'split_dataset', 'standardize_dtype', 'text_dataset_from_directory',
        'timeseries_dataset_from_array', 'to_categorical', 'unpack_x_y_sample_weight',
    ),
    'ops': (
        'abs', 'absolute', 'adaptive_average_pool', 'adaptive_max_pool', 'add', 'all', 'allclose',
        'amax', 'amin', 'angle', 'any', 'append', 'arange', 'arccos', 'arccosh', 'arcsin',
        'arcsinh', 'arctan', 'arctan2', 'arctanh', 'argmax', 'argmin', 'argpartition', 'argsort',
        'array', 'array_split', 'associative_scan', 'average', 'average_pool', 'bartlett',
        'batch_normalization', 'binary_crossentropy', 'bincount', 'bitwise_and', 'bitwise_invert',
        'bitwise_left_shift', 'bitwise_not', 'bitwise_or', 'bitwise_right_shift', 'bitwise_xor',
        'blackman', 'broadcast_to', 'cast', 'categorical_crossentropy', 'cbrt', 'cdist', 'ceil',
        'celu', 'cholesky', 'cholesky_inverse', 'clip', 'concatenate', 'cond', 'conj',
        'conjugate', 'conv', 'conv_transpose', 'convert_to_numpy', 'convert_to_tensor', 'copy',
        'corrcoef', 'correlate', 'cos', 'cosh', 'count_nonzero', 'cross', 'ctc_decode',
        'ctc_loss', 'cumprod', 'cumsum', 'custom_gradient', 'deg2rad', 'depth_to_space',
        'depthwise_conv', 'det', 'diag', 'diagflat', 'diagonal', 'diff', 'digitize', 'divide',
        'divide_no_nan', 'dot', 'dot_product_attention', 'dsplit', 'dstack', 'dtype', 'eig',
        'eigh', 'einsum', 'elu', 'empty', 'empty_like', 'equal', 'erf', 'erfc', 'erfinv', 'exp',
        'exp2', 'expand_dims', 'expm1', 'extract_sequences', 'eye', 'fabs', 'fft', 'fft2', 'flip',
        'fliplr', 'flipud', 'floor', 'floor_divide', 'fmax', 'fmin', 'fmod', 'fold', 'fori_loop',
        'full', 'full_like', 'gcd', 'gelu', 'geomspace', 'get_item', 'glu', 'greater',
        'greater_equal', 'hamming', 'hanning', 'hard_shrink', 'hard_sigmoid', 'hard_silu',
        'hard_swish', 'hard_tanh', 'heaviside', 'histogram', 'hsplit', 'hstack', 'hypot', 'i0',
        'identity', 'ifft2', 'imag', 'in_top_k', 'inner', 'inv', 'irfft', 'is_tensor', 'isclose',
        'isfinite', 'isin', 'isinf', 'isnan', 'isneginf', 'isposinf', 'isreal', 'istft', 'jvp',
        'kaiser', 'kron', 'layer_normalization', 'lcm', 'ldexp', 'leaky_relu', 'left_shift',
        'less', 'less_equal', 'linspace', 'log', 'log10', 'log1p', 'log2', 'log_sigmoid',
        'log_softmax', 'logaddexp', 'logaddexp2', 'logdet', 'logical_and', 'logical_not',
        'logical_or', 'logical_xor', 'logspace', 'logsumexp', 'lstsq', 'lu_factor', 'map',
        'matmul', 'matrix_rank', 'max', 'max_pool', 'maximum', 'mean', 'median', 'meshgrid',
        'min', 'minimum', 'mod', 'moments', 'moveaxis', 'multi_hot', 'multiply', 'nan_to_num',
        'nanargmax', 'nanargmin', 'nancumprod', 'nancumsum', 'nanmax', 'nanmean', 'nanmedian',
        'nanmin', 'nanpercentile', 'nanprod', 'nanquantile', 'nanstd', 'nansum', 'nanvar', 'ndim',
        'negative', 'nextafter', 'nonzero', 'norm', 'normalize', 'not_equal', 'one_hot', 'ones',
        'ones_like', 'outer', 'pad', 'percentile', 'pinv', 'polar', 'power', 'prod', 'psnr',
        'ptp', 'qr', 'quantile', 'rad2deg', 'ravel', 'real', 'rearrange', 'reciprocal', 'relu',
        'relu6', 'repeat', 'reshape', 'rfft', 'right_shift', 'rms_normalization', 'roll', 'rot90',
        'round', 'rsqrt', 'saturate_cast', 'scan', 'scatter', 'scatter_update', 'searchsorted',
        'segment_max', 'segment_min', 'segment_prod', 'segment_sum', 'select', 'selu',
        'separable_conv', 'shape', 'sigmoid', 'sign', 'signbit', 'silu', 'sin', 'sinc', 'sinh',
        'size', 'slice', 'slice_update', 'slogdet', 'soft_shrink', 'softmax', 'softplus',
        'softsign', 'solve', 'solve_triangular', 'sort', 'space_to_depth',
        'sparse_categorical_crossentropy', 'sparse_plus', 'sparse_sigmoid', 'sparsemax', 'split',
        'sqrt', 'square', 'squareplus', 'squeeze', 'stack', 'std', 'stft', 'stop_gradient',
        'subtract', 'sum', 'svd', 'swapaxes', 'swish', 'switch', 'take', 'take_along_axis', 'tan',
        'tanh', 'tanh_shrink', 'tensordot', 'threshold', 'tile', 'top_k', 'trace', 'transpose',
        'trapezoid', 'tri', 'tril', 'triu', 'true_divide', 'trunc', 'unfold', 'unique',
        'unravel_index', 'unstack', 'vander', 'var', 'vdot', 'vectorize', 'vectorized_map',
        'view', 'view_as_complex', 'view_as_real', 'vsplit', 'vstack', 'where', 'while_loop',
        'zeros', 'zeros_like',
    ),
    'optimizers.schedules': (
        'CosineDecay', 'CosineDecayRestarts', 'ExponentialDecay', 'InverseTimeDecay',
        'LearningRateSchedule', 'PiecewiseConstantDecay', 'PolynomialDecay', 'deserialize',
        'serialize',
    ),
    'models': (
        'Model', 'Sequential', 'clone_model', 'load_model', 'model_from_json', 'save_model',
    ),
    'saving': (
        'CustomObjectScope', 'KerasFileEditor', 'custom_object_scope', 'deserialize_keras_object',
        'get_custom_objects', 'get_registered_name', 'get_registered_object', 'load_model',
        'load_weights', 'register_keras_serializable', 'save_model', 'save_weights',
        'serialize_keras_object',
    ),
}
HEADER = '''
# Keras compatibility

<!-- Generated by scripts/gen_keras_compat.py: edit the script, not this file. -->

kiln follows Keras 3's API: with `import kiln as keras` and `from kiln import layers, ops`,
many Keras programs run unchanged (the table below says which of ours do). Underneath, every model, loss, metric and training step is ONE static
graph compiled ahead of the run (docs/architecture.md), not eager code traced by TensorFlow,
JAX or PyTorch. Most differences below follow from that.

## Programs from keras.io

`tests/programs/` holds keras.io guides and examples (Keras 3 versions) adapted only in their
imports, offline data of the same shapes, and fewer epochs; each file's docstring names its
source and lists every adaptation. `tests/programs/test_programs.py` (slow) runs each on kiln;
`tests/programs/with_keras.py` runs the same file on Keras 3 (JAX backend) for reference.

| program | runs on kiln | runs on Keras 3 (JAX) |
| --- | --- | --- |
| p01 examples/vision/mnist_convnet | yes | yes |
| p02 guides/sequential_model | yes | yes |
| p03 guides/functional_api | yes (a layer whose call needs the batch size is traced with the concrete shape) | yes |
| p04 guides/training_with_built_in_methods | yes | no: JAX refuses the Variable that the guide's `CategoricalTruePositives.result()` returns |
| p05 guides/custom_train_step_in_tensorflow | yes (`tf.GradientTape` -> `keras.GradientTape`) | no: a TensorFlow-style `train_step(self, data)`; on JAX Keras calls `train_step(state, data)` |
| p06 guides/making_new_layers_and_models_via_subclassing | yes | yes |
| p07 guides/writing_your_own_callbacks | yes | yes |
| p08 guides/serialization_and_saving | yes | yes |
| p09 examples/generative/vae | yes (`tf.GradientTape` -> `keras.GradientTape`) | no: a TensorFlow-style `train_step` (Keras on JAX cannot build the model for it) |
| p10 examples/nlp/text_classification_with_transformer | yes | yes |
| p11 examples/timeseries/timeseries_classification_from_scratch | yes | yes |
| p12 examples/keras_recipes/antirectifier | yes | yes |
| p13 guides/understanding_masking_and_padding | yes | yes |
| p14 guides/working_with_rnns (without the nested-cell section) | yes | yes |
| p15 guides/transfer_learning (small base instead of Xception) | yes | yes |

Not attempted, and why: examples/nlp/text_classification_from_scratch (`TextVectorization`
is missing in kiln, and in Keras 3 it needs TensorFlow); examples/structured_data/
structured_data_classification_with_feature_space (`FeatureSpace` and `tf.data`);
examples/generative/dcgan_overriding_train_step (the same custom-step machinery as p05, at
64x64x512 sizes too slow for the suite on two cores).

## Custom training steps

A model that overrides `train_step`, `test_step`, `predict_step`, `compute_loss` or
`compute_metrics` has that step traced ONCE per data signature on symbolic inputs and compiled
(docs/features.md, "Custom steps"). What works: `keras.GradientTape` (`tape.gradient`),
`self.compute_loss`, `optimizer.apply` / `apply_gradients`, several optimizers in one step
(GANs), `Metric.update_state` / `result()`, `keras.random.*` with a `SeedGenerator`,
`Variable.assign` / `assign_add`, `ops.shape(x)[0]` of the batch (a symbolic dimension), any
nesting of the data. What does not:

* Python control flow on tensor VALUES (`if loss > 1:`) - the step runs once, on symbols;
  use `ops.where` instead. Python control flow on shapes and on Python
  values is fine.
* Printing or `.numpy()` of a tensor inside the step (it has no value while tracing).
* Side effects outside kiln (appending to a list, counting calls) happen once, at tracing.
* Statement order: a Variable read after its `assign` in the same step sees the new value
  (as in TensorFlow's graph mode) and no gradient flows through the update.
* Custom steps under `kiln.distribution` raise `NotImplementedError`.
* `tf.*` and `jax.*` calls: the step must use `keras.ops` (kiln's `ops`).

## `kiln.random`

`keras.random.normal/uniform/randint/dropout` with a `SeedGenerator` are counter-based draws
from the step's random key: new numbers every training step, reproducible from the seed. The
difference: inference graphs (`predict`, `evaluate`, a model called on arrays) have no
per-step key, so a random op there draws the SAME numbers on every call of one compiled graph
(Keras draws new ones). Layers that are random only in training (Dropout, augmentation) are
unaffected. Called eagerly with static shapes, `kiln.random` returns NumPy arrays and the
`SeedGenerator` counts its draws. The numbers differ from Keras' (another generator).

## Strings and preprocessing

Strings never enter a graph. `StringLookup`, `Hashing` and `IntegerLookup` (on arrays) run on
the host, NumPy in and NumPy out: use them to prepare data before `fit`, not inside a model.
`TextVectorization` and `FeatureSpace` are missing, and there is no `tf.data`: `fit` takes
NumPy arrays, Python generators, `keras.utils.PyDataset` and kiln's dataset utilities
(`image_dataset_from_directory`, `text_dataset_from_directory`,
`timeseries_dataset_from_array`). Image preprocessing and augmentation layers (Rescaling,
Resizing, RandomFlip, RandomRotation ...) are graph ops and run inside the model.

## Data-parallel training

`kiln.distribution.set_distribution(kiln.distribution.DataParallel())` and `mpiexec -n N
python train.py` train data-parallel over MPI processes (CPU) with an unchanged script (the
batch size is the global batch), where Keras' `keras.distribution.DataParallel` shards over the
devices of one JAX process. `DeviceMesh`, `LayoutMap`, `ModelParallel` and
`distribute_tensor` (model parallelism) are not implemented; custom training steps do not run
under `kiln.distribution` yet.

## ONNX export

`model.export("model.onnx")` (or `format="onnx"`) writes the inference graph for onnxruntime.
Keras' `export` formats `"tf_saved_model"` and `"litert"` are not available; a random op at
inference raises `kiln.export.ExportError` naming the op and the layer.

## Other known differences

* A layer, model, loss or metric called on NumPy arrays is compiled for the arrays' signature
  (batch dimension unknown, or the concrete shape when `call` needs it) and returns NumPy
  arrays (with `.numpy()` and `._keras_mask`), not backend tensors.
* Tensors are kiln graph nodes; `==` / `!=` on two tensors compare identity (use
  `ops.equal`).
* Layer weights assigned inside `call` (`assign_add`) are graph updates inside `fit`,
  `evaluate`, `predict` and eager calls.
* No mixed precision policies (`keras.mixed_precision`), no quantization, no
  `keras.applications` (no pretrained weights), no sparse or ragged tensors.
* Backends: kiln compiles for its own CPU (numba) and CUDA backends; `KERAS_BACKEND` is
  ignored.
'''

# family -> kiln module it maps to
KILN_MODULES = {
    "layers": "kiln.layers", "losses": "kiln.losses", "metrics": "kiln.metrics",
    "optimizers": "kiln.optimizers", "optimizers.schedules": "kiln.optimizers.schedules",
    "callbacks": "kiln.callbacks", "activations": "kiln.activations",
    "initializers": "kiln.initializers", "regularizers": "kiln.regularizers",
    "constraints": "kiln.constraints", "random": "kiln.random", "utils": "kiln.utils",
    "ops": "kiln.ops", "models": "kiln.models", "saving": "kiln.saving",
}


def kiln_names(module_name: str) -> set[str]:
    """The public names of a kiln module that are classes or functions defined in kiln."""
    module = importlib.import_module(module_name)
    names = set()
    for name in dir(module):
        if name.startswith("_"):
            continue
        obj = getattr(module, name)
        if inspect.ismodule(obj):
            continue
        if callable(obj) and getattr(obj, "__module__", "").startswith("kiln"):
            names.add(name)
    return names


def has(module_name: str, name: str) -> bool:
    return hasattr(importlib.import_module(module_name), name)


def code_list(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names) if names else "(none)"


def family_section(family: str) -> list[str]:
    module = KILN_MODULES[family]
    keras = list(KERAS_NAMES[family])
    present = [n for n in keras if has(module, n)]
    missing = [n for n in keras if not has(module, n)]
    extra = sorted(kiln_names(module) - set(keras))
    return [f"### `keras.{family}` -> `{module}`", "",
            f"{len(present)} of {len(keras)} Keras names present.", "",
            f"**Missing ({len(missing)}):** {code_list(missing)}", "",
            f"**Present ({len(present)}):** {code_list(present)}", "",
            f"**kiln only ({len(extra)}):** {code_list(extra)}", ""]


def render() -> str:
    lines = [HEADER.strip(), "", "## Names, family by family", "",
             f"Compared with Keras {KERAS_VERSION}'s public names. \"Present\" means kiln has "
             "an object of that name at the same place; its arguments may still differ (see "
             "the sections above).", ""]
    summary = ["| family | present | missing |", "| --- | ---: | ---: |"]
    for family in KILN_MODULES:
        keras = KERAS_NAMES[family]
        n = sum(has(KILN_MODULES[family], k) for k in keras)
        summary.append(f"| `keras.{family}` | {n} | {len(keras) - n} |")
    lines += summary + [""]
    for family in KILN_MODULES:
        lines += family_section(family)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--out", type=Path, default=DOC, help="where to write")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run python scripts/gen_keras_compat.py")
            return 1
        return 0
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
