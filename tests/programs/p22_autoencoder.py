"""Convolutional Autoencoder For Image Denoising.

Source: https://keras.io/examples/vision/autoencoder/
(keras-team/keras-io, examples/vision/autoencoder.py, the tf.keras version at commit 28033e1c).

Adaptations:
- imports: ``from tensorflow.keras.models/layers/datasets import ...`` -> ``from
  kiln.models/layers/datasets import ...`` (``import tensorflow as tf`` kept, unused as in the
  original);
- data: the MNIST sample shipped with kiln (first 2,000 train / 500 test images, same shapes)
  instead of ``mnist.load_data()``; ``import os`` added for it;
- epochs: 1 instead of 50 and 1 instead of 100; a final ``print`` of the denoising loss;
- ``matplotlib`` is forced to its non-interactive "Agg" backend (``plt.show()`` draws nothing).
- ``history = autoencoder.fit(...)`` (the second fit) keeps the result for that final ``print``.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E402, A001, F401  (kept as in the original text)

import os

import matplotlib

matplotlib.use("Agg")

import numpy as np
import tensorflow as tf
import matplotlib.pyplot as plt

from kiln.models import Model
from kiln.layers import Conv2D, MaxPooling2D, Input, UpSampling2D
from kiln.datasets import mnist


def preprocess(dataset):
    """
    Normalizes the supplied dataset and reshapes it into the appropriate format.
    """

    dataset = dataset.astype("float32") / 255.0
    dataset = np.reshape(dataset, (len(dataset), 28, 28, 1))
    return dataset


def noise(dataset):
    """
    Adds random noise to each image in the supplied dataset.
    """

    noise_factor = 0.4
    noisy_dataset = dataset + noise_factor * np.random.normal(
        loc=0.0, scale=1.0, size=dataset.shape
    )

    return np.clip(noisy_dataset, 0.0, 1.0)


def display(dataset1, dataset2):
    """
    Displays ten random images from each one of the supplied datasets.
    """

    n = 10

    indices = np.random.randint(len(dataset1), size=n)
    images1 = dataset1[indices, :]
    images2 = dataset2[indices, :]

    plt.figure(figsize=(20, 4))
    for i, (image1, image2) in enumerate(zip(images1, images2)):
        ax = plt.subplot(2, n, i + 1)
        plt.imshow(image1.reshape(28, 28))
        plt.gray()
        ax.get_xaxis().set_visible(False)
        ax.get_yaxis().set_visible(False)

        ax = plt.subplot(2, n, i + 1 + n)
        plt.imshow(image2.reshape(28, 28))
        plt.gray()
        ax.get_xaxis().set_visible(False)
        ax.get_yaxis().set_visible(False)

    plt.show()


# We only need images from the dataset. We will never use the target values so
# we aren't going to load them.
# (adapted: kiln's shipped MNIST sample, no download)
_SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kiln",
                       "datasets", "data", "mnist_sample.npz")
with np.load(_SAMPLE) as _d:
    (train_dataset, _), (test_dataset, _) = ((_d["x_train"][:2000], None),
                                             (_d["x_test"][:500], None))

# Normalize and reshape the data
train_dataset = preprocess(train_dataset)
test_dataset = preprocess(test_dataset)

# Create a copy of the datasets with added noise
noisy_train_dataset = noise(train_dataset)
noisy_test_dataset = noise(test_dataset)

# Display the train dataset and the version with added noise
display(train_dataset, noisy_train_dataset)

input = Input(shape=(28, 28, 1))

# Encoder
x = Conv2D(32, (3, 3), activation="relu", padding="same")(input)
x = MaxPooling2D((2, 2), padding="same")(x)
x = Conv2D(32, (3, 3), activation="relu", padding="same")(x)
x = MaxPooling2D((2, 2), padding="same")(x)

# Decoder
x = Conv2D(32, (3, 3), activation="relu", padding="same")(x)
x = UpSampling2D((2, 2))(x)
x = Conv2D(32, (3, 3), activation="relu", padding="same")(x)
x = UpSampling2D((2, 2))(x)
x = Conv2D(1, (3, 3), activation="sigmoid", padding="same")(x)

# Autoencoder
autoencoder = Model(input, x)
autoencoder.compile(optimizer="adam", loss="binary_crossentropy")
autoencoder.summary()

autoencoder.fit(
    x=train_dataset,
    y=train_dataset,
    epochs=1,
    batch_size=128,
    shuffle=True,
    validation_data=(test_dataset, test_dataset),
)

predictions = autoencoder.predict(test_dataset)
display(test_dataset, predictions)

history = autoencoder.fit(
    x=noisy_train_dataset,
    y=train_dataset,
    epochs=1,
    batch_size=128,
    shuffle=True,
    validation_data=(noisy_test_dataset, test_dataset),
)

predictions = autoencoder.predict(noisy_test_dataset)
display(noisy_test_dataset, predictions)
print("denoising val loss:", history.history["val_loss"][-1])  # (adapted: printed for the test)
