"""Bidirectional LSTM on IMDB.

Source: https://keras.io/examples/nlp/bidirectional_lstm_imdb/
(keras-team/keras-io, examples/nlp/bidirectional_lstm_imdb.py, the tf.keras version at commit
0a4be8bb).

Adaptations:
- imports: ``from tensorflow import keras`` -> ``import kiln as keras``, ``from tensorflow.keras
  import layers`` -> ``from kiln import layers``;
- data: 256 train / 64 validation random reviews (lists of word indices below ``max_features``
  of random lengths 20-300, labels 0/1) instead of ``keras.datasets.imdb.load_data``: the same
  types and shapes after ``pad_sequences``;
- sizes: ``maxlen`` 50 instead of 200, LSTM units 16 instead of 64, embedding 32 instead of 128;
- epochs: 1 instead of 2.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712  (kept as in the original text)

import numpy as np
import kiln as keras
from kiln import layers

max_features = 20000  # Only consider the top 20k words
maxlen = 50  # Only consider the first 200 words of each movie review

# Input for variable-length sequences of integers
inputs = keras.Input(shape=(None,), dtype="int32")
# Embed each integer in a 128-dimensional vector
x = layers.Embedding(max_features, 32)(inputs)
# Add 2 bidirectional LSTMs
x = layers.Bidirectional(layers.LSTM(16, return_sequences=True))(x)
x = layers.Bidirectional(layers.LSTM(16))(x)
# Add a classifier
outputs = layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(inputs, outputs)
model.summary()

# (adapted: random reviews instead of keras.datasets.imdb.load_data(num_words=max_features))
rng = np.random.default_rng(0)
x_train = [list(rng.integers(1, max_features, size=rng.integers(20, 300))) for _ in range(256)]
y_train = rng.integers(0, 2, size=256)
x_val = [list(rng.integers(1, max_features, size=rng.integers(20, 300))) for _ in range(64)]
y_val = rng.integers(0, 2, size=64)
print(len(x_train), "Training sequences")
print(len(x_val), "Validation sequences")
# Use pad_sequence to standardize sequence length:
# this will truncate sequences longer than 200 words and zero-pad sequences shorter than 200 words.
x_train = keras.preprocessing.sequence.pad_sequences(x_train, maxlen=maxlen)
x_val = keras.preprocessing.sequence.pad_sequences(x_val, maxlen=maxlen)

model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
model.fit(x_train, y_train, batch_size=32, epochs=1, validation_data=(x_val, y_val))
