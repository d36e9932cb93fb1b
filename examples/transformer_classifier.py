"""A small transformer classifier against a bag-of-embeddings baseline, in the spirit of
keras.io's ``text_classification_with_transformer``: token + position embeddings, one
encoder block (``MultiHeadAttention``, residuals, ``LayerNormalization``, a feed-forward
``Dense`` pair), mean pooling over the unmasked tokens, a sigmoid head.

The task (``_text_task.py``) is a synthetic sentiment where order matters ("not good" is
negative): a bag of embeddings (the same model without attention and positions) cannot read
which word a "not" negates; the transformer can. Both are trained the same way and both
accuracies are printed.

    python examples/transformer_classifier.py [--quick] [--epochs N]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _text_task  # noqa: E402

import kiln  # noqa: E402
import kiln.ops as K  # noqa: E402
from kiln import layers  # noqa: E402
from kiln.saving import register_serializable  # noqa: E402


@register_serializable(package="examples")
class TokenAndPositionEmbedding(layers.Layer):
    """``token_embedding[ids] + position_embedding[0..T)``; the mask of ``ids != 0``."""

    supports_masking = True

    def __init__(self, maxlen, vocab, dim, **kwargs):
        super().__init__(**kwargs)
        self.maxlen, self.vocab, self.dim = maxlen, vocab, dim
        self.tokens = layers.Embedding(vocab, dim, mask_zero=True)
        self.positions = layers.Embedding(maxlen, dim)

    def build(self, input_shape):
        self.tokens.build(input_shape)
        self.positions.build((None,))
        self.built = True

    def call(self, ids):
        steps = ids.shape[1]
        pos = self.positions.call(K.constant(list(range(steps)), "int32"))
        return self.tokens.call(ids) + pos

    def compute_mask(self, ids, mask=None):
        return self.tokens.compute_mask(ids)

    def get_config(self):
        return {**super().get_config(), "maxlen": self.maxlen, "vocab": self.vocab,
                "dim": self.dim}


def encoder_block(x, dim, heads, ff, rate):
    att = layers.MultiHeadAttention(heads, dim // heads, dropout=rate)(x, x)
    x = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([x, layers.Dropout(rate)(att)]))
    f = layers.Dense(dim)(layers.Dense(ff, activation="relu")(x))
    return layers.LayerNormalization(epsilon=1e-6)(layers.Add()([x, layers.Dropout(rate)(f)]))


def build(kind, maxlen, vocab, dim):
    inputs = layers.Input((maxlen,), dtype="int32")
    if kind == "transformer":
        x = TokenAndPositionEmbedding(maxlen, vocab, dim)(inputs)
        x = encoder_block(x, dim, heads=2, ff=2 * dim, rate=0.1)
    else:
        x = layers.Embedding(vocab, dim, mask_zero=True)(inputs)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dense(dim, activation="relu")(x)
    outputs = layers.Dense(1, activation="sigmoid")(x)
    model = kiln.Model(inputs, outputs, name=kind)
    model.compile(kiln.optimizers.Adam(3e-3), "binary_crossentropy", metrics=["accuracy"])
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (CI)")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()
    kiln.utils.set_random_seed(0)
    vocab, maxlen, dim = 100, 32, 32
    n = 10000 if args.quick else 40000
    x, y = _text_task.make(n + n // 4, vocab=vocab, max_len=maxlen)
    (x_train, y_train), (x_test, y_test) = (x[:n], y[:n]), (x[n:], y[n:])
    epochs = args.epochs or 10
    scores = {}
    for kind in ("bag-of-embeddings", "transformer"):
        model = build(kind, maxlen, vocab, dim)
        t0 = time.perf_counter()
        model.fit(x_train, y_train, batch_size=64, epochs=epochs, verbose=0)
        scores[kind] = model.evaluate(x_test, y_test, verbose=0)[1]
        print(f"{kind:>18}: test accuracy {scores[kind]:.3f} "
              f"({model.count_params():,} parameters, {time.perf_counter() - t0:.1f} s)")
    better = scores["transformer"] > scores["bag-of-embeddings"]
    print(f"the transformer is {'better' if better else 'NOT better'} than the bag of "
          "embeddings")


if __name__ == "__main__":
    main()
