"""Lookup tables (tf.lookup, tf.contrib.lookup) as TF1's: filled by tables_initializer
(not by global_variables_initializer), default values, out-of-vocabulary hash buckets
with TF's ids (recorded from TensorFlow 2.21), vocabulary files, and an embedding
pipeline from raw text to a training step."""
import numpy as np
import pytest

import graphc as gc
from graphc import errors
from tests.conftest import BACKENDS


def kv(keys, values, key_dtype=None, value_dtype=None):
    return gc.lookup.KeyValueTensorInitializer(keys, values, key_dtype, value_dtype)


def test_static_hash_table_lookup_default_and_size():
    table = gc.lookup.StaticHashTable(kv(["a", "b"], gc.constant([1, 2], gc.int64)), -1)
    found = table.lookup(gc.constant([["a", "q"], ["b", "a"]]))
    assert found.dtype == gc.int64 and found.shape.as_list() == [2, 2]
    with gc.Session() as sess:
        sess.run(gc.tables_initializer())
        got, size = sess.run([found, table.size()])
    np.testing.assert_array_equal(got, [[1, -1], [2, 1]])
    assert size == 2


def test_a_table_needs_tables_initializer_not_global_variables_initializer():
    table = gc.lookup.StaticHashTable(kv(["a"], gc.constant([1], gc.int64)), -1)
    found = table.lookup(gc.constant(["a"]))
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        with pytest.raises(errors.FailedPreconditionError, match="Table not initialized"):
            sess.run(found)
        sess.run(table.initializer)
        sess.run(table.initializer)  # again with the same data: nothing changes, as TF's
        np.testing.assert_array_equal(sess.run(found), [1])
    with gc.Session() as sess:  # a table is per Session
        with pytest.raises(errors.FailedPreconditionError):
            sess.run(found)


def test_duplicate_keys_with_different_values_fail_initialization():
    keys = gc.placeholder(gc.string, [None])
    values = gc.placeholder(gc.int64, [None])
    table = gc.lookup.StaticHashTable(kv(keys, values), -1)
    with gc.Session() as sess:
        with pytest.raises(errors.FailedPreconditionError, match="different value"):
            sess.run(table.initializer, {keys: ["a", "a"], values: [1, 2]})
        sess.run(table.initializer, {keys: ["a", "a"], values: [1, 1]})
        np.testing.assert_array_equal(sess.run(table.lookup(gc.constant(["a"]))), [1])
        with pytest.raises(errors.FailedPreconditionError, match="different data"):
            sess.run(table.initializer, {keys: ["b"], values: [3]})


@pytest.mark.parametrize("value_dtype, values, default, want", [
    (gc.float32, [0.5, -1.5], 9.0, [-1.5, 9.0]),
    (gc.float64, [0.1, 2.0], -0.25, [2.0, -0.25]),
    (gc.string, ["three", "seven"], "UNK", [b"seven", b"UNK"])])
def test_int64_keys_to_values_of_each_dtype(value_dtype, values, default, want):
    table = gc.lookup.StaticHashTable(
        kv(gc.constant([3, 7], gc.int64), gc.constant(values, value_dtype)), default)
    found = table.lookup(gc.constant([7, 1], gc.int64))
    with gc.Session() as sess:
        sess.run(gc.tables_initializer())
        got = sess.run(found)
    if value_dtype == gc.string:
        assert got.tolist() == want
    else:
        assert got.dtype == value_dtype.np
        np.testing.assert_array_equal(got, np.array(want, value_dtype.np))


def test_lookup_keys_of_the_wrong_dtype_is_a_type_error():
    table = gc.lookup.StaticHashTable(kv(["a"], gc.constant([1], gc.int64)), -1)
    with pytest.raises(TypeError, match="Keys must be dtype string"):
        table.lookup(gc.constant([1], gc.int64))


# TensorFlow 2.21's ids (StaticVocabularyTable / index_table_from_tensor with buckets)
def test_vocabulary_table_oov_buckets_match_tensorflow():
    strings = gc.lookup.StaticVocabularyTable(kv(["x", "y", "z"],
                                                 gc.constant([0, 1, 2], gc.int64)), 3)
    ints = gc.lookup.StaticVocabularyTable(kv(gc.constant([10, 20], gc.int64),
                                              gc.constant([0, 1], gc.int64)), 4)
    got_s = strings.lookup(gc.constant(["x", "z", "unknown", "hello", ""]))
    got_i = ints.lookup(gc.constant([10, 20, 5, 99], gc.int64))
    with gc.Session() as sess:
        sess.run(gc.tables_initializer())
        s, i, size = sess.run([got_s, got_i, strings.size()])
    np.testing.assert_array_equal(s, [0, 2, 4, 4, 5])
    np.testing.assert_array_equal(i, [0, 1, 5, 4])
    assert size == 6


@pytest.mark.parametrize("module", ["lookup", "contrib.lookup"])
def test_index_table_from_tensor_default_and_buckets(module):
    ns = gc.lookup if module == "lookup" else gc.contrib.lookup
    plain = ns.index_table_from_tensor(["x", "y", "z"])
    defaulted = ns.index_table_from_tensor(["x", "y", "z"], default_value=7)
    bucketed = ns.index_table_from_tensor(["x", "y", "z"], num_oov_buckets=3)
    keys = gc.constant(["z", "unknown", "x", "hello"])
    with gc.Session() as sess:
        sess.run(gc.tables_initializer())
        got = sess.run([plain.lookup(keys), defaulted.lookup(keys), bucketed.lookup(keys),
                        bucketed.size()])
    np.testing.assert_array_equal(got[0], [2, -1, 0, -1])
    np.testing.assert_array_equal(got[1], [2, 7, 0, 7])
    np.testing.assert_array_equal(got[2], [2, 4, 0, 4])
    assert got[3] == 6


def test_index_table_with_both_buckets_and_a_default_is_an_error():
    with pytest.raises(ValueError, match="num_oov_buckets and default_value"):
        gc.contrib.lookup.index_table_from_tensor(["x"], num_oov_buckets=1, default_value=3)


def test_index_to_string_table_from_tensor():
    table = gc.contrib.lookup.index_to_string_table_from_tensor(["a", "b", "c"])
    found = table.lookup(gc.constant([2, 0, 5, -1], gc.int64))
    words = gc.contrib.lookup.index_to_string(gc.constant([1], gc.int64), ["p", "q"], "?")
    with gc.Session() as sess:
        sess.run(gc.tables_initializer())
        assert sess.run(found).tolist() == [b"c", b"a", b"UNK", b"UNK"]
        assert sess.run(words).tolist() == [b"q"]


def write_vocab(tmp_path, text):
    path = tmp_path / "vocab.txt"
    path.write_bytes(text)
    return str(path)


def test_index_tables_from_a_vocabulary_file(tmp_path):
    path = write_vocab(tmp_path, b"the\nquick\r\nfox\n")  # \r\n ends a line too
    ids = gc.lookup.index_table_from_file(path, num_oov_buckets=1)
    limited = gc.contrib.lookup.index_table_from_file(path, vocab_size=2)
    words = gc.lookup.index_to_string_table_from_file(path, default_value="?")
    with gc.Session() as sess:
        sess.run(gc.tables_initializer())
        got = sess.run([ids.lookup(gc.constant(["fox", "quick", "cat"])),
                        limited.lookup(gc.constant(["fox", "quick"])),
                        words.lookup(gc.constant([0, 2, 3], gc.int64))])
    np.testing.assert_array_equal(got[0], [2, 1, 3])
    np.testing.assert_array_equal(got[1], [-1, 1])
    assert got[2].tolist() == [b"the", b"fox", b"?"]


def test_text_file_initializer_columns(tmp_path):
    path = write_vocab(tmp_path, b"apple,10\nbanana,-3\n")
    init = gc.lookup.TextFileInitializer(path, gc.string, 0, gc.int64, 1, delimiter=",")
    table = gc.lookup.StaticHashTable(init, 0)
    with gc.Session() as sess:
        sess.run(table.initializer)
        np.testing.assert_array_equal(
            sess.run(table.lookup(gc.constant(["banana", "apple", "kiwi"]))), [-3, 10, 0])


@pytest.mark.parametrize("text, columns, match", [
    (b"a\nb\n", False, "Invalid vocab_size"),
    (b"a,1\nb\n", True, "Invalid number of columns")])
def test_bad_vocabulary_files_are_invalid_argument(tmp_path, text, columns, match):
    path = write_vocab(tmp_path, text)
    if columns:
        gc.lookup.StaticHashTable(
            gc.lookup.TextFileInitializer(path, gc.string, 0, gc.int64, 1, delimiter=","), -1)
    else:
        gc.lookup.index_table_from_file(path, vocab_size=3)
    with gc.Session() as sess, pytest.raises(errors.InvalidArgumentError, match=match):
        sess.run(gc.tables_initializer())


def test_missing_vocabulary_file_is_not_found(tmp_path):
    gc.lookup.index_table_from_file(str(tmp_path / "none.txt"))
    with gc.Session() as sess, pytest.raises(errors.NotFoundError):
        sess.run(gc.tables_initializer())


def test_lookup_of_a_sparse_tensor_keeps_its_indices():
    table = gc.lookup.index_table_from_tensor(["a", "b"])
    ids = table.lookup(gc.string_split(["b a", "a"]))
    assert isinstance(ids, gc.SparseTensor)
    with gc.Session() as sess:
        sess.run(gc.tables_initializer())
        got = sess.run(ids)
    np.testing.assert_array_equal(got.values, [1, 0, 0])
    np.testing.assert_array_equal(got.indices, [[0, 0], [0, 1], [1, 0]])
    np.testing.assert_array_equal(got.dense_shape, [2, 2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_pipeline_from_raw_text_trains(backend):
    """Text -> string_split -> vocabulary ids -> embedding_lookup -> mean per sentence ->
    a linear score; one gradient step changes exactly the rows of the words used, by
    -lr * dloss/drow computed here by hand."""
    vocab = ["the", "cat", "sat", "mat"]
    table = gc.lookup.index_table_from_tensor(vocab, num_oov_buckets=1)
    sentences = gc.placeholder(gc.string, [None])
    tokens = gc.string_split(sentences)
    ids = table.lookup(tokens.values)
    init = np.arange(5 * 3, dtype=np.float32).reshape(5, 3) / 10.0
    emb = gc.Variable(init, name="emb")
    vectors = gc.nn.embedding_lookup(emb, ids)
    rows = tokens.indices[:, 0]
    sums = gc.matmul(gc.one_hot(gc.cast(rows, gc.int32), 2), vectors, transpose_a=True)
    loss = gc.reduce_sum(sums * gc.constant([1.0, -2.0, 0.5]))
    step = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
    with gc.Session() as sess:
        sess.run([gc.global_variables_initializer(), gc.tables_initializer()])
        feed = {sentences: ["the cat sat", "the dog"]}
        got_ids = sess.run(ids, feed)
        sess.run(step, feed)
        after = sess.run(emb)
    np.testing.assert_array_equal(got_ids, [0, 1, 2, 0, 4])  # "dog": the one oov bucket
    counts = np.bincount([0, 1, 2, 0, 4], minlength=5).astype(np.float32)
    want = init - 0.1 * counts[:, None] * np.array([1.0, -2.0, 0.5], np.float32)
    np.testing.assert_allclose(after, want, rtol=1e-6)


def test_monitored_session_initializes_tables():
    table = gc.lookup.index_table_from_tensor(["a", "b"])
    found = table.lookup(gc.constant(["b"]))
    gc.train.get_or_create_global_step()
    with gc.train.MonitoredTrainingSession() as sess:
        np.testing.assert_array_equal(sess.run(found), [1])


# ------------------------------------------------------------------ graph files
def test_tables_in_a_graph_def_recorded_by_tensorflow(tmp_path):
    """tables_tf.pb: TF 2.21 (tf.compat.v1 graph mode) wrote a StaticHashTable from
    tensors (HashTableV2, LookupTableImportV2) and one from a vocabulary file
    (InitializeTableFromTextFileV2) whose path is the Const vocab_path; TF's outputs for
    this vocabulary and these words are below."""
    pytest.importorskip("tensorboard")
    import os
    gd = gc.GraphDef()
    with open(os.path.join(os.path.dirname(__file__), "data", "tf_formats", "tables_tf.pb"),
              "rb") as f:
        gd.ParseFromString(f.read())
    vocab = write_vocab(tmp_path, b"the\nquick\nfox\n")
    with gc.Graph().as_default():
        path = gc.constant(vocab, name="my_vocab")
        fetched = gc.import_graph_def(gd, name="", input_map={"vocab_path:0": path},
                                      return_elements=["ids1:0", "ids2:0", "size2:0"])
        with gc.Session() as sess:
            sess.run(gc.get_default_graph().get_operation_by_name("init_all_tables"))
            got = sess.run(fetched, {"words:0": ["b", "fox", "zz"]})
    np.testing.assert_array_equal(got[0], [1, -1, -1])
    np.testing.assert_array_equal(got[1], [-5, 2, -5])
    assert got[2] == 3


@pytest.mark.parametrize("name, as_text", [("t.pb", False), ("t.pbtxt", True),
                                           ("t.json", True)])
def test_tables_round_trip_through_graph_files(tmp_path, name, as_text):
    if not name.endswith(".json"):
        pytest.importorskip("tensorboard")
    vocab = write_vocab(tmp_path, b"the\nquick\nfox\n")
    words = gc.placeholder(gc.string, [None], name="words")
    gc.identity(gc.lookup.index_table_from_tensor(["a", "b"], num_oov_buckets=2)
                .lookup(words), name="ids1")
    gc.identity(gc.lookup.index_table_from_file(vocab, default_value=-5).lookup(words),
                name="ids2")
    gc.tables_initializer(name="init_all_tables")
    gc.train.write_graph(gc.get_default_graph(), str(tmp_path), name, as_text=as_text)
    from graphc import graph_io
    with gc.Graph().as_default():
        ids1, ids2 = gc.import_graph_def(graph_io.read_graph_def(str(tmp_path / name)),
                                         name="", return_elements=["ids1:0", "ids2:0"])
        with gc.Session() as sess:
            sess.run(gc.get_default_graph().get_operation_by_name("init_all_tables"))
            got = sess.run([ids1, ids2], {"words:0": ["b", "fox", "zz"]})
    # zz: bucket 2 + Fingerprint64("zz") % 2, TF's value (graphc's export ran in TF 2.21)
    np.testing.assert_array_equal(got[0], [1, 2, 2])
    np.testing.assert_array_equal(got[1], [-5, 2, -5])


@pytest.mark.parametrize("kind", ["table", "queue"])
def test_a_handle_naming_nothing_this_session_created_is_an_error_naming_it(kind):
    """A resource handle is a string tensor and can be fed: one naming no table or queue
    this Session created fails with TF's error class and the name, not a KeyError."""
    if kind == "table":
        table = gc.lookup.StaticHashTable(kv(["a"], gc.constant([1], gc.int64)), -1)
        handle, fetch, cls = table.resource_handle, table.size(), errors.NotFoundError
    else:
        queue = gc.FIFOQueue(4, gc.float32)
        handle, fetch, cls = queue.queue_ref, queue.size(), errors.CancelledError
    with gc.Session() as sess:
        with pytest.raises(cls, match=f"{kind} 'elsewhere' was not created in this Session"):
            sess.run(fetch, {handle: "elsewhere"})
