"""A Quasi-SVM in Keras.

Source: https://keras.io/examples/keras_recipes/quasi_svm/
(keras-team/keras-io, examples/keras_recipes/quasi_svm.py, the tf.keras version at commit
8320a6c0).

Adaptations:
- imports: ``from tensorflow import keras`` -> ``import kiln as keras``, ``from tensorflow.keras
  import layers`` -> ``from kiln import layers``, ``from tensorflow.keras.layers.experimental
  import RandomFourierFeatures`` -> ``from kiln.layers import RandomFourierFeatures`` (where
  Keras 3 has it);
- data: the MNIST sample shipped with kiln (first 4,000 train / 1,000 test images, same shapes)
  instead of ``keras.datasets.mnist.load_data()``; ``import os``/``numpy`` added for it;
- epochs: 1 instead of 20; ``output_dim`` 1024 instead of 4096; a final ``print`` of the
  validation accuracy (for the test's bound).
- ``history = model.fit(...)`` keeps the result for that final ``print``.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712  (kept as in the original text)

import os

import numpy as np

import kiln as keras
from kiln import layers
from kiln.layers import RandomFourierFeatures

model = keras.Sequential(
    [
        keras.Input(shape=(784,)),
        RandomFourierFeatures(
            output_dim=1024, scale=10.0, kernel_initializer="gaussian"
        ),
        layers.Dense(units=10),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=1e-3),
    loss=keras.losses.hinge,
    metrics=[keras.metrics.CategoricalAccuracy(name="acc")],
)

# Load MNIST
# (adapted: kiln's shipped MNIST sample, no download)
_SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kiln",
                       "datasets", "data", "mnist_sample.npz")
with np.load(_SAMPLE) as _d:
    (x_train, y_train), (x_test, y_test) = ((_d["x_train"][:4000], _d["y_train"][:4000]),
                                            (_d["x_test"][:1000], _d["y_test"][:1000]))

# Preprocess the data by flattening & scaling it
x_train = x_train.reshape(-1, 784).astype("float32") / 255
x_test = x_test.reshape(-1, 784).astype("float32") / 255

# Categorical (one hot) encoding of the labels
y_train = keras.utils.to_categorical(y_train)
y_test = keras.utils.to_categorical(y_test)

history = model.fit(x_train, y_train, epochs=1, batch_size=128, validation_split=0.2)
print("val acc:", history.history["val_acc"][-1])  # (adapted: printed for the test)
