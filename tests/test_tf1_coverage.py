"""tools/tf1_coverage.py: the names it collects from TF1 sources and its figures."""
import os
import subprocess
import sys
import textwrap


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import tf1_coverage  # noqa: E402


def _names(source):
    return tf1_coverage.names_in_source(textwrap.dedent(source))


def test_imports_and_aliases_resolve_to_tf_names():
    assert sorted(_names("""
        import tensorflow as tf
        x = tf.nn.relu(tf.placeholder(tf.float32))
        flags = tf.app.flags
        FLAGS = flags.FLAGS
        print(FLAGS.batch_size, tf.GraphKeys.UPDATE_OPS, tf.train.AdamOptimizer(1).minimize)
        """)) == sorted(["tf.nn.relu", "tf.placeholder", "tf.float32", "tf.app.flags",
                         "tf.app.flags.FLAGS", "tf.app.flags.FLAGS", "tf.GraphKeys.UPDATE_OPS",
                         "tf.train.AdamOptimizer"])
    assert sorted(_names("""
        import tensorflow.compat.v1 as tf
        from tensorflow.compat import v1 as tf1
        from tensorflow.contrib import slim
        from tensorflow.examples.tutorials.mnist import input_data
        import tensorflow.contrib.layers as layers
        tf.compat.v1.Session
        tf1.gfile.GFile
        slim.conv2d
        input_data.read_data_sets
        layers.xavier_initializer
        """)) == sorted(["tf.Session", "tf.gfile.GFile", "tf.contrib.slim.conv2d",
                         "tf.examples.tutorials.mnist.input_data.read_data_sets",
                         "tf.contrib.layers.xavier_initializer"])
    assert _names("import numpy as np\nnp.zeros(3)\n") == []


def test_figures_on_a_tiny_corpus(tmp_path):
    files = {"a/one.py": "import tensorflow as tf\ntf.nn.relu\ntf.nn.relu\ntf.not_a_tf1_name\n",
             "a/two.py": "import tensorflow as tf\ntf.zeros\n",
             "b/three.py": "import tensorflow as tf\ntf.nn.relu\ntf.not_a_tf1_name\n"
                           "tf.contrib.slim.conv2d\n",
             "b/plain.py": "x = 1\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    uses, repo_of = tf1_coverage.scan(str(tmp_path))
    result = tf1_coverage.figures(uses, repo_of, min_repos=2)
    assert result["repositories"] == 2 and result["files"] == 4
    assert result["files_using_tf"] == 3
    # common core names: tf.nn.relu (resolves), tf.not_a_tf1_name (does not)
    assert (result["common_core_names"], result["common_core_names_resolved"]) == (2, 1)
    assert (result["common_core_uses"], result["common_core_uses_resolved"]) == (5, 3)
    assert result["files_fully_resolved"] == 1  # two.py


def test_runs_on_the_corpus():
    corpus = os.path.join(ROOT, "tests", "data", "tf1_corpus")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "tf1_coverage.py"),
                          corpus], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "core names used in >= 2 repositories" in out.stdout
    assert "skipped" not in out.stderr  # every corpus file parses
