"""SessionRunHook and the values it exchanges with a MonitoredSession's run (TF1's
tf.train.SessionRunHook, SessionRunArgs, SessionRunContext, SessionRunValues)."""
import collections

__all__ = ["SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues"]


class SessionRunHook:
    """Called by a MonitoredSession: begin() before the graph is finalized,
    after_create_session() once the Session exists, before_run()/after_run() around each
    run (before_run may return SessionRunArgs to add fetches and feeds), end() at close."""

    def begin(self):
        pass

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        return None

    def after_run(self, run_context, run_values):
        pass

    def end(self, session):
        pass


class SessionRunArgs(collections.namedtuple("SessionRunArgs",
                                            ["fetches", "feed_dict", "options"])):
    def __new__(cls, fetches, feed_dict=None, options=None):
        return super().__new__(cls, fetches, feed_dict, options)


class SessionRunContext:
    """The run a hook sees: the caller's arguments, the Session, and a way to stop."""

    def __init__(self, original_args, session):
        self._original_args = original_args
        self._session = session
        self._stop_requested = False

    original_args = property(lambda self: self._original_args)
    session = property(lambda self: self._session)
    stop_requested = property(lambda self: self._stop_requested)

    def request_stop(self):
        self._stop_requested = True


SessionRunValues = collections.namedtuple("SessionRunValues",
                                          ["results", "options", "run_metadata"])
