#!/usr/bin/env python3
"""Speed of TensorFlow's file formats in graphc: TFRecord write/read (with the CRC32C
checks), Example parsing through a Session, V2 checkpoint save/restore, GraphDef
export/import. Prints the median of --repeats runs of each; nothing is compared with TF
(that needs TF installed).

    python tools/bench_tf_formats.py [--records 20000] [--record-bytes 1000]
                                     [--checkpoint-mb 64] [--nodes 2000]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import graphc as gc  # noqa: E402


def median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_records(tmp, n, size, repeats):
    path = os.path.join(tmp, "data.tfrecord")
    payload = np.random.RandomState(0).bytes(size)

    def write():
        with gc.python_io.TFRecordWriter(path) as w:
            for _ in range(n):
                w.write(payload)

    def read():
        assert sum(1 for _ in gc.python_io.tf_record_iterator(path)) == n

    mb = n * size / 1e6
    t_write, t_read = median_seconds(write, repeats), median_seconds(read, repeats)
    print(f"TFRecord   {n} records of {size} B: write {mb / t_write:7.1f} MB/s "
          f"({n / t_write:9.0f} rec/s), read {mb / t_read:7.1f} MB/s ({n / t_read:9.0f} rec/s)")


def bench_parse(n, repeats):
    ex = gc.train.Example(features=gc.train.Features(feature={
        "label": gc.train.Feature(int64_list=gc.train.Int64List(value=[3])),
        "x": gc.train.Feature(float_list=gc.train.FloatList(value=list(range(32))))}))
    batch = np.array([ex.SerializeToString()] * n, dtype=object)
    with gc.Graph().as_default():
        s = gc.placeholder(gc.string, [None])
        parsed = gc.parse_example(s, {"label": gc.FixedLenFeature([], gc.int64),
                                      "x": gc.FixedLenFeature([32], gc.float32)})
        with gc.Session() as sess:
            sess.run(parsed, {s: batch})
            t = median_seconds(lambda: sess.run(parsed, {s: batch}), repeats)
    print(f"parse_example  batch of {n}: {n / t:9.0f} examples/s")


def bench_checkpoint(tmp, megabytes, repeats):
    with gc.Graph().as_default():
        rows = megabytes * 1_000_000 // (4 * 1024)
        v = gc.Variable(np.ones((rows, 1024), np.float32), name="big")
        saver = gc.train.Saver(write_version=gc.train.SaverDef.V2)
        with gc.Session() as sess:
            sess.run(v.initializer)
            prefix = os.path.join(tmp, "model")
            t_save = median_seconds(lambda: saver.save(sess, prefix, write_meta_graph=False,
                                                       write_state=False), repeats)
            t_restore = median_seconds(lambda: saver.restore(sess, prefix), repeats)
    print(f"V2 checkpoint {megabytes} MB: save {megabytes / t_save:7.1f} MB/s, "
          f"restore {megabytes / t_restore:7.1f} MB/s")


def bench_graph_def(nodes, repeats):
    with gc.Graph().as_default() as g:
        x = gc.placeholder(gc.float32, [None, 16], name="x")
        h = x
        for i in range(nodes // 3):
            h = gc.nn.relu(gc.matmul(h, np.eye(16, dtype=np.float32)) + 0.5)
        gd = g.as_graph_def()
        count = len(g.get_operations())
        t_export = median_seconds(g.as_graph_def, repeats)
    data = gd.SerializeToString()

    def load():  # parse the bytes and build the graph, as loading a .pb file does
        with gc.Graph().as_default():
            gc.import_graph_def(gc.GraphDef.FromString(data), name="")

    t_import = median_seconds(load, repeats)
    print(f"GraphDef {count} nodes ({len(data) / 1e6:.1f} MB): as_graph_def "
          f"{t_export * 1e3:7.1f} ms, import_graph_def {t_import * 1e3:7.1f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--record-bytes", type=int, default=1000)
    parser.add_argument("--parse-batch", type=int, default=10000)
    parser.add_argument("--checkpoint-mb", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench_records(tmp, args.records, args.record_bytes, args.repeats)
        bench_parse(args.parse_batch, args.repeats)
        bench_checkpoint(tmp, args.checkpoint_mb, args.repeats)
        bench_graph_def(args.nodes, args.repeats)


if __name__ == "__main__":
    main()
