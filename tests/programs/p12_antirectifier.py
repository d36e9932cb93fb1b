"""Simple custom layer example: Antirectifier.

Source: https://keras.io/examples/keras_recipes/antirectifier/
(keras-team/keras-io, examples/keras_recipes/antirectifier.py, Keras 3 version).

Adaptations:
- imports: ``import keras`` -> ``import kiln as keras``, ``from keras import layers/ops`` ->
  ``from kiln import layers/ops``;
- data: kiln's shipped MNIST sample (first 3,000 train / 1,000 test images) instead of
  ``keras.datasets.mnist.load_data()``; ``import os, numpy`` added for it;
- epochs: 1 instead of 20.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712  (kept as in the original text)

import os

import numpy as np

import kiln as keras
from kiln import layers
from kiln import ops


class Antirectifier(layers.Layer):
    def __init__(self, initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        output_dim = input_shape[-1]
        self.kernel = self.add_weight(
            shape=(output_dim * 2, output_dim),
            initializer=self.initializer,
            name="kernel",
            trainable=True,
        )

    def call(self, inputs):
        inputs -= ops.mean(inputs, axis=-1, keepdims=True)
        pos = ops.relu(inputs)
        neg = ops.relu(-inputs)
        concatenated = ops.concatenate([pos, neg], axis=-1)
        mixed = ops.matmul(concatenated, self.kernel)
        return mixed

    def get_config(self):
        # Implement get_config to enable serialization. This is optional.
        base_config = super().get_config()
        config = {"initializer": keras.initializers.serialize(self.initializer)}
        return dict(list(base_config.items()) + list(config.items()))


# Training parameters
batch_size = 128
num_classes = 10
epochs = 1  # adapted: 20 in the original

# The data, split between train and test sets
# (adapted: kiln's shipped MNIST sample, no download)
_SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kiln",
                       "datasets", "data", "mnist_sample.npz")
with np.load(_SAMPLE) as _d:
    (x_train, y_train), (x_test, y_test) = ((_d["x_train"][:3000], _d["y_train"][:3000]),
                                            (_d["x_test"][:1000], _d["y_test"][:1000]))

x_train = x_train.reshape(-1, 784)
x_test = x_test.reshape(-1, 784)
x_train = x_train.astype("float32")
x_test = x_test.astype("float32")
x_train /= 255
x_test /= 255
print(x_train.shape[0], "train samples")
print(x_test.shape[0], "test samples")

# Build the model
model = keras.Sequential(
    [
        keras.Input(shape=(784,)),
        layers.Dense(256),
        Antirectifier(),
        layers.Dense(256),
        Antirectifier(),
        layers.Dropout(0.5),
        layers.Dense(10),
    ]
)

# Compile the model
model.compile(
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=keras.optimizers.RMSprop(),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)

# Train the model
model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.15)

# Test the model
score = model.evaluate(x_test, y_test)
print("Test accuracy:", score[1])  # adapted: the original does not print the result
