"""Next-frame video prediction with convolutional LSTMs (tf.keras version).

Source: https://keras.io/examples/vision/conv_lstm/
(keras-team/keras-io, examples/vision/conv_lstm.py, the tf.keras version at commit 0a4be8bb).

Adaptations:
- imports: ``from tensorflow import keras`` -> ``import kiln as keras``, ``from
  tensorflow.keras import layers`` -> ``from kiln import layers``; ``import tensorflow as tf``
  dropped (unused); matplotlib, imageio, IPython and ipywidgets (the figures and GIFs) are
  not installed: those sections are dropped;
- data: 40 random "Moving MNIST" videos of 10 frames of 16x16 (a bright square moving one
  pixel per frame) instead of the ``keras.utils.get_file`` download (1,000 videos of 20 frames
  of 64x64);
- sizes: 8 filters instead of 64 in each ``ConvLSTM2D``; epochs 1 instead of 20;
- prediction: 3 new frames from the first 5 instead of 10 from 10; a final ``print`` of the
  validation loss.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E402  (kept as in the original text)

import numpy as np

import kiln as keras
from kiln import layers

# (adapted: random moving squares instead of the Moving MNIST download)
_rng = np.random.default_rng(0)
dataset = np.zeros((40, 10, 16, 16), dtype="float32")
for _i in range(40):
    _r, _c = _rng.integers(0, 6, size=2)
    _dr, _dc = _rng.choice([-1, 1], size=2)
    for _t in range(10):
        _y, _x = (_r + _dr * _t) % 12, (_c + _dc * _t) % 12
        dataset[_i, _t, _y:_y + 4, _x:_x + 4] = 255.0
# Add a channel dimension since the images are grayscale.
dataset = np.expand_dims(dataset, axis=-1)

# Split into train and validation sets using indexing to optimize memory.
indexes = np.arange(dataset.shape[0])
np.random.shuffle(indexes)
train_index = indexes[: int(0.9 * dataset.shape[0])]
val_index = indexes[int(0.9 * dataset.shape[0]) :]
train_dataset = dataset[train_index]
val_dataset = dataset[val_index]

# Normalize the data to the 0-1 range.
train_dataset = train_dataset / 255
val_dataset = val_dataset / 255

# We'll define a helper function to shift the frames, where
# `x` is frames 0 to n - 1, and `y` is frames 1 to n.
def create_shifted_frames(data):
    x = data[:, 0 : data.shape[1] - 1, :, :]
    y = data[:, 1 : data.shape[1], :, :]
    return x, y


# Apply the processing function to the datasets.
x_train, y_train = create_shifted_frames(train_dataset)
x_val, y_val = create_shifted_frames(val_dataset)

# Inspect the dataset.
print("Training Dataset Shapes: " + str(x_train.shape) + ", " + str(y_train.shape))
print("Validation Dataset Shapes: " + str(x_val.shape) + ", " + str(y_val.shape))

# Construct the input layer with no definite frame size.
inp = layers.Input(shape=(None, *x_train.shape[2:]))

# We will construct 3 `ConvLSTM2D` layers with batch normalization,
# followed by a `Conv3D` layer for the spatiotemporal outputs.
x = layers.ConvLSTM2D(
    filters=8,
    kernel_size=(5, 5),
    padding="same",
    return_sequences=True,
    activation="relu",
)(inp)
x = layers.BatchNormalization()(x)
x = layers.ConvLSTM2D(
    filters=8,
    kernel_size=(3, 3),
    padding="same",
    return_sequences=True,
    activation="relu",
)(x)
x = layers.BatchNormalization()(x)
x = layers.ConvLSTM2D(
    filters=8,
    kernel_size=(1, 1),
    padding="same",
    return_sequences=True,
    activation="relu",
)(x)
x = layers.Conv3D(
    filters=1, kernel_size=(3, 3, 3), activation="sigmoid", padding="same"
)(x)

# Next, we will build the complete model and compile it.
model = keras.models.Model(inp, x)
model.compile(
    loss=keras.losses.binary_crossentropy, optimizer=keras.optimizers.Adam(),
)

# Define some callbacks to improve training.
early_stopping = keras.callbacks.EarlyStopping(monitor="val_loss", patience=10)
reduce_lr = keras.callbacks.ReduceLROnPlateau(monitor="val_loss", patience=5)

# Define modifiable training hyperparameters.
epochs = 1  # (adapted: 20)
batch_size = 5

# Fit the model to the training data.
history = model.fit(
    x_train,
    y_train,
    batch_size=batch_size,
    epochs=epochs,
    validation_data=(x_val, y_val),
    callbacks=[early_stopping, reduce_lr],
)

# Select a random example from the validation dataset.
example = val_dataset[np.random.choice(range(len(val_dataset)), size=1)[0]]

# Pick the first/last ten frames from the example.  (adapted: five)
frames = example[:5, ...]
original_frames = example[5:, ...]

# Predict a new set of 10 frames.  (adapted: 3)
for _ in range(3):
    # Extract the model's prediction and post-process it.
    new_prediction = model.predict(np.expand_dims(frames, axis=0))
    new_prediction = np.squeeze(new_prediction, axis=0)
    predicted_frame = np.expand_dims(new_prediction[-1, ...], axis=0)

    # Extend the set of prediction frames.
    frames = np.concatenate((frames, predicted_frame), axis=0)

print("frames:", frames.shape)
print("val loss: %.4f" % history.history["val_loss"][-1])  # (adapted: a final print)
