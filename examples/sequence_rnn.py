"""Sequence classification with an LSTM over variable-length sequences (`dynamic_rnn`).

Each example is a string of 1 to --max-length symbols from a 4-letter alphabet; its class is
the letter it holds most often (ties go to the earliest letter). Batches are padded to their
longest sequence with random letters, and `sequence_length` tells the LSTM where each
sequence ends: the padding must not count, so a model that read past the end would fail.
The data are made here with a fixed seed (nothing is downloaded).

The inputs' time dimension is unknown ([batch, None, 4]), so `dynamic_rnn` builds one
`while_loop`, compiled natively with its gradient: one compile serves every batch's length.
Prints the loss, training accuracy and time per step as it goes, then the test accuracy
and how many times the training step was compiled.

    python examples/sequence_rnn.py [--steps 400] [--batch-size 32] [--max-length 24]
"""
import argparse

import numpy as np

import graphc as gc
from step_log import StepLog

LETTERS = 4


def make_sequences(n, max_length, rng):
    """n sequences of letter indices with lengths uniform in [1, max_length], and labels."""
    lengths = rng.integers(1, max_length + 1, n)
    sequences = [rng.integers(0, LETTERS, length) for length in lengths]
    labels = np.array([np.bincount(s, minlength=LETTERS).argmax() for s in sequences],
                      np.int32)
    return sequences, labels


def pad_batch(sequences, rng):
    """One-hot [batch, longest, LETTERS] inputs, padded past each end with random letters
    (noise the model must ignore), and the lengths."""
    lengths = np.array([len(s) for s in sequences], np.int32)
    letters = rng.integers(0, LETTERS, (len(sequences), lengths.max()))
    for row, s in enumerate(sequences):
        letters[row, :len(s)] = s
    return np.eye(LETTERS, dtype=np.float32)[letters], lengths


def build_model(hidden=32):
    inputs = gc.placeholder(gc.float32, [None, None, LETTERS], name="inputs")
    lengths = gc.placeholder(gc.int32, [None], name="lengths")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    cell = gc.nn.rnn_cell.LSTMCell(hidden)
    _, state = gc.nn.dynamic_rnn(cell, inputs, sequence_length=lengths, dtype=gc.float32)
    logits = gc.layers.dense(state.h, LETTERS)
    loss = gc.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = gc.train.AdamOptimizer(1e-2).minimize(loss)
    correct = gc.equal(gc.cast(gc.argmax(logits, axis=1), gc.int32), labels)
    accuracy = gc.reduce_mean(gc.cast(correct, gc.float32), name="accuracy")
    return inputs, lengths, labels, loss, train_op, accuracy


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=24)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    train_x, train_y = make_sequences(args.steps * args.batch_size, args.max_length, rng)
    test_x, test_y = make_sequences(1000, args.max_length, rng)
    gc.set_random_seed(0)
    inputs, lengths, labels, loss, train_op, accuracy = build_model()
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        compiles_before = sess.compile_count
        log = StepLog(args.steps)
        for step in range(1, args.steps + 1):
            batch = slice((step - 1) * args.batch_size, step * args.batch_size)
            x, n = pad_batch(train_x[batch], rng)
            _, loss_value, batch_accuracy = sess.run(
                [train_op, loss, accuracy], {inputs: x, lengths: n, labels: train_y[batch]})
            log.add(step, loss_value, batch_accuracy)
        elapsed = log.elapsed()
        train_compiles = sess.compile_count - compiles_before
        print(f"trained {args.steps} steps in {elapsed:.1f} s ({args.steps / elapsed:.0f} "
              f"steps/s); the training step compiled {train_compiles} time(s) for batches of "
              f"lengths up to {args.max_length}")
        x, n = pad_batch(test_x, rng)
        test_accuracy = sess.run(accuracy, {inputs: x, lengths: n, labels: test_y})
    print(f"test accuracy: {test_accuracy:.4f}")


if __name__ == "__main__":
    main()
