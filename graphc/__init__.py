"""graphc: a TensorFlow-1.x-style graph compiler. `import graphc as gc`."""
from graphc import errors, dtypes  # noqa: F401
from graphc.dtypes import (DType, as_dtype, bool, double, float16, float32, float64,  # noqa: F401
                           half, int8, int16, int32, int64, string, uint8)
from graphc.framework.graph import (Graph, GraphKeys, Operation, Tensor,  # noqa: F401
                                    add_to_collection, add_to_collections, control_dependencies,
                                    device, get_collection, get_collection_ref,
                                    get_default_graph, name_scope, reset_default_graph)
from graphc.framework.tensor_shape import Dimension, TensorShape, dimension_value  # noqa: F401
from graphc.ops import tensor_operators  # noqa: F401  (x + y, x[1:], ...)
from graphc.ops.constant_ops import (constant, convert_to_tensor, placeholder,  # noqa: F401
                                     placeholder_with_default)
from graphc.ops.control_flow_ops import (Assert, add_check_numerics_ops,  # noqa: F401
                                         check_numerics, group, identity, no_op, tuple)
from graphc.ops.cond_v2 import case, cond, switch_case  # noqa: F401
from graphc.ops.while_v2 import while_loop  # noqa: F401
from graphc.ops.tensor_array_ops import TensorArray  # noqa: F401
from graphc.ops.functional_ops import foldl, foldr, map_fn, scan  # noqa: F401
from graphc.ops.random_ops import (random_normal, random_uniform, set_random_seed,  # noqa: F401
                                   truncated_normal)
from graphc.ops.math_ops import *  # noqa: F401,F403
from graphc.ops.reduction_ops import *  # noqa: F401,F403
from graphc.ops.matmul_ops import *  # noqa: F401,F403
from graphc.ops.array_ops import *  # noqa: F401,F403
from graphc.ops.clip_ops import *  # noqa: F401,F403
from graphc.ops.nd_index_ops import *  # noqa: F401,F403
from graphc.ops.mask_ops import *  # noqa: F401,F403
from graphc.ops.einsum_ops import einsum  # noqa: F401
from graphc.ops.check_ops import *  # noqa: F401,F403
from graphc.ops.norm_ops import norm  # noqa: F401
from graphc.ops.topk_ops import argsort, in_top_k, sort  # noqa: F401
from graphc.ops.script_ops import numpy_function, py_func  # noqa: F401
from graphc.ops.logging_ops import Print, print  # noqa: F401,A004
from graphc.ops.queue_ops import (FIFOQueue, PaddingFIFOQueue, QueueBase,  # noqa: F401
                                  RandomShuffleQueue)
from graphc.ops.multinomial_ops import multinomial  # noqa: F401
from graphc.ops.string_ops import (as_string, decode_base64, decode_raw,  # noqa: F401
                                   encode_base64, reduce_join,
                                   regex_replace, string_join, string_split,
                                   string_to_hash_bucket_fast, string_to_number, substr)
from graphc.framework.sparse_tensor import SparseTensor, SparseTensorValue  # noqa: F401
from graphc.ops.sparse_ops import sparse_tensor_to_dense, sparse_to_dense  # noqa: F401
from graphc.ops.io_ops import matching_files, read_file, write_file  # noqa: F401
from graphc.ops.lookup_ops import tables_initializer  # noqa: F401
from graphc.ops.reader_ops import (FixedLengthRecordReader, ReaderBase,  # noqa: F401
                                   TextLineReader, TFRecordReader, WholeFileReader)
from graphc.framework.indexed_slices import IndexedSlices, IndexedSlicesValue  # noqa: F401
from graphc.init_ops import *  # noqa: F401,F403
from graphc.variables import (Variable, all_variables, assign, assign_add,  # noqa: F401
                              assign_sub, count_up_to,
                              global_variables, global_variables_initializer,
                              initialize_all_variables, initialize_local_variables,
                              initialize_variables,
                              is_variable_initialized, local_variables,
                              local_variables_initializer, model_variables,
                              report_uninitialized_variables, scatter_add, scatter_sub,
                              scatter_update, trainable_variables, variables_initializer)
from graphc.variable_scope import (AUTO_REUSE, VariableScope, get_variable,  # noqa: F401
                                   get_variable_scope, variable_scope)
from graphc.gradients import gradients  # noqa: F401
from graphc.session import ConfigProto, InteractiveSession, Session  # noqa: F401
from graphc.framework.default_session import get_default_session  # noqa: F401
from graphc.config import (ConfigProto, GPUOptions, GraphOptions,  # noqa: F401,E402
                           OptimizerOptions, RunMetadata, RunOptions)
from graphc import debugging, nn, layers, losses, train  # noqa: F401,E402
from graphc import data, estimator, examples, metrics  # noqa: F401,E402
from graphc import summary  # noqa: F401,E402  (imports tensorboard only when used)
from graphc import contrib  # noqa: F401,E402
from graphc import python_io, graph_util  # noqa: F401,E402
from graphc.parsing_ops import (FixedLenFeature, VarLenFeature, parse_example,  # noqa: F401,E402
                                parse_single_example)
from graphc.graph_io import import_graph_def  # noqa: F401,E402
from graphc.export import export  # noqa: F401,E402
from graphc import distribute  # noqa: F401,E402  (the collective op types: graph files load)

from graphc.train.moving_averages import moving_average_variables  # noqa: F401,E402
from graphc.train.queue_runner import start_queue_runners  # noqa: F401,E402
from graphc.tf0_names import *  # noqa: F401,F403,E402  (tf.sub, tf.scalar_summary, ...)

initializers = init_ops


linalg = __import__("graphc.ops.linalg", fromlist=["x"])
newaxis = None


_TF_PROTO_CLASSES = {"GraphDef": "graph_pb2", "NodeDef": "node_def_pb2",
                     "AttrValue": "attr_value_pb2", "MetaGraphDef": "meta_graph_pb2"}


def __getattr__(name):
    """PEP 562: TF1's top-level proto classes (tf.Summary, tf.Event, tf.GraphDef, ...) need
    tensorboard's protos, loaded when first asked for."""
    if name in _TF_PROTO_CLASSES:
        from graphc.tf_formats import protos
        return getattr(getattr(protos, _TF_PROTO_CLASSES[name])(), name)
    from graphc.summary import _PROTO_CLASSES
    if name in _PROTO_CLASSES:
        return getattr(summary, name)
    raise AttributeError(f"module 'graphc' has no attribute {name!r}")


def disable_eager_execution():
    """graphc is always define-then-run (TF1 graph mode); accepted for TF2-era scripts."""


def executing_eagerly():
    return False

# TF1's utility modules (tf.app, tf.flags, tf.logging, tf.gfile, tf.io.gfile, tf.test,
# tf.compat, tf.nest)
from graphc import (app, compat, flags, gfile, image, io, logging, lookup,  # noqa: F401,E402
                    nest, sparse, strings, test)
from graphc.ops.random_ops import random_crop  # noqa: F401,E402
random = __import__("graphc.ops.random_ops", fromlist=["x"])
__version__ = "0.1.0"
