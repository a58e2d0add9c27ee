#!/usr/bin/env python3
"""Memory kept by a long process that compiles many distinct graphs (issue 19).

Builds, runs and drops --graphs distinct small graphs (each with its own Session) after
20 warm-up ones, and prints the RSS growth (after gc.collect) every 50 graphs and per
graph. Run with GRAPHC_CACHE_DIR=off so that every graph is really compiled; compare
GRAPHC_COMPILE_WORKER=0 (every optimization in-process: llvmlite's pipeline leaks per
module) with the default (past the first 32, a helper process optimizes).

    GRAPHC_CACHE_DIR=off python tools/memory_growth.py [--graphs 300]
"""
import argparse
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import graphc as tf  # noqa: E402


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one_graph(i):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [4, 3])
        y = tf.reduce_sum(tf.tanh(x * float(i + 1)) + float(i), axis=1)
        with tf.Session(graph=g) as sess:
            sess.run(y, {x: np.ones((4, 3), np.float32)})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=300)
    args = parser.parse_args(argv)
    for i in range(20):
        one_graph(i)
    gc.collect()
    base = rss_bytes()
    for n in range(1, args.graphs + 1):
        one_graph(19 + n)
        if n % 50 == 0 or n == args.graphs:
            gc.collect()
            print(f"after {n:4d} graphs: +{(rss_bytes() - base) / 2**20:.2f} MB")
    print(f"{(rss_bytes() - base) / 1024 / args.graphs:.1f} KB per graph")


if __name__ == "__main__":
    main()
