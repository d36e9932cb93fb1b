"""MixUp augmentation for image classification.

Source: https://keras.io/examples/vision/mixup/
(keras-team/keras-io, examples/vision/mixup.py, the tf.keras version at commit 0a57de48).

Adaptations:
- imports: ``from tensorflow.keras import layers`` -> ``from kiln import layers``; ``import kiln
  as keras`` added and ``tf.keras.Sequential`` -> ``keras.Sequential`` (the pipeline stays
  ``tf.data`` with ``tf.random.gamma`` in ``map``, as in the original);
- data: random uint8 images and labels of Fashion-MNIST's shapes (3,000 train / 500 test)
  instead of ``tf.keras.datasets.fashion_mnist.load_data()``; ``val_samples`` 500 instead of
  2000;
- epochs: 1 instead of 10;
- ``matplotlib`` is forced to its non-interactive "Agg" backend; the weights file is
  ``initial.weights.h5`` (Keras 3 requires that suffix) instead of ``initial_weights.h5``.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E402, E741  (kept as in the original text)

import matplotlib

matplotlib.use("Agg")

import numpy as np
import tensorflow as tf
import matplotlib.pyplot as plt
import kiln as keras
from kiln import layers

# (adapted: random images of Fashion-MNIST's shapes instead of fashion_mnist.load_data())
_rng = np.random.default_rng(0)
(x_train, y_train), (x_test, y_test) = (
    (_rng.integers(0, 256, (3000, 28, 28), dtype=np.uint8), _rng.integers(0, 10, 3000)),
    (_rng.integers(0, 256, (500, 28, 28), dtype=np.uint8), _rng.integers(0, 10, 500)),
)

x_train = x_train.astype("float32") / 255.0
x_train = np.reshape(x_train, (-1, 28, 28, 1))
y_train = tf.one_hot(y_train, 10)

x_test = x_test.astype("float32") / 255.0
x_test = np.reshape(x_test, (-1, 28, 28, 1))
y_test = tf.one_hot(y_test, 10)

AUTO = tf.data.AUTOTUNE
BATCH_SIZE = 64
EPOCHS = 1

# Put aside a few samples to create our validation set
val_samples = 500
x_val, y_val = x_train[:val_samples], y_train[:val_samples]
new_x_train, new_y_train = x_train[val_samples:], y_train[val_samples:]

train_ds_one = (
    tf.data.Dataset.from_tensor_slices((new_x_train, new_y_train))
    .shuffle(BATCH_SIZE * 100)
    .batch(BATCH_SIZE)
)
train_ds_two = (
    tf.data.Dataset.from_tensor_slices((new_x_train, new_y_train))
    .shuffle(BATCH_SIZE * 100)
    .batch(BATCH_SIZE)
)
# Because we will be mixing up the images and their corresponding labels, we will be
# combining two shuffled datasets from the same training data.
train_ds = tf.data.Dataset.zip((train_ds_one, train_ds_two))

val_ds = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(BATCH_SIZE)

test_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(BATCH_SIZE)


def sample_beta_distribution(size, concentration_0=0.2, concentration_1=0.2):
    gamma_1_sample = tf.random.gamma(shape=[size], alpha=concentration_1)
    gamma_2_sample = tf.random.gamma(shape=[size], alpha=concentration_0)
    return gamma_1_sample / (gamma_1_sample + gamma_2_sample)


def mix_up(ds_one, ds_two, alpha=0.2):
    # Unpack two datasets
    images_one, labels_one = ds_one
    images_two, labels_two = ds_two
    batch_size = tf.shape(images_one)[0]

    # Sample lambda and reshape it to do the mixup
    l = sample_beta_distribution(batch_size, alpha, alpha)
    x_l = tf.reshape(l, (batch_size, 1, 1, 1))
    y_l = tf.reshape(l, (batch_size, 1))

    # Perform mixup on both images and labels by combining a pair of images/labels
    # (one from each dataset) into one image/label
    images = images_one * x_l + images_two * (1 - x_l)
    labels = labels_one * y_l + labels_two * (1 - y_l)
    return (images, labels)


# First create the new dataset using our `mix_up` utility
train_ds_mu = train_ds.map(
    lambda ds_one, ds_two: mix_up(ds_one, ds_two, alpha=0.2), num_parallel_calls=AUTO
)

# Let's preview 9 samples from the dataset
sample_images, sample_labels = next(iter(train_ds_mu))
plt.figure(figsize=(10, 10))
for i, (image, label) in enumerate(zip(sample_images[:9], sample_labels[:9])):
    ax = plt.subplot(3, 3, i + 1)
    plt.imshow(image.numpy().squeeze())
    print(label.numpy().tolist())
    plt.axis("off")


def get_training_model():
    model = keras.Sequential(
        [
            layers.Conv2D(16, (5, 5), activation="relu", input_shape=(28, 28, 1)),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Conv2D(32, (5, 5), activation="relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Dropout(0.2),
            layers.GlobalAvgPool2D(),
            layers.Dense(128, activation="relu"),
            layers.Dense(10, activation="softmax"),
        ]
    )
    return model


initial_model = get_training_model()
initial_model.save_weights("initial.weights.h5")

model = get_training_model()
model.load_weights("initial.weights.h5")
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
model.fit(train_ds_mu, validation_data=val_ds, epochs=EPOCHS)
_, test_acc = model.evaluate(test_ds)
print("Test accuracy: {:.2f}%".format(test_acc * 100))

model = get_training_model()
model.load_weights("initial.weights.h5")
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
# Notice that we are NOT using the mixed up dataset here
model.fit(train_ds_one, validation_data=val_ds, epochs=EPOCHS)
_, test_acc = model.evaluate(test_ds)
print("Test accuracy: {:.2f}%".format(test_acc * 100))
