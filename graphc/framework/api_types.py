"""The types the public API's annotations name (TF's own `tensorflow.types` idea, small).

Annotations only: nothing here runs at import beyond building the aliases, and the names
are written as strings where the class lives in a module that imports this one.
"""
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from graphc.dtypes import DType
    from graphc.framework.graph import Operation, Tensor
    from graphc.framework.indexed_slices import IndexedSlices
    from graphc.framework.tensor_shape import TensorShape
    from graphc.variables import Variable

# What converts to a Tensor: a Tensor, a Variable (read), a NumPy array or Python number/list
TensorLike = Union["Tensor", "Variable", "IndexedSlices", np.ndarray, float, int, bool,
                   Sequence[Any]]
# A static shape: a TensorShape, a list of dims (None: unknown), or None (unknown rank)
ShapeLike = Optional[Union["TensorShape", Sequence[Optional[int]]]]
# A dtype: graphc's DType, a NumPy dtype or type, or a name ("float32")
DTypeLike = Union["DType", np.dtype, type, str]
# What Session.run fetches: a graph element, a name, or nested lists/tuples/dicts of them
Fetches = Any
FeedDict = Optional[Mapping[Any, Any]]
GraphElement = Union["Tensor", "Operation", "Variable", str]

__all__ = ["TensorLike", "ShapeLike", "DTypeLike", "Fetches", "FeedDict", "GraphElement",
           "Optional", "Sequence"]
