"""An MLP classifier on scikit-learn's 8x8 handwritten digits, trained with Adam.

It prints the loss, training accuracy and time of each epoch, the training speed and the test accuracy, then saves a
checkpoint with gc.train.Saver and restores it into a fresh Session to show that the
restored model scores the same. Finally it exports the trained model as a compiled file
that examples/mnist_mlp_runtime.py runs with the standalone `runtime` package alone.

    python examples/mnist_mlp.py [--epochs 30] [--batch-size 64] [--out DIR]
"""
import argparse
import os
import tempfile
import time

import numpy as np
from sklearn.datasets import load_digits

import graphc as gc

NUM_CLASSES = 10


def load_split(test_fraction=0.2, seed=0):
    """(x_train, y_train, x_test, y_test): pixels scaled to [0, 1], a fixed shuffled split."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def build_model(num_features, hidden=128, optimizer=None):
    """Placeholders, loss, train op, accuracy and probabilities of a 2-hidden-layer MLP,
    trained by `optimizer` (Adam at 1e-3 by default)."""
    images = gc.placeholder(gc.float32, [None, num_features], name="images")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    training = gc.placeholder_with_default(False, [], name="training")
    h = gc.layers.dense(images, hidden, activation=gc.nn.relu, name="hidden1")
    h = gc.layers.dropout(h, rate=0.1, training=training)
    h = gc.layers.dense(h, hidden, activation=gc.nn.relu, name="hidden2")
    logits = gc.layers.dense(h, NUM_CLASSES, name="logits")
    loss = gc.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = (optimizer or gc.train.AdamOptimizer(1e-3)).minimize(loss)
    correct = gc.equal(gc.cast(gc.argmax(logits, axis=1), gc.int32), labels)
    accuracy = gc.reduce_mean(gc.cast(correct, gc.float32), name="accuracy")
    probs = gc.nn.softmax(logits, name="probs")
    return images, labels, training, loss, train_op, accuracy, probs


def train(sess, model, x_train, y_train, epochs, batch_size, seed=0):
    images, labels, training, loss, train_op, accuracy = model[:6]
    rng = np.random.default_rng(seed)
    steps, start = 0, time.perf_counter()
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_train))
        losses, correct, epoch_start = [], 0.0, time.perf_counter()
        for i in range(0, len(order), batch_size):
            batch = order[i:i + batch_size]
            _, loss_value, batch_accuracy = sess.run(
                [train_op, loss, accuracy],
                {images: x_train[batch], labels: y_train[batch], training: True})
            losses.append(loss_value)
            correct += batch_accuracy * len(batch)
            steps += 1
        print(f"epoch {epoch:3d}  loss {np.mean(losses):.4f}  train accuracy "
              f"{correct / len(order):.4f}  {1e3 * (time.perf_counter() - epoch_start):.1f} ms")
    elapsed = time.perf_counter() - start
    print(f"trained {steps} steps in {elapsed:.1f} s ({steps / elapsed:.0f} steps/s)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", default=None,
                        help="directory for the checkpoint (default: a new temporary one)")
    args = parser.parse_args(argv)

    x_train, y_train, x_test, y_test = load_split()
    print(f"digits: {len(x_train)} training and {len(x_test)} test images of 8x8 pixels")
    gc.set_random_seed(0)
    model = build_model(x_train.shape[1])
    images, labels, _, _, _, accuracy, probs = model
    test_feed = {images: x_test, labels: y_test}
    saver = gc.train.Saver()

    out_dir = args.out or tempfile.mkdtemp(prefix="graphc_mnist_mlp_")
    os.makedirs(out_dir, exist_ok=True)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        train(sess, model, x_train, y_train, args.epochs, args.batch_size)
        test_accuracy = sess.run(accuracy, test_feed)
        print(f"test accuracy: {test_accuracy:.4f}")
        path = saver.save(sess, os.path.join(out_dir, "mnist_mlp.ckpt"))
        print(f"saved checkpoint to {path}")
        model_path = os.path.join(out_dir, "mnist_mlp.graphc")
        gc.export(sess, model_path, inputs={"images": images}, outputs={"probs": probs})
        np.save(os.path.join(out_dir, "test_images.npy"), x_test)
        np.save(os.path.join(out_dir, "test_labels.npy"), y_test)
        print(f"exported the compiled model to {model_path}; run it without graphc:\n"
              f"  python examples/mnist_mlp_runtime.py {out_dir}")

    with gc.Session() as sess:  # a fresh session: nothing initialized until restore
        saver.restore(sess, path)
        restored_accuracy = sess.run(accuracy, test_feed)
    print(f"restored test accuracy: {restored_accuracy:.4f} "
          f"({'same' if restored_accuracy == test_accuracy else 'DIFFERENT'})")


if __name__ == "__main__":
    main()
