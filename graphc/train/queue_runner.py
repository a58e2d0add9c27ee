"""tf.train.QueueRunner, add_queue_runner and start_queue_runners: threads that run a
queue's enqueue ops in a Session until its input ends or the Coordinator stops them.

Each thread runs its enqueue op in a loop. OutOfRangeError or CancelledError (the input
ended, or the queue was closed) ends it quietly, and the last thread to end runs the close
op, so the dequeuer gets the remaining elements and then OutOfRangeError. Any other error
is handed to the Coordinator (request_stop), or raised without one. One more thread per
runner waits for the Coordinator to stop and then cancels the queue (close with
cancel_pending_enqueues), releasing enqueues waiting for room.
"""
import threading

from graphc import errors
from graphc.framework.graph import GraphKeys, get_default_graph

__all__ = ["QueueRunner", "add_queue_runner", "start_queue_runners"]


class QueueRunner:
    def __init__(self, queue=None, enqueue_ops=None, close_op=None, cancel_op=None,
                 queue_closed_exception_types=None, queue_runner_def=None, import_scope=None):
        if queue_runner_def is not None:
            raise ValueError("QueueRunner(queue_runner_def=...) is not supported by graphc")
        if queue is None or not enqueue_ops:
            raise ValueError("QueueRunner needs a queue and a non-empty list of enqueue_ops")
        self._queue = queue
        self._enqueue_ops = list(enqueue_ops)
        self._close_op = close_op if close_op is not None else queue.close()
        self._cancel_op = cancel_op if cancel_op is not None else \
            queue.close(cancel_pending_enqueues=True)
        self._exception_types = tuple(queue_closed_exception_types or
                                      (errors.OutOfRangeError, errors.CancelledError))
        self._lock = threading.Lock()
        self._runs_per_session = {}
        self._exceptions_raised = []

    queue = property(lambda self: self._queue)
    enqueue_ops = property(lambda self: list(self._enqueue_ops))
    close_op = property(lambda self: self._close_op)
    cancel_op = property(lambda self: self._cancel_op)
    exceptions_raised = property(lambda self: list(self._exceptions_raised))
    name = property(lambda self: self._queue.name)

    def _run(self, sess, enqueue_op, coord):
        decremented = False
        try:
            while not (coord is not None and coord.should_stop()):
                try:
                    sess.run(enqueue_op)
                except self._exception_types:
                    with self._lock:
                        self._runs_per_session[sess] -= 1
                        decremented = True
                        if self._runs_per_session[sess] == 0:
                            try:
                                sess.run(self._close_op)
                            except Exception:  # noqa: BLE001 - the queue may be closed already
                                pass
                    return
        except Exception as e:  # noqa: BLE001 - handed to the coordinator, as TF1
            if coord is not None:
                coord.request_stop(e)
            else:
                with self._lock:
                    self._exceptions_raised.append(e)
                raise
        finally:
            if not decremented:
                with self._lock:
                    self._runs_per_session[sess] -= 1

    def _close_on_stop(self, sess, coord):
        coord.wait_for_stop()
        try:
            sess.run(self._cancel_op)
        except Exception:  # noqa: BLE001 - a closed Session: nothing left to cancel
            pass

    def create_threads(self, sess, coord=None, daemon=False, start=False):
        """The runner's threads for sess (registered with coord), started if `start`."""
        with self._lock:
            if self._runs_per_session.get(sess, 0) > 0:
                return []  # already running in this Session
            self._runs_per_session[sess] = len(self._enqueue_ops)
            self._exceptions_raised = []
        threads = [threading.Thread(target=self._run, args=(sess, op, coord), daemon=daemon,
                                    name=f"QueueRunnerThread-{self.name}-{op.name}")
                   for op in self._enqueue_ops]
        if coord is not None:
            threads.append(threading.Thread(target=self._close_on_stop, args=(sess, coord),
                                            daemon=daemon,
                                            name=f"QueueRunnerCloser-{self.name}"))
        for t in threads:
            if coord is not None:
                coord.register_thread(t)
            if start:
                t.start()
        return threads


def add_queue_runner(qr, collection=GraphKeys.QUEUE_RUNNERS):
    get_default_graph().add_to_collection(collection, qr)


def start_queue_runners(sess=None, coord=None, daemon=True, start=True,
                        collection=GraphKeys.QUEUE_RUNNERS):
    """Starts the threads of every QueueRunner in the collection; returns them."""
    if sess is None:
        from graphc.framework.default_session import get_default_session
        sess = get_default_session()
        if sess is None:
            raise ValueError("Cannot start queue runners: No default session is registered. "
                             "Use `with sess.as_default()` or pass an explicit session to "
                             "tf.start_queue_runners(sess=sess)")
    threads = []
    for qr in sess.graph.get_collection(collection):
        threads.extend(qr.create_threads(sess, coord=coord, daemon=daemon, start=start))
    return threads
