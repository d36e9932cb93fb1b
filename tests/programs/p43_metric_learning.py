"""Metric learning for image similarity search (Keras 3 version, TensorFlow backend).

Source: https://keras.io/examples/vision/metric_learning/
(keras-team/keras-io, examples/vision/metric_learning.py, the Keras 3 version:
``os.environ["KERAS_BACKEND"] = "tensorflow"``, ``keras.ops.einsum``,
``layers.UnitNormalization``).

Adaptations:
- imports: ``import keras`` -> ``import kiln as keras``, ``from keras import layers`` ->
  ``from kiln import layers``; ``import tensorflow as tf`` dropped; ``tf.GradientTape`` ->
  ``keras.GradientTape`` (as in p05); matplotlib, PIL and scikit-learn (the collages and the
  confusion-matrix plot) are not installed: ``show_collage`` and the plots are dropped;
- data: 600 / 200 random 32x32x3 "CIFAR-10" images (the class sets the mean colour) instead of
  ``cifar10.load_data()``;
- training: 50 batches and 2 epochs instead of 1000 batches and 20 epochs; a final ``print``
  of the loss and of the near-neighbour accuracy (the diagonal of the confusion matrix).
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E402  (kept as in the original text)

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import random
import numpy as np
from collections import defaultdict
import kiln as keras
from kiln import layers

# (adapted: random images instead of cifar10.load_data())
_rng = np.random.default_rng(0)
y_train = _rng.integers(0, 10, size=(600, 1))
y_test = _rng.integers(0, 10, size=(200, 1))
_colours = _rng.uniform(0, 255, size=(10, 3))
x_train = np.clip(_colours[y_train[:, 0], None, None, :]
                  + _rng.normal(0, 40, size=(600, 32, 32, 3)), 0, 255).astype("uint8")
x_test = np.clip(_colours[y_test[:, 0], None, None, :]
                 + _rng.normal(0, 40, size=(200, 32, 32, 3)), 0, 255).astype("uint8")

x_train = x_train.astype("float32") / 255.0
y_train = np.squeeze(y_train)
x_test = x_test.astype("float32") / 255.0
y_test = np.squeeze(y_test)

height_width = 32

class_idx_to_train_idxs = defaultdict(list)
for y_train_idx, y in enumerate(y_train):
    class_idx_to_train_idxs[y].append(y_train_idx)

class_idx_to_test_idxs = defaultdict(list)
for y_test_idx, y in enumerate(y_test):
    class_idx_to_test_idxs[y].append(y_test_idx)

num_classes = 10


class AnchorPositivePairs(keras.utils.Sequence):
    def __init__(self, num_batches):
        super().__init__()
        self.num_batches = num_batches

    def __len__(self):
        return self.num_batches

    def __getitem__(self, _idx):
        x = np.empty((2, num_classes, height_width, height_width, 3), dtype=np.float32)
        for class_idx in range(num_classes):
            examples_for_class = class_idx_to_train_idxs[class_idx]
            anchor_idx = random.choice(examples_for_class)
            positive_idx = random.choice(examples_for_class)
            while positive_idx == anchor_idx:
                positive_idx = random.choice(examples_for_class)
            x[0, class_idx] = x_train[anchor_idx]
            x[1, class_idx] = x_train[positive_idx]
        return x


examples = next(iter(AnchorPositivePairs(num_batches=1)))


class EmbeddingModel(keras.Model):
    def train_step(self, data):
        # Note: Workaround for open issue, to be removed.
        if isinstance(data, tuple):
            data = data[0]
        anchors, positives = data[0], data[1]

        with keras.GradientTape() as tape:
            # Run both anchors and positives through model.
            anchor_embeddings = self(anchors, training=True)
            positive_embeddings = self(positives, training=True)

            # Calculate cosine similarity between anchors and positives. As they have
            # been normalised this is just the pair wise dot products.
            similarities = keras.ops.einsum(
                "ae,pe->ap", anchor_embeddings, positive_embeddings
            )

            # Since we intend to use these as logits we scale them by a temperature.
            # This value would normally be chosen as a hyper parameter.
            temperature = 0.2
            similarities /= temperature

            # We use these similarities as logits for a softmax. The labels for
            # this call are just the sequence [0, 1, 2, ..., num_classes] since we
            # want the main diagonal values, which correspond to the anchor/positive
            # pairs, to be high. This loss will move embeddings for the
            # anchor/positive pairs together and move all other pairs apart.
            sparse_labels = keras.ops.arange(num_classes)
            loss = self.compiled_loss(sparse_labels, similarities)

        # Calculate gradients and apply via optimizer.
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))

        # Update and return metrics (specifically the one for the loss value).
        self.compiled_metrics.update_state(sparse_labels, similarities)
        return {m.name: m.result() for m in self.metrics}


inputs = layers.Input(shape=(height_width, height_width, 3))
x = layers.Conv2D(filters=32, kernel_size=3, strides=2, activation="relu")(inputs)
x = layers.Conv2D(filters=64, kernel_size=3, strides=2, activation="relu")(x)
x = layers.Conv2D(filters=128, kernel_size=3, strides=2, activation="relu")(x)
x = layers.GlobalAveragePooling2D()(x)
embeddings = layers.Dense(units=8, activation=None)(x)
embeddings = layers.UnitNormalization()(embeddings)

model = EmbeddingModel(inputs, embeddings)

model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)

history = model.fit(AnchorPositivePairs(num_batches=50), epochs=2)  # (adapted: 1000, 20)

near_neighbours_per_example = 10

embeddings = model.predict(x_test)
gram_matrix = np.einsum("ae,be->ab", embeddings, embeddings)
near_neighbours = np.argsort(gram_matrix.T)[:, -(near_neighbours_per_example + 1) :]

confusion_matrix = np.zeros((num_classes, num_classes))

# For each class.
for class_idx in range(num_classes):
    # Consider 10 examples.
    example_idxs = class_idx_to_test_idxs[class_idx][:10]
    for y_test_idx in example_idxs:
        # And count the classes of its near neighbours.
        for nn_idx in near_neighbours[y_test_idx][:-1]:
            nn_class_idx = y_test[nn_idx]
            confusion_matrix[class_idx, nn_class_idx] += 1

# (adapted: prints instead of the ConfusionMatrixDisplay plot)
print("final loss: %.4f" % history.history["loss"][-1])
print("near-neighbour accuracy: %.3f" % (np.trace(confusion_matrix) / confusion_matrix.sum()))
