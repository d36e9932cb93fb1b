"""Trainer pattern.

Source: https://keras.io/examples/keras_recipes/trainer_pattern/
(keras-team/keras-io, examples/keras_recipes/trainer_pattern.py, the tf.keras version at commit
3aca0563).

Adaptations:
- imports: ``from tensorflow import keras`` -> ``import kiln as keras`` (``import tensorflow
  as tf`` kept: the original's ``train_step`` uses ``tf.GradientTape``);
- data: the MNIST sample shipped with kiln (first 4,000 train / 1,000 test images, same shapes)
  instead of ``mnist.load_data()``; ``import os``/``numpy`` added for it;
- epochs: 1 instead of 5.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712  (kept as in the original text)

import os

import numpy as np

import tensorflow as tf
import kiln as keras

# Load MNIST dataset and standardize the data
mnist = keras.datasets.mnist
# (adapted: kiln's shipped MNIST sample, no download)
_SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kiln",
                       "datasets", "data", "mnist_sample.npz")
with np.load(_SAMPLE) as _d:
    (x_train, y_train), (x_test, y_test) = ((_d["x_train"][:4000], _d["y_train"][:4000]),
                                            (_d["x_test"][:1000], _d["y_test"][:1000]))
x_train, x_test = x_train / 255.0, x_test / 255.0


class MyTrainer(keras.Model):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self.model(x, training=True)  # Forward pass
            # Compute loss value
            loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))

        # Update metrics configured in `compile()`
        self.compiled_metrics.update_state(y, y_pred)

        # Return a dict mapping metric names to current value.
        return {m.name: m.result() for m in self.metrics}

    def call(self, x):
        # Equivalent to `call()` of the wrapped keras.Model
        x = self.model(x)
        return x


# A model defined using Sequential API
model_a = keras.models.Sequential(
    [
        keras.layers.Flatten(input_shape=(28, 28)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(10, activation="softmax"),
    ]
)

# A model defined using Functional API
func_input = keras.Input(shape=(28, 28, 1))
x = keras.layers.Flatten(input_shape=(28, 28))(func_input)
x = keras.layers.Dense(512, activation="relu")(x)
x = keras.layers.Dropout(0.4)(x)
func_output = keras.layers.Dense(10, activation="softmax")(x)

model_b = keras.Model(func_input, func_output)

trainer_1 = MyTrainer(model_a)
trainer_2 = MyTrainer(model_b)

trainer_1.compile(
    keras.optimizers.SGD(), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
)
trainer_1.fit(
    x_train, y_train, epochs=1, batch_size=64, validation_data=(x_test, y_test)
)

trainer_2.compile(
    keras.optimizers.Adam(),
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
)
trainer_2.fit(
    x_train, y_train, epochs=1, batch_size=64, validation_data=(x_test, y_test)
)
