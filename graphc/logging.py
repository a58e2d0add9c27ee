"""tf.logging: TF1's logging functions on Python's logging, through the logger named
"tensorflow" (as TF1's, so handlers and levels set on it by name apply). Levels are the
standard ones (DEBUG=10 ... FATAL=50); the default verbosity is the logger's effective level
(WARN unless something configured logging), so tf.logging.info prints only after
set_verbosity(tf.logging.INFO), as in TF1.
"""
import logging as _logging
import sys as _sys
import threading as _threading

DEBUG, INFO, WARN, ERROR, FATAL = (_logging.DEBUG, _logging.INFO, _logging.WARN,
                                   _logging.ERROR, _logging.FATAL)

_logger = None
_logger_lock = _threading.Lock()
_counts = {}  # call site -> calls so far (log_every_n, log_first_n)


def get_logger():
    """The "tensorflow" logger, with a handler to stderr unless the root logger has one
    (TF1 does the same, so that messages are seen without configuring logging)."""
    global _logger
    with _logger_lock:
        if _logger is None:
            logger = _logging.getLogger("tensorflow")
            if not _logging.getLogger().handlers:
                handler = _logging.StreamHandler(_sys.stderr)
                handler.setFormatter(_logging.Formatter(_logging.BASIC_FORMAT))
                logger.addHandler(handler)
            _logger = logger
        return _logger


def _emit(level, msg, args, kwargs, depth=3):
    """Logs as the caller `depth` frames up (the user's line, not this module's, as TF1's
    findCaller override does)."""
    kwargs.setdefault("stacklevel", depth)
    get_logger().log(level, msg, *args, **kwargs)


def log(level, msg, *args, **kwargs):
    _emit(level, msg, args, kwargs)


def debug(msg, *args, **kwargs):
    _emit(DEBUG, msg, args, kwargs)


def info(msg, *args, **kwargs):
    _emit(INFO, msg, args, kwargs)


def warning(msg, *args, **kwargs):
    _emit(WARN, msg, args, kwargs)


warn = warning


def error(msg, *args, **kwargs):
    _emit(ERROR, msg, args, kwargs)


def fatal(msg, *args, **kwargs):
    """Logs at FATAL; as TF1's, it does not end the program."""
    _emit(FATAL, msg, args, kwargs)


def vlog(level, msg, *args, **kwargs):
    _emit(level, msg, args, kwargs)


def _call_site():
    frame = _sys._getframe(2)
    return frame.f_code.co_filename, frame.f_lineno


def _count_call(site):
    with _logger_lock:
        count = _counts.get(site, 0)
        _counts[site] = count + 1
    return count


def log_every_n(level, msg, n, *args):
    """Logs on the 1st, (n+1)th, (2n+1)th ... call from the same line."""
    if _count_call(_call_site()) % n == 0:
        _emit(level, msg, args, {})


def log_first_n(level, msg, n, *args):
    """Logs on the first n calls from the same line."""
    if _count_call(_call_site()) < n:
        _emit(level, msg, args, {})


def log_if(level, msg, condition, *args):
    if condition:
        _emit(level, msg, args, {})


def get_verbosity():
    return get_logger().getEffectiveLevel()


def set_verbosity(v):
    get_logger().setLevel(v)


def flush():
    for handler in get_logger().handlers:
        handler.flush()


def TaskLevelStatusMessage(msg):  # noqa: N802 - TF's name
    error(msg)
