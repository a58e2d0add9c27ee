"""A small convolutional network on scikit-learn's 8x8 handwritten digits.

conv 3x3 (16) -> max pool 2x2 -> conv 3x3 (32) -> max pool 2x2 -> dense 64 -> dense 10,
trained with Adam on mini-batches; prints the loss, training accuracy and time per step
as it goes, the speed and the test accuracy.

    python examples/cnn.py [--steps 300] [--batch-size 64]
"""
import argparse

import numpy as np
from sklearn.datasets import load_digits

import graphc as gc
from step_log import StepLog

NUM_CLASSES = 10


def load_split(test_fraction=0.2, seed=0):
    """Images [n, 8, 8, 1] scaled to [0, 1] and int labels, split with a fixed seed."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., np.newaxis]
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def build_model():
    images = gc.placeholder(gc.float32, [None, 8, 8, 1], name="images")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    h = gc.layers.conv2d(images, 16, 3, padding="same", activation=gc.nn.relu)   # 8x8x16
    h = gc.layers.max_pooling2d(h, 2, 2)                                          # 4x4x16
    h = gc.layers.conv2d(h, 32, 3, padding="same", activation=gc.nn.relu)        # 4x4x32
    h = gc.layers.max_pooling2d(h, 2, 2)                                          # 2x2x32
    h = gc.layers.dense(gc.layers.flatten(h), 64, activation=gc.nn.relu)
    logits = gc.layers.dense(h, NUM_CLASSES)
    loss = gc.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = gc.train.AdamOptimizer(3e-3).minimize(loss)
    correct = gc.equal(gc.cast(gc.argmax(logits, axis=1), gc.int32), labels)
    accuracy = gc.reduce_mean(gc.cast(correct, gc.float32), name="accuracy")
    return images, labels, loss, train_op, accuracy


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)

    x_train, y_train, x_test, y_test = load_split()
    gc.set_random_seed(0)
    images, labels, loss, train_op, accuracy = build_model()
    rng = np.random.default_rng(0)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        log = StepLog(args.steps)
        for step in range(1, args.steps + 1):
            batch = rng.choice(len(x_train), args.batch_size, replace=False)
            _, loss_value, batch_accuracy = sess.run(
                [train_op, loss, accuracy], {images: x_train[batch], labels: y_train[batch]})
            log.add(step, loss_value, batch_accuracy)
        elapsed = log.elapsed()
        print(f"trained {args.steps} steps in {elapsed:.1f} s ({args.steps / elapsed:.0f} steps/s)")
        test_accuracy = sess.run(accuracy, {images: x_test, labels: y_test})
    print(f"test accuracy: {test_accuracy:.4f}")


if __name__ == "__main__":
    main()
