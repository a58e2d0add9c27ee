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
