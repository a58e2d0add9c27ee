"""The GraphDef TensorBoard shows for a graphc Graph: TF's GraphDef as graph_io writes it
(tf_formats/graph_def.py owns the mapping), in display mode: Const values larger than
MAX_DISPLAY_CONST_BYTES and attrs with no AttrValue form are left out, and every node gets
TF's `_output_shapes` attr so TensorBoard labels edges with shapes."""
from graphc import graph_io
from graphc.tf_formats import graph_def as tf_graph_def


def graph_def(graph):
    """The GraphDef proto of `graph` (tensorboard.compat.proto.graph_pb2.GraphDef)."""
    return tf_graph_def.graph_def_proto(graph_io.graph_nodes(graph), add_shapes=True,
                                        display=True)
