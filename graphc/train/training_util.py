"""The global step: an int64 scalar variable "global_step" in the GLOBAL_STEP collection."""
from graphc import dtypes
from graphc.framework.graph import GraphKeys, get_default_graph

__all__ = ["global_step", "get_global_step", "create_global_step", "get_or_create_global_step",
           "assert_global_step"]


def global_step(sess, global_step_tensor):
    """The global step's current value as a Python int."""
    return int(sess.run(global_step_tensor))


def assert_global_step(global_step_tensor):
    from graphc.variables import Variable
    t = global_step_tensor
    if not isinstance(t, Variable) and not (hasattr(t, "op") and t.op.type == "VariableV2"):
        raise TypeError(f"Existing \"global_step\" must be a Variable or Tensor: {t}.")
    if not t.dtype.is_integer:
        raise TypeError(f"Existing \"global_step\" does not have integer type: {t.dtype}")
    if t.shape.ndims != 0 and t.shape.is_fully_defined():
        raise TypeError(f"Existing \"global_step\" is not scalar: {t.shape}")


def get_global_step(graph=None):
    """The global step variable of `graph` (default graph), or None if there is none."""
    graph = graph or get_default_graph()
    found = graph.get_collection(GraphKeys.GLOBAL_STEP)
    if len(found) > 1:
        raise ValueError("Multiple tensors in global_step collection.")
    if found:
        step = found[0]
    else:
        try:
            step = graph.get_tensor_by_name("global_step:0")
        except KeyError:
            return None
    assert_global_step(step)
    return step


def create_global_step(graph=None):
    graph = graph or get_default_graph()
    if get_global_step(graph) is not None:
        raise ValueError("\"global_step\" already exists.")
    from graphc.init_ops import zeros_initializer
    from graphc.variable_scope import get_variable
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
        return get_variable(GraphKeys.GLOBAL_STEP, shape=[], dtype=dtypes.int64,
                            initializer=zeros_initializer(), trainable=False,
                            collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP])


def get_or_create_global_step(graph=None):
    graph = graph or get_default_graph()
    step = get_global_step(graph)
    return step if step is not None else create_global_step(graph)
