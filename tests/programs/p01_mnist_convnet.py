"""Simple MNIST convnet.

Source: https://keras.io/examples/vision/mnist_convnet/
(keras-team/keras-io, examples/vision/mnist_convnet.py, Keras 3 version).

Adaptations:
- imports: ``import keras`` -> ``import kiln as keras``, ``from keras import layers`` ->
  ``from kiln import layers``;
- data: the MNIST sample shipped with kiln (first 4,000 train / 1,000 test images, same shapes)
  instead of ``keras.datasets.mnist.load_data()``;
- epochs: 1 instead of 15.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712  (kept as in the original text)

import os

import numpy as np

import kiln as keras
from kiln import layers

# Model / data parameters
num_classes = 10
input_shape = (28, 28, 1)

# Load the data and split it between train and test sets
# (adapted: kiln's shipped MNIST sample, no download)
_SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kiln",
                       "datasets", "data", "mnist_sample.npz")
with np.load(_SAMPLE) as _d:
    (x_train, y_train), (x_test, y_test) = ((_d["x_train"][:4000], _d["y_train"][:4000]),
                                            (_d["x_test"][:1000], _d["y_test"][:1000]))

# Scale images to the [0, 1] range
x_train = x_train.astype("float32") / 255
x_test = x_test.astype("float32") / 255
# Make sure images have shape (28, 28, 1)
x_train = np.expand_dims(x_train, -1)
x_test = np.expand_dims(x_test, -1)
print("x_train shape:", x_train.shape)
print(x_train.shape[0], "train samples")
print(x_test.shape[0], "test samples")


# convert class vectors to binary class matrices
y_train = keras.utils.to_categorical(y_train, num_classes)
y_test = keras.utils.to_categorical(y_test, num_classes)

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(num_classes, activation="softmax"),
    ]
)

model.summary()

batch_size = 128
epochs = 1  # adapted: 15 in the original

model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])

model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1)

score = model.evaluate(x_test, y_test, verbose=0)
print("Test loss:", score[0])
print("Test accuracy:", score[1])
