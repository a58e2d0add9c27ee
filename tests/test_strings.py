"""String tensors and string ops, against TF1's documented behaviour: strings are held as
bytes (fetched as object arrays of bytes), string ops run on the host between the
compiled stages of the numbers around them, and numeric ops refuse strings by name."""
import os

import numpy as np
import pytest

import graphc as gc
from graphc import errors
from tests.conftest import BACKENDS


def run(fetches, feed_dict=None):
    with gc.Session() as sess:
        return sess.run(fetches, feed_dict)


def as_objects(values):
    out = np.empty(len(values), object)
    out[:] = values
    return out


def assert_bytes(got, want):
    got = np.asarray(got, object)
    want = np.asarray(want, object)
    assert got.dtype == object and got.shape == want.shape
    assert all(type(v) is bytes for v in got.reshape(-1)), got
    assert got.tolist() == want.tolist()


def assert_sparse(got, indices, values, dense_shape):
    assert isinstance(got, gc.SparseTensorValue)
    np.testing.assert_array_equal(got.indices, np.array(indices, np.int64).reshape(-1, 2))
    assert got.indices.dtype == np.int64 and got.dense_shape.dtype == np.int64
    assert_bytes(got.values, as_objects(values))
    np.testing.assert_array_equal(got.dense_shape, dense_shape)


# ------------------------------------------------------------- tensors, feeds, fetches
def test_string_constants_hold_bytes():
    s = gc.constant("héllo")
    v = gc.constant([b"a", b"bc"])
    m = gc.constant([["x", "y"], ["z", ""]])
    assert s.dtype == gc.string and v.dtype == gc.string and m.shape.as_list() == [2, 2]
    got_s, got_v, got_m = run([s, v, m])
    assert got_s == "héllo".encode("utf-8") and type(got_s) is bytes
    assert_bytes(got_v, [b"a", b"bc"])
    assert_bytes(got_m, [[b"x", b"y"], [b"z", b""]])


def test_string_constant_of_numpy_arrays_and_empty():
    got = run(gc.constant(np.array(["ab", "c"])))  # NumPy unicode
    assert_bytes(got, [b"ab", b"c"])
    empty = gc.constant(np.zeros([0, 3], object), dtype=gc.string)
    assert empty.shape.as_list() == [0, 3]
    assert run(empty).shape == (0, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_string_placeholders_fed_with_str_bytes_and_arrays(backend):
    p = gc.placeholder(gc.string, [None])
    s = gc.placeholder(gc.string, [])
    x = gc.placeholder(gc.float32, [2])
    with gc.Session() as sess:
        for fed in (["a", "é"], [b"a", "é".encode()], np.array(["a", "é"]),
                    as_objects(["a", b"\xc3\xa9"])):
            got_p, got_s, got_x = sess.run([p, s, x * 2.0], {p: fed, s: "k", x: [1.0, 2.5]})
            assert_bytes(got_p, [b"a", "é".encode()])
            assert got_s == b"k"
            np.testing.assert_array_equal(got_x, np.array([2.0, 5.0], np.float32))


def test_feeding_a_non_string_to_a_string_placeholder_names_the_tensor():
    p = gc.placeholder(gc.string, [None], name="words")
    with gc.Session() as sess, pytest.raises(TypeError, match="words.*got 3 of type int"):
        sess.run(p, {p: ["a", 3]})


def test_constant_mixing_strings_and_numbers_is_a_type_error():
    with pytest.raises(TypeError, match="got 1 of type int"):
        gc.constant(["a", 1])
    with pytest.raises(TypeError):
        gc.constant(["1.5"], gc.float32)


@pytest.mark.parametrize("make, op", [
    (lambda s: s + 1, "Add"), (lambda s: gc.exp(s), "Exp"),
    (lambda s: gc.reduce_sum(s), "Sum"), (lambda s: gc.matmul(s, s), "MatMul"),
    (lambda s: gc.cast(s, gc.float32), "Cast")])
def test_numeric_ops_refuse_strings_naming_the_op_and_line(make, op):
    s = gc.constant([["a"]], name="words")
    with pytest.raises(TypeError, match=f"op: '{op}'") as info:
        make(s)
    message = str(info.value)
    assert "string" in message and "words:0" in message
    assert __file__ in message and "in <lambda>" in message  # the user's line


@pytest.mark.parametrize("backend", BACKENDS)
def test_string_ops_between_compiled_numbers(backend):
    # numbers -> as_string (host) -> length (host) -> arithmetic (native again)
    x = gc.placeholder(gc.int32, [None])
    text = gc.as_string(x * 10)
    n = gc.cast(gc.strings.length(text), gc.float32) * 0.5 + 1.0
    with gc.Session() as sess:
        got_text, got_n = sess.run([text, n], {x: [1, -25, 0]})
        if backend != "reference":  # the numbers on each side were compiled
            assert sess.compile_count == 2
    assert_bytes(got_text, [b"10", b"-250", b"0"])
    np.testing.assert_array_equal(got_n, np.array([2.0, 3.0, 1.5], np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_equal_and_not_equal_compare_strings(backend):
    s = gc.placeholder(gc.string, [None])
    is_cat = gc.equal(s, "cat")
    other = gc.not_equal(s, gc.constant([["cat"], ["dog"]]))
    cats = gc.reduce_sum(gc.cast(is_cat, gc.int32))
    got = run([is_cat, other, cats], {s: ["cat", "dog", "", "cat"]})
    np.testing.assert_array_equal(got[0], [True, False, False, True])
    np.testing.assert_array_equal(got[1], [[False, True, True, False],
                                           [True, False, True, True]])
    assert got[2] == 2


def test_shape_ops_carry_strings():
    s = gc.constant([["a", "b", "c"], ["d", "e", "f"]])
    got = run([gc.transpose(s), gc.reshape(s, [3, 2]), gc.gather(s, [1, 0]),
               gc.concat([s, s], 1)[:, 2:4], gc.shape(s), gc.size(s)])
    assert_bytes(got[0], [[b"a", b"d"], [b"b", b"e"], [b"c", b"f"]])
    assert_bytes(got[1], [[b"a", b"b"], [b"c", b"d"], [b"e", b"f"]])
    assert_bytes(got[2], [[b"d", b"e", b"f"], [b"a", b"b", b"c"]])
    assert_bytes(got[3], [[b"c", b"a"], [b"f", b"d"]])
    np.testing.assert_array_equal(got[4], [2, 3])
    assert got[5] == 6


# ------------------------------------------------------------------------ splitting
def test_string_split_tf1_docs():
    got = run(gc.string_split(["hello world", "a b c"]))
    assert_sparse(got, [[0, 0], [0, 1], [1, 0], [1, 1], [1, 2]],
                  [b"hello", b"world", b"a", b"b", b"c"], [2, 3])


def test_string_split_every_delimiter_character_splits():
    x = gc.placeholder(gc.string, [None])
    skip = gc.string_split(x, delimiter=" ,")
    keep = gc.string_split(x, delimiter=",", skip_empty=False)
    chars = gc.string_split(x, delimiter="")
    got_skip, got_keep, got_chars = run([skip, keep, chars], {x: ["a b,,c", "", "x,"]})
    assert_sparse(got_skip, [[0, 0], [0, 1], [0, 2], [2, 0]], [b"a", b"b", b"c", b"x"], [3, 3])
    # an empty string has no tokens even when empty tokens are kept
    assert_sparse(got_keep, [[0, 0], [0, 1], [0, 2], [2, 0], [2, 1]],
                  [b"a b", b"", b"c", b"x", b""], [3, 3])
    assert_sparse(got_chars, [[0, i] for i in range(6)] + [[2, 0], [2, 1]],
                  [b"a", b" ", b"b", b",", b",", b"c", b"x", b","], [3, 6])


def test_string_split_of_an_empty_batch_and_of_no_tokens():
    x = gc.placeholder(gc.string, [None])
    sp = gc.string_split(x)
    assert_sparse(run(sp, {x: np.zeros([0], object)}), [], [], [0, 0])
    assert_sparse(run(sp, {x: ["  ", ""]}), [], [], [2, 0])


def test_string_split_needs_a_vector():
    with pytest.raises(ValueError, match="StringSplit.*vector"):
        gc.string_split([["a b"]])


def test_strings_split_as_python_split():
    x = gc.constant(["1<>2<><>3", " a  b ", ""])
    by_sep = gc.strings.split(x, sep="<>")
    by_space = gc.strings.split(x)
    limited = gc.strings.split(["a,b,c"], sep=",", maxsplit=1)
    got_sep, got_space, got_limited = run([by_sep, by_space, limited])
    assert_sparse(got_sep, [[0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [2, 0]],
                  [b"1", b"2", b"", b"3", b" a  b ", b""], [3, 4])
    assert_sparse(got_space, [[0, 0], [1, 0], [1, 1]], [b"1<>2<><>3", b"a", b"b"], [3, 2])
    assert_sparse(got_limited, [[0, 0], [0, 1]], [b"a", b"b,c"], [1, 2])


def test_strings_split_has_no_ragged_result():
    with pytest.raises(ValueError, match="RaggedTensor"):
        gc.strings.split(["a"], result_type="RaggedTensor")


def test_sparse_tensor_of_string_split_feeds_numeric_ops():
    sp = gc.string_split(["a b", "c"])
    n_tokens = gc.reduce_sum(gc.ones_like(sp.indices[:, 0]))
    assert sp.dtype == gc.string
    assert run(n_tokens) == 3


# ---------------------------------------------------------------------- joining
def test_string_join_and_strings_join_broadcast_scalars():
    got = run([gc.string_join([["a", "b"], "x", ["c", "d"]], separator="-"),
               gc.strings.join(["p", "q"])])
    assert_bytes(got[0], [b"a-x-c", b"b-x-d"])
    assert got[1] == b"pq"


def test_string_join_of_different_shapes_is_an_error():
    with pytest.raises(ValueError, match="StringJoin"):
        gc.string_join([["a", "b"], ["c", "d", "e"]])


def test_reduce_join_tf1_docs():
    a = gc.constant([["a", "b"], ["c", "d"]])
    got = run([gc.reduce_join(a, 0), gc.reduce_join(a, 1), gc.reduce_join(a, -2),
               gc.reduce_join(a, 0, keep_dims=True), gc.reduce_join(a, 1, keep_dims=True),
               gc.reduce_join(a, 0, separator="."), gc.reduce_join(a, [0, 1]),
               gc.reduce_join(a, [1, 0]), gc.reduce_join(a, []), gc.reduce_join(a)])
    assert_bytes(got[0], [b"ac", b"bd"])
    assert_bytes(got[1], [b"ab", b"cd"])
    assert_bytes(got[2], [b"ac", b"bd"])
    assert_bytes(got[3], [[b"ac", b"bd"]])
    assert_bytes(got[4], [[b"ab"], [b"cd"]])
    assert_bytes(got[5], [b"a.c", b"b.d"])
    assert got[6] == b"acbd" and got[7] == b"abcd" and got[9] == b"abcd"
    assert_bytes(got[8], [[b"a", b"b"], [b"c", b"d"]])


def test_reduce_join_of_an_empty_axis_is_empty_strings():
    x = gc.placeholder(gc.string, [None, None])
    got = run(gc.reduce_join(x, 1, separator=","), {x: np.zeros([2, 0], object)})
    assert_bytes(got, [b"", b""])


# ------------------------------------------------------------ per-string transforms
def test_length_in_bytes_and_characters():
    s = gc.constant(["héllo", "", "ab"])
    got_bytes, got_chars = run([gc.strings.length(s), gc.strings.length(s, unit="UTF8_CHAR")])
    assert got_bytes.dtype == np.int32
    np.testing.assert_array_equal(got_bytes, [6, 0, 2])
    np.testing.assert_array_equal(got_chars, [5, 0, 2])


def test_lower_upper_strip():
    s = gc.constant(["ÀB c", "\t a B \n"])
    got = run([gc.strings.lower(s), gc.strings.upper(s), gc.strings.lower(s, encoding="utf-8"),
               gc.strings.strip(s)])
    assert_bytes(got[0], ["Àb c".encode(), b"\t a b \n"])  # ASCII letters only
    assert_bytes(got[1], ["ÀB C".encode(), b"\t A B \n"])
    assert_bytes(got[2], ["àb c".encode(), b"\t a b \n"])
    assert_bytes(got[3], ["ÀB c".encode(), b"a B"])


def test_substr_positions_lengths_and_units():
    got = run([gc.substr(["hello", "abc"], 1, 3), gc.substr(["hello", "abc"], -2, 5),
               gc.substr(["hello"], 1, -1), gc.substr(["ab"], 2, 1),
               gc.substr(["hello", "world"], [0, 2], [1, 2]),
               gc.strings.substr(["héllo"], 1, 2, unit="UTF8_CHAR")])
    assert_bytes(got[0], [b"ell", b"bc"])
    assert_bytes(got[1], [b"lo", b"bc"])
    assert_bytes(got[2], [b"ello"])
    assert_bytes(got[3], [b""])
    assert_bytes(got[4], [b"h", b"rl"])
    assert_bytes(got[5], ["él".encode()])


@pytest.mark.parametrize("pos", [3, -3])
def test_substr_position_outside_the_string_is_invalid_argument(pos):
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        run(gc.substr(["ab"], pos, 1))


def test_regex_replace_groups_first_match_and_full_match():
    s = gc.constant(["abc abc", "xyz"])
    got = run([gc.strings.regex_replace(s, "b(c)", r"[\1\0]"),
               gc.regex_replace(s, "b", "X", replace_global=False),
               gc.strings.regex_full_match(s, "[a-c ]+")])
    assert_bytes(got[0], [b"a[cbc] a[cbc]", b"xyz"])
    assert_bytes(got[1], [b"aXc abc", b"xyz"])
    np.testing.assert_array_equal(got[2], [True, False])


def test_regex_replace_bad_pattern_is_invalid_argument():
    with pytest.raises(errors.InvalidArgumentError, match="Invalid pattern"):
        run(gc.strings.regex_replace(["a"], "(", "x"))


# -------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("dtype", [gc.float32, gc.float64])
def test_string_to_number_floats(dtype):
    got = run(gc.string_to_number([" 1.5", "-2e3 ", "+7", "1.", ".5", "0x10", "-Infinity",
                                   "0.1"], out_type=dtype))
    assert got.dtype == dtype.np
    want = np.array([1.5, -2000.0, 7.0, 1.0, 0.5, 16.0, -np.inf, 0.1]).astype(dtype.np)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(run(gc.strings.to_number(["nan"], dtype))[0])


def test_string_to_number_float32_past_its_range_is_inf():
    assert run(gc.string_to_number(["1e40"]))[0] == np.inf


@pytest.mark.parametrize("dtype", [gc.int32, gc.int64])
def test_string_to_number_integers(dtype):
    got = run(gc.string_to_number([" 12 ", "-7", "+0", "2147483647"], out_type=dtype))
    assert got.dtype == dtype.np
    np.testing.assert_array_equal(got, [12, -7, 0, 2147483647])


@pytest.mark.parametrize("text, dtype", [("1_0", gc.float32), ("abc", gc.float32),
                                         ("1.5", gc.int32), ("2147483648", gc.int32),
                                         ("", gc.int64), ("1e3", gc.int64)])
def test_string_to_number_rejects(text, dtype):
    with pytest.raises(errors.InvalidArgumentError, match="could not correctly convert"):
        run(gc.string_to_number([text], out_type=dtype))


def test_as_string_formats_as_printf():
    got = run([gc.as_string(gc.constant([1.5, -0.25, 1e10])),
               gc.as_string(gc.constant([3.14159]), precision=2, width=8),
               gc.as_string(gc.constant([1234.5]), scientific=True),
               gc.as_string(gc.constant([1234.5, 0.0001], gc.float64), shortest=True),
               gc.as_string(gc.constant([True, False])),
               gc.as_string(gc.constant([3, -4]), width=4, fill="0"),
               gc.as_string(gc.constant([2 ** 40], gc.int64))])
    assert_bytes(got[0], [b"1.500000", b"-0.250000", b"10000000000.000000"])
    assert_bytes(got[1], [b"    3.14"])
    assert_bytes(got[2], [b"1.234500e+03"])
    assert_bytes(got[3], [b"1234.5", b"0.0001"])
    assert_bytes(got[4], [b"true", b"false"])
    assert_bytes(got[5], [b"0003", b"-004"])
    assert_bytes(got[6], [b"1099511627776"])


@pytest.mark.parametrize("kwargs", [dict(scientific=True, shortest=True), dict(fill="x"),
                                    dict(precision=2, integer=True)])
def test_as_string_bad_arguments(kwargs):
    value = gc.constant([1] if kwargs.pop("integer", False) else [1.0])
    with pytest.raises(ValueError, match="as_string"):
        gc.as_string(value, **kwargs)


@pytest.mark.parametrize("little_endian, want", [(True, [[513, 1027]]),
                                                 (False, [[258, 772]])])
def test_decode_raw_int16(little_endian, want):
    got = run(gc.decode_raw(gc.constant([b"\x01\x02\x03\x04"]), gc.int16,
                            little_endian=little_endian))
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [gc.float32, gc.float64])
def test_decode_raw_floats_round_trip(dtype):
    values = np.array([[1.5, -2.25, 1e-7], [0.0, np.pi, -1e30]], dtype.np)
    got = run(gc.decode_raw([values[0].tobytes(), values[1].tobytes()], dtype))
    np.testing.assert_array_equal(got, values)


def test_decode_raw_unequal_or_ragged_lengths():
    with pytest.raises(errors.InvalidArgumentError, match="same size"):
        run(gc.decode_raw([b"\x00\x00\x00\x00", b"\x00\x00"], gc.int16))
    with pytest.raises(errors.InvalidArgumentError, match="not a multiple of 4"):
        run(gc.decode_raw([b"\x00\x00\x00"], gc.float32))


# TensorFlow 2.21's tf.strings.to_hash_bucket_fast of these strings (run once and written
# down here): FarmHash Fingerprint64 modulo the bucket count
HASH_INPUTS = ["", "a", "hello", "The quick brown fox jumps over the lazy dog", "x" * 17,
               "y" * 33, "z" * 65, "w" * 100, "abcdefgh" * 20 + "q", "été"]
TF_BUCKETS_2_62 = [1936946117179621455, 3694432073954588131, 3786372426573024488,
                   3152101869897863476, 2082709914559524773, 3999049019338133246,
                   3688229565335330613, 1541208536988169809, 4582437689365018475,
                   4309181583525144726]
TF_BUCKETS_1000 = [263, 939, 296, 284, 581, 150, 517, 713, 283, 534]


def test_string_to_hash_bucket_fast_matches_tensorflow():
    got_big, got_small = run([gc.string_to_hash_bucket_fast(HASH_INPUTS, 2 ** 62),
                              gc.strings.to_hash_bucket_fast(HASH_INPUTS, 1000)])
    assert got_big.dtype == np.int64
    np.testing.assert_array_equal(got_big, TF_BUCKETS_2_62)
    np.testing.assert_array_equal(got_small, TF_BUCKETS_1000)


# ------------------------------------------------------------------ graph files
DATA = os.path.join(os.path.dirname(__file__), "data", "tf_formats")


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_def_with_string_ops_recorded_by_tensorflow(backend):
    """strings_tf.pb: TF 2.21 (tf.compat.v1 graph mode) wrote this graph of string_split,
    strings.length, Mul, substr, upper, as_string, StringJoin, StaticRegexReplace,
    to_hash_bucket_fast and a ReduceJoin of a string Const; the values below are TF's
    outputs for these feeds."""
    pytest.importorskip("tensorboard")
    gd = gc.GraphDef()
    with open(os.path.join(DATA, "strings_tf.pb"), "rb") as f:
        gd.ParseFromString(f.read())
    with gc.Graph().as_default():
        fetched = gc.import_graph_def(gd, name="", return_elements=[
            "tokens:0", "dense_shape:0", "score:0", "label:0", "bucket:0", "joined:0"])
        with gc.Session() as sess:
            got = sess.run(fetched, {"words:0": ["ab,c", "héllo", ""],
                                     "scale:0": [0.5, 1.25, 2.0]})
    assert_bytes(got[0], [b"ab", b"c", "héllo".encode()])
    np.testing.assert_array_equal(got[1], [3, 2])
    np.testing.assert_array_equal(got[2], np.array([2.0, 7.5, 0.0], np.float32))
    assert_bytes(got[3], [b"A:2.00", b"H:7.50", b":0.00"])
    np.testing.assert_array_equal(got[4], [6, 0, 6])
    assert_bytes(got[5], ["é+b\x00c".encode()])


@pytest.mark.parametrize("name, as_text", [("g.json", True), ("g.pb", False),
                                           ("g.pbtxt", True)])
def test_string_constants_and_ops_round_trip_through_graph_files(tmp_path, name, as_text):
    if not name.endswith(".json"):
        pytest.importorskip("tensorboard")
    values = [["a", "é"], ["", "b\x00c"]]
    c = gc.constant(values, name="c")
    gc.strings.regex_replace(gc.as_string(gc.strings.length(c), width=3), " ", "_",
                             name="out")
    gc.train.write_graph(gc.get_default_graph(), str(tmp_path), name, as_text=as_text)
    from graphc import graph_io
    with gc.Graph().as_default():
        c2, out = gc.import_graph_def(graph_io.read_graph_def(str(tmp_path / name)), name="",
                                      return_elements=["c:0", "out:0"])
        got_c, got_out = run([c2, out])
    assert_bytes(got_c, [[b"a", "é".encode()], [b"", b"b\x00c"]])
    assert_bytes(got_out, [[b"__1", b"__2"], [b"__0", b"__3"]])


# ------------------------------------------------------------------- whole files
def test_write_file_then_read_file_and_matching_files(tmp_path):
    path = str(tmp_path / "made" / "a.bin")
    contents = bytes(range(256))
    write = gc.io.write_file(path, contents)
    read = gc.read_file(path)
    found = gc.matching_files(str(tmp_path / "made" / "*.bin"))
    with gc.Session() as sess:
        assert write.type == "WriteFile" and sess.run(write) is None
        assert sess.run(gc.io.read_file(path)) == contents
        (tmp_path / "made" / "b.bin").write_bytes(b"later")
        # read when run, never folded when compiled: a changed file reads anew
        (tmp_path / "made" / "a.bin").write_bytes(b"changed")
        got_read, got_found = sess.run([read, found])
    assert got_read == b"changed"
    assert_bytes(got_found, [path.encode(), str(tmp_path / "made" / "b.bin").encode()])


def test_read_file_of_a_missing_file_is_not_found(tmp_path):
    with pytest.raises(errors.NotFoundError, match="nothing.txt"):
        run(gc.read_file(str(tmp_path / "nothing.txt")))


# ------------------------------------------------------------------------ base64
def test_base64_web_safe_as_tensorflow():
    # TensorFlow 2.21's values for these strings
    x = gc.constant(["", "a", "ab", "abc", "\xff\xfe?>"])
    plain, padded = gc.encode_base64(x), gc.io.encode_base64(x, pad=True)
    got = run([plain, padded, gc.decode_base64(plain), gc.io.decode_base64(padded)])
    assert_bytes(got[0], [b"", b"YQ", b"YWI", b"YWJj", b"w7_Dvj8-"])
    assert_bytes(got[1], [b"", b"YQ==", b"YWI=", b"YWJj", b"w7_Dvj8-"])
    want = [b"", b"a", b"ab", b"abc", "\xff\xfe?>".encode()]
    assert_bytes(got[2], want)
    assert_bytes(got[3], want)


@pytest.mark.parametrize("bad", ["a", "ab+c", "YQ==="])
def test_decode_base64_of_bad_text_is_invalid_argument(bad):
    with pytest.raises(errors.InvalidArgumentError):
        run(gc.decode_base64([bad]))


# ------------------------------------------------------------- string variables
@pytest.mark.parametrize("tf_format", [False, True])
def test_string_variables_assign_save_and_restore(tmp_path, tf_format):
    if tf_format:
        pytest.importorskip("tensorboard")
        pytest.importorskip("google_crc32c")
    v = gc.Variable([["a", "bc"], ["", "é"]], name="sv")
    x = gc.Variable(1.5, name="x")
    joined = gc.strings.join([v, "!"])
    saver = gc.train.Saver(write_version=gc.train.SaverDef.V2) if tf_format \
        else gc.train.Saver()
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        assert_bytes(sess.run(joined), [[b"a!", b"bc!"], [b"!", "é!".encode()]])
        path = saver.save(sess, str(tmp_path / "ck"))
        sess.run(gc.assign(v, [["z", "z"], ["z", "z"]]))
        assert_bytes(sess.run(v), [[b"z", b"z"], [b"z", b"z"]])
        saver.restore(sess, path)
        assert_bytes(sess.run(v), [[b"a", b"bc"], [b"", "é".encode()]])
        assert sess.run(x) == 1.5
    reader = gc.train.load_checkpoint(path)
    assert_bytes(reader.get_tensor("sv"), [[b"a", b"bc"], [b"", "é".encode()]])


def test_a_damaged_string_tensor_in_a_checkpoint_is_data_loss(tmp_path):
    gc.Variable(["abc", "de"], name="sv")
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        path = gc.train.Saver().save(sess, str(tmp_path / "ck"))
    from graphc.train import checkpoint_file
    raw = bytearray(open(checkpoint_file.checkpoint_path(path), "rb").read())
    raw[-1] ^= 0xFF  # the last element's last byte
    open(checkpoint_file.checkpoint_path(path), "wb").write(bytes(raw))
    with pytest.raises(errors.DataLossError):
        checkpoint_file.CheckpointReader(path).get_tensor("sv")
