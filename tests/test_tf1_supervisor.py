"""tf.train.Supervisor and tf.train.LooperThread, as TF1 documents them."""
import glob
import os
import threading
import time

import numpy as np
import pytest

import graphc as tf


def _model():
    step = tf.train.get_or_create_global_step()
    w = tf.Variable(1.0, name="w")
    loss = tf.square(w - 3.0)
    tf.summary.scalar("loss", loss)
    train = tf.train.GradientDescentOptimizer(0.25).minimize(loss, global_step=step)
    return step, w, loss, train


def _numpy_w(steps, w=1.0):
    for _ in range(steps):  # w -= 0.25 * d/dw (w - 3)^2
        w -= 0.25 * 2.0 * (w - 3.0)
    return w


def test_managed_session_initializes_trains_and_restores_from_logdir(tmp_path):
    step, w, _, train = _model()
    sv = tf.train.Supervisor(logdir=str(tmp_path), save_model_secs=0)
    assert tf.get_default_graph().finalized
    with sv.managed_session() as sess:
        for _ in range(3):
            sess.run(train)
        assert sess.run(w) == pytest.approx(_numpy_w(3))
        sv.saver.save(sess, str(tmp_path / "model_epoch"), global_step=step)
    assert sv.should_stop()
    # the scripts' second run: a new graph, the same logdir: the checkpoint is restored
    tf.reset_default_graph()
    step, w, _, train = _model()
    sv = tf.train.Supervisor(logdir=str(tmp_path), save_model_secs=0)
    with sv.managed_session() as sess:
        assert sess.run(step) == 3 and sess.run(w) == pytest.approx(_numpy_w(3))
        sess.run(train)
        assert sess.run(w) == pytest.approx(_numpy_w(4))
    assert os.path.exists(tmp_path / "graph.pbtxt")


def test_supervisor_of_a_graph_that_is_not_the_default(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        _, w, _, train = _model()
    sv = tf.train.Supervisor(graph=graph, logdir=str(tmp_path), save_model_secs=0)
    with sv.managed_session() as sess:
        sess.run(train)
        assert sess.run(w) == pytest.approx(_numpy_w(1))
    assert graph.finalized and not tf.get_default_graph().finalized


def test_checkpoint_thread_saves_at_start_and_summaries_are_written(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    step, _, loss, train = _model()
    sv = tf.train.Supervisor(logdir=str(tmp_path), save_model_secs=3600,
                             save_summaries_secs=3600)
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})

    def summaries_written():
        sv.summary_writer.flush()
        acc.Reload()
        return "loss" in acc.Tags()["scalars"]

    with sv.managed_session() as sess:
        # the timer threads run once when they start: a checkpoint at step 0, the summary
        # op; both run beside this thread, so the step waits for them (a step first would
        # make them record step 1)
        deadline = time.time() + 30
        while not (glob.glob(str(tmp_path / "model.ckpt-0.*")) and summaries_written()) \
                and time.time() < deadline:
            time.sleep(0.05)
        sess.run(train)
    assert glob.glob(str(tmp_path / "model.ckpt-0.*"))
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-0")
    acc.Reload()
    (first,) = acc.Scalars("loss")
    assert first.step == 0 and first.value == pytest.approx(4.0)


def test_out_of_range_ends_the_block_quietly_other_errors_are_raised(tmp_path):
    _, w, _, train = _model()
    sv = tf.train.Supervisor(logdir=None)
    with sv.managed_session() as sess:
        sess.run(train)
        raise tf.errors.OutOfRangeError(None, None, "end of input")
    assert sv.should_stop()
    with pytest.raises(ValueError, match="user error"):
        with sv.managed_session() as sess:
            raise ValueError("user error")


def test_init_fn_init_feed_dict_and_none_arguments():
    value = tf.placeholder(tf.float32, [])
    w = tf.Variable(value, name="w")
    v = tf.Variable(5.0, name="v")
    seen = []
    sv = tf.train.Supervisor(init_feed_dict={value: 7.0},
                             init_fn=lambda sess: seen.append(sess.run(v)),
                             summary_op=None, saver=None)
    assert sv.saver is None and sv.summary_op is None and sv.global_step is None
    with sv.managed_session() as sess:
        assert sess.run(w) == 7.0
    assert seen == [5.0]


def test_ready_check_names_the_uninitialized_variable():
    tf.Variable(1.0, name="never_set")
    sv = tf.train.Supervisor(init_op=tf.no_op())
    with pytest.raises(RuntimeError, match="never_set"):
        sv.prepare_or_wait_for_session()


def test_queue_runners_start_with_the_managed_session():
    queue = tf.FIFOQueue(10, tf.float32, shapes=[])
    counter = tf.Variable(0.0, name="counter")
    enqueue = queue.enqueue(tf.assign_add(counter, 1.0))
    tf.train.add_queue_runner(tf.train.QueueRunner(queue, [enqueue]))
    first = queue.dequeue()
    sv = tf.train.Supervisor(logdir=None)
    with sv.managed_session() as sess:
        values = [sess.run(first) for _ in range(4)]
    assert values == [1.0, 2.0, 3.0, 4.0]


def test_non_chief_is_refused():
    tf.Variable(1.0)
    with pytest.raises(NotImplementedError, match="is_chief=False"):
        tf.train.Supervisor(is_chief=False)


def test_looper_thread_calls_target_until_the_coordinator_stops():
    coord = tf.train.Coordinator()
    calls = []
    enough = threading.Event()

    def target(tag):
        calls.append(tag)
        if len(calls) == 3:
            enough.set()

    looper = tf.train.LooperThread.loop(coord, 0.001, target, args=("x",))
    assert enough.wait(30)
    coord.request_stop()
    coord.join([looper])
    assert calls[:3] == ["x", "x", "x"] and not looper.is_alive()

    def failing():
        raise KeyError("looper failed")

    tf.train.LooperThread.loop(coord_2 := tf.train.Coordinator(), None, failing)
    with pytest.raises(KeyError, match="looper failed"):
        coord_2.join(stop_grace_period_secs=10)
    np.testing.assert_equal(coord_2.should_stop(), True)


def test_summary_computed_and_loop(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    step, _, loss, train = _model()
    computed = tf.summary.scalar("by_hand", loss, collections=[])
    sv = tf.train.Supervisor(logdir=str(tmp_path), save_model_secs=0, save_summaries_secs=0)
    ticks = threading.Event()
    with sv.managed_session() as sess:
        sess.run(train)
        sv.summary_computed(sess, sess.run(computed))  # at the current global step, 1
        sv.loop(0.001, ticks.set)
        assert ticks.wait(30)
    assert not any(t.is_alive() for t in threading.enumerate()
                   if isinstance(t, tf.train.LooperThread))
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    (event,) = acc.Scalars("by_hand")
    assert event.step == 1 and event.value == pytest.approx((_numpy_w(1) - 3.0) ** 2)


def test_managed_session_initializes_lookup_tables():
    """TF1's Supervisor runs tables_initializer with the local variables, so a table
    lookup works in a managed session without the user initializing it."""
    table = tf.lookup.index_table_from_tensor(tf.constant(["a", "b", "c"]), default_value=-1)
    ids = table.lookup(tf.constant(["c", "x", "a"]))
    tf.Variable(0.0, name="w")  # the default Saver needs a variable, as TF1's does
    sv = tf.train.Supervisor(logdir=None)
    with sv.managed_session() as sess:
        np.testing.assert_array_equal(sess.run(ids), [2, -1, 0])
