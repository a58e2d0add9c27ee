"""tf.examples.tutorials.mnist.input_data: TF1's MNIST reader, on files already present.

read_data_sets(train_dir) reads the four standard MNIST files (idx format, gzipped or not)
from train_dir and returns Datasets(train, validation, test) of DataSet objects with TF1's
fields and next_batch. Unlike TF1 it never downloads: a missing file is a NotFoundError
that says which files to put where.

Shuffling draws from a NumPy generator of the DataSet's own (seeded by `seed`), where TF1
reseeded NumPy's global generator: the batches are the same kind of permutation, not the
same numbers as TF1's for a given seed.
"""
import collections
import gzip
import os

import numpy as np

from graphc import dtypes, errors

FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
         "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}
_IMAGES_MAGIC, _LABELS_MAGIC = 2051, 2049
NUM_CLASSES = 10

Datasets = collections.namedtuple("Datasets", ["train", "validation", "test"])


def _find(train_dir, name):
    for candidate in (name + ".gz", name):
        path = os.path.join(train_dir, candidate)
        if os.path.exists(path):
            return path
    wanted = ", ".join(n + "[.gz]" for n in FILES.values())
    raise errors.NotFoundError(
        None, None, f"read_data_sets: {name}.gz (or {name}) is not in {train_dir!r}. graphc "
                    f"never downloads: put the four MNIST files ({wanted}) in that folder "
                    "(they are published at http://yann.lecun.com/exdb/mnist/).")


def _read_idx(path, magic, ndim):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    header = 4 * (1 + ndim)
    if len(data) < header:
        raise ValueError(f"MNIST file {path} is truncated ({len(data)} bytes)")
    fields = np.frombuffer(data[:header], dtype=">u4")
    if fields[0] != magic:
        kind = "image" if magic == _IMAGES_MAGIC else "label"
        raise ValueError(f"Invalid magic number {fields[0]} in MNIST {kind} file: {path}")
    dims = [int(d) for d in fields[1:]]
    count = int(np.prod(dims))
    if len(data) - header != count:
        raise ValueError(f"MNIST file {path}: the header gives {dims} ({count} bytes of "
                         f"data) but the file has {len(data) - header}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def extract_images(path):
    """[N, rows, cols, 1] uint8 images of an idx3 file."""
    return _read_idx(path, _IMAGES_MAGIC, 3)[..., np.newaxis]


def extract_labels(path, one_hot=False, num_classes=NUM_CLASSES):
    """[N] uint8 labels of an idx1 file, or [N, num_classes] float64 one-hot rows."""
    labels = _read_idx(path, _LABELS_MAGIC, 1)
    return dense_to_one_hot(labels, num_classes) if one_hot else labels


def dense_to_one_hot(labels_dense, num_classes):
    out = np.zeros((labels_dense.shape[0], num_classes))
    out[np.arange(labels_dense.shape[0]), labels_dense] = 1
    return out


class DataSet:
    """Images and labels of one split, and TF1's next_batch over epochs."""

    def __init__(self, images, labels, fake_data=False, one_hot=False, dtype=dtypes.float32,
                 reshape=True, seed=None):
        dtype = dtypes.as_dtype(dtype)
        if dtype not in (dtypes.uint8, dtypes.float32):
            raise TypeError(f"Invalid image dtype {dtype!r}, expected uint8 or float32")
        self._rng = np.random.RandomState(seed)
        self.fake_data, self.one_hot = fake_data, one_hot
        if fake_data:
            self._num_examples = 10000
        else:
            if images.shape[0] != labels.shape[0]:
                raise ValueError(f"images.shape: {images.shape} labels.shape: {labels.shape}")
            self._num_examples = images.shape[0]
            if reshape:
                if images.shape[3] != 1:
                    raise ValueError(f"reshape=True needs one channel, got {images.shape}")
                images = images.reshape(images.shape[0], images.shape[1] * images.shape[2])
            if dtype == dtypes.float32:
                images = images.astype(np.float32) * np.float32(1.0 / 255.0)
        self._images, self._labels = images, labels
        self._epochs_completed = 0
        self._index_in_epoch = 0

    images = property(lambda self: self._images)
    labels = property(lambda self: self._labels)
    num_examples = property(lambda self: self._num_examples)
    epochs_completed = property(lambda self: self._epochs_completed)

    def _fake_batch(self, batch_size):
        image = [1] * 784
        label = [1] + [0] * 9 if self.one_hot else 0
        return [image] * batch_size, [label] * batch_size

    def _shuffle(self):
        perm = self._rng.permutation(self._num_examples)
        self._images, self._labels = self._images[perm], self._labels[perm]

    def next_batch(self, batch_size, fake_data=False, shuffle=True):
        """The next batch_size examples; an epoch's last batch is completed from the next
        epoch (reshuffled when shuffle), as TF1's."""
        if fake_data or self.fake_data:
            return self._fake_batch(batch_size)
        start = self._index_in_epoch
        if self._epochs_completed == 0 and start == 0 and shuffle:
            self._shuffle()
        if start + batch_size <= self._num_examples:
            self._index_in_epoch = start + batch_size
            return (self._images[start:self._index_in_epoch],
                    self._labels[start:self._index_in_epoch])
        self._epochs_completed += 1
        rest_images, rest_labels = self._images[start:], self._labels[start:]
        if shuffle:
            self._shuffle()
        self._index_in_epoch = batch_size - len(rest_images)
        end = self._index_in_epoch
        return (np.concatenate([rest_images, self._images[:end]], axis=0),
                np.concatenate([rest_labels, self._labels[:end]], axis=0))


def read_data_sets(train_dir, fake_data=False, one_hot=False, dtype=dtypes.float32,
                   reshape=True, validation_size=5000, seed=None, source_url=None):
    """Datasets(train, validation, test) from the MNIST files in train_dir; validation is
    the first validation_size training examples. source_url is accepted and unused."""
    if fake_data:
        def fake():
            return DataSet([], [], fake_data=True, one_hot=one_hot, dtype=dtype, seed=seed)
        return Datasets(train=fake(), validation=fake(), test=fake())
    paths = {key: _find(train_dir, name) for key, name in FILES.items()}
    train_images = extract_images(paths["train_images"])
    train_labels = extract_labels(paths["train_labels"], one_hot=one_hot)
    test_images = extract_images(paths["test_images"])
    test_labels = extract_labels(paths["test_labels"], one_hot=one_hot)
    if not 0 <= validation_size <= len(train_images):
        raise ValueError(f"Validation size should be between 0 and {len(train_images)}. "
                         f"Received: {validation_size}.")
    options = dict(dtype=dtype, reshape=reshape, seed=seed)
    return Datasets(
        train=DataSet(train_images[validation_size:], train_labels[validation_size:],
                      **options),
        validation=DataSet(train_images[:validation_size], train_labels[:validation_size],
                           **options),
        test=DataSet(test_images, test_labels, **options))


def load_mnist(train_dir="MNIST-data"):
    return read_data_sets(train_dir)
