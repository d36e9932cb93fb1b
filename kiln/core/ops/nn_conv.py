"""Convolution and pooling (channels-last). Filled in by the conv/pool work."""
