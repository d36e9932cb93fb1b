"""Text classification from raw text files, in the spirit of keras.io's
``text_classification_from_scratch``: ``text_dataset_from_directory`` -> ``TextVectorization``
in the data pipeline -> ``Embedding`` -> ``Conv1D`` -> ``GlobalMaxPooling1D`` -> ``Dense``.

The texts are written to a temporary folder of class sub-folders (``neg/``, ``pos/``) from the
synthetic sentiment task of ``_text_task.py`` (words "good", "bad", "not" among filler; "not
good" is negative, so word order matters). With TensorFlow installed the dataset utilities
return ``tf.data.Dataset`` s and ``TextVectorization`` runs inside ``Dataset.map`` with TF ops,
as in Keras; without it, kiln's own ``kiln.utils.Dataset`` and NumPy. Strings never enter the
model: like Keras with a non-TensorFlow backend, the vectorization is a step of the data
pipeline.

    python examples/text_classification_from_scratch.py [--quick] [--epochs N]
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _text_task  # noqa: E402
import numpy as np  # noqa: E402

import kiln  # noqa: E402
from kiln import layers  # noqa: E402

WORDS = {_text_task.GOOD: "good", _text_task.BAD: "bad", _text_task.NOT: "not"}


def write_texts(root: str, n: int, seed: int) -> None:
    x, y = _text_task.make(n, vocab=200, max_len=30, seed=seed)
    for i, (row, label) in enumerate(zip(x, y)):
        words = [WORDS.get(int(t), f"w{int(t)}") for t in row if t != _text_task.PAD]
        folder = os.path.join(root, "pos" if label else "neg")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{i}.txt"), "w", encoding="utf-8") as f:
            f.write(" ".join(words).capitalize() + ".")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (CI)")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()
    kiln.utils.set_random_seed(0)
    n_train, n_test = (3000, 600) if args.quick else (20000, 4000)
    epochs = args.epochs or (2 if args.quick else 5)
    with tempfile.TemporaryDirectory() as tmp:
        write_texts(os.path.join(tmp, "train"), n_train, seed=0)
        write_texts(os.path.join(tmp, "test"), n_test, seed=1)
        train, val = kiln.utils.text_dataset_from_directory(
            os.path.join(tmp, "train"), batch_size=32, validation_split=0.2, subset="both",
            seed=1337, verbose=False)
        test = kiln.utils.text_dataset_from_directory(os.path.join(tmp, "test"),
                                                      batch_size=32, verbose=False)
        print(f"datasets: {type(train).__module__}.{type(train).__name__}, classes "
              f"{train.class_names}")

        vectorize = layers.TextVectorization(max_tokens=1000, output_sequence_length=30)
        vectorize.adapt(train.map(lambda text, label: text))
        print(f"vocabulary: {vectorize.vocabulary_size()} tokens, "
              f"{vectorize.get_vocabulary()[:6]} ...")

        def vectorized(ds):  # the TextVectorization step of the data pipeline
            return ds.map(lambda text, label: (vectorize(text), label)).cache()

        train_v, val_v, test_v = vectorized(train), vectorized(val), vectorized(test)

        inputs = layers.Input((30,), dtype="int64")
        x = layers.Embedding(1000, 32)(inputs)
        x = layers.Conv1D(64, 3, activation="relu")(x)
        x = layers.GlobalMaxPooling1D()(x)
        x = layers.Dense(32, activation="relu")(x)
        outputs = layers.Dense(1, activation="sigmoid")(x)
        model = kiln.Model(inputs, outputs)
        model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
        start = time.time()
        model.fit(train_v, validation_data=val_v, epochs=epochs, verbose=2)
        print(f"trained in {time.time() - start:.1f} s")
        _, accuracy = model.evaluate(test_v, verbose=0)
        print(f"test accuracy: {accuracy:.4f}")
        texts = np.array(["Good w5 w9 w12.", "Not good at all w7.", "Not bad w8 w40."])
        scores = model.predict(vectorize(texts), verbose=0)[:, 0]
        for text, score in zip(texts, scores):
            print(f"  {score:.2f}  {text}")


if __name__ == "__main__":
    main()
