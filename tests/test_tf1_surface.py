"""Small TF1 API surface: Session options and devices, and the MNIST tutorial reader."""
import gzip
import os

import numpy as np
import pytest

import graphc as tf
from graphc.examples.tutorials.mnist import input_data


def test_config_and_run_options_are_accepted():
    config = tf.ConfigProto(gpu_options=tf.GPUOptions(per_process_gpu_memory_fraction=0.5))
    config.gpu_options.allow_growth = True
    x = tf.placeholder(tf.float32, [2])
    with tf.Session(config=config) as sess:
        meta = tf.RunMetadata()
        out = sess.run(x * 3.0, {x: [1.0, 2.0]}, options=tf.RunOptions(), run_metadata=meta)
        np.testing.assert_array_equal(out, [3.0, 6.0])
        # the GraphDef's node type is graph_io's business (TF's protobuf on branch h-formats)
        assert len(sess.graph_def.node) == 3


def test_list_devices():
    with tf.Session() as sess:
        devices = sess.list_devices()
    assert devices[0].name == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert devices[0].device_type == "CPU" and devices[0].memory_limit_bytes > 0
    assert all(d.device_type in ("CPU", "GPU") for d in devices)


def test_list_devices_of_a_gpu_session():
    with tf.Session(config=tf.ConfigProto(backend="gpu_emulated")) as sess:
        devices = sess.list_devices()
    assert [d.device_type for d in devices] == ["CPU", "GPU"]
    assert devices[1].name == "/job:localhost/replica:0/task:0/device:GPU:0"


# ------------------------------------------------------------------------------ MNIST
def _write_idx(path, array, magic, compress):
    header = np.array([magic] + list(array.shape), dtype=">u4").tobytes()
    data = header + array.astype(np.uint8).tobytes()
    with (gzip.open if compress else open)(path, "wb") as f:
        f.write(data)


def _write_mnist(folder, n_train, n_test, compress=True, rng=np.random.default_rng(0)):
    arrays = {"train_images": rng.integers(0, 256, (n_train, 28, 28)),
              "train_labels": rng.integers(0, 10, n_train),
              "test_images": rng.integers(0, 256, (n_test, 28, 28)),
              "test_labels": rng.integers(0, 10, n_test)}
    for key, name in input_data.FILES.items():
        magic = 2051 if key.endswith("images") else 2049
        _write_idx(os.path.join(folder, name + (".gz" if compress else "")), arrays[key],
                   magic, compress)
    return arrays


@pytest.mark.parametrize("compress", [True, False])
def test_read_data_sets_reads_idx_files(tmp_path, compress):
    arrays = _write_mnist(str(tmp_path), 12, 5, compress)
    mnist = input_data.read_data_sets(str(tmp_path), one_hot=True, validation_size=4)
    assert (mnist.train.num_examples, mnist.validation.num_examples,
            mnist.test.num_examples) == (8, 4, 5)
    assert mnist.train.images.shape == (8, 784) and mnist.train.images.dtype == np.float32
    np.testing.assert_allclose(mnist.validation.images,
                               arrays["train_images"][:4].reshape(4, 784) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(mnist.test.labels.argmax(1), arrays["test_labels"])
    assert mnist.test.labels.shape == (5, 10) and mnist.test.labels.sum() == 5
    raw = tf.examples.tutorials.mnist.input_data.read_data_sets(
        str(tmp_path), dtype=tf.uint8, reshape=False, validation_size=0)
    np.testing.assert_array_equal(raw.train.images[..., 0], arrays["train_images"])
    np.testing.assert_array_equal(raw.train.labels, arrays["train_labels"])


def test_next_batch_covers_each_epoch_once(tmp_path):
    _write_mnist(str(tmp_path), 10, 2)
    train = input_data.read_data_sets(str(tmp_path), validation_size=0, seed=1).train
    # labels as ids: each image's first pixel identifies it
    ids = lambda images: list(np.round(images[:, 0] * 255).astype(int))  # noqa: E731
    all_ids = sorted(ids(train.images))
    first = [ids(train.next_batch(4)[0]) for _ in range(2)]
    last, _ = train.next_batch(4)  # 2 left in the epoch, 2 from the next one
    assert sorted(first[0] + first[1] + ids(last)[:2]) == all_ids
    assert train.epochs_completed == 1
    unshuffled = input_data.read_data_sets(str(tmp_path), validation_size=0).train
    images = unshuffled.images.copy()
    b1, _ = unshuffled.next_batch(6, shuffle=False)
    b2, _ = unshuffled.next_batch(6, shuffle=False)
    np.testing.assert_array_equal(np.concatenate([b1, b2]), images[list(range(10)) + [0, 1]])


def test_read_data_sets_never_downloads(tmp_path):
    with pytest.raises(tf.errors.NotFoundError, match="never downloads.*train-images-idx3"):
        input_data.read_data_sets(str(tmp_path / "MNIST_data"), one_hot=True)


def test_read_data_sets_rejects_bad_files(tmp_path):
    _write_mnist(str(tmp_path), 3, 2)
    _write_idx(str(tmp_path / "t10k-labels-idx1-ubyte.gz"), np.zeros(2), 1234, True)
    with pytest.raises(ValueError, match="Invalid magic number 1234 in MNIST label file"):
        input_data.read_data_sets(str(tmp_path), validation_size=0)
    _write_mnist(str(tmp_path), 3, 2)
    with pytest.raises(ValueError, match="Validation size should be between 0 and 3"):
        input_data.read_data_sets(str(tmp_path), validation_size=4)
