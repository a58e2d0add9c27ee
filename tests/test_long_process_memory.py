"""A long process that compiles many distinct graphs: once each graph and Session are
dropped, its memory levels off (llvmlite's optimizer leaks natively per module, so past
the first jit.IN_PROCESS_COMPILES the code is optimized in a replaceable helper process).
Measured in a fresh subprocess; the bound is generous (it leaked ~100 KB per graph)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = """
import gc, json, os, sys
sys.path.insert(0, {root!r})
import numpy as np
import graphc as tf
from runtime import jit

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def one(i):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [4, 3])
        y = tf.reduce_sum(tf.tanh(x * float(i + 1)) + float(i), axis=1)
        with tf.Session(graph=g) as sess:
            got = sess.run(y, {{x: np.full((4, 3), 0.5, np.float32)}})
    want = (np.tanh(np.float32(0.5) * np.float32(i + 1)) + np.float32(i)) * 3
    assert np.allclose(got, want, rtol=1e-5), (i, got, want)

marks = {{}}
for i in range({total}):
    one(i)
    if i + 1 in ({first}, {total}):
        gc.collect()
        marks[i + 1] = rss()
print(json.dumps({{"marks": marks, "in_process": jit.IN_PROCESS_COMPILES}}))
"""


def test_memory_levels_off_over_many_distinct_graphs():
    first, total = 60, 180
    env = dict(os.environ, GRAPHC_CACHE_DIR="off")  # every graph is really compiled
    env.pop("GRAPHC_COMPILE_WORKER", None)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT.format(root=ROOT, first=first,
                                                                total=total)],
                          capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert first > result["in_process"]  # the window starts after the in-process ones
    marks = {int(k): v for k, v in result["marks"].items()}
    per_graph = (marks[total] - marks[first]) / (total - first)
    assert per_graph < 25 * 1024, f"{per_graph / 1024:.1f} KB kept per graph"


_DROPPED_GRAPHS_SCRIPT = """
import os, sys, weakref
sys.path.insert(0, {root!r})
import numpy as np
import graphc as tf

def one(i):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [4, 3])
        y = tf.reduce_sum(tf.tanh(x * float(i + 1)), axis=1)
        with tf.Session(graph=g) as sess:
            sess.run(y, {{x: np.full((4, 3), 0.5, np.float32)}})
    return weakref.ref(g)

refs = [one(i) for i in range({count})]
print(sum(r() is not None for r in refs))
"""


def test_the_collector_frees_dropped_graphs_without_being_asked():
    # A graph and its Session hold reference cycles, so only the cyclic collector frees
    # them. A compile used to freeze the heap (gc.freeze), which zeroed the counts that
    # trigger the collector's full collections: none ever ran, and all 40 stayed alive.
    count = 40
    env = dict(os.environ, GRAPHC_CACHE_DIR="off")
    proc = subprocess.run([sys.executable, "-c", _DROPPED_GRAPHS_SCRIPT.format(
        root=ROOT, count=count)], capture_output=True, text=True, timeout=600, env=env,
        cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    alive = int(proc.stdout.strip().splitlines()[-1])
    assert alive <= count // 2, f"{alive} of {count} dropped graphs still alive"


def test_a_compile_leaves_the_collectors_counts_going():
    import gc
    import numpy as np
    import graphc as tf
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [3])
        y = tf.exp(x) * 2.0
        gc.collect()
        gc.collect(1)
        gc.collect(1)
        young_collections = gc.get_count()[2]
        full = gc.get_stats()[2]["collections"]
        with tf.Session(graph=g) as sess:
            got = sess.run(y, {x: np.arange(3, dtype=np.float32)})
    np.testing.assert_allclose(got, np.exp(np.arange(3, dtype=np.float32)) * 2, rtol=1e-6)
    # a full collection resets the count, and is what the count is for
    assert gc.get_count()[2] >= young_collections or \
        gc.get_stats()[2]["collections"] > full
