"""Using pre-trained word embeddings.

Source: https://keras.io/examples/nlp/pretrained_word_embeddings/
(keras-team/keras-io, examples/nlp/pretrained_word_embeddings.py, commit ef4cd453).

Adaptations:
- imports: ``from tensorflow import keras`` -> ``import kiln as keras``, ``from
  tensorflow.keras.layers import TextVectorization/Embedding`` -> ``from kiln.layers import
  ...``, ``from tensorflow.keras import layers`` -> ``from kiln import layers`` (``import
  tensorflow as tf`` kept: the vocabulary is adapted on a ``tf.data`` dataset);
- data: a synthetic ``20_newsgroup`` folder of the original's layout (20 topic folders of
  numbered files, 10 header lines then the message; each topic has words of its own among
  common ones), 30 files a topic instead of ~1,000, written next to the program instead of
  ``get_file`` downloading ``news20.tar.gz`` (``data_path`` names it); a synthetic
  ``glove.6B.100d.txt`` (one word and 100 floats a line) for the words of those messages,
  read from the working folder instead of ``~/.keras/datasets``;
- epochs: 2 instead of 20;
- ``history = model.fit(...)`` and final ``print``s of the validation accuracy and of the
  end-to-end model's class (for the test).
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E402, E501, B018, SIM115  (kept as in the original text)

import numpy as np
import tensorflow as tf
import kiln as keras

import os
import pathlib

# (adapted: a synthetic 20_newsgroup folder and GloVe file instead of the downloads)
_rng = np.random.default_rng(0)
_topics = ["alt.atheism", "comp.graphics", "comp.os.ms-windows.misc", "comp.sys.ibm.pc.hardware",
           "comp.sys.mac.hardware", "comp.windows.x", "misc.forsale", "rec.autos",
           "rec.motorcycles", "rec.sport.baseball", "rec.sport.hockey", "sci.crypt",
           "sci.electronics", "sci.med", "sci.space", "soc.religion.christian",
           "talk.politics.guns", "talk.politics.mideast", "talk.politics.misc",
           "talk.religion.misc"]
_common = ["the", "a", "of", "to", "and", "is", "in", "it", "that", "for", "on", "with",
           "this", "be", "are", "have", "not", "about", "message", "computer", "cat", "sat",
           "mat", "modeling"]
_glove_words = list(_common)
pathlib.Path("20_newsgroup").mkdir(exist_ok=True)
for _t, _topic in enumerate(_topics):
    _own = [f"{_topic.split('.')[-1]}{k}" for k in range(40)]
    _glove_words += _own
    (pathlib.Path("20_newsgroup") / _topic).mkdir(exist_ok=True)
    for _k in range(30):
        _header = [f"Newsgroups: {_topic}", f"Path: cantaloupe.srv.cs.cmu.edu!{_k}",
                   "From: someone@example.com", "Subject: Re: a question",
                   f"Message-ID: <{_t}.{_k}@example.com>", "Sender: news@example.com",
                   "Organization: Example University", "References: <1@example.com>",
                   "Date: Mon, 5 Apr 1993 12:00:00 GMT", "Lines: 12"]
        _body = " ".join(_rng.choice(_common + _own * 2, int(_rng.integers(60, 200))))
        with open(pathlib.Path("20_newsgroup") / _topic / str(38987 + _k), "w") as _f:
            _f.write("\n".join(_header + [_body]))
with open("glove.6B.100d.txt", "w") as _f:
    for _w in _glove_words[:-5]:  # a few words without a vector (the "misses")
        _f.write(_w + " " + " ".join(f"{v:.5f}" for v in _rng.normal(size=100)) + "\n")
data_path = os.path.abspath(os.path.join("20_newsgroup", "..", "news20.tar.gz"))

"""
## Let's take a look at the data
"""

data_dir = pathlib.Path(data_path).parent / "20_newsgroup"
dirnames = os.listdir(data_dir)
print("Number of directories:", len(dirnames))
print("Directory names:", dirnames)

fnames = os.listdir(data_dir / "comp.graphics")
print("Number of files in comp.graphics:", len(fnames))
print("Some example filenames:", fnames[:5])

print(open(data_dir / "comp.graphics" / "38987").read())

samples = []
labels = []
class_names = []
class_index = 0
for dirname in sorted(os.listdir(data_dir)):
    class_names.append(dirname)
    dirpath = data_dir / dirname
    fnames = os.listdir(dirpath)
    print("Processing %s, %d files found" % (dirname, len(fnames)))
    for fname in fnames:
        fpath = dirpath / fname
        f = open(fpath, encoding="latin-1")
        content = f.read()
        lines = content.split("\n")
        lines = lines[10:]
        content = "\n".join(lines)
        samples.append(content)
        labels.append(class_index)
    class_index += 1

print("Classes:", class_names)
print("Number of samples:", len(samples))

"""
## Shuffle and split the data into training & validation sets
"""

# Shuffle the data
seed = 1337
rng = np.random.RandomState(seed)
rng.shuffle(samples)
rng = np.random.RandomState(seed)
rng.shuffle(labels)

# Extract a training & validation split
validation_split = 0.2
num_validation_samples = int(validation_split * len(samples))
train_samples = samples[:-num_validation_samples]
val_samples = samples[-num_validation_samples:]
train_labels = labels[:-num_validation_samples]
val_labels = labels[-num_validation_samples:]

"""
## Create a vocabulary index
"""

from kiln.layers import TextVectorization

vectorizer = TextVectorization(max_tokens=20000, output_sequence_length=200)
text_ds = tf.data.Dataset.from_tensor_slices(train_samples).batch(128)
vectorizer.adapt(text_ds)

vectorizer.get_vocabulary()[:5]

output = vectorizer([["the cat sat on the mat"]])
output.numpy()[0, :6]

voc = vectorizer.get_vocabulary()
word_index = dict(zip(voc, range(len(voc))))

test = ["the", "cat", "sat", "on", "the", "mat"]
[word_index[w] for w in test]

"""
## Load pre-trained word embeddings
"""

path_to_glove_file = "glove.6B.100d.txt"  # (adapted: the synthetic file, not ~/.keras/datasets)

embeddings_index = {}
with open(path_to_glove_file) as f:
    for line in f:
        word, coefs = line.split(maxsplit=1)
        coefs = np.fromstring(coefs, "f", sep=" ")
        embeddings_index[word] = coefs

print("Found %s word vectors." % len(embeddings_index))

num_tokens = len(voc) + 2
embedding_dim = 100
hits = 0
misses = 0

# Prepare embedding matrix
embedding_matrix = np.zeros((num_tokens, embedding_dim))
for word, i in word_index.items():
    embedding_vector = embeddings_index.get(word)
    if embedding_vector is not None:
        # Words not found in embedding index will be all-zeros.
        # This includes the representation for "padding" and "OOV"
        embedding_matrix[i] = embedding_vector
        hits += 1
    else:
        misses += 1
print("Converted %d words (%d misses)" % (hits, misses))

from kiln.layers import Embedding

embedding_layer = Embedding(
    num_tokens,
    embedding_dim,
    embeddings_initializer=keras.initializers.Constant(embedding_matrix),
    trainable=False,
)

"""
## Build the model
"""

from kiln import layers

int_sequences_input = keras.Input(shape=(None,), dtype="int64")
embedded_sequences = embedding_layer(int_sequences_input)
x = layers.Conv1D(128, 5, activation="relu")(embedded_sequences)
x = layers.MaxPooling1D(5)(x)
x = layers.Conv1D(128, 5, activation="relu")(x)
x = layers.MaxPooling1D(5)(x)
x = layers.Conv1D(128, 5, activation="relu")(x)
x = layers.GlobalMaxPooling1D()(x)
x = layers.Dense(128, activation="relu")(x)
x = layers.Dropout(0.5)(x)
preds = layers.Dense(len(class_names), activation="softmax")(x)
model = keras.Model(int_sequences_input, preds)
model.summary()

"""
## Train the model
"""

x_train = vectorizer(np.array([[s] for s in train_samples])).numpy()
x_val = vectorizer(np.array([[s] for s in val_samples])).numpy()

y_train = np.array(train_labels)
y_val = np.array(val_labels)

model.compile(
    loss="sparse_categorical_crossentropy", optimizer="rmsprop", metrics=["acc"]
)
history = model.fit(x_train, y_train, batch_size=128, epochs=2, validation_data=(x_val, y_val))

"""
## Export an end-to-end model
"""

string_input = keras.Input(shape=(1,), dtype="string")
x = vectorizer(string_input)
preds = model(x)
end_to_end_model = keras.Model(string_input, preds)

probabilities = end_to_end_model.predict(
    [["this message is about computer graphics and 3D modeling"]]
)

class_names[np.argmax(probabilities[0])]
print("val acc:", history.history["val_acc"][-1])  # (adapted: printed for the test)
print("end-to-end class:", class_names[np.argmax(probabilities[0])])  # (adapted)
