"""kiln.export: kiln's inference graph written for other runtimes (docs/features.md,
"Export to ONNX").

``Model.export(path, format="onnx")`` and :func:`to_onnx` (for a model, a ``kiln.function``
or a Graph) write the optimized inference graph as an ONNX model: weights as initializers,
the batch dimension (and a sequence length) dynamic, loops as ``Scan``. The ``onnx`` package
is optional (``pip install "kiln-nn[onnx]"``) and imported only when exporting: importing
kiln never imports it.

Example:
    >>> model.export("model.onnx")
    >>> import onnxruntime as ort
    >>> session = ort.InferenceSession("model.onnx")
    >>> probs = session.run(None, {session.get_inputs()[0].name: x})[0]
"""

from kiln.export.onnx_emit import ExportError
from kiln.export.onnx_export import (
    DEFAULT_OPSET,
    MIN_OPSET,
    NOT_EXPORTABLE,
    RULES,
    check_exportable,
    to_onnx,
)
from kiln.export.provenance import record_layers

__all__ = ["to_onnx", "ExportError", "RULES", "NOT_EXPORTABLE", "DEFAULT_OPSET", "MIN_OPSET",
           "check_exportable", "record_layers"]
