"""Run one program of this folder with real Keras 3 instead of kiln (reference runs only).

The program's kiln imports are swapped back to Keras (``import kiln as keras`` -> ``import
keras``, ``from kiln import x`` -> ``from keras import x``, ``kiln.`` -> ``keras.``) and the text
is executed with its own ``__file__``, so its data paths resolve as under kiln.

Usage (in a Python that has Keras 3, never kiln's venv)::

    KERAS_BACKEND=jax /tmp/kvenv/bin/python tests/programs/with_keras.py p01_mnist_convnet.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def keras_source(text: str) -> str:
    """The program's text with kiln's imports swapped back to Keras'."""
    text = re.sub(r"^import kiln as keras$", "import keras", text, flags=re.M)
    text = re.sub(r"^from kiln(\.\w+)* import", lambda m: m.group(0).replace("kiln", "keras"),
                  text, flags=re.M)
    return text


def main(argv: list[str]) -> None:
    path = Path(argv[1])
    if not path.exists():
        path = Path(__file__).parent / argv[1]
    code = compile(keras_source(path.read_text()), str(path), "exec")
    sys.argv = [str(path), *argv[2:]]
    exec(code, {"__name__": "__main__", "__file__": str(path)})


if __name__ == "__main__":
    main(sys.argv)
