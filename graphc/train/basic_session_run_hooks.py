"""TF1's basic SessionRunHooks: StopAtStepHook, CheckpointSaverHook, SummarySaverHook,
StepCounterHook, LoggingTensorHook, NanTensorHook, FinalOpsHook, FeedFnHook, and the
SecondOrStepTimer that paces them."""
import os
import time

import numpy as np

from graphc import logging
from graphc.framework.graph import GraphKeys, Tensor, get_default_graph
from graphc.train import training_util
from graphc.train.session_run_hook import SessionRunArgs, SessionRunHook

__all__ = ["SecondOrStepTimer", "StopAtStepHook", "CheckpointSaverHook", "SummarySaverHook",
           "StepCounterHook", "LoggingTensorHook", "NanTensorHook", "NanLossDuringTrainingError",
           "FinalOpsHook", "FeedFnHook", "CheckpointSaverListener"]


class NanLossDuringTrainingError(RuntimeError):
    def __str__(self):
        return "NaN loss during training."


class SecondOrStepTimer:
    """Triggers every `every_secs` seconds or every `every_steps` steps (exactly one)."""

    def __init__(self, every_secs=None, every_steps=None):
        if (every_secs is None) == (every_steps is None):
            raise ValueError("exactly one of every_secs and every_steps should be provided.")
        self._every_secs, self._every_steps = every_secs, every_steps
        self.reset()

    def reset(self):
        self._last_triggered_step = None
        self._last_triggered_time = None

    def should_trigger_for_step(self, step):
        if self._last_triggered_step is None:
            return True
        if self._last_triggered_step == step:
            return False
        if self._every_secs is not None:
            return time.time() >= self._last_triggered_time + self._every_secs
        return step >= self._last_triggered_step + self._every_steps

    def update_last_triggered_step(self, step):
        """(seconds, steps) since the last trigger (None, None at the first)."""
        now = time.time()
        if self._last_triggered_time is None:
            elapsed = (None, None)
        else:
            elapsed = (now - self._last_triggered_time, step - self._last_triggered_step)
        self._last_triggered_time, self._last_triggered_step = now, step
        return elapsed

    def last_triggered_step(self):
        return self._last_triggered_step


_writers = {}  # logdir -> the FileWriter the hooks of this process share (TF1's cache)


def _writer_for(logdir):
    if logdir not in _writers:
        from graphc.summary import FileWriter
        _writers[logdir] = FileWriter(logdir, get_default_graph())
    return _writers[logdir]


def _global_step_tensor(hook_name):
    step = training_util.get_global_step()
    if step is None:
        raise RuntimeError(f"Global step should be created to use {hook_name}.")
    return step


class StopAtStepHook(SessionRunHook):
    """Requests a stop once the global step reaches last_step (or start + num_steps)."""

    def __init__(self, num_steps=None, last_step=None):
        if (num_steps is None) == (last_step is None):
            raise ValueError("One of num_steps or last_step must be specified.")
        if num_steps is not None and num_steps < 0:
            raise ValueError("num_steps must be positive.")
        if last_step is not None and last_step < 0:
            raise ValueError("last_step must be positive.")
        self._num_steps, self._last_step = num_steps, last_step

    def begin(self):
        self._global_step_tensor = _global_step_tensor("StopAtStepHook")

    def after_create_session(self, session, coord):
        if self._last_step is None:
            self._last_step = int(session.run(self._global_step_tensor)) + self._num_steps

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step_tensor)

    def after_run(self, run_context, run_values):
        if int(run_values.results) + 1 >= self._last_step:
            # the step the run fetched was read before its train op: read it again
            if int(run_context.session.run(self._global_step_tensor)) >= self._last_step:
                run_context.request_stop()


class CheckpointSaverListener:
    def begin(self):
        pass

    def before_save(self, session, global_step_value):
        pass

    def after_save(self, session, global_step_value):
        pass

    def end(self, session, global_step_value):
        pass


class CheckpointSaverHook(SessionRunHook):
    """Saves a checkpoint when the session starts, every save_secs seconds or save_steps
    steps, and at the end."""

    def __init__(self, checkpoint_dir, save_secs=None, save_steps=None, saver=None,
                 checkpoint_basename="model.ckpt", scaffold=None, listeners=None):
        if saver is not None and scaffold is not None:
            raise ValueError("You cannot provide both saver and scaffold.")
        self._checkpoint_dir = checkpoint_dir
        self._saver, self._scaffold = saver, scaffold
        self._save_path = os.path.join(checkpoint_dir, checkpoint_basename)
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._listeners = list(listeners or [])
        self._steps_per_run = 1

    def begin(self):
        self._global_step_tensor = _global_step_tensor("CheckpointSaverHook")
        for listener in self._listeners:
            listener.begin()

    def after_create_session(self, session, coord):
        os.makedirs(self._checkpoint_dir, exist_ok=True)
        step = int(session.run(self._global_step_tensor))
        self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step_tensor)

    def after_run(self, run_context, run_values):
        stale = int(run_values.results)
        if self._timer.should_trigger_for_step(stale + self._steps_per_run):
            step = int(run_context.session.run(self._global_step_tensor))
            if self._timer.should_trigger_for_step(step):
                self._timer.update_last_triggered_step(step)
                if self._save(run_context.session, step):
                    run_context.request_stop()

    def end(self, session):
        step = int(session.run(self._global_step_tensor))
        if step != self._timer.last_triggered_step():
            self._save(session, step)
        for listener in self._listeners:
            listener.end(session, step)

    def _get_saver(self):
        if self._saver is not None:
            return self._saver
        if self._scaffold is not None:
            return self._scaffold.saver
        savers = get_default_graph().get_collection(GraphKeys.SAVERS)
        if len(savers) != 1:
            raise RuntimeError(f"CheckpointSaverHook needs one Saver in the SAVERS collection "
                               f"(or a saver or scaffold), found {len(savers)}")
        return savers[0]

    def _save(self, session, step):
        """Saves; True when a listener asks to stop."""
        logging.info("Saving checkpoints for %d into %s.", step, self._save_path)
        for listener in self._listeners:
            listener.before_save(session, step)
        self._get_saver().save(session, self._save_path, global_step=step)
        return any(listener.after_save(session, step) for listener in self._listeners)


class SummarySaverHook(SessionRunHook):
    """Writes the summary op's result (default: merge_all) every save_steps or save_secs."""

    def __init__(self, save_steps=None, save_secs=None, output_dir=None, summary_writer=None,
                 scaffold=None, summary_op=None):
        if (scaffold is None) == (summary_op is None):
            raise ValueError("Exactly one of scaffold or summary_op must be provided.")
        self._summary_op, self._scaffold = summary_op, scaffold
        self._output_dir, self._summary_writer = output_dir, summary_writer
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)

    def begin(self):
        if self._summary_writer is None and self._output_dir:
            self._summary_writer = _writer_for(self._output_dir)
        self._global_step_tensor = _global_step_tensor("SummarySaverHook")
        self._next_step = None

    def _ops(self):
        op = self._summary_op if self._summary_op is not None else self._scaffold.summary_op
        return [] if op is None else (list(op) if isinstance(op, (list, tuple)) else [op])

    def before_run(self, run_context):
        self._request = self._next_step is None or self._timer.should_trigger_for_step(
            self._next_step)
        fetches = {"global_step": self._global_step_tensor}
        if self._request and self._ops():
            fetches["summary"] = self._ops()
        return SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        stale = int(run_values.results["global_step"])
        step = stale + 1
        if self._next_step is None or self._request:
            step = int(run_context.session.run(self._global_step_tensor))
        if self._request:
            self._timer.update_last_triggered_step(step)
            if "summary" in run_values.results and self._summary_writer is not None:
                for summary in run_values.results["summary"]:
                    self._summary_writer.add_summary(summary, step)
        self._next_step = step + 1

    def end(self, session=None):
        if self._summary_writer is not None:
            self._summary_writer.flush()


class StepCounterHook(SessionRunHook):
    """Logs (and writes as the summary "global_step/sec") the steps per second."""

    def __init__(self, every_n_steps=100, every_n_secs=None, output_dir=None,
                 summary_writer=None):
        if (every_n_steps is None) == (every_n_secs is None):
            raise ValueError("exactly one of every_n_steps and every_n_secs should be "
                             "provided.")
        self._timer = SecondOrStepTimer(every_steps=every_n_steps, every_secs=every_n_secs)
        self._output_dir, self._summary_writer = output_dir, summary_writer

    def begin(self):
        if self._summary_writer is None and self._output_dir:
            self._summary_writer = _writer_for(self._output_dir)
        self._global_step_tensor = _global_step_tensor("StepCounterHook")

    def before_run(self, run_context):
        return SessionRunArgs(self._global_step_tensor)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        if self._timer.should_trigger_for_step(step):
            secs, steps = self._timer.update_last_triggered_step(step)
            if secs:
                rate = steps / secs
                logging.info("global_step/sec: %g", rate)
                if self._summary_writer is not None:
                    from graphc.summary import Summary
                    self._summary_writer.add_summary(
                        Summary(value=[Summary.Value(tag="global_step/sec",
                                                     simple_value=rate)]), step)


class LoggingTensorHook(SessionRunHook):
    """Logs the tensors (a list or a dict of tag -> tensor) every_n_iter runs or every_n_secs
    seconds (or only at the end), as "tag = value, ..." at INFO."""

    def __init__(self, tensors, every_n_iter=None, every_n_secs=None, at_end=False,
                 formatter=None):
        only_at_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_at_end and (every_n_iter is None) == (every_n_secs is None):
            raise ValueError("either at_end and/or exactly one of every_n_iter and "
                             "every_n_secs must be provided.")
        if every_n_iter is not None and every_n_iter <= 0:
            raise ValueError(f"invalid every_n_iter={every_n_iter}.")
        if not isinstance(tensors, dict):
            self._tag_order = [getattr(t, "name", t) for t in tensors]
            tensors = {tag: t for tag, t in zip(self._tag_order, tensors)}
        else:
            self._tag_order = sorted(tensors)
        self._tensors = tensors
        self._formatter = formatter
        self._log_at_end = at_end
        self._timer = None if only_at_end else SecondOrStepTimer(every_secs=every_n_secs,
                                                                 every_steps=every_n_iter)

    def begin(self):
        graph = get_default_graph()
        self._current = {tag: t if isinstance(t, Tensor) else graph.as_graph_element(t)
                         for tag, t in self._tensors.items()}
        self._iter_count = 0

    def before_run(self, run_context):
        self._should_trigger = self._timer is not None and \
            self._timer.should_trigger_for_step(self._iter_count)
        return SessionRunArgs(self._current) if self._should_trigger else None

    def _log(self, values):
        if self._formatter is not None:
            logging.info(self._formatter(values))
            return
        with np.printoptions(suppress=True):
            logging.info(", ".join(f"{tag} = {values[tag]}" for tag in self._tag_order))

    def after_run(self, run_context, run_values):
        if self._should_trigger:
            self._timer.update_last_triggered_step(self._iter_count)
            self._log(run_values.results)
        self._iter_count += 1

    def end(self, session):
        if self._log_at_end:
            self._log(session.run(self._current))


class NanTensorHook(SessionRunHook):
    """After each run: a NaN loss raises NanLossDuringTrainingError (or stops the session
    when fail_on_nan_loss is False)."""

    def __init__(self, loss_tensor, fail_on_nan_loss=True):
        self._loss_tensor, self._fail_on_nan_loss = loss_tensor, fail_on_nan_loss

    def before_run(self, run_context):
        return SessionRunArgs(self._loss_tensor)

    def after_run(self, run_context, run_values):
        if np.isnan(run_values.results):
            if self._fail_on_nan_loss:
                logging.error("Model diverged with loss = NaN.")
                raise NanLossDuringTrainingError
            logging.warning("Model diverged with loss = NaN.")
            run_context.request_stop()


class FinalOpsHook(SessionRunHook):
    """Runs final_ops at end(); their values are final_ops_values."""

    def __init__(self, final_ops, final_ops_feed_dict=None):
        self._final_ops, self._feed = final_ops, final_ops_feed_dict
        self._final_ops_values = None

    @property
    def final_ops_values(self):
        return self._final_ops_values

    def end(self, session):
        if self._final_ops is not None:
            self._final_ops_values = session.run(self._final_ops, feed_dict=self._feed)


class FeedFnHook(SessionRunHook):
    """Feeds feed_fn()'s dict into each run."""

    def __init__(self, feed_fn):
        self.feed_fn = feed_fn

    def before_run(self, run_context):
        return SessionRunArgs(fetches=None, feed_dict=self.feed_fn())
