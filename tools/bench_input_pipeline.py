"""Step time of a training step fed by a tf.data pipeline (shuffle, repeat, batch) against
the same step fed by slicing NumPy arrays into feed_dict.

    python tools/bench_input_pipeline.py [--steps 40] [--rounds 3]

The pipeline runs on the host between the compiled stages; this shows what it costs a step
(it was a timed assertion in tests/test_data.py: speed is measured here, not asserted)."""
import argparse
import time

import numpy as np

import graphc as tf


def median_step_s(run, steps):
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args(argv)
    rng = np.random.RandomState(0)
    n = 20000
    x = rng.randn(n, 64).astype(np.float32)
    y = rng.randint(0, 10, n).astype(np.int32)

    def model(features, labels):
        w = tf.Variable(tf.zeros([64, 10]))
        logits = tf.matmul(features, w)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        return tf.train.GradientDescentOptimizer(0.01).minimize(loss)

    fx = tf.placeholder(tf.float32, [None, 64])
    fy = tf.placeholder(tf.int32, [None])
    feed_step = model(fx, fy)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10000, seed=0).repeat()
    dx, dy = ds.batch(args.batch).make_one_shot_iterator().get_next()
    data_step = model(dx, dy)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    order = rng.permutation(n)
    pos = [0]

    def feed():
        idx = order[pos[0]:pos[0] + args.batch]
        pos[0] = (pos[0] + args.batch) % (n - args.batch)
        sess.run(feed_step, {fx: x[idx], fy: y[idx]})

    def pull():
        sess.run(data_step)

    feed(), pull()  # the first runs compile and fill the shuffle buffer
    for r in range(args.rounds):  # alternating, so both see the same machine load
        t_feed = median_step_s(feed, args.steps)
        t_data = median_step_s(pull, args.steps)
        print(f"round {r}: feed_dict {t_feed * 1e3:.3f} ms/step, tf.data "
              f"{t_data * 1e3:.3f} ms/step, ratio {t_data / t_feed:.2f}")


if __name__ == "__main__":
    main()
