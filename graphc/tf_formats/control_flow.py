"""graphc's While and If in TF's layout, so that TensorFlow loads the GraphDefs graphc
writes.

graphc's ops (ops/while_v2.py, ops/cond_v2.py) give each body only what it reads: a
While's inputs are its loop variables, then the cond's and the body's captured tensors,
then the variables they capture by reference; its outputs are the loop variables, the
trip count and the stacks saved for a gradient. TF's While takes every input as a loop
variable of both functions and outputs them all; TF's If passes every input after the
condition to both branches. An op is written in TF's layout when that layout can say
what it does:
  - While: inputs = loop variables, a trip counter (from 0, the body adds 1: output n
    stays the trip count), the captured tensors and the captured variables, which the
    body passes through unchanged; the bodies get an argument for each (unused ones
    included) in that order.
  - If: inputs = condition, both branches' captured tensors and variables; each branch
    gets an argument for each.
A variable a body captures by reference becomes an argument holding its value when the
op starts, which is what TF2's functions read; so only variables the body (or a body
nested in it) never assigns qualify. An op that saves stacks for a gradient (TF would
need its TensorList accumulators), or assigns a captured variable, keeps graphc's layout,
which graphc reads back and TensorFlow does not. Reading either layout back gives the
same values (graph_def._functional reads TF's)."""
import numpy as np

from graphc import dtypes
from graphc.framework.op_def import FORWARD_DIMS, UPDATE_OPS
from graphc.framework.tensor_shape import TensorShape
from graphc.tf_formats.graph_def import FUNCTION_ATTRS, unique_name

PARALLEL_ITERATIONS = 10  # TF's default; graphc's loops do not keep theirs


def in_tf_layout(nodes, functions, inputs_from):
    """(nodes, functions): node dicts and function dicts with each While and If that TF's
    layout can hold rewritten in it (their bodies first, so a nested op is decided before
    the op around it). `inputs_from` are the node dicts the nodes' inputs come from."""
    functions = {f["name"]: dict(f) for f in functions}
    callers = _callers(list(nodes) + [n for f in functions.values() for n in f["nodes"]])
    done = set()

    def convert(node_list, known):
        out, extra = [], []
        for node in node_list:
            keys = FUNCTION_ATTRS.get(node["op"], ())
            bodies = [functions[node["attrs"][k]] for k in keys]
            for body in bodies:
                if body["name"] not in done:
                    done.add(body["name"])
                    body["nodes"] = convert(body["nodes"], _known(body["nodes"]))
            if keys and _fits(node, bodies, callers):
                node, const = _rewrite(node, bodies, known, {n["name"] for n in node_list})
                extra += const
            out.append(node)
        return extra + out

    nodes = convert(list(nodes), _known(inputs_from))
    return nodes, list(functions.values())


def _known(nodes):
    """{tensor name: (dtype, shape list or None)} of node dicts."""
    return {f"{n['name']}:{i}": (dtypes.as_dtype(d), s) for n in nodes
            for i, (d, s) in enumerate(zip(n.get("output_dtypes") or [],
                                           n.get("output_shapes") or []))}


def _callers(nodes):
    counts = {}
    for node in nodes:
        for key in FUNCTION_ATTRS.get(node["op"], ()):
            counts[node["attrs"][key]] = counts.get(node["attrs"][key], 0) + 1
    return counts


def _fits(node, bodies, callers):
    """Whether TF's layout holds this graphc-layout op (see the module's docstring)."""
    # a backward loop of a loop whose loop variables change shape keeps its forward
    # dims' attrs (ops/while_v2.py), which TF's layout has no place for
    return "ref_input_indices" in node["attrs"] and not node["attrs"].get("saved") and \
        not node["attrs"].get(FORWARD_DIMS) and \
        all(callers[b["name"]] == 1 for b in bodies) and \
        not any(_assigned(b, var) for b in bodies for var in b["ref_captures"])


def _assigned(body, var):
    """Whether the body's stand-in `var` for a captured variable is updated in it (by an
    update op, or as a ref input of an op that stayed in graphc's layout)."""
    tensor = var + ":0"
    for node in body["nodes"]:
        if node["op"] in UPDATE_OPS and node["inputs"][:1] == [tensor]:
            return True
        refs = node["attrs"].get("ref_input_indices", []) \
            if node["op"] in FUNCTION_ATTRS else []
        if any(node["inputs"][j] == tensor for j in refs):
            return True
    return False


# ------------------------------------------------------------------ rewriting
def _rewrite(node, bodies, known, taken):
    """(the op's node dict in TF's layout, new node dicts for the graph holding it)."""
    attrs = node["attrs"]
    refs = attrs["ref_input_indices"]
    values = [i for j, i in enumerate(node["inputs"]) if j not in refs]
    ref_inputs = [node["inputs"][j] for j in refs]
    if node["op"] == "While":
        n = attrs["num_loop_vars"]
        cond, body = bodies
        groups = [values[:n], [None], values[n:len(cond["inputs"])],
                  values[len(cond["inputs"]):], ref_inputs[:len(cond["ref_captures"])],
                  ref_inputs[len(cond["ref_captures"]):]]
        owners = [(cond, body), (), (cond,), (body,), (cond,), (body,)]
        init = unique_name(f"{node['name']}/trip_count_init", taken)
        const = [_const_node(init, np.int32(0))]
        groups[1] = [init + ":0"]
        known = dict(known, **{init + ":0": (dtypes.int32, [])})
    else:
        then, other = bodies
        n_then = attrs["num_then_inputs"]
        n_then_refs = len(then["ref_captures"])
        groups = [values[1:1 + n_then], values[1 + n_then:], ref_inputs[:n_then_refs],
                  ref_inputs[n_then_refs:]]
        owners = [(then,), (other,), (then,), (other,)]
        const = []
    inputs = [t for group in groups for t in group]
    types = [known[t][0] for t in inputs]
    shapes = [TensorShape(known[t][1]) for t in inputs]
    args = _arg_slots(bodies, groups, owners)
    if node["op"] == "While":
        shapes[:n + 1] = attrs["output_shapes"][:n + 1]
        for b in bodies:
            _retake_args(b, args[b["name"]], types, shapes)
        _pass_through(bodies[1], n)
        new_attrs = {"T": types, "cond": attrs["cond"], "body": attrs["body"],
                     "output_shapes": shapes, "parallel_iterations": PARALLEL_ITERATIONS}
        out = dict(node, inputs=inputs, attrs=new_attrs, output_dtypes=[t.name for t in types],
                   output_shapes=[s.as_list() if s.ndims is not None else None for s in shapes])
        return out, const
    for b in bodies:
        _retake_args(b, args[b["name"]], types, shapes)
    new_attrs = {"Tcond": dtypes.bool, "Tin": types, "Tout": attrs["output_dtypes"],
                 "then_branch": attrs["then_branch"], "else_branch": attrs["else_branch"],
                 "output_shapes": attrs["output_shapes"]}
    return dict(node, inputs=node["inputs"][:1] + inputs, attrs=new_attrs), const


def _arg_slots(bodies, groups, owners):
    """{body name: [its own tensor name for each argument of TF's layout, or None]}:
    a body's arguments, then its captures' placeholders, then its ref captures' stand-ins,
    each in the slots of the groups it owns."""
    own = {b["name"]: iter(b["inputs"] + [v + ":0" for v in b["ref_captures"]])
           for b in bodies}
    slots = {b["name"]: [] for b in bodies}
    for group, owned_by in zip(groups, owners):
        for b in bodies:
            names = own[b["name"]] if b in owned_by else None
            slots[b["name"]].extend(next(names) if names is not None else None
                                    for _ in group)
    return slots


def _retake_args(body, slots, types, shapes):
    """Makes a body take TF's arguments: its own placeholders and variable stand-ins
    (now placeholders) where it has one, new placeholders elsewhere."""
    names = {n["name"] for n in body["nodes"]}
    stand_ins = {v + ":0" for v in body["ref_captures"]}
    nodes, inputs = [], []
    for k, (tensor, dtype, shape) in enumerate(zip(slots, types, shapes)):
        if tensor is None:
            name = unique_name(f"{body['name']}/unused_arg", names)
            nodes.append(_placeholder_node(name, dtype, shape))
            tensor = name + ":0"
        inputs.append(tensor)
    for node in body["nodes"]:
        if node["name"] + ":0" in stand_ins:
            node = _placeholder_node(node["name"], dtypes.as_dtype(node["output_dtypes"][0]),
                                     TensorShape(node["output_shapes"][0]))
        nodes.append(node)
    body.update(nodes=nodes, inputs=inputs, ref_captures=[])


def _pass_through(body, n):
    """The body's results in TF's layout: the loop variables, the trip counter plus one,
    then its other arguments unchanged."""
    names = {node["name"] for node in body["nodes"]}
    one = unique_name(f"{body['name']}/trip_count_step", names)
    names.add(one)
    count = unique_name(f"{body['name']}/trip_count", names)
    body["nodes"] = body["nodes"] + [
        _const_node(one, np.int32(1)),
        {"name": count, "op": "Add", "inputs": [body["inputs"][n], one + ":0"],
         "control_inputs": [], "attrs": {}, "device": "", "location": None,
         "gradient_of": None, "output_dtypes": ["int32"], "output_shapes": [[]]}]
    body["outputs"] = body["outputs"][:n] + [count + ":0"] + body["inputs"][n + 1:]


def _placeholder_node(name, dtype, shape):
    return {"name": name, "op": "Placeholder", "inputs": [], "control_inputs": [],
            "attrs": {"dtype": dtype, "shape": shape}, "device": "", "location": None,
            "gradient_of": None, "output_dtypes": [dtype.name],
            "output_shapes": [shape.as_list() if shape.ndims is not None else None]}


def _const_node(name, value):
    dtype = dtypes.as_dtype(value.dtype)
    return {"name": name, "op": "Const", "inputs": [], "control_inputs": [],
            "attrs": {"dtype": dtype, "value": np.asarray(value)}, "device": "",
            "location": None, "gradient_of": None, "output_dtypes": [dtype.name],
            "output_shapes": [list(np.shape(value))]}
