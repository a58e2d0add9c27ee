"""tf.data pipelines, checked element by element against NumPy."""
import numpy as np
import pytest

import graphc as tf

Dataset = tf.data.Dataset


def drain(next_element, sess=None, feed_dict=None, limit=10000):
    """All elements an iterator gives until OutOfRangeError."""
    sess = sess or tf.Session()
    out = []
    for _ in range(limit):
        try:
            out.append(sess.run(next_element, feed_dict))
        except tf.errors.OutOfRangeError:
            return out
    raise AssertionError("the iterator did not end")


def one_shot(ds):
    return tf.data.make_one_shot_iterator(ds).get_next()


# ---------------------------------------------------------------------------- sources
@pytest.mark.parametrize("n", [1, 7, 31])
def test_from_tensor_slices_rows(n):
    x = np.random.RandomState(n).randn(n, 3)
    el = one_shot(Dataset.from_tensor_slices(x))
    assert el.dtype == tf.float64 and el.get_shape().as_list() == [3]
    got = drain(el)
    assert len(got) == n
    for row, g in zip(x, got):
        np.testing.assert_array_equal(g, row)


def test_python_lists_get_tf_dtypes():
    ds = Dataset.from_tensor_slices(([1.0, 2.0], [1, 2]))
    assert ds.output_types == (tf.float32, tf.int32)
    assert drain(one_shot(ds)) == [(1.0, 1), (2.0, 2)]


def test_tuple_and_dict_structures():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    y = np.arange(4, dtype=np.int32)
    ds = Dataset.from_tensor_slices({"image": x, "label": y})
    assert ds.output_types == {"image": tf.float32, "label": tf.int32}
    assert ds.output_shapes["image"].as_list() == [3]
    el = one_shot(ds)
    assert set(el) == {"image", "label"}
    got = drain(el)
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g["image"], x[i])
        assert g["label"] == y[i]
    nested = Dataset.from_tensor_slices((x, (y, y * 2)))
    a, (b, c) = one_shot(nested)
    assert drain([a, b, c])[3][2] == 6


def test_slices_need_same_first_dimension():
    with pytest.raises(ValueError, match="Dimensions 3 and 4"):
        Dataset.from_tensor_slices((np.zeros(3), np.zeros(4)))
    with pytest.raises(ValueError, match="rank >= 1"):
        Dataset.from_tensor_slices(np.float32(1))


def test_from_tensors_is_one_element():
    x = np.arange(6).reshape(2, 3)
    el = one_shot(Dataset.from_tensors(x))
    assert el.get_shape().as_list() == [2, 3]
    got = drain(el)
    assert len(got) == 1
    np.testing.assert_array_equal(got[0], x)


@pytest.mark.parametrize("args", [(5,), (2, 10, 3), (10, 2, -3), (0,)])
def test_range(args):
    el = one_shot(Dataset.range(*args))
    assert el.dtype == tf.int64 and el.get_shape().as_list() == []
    assert drain(el) == list(range(*args))


def test_from_generator():
    def gen():
        for i in range(4):
            yield np.full([i + 1], i), i * 0.5

    ds = Dataset.from_generator(gen, (tf.int32, tf.float32), ([None], []))
    assert ds.output_shapes[0].as_list() == [None]
    got = drain(one_shot(ds))
    assert [len(g[0]) for g in got] == [1, 2, 3, 4]
    assert [g[1] for g in got] == [0.0, 0.5, 1.0, 1.5]


# ---------------------------------------------------------------------------- transforms
def test_map_traces_a_graph_function():
    x = np.arange(10, dtype=np.float32)
    traced = []

    def fn(v):
        traced.append(v)
        return tf.square(v) * 2.0 + 1.0

    el = one_shot(Dataset.from_tensor_slices(x).map(fn))
    assert len(traced) == 1 and isinstance(traced[0], tf.Tensor)  # traced once, symbolically
    np.testing.assert_allclose(drain(el), x ** 2 * 2 + 1)


def test_map_unpacks_tuples_and_changes_structure():
    images = np.arange(24, dtype=np.uint8).reshape(4, 2, 3)
    labels = np.array([0, 2, 1, 2], dtype=np.int64)

    def preprocess(image, label):
        image = tf.cast(image, tf.float32) / 255.0
        return {"flat": tf.reshape(image, [-1]), "onehot": tf.one_hot(label, 3),
                "sum": tf.reduce_sum(image)}

    ds = Dataset.from_tensor_slices((images, labels)).map(preprocess, num_parallel_calls=4)
    assert ds.output_shapes["flat"].as_list() == [6]
    assert ds.output_types["onehot"] == tf.float32
    got = drain(one_shot(ds))
    for i, g in enumerate(got):
        ref = images[i].astype(np.float32) / 255.0
        np.testing.assert_allclose(g["flat"], ref.reshape(-1), rtol=1e-6)
        np.testing.assert_array_equal(g["onehot"], np.eye(3)[labels[i]])
        np.testing.assert_allclose(g["sum"], ref.sum(), rtol=1e-6)


def test_map_with_seeded_random_op_is_reproducible():
    def noisy(v):
        return v + tf.random_uniform([], seed=3)

    ds = Dataset.range(5).map(lambda v: tf.cast(v, tf.float32)).map(noisy)
    a, b = drain(one_shot(ds)), drain(one_shot(ds))
    assert a == b
    noise = np.array(a) - np.arange(5)
    assert ((noise >= 0) & (noise < 1)).all() and len(set(noise.tolist())) == 5


def test_map_cannot_capture_outer_tensors():
    c = tf.constant(2.0)
    with pytest.raises(ValueError, match="capture"):
        Dataset.range(3).map(lambda v: tf.cast(v, tf.float32) * c)


def test_filter():
    el = one_shot(Dataset.range(20).filter(lambda v: tf.equal(v % 3, 0)))
    assert drain(el) == list(range(0, 20, 3))
    with pytest.raises(ValueError, match="scalar boolean"):
        Dataset.range(3).filter(lambda v: v)


@pytest.mark.parametrize("n,size", [(7, 3), (1, 4), (9, 3), (31, 8)])
@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize("through_map", [False, True])  # gathered rows vs stacked elements
def test_batch(n, size, drop, through_map):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    ds = Dataset.from_tensor_slices(x)
    if through_map:
        ds = ds.map(lambda v: v * 1.0)
    el = one_shot(ds.batch(size, drop_remainder=drop))
    assert el.get_shape().as_list() == [size if drop else None, 2]
    got = drain(el)
    stop = n - n % size if drop else n
    expected = [x[i:min(i + size, stop)] for i in range(0, stop, size)]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def test_batch_of_different_shapes_is_an_error():
    ds = Dataset.range(1, 4).map(lambda n: tf.range(n)).batch(2)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Cannot batch tensors with different shapes in component 0"):
        tf.Session().run(one_shot(ds))
    with pytest.raises(ValueError, match="greater than zero"):
        Dataset.range(3).batch(0)


def _shuffled(buffer_size, seed, n=50, epochs=1, reshuffle=None):
    ds = Dataset.range(n).shuffle(buffer_size, seed=seed, reshuffle_each_iteration=reshuffle)
    return [int(v) for v in drain(one_shot(ds.repeat(epochs)))]


@pytest.mark.parametrize("buffer_size", [1, 7, 50, 1000])
def test_shuffle_is_a_seeded_permutation(buffer_size):
    a = _shuffled(buffer_size, seed=42)
    assert sorted(a) == list(range(50))
    assert a == _shuffled(buffer_size, seed=42)  # the same seed, the same order
    if buffer_size == 1:
        assert a == list(range(50))
    else:
        assert a != list(range(50)) and a != _shuffled(buffer_size, seed=43)
    # an element can only leave the buffer after it entered it
    assert all(v < k + buffer_size for k, v in enumerate(a))


def test_shuffle_reshuffles_each_epoch_unless_told_not_to():
    a = _shuffled(50, seed=1, n=20, epochs=2)
    assert sorted(a[:20]) == sorted(a[20:]) == list(range(20)) and a[:20] != a[20:]
    b = _shuffled(50, seed=1, n=20, epochs=2, reshuffle=False)
    assert b[:20] == b[20:]


def test_shuffle_of_slices_and_of_elements_agree():
    """Rows shuffled as indices (the fast path) come in the order elements would."""
    x = np.arange(40, dtype=np.float32)
    fast = drain(one_shot(Dataset.from_tensor_slices(x).shuffle(9, seed=5)))
    slow = drain(one_shot(Dataset.from_tensor_slices(x).map(lambda v: v).shuffle(9, seed=5)))
    assert fast == slow


def test_graph_seed_makes_shuffle_reproducible():
    def order():
        tf.reset_default_graph()
        tf.set_random_seed(7)
        return drain(one_shot(Dataset.range(30).shuffle(30)))
    assert order() == order()


@pytest.mark.parametrize("count,expected", [(1, 3), (3, 9), (0, 0)])
def test_repeat(count, expected):
    got = drain(one_shot(Dataset.range(3).repeat(count)))
    assert got == [i % 3 for i in range(expected)]


def test_repeat_forever_take_skip():
    el = one_shot(Dataset.range(3).repeat().skip(2).take(7))
    assert drain(el) == [2, 0, 1, 2, 0, 1, 2]
    x = np.arange(2000)
    rows = drain(one_shot(Dataset.from_tensor_slices(x).repeat(2).skip(1500).take(1000)))
    np.testing.assert_array_equal(rows, np.concatenate([x, x])[1500:2500])
    assert drain(one_shot(Dataset.range(5).take(-1))) == [0, 1, 2, 3, 4]
    assert drain(one_shot(Dataset.range(5).skip(-1))) == []
    assert drain(one_shot(Dataset.range(0).repeat())) == []


def test_zip_concatenate_prefetch():
    a = Dataset.range(5)
    b = Dataset.from_tensor_slices(np.arange(3, dtype=np.float32) * 10)
    el = one_shot(Dataset.zip((a, b)).prefetch(2))
    assert drain(el) == [(0, 0.0), (1, 10.0), (2, 20.0)]
    cat = one_shot(Dataset.range(2).concatenate(Dataset.range(5, 7)))
    assert drain(cat) == [0, 1, 5, 6]
    with pytest.raises(TypeError):
        Dataset.range(2).concatenate(b)


def test_pipeline_against_numpy():
    """shuffle off, map, batch, repeat: the classic input pipeline, element by element."""
    rng = np.random.RandomState(0)
    x = rng.randn(23, 4).astype(np.float32)
    y = rng.randint(0, 3, 23).astype(np.int32)
    ds = (Dataset.from_tensor_slices((x, y))
          .map(lambda f, l: (tf.nn.relu(f) * 2.0, tf.one_hot(l, 3)))
          .batch(5).repeat(2).prefetch(1))
    got = drain(one_shot(ds))
    fx, fy = np.maximum(x, 0) * 2.0, np.eye(3, dtype=np.float32)[y]
    starts = [s for _ in range(2) for s in range(0, 23, 5)]
    assert len(got) == len(starts)
    for (gx, gy), s in zip(got, starts):
        np.testing.assert_allclose(gx, fx[s:s + 5], rtol=1e-6)
        np.testing.assert_array_equal(gy, fy[s:s + 5])


# ---------------------------------------------------------------------------- iterators
def test_initializable_iterator_with_placeholders():
    features = tf.placeholder(tf.float32, [None, 2])
    batch_size = tf.placeholder(tf.int64, [])
    ds = Dataset.from_tensor_slices(features).batch(batch_size)
    it = ds.make_initializable_iterator()
    el = it.get_next()
    sess = tf.Session()
    with pytest.raises(tf.errors.FailedPreconditionError, match="not been initialized"):
        sess.run(el)
    data = np.arange(10, dtype=np.float32).reshape(5, 2)
    sess.run(it.initializer, feed_dict={features: data, batch_size: 2})
    got = drain(el, sess)
    assert [len(g) for g in got] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate(got), data)
    sess.run(it.initializer, feed_dict={features: data[:3], batch_size: 3})  # restarts
    np.testing.assert_array_equal(sess.run(el), data[:3])
    with pytest.raises(tf.errors.OutOfRangeError):
        sess.run(el)


def test_one_shot_iterator_refuses_placeholders():
    p = tf.placeholder(tf.float32, [None])
    with pytest.raises(ValueError, match="Cannot capture a placeholder"):
        Dataset.from_tensor_slices(p).make_one_shot_iterator()
    with pytest.raises(ValueError, match="does not have an initializer"):
        Dataset.range(2).make_one_shot_iterator().initializer  # noqa: B018
    # a constant tensor is a known value
    it = Dataset.from_tensor_slices(tf.constant([1, 2])).make_one_shot_iterator()
    assert drain(it.get_next()) == [1, 2]


def test_get_next_ops_share_position_sessions_do_not():
    it = Dataset.range(6).make_one_shot_iterator()
    a, b = it.get_next(), it.get_next()
    s1, s2 = tf.Session(), tf.Session()
    assert s1.run(a) == 0 and s1.run(b) == 1 and s1.run([a, a]) == [2, 2]
    assert s2.run(a) == 0


def test_reinitializable_iterator_from_structure():
    train = Dataset.range(10).map(lambda v: tf.cast(v, tf.float32)).batch(4)
    val = Dataset.from_tensor_slices(np.array([100.0, 200.0], np.float32)).batch(4)
    it = tf.data.Iterator.from_structure(train.output_types, train.output_shapes)
    el = it.get_next()
    train_init, val_init = it.make_initializer(train), it.make_initializer(val)
    sess = tf.Session()
    sess.run(train_init)
    np.testing.assert_array_equal(sess.run(el), [0, 1, 2, 3])
    sess.run(val_init)
    assert drain(el, sess)[0].tolist() == [100.0, 200.0]
    with pytest.raises(TypeError):
        it.make_initializer(Dataset.range(3))


def test_iterator_element_in_graph_and_training_loop():
    """Linear regression over a Dataset until OutOfRangeError, as the tutorials do it;
    the weights match plain NumPy SGD over the same batches."""
    rng = np.random.RandomState(1)
    x = rng.randn(40, 3).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3).astype(np.float32)[:, None]
    ds = Dataset.from_tensor_slices((x, y)).batch(8).repeat(3)
    features, labels = tf.data.make_one_shot_iterator(ds).get_next()
    W = tf.Variable(tf.zeros([3, 1]))
    b = tf.Variable(tf.zeros([1]))
    loss = tf.reduce_mean(tf.square(tf.matmul(features, W) + b - labels))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    steps = 0
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        while True:
            try:
                sess.run(train_op)
            except tf.errors.OutOfRangeError:
                break
            steps += 1
        w_out, b_out = sess.run([W, b])
    w_ref, b_ref = np.zeros([3, 1], np.float32), np.zeros([1], np.float32)
    for _ in range(3):
        for s in range(0, 40, 8):
            xb, yb = x[s:s + 8], y[s:s + 8]
            err = xb @ w_ref + b_ref - yb
            w_ref = w_ref - 0.1 * (2 * xb.T @ err / len(xb))
            b_ref = b_ref - 0.1 * (2 * err.mean(0))
    assert steps == 15
    np.testing.assert_allclose(w_out, w_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b_out, b_ref, rtol=1e-4, atol=1e-5)


def test_output_structure_helpers():
    ds = Dataset.from_tensor_slices((np.zeros([3, 2], np.float32), np.zeros(3, np.int32)))
    it = ds.make_one_shot_iterator()
    assert tf.data.get_output_types(it) == (tf.float32, tf.int32)
    assert tf.data.get_output_shapes(ds)[0].as_list() == [2]
    assert tf.data.get_output_classes(ds) == (tf.Tensor, tf.Tensor)
    assert tf.compat.v1.data.Dataset is Dataset
    assert tf.data.experimental.AUTOTUNE == -1


def test_feedable_iterator_switches_between_iterators_by_handle():
    """TF1's from_string_handle: one get_next pulls from whichever iterator the fed handle
    names, each keeping its own position; a bad handle or mismatched types is an
    InvalidArgumentError naming the op."""
    train = Dataset.from_tensor_slices(np.arange(10, dtype=np.float32)).repeat()
    val = Dataset.from_tensor_slices(np.arange(100, 103, dtype=np.float32))
    handle = tf.placeholder(tf.string, [])
    it = tf.data.Iterator.from_string_handle(handle, tf.data.get_output_types(train),
                                             tf.data.get_output_shapes(train))
    doubled = it.get_next() * 2.0  # compiled after the host-side pull
    train_it = train.make_one_shot_iterator()
    val_it = val.make_initializable_iterator()
    ints = Dataset.from_tensor_slices(np.arange(3, dtype=np.int32)).make_one_shot_iterator()
    with tf.Session() as sess:
        train_h, val_h, ints_h = sess.run([train_it.string_handle(), val_it.string_handle(),
                                           ints.string_handle()])
        assert isinstance(train_h, bytes) and train_h != val_h
        assert [sess.run(doubled, {handle: train_h}) for _ in range(3)] == [0, 2, 4]
        sess.run(val_it.initializer)
        assert [sess.run(doubled, {handle: val_h}) for _ in range(3)] == [200, 202, 204]
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(doubled, {handle: val_h})
        assert sess.run(doubled, {handle: train_h}) == 6  # its position was kept
        sess.run(val_it.initializer)  # a validation pass again, from the start
        assert sess.run(doubled, {handle: val_h}) == 200
        with pytest.raises(tf.errors.InvalidArgumentError, match="not the string_handle"):
            sess.run(doubled, {handle: b"no such iterator"})
        with pytest.raises(tf.errors.InvalidArgumentError, match="int32.*float32"):
            sess.run(doubled, {handle: ints_h})


def test_from_string_handle_takes_a_scalar_string():
    with pytest.raises(ValueError, match="scalar string handle"):
        tf.data.Iterator.from_string_handle(tf.placeholder(tf.string, [2]), tf.float32)
