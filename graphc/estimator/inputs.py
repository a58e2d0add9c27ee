"""tf.estimator.inputs: input_fns over in-memory NumPy arrays."""
import collections

import numpy as np

from graphc.data.dataset_ops import Dataset

__all__ = ["numpy_input_fn"]


def numpy_input_fn(x, y=None, batch_size=128, num_epochs=1, shuffle=None,
                   queue_capacity=1000, num_threads=1):
    """An input_fn returning (features, labels) batches of the rows of x (an array or a
    dict of arrays) and y (an array, a dict of arrays, or None: then only features).

    num_epochs=None repeats forever, every batch full; otherwise the last batch of the
    last epoch may be smaller and then the input ends (OutOfRangeError). shuffle must be
    given as a bool, as in TF1. TF1 fills a queue of queue_capacity rows from
    num_threads threads; here the rows go through tf.data (a full permutation of the rows
    each epoch when shuffling), so those two only tune speed and are not used."""
    if not isinstance(shuffle, bool):
        raise ValueError(f"numpy_input_fn: shuffle must be provided and explicitly set as "
                         f"boolean (it is recommended to set it as True for training); got "
                         f"{shuffle!r}")
    if batch_size is None or int(batch_size) <= 0:
        raise ValueError(f"numpy_input_fn: batch_size must be a positive integer, got "
                         f"{batch_size!r}")
    if num_epochs is not None and int(num_epochs) <= 0:
        raise ValueError(f"numpy_input_fn: num_epochs must be None or a positive integer, "
                         f"got {num_epochs!r}")

    def input_fn():
        features = _columns(x, "x")
        labels = None if y is None else _columns(y, "y")
        if isinstance(x, dict) and isinstance(y, dict):
            common = sorted(set(x) & set(y))
            if common:
                raise ValueError(f"numpy_input_fn: {len(common)} duplicate keys are found "
                                 f"in both x and y: {common}")
        _check_lengths(features, labels)
        rows = len(next(iter(features.values())))
        dataset = Dataset.from_tensor_slices((features, labels) if labels is not None
                                             else features)
        if shuffle:
            dataset = dataset.shuffle(max(rows, 1))
        dataset = dataset.repeat(num_epochs).batch(batch_size,
                                                   drop_remainder=num_epochs is None)
        batch = dataset.make_one_shot_iterator().get_next()
        features_batch, labels_batch = batch if labels is not None else (batch, None)
        result = _unwrapped(features_batch, x)
        if labels is None:
            return result
        return result, _unwrapped(labels_batch, y)

    return input_fn


_DIRECT = "__direct_np_input__"  # the one column of an x or y given as an array


def _columns(value, arg):
    if isinstance(value, dict):
        if not value:
            raise ValueError(f"numpy_input_fn: {arg} cannot be an empty dict"
                             + (", use None instead." if arg == "y" else "."))
        columns = collections.OrderedDict(sorted(value.items()))
    else:
        columns = collections.OrderedDict([(_DIRECT, value)])
    for key, column in columns.items():
        array = np.asarray(column)
        if array.ndim == 0:
            name = arg if key == _DIRECT else f"{arg}[{key!r}]"
            raise ValueError(f"numpy_input_fn: {name} must be an array of rows (rank >= 1), "
                             f"got a scalar")
        columns[key] = array
    return columns


def _check_lengths(features, labels):
    lengths = {f"x[{k!r}]" if k != _DIRECT else "x": len(v) for k, v in features.items()}
    for k, v in (labels or {}).items():
        lengths[f"y[{k!r}]" if k != _DIRECT else "y"] = len(v)
    if len(set(lengths.values())) > 1:
        raise ValueError(f"numpy_input_fn: length of tensors in x and y is mismatched. All "
                         f"elements in x and y must have the same length.\nArray lengths: "
                         f"{lengths}")


def _unwrapped(batch, given):
    return batch[_DIRECT] if not isinstance(given, dict) else dict(batch)
