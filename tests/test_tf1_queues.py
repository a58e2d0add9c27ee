"""TF1 queues fed by threads: FIFOQueue, RandomShuffleQueue, QueueRunner,
start_queue_runners, with Coordinator and MonitoredSession, as TF1 documents them."""
import threading

import numpy as np
import pytest

import graphc as tf


def test_fifo_queue_order_close_and_end_of_input():
    q = tf.FIFOQueue(10, [tf.float32, tf.int64], shapes=[[2], []])
    enq = q.enqueue_many([np.arange(10, dtype=np.float32).reshape(5, 2), np.arange(5)])
    one = q.enqueue([[7.0, 8.0], 9])
    x, i = q.dequeue()
    xs, ids = q.dequeue_many(2)
    rest, rest_ids = q.dequeue_up_to(10)
    assert xs.shape.as_list() == [2, 2] and rest.shape.as_list() == [None, 2]
    close = q.close()
    with tf.Session() as sess:
        sess.run(enq)
        sess.run(one)
        assert sess.run(q.size()) == 6
        xv, iv = sess.run([x, i])
        np.testing.assert_array_equal(xv, [0, 1])
        assert iv == 0 and xv.dtype == np.float32 and iv.dtype == np.int64
        np.testing.assert_array_equal(sess.run(ids), [1, 2])
        sess.run(close)
        assert sess.run(q.is_closed())
        with pytest.raises(tf.errors.CancelledError, match="closed"):
            sess.run(one)
        r, rid = sess.run([rest, rest_ids])  # fewer than asked: the queue is closed
        np.testing.assert_array_equal(rid, [3, 4, 9])
        np.testing.assert_array_equal(r[-1], [7.0, 8.0])
        with pytest.raises(tf.errors.OutOfRangeError, match="closed and has insufficient"):
            sess.run(x)
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(rest)


def test_queue_checks_what_is_enqueued():
    q = tf.FIFOQueue(3, tf.float32, shapes=[[2]])
    bad = q.enqueue(tf.placeholder(tf.float32, [None]))
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="shape"):
            sess.run(bad, {bad.inputs[1]: [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="specified shapes"):
        tf.FIFOQueue(3, tf.float32).dequeue_many(2)


def test_queue_runner_feeds_a_training_loop_until_the_input_ends():
    source = iter(range(23))

    def next_value():
        value = next(source)  # StopIteration: py_func's OutOfRangeError, the end of input
        return np.float32(value)

    q = tf.FIFOQueue(4, tf.float32, shapes=[[]])
    value = tf.py_func(next_value, [], tf.float32)
    value.set_shape([])
    tf.train.add_queue_runner(tf.train.QueueRunner(q, [q.enqueue(value)]))
    batch = q.dequeue_up_to(5) * 2.0
    seen = []
    with tf.Session() as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        try:
            while not coord.should_stop():
                seen.extend(sess.run(batch).tolist())
        except tf.errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)
    assert seen == [2.0 * v for v in range(23)]


def test_coordinator_gets_a_runner_error():
    def broken():
        raise ValueError("bad record")

    q = tf.FIFOQueue(2, tf.float32, shapes=[[]])
    value = tf.py_func(broken, [], tf.float32)
    value.set_shape([])
    tf.train.add_queue_runner(tf.train.QueueRunner(q, [q.enqueue(value)]))
    with tf.Session() as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        with pytest.raises(tf.errors.InvalidArgumentError, match="bad record"):
            coord.join(threads, stop_grace_period_secs=10)


def test_random_shuffle_queue_is_a_permutation():
    q = tf.RandomShuffleQueue(50, min_after_dequeue=5, dtypes=[tf.int32], shapes=[[]], seed=3)
    enq = q.enqueue_many([np.arange(40, dtype=np.int32)])
    out = q.dequeue_many(7)
    rest = q.dequeue_up_to(100)
    with tf.Session() as sess:
        sess.run(enq)
        first = sess.run(out)
        assert sess.run(q.size()) == 33
        sess.run(q.close())
        values = list(first) + list(sess.run(rest))
    assert sorted(values) == list(range(40)) and values != list(range(40))


def test_dequeue_waits_until_another_thread_enqueues_and_times_out():
    q = tf.FIFOQueue(2, tf.float32, shapes=[[]])
    enq = q.enqueue(5.0)
    out = q.dequeue()
    with tf.Session() as sess:
        timer = threading.Timer(0.2, lambda: sess.run(enq))
        timer.start()
        assert sess.run(out) == 5.0  # waited for the other thread's enqueue
        timer.join()
    config = tf.ConfigProto(operation_timeout_in_ms=100)
    with pytest.warns(RuntimeWarning, match="operation_timeout_in_ms"):
        sess = tf.Session(config=config)
    with pytest.raises(tf.errors.DeadlineExceededError, match="Timed out waiting to dequeue"):
        sess.run(out)
    sess.close()


def test_monitored_session_runs_the_queue_runners():
    q = tf.FIFOQueue(3, tf.float32, shapes=[[]])
    counter = tf.Variable(0.0)
    tf.train.add_queue_runner(tf.train.QueueRunner(q, [q.enqueue(tf.assign_add(counter, 1.0))]))
    tf.train.get_or_create_global_step()
    x = q.dequeue()
    with tf.train.MonitoredSession() as sess:
        got = [sess.run(x) for _ in range(5)]
    assert got == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_train_batch_and_shuffle_batch():
    images = tf.constant(np.arange(12, dtype=np.float32).reshape(6, 2))
    labels = tf.constant(np.arange(6, dtype=np.int32))
    image, label = tf.train.slice_input_producer([images, labels], shuffle=False)
    xb, yb = tf.train.batch([image, label], batch_size=4, capacity=8)
    assert xb.shape.as_list() == [4, 2] and yb.shape.as_list() == [4]
    # a second producer: two pipelines reading one producer would share its elements
    image2, label2 = tf.train.slice_input_producer([images, labels], shuffle=False)
    shuffled = tf.train.shuffle_batch({"x": image2, "y": label2}, batch_size=6, capacity=20,
                                      min_after_dequeue=6, seed=1)
    with tf.train.MonitoredSession() as sess:
        xs, ys = sess.run([xb, yb])
        xs2, ys2 = sess.run([xb, yb])
        mix = sess.run(shuffled)
    # the producer repeats the rows in order; the batches see them in that order
    np.testing.assert_array_equal(np.concatenate([ys, ys2]), [0, 1, 2, 3, 4, 5, 0, 1])
    np.testing.assert_array_equal(xs, np.arange(8, dtype=np.float32).reshape(4, 2))
    # each shuffled element is a (row, label) pair the producer made
    np.testing.assert_array_equal(mix["x"], np.stack([mix["y"] * 2, mix["y"] * 2 + 1], 1))


def test_slice_input_producer_shuffles_each_pass():
    labels = tf.constant(np.arange(8, dtype=np.int32))
    (label,) = tf.train.slice_input_producer([labels], shuffle=True, seed=5)
    with tf.train.MonitoredSession() as sess:
        first = [int(sess.run(label)) for _ in range(8)]
        second = [int(sess.run(label)) for _ in range(8)]
    assert sorted(first) == list(range(8)) and sorted(second) == list(range(8))
    assert first != list(range(8)) or second != list(range(8))


def test_count_up_to_and_num_epochs():
    v = tf.Variable(0, dtype=tf.int64)
    count = v.count_up_to(2)
    with tf.Session() as sess:
        sess.run(v.initializer)
        assert [sess.run(count), sess.run(count)] == [0, 1]
        with pytest.raises(tf.errors.OutOfRangeError, match="Reached limit of 2"):
            sess.run(count)
    with pytest.raises(TypeError, match="int32 or int64 variable"):
        tf.count_up_to(tf.Variable(0.0), 3)
    labels = tf.constant(np.arange(5, dtype=np.int32))
    (label,) = tf.train.slice_input_producer([labels], num_epochs=2, shuffle=False)
    (batch,) = tf.train.batch([label], batch_size=3, allow_smaller_final_batch=True)
    assert [v.name.endswith("limit_epochs/epochs:0") for v in tf.local_variables()] == [True]
    got = []
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        try:
            while not coord.should_stop():
                got.append(sess.run(batch).tolist())
        except tf.errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)
    # two epochs of 0..4 in order, the last batch smaller
    assert got == [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4]]


def test_queue_shapes_of_ints_are_one_shape_and_the_empty_list_is_a_scalar():
    # TF1's _as_shape_list: a list of ints/None is the shape of a single component
    scalar = tf.FIFOQueue(4, tf.float32, shapes=[])
    vector = tf.FIFOQueue(4, [tf.int32], shapes=[3])
    pair = tf.FIFOQueue(4, [tf.float32, tf.int32], shapes=[[], [2]])
    assert scalar.dequeue().shape.as_list() == []
    assert vector.dequeue().shape.as_list() == [3]
    assert [t.shape.as_list() for t in pair.dequeue()] == [[], [2]]
    with pytest.raises(ValueError, match="same length as dtypes"):
        tf.FIFOQueue(4, [tf.float32, tf.int32], shapes=[])
    with tf.Session() as sess:
        sess.run(scalar.enqueue(2.5))
        assert sess.run(scalar.dequeue()) == 2.5


def test_padding_fifo_queue_pads_batches_to_their_largest_element():
    queue = tf.PaddingFIFOQueue(10, [tf.float32, tf.int64], shapes=[[None], [None, 2]])
    x = tf.placeholder(tf.float32, [None])
    y = tf.placeholder(tf.int64, [None, 2])
    enqueue = queue.enqueue([x, y])
    batch = queue.dequeue_many(2)
    rest = queue.dequeue_up_to(5)
    assert [t.shape.as_list() for t in batch] == [[2, None], [2, None, 2]]
    rows = [(np.array([1.5, 2.5], np.float32), np.arange(2).reshape(1, 2)),
            (np.array([3.0], np.float32), np.arange(6).reshape(3, 2)),
            (np.array([], np.float32), np.zeros((0, 2), np.int64)),
            (np.array([4.0, 5.0, 6.0], np.float32), np.ones((1, 2), np.int64))]
    with tf.Session() as sess:
        for a, b in rows:
            sess.run(enqueue, {x: a, y: b})
        first_a, first_b = sess.run(batch)
        sess.run(queue.close())
        last_a, last_b = sess.run(rest)
    np.testing.assert_array_equal(first_a, [[1.5, 2.5], [3.0, 0.0]])
    expected_b = np.zeros((2, 3, 2), np.int64)
    expected_b[0, :1] = np.arange(2).reshape(1, 2)
    expected_b[1] = np.arange(6).reshape(3, 2)
    np.testing.assert_array_equal(first_b, expected_b)
    np.testing.assert_array_equal(last_a, [[0.0, 0.0, 0.0], [4.0, 5.0, 6.0]])
    np.testing.assert_array_equal(last_b, [[[0, 0]], [[1, 1]]])
    with pytest.raises(ValueError, match="shapes must be provided for all components"):
        tf.PaddingFIFOQueue(10, [tf.float32, tf.int32], shapes=[[None]])


def test_input_producer_queues_the_rows_each_epoch_in_a_new_order():
    x = np.arange(12.0).reshape(6, 2)
    queue = tf.train.input_producer(x, num_epochs=2, shuffle=True, seed=3)
    ordered = tf.train.input_producer(x[:, 0], shuffle=False, capacity=4)
    row, first = queue.dequeue(), ordered.dequeue()
    assert row.shape.as_list() == [2]
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        rows = []
        with pytest.raises(tf.errors.OutOfRangeError):
            while True:
                rows.append(sess.run(row))
        firsts = [float(sess.run(first)) for _ in range(8)]
        coord.request_stop()
        coord.join(threads)
    epochs = [np.array(rows[:6]), np.array(rows[6:])]
    assert len(rows) == 12
    for epoch in epochs:  # each pass: every row once
        np.testing.assert_array_equal(epoch[np.argsort(epoch[:, 0])], x)
    assert firsts == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 0.0, 2.0]
    with pytest.raises(ValueError, match="fully defined shape or `element_shape`"):
        tf.train.input_producer(tf.placeholder(tf.float32, [None, None]))


def test_batch_with_dynamic_pad_pads_each_batch_to_its_longest_element():
    lengths = tf.placeholder(tf.int32, [])
    row = tf.cast(tf.range(lengths) + 1, tf.float32)  # [1, 2, ..., length]
    batched = tf.train.batch([row, lengths], batch_size=2, dynamic_pad=True, capacity=8)
    assert batched[0].shape.as_list() == [2, None]
    enqueue = tf.get_collection(tf.GraphKeys.QUEUE_RUNNERS)[0].enqueue_ops[0]
    with tf.Session() as sess:
        for n in (3, 1, 0, 2):
            sess.run(enqueue, {lengths: n})
        first, second = sess.run(batched), sess.run(batched)
    np.testing.assert_array_equal(first[0], [[1, 2, 3], [1, 0, 0]])
    np.testing.assert_array_equal(second[0], [[0, 0], [1, 2]])
    assert first[1].tolist() == [3, 1] and second[1].tolist() == [0, 2]
    with pytest.raises(ValueError, match="All shapes must be fully defined"):
        tf.train.batch([row], batch_size=2)


def test_batch_join_batches_the_elements_of_every_source():
    sources = [tf.train.input_producer(np.arange(k * 10, k * 10 + 4, dtype=np.int64),
                                       num_epochs=1, shuffle=False) for k in range(3)]
    tensors_list = [{"value": q.dequeue(), "source": tf.constant(k, tf.int64)}
                    for k, q in enumerate(sources)]
    batch = tf.train.batch_join(tensors_list, batch_size=5, allow_smaller_final_batch=True)
    assert sorted(batch) == ["source", "value"]
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        values, origins = [], []
        with pytest.raises(tf.errors.OutOfRangeError):
            while True:
                out = sess.run(batch)
                values += out["value"].tolist()
                origins += out["source"].tolist()
        coord.request_stop()
        coord.join(threads)
    # every element once, each with the source it came from; each source in its order
    assert sorted(values) == sorted(k * 10 + i for k in range(3) for i in range(4))
    assert all(v // 10 == s for v, s in zip(values, origins))
    for k in range(3):
        assert [v for v in values if v // 10 == k] == [k * 10 + i for i in range(4)]
    with pytest.raises(ValueError, match="same structure and dtypes"):
        tf.train.batch_join([[tf.constant(1)], [tf.constant(1.0)]], batch_size=2)
