"""TensorFlow's protobuf messages, imported on first use.

The `tensorboard` package ships TensorFlow's GraphDef, MetaGraphDef, SaverDef, ... under
tensorboard.compat.proto, byte-compatible with TensorFlow's. It lacks example.proto,
feature.proto and tensor_bundle.proto; those few messages are declared here with
protobuf's descriptor API, with TensorFlow's field numbers and types (the wire format is
all that matters; the package name `graphc_tf` keeps them apart from a real TF's)."""
import functools
import importlib
import types

EXTRA_HINT = ("reading and writing TensorFlow's file formats needs the `tensorboard` and "
              "`google-crc32c` packages. Install them with: pip install graphc[tf-formats]")


@functools.lru_cache(maxsize=None)  # a failed import raises, so it is not cached
def _import(module):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{EXTRA_HINT} ({e})") from e


def _tb(name):
    return _import(f"tensorboard.compat.proto.{name}")


def graph_pb2():
    return _tb("graph_pb2")


def node_def_pb2():
    return _tb("node_def_pb2")


def attr_value_pb2():
    return _tb("attr_value_pb2")


def tensor_pb2():
    return _tb("tensor_pb2")


def tensor_shape_pb2():
    return _tb("tensor_shape_pb2")


def types_pb2():
    return _tb("types_pb2")


def meta_graph_pb2():
    return _tb("meta_graph_pb2")


def saver_pb2():
    return _tb("saver_pb2")


def variable_pb2():
    return _tb("variable_pb2")


def text_format():
    return _import("google.protobuf.text_format")


def crc32c_module():
    return _import("google_crc32c")


def parse_message(raw, message_class, what, text_allowed=True):
    """A TF proto message from binary protobuf or (a file's) protobuf text: bytes that
    are all printable UTF-8 are read as text, falling back to binary."""
    pb_message, text_format_ = _import("google.protobuf.message"), text_format()
    message = message_class()
    name = message_class.DESCRIPTOR.name
    text = as_text(raw) if text_allowed else None
    if text is not None:
        try:
            text_format_.Parse(text, message)
            return message
        except (text_format_.ParseError, RecursionError) as e:
            text_error = e
    try:
        message.ParseFromString(raw)
    except (pb_message.DecodeError, RecursionError) as e:
        form, error = ("protobuf text", text_error) if text is not None else \
            ("binary protobuf", e)
        raise ValueError(f"{what} is not a TensorFlow {name} ({form} that does not parse: "
                         f"{str(error)[:160]})") from None
    return message


def as_text(raw):
    """The text of bytes that are printable UTF-8 (protobuf text, JSON), else None."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text[:4096]):
        return None
    return text


# ------------------------------------------------------------ messages TF has, tensorboard lacks
_SCALAR = {"int32": 5, "int64": 3, "float": 2, "bytes": 12, "string": 9, "fixed32": 7,
           "enum": 14, "message": 11}


def _field(name, number, kind, type_name=None, repeated=False, packed=False, oneof=None):
    from google.protobuf import descriptor_pb2
    f = descriptor_pb2.FieldDescriptorProto(
        name=name, number=number, type=_SCALAR[kind],
        label=3 if repeated else 1, json_name=name)
    if type_name:
        f.type_name = type_name
    if packed:
        f.options.packed = True
    if oneof is not None:
        f.oneof_index = oneof
    return f


def _message(name, fields, nested=(), oneofs=(), map_entry=False):
    from google.protobuf import descriptor_pb2
    m = descriptor_pb2.DescriptorProto(name=name, field=fields, nested_type=list(nested))
    for o in oneofs:
        m.oneof_decl.add(name=o)
    if map_entry:
        m.options.map_entry = True
    return m


def _example_file():
    """tensorflow/core/example/{feature,example}.proto."""
    from google.protobuf import descriptor_pb2
    p = ".graphc_tf."
    feature_entry = _message("FeatureEntry", [_field("key", 1, "string"),
                                              _field("value", 2, "message", p + "Feature")],
                             map_entry=True)
    return descriptor_pb2.FileDescriptorProto(
        name="graphc_tf/example.proto", package="graphc_tf", syntax="proto3", message_type=[
            _message("BytesList", [_field("value", 1, "bytes", repeated=True)]),
            _message("FloatList", [_field("value", 1, "float", repeated=True, packed=True)]),
            _message("Int64List", [_field("value", 1, "int64", repeated=True, packed=True)]),
            _message("Feature", [_field("bytes_list", 1, "message", p + "BytesList", oneof=0),
                                 _field("float_list", 2, "message", p + "FloatList", oneof=0),
                                 _field("int64_list", 3, "message", p + "Int64List", oneof=0)],
                     oneofs=["kind"]),
            _message("Features", [_field("feature", 1, "message", p + "Features.FeatureEntry",
                                         repeated=True)], nested=[feature_entry]),
            _message("Example", [_field("features", 1, "message", p + "Features")])])


def _bundle_file():
    """tensorflow/core/protobuf/tensor_bundle.proto. BundleEntryProto's `slices` (field 7,
    TensorSliceProto messages of partitioned variables, which graphc refuses) is declared
    as bytes: the same wire type, enough to see that a tensor has slices."""
    from google.protobuf import descriptor_pb2
    tensor_shape_pb2(), types_pb2(), _tb("versions_pb2")  # their descriptors must be loaded
    endianness = descriptor_pb2.EnumDescriptorProto(name="Endianness", value=[
        descriptor_pb2.EnumValueDescriptorProto(name="LITTLE", number=0),
        descriptor_pb2.EnumValueDescriptorProto(name="BIG", number=1)])
    header = _message("BundleHeaderProto", [
        _field("num_shards", 1, "int32"),
        _field("endianness", 2, "enum", ".graphc_tf.BundleHeaderProto.Endianness"),
        _field("version", 3, "message", ".tensorboard.VersionDef")])
    header.enum_type.append(endianness)
    entry = _message("BundleEntryProto", [
        _field("dtype", 1, "enum", ".tensorboard.DataType"),
        _field("shape", 2, "message", ".tensorboard.TensorShapeProto"),
        _field("shard_id", 3, "int32"), _field("offset", 4, "int64"),
        _field("size", 5, "int64"), _field("crc32c", 6, "fixed32"),
        _field("slices", 7, "bytes", repeated=True)])
    return descriptor_pb2.FileDescriptorProto(
        name="graphc_tf/tensor_bundle.proto", package="graphc_tf", syntax="proto3",
        dependency=["tensorboard/compat/proto/tensor_shape.proto",
                    "tensorboard/compat/proto/types.proto",
                    "tensorboard/compat/proto/versions.proto"],
        message_type=[header, entry])


def _classes(file_proto, names):
    from google.protobuf import descriptor_pool, message_factory
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(file_proto.name)
    except KeyError:
        pool.Add(file_proto)
    return types.SimpleNamespace(**{
        n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"graphc_tf.{n}"))
        for n in names})


@functools.lru_cache(maxsize=None)
def example_pb2():
    _import("google.protobuf")
    return _classes(_example_file(), ["BytesList", "FloatList", "Int64List", "Feature",
                                      "Features", "Example"])


@functools.lru_cache(maxsize=None)
def tensor_bundle_pb2():
    return _classes(_bundle_file(), ["BundleHeaderProto", "BundleEntryProto"])
