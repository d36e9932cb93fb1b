"""Timeseries classification from scratch.

Source: https://keras.io/examples/timeseries/timeseries_classification_from_scratch/
(keras-team/keras-io, examples/timeseries/timeseries_classification_from_scratch.py,
Keras 3 version).

Adaptations:
- imports: ``import keras`` -> ``import kiln as keras``;
- data: 256 train / 64 test random series of FordA's shape (500 steps, labels -1/1) instead of
  ``readucr`` of the FordA files; the matplotlib plots are left out;
- epochs: 2 instead of 500.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712  (kept as in the original text)

import numpy as np

import kiln as keras


def readucr(n, seed):
    # (adapted: random series of FordA's shape; the class shifts the mean a little)
    rng = np.random.default_rng(seed)
    y = rng.choice([-1, 1], size=n)
    x = rng.normal(size=(n, 500)) + 0.3 * y[:, None]
    return x, y.astype(int)


x_train, y_train = readucr(256, 0)
x_test, y_test = readucr(64, 1)

classes = np.unique(np.concatenate((y_train, y_test), axis=0))

x_train = x_train.reshape((x_train.shape[0], x_train.shape[1], 1))
x_test = x_test.reshape((x_test.shape[0], x_test.shape[1], 1))

num_classes = len(np.unique(y_train))

idx = np.random.permutation(len(x_train))
x_train = x_train[idx]
y_train = y_train[idx]

y_train[y_train == -1] = 0
y_test[y_test == -1] = 0


def make_model(input_shape):
    input_layer = keras.layers.Input(input_shape)

    conv1 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(input_layer)
    conv1 = keras.layers.BatchNormalization()(conv1)
    conv1 = keras.layers.ReLU()(conv1)

    conv2 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(conv1)
    conv2 = keras.layers.BatchNormalization()(conv2)
    conv2 = keras.layers.ReLU()(conv2)

    conv3 = keras.layers.Conv1D(filters=64, kernel_size=3, padding="same")(conv2)
    conv3 = keras.layers.BatchNormalization()(conv3)
    conv3 = keras.layers.ReLU()(conv3)

    gap = keras.layers.GlobalAveragePooling1D()(conv3)

    output_layer = keras.layers.Dense(num_classes, activation="softmax")(gap)

    return keras.models.Model(inputs=input_layer, outputs=output_layer)


model = make_model(input_shape=x_train.shape[1:])

epochs = 2
batch_size = 32

callbacks = [
    keras.callbacks.ModelCheckpoint(
        "best_model.keras", save_best_only=True, monitor="val_loss"
    ),
    keras.callbacks.ReduceLROnPlateau(
        monitor="val_loss", factor=0.5, patience=20, min_lr=0.0001
    ),
    keras.callbacks.EarlyStopping(monitor="val_loss", patience=50, verbose=1),
]
model.compile(
    optimizer="adam",
    loss="sparse_categorical_crossentropy",
    metrics=["sparse_categorical_accuracy"],
)
history = model.fit(
    x_train,
    y_train,
    batch_size=batch_size,
    epochs=epochs,
    callbacks=callbacks,
    validation_split=0.2,
    verbose=1,
)

model = keras.models.load_model("best_model.keras")

test_loss, test_acc = model.evaluate(x_test, y_test)

print("Test accuracy", test_acc)
print("Test loss", test_loss)
