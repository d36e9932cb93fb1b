"""Timeseries classification with LSTM and CNN models (Keras 3).

Source: https://keras.io/examples/timeseries/lstm_vs_cnn_timeseries_classification/
(keras-team/keras-io, examples/timeseries/lstm_vs_cnn_timeseries_classification.py, commit
873ef4ad, a Keras 3 example: ``import keras``).

Adaptations:
- imports: ``import keras`` -> ``import kiln as keras``, ``from keras import layers`` ->
  ``from kiln import layers``; matplotlib is not installed: the two plots are dropped;
- data: ``FordA_TRAIN.tsv`` / ``FordA_TEST.tsv`` of the UCR layout (label -1/1, tab, values)
  written in the working folder (200 / 64 random series of length 64 instead of 500, the class
  shifting the mean) and read by the original ``readucr``; ``root_url`` is that folder;
- epochs: 2 instead of 100.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E402, E501  (kept as in the original text)

import numpy as np
import kiln as keras
from kiln import layers

# (adapted: write small UCR-layout files instead of downloading FordA)
_rng = np.random.default_rng(0)
for _name, _n in (("FordA_TRAIN.tsv", 200), ("FordA_TEST.tsv", 64)):
    _y = _rng.choice([-1, 1], size=_n)
    _x = _rng.normal(size=(_n, 64)) + 0.5 * _y[:, None]
    np.savetxt(_name, np.concatenate([_y[:, None], _x], axis=1), delimiter="\t", fmt="%.5f")


def readucr(filename):
    """Read UCR timeseries dataset from a TSV file."""
    data = np.loadtxt(filename, delimiter="\t")
    y = data[:, 0].astype(int)
    x = data[:, 1:].astype(np.float32)
    return x, y

root_url = ""

x_train, y_train = readucr(root_url + "FordA_TRAIN.tsv")
x_test, y_test = readucr(root_url + "FordA_TEST.tsv")

classes = np.unique(np.concatenate((y_train, y_test), axis=0))

x_train = x_train.reshape((x_train.shape[0], x_train.shape[1], 1))
x_test = x_test.reshape((x_test.shape[0], x_test.shape[1], 1))

# Standardize labels: map {-1, 1} to {0, 1}
y_train = np.where(y_train == -1, 0, y_train)
y_test = np.where(y_test == -1, 0, y_test)

# Shuffle training data for validation split
idx = np.random.permutation(len(x_train))
x_train = x_train[idx]
y_train = y_train[idx]

num_classes = len(np.unique(y_train))


def build_lstm_model(input_shape, num_classes):
    """Build an LSTM-based model for timeseries classification."""
    model = keras.Sequential([
        layers.Input(shape=input_shape),
        layers.LSTM(64, return_sequences=True, dropout=0.3, recurrent_dropout=0.3),
        layers.LSTM(32, dropout=0.3, recurrent_dropout=0.3),
        layers.Dense(16, activation="relu"),
        layers.Dense(num_classes, activation="softmax")
    ])
    return model

def build_cnn_model(input_shape, num_classes):
    """Build a 1D CNN-based model for timeseries classification."""
    model = keras.Sequential([
        layers.Input(shape=input_shape),
        layers.Conv1D(filters=64, kernel_size=7, padding="same", activation="relu"),
        layers.BatchNormalization(),
        layers.MaxPooling1D(pool_size=2),
        layers.Dropout(0.3),
        layers.Conv1D(filters=128, kernel_size=5, padding="same", activation="relu"),
        layers.BatchNormalization(),
        layers.MaxPooling1D(pool_size=2),
        layers.Dropout(0.3),
        layers.GlobalAveragePooling1D(),
        layers.Dense(16, activation="relu"),
        layers.Dense(num_classes, activation="softmax")
    ])
    return model

input_shape = x_train.shape[1:]
lstm_model = build_lstm_model(input_shape, num_classes)
cnn_model = build_cnn_model(input_shape, num_classes)

epochs = 2  # (adapted: 100)
batch_size = 32

def train_model(model, model_name, x_train, y_train, x_test, y_test):
    """Train and evaluate a model, return history and test metrics."""
    model.compile(
        optimizer="adam",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"]
    )

    history = model.fit(
        x_train,
        y_train,
        epochs=epochs,
        batch_size=batch_size,
        validation_split=0.2,
        callbacks=[
            keras.callbacks.ModelCheckpoint(
                f"best_{model_name}_model.keras",
                save_best_only=True,
                monitor="val_loss"
            ),
            keras.callbacks.EarlyStopping(
                monitor="val_loss",
                patience=20,
                restore_best_weights=True
            )
        ],
        verbose=1
    )

    # Load best model for evaluation
    best_model = keras.models.load_model(f"best_{model_name}_model.keras")
    test_loss, test_acc = best_model.evaluate(x_test, y_test, verbose=0)
    print(f"{model_name} Test Accuracy: {test_acc:.4f}, Loss: {test_loss:.4f}")

    return history, test_acc, test_loss

# Train LSTM model
print("Training LSTM model...")
lstm_history, lstm_test_acc, lstm_test_loss = train_model(lstm_model, "LSTM", x_train, y_train, x_test, y_test)

# Train CNN model
print("Training CNN model...")
cnn_history, cnn_test_acc, cnn_test_loss = train_model(cnn_model, "CNN", x_train, y_train, x_test, y_test)

print("\nModel Comparison:")
print(f"LSTM Test Accuracy: {lstm_test_acc:.4f}, Loss: {lstm_test_loss:.4f}")
print(f"CNN Test Accuracy: {cnn_test_acc:.4f}, Loss: {cnn_test_loss:.4f}")
