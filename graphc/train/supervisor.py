"""tf.train.Supervisor (TF1): a Session prepared from a logdir's latest checkpoint (or
initialized), with the standard services of a chief in threads: a summary writer for the
logdir fed by the summary op every save_summaries_secs, the steps per second, and a
checkpoint every save_model_secs (the first at once, as TF1's timer threads run first when
they start). managed_session() stops the services and closes the Session when its block
ends; an OutOfRangeError in the block ends it quietly, other errors are re-raised. It
saves no final checkpoint: TF1 scripts call sv.saver.save themselves.

graphc runs one process: is_chief=False is refused."""
import contextlib
import os
import time

from graphc import logging
from graphc.framework.graph import GraphKeys, get_default_graph
from graphc.ops.control_flow_ops import group
from graphc.train.coordinator import Coordinator, LooperThread
from graphc.train.checkpoint_management import latest_checkpoint
from graphc.train.monitored_session import Scaffold
from graphc.train.queue_runner import start_queue_runners
from graphc.train.training_util import get_global_step

__all__ = ["Supervisor"]


class Supervisor:
    USE_DEFAULT = 0

    def __init__(self, graph=None, ready_op=USE_DEFAULT, ready_for_local_init_op=USE_DEFAULT,
                 is_chief=True, init_op=USE_DEFAULT, init_feed_dict=None,
                 local_init_op=USE_DEFAULT, logdir=None, summary_op=USE_DEFAULT,
                 saver=USE_DEFAULT, global_step=USE_DEFAULT, save_summaries_secs=120,
                 save_model_secs=600, recovery_wait_secs=30, stop_grace_secs=120,
                 checkpoint_basename="model.ckpt", session_manager=None,
                 summary_writer=USE_DEFAULT, init_fn=None, local_init_run_options=None):
        if not is_chief:
            raise NotImplementedError("Supervisor(is_chief=False): graphc runs one process, "
                                      "which is the chief")
        if session_manager is not None:
            raise NotImplementedError("Supervisor(session_manager=...): graphc prepares the "
                                      "session itself (restore from logdir, or initialize)")
        self._graph = graph if graph is not None else get_default_graph()
        with self._graph.as_default():
            self._ready_op = _or_default(ready_op, GraphKeys.READY_OP, _report_uninitialized)
            self._init_op = _or_default(init_op, GraphKeys.INIT_OP, _initialize_globals)
            self._local_init_op = _or_default(local_init_op, GraphKeys.LOCAL_INIT_OP,
                                              _initialize_locals)
            self._saver = _or_default(saver, GraphKeys.SAVERS, _new_saver)
            self._summary_op = _or_default(summary_op, GraphKeys.SUMMARY_OP, _merge_all)
            self._global_step = get_global_step() if global_step is Supervisor.USE_DEFAULT \
                else global_step
        self._graph.finalize()
        self._init_feed_dict, self._init_fn = init_feed_dict, init_fn
        self._logdir = logdir
        self._save_path = os.path.join(logdir, checkpoint_basename) if logdir else None
        self._save_summaries_secs, self._save_model_secs = save_summaries_secs, save_model_secs
        self._stop_grace_secs = stop_grace_secs
        self._summary_writer = summary_writer
        if summary_writer == Supervisor.USE_DEFAULT:
            self._summary_writer = _file_writer(logdir) if logdir else None
        self._graph_written = False
        self._coord = Coordinator()
        self._started_threads = []

    # TF1's read-only properties
    is_chief = property(lambda self: True)
    coord = property(lambda self: self._coord)
    init_op = property(lambda self: self._init_op)
    init_feed_dict = property(lambda self: self._init_feed_dict)
    ready_op = property(lambda self: self._ready_op)
    summary_writer = property(lambda self: self._summary_writer)
    summary_op = property(lambda self: self._summary_op)
    save_summaries_secs = property(lambda self: self._save_summaries_secs)
    global_step = property(lambda self: self._global_step)
    saver = property(lambda self: self._saver)
    save_model_secs = property(lambda self: self._save_model_secs)
    save_path = property(lambda self: self._save_path)

    def prepare_or_wait_for_session(self, master="", config=None, wait_for_checkpoint=False,
                                    max_wait_secs=7200, start_standard_services=True):
        """A Session restored from logdir's latest checkpoint, or initialized by init_op,
        init_feed_dict and init_fn(sess); then local_init_op, the ready check, the
        standard services and the graph's queue runners."""
        self._coord.clear_stop()
        sess = self._prepared_session(config)
        self._write_graph()
        if start_standard_services:
            logging.info("Starting standard services.")
            self.start_standard_services(sess)
            logging.info("Starting queue runners.")
            self.start_queue_runners(sess)
        return sess

    @contextlib.contextmanager
    def managed_session(self, master="", config=None, start_standard_services=True,
                        close_summary_writer=True):
        sess = None
        try:
            sess = self.prepare_or_wait_for_session(
                master=master, config=config, start_standard_services=start_standard_services)
            yield sess
        except Exception as e:  # noqa: BLE001 - recorded; stop() re-raises unless clean
            self.request_stop(e)
        finally:
            try:
                self.stop(close_summary_writer=close_summary_writer)
            finally:
                if sess is not None:
                    sess.close()

    def start_standard_services(self, sess):
        """The summary, step-counter and checkpoint threads (only with a logdir)."""
        if not self._logdir:
            logging.warning("Standard services need a 'logdir' passed to the Supervisor")
            return []
        if self._global_step is not None and self._summary_writer is not None:
            from graphc.summary import SessionLog
            step = int(sess.run(self._global_step))
            self._summary_writer.add_session_log(SessionLog(status=SessionLog.START), step)
        threads = []
        if self._save_summaries_secs and self._summary_writer is not None:
            if self._summary_op is not None:
                threads.append(_Service(self, self._save_summaries_secs,
                                        self._write_summaries, sess))
            if self._global_step is not None:
                threads.append(_StepCounter(self, sess))
        if self._saver is not None and self._save_model_secs:
            threads.append(_Service(self, self._save_model_secs, self._save_checkpoint, sess))
        for thread in threads:
            thread.start()
        self._started_threads.extend(threads)
        return threads

    def start_queue_runners(self, sess, queue_runners=None):
        if queue_runners is not None:
            return [t for qr in queue_runners
                    for t in qr.create_threads(sess, coord=self._coord, daemon=True,
                                               start=True)]
        return start_queue_runners(sess, coord=self._coord)

    def loop(self, timer_interval_secs, target, args=None, kwargs=None):
        """A thread calling target every timer_interval_secs until the Supervisor stops."""
        return LooperThread.loop(self._coord, timer_interval_secs, target, args=args,
                                 kwargs=kwargs)

    def stop(self, threads=None, close_summary_writer=True, ignore_live_threads=False):
        """Stops the services and queue runners and joins them (re-raising an error one of
        them, or the managed block, had), then closes the summary writer."""
        self._coord.request_stop()
        try:
            self._coord.join(threads, stop_grace_period_secs=self._stop_grace_secs,
                             ignore_live_threads=ignore_live_threads)
        finally:
            self._started_threads = []
            if close_summary_writer and self._summary_writer is not None:
                from graphc.summary import SessionLog
                self._summary_writer.add_session_log(SessionLog(status=SessionLog.STOP))
                self._summary_writer.close()
                self._graph_written = False

    def request_stop(self, ex=None):
        self._coord.request_stop(ex=ex)

    def should_stop(self):
        return self._coord.should_stop()

    def stop_on_exception(self):
        return self._coord.stop_on_exception()

    def wait_for_stop(self):
        self._coord.wait_for_stop()

    def summary_computed(self, sess, summary, global_step=None):
        """Writes a summary the caller computed, at global_step (default: the current)."""
        if self._summary_writer is None:
            raise RuntimeError("Writing a summary requires a summary writer.")
        if global_step is None and self._global_step is not None:
            global_step = int(sess.run(self._global_step))
        self._summary_writer.add_summary(summary, global_step)

    def _prepared_session(self, config):
        """TF1's SessionManager.prepare_session for a chief."""
        from graphc.session import Session
        sess = Session(config=config, graph=self._graph)
        path = None
        if self._saver is not None and self._logdir:
            path = latest_checkpoint(self._logdir)
        if path:
            self._saver.restore(sess, path)
        else:
            if self._init_op is not None:
                sess.run(self._init_op, feed_dict=self._init_feed_dict)
            if self._init_fn is not None:
                self._init_fn(sess)
        if self._local_init_op is not None:
            sess.run(self._local_init_op)
        not_ready = [] if self._ready_op is None else sess.run(self._ready_op)
        if len(not_ready):
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in not_ready]
            sess.close()
            raise RuntimeError(f"Supervisor: init operations did not make model ready. "
                               f"Init op: {self._init_op}, init fn: {self._init_fn}, "
                               f"uninitialized variables: {names}")
        return sess

    # ------------------------------------------------------------------ services
    def _write_graph(self):
        if self._graph_written or not self._logdir:
            return
        from graphc.graph_io import write_graph
        write_graph(self._graph, self._logdir, "graph.pbtxt")
        if self._summary_writer is not None:
            self._summary_writer.reopen()
            self._summary_writer.add_graph(self._graph)
        self._graph_written = True

    def _write_summaries(self, sess):
        fetches = {"summary": self._summary_op}
        if self._global_step is not None:
            fetches["step"] = self._global_step
        values = sess.run(fetches)
        self._summary_writer.add_summary(values["summary"], values.get("step"))

    def _save_checkpoint(self, sess):
        logging.info("Saving checkpoint to path %s", self._save_path)
        self._saver.save(sess, self._save_path, global_step=self._global_step)
        if self._summary_writer is not None and self._global_step is not None:
            from graphc.summary import SessionLog
            step = int(sess.run(self._global_step))
            self._summary_writer.add_session_log(
                SessionLog(status=SessionLog.CHECKPOINT, checkpoint_path=self._save_path),
                step)


class _Service(LooperThread):
    """A standard service: target(sess) every interval_secs, the first at once."""

    def __init__(self, supervisor, interval_secs, target, sess):
        super().__init__(supervisor.coord, interval_secs, target=target, args=(sess,))


class _StepCounter(LooperThread):
    """Writes global_step/sec every save_summaries_secs."""

    def __init__(self, supervisor, sess):
        super().__init__(supervisor.coord, supervisor.save_summaries_secs)
        self._sv, self._sess = supervisor, sess
        self._tag = f"{supervisor.global_step.op.name}/sec"

    def start_loop(self):
        self._last_time = time.time()
        self._last_step = int(self._sess.run(self._sv.global_step))

    def run_loop(self):
        from graphc.summary import Summary
        now = time.time()
        step = int(self._sess.run(self._sv.global_step))
        elapsed = now - self._last_time
        if elapsed > 0 and step > self._last_step:
            rate = (step - self._last_step) / elapsed
            self._sv.summary_writer.add_summary(
                Summary(value=[Summary.Value(tag=self._tag, simple_value=rate)]), step)
            logging.info("%s: %g", self._tag, rate)
        self._last_time, self._last_step = now, step


def _or_default(given, collection, make):
    """TF1's USE_DEFAULT: the one item of collection, or make() (then added to it); None
    means none."""
    if given is not Supervisor.USE_DEFAULT:
        return given
    return Scaffold.get_or_default(collection.lower(), collection, make)


def _report_uninitialized():
    from graphc.variables import report_uninitialized_variables
    return report_uninitialized_variables()


def _initialize_globals():
    from graphc.variables import global_variables_initializer
    return global_variables_initializer()


def _initialize_locals():
    """TF1's default: the local variables and the lookup tables (which
    global_variables_initializer leaves alone)."""
    from graphc.ops.lookup_ops import tables_initializer
    from graphc.variables import local_variables_initializer
    return group(local_variables_initializer(), tables_initializer())


def _new_saver():
    from graphc.train.saver import Saver
    return Saver()


def _merge_all():
    from graphc.summary import merge_all
    return merge_all()


def _file_writer(logdir):
    from graphc.summary import FileWriter
    return FileWriter(logdir)
