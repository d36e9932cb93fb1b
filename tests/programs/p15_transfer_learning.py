"""Transfer learning & fine-tuning (guide).

Source: https://keras.io/guides/transfer_learning/
(keras-team/keras-io, guides/transfer_learning.py, Keras 3 version).

Adaptations:
- imports: ``import keras`` -> ``import kiln as keras``, ``from keras import layers`` ->
  ``from kiln import layers``; ``tensorflow_datasets`` and ``matplotlib`` dropped;
- the pretrained base ``keras.applications.Xception(weights="imagenet", include_top=False)``
  (a weight download) -> a small convolutional base built in place (``base_model`` below);
- data: 96 train / 32 validation random images of the guide's shape (150, 150, 3), labels 0/1,
  as NumPy arrays instead of the ``cats_vs_dogs`` tf.data pipeline;
- epochs: 1 for each of the two trainings (2 and 1 in the guide).
"""

# ruff: noqa: I001, UP031, UP032, F811, E712  (kept as in the original text)

import numpy as np
import kiln as keras
from kiln import layers

layer = keras.layers.Dense(3)
layer.build((None, 4))  # Create the weights

print("weights:", len(layer.weights))
print("trainable_weights:", len(layer.trainable_weights))
print("non_trainable_weights:", len(layer.non_trainable_weights))

layer = keras.layers.BatchNormalization()
layer.build((None, 4))  # Create the weights

print("weights:", len(layer.weights))
print("trainable_weights:", len(layer.trainable_weights))
print("non_trainable_weights:", len(layer.non_trainable_weights))

layer = keras.layers.Dense(3)
layer.build((None, 4))  # Create the weights
layer.trainable = False  # Freeze the layer

print("weights:", len(layer.weights))
print("trainable_weights:", len(layer.trainable_weights))
print("non_trainable_weights:", len(layer.non_trainable_weights))

# Make a model with 2 layers
layer1 = keras.layers.Dense(3, activation="relu")
layer2 = keras.layers.Dense(3, activation="sigmoid")
model = keras.Sequential([keras.Input(shape=(3,)), layer1, layer2])

# Freeze the first layer
layer1.trainable = False

# Keep a copy of the weights of layer1 for later reference
initial_layer1_weights_values = layer1.get_weights()

# Train the model
model.compile(optimizer="adam", loss="mse")
model.fit(np.random.random((2, 3)), np.random.random((2, 3)))

# Check that the weights of layer1 have not changed during training
final_layer1_weights_values = layer1.get_weights()
np.testing.assert_allclose(
    initial_layer1_weights_values[0], final_layer1_weights_values[0]
)
np.testing.assert_allclose(
    initial_layer1_weights_values[1], final_layer1_weights_values[1]
)

inner_model = keras.Sequential(
    [
        keras.Input(shape=(3,)),
        keras.layers.Dense(3, activation="relu"),
        keras.layers.Dense(3, activation="relu"),
    ]
)

model = keras.Sequential(
    [
        keras.Input(shape=(3,)),
        inner_model,
        keras.layers.Dense(3, activation="sigmoid"),
    ]
)

model.trainable = False  # Freeze the outer model

assert inner_model.trainable == False  # All layers in `model` are now frozen
assert inner_model.layers[0].trainable == False  # `trainable` is propagated recursively

# (adapted: random images of the guide's shape instead of tfds "cats_vs_dogs")
rng = np.random.default_rng(0)
train_x = rng.integers(0, 256, size=(96, 150, 150, 3)).astype("float32")
train_y = rng.integers(0, 2, size=(96, 1)).astype("float32")
validation_x = rng.integers(0, 256, size=(32, 150, 150, 3)).astype("float32")
validation_y = rng.integers(0, 2, size=(32, 1)).astype("float32")

data_augmentation_layers = [
    layers.RandomFlip("horizontal"),
    layers.RandomRotation(0.1),
]


def data_augmentation(x):
    for layer in data_augmentation_layers:
        x = layer(x)
    return x


# (adapted: a small convolutional base instead of Xception(weights="imagenet"))
base_model = keras.Sequential(
    [
        keras.Input(shape=(150, 150, 3)),
        layers.Conv2D(16, 3, strides=2, activation="relu"),
        layers.BatchNormalization(),
        layers.Conv2D(32, 3, strides=2, activation="relu"),
        layers.BatchNormalization(),
    ],
    name="base_model",
)

# Freeze the base_model
base_model.trainable = False

# Create new model on top
inputs = keras.Input(shape=(150, 150, 3))
x = data_augmentation(inputs)  # Apply random data augmentation

# Pre-trained Xception weights requires that input be scaled
# from (0, 255) to a range of (-1., +1.), the rescaling layer
# outputs: `(inputs * scale) + offset`
scale_layer = keras.layers.Rescaling(scale=1 / 127.5, offset=-1)
x = scale_layer(x)

# The base model contains batchnorm layers. We want to keep them in inference mode
# when we unfreeze the base model for fine-tuning, so we make sure that the
# base_model is running in inference mode here.
x = base_model(x, training=False)
x = keras.layers.GlobalAveragePooling2D()(x)
x = keras.layers.Dropout(0.2)(x)  # Regularize with dropout
outputs = keras.layers.Dense(1)(x)
model = keras.Model(inputs, outputs)

model.summary(show_trainable=True)

model.compile(
    optimizer=keras.optimizers.Adam(),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=[keras.metrics.BinaryAccuracy()],
)

epochs = 1
print("Fitting the top layer of the model")
model.fit(train_x, train_y, batch_size=32, epochs=epochs,
          validation_data=(validation_x, validation_y))

# Unfreeze the base_model. Note that it keeps running in inference mode
# since we passed `training=False` when calling it. This means that
# the batchnorm layers will not update their batch statistics.
# This prevents the batchnorm layers from undoing all the training
# we've done so far.
base_model.trainable = True
model.summary(show_trainable=True)

model.compile(
    optimizer=keras.optimizers.Adam(1e-5),  # Low learning rate
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=[keras.metrics.BinaryAccuracy()],
)

epochs = 1
print("Fitting the end-to-end model")
model.fit(train_x, train_y, batch_size=32, epochs=epochs,
          validation_data=(validation_x, validation_y))
# (adapted: the guide evaluates on test_ds)
print("Test dataset evaluation")
print(model.evaluate(validation_x, validation_y))
