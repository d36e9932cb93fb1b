"""Text classification with a bidirectional LSTM: ``Embedding(mask_zero=True)`` ->
``Bidirectional(LSTM)`` -> ``Dense``, in the spirit of keras.io's ``bidirectional_lstm_imdb``.

The recurrent layer is ONE loop in the compiled training step (``kiln.ops.scan``): forward
pass, gradient through time and the optimizer update stay one graph. Padding is masked: the
LSTM keeps its state over the padded steps, so each review gives what it gives alone.

Data: the IMDB reviews when a copy of ``imdb.npz`` is on this machine (``kiln.datasets.imdb``
looks in ``$KILN_DATA_DIR``, ``~/.kiln/datasets``, ``~/.keras/datasets``); otherwise the
example says so and trains on a synthetic sentiment task where word order matters
(``_text_task.py``: "not good" is negative).

    python examples/text_classification_lstm.py [--quick] [--epochs N]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _text_task  # noqa: E402

import kiln  # noqa: E402
from kiln import layers  # noqa: E402
from kiln.datasets import imdb  # noqa: E402
from kiln.utils import pad_sequences  # noqa: E402


def load(quick: bool, vocab: int, maxlen: int):
    try:
        (x_train, y_train), (x_test, y_test) = imdb.load_data(num_words=vocab)
    except (FileNotFoundError, OSError) as exc:
        print(f"IMDB is not available here ({str(exc).splitlines()[0]}); using the synthetic "
              "sentiment task instead")
        n = 4000 if quick else 20000
        x, y = _text_task.make(n + n // 4, vocab=vocab, max_len=maxlen)
        return (x[:n], y[:n]), (x[n:], y[n:])
    x_train = pad_sequences(x_train, maxlen=maxlen)
    x_test = pad_sequences(x_test, maxlen=maxlen)
    if quick:
        x_train, y_train, x_test, y_test = x_train[:4000], y_train[:4000], x_test[:500], \
            y_test[:500]
    return (x_train, y_train.astype("int32")), (x_test, y_test.astype("int32"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (CI)")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()
    kiln.utils.set_random_seed(0)
    vocab, maxlen = (100, 30) if args.quick else (20000, 200)
    (x_train, y_train), (x_test, y_test) = load(args.quick, vocab, maxlen)
    units = 16 if args.quick else 64

    inputs = layers.Input((None,), dtype="int32")
    x = layers.Embedding(vocab, 32 if args.quick else 128, mask_zero=True)(inputs)
    x = layers.Bidirectional(layers.LSTM(units))(x)
    outputs = layers.Dense(1, activation="sigmoid")(x)
    model = kiln.Model(inputs, outputs)
    model.compile(kiln.optimizers.Adam(5e-3), "binary_crossentropy", metrics=["accuracy"])
    model.summary()
    t0 = time.perf_counter()
    model.fit(x_train, y_train, batch_size=64, epochs=args.epochs or (5 if args.quick else 4),
              validation_split=0.1, verbose=2)
    loss, acc = model.evaluate(x_test, y_test, verbose=0)
    print(f"test accuracy: {acc:.3f} (loss {loss:.3f}); trained in "
          f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
