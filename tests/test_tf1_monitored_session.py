"""tf.train.Coordinator, MonitoredSession / MonitoredTrainingSession and the basic hooks,
as TF1 documents them."""
import logging as py_logging
import os
import threading
import time

import numpy as np
import pytest

import graphc as tf


# ------------------------------------------------------------------------ Coordinator
def test_coordinator_stops_threads_and_reraises_the_first_error():
    coord = tf.train.Coordinator()
    ran = []

    def worker(i):
        with coord.stop_on_exception():
            while not coord.should_stop():
                ran.append(i)
                if i == 1 and len(ran) > 3:
                    raise ValueError("worker 1 failed")
                time.sleep(0.001)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    with pytest.raises(ValueError, match="worker 1 failed"):
        coord.join(threads, stop_grace_period_secs=10)
    assert coord.should_stop() and coord.joined and not any(t.is_alive() for t in threads)


def test_coordinator_clean_stop_and_stragglers():
    coord = tf.train.Coordinator()
    coord.request_stop(tf.errors.OutOfRangeError(None, None, "end of input"))  # clean
    assert coord.should_stop() and coord.wait_for_stop(0)
    coord.join([])
    coord.clear_stop()
    assert not coord.should_stop()
    release = threading.Event()
    slow = threading.Thread(target=release.wait, name="slow_thread")
    slow.start()
    coord.register_thread(slow)
    coord.request_stop()
    with pytest.raises(RuntimeError, match="slow_thread"):
        coord.join(stop_grace_period_secs=0.05)
    release.set()
    slow.join()


# ------------------------------------------------------------------ MonitoredSession
def _model():
    step = tf.train.get_or_create_global_step()
    w = tf.Variable(1.0, name="w")
    loss = tf.square(w - 3.0)
    train = tf.train.GradientDescentOptimizer(0.25).minimize(loss, global_step=step)
    return step, w, loss, train


class _Recorder(tf.train.SessionRunHook):
    def __init__(self, tensor):
        self.tensor, self.calls, self.seen = tensor, [], []

    def begin(self):
        self.calls.append("begin")

    def after_create_session(self, session, coord):
        self.calls.append("after_create_session")
        assert isinstance(coord, tf.train.Coordinator)

    def before_run(self, run_context):
        self.calls.append("before_run")
        return tf.train.SessionRunArgs({"value": self.tensor})

    def after_run(self, run_context, run_values):
        self.calls.append("after_run")
        self.seen.append(run_values.results["value"])
        if len(self.seen) == 3:
            run_context.request_stop()

    def end(self, session):
        self.calls.append("end")


def test_hooks_are_called_in_order_and_can_stop():
    step, w, loss, train = _model()
    hook = _Recorder(loss)
    with tf.train.MonitoredSession(hooks=[hook]) as sess:
        assert tf.get_default_graph().finalized
        results = []
        while not sess.should_stop():
            results.append(sess.run([train, w])[1])
        with pytest.raises(RuntimeError, match="should_stop"):
            sess.run(train)
    # w: 1 -> 2 -> 2.5 -> 2.75 (gradient 2(w-3), rate 0.25); the hook saw the loss before
    np.testing.assert_allclose(results, [2.0, 2.5, 2.75])
    np.testing.assert_allclose(hook.seen, [4.0, 1.0, 0.25])
    assert hook.calls == ["begin", "after_create_session"] + \
        ["before_run", "after_run"] * 3 + ["end"]


def test_out_of_range_ends_the_block_quietly_and_other_errors_skip_end():
    _model()
    hook = _Recorder(tf.constant(1.0))
    with tf.train.MonitoredSession(hooks=[hook]):
        raise tf.errors.OutOfRangeError(None, None, "input exhausted")
    assert hook.calls[-1] == "end"
    tf.reset_default_graph()
    _model()
    hook = _Recorder(tf.constant(1.0))
    with pytest.raises(KeyError):
        with tf.train.MonitoredSession(hooks=[hook]):
            raise KeyError("boom")
    assert "end" not in hook.calls


def test_monitored_training_session_checkpoints_resume_and_stop_at_step(tmp_path):
    ckpt = str(tmp_path / "train")
    step, w, loss, train = _model()
    tf.summary.scalar("loss", loss)
    with tf.train.MonitoredTrainingSession(
            checkpoint_dir=ckpt, save_checkpoint_steps=2, save_summaries_steps=1,
            hooks=[tf.train.StopAtStepHook(last_step=5)]) as sess:
        runs = 0
        while not sess.should_stop():
            sess.run(train)
            runs += 1
    assert runs == 5
    assert tf.train.latest_checkpoint(ckpt).endswith("model.ckpt-5")
    saved = sorted(f for f in os.listdir(ckpt) if f.startswith("model.ckpt-") and
                   f.endswith(".meta"))
    assert saved == ["model.ckpt-0.meta", "model.ckpt-2.meta", "model.ckpt-4.meta",
                     "model.ckpt-5.meta"]
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(ckpt))
    # a new training session restores step and w, then runs num_steps more
    tf.reset_default_graph()
    step, w, loss, train = _model()
    with tf.train.MonitoredTrainingSession(
            checkpoint_dir=ckpt, hooks=[tf.train.StopAtStepHook(num_steps=2)]) as sess:
        assert sess.run(step) == 5
        w5 = sess.run(w)
        while not sess.should_stop():
            sess.run(train)
    # the checkpoint end() saved holds where training stopped
    assert tf.train.latest_checkpoint(ckpt).endswith("model.ckpt-7")
    tf.reset_default_graph()
    step, w, loss, train = _model()
    with tf.Session() as plain:
        tf.train.Saver().restore(plain, tf.train.latest_checkpoint(ckpt))
        final_step, final_w = plain.run([step, w])
    assert final_step == 7
    expected = w5
    for _ in range(2):
        expected -= 0.25 * 2 * (expected - 3.0)
    np.testing.assert_allclose(final_w, expected, rtol=1e-6)


def test_stop_at_step_needs_a_global_step():
    tf.Variable(1.0)
    with pytest.raises(RuntimeError, match="Global step should be created"):
        tf.train.MonitoredSession(hooks=[tf.train.StopAtStepHook(last_step=1)])
    with pytest.raises(ValueError, match="One of num_steps or last_step"):
        tf.train.StopAtStepHook()


def test_logging_tensor_hook_and_nan_hook(caplog):
    step, w, loss, train = _model()
    logger = py_logging.getLogger("tensorflow")
    old = logger.level
    logger.setLevel(py_logging.INFO)
    try:
        hook = tf.train.LoggingTensorHook({"loss": loss, "step": step}, every_n_iter=2)
        with caplog.at_level(py_logging.INFO, logger="tensorflow"):
            with tf.train.SingularMonitoredSession(hooks=[hook]) as sess:
                for _ in range(4):
                    sess.run(train)
    finally:
        logger.setLevel(old)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loss")]
    # runs 1 and 3 log (every 2nd from the first); the step read alongside the train op may
    # be before or after its increment (as in TF1), the loss is the one the run computed
    assert [line.split(", step = ")[0] for line in lines] == ["loss = 4.0", "loss = 0.25"]
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [])
    tf.train.get_or_create_global_step()
    with tf.train.MonitoredSession(hooks=[tf.train.NanTensorHook(x)]) as sess:
        sess.run(x, {x: 1.0})
        with pytest.raises(tf.train.NanLossDuringTrainingError):
            sess.run(x, {x: np.nan})


def test_feeds_from_hooks_and_conflicts():
    x = tf.placeholder(tf.float32, [])
    y = x * 2.0
    tf.train.get_or_create_global_step()
    with tf.train.MonitoredSession(hooks=[tf.train.FeedFnHook(lambda: {x: 4.0})]) as sess:
        assert sess.run(y) == 8.0
        with pytest.raises(RuntimeError, match="fed by a SessionRunHook and user"):
            sess.run(y, {x: 1.0})
