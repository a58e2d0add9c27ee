"""tf.graph_util (TF1's tf.compat.v1.graph_util): freezing a graph for inference.

convert_variables_to_constants keeps what `output_node_names` need (extract_sub_graph)
and replaces each variable by a Const holding its value in `sess`, the GraphDef that
TF1's freeze_graph writes and that import_graph_def (here or in TF) loads without a
checkpoint. Both take and return TF's GraphDef proto."""
from graphc.tf_formats.function_def import drop_frozen_ref_inputs
from graphc.tf_formats.tensors import graphc_dtype, tensor_proto

__all__ = ["extract_sub_graph", "convert_variables_to_constants"]

_VARIABLE_OPS = ("VariableV2", "Variable", "VarHandleOp")


def _node_name(input_name):
    return input_name.lstrip("^").split(":")[0]


def extract_sub_graph(graph_def, dest_nodes):
    """The GraphDef of the nodes `dest_nodes` (names) need, through inputs and control
    inputs, in the order of `graph_def`."""
    if isinstance(dest_nodes, str):
        raise TypeError(f"dest_nodes must be a list of node names, got the string "
                        f"{dest_nodes!r}")
    by_name = {n.name: n for n in graph_def.node}
    for name in dest_nodes:
        if name not in by_name:
            raise AssertionError(f"{name} is not in graph")
    keep, stack = set(), list(dest_nodes)
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        stack.extend(_node_name(i) for i in by_name[name].input if _node_name(i) in by_name)
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(n for n in graph_def.node if n.name in keep)
    return out


def convert_variables_to_constants(sess, input_graph_def, output_node_names,
                                   variable_names_whitelist=None,
                                   variable_names_blacklist=None):
    """A GraphDef like input_graph_def, cut to what output_node_names need, with its
    variables (all, or those of the whitelist and not of the blacklist) turned into
    Consts of their current values in `sess`. Resource variable reads become Identity."""
    sub = extract_sub_graph(input_graph_def, output_node_names)
    frozen = [n.name for n in sub.node if n.op in _VARIABLE_OPS
              and (variable_names_whitelist is None or n.name in variable_names_whitelist)
              and n.name not in (variable_names_blacklist or ())]
    values = dict(zip(frozen, sess.run([name + ":0" for name in frozen]))) if frozen else {}
    out = type(sub)()
    out.versions.CopyFrom(sub.versions)
    out.library.CopyFrom(sub.library)
    _freeze_nodes(sub.node, out.node, values)
    # the bodies of control-flow ops read the variables they capture through VariableV2
    # ops of the same names (framework/func_graph.py): those become the same constants
    for function in out.library.function:
        nodes = list(function.node_def)
        del function.node_def[:]
        _freeze_nodes(nodes, function.node_def, values)
    functions = {f.signature.name: f for f in out.library.function}
    for node in list(out.node) + [n for f in out.library.function for n in f.node_def]:
        drop_frozen_ref_inputs(node, functions, set(values))
    return out


def _freeze_nodes(nodes, out, values):
    """Copies NodeDefs into the repeated field `out`, each variable of `values` {name:
    array} a Const of its value."""
    for node in nodes:
        new = out.add()
        if node.name in values and node.op in _VARIABLE_OPS:
            dtype = graphc_dtype(node.attr["dtype"].type, f"variable '{node.name}'")
            new.name, new.op, new.device = node.name, "Const", node.device
            new.attr["dtype"].type = node.attr["dtype"].type
            new.attr["value"].tensor.CopyFrom(tensor_proto(values[node.name], dtype))
        elif node.op == "ReadVariableOp" and _node_name(node.input[0]) in values:
            new.CopyFrom(node)
            new.op = "Identity"
            new.attr["T"].CopyFrom(new.attr["dtype"])
            del new.attr["dtype"]
        else:
            new.CopyFrom(node)
