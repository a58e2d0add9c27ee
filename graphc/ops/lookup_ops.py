"""Lookup tables as TF1's (tf.lookup, tf.contrib.lookup): a table maps keys to values,
is filled once per Session by its initializer op (from tensors or a text file), and
answers lookups with a default value for missing keys.

A table is Session state (SessionState.tables), so its ops are stateful host ops: the
HashTable op makes the (empty) table and outputs its handle, a string naming it;
InitializeTable / InitializeTableFromTextFile fill it; LookupTableFind and
LookupTableSize read it. As in TF1 the initializers are in the TABLE_INITIALIZERS
collection and run by tables_initializer() (global_variables_initializer does not run
them); a lookup before that is a FailedPreconditionError. Tables with hash buckets for
keys outside the vocabulary (num_oov_buckets) add vocabulary size + FarmHash
Fingerprint64(key) mod num_oov_buckets to what the table misses, TF's FastHashSpec."""
import numpy as np

from graphc import dtypes
from graphc.errors import FailedPreconditionError, InvalidArgumentError, KernelError, NotFoundError
from graphc.framework.graph import GraphKeys, get_default_graph, name_scope
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.sparse_tensor import SparseTensor
from graphc.framework.tensor_shape import TensorShape
from graphc.ops import array_ops, math_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.control_flow_ops import group
from graphc.ops.string_ops import as_string, string_to_hash_bucket_fast

__all__ = ["HashTable", "StaticHashTable", "StaticVocabularyTable", "IdTableWithHashBuckets",
           "KeyValueTensorInitializer", "TextFileInitializer", "TextFileIndex",
           "TextFileIdTableInitializer", "TextFileStringTableInitializer", "FastHashSpec",
           "index_table_from_tensor", "index_table_from_file",
           "index_to_string_table_from_tensor", "index_to_string_table_from_file",
           "index_to_string", "tables_initializer", "TABLE_INITIALIZERS"]

TABLE_INITIALIZERS = GraphKeys.TABLE_INITIALIZERS
_KEY_TYPES = (dtypes.string, dtypes.int64, dtypes.int32)
_TABLE_OP = dict(stateful=True, uses_context=True, kind="opaque", host_only=True)


class TextFileIndex:
    WHOLE_LINE = -2
    LINE_NUMBER = -1


class FastHashSpec:
    """TF's default hasher for out-of-vocabulary buckets: string_to_hash_bucket_fast."""


# ------------------------------------------------------------------ the table state
class _Table:
    """The entries of one table in one Session (None until initialized)."""

    def __init__(self, name):
        self.name = name
        self.entries = None

    def insert(self, keys, values):
        """Initializes the table with keys -> values; again with the same data is a no-op
        and with other data an error, as TF's InitializableLookupTable."""
        entries = {}
        for k, v in zip(keys, values):
            if k in entries and entries[k] != v:
                raise KernelError(f"HashTable has different value for same key. Key {k!r} "
                                  f"has {entries[k]!r} and trying to add value {v!r}",
                                  FailedPreconditionError)
            entries[k] = v
        if self.entries is not None:
            if self.entries != entries:
                raise KernelError("Table was already initialized with different data.",
                                  FailedPreconditionError)
            return
        self.entries = entries

    def checked(self):
        if self.entries is None:
            raise KernelError(f"Table not initialized. (table '{self.name}': run "
                              "tables_initializer() or the table's initializer first)",
                              FailedPreconditionError)
        return self.entries


def _python_key(value):
    return bytes(value) if isinstance(value, bytes) else value.item() \
        if isinstance(value, np.generic) else value


# ------------------------------------------------------------------------- ops
def _handle_infer(inputs, a):
    return TensorShape([]), dtypes.string


def _hash_table_kernel(state, op):
    if op.name not in state.tables:
        state.tables[op.name] = _Table(op.name)
    return np.array(op.name, object)


def _initialize_infer(inputs, a):
    _, keys, values = inputs
    if keys.shape.ndims not in (None, 1) or values.shape.ndims not in (None, 1):
        raise ValueError(f"InitializeTable: keys and values must be vectors, got shapes "
                         f"{keys.shape} and {values.shape}")
    if not keys.shape.is_compatible_with(values.shape):
        raise ValueError(f"InitializeTable: keys and values must have one length, got "
                         f"shapes {keys.shape} and {values.shape}")
    return []


def _initialize_kernel(state, op, handle, keys, values):
    if keys.shape != values.shape:
        raise KernelError(f"Expected shape {list(keys.shape)} for value, got "
                          f"{list(values.shape)}", InvalidArgumentError)
    state.resource("tables", handle).insert([_python_key(k) for k in keys],
                                    [_python_key(v) for v in values])
    return []


def _text_column(text, index, dtype, path, line_number, columns):
    if index == TextFileIndex.LINE_NUMBER:
        return line_number
    field = text if index == TextFileIndex.WHOLE_LINE else columns[index]
    if dtype == dtypes.string:
        return field
    try:
        return int(field)
    except ValueError:
        raise KernelError(f"Field {field!r} in line {line_number} of {path} is not a valid "
                          f"{dtype.name}", InvalidArgumentError) from None


def _text_file_entries(path, key_index, value_index, key_dtype, value_dtype, vocab_size,
                       delimiter):
    """(keys, values) of a vocabulary file, as TF's TextFileLineIterator reads it."""
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        raise KernelError(f"{path}; No such file or directory", NotFoundError) from None
    if lines and lines[-1] == b"":
        lines.pop()  # a final newline ends the last line, it starts none
    lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    if vocab_size != -1:
        if len(lines) < vocab_size:
            raise KernelError(f"Invalid vocab_size in {path}: expected {vocab_size} but got "
                              f"{len(lines)}", InvalidArgumentError)
        lines = lines[:vocab_size]
    keys, values = [], []
    sep = delimiter.encode("utf-8")
    needed = max(key_index, value_index)
    for number, line in enumerate(lines):
        columns = line.split(sep) if needed >= 0 else None
        if needed >= 0 and needed >= len(columns):
            raise KernelError(f"Invalid number of columns in {path} line {number} "
                              f"({line.decode('utf-8', 'replace')}) : expected {needed + 1} "
                              f"got {len(columns)}", InvalidArgumentError)
        keys.append(_text_column(line, key_index, key_dtype, path, number, columns))
        values.append(_text_column(line, value_index, value_dtype, path, number, columns))
    return keys, values


def _initialize_from_file_kernel(state, op, handle, filename):
    a = op.attrs
    table = op.inputs[0].op.attrs  # the dtypes are the table's (TF's op has no such attrs)
    path = bytes(np.asarray(filename, object)[()]).decode("utf-8")
    keys, values = _text_file_entries(path, a["key_index"], a["value_index"],
                                      table["key_dtype"], table["value_dtype"],
                                      a["vocab_size"], a["delimiter"])
    state.resource("tables", handle).insert(keys, values)
    return []


def _find_infer(inputs, a):
    _, keys, default = inputs
    if default.shape.ndims not in (None, 0):
        raise ValueError(f"LookupTableFind: default_value must be a scalar, got shape "
                         f"{default.shape}")
    return keys.shape, default.dtype


def _find_kernel(state, op, handle, keys, default):
    entries = state.resource("tables", handle).checked()
    fallback = _python_key(default[()])
    out = np.empty(keys.shape, op.outputs[0].dtype.np)
    flat = out.reshape(-1)
    for i, k in enumerate(keys.reshape(-1)):
        flat[i] = entries.get(_python_key(k), fallback)
    return out


def _size_kernel(state, op, handle):
    return np.int64(len(state.resource("tables", handle).checked()))


register_op("HashTable", infer=_handle_infer, kernel=_hash_table_kernel, **_TABLE_OP)
register_op("InitializeTable", infer=_initialize_infer, kernel=_initialize_kernel, **_TABLE_OP)
register_op("InitializeTableFromTextFile", infer=lambda inputs, a: [],
            kernel=_initialize_from_file_kernel, **_TABLE_OP)
register_op("LookupTableFind", infer=_find_infer, kernel=_find_kernel, writes_state=False,
            **_TABLE_OP)
register_op("LookupTableSize", infer=lambda inputs, a: (TensorShape([]), dtypes.int64),
            kernel=_size_kernel, writes_state=False, **_TABLE_OP)
not_differentiable("HashTable", "InitializeTable", "InitializeTableFromTextFile",
                   "LookupTableFind", "LookupTableSize")


# ------------------------------------------------------------------ initializers
class KeyValueTensorInitializer:
    """Fills a table with keys[i] -> values[i] (two vectors)."""

    def __init__(self, keys, values, key_dtype=None, value_dtype=None, name=None):
        with name_scope(name, "key_value_init", []):
            self._keys = convert_to_tensor(keys, dtype=key_dtype, name="keys")
            self._values = convert_to_tensor(values, dtype=value_dtype, name="values")
        self._name = name or "key_value_init"

    key_dtype = property(lambda self: self._keys.dtype)
    value_dtype = property(lambda self: self._values.dtype)

    def initialize(self, table):
        table.check_dtypes(self.key_dtype, self.value_dtype)
        with name_scope(self._name, values=[table.resource_handle]) as scope:
            op = table.resource_handle.graph.create_op(
                "InitializeTable", [table.resource_handle, self._keys, self._values], {},
                scope)
        get_default_graph().add_to_collection(TABLE_INITIALIZERS, op)
        return op


class TextFileInitializer:
    """Fills a table from a text file, one entry per line: the key and the value are each
    the whole line (TextFileIndex.WHOLE_LINE), its number (LINE_NUMBER) or a column split
    by `delimiter`; vocab_size, when given, takes the first lines (fewer is an error)."""

    def __init__(self, filename, key_dtype, key_index, value_dtype, value_index,
                 vocab_size=None, delimiter="\t", name=None):
        key_dtype, value_dtype = dtypes.as_dtype(key_dtype), dtypes.as_dtype(value_dtype)
        for index, dtype, what in ((key_index, key_dtype, "key"),
                                   (value_index, value_dtype, "value")):
            if index < TextFileIndex.WHOLE_LINE:
                raise ValueError(f"Invalid {what} index {index}.")
            if index == TextFileIndex.LINE_NUMBER and dtype != dtypes.int64:
                raise ValueError(f"Signature mismatch. {what.capitalize()}s must be dtype "
                                 f"int64, got {dtype.name}.")
            if index == TextFileIndex.WHOLE_LINE and dtype != dtypes.string:
                raise ValueError(f"Signature mismatch. {what.capitalize()}s must be dtype "
                                 f"string, got {dtype.name}.")
        if vocab_size is not None and vocab_size <= 0:
            raise ValueError(f"Invalid vocab_size {vocab_size}.")
        self._filename = filename
        self.key_dtype, self.value_dtype = key_dtype, value_dtype
        self._attrs = {"key_index": int(key_index), "value_index": int(value_index),
                       "vocab_size": -1 if vocab_size is None else int(vocab_size),
                       "delimiter": str(delimiter)}
        self._name = name or "text_file_init"

    def initialize(self, table):
        table.check_dtypes(self.key_dtype, self.value_dtype)
        graph = table.resource_handle.graph
        with graph.as_default(), name_scope(self._name, values=[table.resource_handle]) \
                as scope:
            filename = convert_to_tensor(self._filename, dtype=dtypes.string,
                                         name="asset_filepath")
            op = graph.create_op("InitializeTableFromTextFile",
                                 [table.resource_handle, filename], self._attrs, scope)
        graph.add_to_collection(TABLE_INITIALIZERS, op)
        return op


class TextFileIdTableInitializer(TextFileInitializer):
    """Keys from a column (default: the whole line), int64 ids = line numbers."""

    def __init__(self, filename, key_column_index=TextFileIndex.WHOLE_LINE,
                 value_column_index=TextFileIndex.LINE_NUMBER, vocab_size=None,
                 delimiter="\t", name="text_file_id_table_init", key_dtype=dtypes.string):
        super().__init__(filename, key_dtype, key_column_index, dtypes.int64,
                         value_column_index, vocab_size, delimiter, name)


class TextFileStringTableInitializer(TextFileInitializer):
    """int64 keys = line numbers, string values from a column (default: the whole line)."""

    def __init__(self, filename, key_column_index=TextFileIndex.LINE_NUMBER,
                 value_column_index=TextFileIndex.WHOLE_LINE, vocab_size=None,
                 delimiter="\t", name="text_file_string_table_init"):
        super().__init__(filename, dtypes.int64, key_column_index, dtypes.string,
                         value_column_index, vocab_size, delimiter, name)


# ------------------------------------------------------------------------ tables
class StaticHashTable:
    """An immutable table filled by `initializer`, answering `default_value` for keys it
    does not hold."""

    def __init__(self, initializer, default_value, name=None):
        self._key_dtype = initializer.key_dtype
        self._value_dtype = initializer.value_dtype
        if self._key_dtype not in _KEY_TYPES:
            raise TypeError(f"table keys must be string, int32 or int64, got "
                            f"{self._key_dtype.name}")
        graph = get_default_graph()
        with name_scope(name, "hash_table", []) as scope:
            self._default_value = convert_to_tensor(default_value, dtype=self._value_dtype,
                                                    name="default_value")
            self._handle = graph.create_op(
                "HashTable", [], {"key_dtype": self._key_dtype,
                                  "value_dtype": self._value_dtype}, scope).outputs[0]
            self._init_op = initializer.initialize(self)
        self._name = scope.rstrip("/")

    key_dtype = property(lambda self: self._key_dtype)
    value_dtype = property(lambda self: self._value_dtype)
    default_value = property(lambda self: self._default_value)
    resource_handle = property(lambda self: self._handle)
    table_ref = resource_handle
    initializer = property(lambda self: self._init_op)
    init = initializer
    name = property(lambda self: self._name)

    def check_dtypes(self, key_dtype, value_dtype):
        if key_dtype != self._key_dtype or value_dtype != self._value_dtype:
            raise TypeError(f"Signature mismatch. Keys must be dtype {self._key_dtype.name}, "
                            f"got {key_dtype.name}. Values must be dtype "
                            f"{self._value_dtype.name}, got {value_dtype.name}.")

    def size(self, name=None):
        return self._handle.graph.create_op("LookupTableSize", [self._handle], {},
                                            name or f"{self._name}_Size").outputs[0]

    def lookup(self, keys, name=None):
        """The values of `keys` (a Tensor or SparseTensor of the key dtype), of its shape."""
        if isinstance(keys, SparseTensor):
            return SparseTensor(keys.indices, self.lookup(keys.values, name), keys.dense_shape)
        with self._handle.graph.as_default():
            keys = convert_to_tensor(keys, dtype=None if not isinstance(keys, (list, tuple))
                                     else self._key_dtype, name="keys")
        if keys.dtype != self._key_dtype:
            raise TypeError(f"Signature mismatch. Keys must be dtype {self._key_dtype.name}, "
                            f"got {keys.dtype.name}.")
        with name_scope(name, f"{self._name}_Lookup", [keys]) as scope:
            return self._handle.graph.create_op(
                "LookupTableFind", [self._handle, keys, self._default_value], {},
                scope).outputs[0]


class HashTable(StaticHashTable):
    """TF1's (contrib.lookup's) name of StaticHashTable."""


class IdTableWithHashBuckets:
    """A string or integer -> int64 id table whose misses go to num_oov_buckets buckets
    after the vocabulary: id = size + Fingerprint64(key) mod num_oov_buckets (integer
    keys hashed as their decimal text), TF's FastHashSpec."""

    def __init__(self, table, num_oov_buckets, hasher_spec=FastHashSpec, name=None,
                 key_dtype=None):
        if num_oov_buckets < 0:
            raise ValueError(f"oov_buckets must be >= 0, got {num_oov_buckets}")
        if hasher_spec is not FastHashSpec and not isinstance(hasher_spec, FastHashSpec):
            raise NotImplementedError("graphc hashes out-of-vocabulary keys with TF's "
                                      "FastHashSpec only")
        self._table = table
        self._num_oov_buckets = int(num_oov_buckets)
        self._key_dtype = dtypes.as_dtype(key_dtype) if key_dtype else table.key_dtype
        self._name = name or table.name

    key_dtype = property(lambda self: self._key_dtype)
    value_dtype = property(lambda self: dtypes.int64)
    initializer = property(lambda self: self._table.initializer)
    init = initializer
    resource_handle = property(lambda self: self._table.resource_handle)
    name = property(lambda self: self._name)

    def size(self, name=None):
        with name_scope(name, f"{self._name}_Size"):
            return self._table.size() + self._num_oov_buckets

    def lookup(self, keys, name=None):
        if isinstance(keys, SparseTensor):
            return SparseTensor(keys.indices, self.lookup(keys.values, name), keys.dense_shape)
        with name_scope(name, f"{self._name}_Lookup", [keys]):
            keys = convert_to_tensor(keys, dtype=self._key_dtype
                                     if isinstance(keys, (list, tuple)) else None)
            if keys.dtype != self._key_dtype:
                raise TypeError(f"Signature mismatch. Keys must be dtype "
                                f"{self._key_dtype.name}, got {keys.dtype.name}.")
            table_keys = keys if keys.dtype == self._table.key_dtype \
                else math_ops.cast(keys, self._table.key_dtype)
            ids = self._table.lookup(table_keys)
            if not self._num_oov_buckets:
                return ids
            text = keys if keys.dtype == dtypes.string else as_string(keys)
            buckets = string_to_hash_bucket_fast(text, self._num_oov_buckets) + \
                self._table.size()
            return math_ops.where(math_ops.equal(ids, self._table.default_value), buckets,
                                  ids)


class StaticVocabularyTable(IdTableWithHashBuckets):
    """A vocabulary (key -> int64 id) table with num_oov_buckets buckets for misses."""

    def __init__(self, initializer, num_oov_buckets, lookup_key_dtype=None, name=None):
        if num_oov_buckets <= 0:
            raise ValueError(f"oov_buckets must be > 0 if no default value is given, got "
                             f"{num_oov_buckets}")
        if initializer.value_dtype != dtypes.int64:
            raise TypeError(f"Invalid value dtype, expected int64 but got "
                            f"{initializer.value_dtype.name}.")
        with name_scope(name, "hash_table"):
            table = StaticHashTable(initializer, np.int64(-1))
        super().__init__(table, num_oov_buckets, FastHashSpec, name, lookup_key_dtype)


def tables_initializer(name="init_all_tables"):
    """The op running every table initializer of the graph (TF1 runs it separately from
    global_variables_initializer)."""
    inits = get_default_graph().get_collection(TABLE_INITIALIZERS)
    return group(*inits, name=name)


# ------------------------------------------------------ contrib.lookup's builders
def _checked_oov(num_oov_buckets, default_value):
    if num_oov_buckets < 0:
        raise ValueError(f"num_oov_buckets must be greater or equal than 0, got "
                         f"{num_oov_buckets}.")
    if num_oov_buckets and default_value != -1:
        raise ValueError("Can't specify both num_oov_buckets and default_value")


def _with_buckets(table, num_oov_buckets, hasher_spec, key_dtype, name):
    if not num_oov_buckets:
        return table
    return IdTableWithHashBuckets(table, num_oov_buckets, hasher_spec, name=name,
                                  key_dtype=key_dtype)


def index_table_from_tensor(vocabulary_list, num_oov_buckets=0, default_value=-1,
                            hasher_spec=FastHashSpec, dtype=dtypes.string, name=None):
    """A table from each key of the 1-D vocabulary_list to its position (int64); other
    keys get default_value, or one of num_oov_buckets hash buckets after the vocabulary."""
    if vocabulary_list is None:
        raise ValueError("vocabulary_list must be specified.")
    _checked_oov(num_oov_buckets, default_value)
    dtype = dtypes.as_dtype(dtype)
    with name_scope(name, "string_to_index"):
        keys = convert_to_tensor(vocabulary_list, dtype=None if dtype == dtypes.string
                                 else dtypes.int64, name="vocabulary_list")
        if keys.dtype.is_integer != dtype.is_integer:
            raise ValueError(f"Expected {dtype.name}, got {keys.dtype.name}.")
        if keys.shape.ndims not in (None, 1):
            raise ValueError(f"vocabulary_list must be a vector, got shape {keys.shape}")
        ids = math_ops.cast(array_ops.range(array_ops.size(keys)), dtypes.int64)
        table = StaticHashTable(KeyValueTensorInitializer(keys, ids), default_value,
                                name="hash_table")
        return _with_buckets(table, num_oov_buckets, hasher_spec, dtype, None)


def index_table_from_file(vocabulary_file=None, num_oov_buckets=0, vocab_size=None,
                          default_value=-1, hasher_spec=FastHashSpec, key_dtype=dtypes.string,
                          name=None, key_column_index=TextFileIndex.WHOLE_LINE,
                          value_column_index=TextFileIndex.LINE_NUMBER, delimiter="\t"):
    """A table from each line (or column) of a vocabulary file to its line number."""
    if vocabulary_file is None or (isinstance(vocabulary_file, str) and not vocabulary_file):
        raise ValueError("vocabulary_file must be specified and must not be empty.")
    _checked_oov(num_oov_buckets, default_value)
    key_dtype = dtypes.as_dtype(key_dtype)
    if key_dtype not in _KEY_TYPES:
        raise TypeError(f"Invalid key dtype, expected string or integer, got "
                        f"{key_dtype.name}.")
    with name_scope(name, "string_to_index"):
        init = TextFileIdTableInitializer(
            vocabulary_file, key_column_index, value_column_index, vocab_size, delimiter,
            key_dtype=dtypes.string if key_dtype == dtypes.string else dtypes.int64)
        table = StaticHashTable(init, default_value, name="hash_table")
        return _with_buckets(table, num_oov_buckets, hasher_spec, key_dtype, None)


def index_to_string_table_from_tensor(vocabulary_list, default_value="UNK", name=None):
    """A table from int64 ids to the strings of vocabulary_list; others: default_value."""
    if vocabulary_list is None:
        raise ValueError("vocabulary_list must be specified.")
    with name_scope(name, "index_to_string"):
        values = convert_to_tensor(vocabulary_list, dtype=dtypes.string,
                                   name="vocabulary_list")
        ids = math_ops.cast(array_ops.range(array_ops.size(values)), dtypes.int64)
        return StaticHashTable(KeyValueTensorInitializer(ids, values), default_value,
                               name="hash_table")


def index_to_string_table_from_file(vocabulary_file, vocab_size=None, default_value="UNK",
                                    name=None, key_column_index=TextFileIndex.LINE_NUMBER,
                                    value_column_index=TextFileIndex.WHOLE_LINE,
                                    delimiter="\t"):
    """A table from line numbers (int64) to the lines (or a column) of a vocabulary file."""
    if vocabulary_file is None or (isinstance(vocabulary_file, str) and not vocabulary_file):
        raise ValueError("vocabulary_file must be specified and must not be empty.")
    with name_scope(name, "index_to_string"):
        init = TextFileStringTableInitializer(vocabulary_file, key_column_index,
                                              value_column_index, vocab_size, delimiter)
        return StaticHashTable(init, default_value, name="hash_table")


def index_to_string(tensor, mapping, default_value="UNK", name=None):
    """The strings of `mapping` at the int64 ids of `tensor` (contrib.lookup's helper)."""
    table = index_to_string_table_from_tensor(mapping, default_value, name)
    return table.lookup(tensor)
