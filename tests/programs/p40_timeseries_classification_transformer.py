"""Timeseries classification with a Transformer model.

Source: https://keras.io/examples/timeseries/timeseries_classification_transformer/
(keras-team/keras-io, examples/timeseries/timeseries_classification_transformer.py, the tf.keras
version at commit 2024821a).

Adaptations:
- imports: ``from tensorflow import keras`` -> ``import kiln as keras``, ``from tensorflow.keras
  import layers`` -> ``from kiln import layers``;
- data: ``FordA_TRAIN.tsv`` / ``FordA_TEST.tsv`` of the UCR layout (label -1/1, tab, values)
  written in the working folder (256 / 64 random series of length 128 instead of 500, the class
  shifting the mean) and read by the original ``readucr``; ``root_url`` is that folder;
- sizes: ``head_size`` 16 instead of 256, 1 transformer block instead of 4, ``mlp_units``
  [32] instead of [128];
- epochs: 2 instead of 200; a final ``print`` of the test accuracy.
- ``score = model.evaluate(...)`` keeps the result for that final ``print``.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E402  (kept as in the original text)

import numpy as np

# (adapted: write small UCR-layout files instead of downloading FordA)
_rng = np.random.default_rng(0)
for _name, _n in (("FordA_TRAIN.tsv", 256), ("FordA_TEST.tsv", 64)):
    _y = _rng.choice([-1, 1], size=_n)
    _x = _rng.normal(size=(_n, 128)) + 0.5 * _y[:, None]
    np.savetxt(_name, np.concatenate([_y[:, None], _x], axis=1), delimiter="\t", fmt="%.5f")


def readucr(filename):
    data = np.loadtxt(filename, delimiter="\t")
    y = data[:, 0]
    x = data[:, 1:]
    return x, y.astype(int)


root_url = ""

x_train, y_train = readucr(root_url + "FordA_TRAIN.tsv")
x_test, y_test = readucr(root_url + "FordA_TEST.tsv")

x_train = x_train.reshape((x_train.shape[0], x_train.shape[1], 1))
x_test = x_test.reshape((x_test.shape[0], x_test.shape[1], 1))

n_classes = len(np.unique(y_train))

idx = np.random.permutation(len(x_train))
x_train = x_train[idx]
y_train = y_train[idx]

y_train[y_train == -1] = 0
y_test[y_test == -1] = 0

import kiln as keras
from kiln import layers


def transformer_encoder(inputs, head_size, num_heads, ff_dim, dropout=0):
    # Attention and Normalization
    x = layers.MultiHeadAttention(
        key_dim=head_size, num_heads=num_heads, dropout=dropout
    )(inputs, inputs)
    x = layers.Dropout(dropout)(x)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    res = x + inputs

    # Feed Forward Part
    x = layers.Conv1D(filters=ff_dim, kernel_size=1, activation="relu")(res)
    x = layers.Dropout(dropout)(x)
    x = layers.Conv1D(filters=inputs.shape[-1], kernel_size=1)(x)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    return x + res


def build_model(
    input_shape,
    head_size,
    num_heads,
    ff_dim,
    num_transformer_blocks,
    mlp_units,
    dropout=0,
    mlp_dropout=0,
):
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for _ in range(num_transformer_blocks):
        x = transformer_encoder(x, head_size, num_heads, ff_dim, dropout)

    x = layers.GlobalAveragePooling1D(data_format="channels_last")(x)
    for dim in mlp_units:
        x = layers.Dense(dim, activation="relu")(x)
        x = layers.Dropout(mlp_dropout)(x)
    outputs = layers.Dense(n_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)


input_shape = x_train.shape[1:]

model = build_model(
    input_shape,
    head_size=16,
    num_heads=4,
    ff_dim=4,
    num_transformer_blocks=1,
    mlp_units=[32],
    mlp_dropout=0.4,
    dropout=0.25,
)

model.compile(
    loss="sparse_categorical_crossentropy",
    optimizer=keras.optimizers.Adam(learning_rate=1e-4),
    metrics=["sparse_categorical_accuracy"],
)
model.summary()

callbacks = [keras.callbacks.EarlyStopping(patience=10, restore_best_weights=True)]

model.fit(
    x_train,
    y_train,
    validation_split=0.2,
    epochs=2,
    batch_size=64,
    callbacks=callbacks,
)

score = model.evaluate(x_test, y_test, verbose=1)
print("Test accuracy:", score[1])  # (adapted: printed for the test)
