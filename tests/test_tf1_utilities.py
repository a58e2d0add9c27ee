"""TF1's utility modules: tf.app / tf.flags, tf.logging, tf.gfile, tf.test, tf.compat,
tf.nest, each checked against TF1's documented behaviour."""
import collections
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import graphc as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_script(tmp_path, source, *args):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)


# ------------------------------------------------------------------------- app, flags
def test_app_run_parses_flags_and_passes_remaining_argv(tmp_path):
    out = _run_script(tmp_path, """
        import graphc as tf
        flags = tf.app.flags
        flags.DEFINE_integer("batch_size", 32, "batch")
        flags.DEFINE_string("data_dir", "/tmp/data", "where")
        flags.DEFINE_boolean("train", False, "train?")
        tf.flags.DEFINE_bool("fast", True, "fast?")
        flags.DEFINE_float("lr", 0.1, "rate")
        flags.DEFINE_list("layers", ["a"], "names")
        flags.DEFINE_enum("mode", "x", ["x", "y"], "mode")
        FLAGS = flags.FLAGS

        def main(argv):
            print(FLAGS.batch_size, FLAGS.data_dir, FLAGS.train, FLAGS.fast, FLAGS.lr,
                  FLAGS.layers, FLAGS.mode, argv[1:])
            return 3

        if __name__ == "__main__":
            tf.app.run()
        """, "--batch_size=7", "--train", "--nofast", "--lr", "0.5", "--layers=c,d",
        "--mode=y", "extra", "--unknown_flag=1")
    assert out.returncode == 3, out.stderr
    assert out.stdout.split("\n")[0] == \
        "7 /tmp/data True False 0.5 ['c', 'd'] y ['extra', '--unknown_flag=1']"


def test_app_run_reports_a_bad_flag_value(tmp_path):
    out = _run_script(tmp_path, """
        import graphc as tf
        tf.app.flags.DEFINE_integer("steps", 1, "how many")
        def main(_):
            print("ran")
        tf.app.run(main=main)
        """, "--steps=many")
    assert out.returncode != 0 and "ran" not in out.stdout
    assert "steps" in out.stderr and "many" in out.stderr


def test_flags_parse_on_first_read_without_app_run(tmp_path):
    out = _run_script(tmp_path, """
        import graphc as tf
        tf.flags.DEFINE_integer("epochs", 2, "epochs")
        print(tf.flags.FLAGS.epochs)
        """, "--epochs=5")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "5"


# ---------------------------------------------------------------------------- logging
def test_logging_levels_and_verbosity(caplog):
    assert (tf.logging.DEBUG, tf.logging.INFO, tf.logging.WARN, tf.logging.ERROR,
            tf.logging.FATAL) == (10, 20, 30, 40, 50)
    logger = logging.getLogger("tensorflow")
    old = logger.level
    try:
        tf.logging.set_verbosity(tf.logging.ERROR)
        assert tf.logging.get_verbosity() == tf.logging.ERROR
        with caplog.at_level(tf.logging.ERROR, logger="tensorflow"):
            tf.logging.info("hidden %d", 1)
            tf.logging.warn("hidden too")
            tf.logging.error("shown %s", "e")
            tf.logging.fatal("fatal does not exit")
        assert [r.getMessage() for r in caplog.records] == ["shown e", "fatal does not exit"]
        caplog.clear()
        tf.logging.set_verbosity(tf.logging.DEBUG)
        for i in range(7):
            tf.logging.log_every_n(tf.logging.INFO, "step %d", 3, i)
        tf.logging.debug("d")
        tf.logging.warning("w")
        tf.logging.log(tf.logging.INFO, "l")
        assert [r.getMessage() for r in caplog.records] == \
            ["step 0", "step 3", "step 6", "d", "w", "l"]
        assert all(r.name == "tensorflow" for r in caplog.records)
        # the record names the caller's line, not graphc's logging module
        assert {r.filename for r in caplog.records} == {"test_tf1_utilities.py"}
    finally:
        logger.setLevel(old)


# ------------------------------------------------------------------------------ gfile
def test_gfile_read_write_modes(tmp_path):
    path = str(tmp_path / "a.txt")
    with tf.gfile.GFile(path, "w") as f:
        f.write("line1\r\n")
        f.write(b"line2\n")
    with tf.gfile.GFile(path) as f:
        assert f.read() == "line1\r\nline2\n"  # str, no newline translation
    with tf.gfile.Open(path, "rb") as f:
        assert f.read(5) == b"line1" and f.tell() == 5
    with tf.gfile.FastGFile(path, "r") as f:
        assert list(f) == ["line1\r\n", "line2\n"]
    with tf.gfile.GFile(path, "a") as f:
        f.write("3")
    assert tf.gfile.GFile(path, "rb").size() == 14
    with pytest.raises(tf.errors.NotFoundError, match="missing.txt"):
        tf.gfile.GFile(str(tmp_path / "missing.txt"))
    with pytest.raises(tf.errors.InvalidArgumentError, match="mode"):
        tf.gfile.GFile(path, "x")


def test_gfile_directories_and_files(tmp_path):
    top = str(tmp_path / "top")
    tf.gfile.MakeDirs(os.path.join(top, "b", "c"))
    tf.gfile.MakeDirs(os.path.join(top, "b"))  # exists: nothing
    tf.gfile.MkDir(os.path.join(top, "a"))
    with pytest.raises(tf.errors.AlreadyExistsError):
        tf.gfile.MkDir(os.path.join(top, "a"))
    with pytest.raises(tf.errors.NotFoundError):
        tf.gfile.MkDir(os.path.join(top, "no", "parent"))
    for name in ("x.txt", "y.txt", "b/z.txt"):
        with tf.gfile.GFile(os.path.join(top, name), "w") as f:
            f.write("data")
    assert tf.gfile.Exists(top) and tf.gfile.IsDirectory(top)
    assert not tf.gfile.IsDirectory(os.path.join(top, "x.txt"))
    assert tf.gfile.ListDirectory(top) == ["a", "b", "x.txt", "y.txt"]
    assert tf.gfile.Glob(os.path.join(top, "*.txt")) == [os.path.join(top, "x.txt"),
                                                         os.path.join(top, "y.txt")]
    assert list(tf.gfile.Walk(top)) == [(top, ["a", "b"], ["x.txt", "y.txt"]),
                                        (os.path.join(top, "a"), [], []),
                                        (os.path.join(top, "b"), ["c"], ["z.txt"]),
                                        (os.path.join(top, "b", "c"), [], [])]
    assert [d for d, _, _ in tf.gfile.Walk(top, in_order=False)][-1] == top
    assert list(tf.gfile.Walk(os.path.join(top, "none"))) == []
    st = tf.gfile.Stat(os.path.join(top, "x.txt"))
    assert st.length == 4 and not st.is_directory and st.mtime_nsec > 0
    with pytest.raises(tf.errors.AlreadyExistsError):
        tf.gfile.Copy(os.path.join(top, "x.txt"), os.path.join(top, "y.txt"))
    tf.gfile.Copy(os.path.join(top, "x.txt"), os.path.join(top, "y.txt"), overwrite=True)
    tf.gfile.Rename(os.path.join(top, "y.txt"), os.path.join(top, "w.txt"))
    assert not tf.gfile.Exists(os.path.join(top, "y.txt"))
    tf.gfile.Remove(os.path.join(top, "w.txt"))
    with pytest.raises(tf.errors.NotFoundError):
        tf.gfile.Remove(os.path.join(top, "w.txt"))
    with pytest.raises(tf.errors.NotFoundError):
        tf.gfile.ListDirectory(os.path.join(top, "none"))
    tf.gfile.DeleteRecursively(os.path.join(top, "b"))
    assert tf.io.gfile.listdir(top) == ["a", "x.txt"]
    assert tf.io.gfile.exists(top) and tf.io.gfile.isdir(top)
    with pytest.raises(tf.errors.NotFoundError):
        tf.gfile.DeleteRecursively(os.path.join(top, "b"))


# ------------------------------------------------------------------------------- test
class _ExampleCase(tf.test.TestCase):
    def test_sessions(self):
        x = tf.constant([1.0, 2.0])
        with self.test_session() as sess:
            assert tf.get_default_session() is sess
            first = sess
            self.assertAllClose(sess.run(x * 2), [2.0, 4.0])
        with self.cached_session() as sess:
            assert sess is first
        with self.session() as sess:
            assert sess is not first
            self.assertAllEqual(x, [1.0, 2.0])  # a tensor, evaluated

    def test_graph_is_fresh(self):
        assert tf.get_default_graph().get_operations() == []

    def test_op_error(self):
        x = tf.placeholder(tf.float32)
        with self.cached_session() as sess:
            with self.assertRaisesOpError("must feed a value|x"):
                sess.run(x * 2)


def test_testcase_runs_its_tests():
    import unittest
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(_ExampleCase)
    result = unittest.TestResult()
    suite.run(result)
    assert not result.failures and not result.errors, result.failures + result.errors
    assert result.testsRun - len(result.skipped) == 3  # test_session is not a test


def test_assert_all_close_tolerances_and_structures():
    case = tf.test.TestCase()
    case.assertAllClose({"a": [1.0, 2.0], "b": (3.0, [4.0])},
                        {"a": np.array([1.0, 2.0 + 1e-7]), "b": (3.0, [4.0])})
    case.assertAllClose([np.nan, 1.0], [np.nan, 1.0])
    with pytest.raises(AssertionError):
        case.assertAllClose([1.0, 2.0], [1.0, 2.001])
    with pytest.raises(AssertionError, match="Shape mismatch"):
        case.assertAllClose(np.ones([2, 1]), np.ones([2]))
    with pytest.raises(AssertionError):
        case.assertAllEqual([1, 2], [1, 3])
    case.assertAllEqual([[1, 2]], np.array([[1, 2]]))
    # float32 widens to float_rtol/float_atol, float64 keeps rtol/atol, float16 half_*
    a32 = np.float32([1.0, 2.0])
    case.assertAllCloseAccordingToType(a32, a32 + 1e-4, float_rtol=1e-3, float_atol=1e-3)
    with pytest.raises(AssertionError):
        case.assertAllCloseAccordingToType(np.float64([1.0, 2.0]), np.float64([1.0, 2.0]) +
                                           1e-4, float_rtol=1e-3, float_atol=1e-3)
    case.assertAllCloseAccordingToType(np.float16([1.0]), np.float16([1.0009765625]))
    with pytest.raises(AssertionError, match="not raised"):
        with case.assertRaisesOpError("x"):
            pass
    with pytest.raises(AssertionError, match="does not match"):
        with case.assertRaisesOpError("expected text"):
            raise tf.errors.InvalidArgumentError(None, None, "other text")


def test_test_main_exit_status_and_temp_dir(tmp_path):
    out = _run_script(tmp_path, """
        import os
        import graphc as tf

        class T(tf.test.TestCase):
            def test_ok(self):
                d = self.get_temp_dir()
                assert os.path.isdir(d)
                self.assertAllClose(tf.constant(1.5) * 2, 3.0)

            def test_bad(self):
                self.assertAllEqual([1], [2])

        if __name__ == "__main__":
            tf.test.main()
        """)
    assert out.returncode == 1
    # test_session is collected by name and skipped, as in TF1
    assert "Ran 3 tests" in out.stderr and "failures=1, skipped=1" in out.stderr, out.stderr
    assert "test_bad" in out.stderr and "test_ok" not in out.stderr.split("FAIL:")[1]


# ----------------------------------------------------------------------------- compat
def test_compat_conversions():
    assert tf.compat.as_bytes("é") == "é".encode("utf-8")
    assert tf.compat.as_bytes(b"x") == b"x"
    assert tf.compat.as_text(b"\xc3\xa9") == "é" and tf.compat.as_str(b"a") == "a"
    assert tf.compat.as_str_any(b"a") == "a" and tf.compat.as_str_any(3) == "3"
    with pytest.raises(TypeError, match="binary or unicode"):
        tf.compat.as_bytes(3)
    assert tf.compat.v1.placeholder is tf.placeholder
    assert isinstance(np.int64(1), tf.compat.integral_types)


# ------------------------------------------------------------------------------- nest
def test_nest_flatten_pack_and_map():
    Point = collections.namedtuple("Point", "x y")
    structure = {"b": [1, (2, 3)], "a": Point(4, {"z": 5, "y": None}), "c": "text"}
    flat = tf.nest.flatten(structure)
    assert flat == [4, None, 5, 1, 2, 3, "text"]  # dicts in sorted key order
    packed = tf.nest.pack_sequence_as(structure, [10 * (i + 1) for i in range(7)])
    assert packed == {"b": [40, (50, 60)], "a": Point(10, {"z": 30, "y": 20}), "c": 70}
    assert list(packed) == ["b", "a", "c"]  # the structure's own key order
    assert tf.nest.map_structure(lambda u, v: u + v, [1, (2,)], [10, (20,)]) == [11, (22,)]
    assert tf.nest.flatten(3) == [3] and tf.nest.flatten("ab") == ["ab"]
    with pytest.raises(ValueError, match="2 elements.*3 elements"):
        tf.nest.pack_sequence_as([1, 2], [1, 2, 3])
    with pytest.raises(TypeError, match="sequence type"):
        tf.nest.assert_same_structure([1, 2], (1, 2))
    tf.nest.assert_same_structure([1, 2], (1, 2), check_types=False)
    with pytest.raises(ValueError, match="same nested structure"):
        tf.nest.assert_same_structure([1, [2]], [1, 2])
    with pytest.raises(ValueError, match="keys"):
        tf.nest.assert_same_structure({"a": 1}, {"b": 1})
    assert tf.nest.is_nested([]) and not tf.nest.is_nested("ab")
