"""TF's FunctionDefs <-> graphc function dicts: the bodies of If and While ops.

A function dict is graph_io's in-memory body (framework/func_graph.py's FuncGraph):
    {"name", "nodes": [node dicts, the argument placeholders included],
     "inputs": [the argument placeholders' tensor names], "outputs": [tensor names],
     "ref_captures": [names of the body's VariableV2 ops that stand for the calling op's
                      variables, in the order of its ref inputs]}

A GraphDef's library holds them as TF 2.x writes the bodies of its While and If ops:
arguments are named `arg0`, `arg1`, ... and read by their name; a node's output is
"node:arg:index", arg being the output arg of TF's op def (op_outputs.py) and index the
position within it; the results are `ret` entries of output args `out0`, `out1`, ...
graphc keeps the placeholders' own names and shapes in the args' attrs (`_graphc_name`,
`_output_shapes`) and its ref captures in the function's attr `_graphc_ref_captures`,
which TF ignores (a leading underscore). A function TF wrote reads the same way, its
args' placeholders named after the args."""
from graphc.tf_formats.graph_def import (_DT_VARIANT, SHAPES_ATTR, FUNCTION_ATTRS, VARIANT,
                                         _NodeWriter, _Outputs, _attr_from_proto, attr_proto,
                                         node_dict, unique_name)
from graphc.tf_formats.op_outputs import OUTPUT_ARGS
from graphc.tf_formats.tensors import FormatError, data_type, graphc_dtype
from graphc.framework.tensor_shape import TensorShape

NAME_ATTR = "_graphc_name"
REF_CAPTURES_ATTR = "_graphc_ref_captures"


# ------------------------------------------------------------------ writing
def add_function_def(library, function, display=False):
    """Adds the FunctionDef of a function dict to a FunctionDefLibrary."""
    fdef = library.function.add()
    fdef.signature.name = function["name"]
    nodes = {n["name"]: n for n in function["nodes"]}
    outputs = _Outputs(function["nodes"])
    where = f"cannot export function '{function['name']}'"
    args = {}  # placeholder tensor name -> arg name
    for i, tensor in enumerate(function["inputs"]):
        dtype, shape = outputs.by_name[tensor]
        arg = fdef.signature.input_arg.add(name=f"arg{i}", type=data_type(dtype))
        args[tensor] = arg.name
        fdef.arg_attr[i].attr[NAME_ATTR].s = tensor.rsplit(":", 1)[0].encode()
        fdef.arg_attr[i].attr[SHAPES_ATTR].CopyFrom(
            attr_proto([TensorShape(shape)], where))

    def reference(tensor):
        if tensor in args:
            return args[tensor]
        op_name, index = tensor.rsplit(":", 1)
        arg, position = _output_arg(nodes[op_name]["op"], int(index), where)
        return f"{op_name}:{arg}:{position}"

    writer = _NodeWriter(outputs, True, display, reference)
    placeholders = {t.rsplit(":", 1)[0] for t in function["inputs"]}
    for node in function["nodes"]:
        if node["name"] not in placeholders:
            writer.write(node, fdef.node_def)
    for i, tensor in enumerate(function["outputs"]):
        out = fdef.signature.output_arg.add(name=f"out{i}",
                                            type=data_type(outputs.dtype(tensor, where)))
        fdef.ret[out.name] = reference(tensor)
    if function.get("ref_captures"):
        fdef.attr[REF_CAPTURES_ATTR].CopyFrom(attr_proto(list(function["ref_captures"]),
                                                         where))
    return fdef


def _output_arg(op_type, index, where):
    """(TF's output arg, index within it) of output `index` of an op. An op TF does not
    have names its outputs "output", as TF's list outputs are named."""
    args = OUTPUT_ARGS.get(op_type)
    if not args or len(args) == 1:
        return (args[0][0] if args else "output"), index
    if index >= len(args):
        raise FormatError(f"{where}: TF's {op_type} has {len(args)} outputs, graphc's uses "
                          f"output {index}")
    return args[index][0], 0


def drop_frozen_ref_inputs(node, functions, frozen):
    """Once the variables named in `frozen` are constants (a frozen graph), a While or If
    NodeDef no longer passes them by reference: its ref inputs naming them are dropped,
    with their entries of its bodies' ref captures (the bodies' stand-ins are constants
    of the same names). `functions` {name: FunctionDef} is changed in place."""
    keys = FUNCTION_ATTRS.get(node.op, ())
    if not keys or "ref_input_indices" not in node.attr or \
            any(node.attr[k].func.name not in functions for k in keys):
        return
    refs = list(node.attr["ref_input_indices"].list.i)
    callees = [functions[node.attr[k].func.name] for k in keys]
    owners = [(callee, name) for callee in callees for name in _ref_names(callee)]
    if len(owners) != len(refs) or any(j >= len(node.input) for j in refs):
        return  # malformed: the importer names it
    dropped = {j for j in refs if node.input[j].split(":")[0] in frozen}
    if not dropped:
        return
    kept = [j for j in refs if j not in dropped]
    for callee in callees:
        names = [name for (owner, name), j in zip(owners, refs)
                 if owner is callee and j not in dropped]
        callee.attr[REF_CAPTURES_ATTR].CopyFrom(attr_proto(names, "ref captures"))
    inputs = [inp for j, inp in enumerate(node.input) if j not in dropped]
    del node.input[:]
    node.input.extend(inputs)
    node.attr["ref_input_indices"].CopyFrom(attr_proto(
        [j - sum(d < j for d in dropped) for j in kept], "ref_input_indices"))


def _ref_names(fdef):
    if REF_CAPTURES_ATTR not in fdef.attr:
        return []
    return [s.decode() for s in fdef.attr[REF_CAPTURES_ATTR].list.s]


# ------------------------------------------------------------------ reading
def function_dicts(library):
    """{name: function dict} of a FunctionDefLibrary, each checked (its nodes' inputs and
    its results name its args or its nodes' outputs)."""
    functions = {}
    for fdef in library.function:
        name = fdef.signature.name
        if name in functions:
            raise FormatError(f"the graph's function library has two functions named "
                              f"'{name}'")
        functions[name] = _function_dict(fdef)
    for function in functions.values():
        check_bodies(function["nodes"], functions, f"function '{function['name']}'")
    return functions


def check_bodies(nodes, functions, where):
    """Every body the control-flow ops of `nodes` call is in `functions`."""
    for node in nodes:
        for key in FUNCTION_ATTRS.get(node["op"], ()):
            name = node["attrs"].get(key)
            if name not in functions:
                raise FormatError(f"{where}: node '{node['name']}' (op: '{node['op']}') calls "
                                  f"function '{name}' (attr '{key}'), which is not in the "
                                  "graph's function library")


def _function_dict(fdef):
    name = fdef.signature.name
    where = f"function '{name}'"
    if not name:
        raise FormatError("the graph's function library has a function without a name")
    placeholders, args = [], {}
    for i, arg in enumerate(fdef.signature.input_arg):
        node = _placeholder(fdef, i, arg, where)
        placeholders.append(node)
        args[arg.name] = node["name"] + ":0"
    ops = {n.name: n.op for n in fdef.node_def}
    if len(ops) != len(fdef.node_def) or set(ops) & set(args):
        raise FormatError(f"{where}: two nodes or args share a name")
    resolve = _Resolver(args, ops, where)
    nodes = placeholders + [node_dict(n, [resolve.input(i, f"node '{n.name}'")
                                         for i in n.input])
                            for n in fdef.node_def]
    outputs = []
    for arg in fdef.signature.output_arg:
        if arg.name not in fdef.ret:
            raise FormatError(f"{where}: output '{arg.name}' has no ret value")
        outputs.append(resolve.input(fdef.ret[arg.name], f"ret '{arg.name}'"))
    controls = [resolve.input("^" + op, f"control ret '{key}'")[1:]
                for key, op in sorted(fdef.control_ret.items())]
    if controls:
        outputs = _after(controls, outputs, nodes, name, where)
    refs = _attr_from_proto(fdef.attr[REF_CAPTURES_ATTR], where) \
        if REF_CAPTURES_ATTR in fdef.attr else []
    if not isinstance(refs, list) or any(r not in ops for r in refs):
        raise FormatError(f"{where}: attr '{REF_CAPTURES_ATTR}' names {refs!r}, not nodes "
                          "of the function")
    return {"name": name, "nodes": nodes, "inputs": [args[a.name] for a in
                                                     fdef.signature.input_arg],
            "outputs": outputs, "ref_captures": refs}


def _after(controls, outputs, nodes, name, where):
    """The results, each through an Identity that waits for the ops of the function's
    control_ret (stateful ops TF runs with the function although no result reads them):
    graphc runs what its body's results need."""
    if not outputs:
        raise FormatError(f"{where}: a function with control outputs and no results is "
                          "not supported by graphc")
    taken = {n["name"] for n in nodes}
    waited = []
    for i, tensor in enumerate(outputs):
        identity = unique_name(f"{name}/control_ret_{i}", taken)
        nodes.append({"name": identity, "op": "Identity", "inputs": [tensor],
                      "control_inputs": list(controls), "attrs": {}, "device": "",
                      "output_shapes": None, "location": None, "gradient_of": None})
        waited.append(identity + ":0")
    return waited


def _placeholder(fdef, i, arg, where):
    if arg.number_attr or arg.type_list_attr or arg.type_attr or not arg.type:
        raise FormatError(f"{where}: arg '{arg.name}' has no fixed type (a polymorphic "
                          "function), which graphc does not support")
    attrs = {k: _attr_from_proto(v, f"{where}, arg '{arg.name}'")
             for k, v in fdef.arg_attr[i].attr.items()} if i in fdef.arg_attr else {}
    shapes = attrs.get(SHAPES_ATTR)
    shape = shapes[0] if isinstance(shapes, list) and len(shapes) == 1 and \
        isinstance(shapes[0], TensorShape) else TensorShape(None)
    # a TensorList: its dense tensor's dtype and shape come from the calling op's input
    dtype = VARIANT if arg.type == _DT_VARIANT else \
        graphc_dtype(arg.type, f"{where}, arg '{arg.name}'")
    name = attrs.get(NAME_ATTR)
    return {"name": name if isinstance(name, str) and name else arg.name,
            "op": "Placeholder", "inputs": [], "control_inputs": [],
            "attrs": {"dtype": dtype,
                      "shape": TensorShape(None) if dtype is VARIANT else shape},
            "device": "", "output_shapes": None, "location": None, "gradient_of": None}


class _Resolver:
    """A FunctionDef's tensor references in a GraphDef's syntax ("node:3", "^node")."""

    def __init__(self, args, ops, where):
        self.args, self.ops, self.where = args, ops, where

    def input(self, ref, user):
        if ref.startswith("^"):
            if ref[1:] not in self.ops:
                raise self._error(ref, user)
            return ref
        parts = ref.split(":")
        if len(parts) == 1 and ref in self.args:
            return self.args[ref]
        if len(parts) not in (2, 3) or parts[0] not in self.ops:
            raise self._error(ref, user)
        op_name, arg = parts[0], parts[1]
        index = parts[2] if len(parts) == 3 else "0"
        if not index.isdigit():
            raise self._error(ref, user)
        return f"{op_name}:{self._flat(self.ops[op_name], arg, int(index), ref, user)}"

    def _flat(self, op_type, arg, index, ref, user):
        """The op's output number of its output arg `arg`, item `index`."""
        if arg.isdigit():
            return int(arg)
        args = OUTPUT_ARGS.get(op_type)
        if not args or len(args) == 1:
            if args and arg != args[0][0] and arg != "output":
                raise self._error(ref, user, f"{op_type}'s output is '{args[0][0]}'")
            return index
        names = [a for a, _ in args]
        if arg not in names:
            raise self._error(ref, user, f"{op_type}'s outputs are {names}")
        return names.index(arg) + index

    def _error(self, ref, user, why="neither an arg nor a node's output of the function"):
        return FormatError(f"{self.where}: {user} reads '{ref}', {why}")
