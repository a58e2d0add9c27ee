"""The uncompiled graph to and from files: TensorFlow's GraphDef, and graphc's own JSON.

Graph.as_graph_def() returns TensorFlow's GraphDef proto (tf_formats/graph_def.py maps
graphc's ops onto TF's op types and attrs); write_graph writes it as binary protobuf (.pb)
or protobuf text (.pbtxt, as_text), and graphc's JSON where the name ends in .json.
import_graph_def takes a GraphDef proto (one TF wrote: frozen models) or graphc's JSON.

graphc's JSON graph def (plain JSON, no pickle, nothing evaluated):
    {"format": "graphc.GraphDef", "version": 1,
     "nodes": [{"name", "op", "inputs": ["x:0", ...], "control_inputs": ["init", ...],
                "attrs": {...}, "device", "output_dtypes": ["float32", ...],
                "output_shapes": [[2, null] | null, ...],
                "location": [file, line, function] | null, "gradient_of": name | null}]}
The bodies of control-flow ops (While, If: framework/func_graph.py) are kept in a
"functions" list beside "nodes" (in a GraphDef, its function library: FunctionDefs, as TF
2.x keeps the bodies of its While and If, see tf_formats/function_def.py):
    "functions": [{"name", "inputs": [placeholder tensor names], "outputs": [tensor names],
                   "ref_captures": [VariableV2 op names], "nodes": [...]}]
A body's nodes may call bodies of their own (nested loops and conds): the list is flat,
by name. A file is checked before any op is made: a node calling a function the file
lacks, or a body that does not fit its call, is an error naming them.
Attrs use the compiler IR's tagged encoding (graphc.compiler.ir.encode_attr): DType as
{"dtype"}, TensorShape as {"shape"}, arrays as base64 {"ndarray", "dtype", "shape"}, tuples
as {"tuple"}. A meta graph adds the collections:
    {"format": "graphc.MetaGraphDef", "version": 1, "graph_def": {...},
     "collections": {key: [{"variable": {...}} | {"tensor": name} | {"op": name} |
                           {"value": str/number/bool}, ...]}}
Collection items of other kinds (Python objects with no graph meaning) are not saved.

    gc.train.write_graph(sess.graph, logdir, "model.pbtxt")     # TF's text GraphDef
    gc.import_graph_def(graph_def, input_map={"x:0": my_x}, return_elements=["probs:0"])
    gc.train.export_meta_graph("model.meta")
    saver = gc.train.import_meta_graph("model.meta"); saver.restore(sess, ckpt)
"""
import functools
import json
import os

import numpy as np

from graphc import dtypes
from graphc.compiler.ir import decode_attrs, encode_attrs
from graphc.framework.func_graph import FuncGraph, function_of
from graphc.framework.graph import Graph, Operation, Tensor, get_default_graph
from graphc.framework.op_def import OP_DEFS
from graphc.framework.tensor_shape import TensorShape
from graphc.tf_formats import (function_def as tf_function_def, graph_def as tf_graph_def,
                               meta_graph as tf_meta_graph, protos,
                               v1_control_flow as tf_v1_control_flow)
from graphc.tf_formats.graph_def import FUNCTION_ATTRS
from graphc.variables import Variable

__all__ = ["JsonGraphDef", "as_graph_def", "json_graph_def", "write_graph", "read_graph_def",
           "import_graph_def", "export_meta_graph", "export_json_meta_graph",
           "import_meta_graph"]

GRAPH_FORMAT = "graphc.GraphDef"
META_FORMAT = "graphc.MetaGraphDef"
VERSION = 1
_ARRAY_KINDS = "biufc"  # numpy kinds an attr array may have (no objects, no void)


class JsonGraphDef:
    """A graph def in graphc's own JSON form: `node` is the list of JSON node dicts
    (attrs tagged as encode_attrs writes them), `function` the JSON function dicts of
    the bodies its control-flow ops call."""

    def __init__(self, node=None, function=None):
        self.node = list(node or [])
        self.function = list(function or [])

    def to_dict(self):
        out = {"format": GRAPH_FORMAT, "version": VERSION, "nodes": self.node}
        if self.function:
            out["functions"] = self.function
        return out

    def nodes(self):
        """The node dicts with decoded attrs, as the importer takes them."""
        return _decoded_nodes(self.node)

    def functions(self):
        """{name: function dict} with decoded attrs, as the importer takes them."""
        functions = {}
        for function in self.function:
            if function["name"] in functions:
                raise ValueError(f"graph def has two functions named '{function['name']}'")
            functions[function["name"]] = dict(function,
                                               nodes=_decoded_nodes(function["nodes"]))
        return functions

    def __len__(self):
        return len(self.node)

    def __repr__(self):
        return f"<gc JsonGraphDef {len(self.node)} nodes>"


def _decoded_nodes(json_nodes):
    out = []
    for node in json_nodes:
        try:
            attrs = decode_attrs(_checked_attrs(node.get("attrs", {})))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"node '{node['name']}': bad attr encoding ({e})") from None
        out.append(dict(node, attrs=attrs, inputs=list(node.get("inputs", [])),
                        control_inputs=list(node.get("control_inputs", []))))
    return out


def _is_proto(obj, message_name):
    descriptor = getattr(obj, "DESCRIPTOR", None)
    return getattr(descriptor, "name", None) == message_name


# ------------------------------------------------------------------ writing
def graph_nodes(graph):
    """Node dicts (decoded attrs, every output's dtype and static shape) of the ops of
    `graph`, in the order they were added (one op per graph.version step)."""
    nodes = []
    for op in graph.get_operations():
        nodes.append({
            "name": op.name, "op": op.type, "inputs": [t.name for t in op.inputs],
            "control_inputs": [c.name for c in op.control_inputs], "attrs": dict(op.attrs),
            "device": op.device or "",
            "location": None if op.location is None else list(op.location),
            "gradient_of": None if op.forward_op is None else op.forward_op.name,
            "output_dtypes": [t.dtype.name for t in op.outputs],
            "output_shapes": [t.shape.as_list() if t.shape.ndims is not None else None
                              for t in op.outputs]})
    return nodes


def graph_functions(graph):
    """Function dicts (tf_formats/function_def.py) of the bodies that the control-flow
    ops of `graph` call, the bodies' own bodies included."""
    functions, graphs = {}, [graph]
    while graphs:
        for op in graphs.pop().get_operations():
            for key in FUNCTION_ATTRS.get(op.type, ()):
                body = function_of(op, key)
                known = functions.get(body.name)
                if known is not None:
                    if known[0] is not body:  # bodies are named uniquely when built
                        raise ValueError(f"cannot save op '{op.name}': two bodies are "
                                         f"named '{body.name}'")
                    continue
                functions[body.name] = (body, _function_dict(body))
                graphs.append(body)
    return [function for _, function in functions.values()]


def _function_dict(body):
    return {"name": body.name, "nodes": graph_nodes(body),
            "inputs": [t.name for t in body.inputs], "outputs": [t.name for t in body.outputs],
            "ref_captures": [inner.op.name for _, inner in body.ref_captures]}


def _json_functions(functions):
    return [dict(f, nodes=_json_nodes(f["nodes"], add_shapes=True)) for f in functions]


def _json_nodes(nodes, add_shapes):
    out = []
    for node in nodes:
        try:
            attrs = encode_attrs(node["attrs"])
        except TypeError as e:
            raise TypeError(f"cannot save op '{node['name']}' (op: '{node['op']}'): "
                            f"{e}") from None
        entry = {k: v for k, v in node.items() if k != "output_shapes" or add_shapes}
        entry["attrs"] = attrs
        out.append(entry)
    return out


def as_graph_def(graph=None, add_shapes=False, from_version=None):
    """tf.Graph.as_graph_def: TensorFlow's GraphDef proto of `graph` (default: the default
    graph); add_shapes records each output's static shape in TF's `_output_shapes` attr;
    with `from_version`, only the ops added since graph.version had that value."""
    graph = graph or get_default_graph()
    nodes = graph_nodes(graph)
    return tf_graph_def.graph_def_proto(nodes[from_version or 0:], add_shapes, nodes,
                                        functions=graph_functions(graph))


def json_graph_def(graph=None, add_shapes=True):
    """graphc's own JSON graph def of `graph` (what write_graph writes to a .json name)."""
    graph = graph or get_default_graph()
    return JsonGraphDef(_json_nodes(graph_nodes(graph), add_shapes),
                        _json_functions(graph_functions(graph)))


def write_graph(graph_or_graph_def, logdir, name, as_text=True):
    """Writes a graph (a Graph, a GraphDef proto or a JsonGraphDef) to logdir/name; returns
    the path. A name ending in .json gets graphc's own JSON; any other name gets TF's
    GraphDef, as protobuf text (as_text, TF's .pbtxt) or binary (TF's .pb)."""
    os.makedirs(logdir or ".", exist_ok=True)
    path = os.path.join(logdir, name)
    if str(name).endswith(".json"):
        _write_json(path, _to_json_graph_def(graph_or_graph_def).to_dict(), as_text)
    else:
        _write_proto(path, _to_proto_graph_def(graph_or_graph_def), as_text)
    return path


def _to_json_graph_def(obj):
    if isinstance(obj, Graph):
        return json_graph_def(obj)
    if _is_proto(obj, "GraphDef"):
        nodes, functions = _proto_parts(obj)
        return JsonGraphDef(_json_nodes(nodes, add_shapes=True),
                            _json_functions(functions.values()))
    return _to_graph_def(obj)


def _to_proto_graph_def(obj):
    if isinstance(obj, Graph):
        return as_graph_def(obj, add_shapes=False)
    if _is_proto(obj, "GraphDef"):
        return obj
    graph_def = _to_graph_def(obj)
    nodes = graph_def.nodes()
    return tf_graph_def.graph_def_proto(nodes, any(n.get("output_shapes") for n in nodes),
                                        functions=graph_def.functions().values())


def _write_proto(path, message, as_text):
    data = (protos.text_format().MessageToString(message).encode() if as_text
            else message.SerializeToString())
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def export_meta_graph(filename=None, meta_info_def=None, graph_def=None, saver_def=None,
                      collection_list=None, as_text=False, graph=None, export_scope=None,
                      clear_devices=False, clear_extraneous_savers=False,
                      strip_default_attrs=False, save_debug_info=False, **kwargs):
    """tf.train.export_meta_graph: TensorFlow's MetaGraphDef proto of the graph and its
    collections (variables as VariableDefs, tensors and ops by name, strings and numbers
    as values), written to `filename` when given (binary, or protobuf text with as_text).
    Collections of other Python objects are left out, as TF leaves them out."""
    graph = graph or get_default_graph()
    pb = protos.meta_graph_pb2()
    meta = pb.MetaGraphDef()
    nodes = graph_nodes(graph)
    if clear_devices:
        nodes = [dict(n, device="") for n in nodes]
    meta.graph_def.CopyFrom(
        tf_graph_def.graph_def_proto(nodes, functions=graph_functions(graph))
        if graph_def is None else _to_proto_graph_def(graph_def))
    if meta_info_def is not None:
        meta.meta_info_def.CopyFrom(meta_info_def)
    if saver_def is not None:
        meta.saver_def.CopyFrom(saver_def)
    for key, items in _collections(graph, collection_list).items():
        tf_meta_graph.add_collection_def(meta.collection_def, key, items)
    if filename:
        _write_proto(filename, meta, as_text)
    return meta


def export_json_meta_graph(filename=None, graph=None, collection_list=None, as_text=False,
                           clear_devices=False):
    """graphc's own JSON meta graph (what Saver.save writes beside graphc's checkpoint
    file); returns it as a dict."""
    graph = graph or get_default_graph()
    gd = json_graph_def(graph)
    if clear_devices:
        for node in gd.node:
            node["device"] = ""
    meta = {"format": META_FORMAT, "version": VERSION, "graph_def": gd.to_dict(),
            "collections": _collections(graph, collection_list)}
    if filename:
        _write_json(filename, meta, as_text)
    return meta


def _collections(graph, collection_list):
    """{key: [encoded item]} of the collections that have items a file can hold."""
    keys = collection_list if collection_list is not None else graph.get_all_collection_keys()
    collections = {}
    for key in keys:
        items = [item for item in map(_encode_item, graph.get_collection(key)) if item]
        if items:
            collections[key] = items
    return collections


def _encode_item(item):
    if isinstance(item, Variable):
        return {"variable": {"tensor": item._ref().name,
                             "initializer": item.initializer.name,
                             "snapshot": item.value().name,
                             "initial_value": item.initial_value.name,
                             "trainable": bool(item.trainable)}}
    if isinstance(item, Tensor):
        return {"tensor": item.name}
    if isinstance(item, Operation):
        return {"op": item.name}
    if item is None or isinstance(item, (str, bool, int, float)):
        return {"value": item}
    return None


def _write_json(path, data, as_text):
    text = json.dumps(data, indent=1 if as_text else None,
                      separators=None if as_text else (",", ":"))
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ------------------------------------------------------------------ reading
def read_graph_def(path):
    """The graph def stored in a file: graphc's JSON (a JsonGraphDef; a meta graph's
    graph) or TensorFlow's GraphDef, binary (.pb) or text (.pbtxt) (a GraphDef proto)."""
    raw = _read_bytes(path)
    if _looks_like_json(raw):
        data = _parse_json(raw, path)
        if data.get("format") == META_FORMAT:
            data = data.get("graph_def")
        return _json_graph_def_of(data)
    return protos.parse_message(raw, protos.graph_pb2().GraphDef, path)


def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise OSError(f"cannot read graph file {path}: {e.strerror or e}") from None


def _looks_like_json(raw):
    return raw.lstrip()[:1] == b"{"


def _read_json(path):
    return _parse_json(_read_bytes(path), path)


def _parse_json(raw, what):
    kind = _tf_message_kind(raw)
    if kind is not None:
        hint = ("gc.train.import_meta_graph(path)" if kind == "MetaGraphDef" else
                "gc.import_graph_def(gc.graph_io.read_graph_def(path))")
        raise ValueError(f"{what} is a TensorFlow {kind}, not a graphc JSON graph file: "
                         f"read it with {hint}")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ValueError(f"{what} is not a graphc graph file (invalid JSON: "
                         f"{str(e)[:100]})") from None
    if not isinstance(data, dict) or data.get("format") not in (GRAPH_FORMAT, META_FORMAT):
        raise ValueError(f"{what} is not a graphc graph file (no graphc format tag)")
    if not isinstance(data.get("version"), int) or data["version"] > VERSION:
        raise ValueError(f"{what}: graph file version {data.get('version')!r} is newer than "
                         f"this graphc reads ({VERSION})")
    return data


def _tf_message_kind(raw):
    """"MetaGraphDef" or "GraphDef" when `raw` (not JSON) parses as one with nodes."""
    message = tf_graph_message(raw)
    return None if message is None else type(message).DESCRIPTOR.name


def tf_graph_message(raw):
    """The MetaGraphDef or GraphDef proto `raw` (not JSON) parses as, with nodes, or None."""
    if _looks_like_json(raw) or not raw.strip():
        return None
    try:
        candidates = [(protos.meta_graph_pb2().MetaGraphDef, lambda m: m.graph_def.node),
                      (protos.graph_pb2().GraphDef, lambda m: m.node)]
    except ImportError:
        return None
    for message_class, nodes in candidates:
        try:
            message = protos.parse_message(raw, message_class, "")
        except ValueError:
            continue
        if len(nodes(message)) and all(n.op for n in nodes(message)):
            return message
    return None


def _graph_def_dict(data):
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise ValueError("graph def has no node list")
    _check_json_nodes(data["nodes"], "graph def")
    functions = data.get("functions", [])
    if not isinstance(functions, list):
        raise ValueError("graph def: 'functions' is not a list")
    for i, f in enumerate(functions):
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or \
                not isinstance(f.get("nodes"), list) or \
                any(not isinstance(f.get(k), list) or
                    not all(isinstance(x, str) for x in f[k])
                    for k in ("inputs", "outputs", "ref_captures")):
            raise ValueError(f"graph def function {i} is malformed (it needs a name, and "
                             "nodes, inputs, outputs and ref_captures lists)")
        _check_json_nodes(f["nodes"], f"graph def function '{f['name']}'")
    return data


def _check_json_nodes(nodes, where):
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("name"), str) or \
                not isinstance(node.get("op"), str) or \
                not isinstance(node.get("inputs", []), list) or \
                not isinstance(node.get("attrs", {}), dict):
            raise ValueError(f"{where} node {i} is malformed")


def _json_graph_def_of(data):
    data = _graph_def_dict(data)
    return JsonGraphDef(data["nodes"], data.get("functions"))


def _to_graph_def(obj):
    """A JsonGraphDef of graphc's JSON forms (the object, or its dict)."""
    if isinstance(obj, JsonGraphDef):
        return obj
    if isinstance(obj, dict):
        if obj.get("format") == META_FORMAT:
            obj = obj["graph_def"]
        return _json_graph_def_of(obj)
    raise TypeError(f"expected a gc.Graph, a GraphDef proto or a graphc JSON graph def, got "
                    f"{type(obj).__name__}")


def _import_parts(graph_def):
    """(node dicts, {name: function dict}) of any graph def form, decoded and checked."""
    if _is_proto(graph_def, "GraphDef"):
        return _proto_parts(graph_def)
    if isinstance(graph_def, Graph):
        raise TypeError("import_graph_def takes a GraphDef, not a Graph: pass "
                        "graph.as_graph_def()")
    graph_def = _to_graph_def(graph_def)
    return _checked_parts(graph_def.nodes(), graph_def.functions())


def _proto_parts(graph_def):
    nodes = tf_graph_def.node_dicts(graph_def)
    functions = tf_function_def.function_dicts(graph_def.library)
    if any(n["op"] == "Enter" for n in nodes):  # TF1's loops: frames, not functions
        nodes, loops = tf_v1_control_flow.rebuild_loops(nodes)
        functions.update((f["name"], f) for f in loops)
    return _checked_parts(nodes, functions)


def _checked_parts(nodes, functions):
    """Every body the nodes and the functions call is there."""
    tf_function_def.check_bodies(nodes, functions, "graph def")
    for function in functions.values():
        tf_function_def.check_bodies(function["nodes"], functions,
                                     f"function '{function['name']}'")
    return nodes, functions


def import_graph_def(graph_def, input_map=None, return_elements=None, name=None,
                     op_dict=None, producer_op_list=None):
    """Adds the ops of `graph_def` to the default graph under the name scope `name`
    ("import" by default, "" for none). input_map {"x:0": Tensor} replaces inputs of the
    imported ops by existing tensors; returns the ops/tensors named in return_elements."""
    nodes, functions = _import_parts(graph_def)
    return _Importer(get_default_graph(), nodes, input_map,
                     "import" if name is None else name, functions).returns(return_elements)


class _Importer:
    """Creates the ops of a list of node dicts (decoded attrs) in `graph`, and the bodies
    (FuncGraphs) of its control-flow ops from `functions` {name: function dict}.

    A body is made for each op that calls it (its captures are that op's inputs), named
    after its function, unique among the bodies of the graph imported into. A body's
    ops keep their names under the import's scope, as the outer ops do."""

    def __init__(self, graph, nodes, input_map, scope, functions=None, body_of=None):
        self.graph = graph
        self.functions = functions or {}
        if body_of is not None:  # a body's ops, under the scope of the import making it
            self.prefix, self.body_names = body_of.prefix, body_of.body_names
        else:
            if scope:
                scope = graph.unique_name(scope.rstrip("/"))
            self.prefix = scope + "/" if scope else ""
            self.body_names = set(_body_names(graph))
        self.input_map = {_tensor_name(k): self._mapped(k, v)
                          for k, v in (input_map or {}).items()}
        self.used = set()
        self.ops = {}       # node name -> the op made for it (a composite's last op)
        self.outputs = {}   # node name -> its output tensors
        by_name = {n["name"]: n for n in nodes}
        if len(by_name) != len(nodes):
            raise ValueError("graph def has duplicate node names")
        for node in _topological(nodes, by_name):
            self._create(node)
        unused = sorted(set(self.input_map) - self.used)
        if unused:
            raise ValueError(f"Attempted to map inputs that were not found in graph_def: "
                             f"[{', '.join(unused)}]")

    def _mapped(self, key, value):
        value = getattr(value, "_as_graph_element", lambda: value)()
        if isinstance(value, Variable):
            value = value.value()
        if not isinstance(value, Tensor) or value.graph is not self.graph:
            raise ValueError(f"input_map[{key!r}] must be a Tensor of the graph imported into")
        return value

    def name(self, name):
        return self.prefix + name

    def _output(self, name):
        """The tensor `op:index` of the imported ops, or None."""
        op_name, index = name.rsplit(":", 1)
        outputs = self.outputs.get(op_name)
        if outputs is None or not index.isdigit() or int(index) >= len(outputs):
            return None
        return outputs[int(index)]

    def _input(self, node, name):
        name = _tensor_name(name)
        if name in self.input_map:
            self.used.add(name)
            return self.input_map[name]
        tensor = self._output(name)
        if tensor is None:
            raise ValueError(f"node '{node['name']}': input '{name}' is not an output of an "
                             "op in the graph def")
        return tensor

    def _create(self, node):
        g = self.graph
        inputs = [self._input(node, i) for i in node.get("inputs", [])]
        if node["op"] in FUNCTION_ATTRS:
            node = self._with_bodies(node, inputs)
        composite = tf_graph_def.COMPOSITES.get(node["op"])
        if composite is None and node["op"] not in OP_DEFS:
            hint = " (TF1's cond: graphc rebuilds TF1's loop frames, not its conds; write " \
                "the graph with control flow v2)" if node["op"] in ("Switch", "Merge") else ""
            raise ValueError(f"graph def node '{node['name']}' has op type '{node['op']}', "
                             f"which graphc does not support{hint}")
        with g.control_dependencies(None), g.name_scope(None):
            if composite is not None:
                outputs = composite(inputs, node, self.name(node["name"]))
                op = outputs[0].op
            else:
                op = self._create_op(node, inputs)
                outputs = op.outputs
        for c in node.get("control_inputs", []):
            if c in self.ops:
                op._add_control_input(self.ops[c])
        for t, shape in zip(outputs, node.get("output_shapes") or []):
            if shape is not None:
                try:
                    t.set_shape(TensorShape(shape))
                except ValueError:
                    pass  # inference knows better than the file: keep the inferred shape
        location = node.get("location")
        fwd = node.get("gradient_of")
        op._set_origin(node.get("device") or op.device,
                       tuple(location) if isinstance(location, list) and len(location) == 3
                       else op.location, self.ops[fwd] if fwd in self.ops else op.forward_op)
        self.ops[node["name"]] = op
        self.outputs[node["name"]] = list(outputs)

    def _create_op(self, node, inputs):
        """The op of one node; an attr the op needs and the file lacks is named."""
        if any(v is tf_graph_def.VARIANT or (isinstance(v, list) and
                                             tf_graph_def.VARIANT in v)
               for v in node["attrs"].values()):
            raise ValueError(f"graph def node '{node['name']}' (op: '{node['op']}') holds a "
                             "TensorList (DT_VARIANT) that is not a While's or If's loop "
                             "variable or argument, which graphc cannot type")
        create = self.graph.create_op
        if node["op"] == "VariableV2" and isinstance(self.graph, FuncGraph):
            # a body's stand-in for a variable of its calling op (_link_bodies), which a
            # FuncGraph refuses to create for users
            create = functools.partial(Graph._create_op, self.graph)
        try:
            return create(node["op"], inputs, node["attrs"],
                          name=self.name(node["name"]) + "/")
        except KeyError as e:
            raise ValueError(f"graph def node '{node['name']}' (op: '{node['op']}') lacks "
                             f"attr {e.args[0]!r}") from None
        except IndexError:
            raise ValueError(f"graph def node '{node['name']}' (op: '{node['op']}') has "
                             f"{len(inputs)} inputs, too few for its op") from None

    # ----------------------------------------------------------- bodies
    def _with_bodies(self, node, inputs):
        """`node` with its bodies made (FuncGraphs of self.graph) and its attrs naming
        them; the bodies' captures are its inputs."""
        attrs = dict(node["attrs"])
        where = f"graph def node '{node['name']}' (op: '{node['op']}')"
        _check_layout_attrs(node["op"], attrs, where)
        bodies = {}
        arities = {key: len(self.functions[attrs[key]]["inputs"])
                   for key in FUNCTION_ATTRS[node["op"]]}
        for key, arg_inputs in _argument_inputs(node["op"], attrs, inputs, arities).items():
            bodies[key] = self._body(self.functions[attrs[key]], where,
                                     [t.dtype for t in arg_inputs])
            attrs[key] = bodies[key].name
        attrs["output_dtypes"] = _typed_outputs(node["op"], attrs["output_dtypes"], inputs,
                                                bodies)
        _link_bodies(node["op"], attrs, inputs, bodies, where)
        if self.prefix:  # the saved tensors are the bodies' own, renamed with them
            attrs["saved"] = _prefixed_saved(node["op"], attrs["saved"], self.prefix)
        for body in bodies.values():
            self.graph._functions[body.name] = body
        return dict(node, attrs=attrs)

    def _body(self, function, where, arg_dtypes):
        """The FuncGraph of a function, its TensorList arguments (tensor_lists.py) of the
        dtypes of the calling op's inputs `arg_dtypes`."""
        name = self.prefix + function["name"]
        unique, i = name, 0
        while unique in self.body_names:
            i += 1
            unique = f"{name}_{i}"
        self.body_names.add(unique)
        body = FuncGraph(unique, self.graph)
        nodes = _typed_arguments(function, arg_dtypes)
        with body.as_default():  # the constants a composite (tf_graph_def) makes are its
            ops = _Importer(body, nodes, None, None, self.functions, body_of=self)
        try:
            body.inputs = [ops.tensor(t) for t in function["inputs"]]
            body.outputs = [ops.tensor(t) for t in function["outputs"]]
            body.ref_captures = [(None, ops.ops[name].outputs[0])
                                 for name in function["ref_captures"]]
        except (KeyError, IndexError):
            raise ValueError(f"{where}: function '{function['name']}' names an input, "
                             "output or variable that is not among its nodes") from None
        if any(t.op.type != "Placeholder" for t in body.inputs) or \
                any(t.op.type != "VariableV2" for _, t in body.ref_captures):
            raise ValueError(f"{where}: function '{function['name']}' has an argument "
                             "that is not a Placeholder or a ref capture that is not a "
                             "VariableV2")
        return body

    def tensor(self, name):
        """The imported tensor of a tensor name of the file."""
        tensor = self._output(_tensor_name(name))
        if tensor is None:
            raise KeyError(name)
        return tensor

    def returns(self, names):
        if names is None:
            return None
        out = []
        for n in names:
            found = self._output(n) if ":" in n else self.ops.get(n)
            if found is None:
                raise ValueError(f"Requested return_element {n!r} not found in graph_def.")
            out.append(found)
        return out


def _body_names(graph):
    """The names of the bodies in `graph` and in the bodies nested in them."""
    names, graphs = [], [graph]
    while graphs:
        functions = graphs.pop()._functions
        names.extend(functions)
        graphs.extend(functions.values())
    return names


def _check_layout_attrs(op_type, attrs, where):
    count = "num_loop_vars" if op_type == "While" else "num_then_inputs"
    kinds = {count: int, "output_dtypes": list, "output_shapes": list, "saved": list,
             "ref_input_indices": list}
    for key, kind in kinds.items():
        if not isinstance(attrs.get(key), kind) or isinstance(attrs.get(key), bool):
            what = "an int" if kind is int else "a list"
            raise ValueError(f"{where}: attr '{key}' is missing or not {what}")


def _argument_inputs(op_type, attrs, inputs, arities):
    """{body attr: the op's inputs that its arguments receive, in order} of a While's or
    If's layout (_link_bodies), `arities` {body attr: its number of arguments}."""
    if op_type == "If":
        n_then = arities["then_branch"]
        return {"then_branch": inputs[1:1 + n_then],
                "else_branch": inputs[1 + n_then:1 + n_then + arities["else_branch"]]}
    n, n_cond = attrs.get("num_loop_vars", 0), arities["cond"]
    return {"cond": inputs[:n_cond],
            "body": inputs[:n] + inputs[n_cond:n_cond + arities["body"] - n]}


def _typed_arguments(function, arg_dtypes):
    """The function's nodes, its TensorList arguments typed as their inputs."""
    typed = dict(zip(function["inputs"], arg_dtypes))
    return [dict(n, attrs=dict(n["attrs"], dtype=typed[n["name"] + ":0"]))
            if n["op"] == "Placeholder" and n["attrs"].get("dtype") is tf_graph_def.VARIANT
            and n["name"] + ":0" in typed else n for n in function["nodes"]]


def _typed_outputs(op_type, output_dtypes, inputs, bodies):
    """A While's or If's output dtypes, its TensorLists' typed as the loop variable's
    input or the branch's result."""
    sources = inputs if op_type == "While" else [t for t in bodies["then_branch"].outputs]
    sources = list(sources) + [None] * len(output_dtypes)  # too few: _link_bodies says so
    return [source.dtype if dtype is tf_graph_def.VARIANT and source is not None else dtype
            for dtype, source in zip(output_dtypes, sources)]


def _check_types(op_type, attrs, inputs, bodies, where):
    """The bodies' arguments have their inputs' dtypes, their results the op's."""
    arities = {key: len(fg.inputs) for key, fg in bodies.items()}
    for key, outer in _argument_inputs(op_type, attrs, inputs, arities).items():
        for t, arg in zip(outer, bodies[key].inputs):
            if t.dtype != arg.dtype:
                raise ValueError(f"{where}: input {t.name} is {t.dtype.name}, the argument "
                                 f"{arg.name} of '{bodies[key].name}' it feeds is "
                                 f"{arg.dtype.name}")
    if op_type == "While":
        results = [(bodies["cond"], bodies["cond"].outputs, [dtypes.bool]),
                   (bodies["body"], bodies["body"].outputs, attrs["output_dtypes"])]
    else:
        results = [(fg, fg.outputs, attrs["output_dtypes"]) for fg in bodies.values()]
    for fg, outputs, wanted in results:
        for t, dtype in zip(outputs, wanted):
            if t.dtype != dtype:
                raise ValueError(f"{where}: '{fg.name}' gives {t.dtype.name} ({t.name}) "
                                 f"where the op has {getattr(dtype, 'name', dtype)}")


def _prefixed_saved(op_type, saved, prefix):
    if op_type == "If":  # [branch, tensor name] pairs
        return [[branch, prefix + name] for branch, name in saved]
    return [prefix + name for name in saved]


def _link_bodies(op_type, attrs, inputs, bodies, where):
    """Sets the captures of a While's or If's imported bodies from the op's inputs
    (while_v2.make_while's and cond_v2._make_if's layouts), after checking that the
    bodies fit the op."""
    refs = attrs["ref_input_indices"]
    if any(not isinstance(i, int) or not 0 <= i < len(inputs) for i in refs):
        raise ValueError(f"{where}: attr ref_input_indices {refs!r} is out of its "
                         f"{len(inputs)} inputs")
    if op_type == "While":
        n = attrs.get("num_loop_vars")
        cond, body = bodies["cond"], bodies["body"]
        groups = [(cond, inputs[n:n + len(cond.inputs) - n], cond.inputs[n:]),
                  (body, inputs[len(cond.inputs):len(cond.inputs) + len(body.inputs) - n],
                   body.inputs[n:])]
        fits = isinstance(n, int) and 0 <= n <= min(len(cond.inputs), len(body.inputs)) \
            and len(inputs) == len(cond.inputs) + len(body.inputs) - n + len(refs) and \
            len(cond.outputs) == 1 and len(body.outputs) == n and \
            len(attrs["output_dtypes"]) == n + 1 + len(attrs.get("saved", []))
    else:
        then, other = bodies["then_branch"], bodies["else_branch"]
        n_then = len(then.inputs)
        groups = [(then, inputs[1:1 + n_then], then.inputs),
                  (other, inputs[1 + n_then:1 + n_then + len(other.inputs)], other.inputs)]
        n_out = len(attrs["output_dtypes"]) - len(attrs.get("saved", []))
        fits = attrs.get("num_then_inputs") == n_then and \
            len(inputs) == 1 + n_then + len(other.inputs) + len(refs) and \
            len(then.outputs) == n_out and len(other.outputs) == n_out
    if not fits:
        shown = ", ".join(f"'{fg.name}' ({len(fg.inputs)} args, {len(fg.outputs)} results)"
                          for fg in bodies.values())
        raise ValueError(f"{where}: its {len(inputs)} inputs and attrs do not fit its "
                         f"bodies {shown}")
    _check_types(op_type, attrs, inputs, bodies, where)
    outer_refs = iter(inputs[i] for i in refs)
    for fg, outer, inner in groups:
        fg.captures = list(zip(outer, inner))
        fg._captured.update(fg.captures)
        fg.ref_captures = [(next(outer_refs, None), var) for _, var in fg.ref_captures]
        fg._captured.update(fg.ref_captures)
    if next(outer_refs, None) is not None or \
            any(o is None for fg in bodies.values() for o, _ in fg.ref_captures):
        raise ValueError(f"{where}: its {len(refs)} ref inputs do not match the variables "
                         "its bodies capture")


def _tensor_name(name):
    if not isinstance(name, str):
        raise TypeError(f"tensor names are strings, got {name!r}")
    return name if ":" in name else name + ":0"


def _topological(node_list, by_name):
    """Nodes ordered so that inputs and control inputs come first (file order otherwise)."""
    order, state = [], {}
    for root in node_list:
        if root["name"] in state:
            continue
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            name = node["name"]
            if expanded:
                state[name] = "done"
                order.append(node)
                continue
            if state.get(name) == "done":
                continue
            if state.get(name) == "open":
                raise ValueError(f"graph def has a cycle through node '{name}'")
            state[name] = "open"
            stack.append((node, True))
            deps = [i.rsplit(":", 1)[0] if ":" in i else i for i in node.get("inputs", [])]
            deps += list(node.get("control_inputs", []))
            for dep in reversed(deps):
                dep_node = by_name.get(dep)
                if dep_node is not None and state.get(dep) != "done":
                    if state.get(dep) == "open":
                        raise ValueError(f"graph def has a cycle through node '{dep}'")
                    stack.append((dep_node, False))
    return order


def _checked_attrs(attrs):
    """Rejects array encodings with dtypes a graph cannot hold (objects, structured)."""
    def walk(v):
        if isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            if "ndarray" in v:
                if np.dtype(v["dtype"]).kind not in _ARRAY_KINDS:
                    raise ValueError(f"array dtype {v['dtype']!r} is not allowed")
            elif "dtype" in v and len(v) == 1:
                dtypes.as_dtype(v["dtype"])
            for x in v.values():
                walk(x)
    walk(attrs)
    return attrs


# ------------------------------------------------------------------ meta graphs
def import_meta_graph(meta_graph_or_file, clear_devices=False, import_scope=None, **kwargs):
    """Imports a meta graph (a file, TF's MetaGraphDef proto or graphc's JSON dict) into
    the default graph, restores its collections (variables as Variable objects) and
    returns a Saver for its global variables (None when it has none), keyed by their
    names in the saved graph. A TF meta graph's own saver ops (the scope its saver_def
    names) are not imported: the returned Saver restores TF's checkpoints itself."""
    nodes, functions, collections = _meta_parts(meta_graph_or_file)
    if clear_devices:
        nodes = [dict(n, device="") for n in nodes]
    graph = get_default_graph()
    importer = _Importer(graph, nodes, None, import_scope or "", functions)
    variables = {}
    for key, items in collections.items():
        for item in items if isinstance(items, list) else []:
            value = _decode_item(importer, item, variables)
            if value is not None:
                graph.add_to_collection(key, value)
    global_keys = [item["variable"]["tensor"] for item in collections.get("variables", [])
                   if isinstance(item, dict) and isinstance(item.get("variable"), dict)]
    global_vars = [variables[k] for k in dict.fromkeys(global_keys) if k in variables]
    if not global_vars:
        return None
    from graphc.train.saver import Saver
    return Saver({_strip(importer.prefix, v.op.name): v for v in global_vars})


def _meta_parts(meta, what="meta graph"):
    """(importer node dicts, {name: function dict}, {key: [encoded item]}) of any meta
    graph form."""
    if isinstance(meta, (str, os.PathLike)):
        what = os.fspath(meta)
        raw = _read_bytes(meta)
        meta = _parse_json(raw, what) if _looks_like_json(raw) else \
            protos.parse_message(raw, protos.meta_graph_pb2().MetaGraphDef, what)
    if _is_proto(meta, "MetaGraphDef"):
        nodes, functions = _proto_parts(meta.graph_def)
        saver_scope = meta.saver_def.restore_op_name.rpartition("/")[0]
        if saver_scope:
            nodes = [n for n in nodes if not n["name"].startswith(saver_scope + "/")]
        return nodes, functions, {key: tf_meta_graph.collection_items(key, c, what)
                       for key, c in meta.collection_def.items()}
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        raise ValueError(f"import_meta_graph: {what} is neither a TensorFlow MetaGraphDef nor "
                         "a graphc meta graph")
    graph_def = _to_graph_def(meta["graph_def"])
    nodes, functions = _checked_parts(graph_def.nodes(), graph_def.functions())
    return nodes, functions, meta.get("collections") or {}


def _strip(prefix, name):
    return name[len(prefix):] if prefix and name.startswith(prefix) else name


def _decode_item(importer, item, variables):
    if not isinstance(item, dict) or len(item) != 1:
        return None
    (kind, value), = item.items()
    try:
        if kind == "variable":
            key = value["tensor"]
            if key not in variables:
                variables[key] = _restore_variable(importer, value)
            return variables[key]
        if kind == "tensor":
            return importer.graph.get_tensor_by_name(importer.name(value))
        if kind == "op":
            return importer.graph.get_operation_by_name(importer.name(value))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"meta graph collection item {item!r} does not match the graph "
                         f"({e})") from None
    return value if kind == "value" else None


def _restore_variable(importer, d):
    """A Variable object over imported ops (what TF1 builds from a VariableDef)."""
    g = importer.graph
    v = Variable.__new__(Variable)
    v._variable = g.get_tensor_by_name(importer.name(d["tensor"]))
    v._initializer_op = g.get_operation_by_name(importer.name(d["initializer"]))
    v._snapshot = g.get_tensor_by_name(importer.name(d["snapshot"]))
    v._initial_value = g.get_tensor_by_name(importer.name(d["initial_value"]))
    v._trainable = bool(d.get("trainable", True))
    v.constraint = None
    v._save_slice_info = None
    return v
