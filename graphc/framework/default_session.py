"""The default-session stack (TF1's `sess.as_default()`, `tf.get_default_session()`): per
thread, so that Tensor.eval and Operation.run, defined with the graph, find the session to
run in without importing the Session."""
import threading

_local = threading.local()


def _session_stack():
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class DefaultSession:
    """`with sess.as_default():` makes sess the thread's default session."""

    def __init__(self, sess):
        self.sess = sess

    def __enter__(self):
        _session_stack().append(self.sess)
        return self.sess

    def __exit__(self, *exc):
        stack = _session_stack()
        if stack and stack[-1] is self.sess:
            stack.pop()
        elif self.sess in stack:
            stack.remove(self.sess)


def get_default_session():
    stack = _session_stack()
    return stack[-1] if stack else None


def session_for(session, graph):
    """The session to run in: `session`, else the default one, which must hold `graph`."""
    session = session or get_default_session()
    if session is None:
        raise ValueError("Cannot evaluate tensor using `eval()`: No default session is "
                         "registered. Use `with sess.as_default()` or pass an explicit session "
                         "to `eval(session=sess)`")
    if session.graph is not graph:
        raise ValueError("Cannot use the given session to evaluate tensor: the tensor's graph "
                         "is different from the session's graph.")
    return session
