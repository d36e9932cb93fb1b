"""Character-level text generation with LSTM.

Source: https://keras.io/examples/generative/lstm_character_level_text_generation/
(keras-team/keras-io, examples/generative/lstm_character_level_text_generation.py, the tf.keras
version at commit 0a09cb6c).

Adaptations:
- imports: ``from tensorflow import keras`` -> ``import kiln as keras``, ``from tensorflow.keras
  import layers`` -> ``from kiln import layers``;
- data: the text of kiln's shipped ``LICENSE-MNIST.txt`` repeated 3 times (about 5,000
  characters) instead of ``keras.utils.get_file("nietzsche.txt", ...)``; ``import os`` added;
- epochs: 1 instead of 40; 40 generated characters per diversity instead of 400; a final
  ``print`` of the last loss.
- ``history = model.fit(...)`` keeps the result for that final ``print``.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E203, C401, C414, C416, UP015, UP020, B007  (kept as in the original text)

import os

import kiln as keras
from kiln import layers

import numpy as np
import random
import sys
import io

# (adapted: a local text instead of keras.utils.get_file("nietzsche.txt", ...))
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kiln",
                    "datasets", "data", "LICENSE-MNIST.txt")
with io.open(path, encoding="utf-8") as f:
    text = f.read().lower() * 3
print("corpus length:", len(text))

chars = sorted(list(set(text)))
print("total chars:", len(chars))
char_indices = dict((c, i) for i, c in enumerate(chars))
indices_char = dict((i, c) for i, c in enumerate(chars))

# cut the text in semi-redundant sequences of maxlen characters
maxlen = 40
step = 3
sentences = []
next_chars = []
for i in range(0, len(text) - maxlen, step):
    sentences.append(text[i : i + maxlen])
    next_chars.append(text[i + maxlen])
print("nb sequences:", len(sentences))

print("Vectorization...")
x = np.zeros((len(sentences), maxlen, len(chars)), dtype=np.bool)
y = np.zeros((len(sentences), len(chars)), dtype=np.bool)
for i, sentence in enumerate(sentences):
    for t, char in enumerate(sentence):
        x[i, t, char_indices[char]] = 1
    y[i, char_indices[next_chars[i]]] = 1


model = keras.Sequential(
    [
        keras.Input(shape=(maxlen, len(chars))),
        layers.LSTM(128),
        layers.Dense(len(chars), activation="softmax"),
    ]
)
optimizer = keras.optimizers.RMSprop(learning_rate=0.01)
model.compile(loss="categorical_crossentropy", optimizer=optimizer)


def sample(preds, temperature=1.0):
    # helper function to sample an index from a probability array
    preds = np.asarray(preds).astype("float64")
    preds = np.log(preds) / temperature
    exp_preds = np.exp(preds)
    preds = exp_preds / np.sum(exp_preds)
    probas = np.random.multinomial(1, preds, 1)
    return np.argmax(probas)


epochs = 1
batch_size = 128

for epoch in range(epochs):
    history = model.fit(x, y, batch_size=batch_size, epochs=1)

    print("Generating text after epoch: %d" % epoch)

    start_index = random.randint(0, len(text) - maxlen - 1)
    for diversity in [0.2, 0.5, 1.0, 1.2]:
        print("----- diversity:", diversity)

        generated = ""
        sentence = text[start_index : start_index + maxlen]
        generated += sentence
        print('----- Generating with seed: "' + sentence + '"')
        sys.stdout.write(generated)

        for i in range(40):
            x_pred = np.zeros((1, maxlen, len(chars)))
            for t, char in enumerate(sentence):
                x_pred[0, t, char_indices[char]] = 1.0

            preds = model.predict(x_pred, verbose=0)[0]
            next_index = sample(preds, diversity)
            next_char = indices_char[next_index]

            sentence = sentence[1:] + next_char

            sys.stdout.write(next_char)
            sys.stdout.flush()
        print()
print("final loss:", history.history["loss"][-1])  # (adapted: printed for the test)
