"""``kiln.preprocessing.sequence`` (``keras.preprocessing.sequence``)."""

from kiln.utils.sequence import pad_sequences

__all__ = ["pad_sequences"]
