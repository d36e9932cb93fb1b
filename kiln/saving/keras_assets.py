"""The vocabularies Keras keeps in a ``.keras`` file's ``assets/`` (an adapted
``StringLookup``, ``IntegerLookup`` or ``TextVectorization`` writes
``assets/<layer path>/vocabulary.txt``, one token per line, special tokens first, and leaves
``vocabulary`` None in its config): read back into the layer's config before the model is
rebuilt, so the lookup has its vocabulary when it is first called. The layer path is Keras'
container key: ``layers/<snake_case class>[_n]`` (a counter per class among the model's
layers, in config order), nested models adding their own ``layers/...``."""

from __future__ import annotations

import zipfile
from typing import Any

from kiln.saving import loading
from kiln.saving.weights import keras_snake_case

LOOKUPS = ("StringLookup", "IntegerLookup", "TextVectorization")
VOCAB_LIMIT = 64 << 20  # bytes of one vocabulary file


def vocabularies(zf: zipfile.ZipFile, path: str, what: str) -> dict[str, list[str]]:
    """``{asset folder: tokens}`` of the ``assets/.../vocabulary.txt`` members."""
    out = {}
    for name in zf.namelist():
        if name.startswith("assets/") and name.endswith("/vocabulary.txt"):
            text = loading.read_member(zf, name, path, what, VOCAB_LIMIT).decode("utf-8")
            lines = text.split("\n")
            out[name[:-len("/vocabulary.txt")]] = lines[:-1] if lines and lines[-1] == "" \
                else lines
    return out


def inject(config: Any, vocabs: dict[str, list[str]], prefix: str = "assets") -> None:
    """Sets each lookup layer's ``vocabulary`` (where its config has none) from ``vocabs``,
    in a model config (nested models included)."""
    if not vocabs or not isinstance(config, dict):
        return
    inner = config.get("config")
    layer_list = inner.get("layers") if isinstance(inner, dict) else None
    if not isinstance(layer_list, list):
        return
    counts: dict[str, int] = {}
    for entry in layer_list:
        if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
            continue
        base = keras_snake_case(entry["class_name"])
        n = counts.get(base, 0)
        counts[base] = n + 1
        where = f"{prefix}/layers/{base}" + (f"_{n}" if n else "")
        cfg = entry.get("config")
        if entry["class_name"] in LOOKUPS and isinstance(cfg, dict) \
                and cfg.get("vocabulary") is None and where in vocabs:
            tokens: list[Any] = vocabs[where]
            if entry["class_name"] == "IntegerLookup":
                tokens = [int(t) for t in tokens]
            cfg["vocabulary"] = tokens
        else:
            inject(entry, vocabs, where)
