"""examples/mnist_mlp.py's MLP trained data-parallel over MPI with graphc.distribute.

Every process builds the same graph; each step, the processes split one global batch
(--batch-size rows) between them, DistributedOptimizer averages their gradients, and all
apply the same Adam update, so N processes train the model one process trains on the
same batches (up to floating-point summation order and the dropout masks drawn).

    python examples/mnist_mlp_distributed.py                    # one process
    mpiexec -n 2 python examples/mnist_mlp_distributed.py       # two processes, one host
    mpiexec -f hosts -n 4 python examples/mnist_mlp_distributed.py  # across hosts (README)
"""
import argparse
import os
import tempfile
import time

import numpy as np
import mnist_mlp
from mnist_mlp import load_split

import graphc as gc
import graphc.distribute as hvd


def build_model(num_features, hidden=128):
    """The MLP of mnist_mlp.py, its Adam wrapped in DistributedOptimizer; the loss
    averaged over the processes."""
    optimizer = hvd.DistributedOptimizer(gc.train.AdamOptimizer(1e-3))
    images, labels, training, loss, train_op, accuracy, _ = mnist_mlp.build_model(
        num_features, hidden, optimizer)
    return images, labels, training, hvd.allreduce(loss), train_op, accuracy


def train(sess, model, x_train, y_train, epochs, batch_size, seed=0):
    """Each rank takes rows rank, rank + size, ... of every global batch (the same
    shuffled order on every rank: same seed)."""
    images, labels, training, mean_loss, train_op, accuracy = model
    rng = np.random.default_rng(seed)
    steps, start = 0, time.perf_counter()
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_train))
        losses = []
        for i in range(0, len(order) - batch_size + 1, batch_size):  # whole batches only:
            mine = order[i:i + batch_size][hvd.rank()::hvd.size()]  # every rank has rows
            _, loss_value = sess.run([train_op, mean_loss],
                                     {images: x_train[mine], labels: y_train[mine],
                                      training: True})
            losses.append(loss_value)
            steps += 1
        if hvd.rank() == 0:
            print(f"epoch {epoch:3d}  loss {np.mean(losses):.4f}")
    elapsed = time.perf_counter() - start
    if hvd.rank() == 0:
        print(f"trained {steps} steps on {hvd.size()} processes in {elapsed:.1f} s "
              f"({steps / elapsed:.0f} steps/s)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64,
                        help="global batch, split between the processes")
    parser.add_argument("--out", default=None, help="directory for rank 0's checkpoint")
    args = parser.parse_args(argv)

    hvd.init()
    if args.batch_size < hvd.size():
        parser.error(f"--batch-size {args.batch_size} leaves some of the {hvd.size()} "
                     "processes without rows")
    x_train, y_train, x_test, y_test = load_split()
    gc.set_random_seed(hvd.rank())  # different initial values: the broadcast unifies them
    model = build_model(x_train.shape[1])
    images, labels, accuracy = model[0], model[1], model[5]
    sync = hvd.broadcast_global_variables(0)
    saver = gc.train.Saver()
    if hvd.rank() == 0:
        print(f"digits: {len(x_train)} training images; {hvd.size()} processes "
              f"({hvd.local_size()} on this host), global batch {args.batch_size}")
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(sync)
        train(sess, model, x_train, y_train, args.epochs, args.batch_size)
        test_accuracy = sess.run(accuracy, {images: x_test, labels: y_test})
        out_dir = args.out or (tempfile.mkdtemp(prefix="graphc_mnist_distributed_")
                               if hvd.rank() == 0 else "")  # the other ranks write nothing
        if hvd.rank() == 0:
            os.makedirs(out_dir, exist_ok=True)
        path = saver.save(sess, os.path.join(out_dir, "mnist_mlp.ckpt"))  # rank 0 writes
        if hvd.rank() == 0:
            print(f"test accuracy: {test_accuracy:.4f}")
            print(f"rank 0 saved the checkpoint {path}")


if __name__ == "__main__":
    main()
