"""tensorflow.python.framework.ops: Graph, Operation, Tensor and the graph functions."""
from graphc.framework.graph import (Graph, GraphKeys, Operation, Tensor,  # noqa: F401
                                    add_to_collection, add_to_collections,
                                    control_dependencies, device, get_collection,
                                    get_collection_ref, get_default_graph, name_scope,
                                    reset_default_graph)
from graphc.framework.indexed_slices import IndexedSlices  # noqa: F401
from graphc.ops.constant_ops import convert_to_tensor  # noqa: F401
