"""``keras.utils.model_to_dot``: the model's layer graph as a ``pydot.Dot``.

kiln draws the graph itself (:func:`kiln.utils.plot.model_to_dot` gives the DOT source text
with no dependency); this Keras-named function parses that text with the optional ``pydot``
package into the object Keras returns, and says so clearly when ``pydot`` is absent.
"""

from __future__ import annotations

from typing import Any

from kiln.utils import plot


def model_to_dot(model: Any, show_shapes: bool = False, show_dtype: bool = False,
                 show_layer_names: bool = True, rankdir: str = "TB", expand_nested: bool = False,
                 dpi: int = 200, subgraph: bool = False, show_layer_activations: bool = False,
                 show_trainable: bool = False, splines: str = "ortho", **kwargs: Any) -> Any:
    """The model's graph as a ``pydot.Dot`` (Keras' ``model_to_dot``; the arguments as in
    :func:`kiln.utils.plot_model`).

    Raises:
        ImportError: ``pydot`` is not installed (the message names the alternative).
        ValueError: ``subgraph=True`` (Keras' internal use for nested models; kiln draws
            nested models with ``expand_nested``), or a bad ``rankdir``.
        TypeError: an unknown keyword argument.
    """
    if kwargs:
        raise TypeError(f"model_to_dot: unexpected keyword arguments {sorted(kwargs)}")
    if subgraph:
        raise ValueError("model_to_dot: subgraph=True is not supported by kiln (Keras uses it "
                         "internally for nested models); use expand_nested=True")
    source = plot.model_to_dot(model, show_shapes=show_shapes, show_dtype=show_dtype,
                               show_layer_names=show_layer_names, rankdir=rankdir, dpi=dpi,
                               expand_nested=expand_nested,
                               show_layer_activations=show_layer_activations,
                               show_trainable=show_trainable, splines=splines)
    try:
        import pydot
    except ImportError:
        raise ImportError("model_to_dot returns a pydot.Dot, and the pydot package is not "
                          "installed: `pip install pydot` (and Graphviz to render it). Without "
                          "it, kiln.utils.plot.model_to_dot(model) gives the DOT source text "
                          "and kiln.utils.plot_model(model, 'model.dot') writes it") from None
    graphs = pydot.graph_from_dot_data(source)
    if not graphs:
        raise ValueError("model_to_dot: pydot could not parse kiln's DOT text")
    return graphs[0]
