"""TensorFlow GraphDef protos <-> graphc node dicts.

A node dict is graph_io's in-memory node: {"name", "op", "inputs": ["x:0"],
"control_inputs": [...], "attrs": {decoded graphc attrs}, "device", "output_shapes",
"location", "gradient_of"}. graphc's op types carry TF's names and attrs, except that
graphc infers the dtypes TF spells out as type attrs (T, Tidx, SrcT, ...). OPS says, per
TF op type, which graphc op runs it, which type attrs TF wants on export (taken from an
input's or output's dtype), which type attrs graphc keeps, and which TF-only attrs import
drops. TF op types that graphc builds from several ops (FusedBatchNorm) or from one of
several (Div) are in COMPOSITES.

graphc's own facts travel in attrs with a leading underscore, which TF ignores:
`_graphc_location` (file, line, function of the user's line that made the op) and
`_graphc_gradient_of`; `_output_shapes` is TF's own (Graph.as_graph_def(add_shapes=True))."""
import numbers

import numpy as np

from graphc import dtypes
from graphc.framework.tensor_shape import TensorShape
from graphc.tf_formats import protos
from graphc.tf_formats.tensor_lists import COMPOSITES as TENSOR_LIST_COMPOSITES
from graphc.tf_formats.tensors import (FormatError, array_of, data_type, graphc_dtype,
                                       graphc_shape, shape_proto, tensor_proto)

LOCATION_ATTR = "_graphc_location"
GRADIENT_OF_ATTR = "_graphc_gradient_of"
SHAPES_ATTR = "_output_shapes"
_DT_VARIANT = 21


class _Variant:
    """The dtype of a TensorList handle (DT_VARIANT). graphc keeps a list as the dense
    tensor of its elements (tensor_lists.py), whose dtype a While's or If's loop
    variables and arguments take from their inputs when imported."""

    name = "variant"

    def __repr__(self):
        return "variant"


VARIANT = _Variant()


class OpSpec:
    """How one TF op type maps onto graphc. `types` {TF type attr: input index, or "out"
    for output 0's dtype, or "N" for the number of inputs} is added on export; `keep`
    are type attrs graphc reads itself; `drop` are TF attrs graphc has no use for;
    `defaults` fill attrs a TF file may leave out (TF strips attrs at their default)."""

    def __init__(self, types=None, keep=(), drop=(), defaults=None, graphc_type=None):
        self.types = types or {}
        self.keep = frozenset(keep)
        self.drop = frozenset(drop)
        self.defaults = defaults or {}
        self.graphc_type = graphc_type


def _spec_table():
    t0 = {"T": 0}
    unary = ("Abs Neg Exp Log Log1p Expm1 Sqrt Rsqrt Square Tanh Sigmoid Sin Cos Floor Ceil "
             "Round Sign Reciprocal Erf Erfc Relu Relu6 Elu Selu Softplus Softsign Identity "
             "StopGradient ZerosLike OnesLike L2Loss InvertPermutation").split()
    binary = ("Add Sub Mul RealDiv Maximum Minimum Pow FloorDiv FloorMod SquaredDifference "
              "Greater GreaterEqual Less LessEqual").split()
    reductions = "Sum Mean Max Min Prod".split()
    conv = {"dilations": [1, 1, 1, 1], "data_format": "NHWC", "explicit_paddings": [],
            "use_cudnn_on_gpu": True}
    pool = {"data_format": "NHWC"}
    table = {name: OpSpec(t0) for name in unary + binary}
    table.update({
        "AddV2": OpSpec(t0, graphc_type="Add"),
        # TF ops that are another op here: identities TF keeps for its own bookkeeping,
        # and BatchMatMul, which BatchMatMulV2 (broadcasting batch dims) extends
        "Snapshot": OpSpec(t0, graphc_type="Identity"),
        "PreventGradient": OpSpec(t0, graphc_type="Identity", drop=["message"]),
        "BatchMatMul": OpSpec(t0, graphc_type="BatchMatMulV2",
                              defaults={"adj_x": False, "adj_y": False}),
        "Equal": OpSpec(t0, drop=["incompatible_shape_error"]),
        "NotEqual": OpSpec(t0, drop=["incompatible_shape_error"]),
        "LogicalAnd": OpSpec(), "LogicalOr": OpSpec(), "LogicalNot": OpSpec(), "NoOp": OpSpec(),
        "All": OpSpec({"Tidx": 1}, defaults={"keep_dims": False}),
        "Any": OpSpec({"Tidx": 1}, defaults={"keep_dims": False}),
        "ArgMax": OpSpec({"T": 0, "Tidx": 1}, keep=["output_type"],
                         defaults={"output_type": dtypes.int64}),
        "ArgMin": OpSpec({"T": 0, "Tidx": 1}, keep=["output_type"],
                         defaults={"output_type": dtypes.int64}),
        # grad_a/grad_x...: TF 2.x's marks of a gradient's product, no effect on values
        "MatMul": OpSpec(t0, defaults={"transpose_a": False, "transpose_b": False},
                         drop=["grad_a", "grad_b"]),
        "BatchMatMulV2": OpSpec(t0, defaults={"adj_x": False, "adj_y": False},
                                drop=["grad_x", "grad_y"]),
        "BiasAdd": OpSpec(t0, defaults={"data_format": "NHWC"}),
        "Conv2D": OpSpec(t0, defaults=conv),
        "Conv2DBackpropInput": OpSpec({"T": 1}, defaults=conv),
        "Conv2DBackpropFilter": OpSpec(t0, defaults=conv),
        "MaxPool": OpSpec(t0, drop=["explicit_paddings"], defaults=pool),
        "AvgPool": OpSpec(t0, defaults=pool),
        "MaxPoolGrad": OpSpec(t0, drop=["explicit_paddings"], defaults=pool),
        "MaxPoolGradGrad": OpSpec(t0, defaults=pool),
        "AvgPoolGrad": OpSpec({"T": 1}, defaults=pool),
        "BiasAddGrad": OpSpec(t0, defaults={"data_format": "NHWC"}),
        "MirrorPadGrad": OpSpec({"T": 0, "Tpaddings": 1}),
        "Softmax": OpSpec(t0, defaults={"axis": -1}),
        "LogSoftmax": OpSpec(t0, defaults={"axis": -1}),
        "LeakyRelu": OpSpec(t0, defaults={"alpha": 0.2}),
        "Reshape": OpSpec({"T": 0, "Tshape": 1}),
        "Squeeze": OpSpec(t0, defaults={"squeeze_dims": []}),
        "ExpandDims": OpSpec({"T": 0, "Tdim": 1}),
        "ConcatV2": OpSpec({"T": 0, "Tidx": -1, "N": "N-1"}),
        "Pack": OpSpec({"T": 0, "N": "N"}, defaults={"axis": 0}),
        "Unpack": OpSpec(t0, defaults={"axis": 0}),
        "Shape": OpSpec(t0, keep=["out_type"], defaults={"out_type": dtypes.int32}),
        "ShapeN": OpSpec({"T": 0, "N": "N"}, keep=["out_type"],
                         defaults={"out_type": dtypes.int32}),
        "Size": OpSpec(t0, keep=["out_type"], defaults={"out_type": dtypes.int32}),
        "Rank": OpSpec(t0),
        "Cast": OpSpec({"SrcT": 0}, keep=["DstT"], drop=["Truncate"]),
        "Transpose": OpSpec({"T": 0, "Tperm": 1}),
        "Pad": OpSpec({"T": 0, "Tpaddings": 1}),
        "PadV2": OpSpec({"T": 0, "Tpaddings": 1}),
        "MirrorPad": OpSpec({"T": 0, "Tpaddings": 1}),
        "Fill": OpSpec({"T": 1, "index_type": 0}),
        "Range": OpSpec({"Tidx": "out"}),
        "GatherV2": OpSpec({"Tparams": 0, "Tindices": 1, "Taxis": 2},
                           defaults={"batch_dims": 0}),
        "StridedSlice": OpSpec({"T": 0, "Index": 1}, defaults={
            "begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0,
            "shrink_axis_mask": 0}),
        "StridedSliceGrad": OpSpec({"T": 4, "Index": 0}, defaults={
            "begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0,
            "shrink_axis_mask": 0}),
        "Slice": OpSpec({"T": 0, "Index": 1}),
        "Tile": OpSpec({"T": 0, "Tmultiples": 1}),
        "Split": OpSpec({"T": 1}),
        "SplitV": OpSpec({"T": 0, "Tlen": 1}),
        "OneHot": OpSpec({"T": 2, "TI": 0}, defaults={"axis": -1}),
        "Select": OpSpec({"T": 1}),
        "Cumsum": OpSpec({"T": 0, "Tidx": 1}, defaults={"exclusive": False, "reverse": False}),
        "AddN": OpSpec({"T": 0, "N": "N"}),
        "BroadcastTo": OpSpec({"T": 0, "Tidx": 1}),
        "Placeholder": OpSpec(keep=["dtype"], defaults={"shape": TensorShape(None)}),
        "PlaceholderWithDefault": OpSpec({"dtype": 0}),
        "Const": OpSpec(keep=["dtype"]),
        "VariableV2": OpSpec(keep=["dtype"], drop=["container", "shared_name"]),
        # TF2's resource variables (tf.compat.v1 graphs made by TF 2.x) as TF1's ref ones
        "VarHandleOp": OpSpec(keep=["dtype"], graphc_type="VariableV2", drop=[
            "container", "shared_name", "allowed_devices", "debug_name"]),
        "ReadVariableOp": OpSpec(graphc_type="Identity", drop=["dtype"]),
        "AssignVariableOp": OpSpec(graphc_type="Assign", drop=["dtype", "validate_shape"],
                                   defaults={"validate_shape": True}),
        "VarIsInitializedOp": OpSpec(graphc_type="IsVariableInitialized"),
        "IsVariableInitialized": OpSpec({"dtype": 0}),
        "Assign": OpSpec(t0, drop=["use_locking"], defaults={"validate_shape": True}),
        "AssignAdd": OpSpec(t0, drop=["use_locking"]),
        "AssignSub": OpSpec(t0, drop=["use_locking"]),
        "ScatterUpdate": OpSpec({"T": 0, "Tindices": 1}, drop=["use_locking"]),
        "ScatterAdd": OpSpec({"T": 0, "Tindices": 1}, drop=["use_locking"]),
        "ScatterSub": OpSpec({"T": 0, "Tindices": 1}, drop=["use_locking"]),
        "Where": OpSpec(t0),
        "Unique": OpSpec(t0, keep=["out_idx"], defaults={"out_idx": dtypes.int32}),
        "CheckNumerics": OpSpec(t0),
        "SparseSoftmaxCrossEntropyWithLogits": OpSpec({"T": 0, "Tlabels": 1}),
        "RandomUniform": OpSpec({"T": 0}, keep=["dtype"]),
        "RandomStandardNormal": OpSpec({"T": 0}, keep=["dtype"]),
        "TruncatedNormal": OpSpec({"T": 0}, keep=["dtype"]),
        "RandomUniformInt": OpSpec({"T": 0, "Tout": 1}),
        # string ops (graphc/ops/string_ops.py) and whole files (io_ops.py)
        "StringJoin": OpSpec({"N": "N"}, defaults={"separator": ""}),
        "ReduceJoin": OpSpec(defaults={"keep_dims": False, "separator": ""}),
        "StringSplit": OpSpec(defaults={"skip_empty": True}),
        "StringSplitV2": OpSpec(defaults={"maxsplit": -1}),
        "StringLength": OpSpec(defaults={"unit": "BYTE"}),
        "StringLower": OpSpec(defaults={"encoding": ""}),
        "StringUpper": OpSpec(defaults={"encoding": ""}),
        "StringStrip": OpSpec(),
        "Substr": OpSpec({"T": 1}, defaults={"unit": "BYTE"}),
        "RegexReplace": OpSpec(defaults={"replace_global": True}),
        "RegexFullMatch": OpSpec(),
        "StaticRegexReplace": OpSpec(defaults={"replace_global": True}),
        "StaticRegexFullMatch": OpSpec(),
        "StringToNumber": OpSpec(keep=["out_type"], defaults={"out_type": dtypes.float32}),
        "AsString": OpSpec(t0, defaults={"precision": -1, "scientific": False,
                                         "shortest": False, "width": -1, "fill": ""}),
        "DecodeRaw": OpSpec(keep=["out_type"], defaults={"little_endian": True}),
        "StringToHashBucketFast": OpSpec(),
        "EncodeBase64": OpSpec(defaults={"pad": False}), "DecodeBase64": OpSpec(),
        "ReadFile": OpSpec(), "WriteFile": OpSpec(), "MatchingFiles": OpSpec(),
        "SparseToDense": OpSpec({"T": 2, "Tindices": 0}, defaults={"validate_indices": True}),
        # images (ops/image_decode.py)
        "DecodeJpeg": OpSpec(defaults={"channels": 0}),
        "DecodePng": OpSpec(keep=["dtype"], defaults={"channels": 0, "dtype": dtypes.uint8}),
        "DecodeBmp": OpSpec(defaults={"channels": 0}),
        "DecodeGif": OpSpec(),
        "DecodeImage": OpSpec(keep=["dtype"], defaults={"channels": 0, "dtype": dtypes.uint8,
                                                        "expand_animations": True}),
        "EncodePng": OpSpec(t0, defaults={"compression": -1}),
        "EncodeJpeg": OpSpec(drop=["format", "density_unit", "xmp_metadata"], defaults={
            "quality": 95, "progressive": False, "optimize_size": False,
            "chroma_downsampling": True, "x_density": 300, "y_density": 300}),
        # TF1's lookup tables (ops/lookup_ops.py), whose handle is a string (a ref in TF1)
        "HashTable": OpSpec(keep=["key_dtype", "value_dtype"],
                            drop=["container", "shared_name", "use_node_name_sharing"]),
        "InitializeTable": OpSpec({"Tkey": 1, "Tval": 2}),
        "InitializeTableFromTextFile": OpSpec(defaults={"vocab_size": -1, "delimiter": "\t"},
                                              drop=["offset"]),
        "LookupTableFind": OpSpec({"Tin": 1, "Tout": 2}),
        "LookupTableSize": OpSpec(),
        # TF 1.x's later and TF2's resource-handle forms of the same tables
        "HashTableV2": OpSpec(keep=["key_dtype", "value_dtype"], graphc_type="HashTable",
                              drop=["container", "shared_name", "use_node_name_sharing"]),
        "InitializeTableV2": OpSpec(graphc_type="InitializeTable", drop=["Tkey", "Tval"]),
        "LookupTableImportV2": OpSpec(graphc_type="InitializeTable", drop=["Tin", "Tout"]),
        "InitializeTableFromTextFileV2": OpSpec(graphc_type="InitializeTableFromTextFile",
                                                defaults={"vocab_size": -1, "delimiter": "\t"},
                                                drop=["offset"]),
        "LookupTableFindV2": OpSpec(graphc_type="LookupTableFind", drop=["Tin", "Tout"]),
        "LookupTableSizeV2": OpSpec(graphc_type="LookupTableSize"),
        # TF's Assert names its message in its data inputs; graphc's attr adds to them
        "Assert": OpSpec(drop=["T"], defaults={"message": "", "summarize": 3}),
        # control flow v2; _functional translates their attrs
        "While": OpSpec(), "If": OpSpec(),
        "StatelessWhile": OpSpec(graphc_type="While"), "StatelessIf": OpSpec(graphc_type="If"),
    })
    for name in reductions:
        table[name] = OpSpec({"T": 0, "Tidx": 1}, defaults={"keep_dims": False})
    return table


OPS = _spec_table()
_RANDOM_OPS = ("RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt")


# ------------------------------------------------------------------ attrs
def _attr_from_proto(value, where):
    kind = value.WhichOneof("value")
    if kind == "list":
        return [_attr_item(field, item, where)
                for field in ("s", "i", "f", "b", "type", "shape", "tensor")
                for item in getattr(value.list, field)]
    if kind in (None, "s", "i", "f", "b", "type", "shape", "tensor"):
        return None if kind is None else _attr_item(kind, getattr(value, kind), where)
    if kind == "func":  # a body of a control-flow op, by its name in the library
        if len(value.func.attr):
            raise FormatError(f"{where}: function {value.func.name!r} is called with attrs "
                              "(a polymorphic function), which graphc does not support")
        return value.func.name
    raise FormatError(f"{where}: attr kind {kind!r} (placeholders) is not supported by "
                      "graphc")


def _attr_item(field, item, where):
    """The graphc value of one AttrValue item held in `field`."""
    if field == "s":
        try:
            return item.decode("utf-8")
        except UnicodeDecodeError:
            return bytes(item)
    if field == "type":
        return VARIANT if item == _DT_VARIANT else graphc_dtype(item, where)
    if field == "shape":
        return graphc_shape(item)
    if field == "tensor":
        return array_of(item, where)
    return {"i": int, "f": float, "b": bool}[field](item)


# (ListValue field, test) for the items of a list attr, most specific first
_LIST_FIELDS = (("b", lambda v: isinstance(v, (bool, np.bool_))),
                ("i", lambda v: isinstance(v, numbers.Integral)),
                ("f", lambda v: isinstance(v, numbers.Real)),
                ("s", lambda v: isinstance(v, (str, bytes))),
                ("type", lambda v: isinstance(v, dtypes.DType)),
                ("shape", lambda v: isinstance(v, TensorShape)),
                ("tensor", lambda v: isinstance(v, np.ndarray)))


def _list_field(items):
    """The ListValue field of a list attr's items, or None when no field holds them all."""
    for field, test in _LIST_FIELDS:
        if all(map(test, items)):
            return field
    return None


def _proto_item(field, v):
    if field == "s":
        return v.encode() if isinstance(v, str) else bytes(v)
    if field == "type":
        return data_type(v)
    if field == "shape":
        return shape_proto(v)
    if field == "tensor":
        return tensor_proto(v)
    return {"b": bool, "i": int, "f": float}[field](v)


def attr_proto(value, where):
    """The AttrValue of a graphc attr value."""
    pb = protos.attr_value_pb2()
    if isinstance(value, (list, tuple)):
        field = _list_field(value)
        if field is None:
            raise FormatError(f"{where}: a list of mixed kinds {value!r} has no AttrValue "
                              "form")
        items = [_proto_item(field, v) for v in value]
        return pb.AttrValue(list=pb.AttrValue.ListValue(**{field: items}))
    field = _list_field([value])
    if field is None:
        raise FormatError(f"{where}: value {value!r} of type {type(value).__name__} has no "
                          "AttrValue form")
    return pb.AttrValue(**{field: _proto_item(field, value)})


# ------------------------------------------------------------------ import
def _split_input(name):
    """(kind, tensor name) of a NodeDef input: "x" -> x:0, "x:1", "^x" a control input."""
    if name.startswith("^"):
        return "control", name[1:]
    return "data", name if ":" in name else name + ":0"


def node_dict(node, node_inputs=None):
    """The graph_io node dict of a NodeDef, with TF's attrs translated for graphc;
    `node_inputs` replaces node.input (a function body's, in a GraphDef's syntax)."""
    where = f"node '{node.name}' (op: '{node.op}')"
    spec = OPS.get(node.op)
    decoded = {key: _attr_from_proto(value, f"{where}, attr '{key}'")
               for key, value in node.attr.items()}
    inputs = [_split_input(i) for i in (node.input if node_inputs is None else node_inputs)]
    data_inputs = [n for kind, n in inputs if kind == "data"]
    attrs, extra = {}, {}
    for key, value in decoded.items():
        if key.startswith("_"):
            extra[key] = value
        elif spec is None or (key not in spec.drop and
                              (key not in spec.types or key in spec.keep)):
            attrs[key] = value
    if spec is not None:
        for key, default in spec.defaults.items():
            attrs.setdefault(key, default)
    if node.op in _RANDOM_OPS and not attrs.get("seed") and not attrs.get("seed2"):
        attrs["seed"] = attrs["seed2"] = None  # TF's 0, 0: no seed given
    if node.op in _TF_FUNCTIONAL:
        attrs, data_inputs = _functional(node.op, decoded, data_inputs, where)
    location = extra.get(LOCATION_ATTR)
    return {"name": node.name,
            "op": spec.graphc_type if spec and spec.graphc_type else node.op,
            "inputs": data_inputs,
            "control_inputs": [n for kind, n in inputs if kind == "control"],
            "attrs": attrs, "device": node.device,
            "output_shapes": [None if s.ndims is None else s.as_list()
                              for s in extra.get(SHAPES_ATTR) or []] or None,
            "location": [location[0], int(location[1]), location[2]]
            if isinstance(location, list) and len(location) == 3
            and str(location[1]).isdigit() else None,
            "gradient_of": extra.get(GRADIENT_OF_ATTR)}


def node_dicts(graph_def):
    """graph_io node dicts of every node of a GraphDef proto."""
    return [node_dict(n) for n in graph_def.node]


def unique_name(name, taken):
    """`name`, or the first of name_1, name_2, ... not in `taken` (a set of node names),
    added to `taken`: the name of a node a rewrite adds beside the file's own."""
    unique, i = name, 0
    while unique in taken:
        i += 1
        unique = f"{name}_{i}"
    taken.add(unique)
    return unique


# ------------------------------------------------------------------ control flow
# the attrs of graphc's control-flow ops that name a body (a function of the library)
FUNCTION_ATTRS = {"While": ("cond", "body"), "If": ("then_branch", "else_branch")}
# TF's functional ops, and the attr that only graphc's own layout of them has
_TF_FUNCTIONAL = {"While": "num_loop_vars", "StatelessWhile": "num_loop_vars",
                  "If": "num_then_inputs", "StatelessIf": "num_then_inputs"}


def _functional(op_type, decoded, inputs, where):
    """(graphc attrs, inputs) of a While or If NodeDef. graphc's layout (written by
    graphc) keeps its attrs; TF's (every input a loop variable, or an argument of both
    branches) becomes graphc's with no captured inputs: the loop variables' bodies read
    only their arguments, and each branch gets its own copy of the If's inputs."""
    attrs = {k: v for k, v in decoded.items() if not k.startswith("_")}
    if _TF_FUNCTIONAL[op_type] in attrs:
        if op_type.endswith("If"):  # a FormatError: saved pairs as "branch:tensor"
            attrs["saved"] = [_saved_pair(s, where) for s in attrs.get("saved") or []]
        return attrs, inputs
    body_attrs = ("cond", "body") if op_type.endswith("While") else \
        ("then_branch", "else_branch")
    for key in body_attrs:
        if not isinstance(attrs.get(key), str):
            raise FormatError(f"{where}: attr '{key}' (the function of its body) is missing")
    if op_type.endswith("While"):
        types = _listed_types(attrs, "T", len(inputs), where)
        return {"cond": attrs["cond"], "body": attrs["body"], "num_loop_vars": len(inputs),
                "output_shapes": _listed_shapes(attrs, types, where) + [TensorShape([])],
                "output_dtypes": types + [dtypes.int32], "saved": [], "back_prop": True,
                "ref_input_indices": []}, inputs
    if not inputs:
        raise FormatError(f"{where}: an If needs its condition as input 0")
    if attrs.get("Tcond", dtypes.bool) != dtypes.bool:
        raise FormatError(f"{where}: the condition is {attrs['Tcond'].name}; graphc's If "
                          "takes a bool")
    types = _listed_types(attrs, "Tout", None, where)
    args = inputs[1:]
    return {"then_branch": attrs["then_branch"], "else_branch": attrs["else_branch"],
            "num_then_inputs": len(args), "output_dtypes": types,
            "output_shapes": _listed_shapes(attrs, types, where), "saved": [],
            "ref_input_indices": []}, inputs[:1] + args + args


def _listed_types(attrs, key, count, where):
    types = attrs.get(key, [])
    if not isinstance(types, list) or (count is not None and len(types) != count):
        raise FormatError(f"{where}: attr '{key}' lists {len(types)} types for "
                          f"{count} inputs")
    return types


def _listed_shapes(attrs, types, where):
    """The output shapes; a TensorList's (a scalar handle in TF) is its dense tensor's,
    unknown here."""
    shapes = attrs.get("output_shapes") or [TensorShape(None)] * len(types)
    if len(shapes) != len(types):
        raise FormatError(f"{where}: attr 'output_shapes' has {len(shapes)} shapes for "
                          f"{len(types)} outputs")
    return [TensorShape(None) if t is VARIANT else s for s, t in zip(shapes, types)]


def _saved_pair(item, where):
    branch, _, name = str(item).partition(":")
    if branch not in ("then", "else") or not name:
        raise FormatError(f"{where}: attr 'saved' item {item!r} is not 'then:tensor' or "
                          "'else:tensor'")
    return [branch, name]


# ------------------------------------------------------------------ export
def _input_name(name):
    op, index = name.rsplit(":", 1)
    return op if index == "0" else name


class _Outputs:
    """Dtype and static shape of every tensor of the node dicts, by tensor name."""

    def __init__(self, nodes):
        self.by_name = {}
        for node in nodes:
            for i, (dtype, shape) in enumerate(zip(node.get("output_dtypes") or [],
                                                   node.get("output_shapes") or [])):
                self.by_name[f"{node['name']}:{i}"] = (dtypes.as_dtype(dtype), shape)

    def dtype(self, name, where):
        if name not in self.by_name:
            raise FormatError(f"{where}: the dtype of input {name} is unknown")
        return self.by_name[name][0]

    def rank(self, name):
        shape = self.by_name.get(name, (None, None))[1]
        return None if shape is None else len(shape)


def _type_attr(source, node, outputs, where):
    if source == "out":
        return outputs.dtype(f"{node['name']}:0", where)
    if source == "N":
        return len(node["inputs"])
    if source == "N-1":
        return len(node["inputs"]) - 1
    return outputs.dtype(node["inputs"][source], where)


# the largest Const value a display GraphDef (TensorBoard's graph tab) keeps
MAX_DISPLAY_CONST_BYTES = 1024


def _too_large_to_display(value):
    return isinstance(value, np.ndarray) and \
        (value.nbytes if value.dtype != object else sum(map(len, value.reshape(-1)))) \
        > MAX_DISPLAY_CONST_BYTES


class _NodeWriter:
    """Writes NodeDefs. For display (TensorBoard), an attr without an AttrValue form and a
    large Const value are left out instead of failing the whole graph."""

    def __init__(self, outputs, add_shapes, display, input_name=None):
        self.outputs, self.add_shapes, self.display = outputs, add_shapes, display
        self.input_name = input_name or _input_name

    def set_attr(self, out, key, value, where):
        if self.display and _too_large_to_display(value):
            return
        try:
            out.attr[key].CopyFrom(attr_proto(value, f"{where}, attr '{key}'"))
        except FormatError:
            if not self.display:
                raise

    def write(self, node, node_defs):
        """Adds the NodeDef of graph_io node dict `node` to node_defs (a GraphDef's nodes
        or a FunctionDef's); TF's type attrs are added from the dtypes of the node's
        inputs and outputs."""
        out = node_defs.add(name=node["name"], op=node["op"], device=node.get("device") or "")
        out.input.extend([self.input_name(i) for i in node["inputs"]]
                         + ["^" + c for c in node["control_inputs"]])
        where = f"cannot export op '{node['name']}' (op: '{node['op']}')"
        spec = OPS.get(node["op"])
        attrs = dict(node["attrs"])
        for key in FUNCTION_ATTRS.get(node["op"], ()):
            out.attr[key].func.name = attrs.pop(key)
        if node["op"] == "If" and "saved" in attrs:  # graphc's layout (control_flow.py)
            attrs["saved"] = [f"{branch}:{name}" for branch, name in attrs["saved"]]
        if node["op"] in ("Softmax", "LogSoftmax") and not self.display:
            _drop_last_axis(attrs, node, self.outputs.rank(node["inputs"][0]), where)
        if node["op"] in _RANDOM_OPS and attrs.get("seed") is None and \
                attrs.get("seed2") is None:
            attrs["seed"] = attrs["seed2"] = 0
        for key, value in attrs.items():
            if value is not None:
                self.set_attr(out, key, value, where)
        for key, source in (spec.types if spec else {}).items():
            try:
                self.set_attr(out, key, _type_attr(source, node, self.outputs, where), where)
            except FormatError:
                if not self.display:
                    raise
        if self.add_shapes and node.get("output_shapes") is not None:
            self.set_attr(out, SHAPES_ATTR, [TensorShape(s) for s in node["output_shapes"]],
                          where)
        if node.get("location"):
            self.set_attr(out, LOCATION_ATTR, [str(x) for x in node["location"]], where)
        if node.get("gradient_of"):
            self.set_attr(out, GRADIENT_OF_ATTR, node["gradient_of"], where)
        return out


def _drop_last_axis(attrs, node, rank, where):
    """TF's Softmax works on the last axis and has no `axis` attr."""
    axis = attrs.pop("axis", -1)
    if axis != -1 and (rank is None or axis != rank - 1):
        raise FormatError(f"{where}: TF's {node['op']} has no axis attr and works on the "
                          f"last axis, this one works on axis {axis}")


def graph_def_proto(nodes, add_shapes=False, inputs_from=None, display=False,
                    functions=()):
    """A GraphDef proto of graph_io node dicts (which carry their outputs' dtypes);
    `inputs_from` are node dicts of the ops the nodes' inputs come from (default: nodes);
    `functions` are the function dicts of the bodies of its control-flow ops, written
    to its library (function_def.py). display=True makes TensorBoard's view: it never
    fails, see _NodeWriter."""
    from graphc.tf_formats.control_flow import in_tf_layout
    from graphc.tf_formats.function_def import add_function_def
    pb = protos.graph_pb2()
    out = pb.GraphDef()
    out.versions.producer = 27  # TF 1.15's GraphDef version: what TF1 users' tools read
    inputs_from = nodes if inputs_from is None else inputs_from
    if functions:
        nodes, functions = in_tf_layout(nodes, functions, inputs_from)
        inputs_from = list(inputs_from) + [n for n in nodes if n["op"] == "Const"]
    writer = _NodeWriter(_Outputs(inputs_from), add_shapes, display)
    for node in nodes:
        writer.write(node, out.node)
    for function in functions:
        add_function_def(out.library, function, display)
    return out


# ------------------------------------------------------------------ composites
def _fused_batch_norm(inputs, node, name):
    """FusedBatchNorm(V2/V3) in inference form, as TF computes it: y = (x - mean) *
    rsqrt(variance + epsilon) * scale + offset, with per-channel statistics along C."""
    from graphc.framework.graph import name_scope
    from graphc.ops import math_ops, array_ops
    attrs = node["attrs"]
    if attrs.get("is_training", True):
        raise FormatError(f"node '{node['name']}' (op: '{node['op']}'): is_training=True (batch "
                          "statistics) is not supported by graphc's import; freeze the graph "
                          "for inference")
    x, scale, offset, mean, variance = inputs[:5]
    epsilon = float(attrs.get("epsilon", 1e-4))
    data_format = attrs.get("data_format", "NHWC")
    with name_scope(name + "/"):
        inv = math_ops.rsqrt(variance + epsilon) * scale
        shift = offset - mean * inv
        if data_format in ("NCHW", "NCDHW"):
            spatial = 2 if data_format == "NCHW" else 3
            inv = array_ops.reshape(inv, [-1] + [1] * spatial)
            shift = array_ops.reshape(shift, [-1] + [1] * spatial)
        elif data_format not in ("NHWC", "NDHWC"):
            raise FormatError(f"node '{node['name']}' (op: '{node['op']}'): data_format "
                              f"{data_format!r}")
        y = math_ops.add(x * inv, shift, name="y")
    # outputs 1-4 (and V3's 5): the statistics used, TF's inference outputs
    return [y, mean, variance, mean, variance, array_ops.zeros_like(mean)]


def _div(inputs, node, name):
    """TF's Div: RealDiv for floating types; for integers C's division, rounding toward
    zero: the floor quotient, plus one where the division was inexact and the operands'
    signs differ."""
    from graphc.framework.graph import name_scope
    from graphc.ops import math_ops
    x, y = inputs[:2]
    with name_scope(name + "/"):
        if x.dtype.is_floating:
            return [math_ops.truediv(x, y, name="y")]
        floor = math_ops.floordiv(x, y)
        inexact = math_ops.not_equal(math_ops.floormod(x, y), 0)
        signs_differ = math_ops.not_equal(math_ops.less(x, 0), math_ops.less(y, 0))
        fix = math_ops.cast(math_ops.logical_and(inexact, signs_differ), x.dtype)
        return [math_ops.add(floor, fix, name="y")]


def _activation_grad(derivative):
    """TF's TanhGrad/SigmoidGrad(y, dy): dy times the activation's derivative at its
    output y, as TF computes them."""
    def build(inputs, node, name):
        from graphc.ops import math_ops
        y, dy = inputs[:2]
        return [math_ops.multiply(dy, derivative(y), name=name)]
    return build


COMPOSITES = {"TanhGrad": _activation_grad(lambda y: 1 - y * y),
              "SigmoidGrad": _activation_grad(lambda y: y * (1 - y)),
              "FusedBatchNorm": _fused_batch_norm, "FusedBatchNormV2": _fused_batch_norm,
              "FusedBatchNormV3": _fused_batch_norm, "Div": _div, **TENSOR_LIST_COMPOSITES}
