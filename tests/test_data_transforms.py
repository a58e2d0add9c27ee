"""Dataset.padded_batch, flat_map, interleave and cache, against the element sequences
TF1's documentation gives (and NumPy padding written here)."""
import numpy as np
import pytest

import graphc as tf


def _all(dataset):
    """Every element of a one-shot iterator over `dataset`, until OutOfRangeError."""
    element = dataset.make_one_shot_iterator().get_next()
    out = []
    with tf.Session() as sess:
        try:
            while True:
                out.append(sess.run(element))
        except tf.errors.OutOfRangeError:
            return out


def _pad(rows, length, value, dtype):
    out = np.full((len(rows), length), value, dtype)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


# ----------------------------------------------------------------------- padded_batch
@pytest.mark.parametrize("dtype", [tf.int64, tf.float32, tf.float64])
def test_padded_batch_pads_each_batch_to_its_longest_element(dtype):
    # TF1's docstring example: range(1, 5).map(lambda x: fill([x], x)).padded_batch(2, [None])
    ds = tf.data.Dataset.range(1, 6).map(lambda x: tf.cast(tf.fill([x], x), dtype))
    batched = ds.padded_batch(2, padded_shapes=[None])
    assert batched.output_shapes.as_list() == [None, None]
    rows = [[k] * k for k in range(1, 6)]
    got = _all(batched)
    expected = [_pad(rows[0:2], 2, 0, dtype.np), _pad(rows[2:4], 4, 0, dtype.np),
                _pad(rows[4:5], 5, 0, dtype.np)]
    assert len(got) == 3
    for g, e in zip(got, expected):
        assert g.dtype == dtype.np
        np.testing.assert_array_equal(g, e)


def test_padded_batch_to_fixed_shapes_with_padding_values_and_drop_remainder():
    ds = tf.data.Dataset.range(1, 8).map(lambda x: ({"ids": tf.fill([x], x)}, x * 10))
    batched = ds.padded_batch(3, padded_shapes=({"ids": [7]}, []),
                              padding_values=({"ids": tf.constant(-1, tf.int64)},
                                              np.int64(0)),
                              drop_remainder=True)
    shapes = batched.output_shapes
    assert shapes[0]["ids"].as_list() == [3, 7] and shapes[1].as_list() == [3]
    got = _all(batched)
    assert len(got) == 2  # 7 elements: two full batches of 3, the last one dropped
    rows = [[k] * k for k in range(1, 8)]
    for b, (features, labels) in enumerate(got):
        np.testing.assert_array_equal(features["ids"], _pad(rows[3 * b:3 * b + 3], 7, -1,
                                                            np.int64))
        np.testing.assert_array_equal(labels, [10 * k for k in range(3 * b + 1, 3 * b + 4)])


def test_padded_batch_of_matrices_pads_every_unknown_dimension():
    shapes = [(2, 1), (1, 3), (0, 2)]
    gen = (np.ones(s, np.float32) * (i + 1) for i, s in enumerate(shapes))
    ds = tf.data.Dataset.from_generator(lambda: gen, tf.float32, [None, None])
    (batch,) = _all(ds.padded_batch(3, padded_shapes=[None, -1], padding_values=0.5))
    expected = np.full((3, 2, 3), 0.5, np.float32)
    for i, s in enumerate(shapes):
        expected[i, :s[0], :s[1]] = i + 1
    np.testing.assert_array_equal(batch, expected)


def test_padded_batch_refuses_shapes_smaller_than_the_elements():
    with pytest.raises(ValueError, match="not compatible with the corresponding input"):
        tf.data.Dataset.from_tensors(np.zeros(4)).padded_batch(2, padded_shapes=[3])
    with pytest.raises(ValueError, match="not compatible with the corresponding input"):
        tf.data.Dataset.from_tensors(np.zeros(4)).padded_batch(2, padded_shapes=[None, 2])
    with pytest.raises(ValueError, match="must have the structure of the dataset"):
        tf.data.Dataset.from_tensors((np.zeros(4), 1)).padded_batch(2, padded_shapes=[None])
    with pytest.raises(TypeError, match="must be a scalar of the component's dtype"):
        tf.data.Dataset.from_tensors(np.zeros(4)).padded_batch(
            2, [None], padding_values=tf.constant(1, tf.int32))
    ds = tf.data.Dataset.range(1, 5).map(lambda x: tf.fill([x], x))
    with pytest.raises(tf.errors.InvalidArgumentError, match="pad to a smaller size"):
        _all(ds.padded_batch(2, padded_shapes=[2]))


# --------------------------------------------------------------------------- flat_map
def test_flat_map_flattens_each_elements_dataset_in_order():
    rows = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], np.int32)
    ds = tf.data.Dataset.from_tensor_slices(rows).flat_map(
        lambda row: tf.data.Dataset.from_tensor_slices(row * 2))
    assert [int(v) for v in _all(ds)] == list(rows.ravel() * 2)
    ranges = tf.data.Dataset.range(4).flat_map(lambda n: tf.data.Dataset.range(n))
    assert [int(v) for v in _all(ranges)] == [0, 0, 1, 0, 1, 2]  # range(0) is empty


def test_flat_map_of_tuple_elements_and_its_errors():
    ds = tf.data.Dataset.from_tensor_slices((np.array([1, 2]), np.array([10., 20.])))
    pairs = ds.flat_map(lambda n, v: tf.data.Dataset.from_tensors((n, v)).repeat(n))
    assert [(int(a), float(b)) for a, b in _all(pairs)] == [(1, 10.0), (2, 20.0), (2, 20.0)]
    with pytest.raises(TypeError, match="must return a `Dataset` object"):
        ds.flat_map(lambda n, v: n)
    outer = tf.constant(3, tf.int64)
    with pytest.raises(ValueError, match="cannot capture tensors"):
        tf.data.Dataset.range(2).flat_map(lambda n: tf.data.Dataset.range(outer))


# ------------------------------------------------------------------------- interleave
def test_interleave_takes_blocks_in_turn_as_tf1s_docstring():
    # TF1's docstring: range(1, 6).interleave(lambda x: from_tensors(x).repeat(6),
    # cycle_length=2, block_length=4)
    ds = tf.data.Dataset.range(1, 6).interleave(
        lambda x: tf.data.Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
    assert [int(v) for v in _all(ds)] == [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3,
                                          4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5]


def _interleave_reference(lengths, cycle, block):
    """TF1's InterleaveDataset: element i opens an inner sequence [(i, 0), (i, 1), ...]."""
    inputs = iter(range(len(lengths)))
    open_, index, taken, out, done = [None] * cycle, 0, 0, [], False
    while not done or any(o is not None for o in open_):
        if open_[index] is not None:
            if open_[index]:
                out.append(open_[index].pop(0))
                taken += 1
                if taken == block:
                    index, taken = (index + 1) % cycle, 0
                continue
            open_[index] = None
            index, taken = (index + 1) % cycle, 0
        elif not done:
            i = next(inputs, None)
            if i is None:
                done = True
            else:
                open_[index] = [(i, k) for k in range(lengths[i])]
        else:
            index, taken = (index + 1) % cycle, 0
    return out


@pytest.mark.parametrize("cycle, block", [(1, 1), (3, 1), (2, 3), (5, 2)])
def test_interleave_of_uneven_inner_datasets(cycle, block):
    lengths = np.array([3, 0, 5, 1, 2, 4], np.int64)
    ds = tf.data.Dataset.from_tensor_slices((np.arange(6, dtype=np.int64), lengths))
    inter = ds.interleave(lambda i, n: tf.data.Dataset.zip(
        (tf.data.Dataset.from_tensors(i).repeat(n), tf.data.Dataset.range(n))),
        cycle_length=cycle, block_length=block)
    got = [(int(i), int(k)) for i, k in _all(inter)]
    assert got == _interleave_reference(list(lengths), cycle, block)


# ------------------------------------------------------------------------------ cache
def test_cache_replays_the_first_pass_without_running_the_input_again():
    calls = []

    def gen():
        calls.append(1)
        yield from [3, 1, 2]

    ds = tf.data.Dataset.from_generator(gen, tf.int32, []).cache().repeat(3)
    assert [int(v) for v in _all(ds)] == [3, 1, 2] * 3
    assert len(calls) == 1
    # a shuffle before cache: every epoch repeats the first epoch's order
    tf.set_random_seed(5)
    shuffled = tf.data.Dataset.range(20).shuffle(20).cache().repeat(2)
    values = [int(v) for v in _all(shuffled)]
    assert sorted(values[:20]) == list(range(20)) and values[:20] == values[20:]


def test_cache_of_a_partial_pass_is_not_kept():
    calls = []

    def gen():
        calls.append(1)
        yield from range(5)

    # take(2) stops each pass early: the cache never completes, the input runs each time
    ds = tf.data.Dataset.from_generator(gen, tf.int64, []).cache().take(2).repeat(2)
    assert [int(v) for v in _all(ds)] == [0, 1, 0, 1]
    assert len(calls) == 2
    with pytest.raises(NotImplementedError, match="caches in memory only"):
        tf.data.Dataset.range(3).cache("/tmp/some_cache")


# ----------------------------------------------------------------------------- window
def _window_reference(n, size, shift, stride, drop_remainder):
    """TF's window: a window starts at every multiple of shift; it holds the elements
    start, start + stride, ... (at most size of them, those before n)."""
    out = []
    for start in range(0, n, shift):
        rows = list(range(start, min(n, start + (size - 1) * stride + 1), stride))
        if len(rows) == size or not drop_remainder:
            out.append(rows)
    return out


@pytest.mark.parametrize("size, shift, stride, drop", [
    (2, None, 1, False), (3, 2, 1, True), (3, 1, 2, True), (3, 1, 2, False),
    (2, 5, 1, False), (4, 3, 2, False), (1, 1, 1, False), (8, 2, 1, False)])
def test_window_then_flat_map_batch_matches_tfs_windows(size, shift, stride, drop):
    n = 7
    ds = tf.data.Dataset.range(n).window(size, shift, stride, drop)
    got = [w.tolist() for w in _all(ds.flat_map(lambda w: w.batch(size)))]
    assert got == _window_reference(n, size, shift or size, stride, drop)


def test_windows_of_structured_elements_and_what_they_refuse():
    ds = tf.data.Dataset.from_tensor_slices({"a": np.arange(5), "b": np.arange(5) * 10.0})
    windows = ds.window(2)
    pairs = windows.flat_map(lambda w: tf.data.Dataset.zip((w["a"].batch(2),
                                                            w["b"].batch(2))))
    assert [(a.tolist(), b.tolist()) for a, b in _all(pairs)] == [
        ([0, 1], [0.0, 10.0]), ([2, 3], [20.0, 30.0]), ([4], [40.0])]
    # whole windows through interleave, and shuffle/take keep them windows
    inter = windows.take(2).interleave(lambda w: w["a"], cycle_length=2)
    assert [int(v) for v in _all(inter)] == [0, 2, 1, 3]
    with pytest.raises(TypeError, match="elements are windows"):
        windows.make_one_shot_iterator()
    with pytest.raises(TypeError, match="elements are windows"):
        windows.batch(2)
    with pytest.raises(TypeError, match="elements are windows"):
        windows.map(lambda w: w)
    with pytest.raises(ValueError, match="size must be greater than zero"):
        ds.window(0)


# ------------------------------------------------- tf.data.experimental / contrib.data
@pytest.mark.parametrize("module", ["experimental", "contrib"])
def test_map_and_batch_and_parallel_interleave_are_their_sequential_forms(module):
    ops = tf.data.experimental if module == "experimental" else tf.contrib.data
    ds = tf.data.Dataset.range(7).apply(ops.map_and_batch(lambda x: x * x, 3))
    assert [b.tolist() for b in _all(ds)] == [[0, 1, 4], [9, 16, 25], [36]]
    dropped = tf.data.Dataset.range(7).apply(ops.map_and_batch(lambda x: x, 3,
                                                               drop_remainder=True))
    assert dropped.output_shapes.as_list() == [3] and len(_all(dropped)) == 2
    inter = tf.data.Dataset.range(1, 4).apply(ops.parallel_interleave(
        lambda x: tf.data.Dataset.from_tensors(x).repeat(x), cycle_length=2, sloppy=True))
    assert [int(v) for v in _all(inter)] == [1, 2, 2, 3, 3, 3]
    with pytest.raises(ValueError, match="mutually exclusive"):
        ops.map_and_batch(lambda x: x, 2, num_parallel_batches=1, num_parallel_calls=1)


def _group_by_window_reference(keys, sizes):
    """TF1's GroupByWindowDataset over elements 0..n-1 with these keys: a group flushes
    when it reaches its size; at the end the rest, by increasing key."""
    groups, out = {}, []
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
        if len(groups[key]) == sizes(key):
            out.append((key, groups.pop(key)))
    return out + sorted(groups.items())


@pytest.mark.parametrize("module", ["experimental", "contrib"])
def test_group_by_window_reduces_each_full_group_then_the_rest_by_key(module):
    ops = tf.data.experimental if module == "experimental" else tf.contrib.data
    ds = tf.data.Dataset.range(10).apply(ops.group_by_window(
        lambda x: x % 3, lambda key, window: window.batch(4), window_size=2))
    expected = _group_by_window_reference([i % 3 for i in range(10)], lambda k: 2)
    assert [b.tolist() for b in _all(ds)] == [rows for _, rows in expected]
    # window_size_func by key, tuple elements, and reduce_func using its key
    keys = [3, 1, 3, 2, 1, 3, 3, 2, 1]
    pairs = tf.data.Dataset.from_tensor_slices((np.array(keys, np.int64),
                                                np.arange(9, dtype=np.float64)))
    grouped = pairs.apply(ops.group_by_window(
        lambda k, v: k,
        lambda key, window: tf.data.Dataset.zip(
            (tf.data.Dataset.from_tensors(key * 100), window.map(lambda k, v: v).batch(9))),
        window_size_func=lambda key: key))
    expected = _group_by_window_reference(keys, lambda k: k)
    got = [(int(k), v.tolist()) for k, v in _all(grouped)]
    assert got == [(key * 100, [float(i) for i in rows]) for key, rows in expected]


def test_group_by_window_checks_its_arguments():
    ops = tf.data.experimental
    with pytest.raises(ValueError, match="either the `window_size` argument or"):
        ops.group_by_window(lambda x: x, lambda k, w: w)
    with pytest.raises(ValueError, match="must return a single tf.int64 scalar"):
        tf.data.Dataset.range(3).apply(ops.group_by_window(
            lambda x: tf.cast(x, tf.int32), lambda k, w: w, window_size=2))
    with pytest.raises(TypeError, match="must return a `Dataset` object"):
        tf.data.Dataset.range(3).apply(ops.group_by_window(lambda x: x, lambda k, w: k,
                                                           window_size=2))
    zero = tf.data.Dataset.range(3).apply(ops.group_by_window(lambda x: x, lambda k, w: w,
                                                              window_size=0))
    with pytest.raises(tf.errors.InvalidArgumentError, match="window size must be greater"):
        _all(zero)
