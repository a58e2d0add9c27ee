"""TF's CollectionDef <-> graphc's encoded collection items (graph_io's meta graph form:
{"variable": {tensor, initializer, snapshot, initial_value, trainable}}, {"tensor": name},
{"op": name}, {"value": str | number | bool}).

TF keeps a collection of variables as serialized VariableDef protos, of tensors and ops as
a node list (tensor names have ":"), of strings as bytes, of numbers as int64 or float
lists. A collection mixing kinds has no CollectionDef and is left out, as TF leaves it out."""
from graphc.tf_formats import protos

# TF's collections whose bytes_list items are VariableDef protos
VARIABLE_COLLECTIONS = frozenset({"variables", "trainable_variables", "local_variables",
                                   "model_variables", "moving_average_variables",
                                   "metric_variables"})


def add_collection_def(collection_def, key, items):
    """One CollectionDef of encoded items, when they are all of one of its kinds (a
    collection mixing kinds has no CollectionDef and is left out)."""
    kinds = {next(iter(item)) for item in items}
    values = [next(iter(item.values())) for item in items]
    if kinds == {"variable"}:
        var_pb2 = protos.variable_pb2()
        collection_def[key].bytes_list.value.extend(var_pb2.VariableDef(
            variable_name=v["tensor"], initializer_name=v["initializer"],
            snapshot_name=v["snapshot"], initial_value_name=v["initial_value"],
            trainable=v["trainable"]).SerializeToString() for v in values)
    elif kinds <= {"tensor", "op"}:
        collection_def[key].node_list.value.extend(values)
    elif kinds == {"value"} and all(isinstance(v, str) for v in values):
        collection_def[key].bytes_list.value.extend(v.encode() for v in values)
    elif kinds == {"value"} and all(isinstance(v, (bool, int)) for v in values):
        collection_def[key].int64_list.value.extend(int(v) for v in values)
    elif kinds == {"value"} and all(isinstance(v, (int, float)) for v in values):
        collection_def[key].float_list.value.extend(float(v) for v in values)


def collection_items(key, collection_def, where):
    """graphc's encoded items of one TF CollectionDef."""
    kind = collection_def.WhichOneof("kind")
    if kind is None:
        return []
    values = list(getattr(collection_def, kind).value)
    if kind == "node_list":
        return [{"tensor": v} if ":" in v else {"op": v} for v in values]
    if kind == "bytes_list" and key in VARIABLE_COLLECTIONS:
        var_pb2 = protos.variable_pb2()
        items = []
        for raw in values:
            v = protos.parse_message(raw, var_pb2.VariableDef, f"{where}, collection {key!r}",
                                 text_allowed=False)
            items.append({"variable": {
                "tensor": v.variable_name, "initializer": v.initializer_name,
                "snapshot": v.snapshot_name, "initial_value": v.initial_value_name,
                "trainable": v.trainable}})
        return items
    if kind == "bytes_list":
        return [{"value": _str_if_text(v)} for v in values]
    if kind in ("int64_list", "float_list"):
        return [{"value": v} for v in values]
    return []  # any_list: protos graphc has no meaning for


def _str_if_text(raw):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return bytes(raw)
