"""tf.train.Coordinator: threads agree on when to stop, and the first error reaches join().

request_stop(ex) records the first exception that is not a clean-stop type (by default
OutOfRangeError, the end of an input); join() waits for the threads, gives them
stop_grace_period_secs once a stop is requested, and re-raises the recorded exception.
"""
import contextlib
import sys
import threading
import time

from graphc import errors

__all__ = ["Coordinator", "LooperThread"]


class Coordinator:
    def __init__(self, clean_stop_exception_types=None):
        if clean_stop_exception_types is None:
            clean_stop_exception_types = (errors.OutOfRangeError,)
        self._clean_stop_exception_types = tuple(clean_stop_exception_types)
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._exc_info_to_raise = None
        self._joined = False
        self._registered_threads = set()

    def _filter_exception(self, ex):
        """exc_info of ex, or None for a clean stop."""
        if isinstance(ex, tuple):
            ex2 = ex[1]
        else:
            ex2, ex = ex, (type(ex), ex, ex.__traceback__)
        if isinstance(ex2, self._clean_stop_exception_types):
            return None
        return ex

    def request_stop(self, ex=None):
        """Asks every thread to stop; ex (an exception or exc_info) is re-raised by join()
        unless it is a clean-stop type or an earlier one was recorded."""
        with self._lock:
            ex = self._filter_exception(ex) if ex is not None else None
            if self._joined:
                if ex is not None and isinstance(ex[1], Exception):
                    raise ex[1].with_traceback(ex[2])
                return
            if ex is not None and self._exc_info_to_raise is None:
                if not isinstance(ex[1], BaseException):
                    raise ValueError(f"ex must be an exception or exc_info, got {ex!r}")
                self._exc_info_to_raise = ex
            self._stop_event.set()

    def clear_stop(self):
        with self._lock:
            self._joined = False
            self._exc_info_to_raise = None
            self._stop_event.clear()

    def should_stop(self):
        return self._stop_event.is_set()

    @contextlib.contextmanager
    def stop_on_exception(self):
        """Requests a stop with the exception raised inside the block (swallowing it)."""
        try:
            yield
        except Exception:  # noqa: BLE001 - any error stops the threads, and join raises it
            self.request_stop(ex=sys.exc_info())

    def wait_for_stop(self, timeout=None):
        return self._stop_event.wait(timeout)

    def register_thread(self, thread):
        with self._lock:
            self._registered_threads.add(thread)

    def join(self, threads=None, stop_grace_period_secs=120, ignore_live_threads=False):
        """Waits for the threads (and the registered ones) to end; RuntimeError names those
        still alive stop_grace_period_secs after a stop was requested; then re-raises the
        exception given to request_stop, if any."""
        with self._lock:
            threads = list(self._registered_threads | set(threads or ()))
        while any(t.is_alive() for t in threads) and not self.wait_for_stop(1.0):
            pass
        deadline = time.monotonic() + stop_grace_period_secs
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0))
        stragglers = [t.name for t in threads if t.is_alive()]
        with self._lock:
            self._joined = True
            self._registered_threads = set()
            if self._exc_info_to_raise:
                _, ex, tb = self._exc_info_to_raise
                raise ex.with_traceback(tb)
        if stragglers and not ignore_live_threads:
            raise RuntimeError("Coordinator stopped with threads still running: "
                               + " ".join(stragglers))

    @property
    def joined(self):
        return self._joined

    def raise_requested_exception(self):
        with self._lock:
            if self._exc_info_to_raise:
                _, ex, tb = self._exc_info_to_raise
                raise ex.with_traceback(tb)


class LooperThread(threading.Thread):
    """A thread calling target(*args, **kwargs) (or run_loop()) until the coordinator
    stops: every timer_interval_secs seconds, the first call at once, or back to back when
    timer_interval_secs is None. An exception stops the coordinator, which re-raises it
    in join()."""

    def __init__(self, coord, timer_interval_secs, target=None, args=None, kwargs=None):
        if not isinstance(coord, Coordinator):
            raise ValueError(f"LooperThread: coord must be a tf.train.Coordinator, given "
                             f"{coord!r}")
        super().__init__()
        self.daemon = True
        self._coord = coord
        self._timer_interval_secs = timer_interval_secs
        self._target = target
        self._args = tuple(args or ())
        self._kwargs = dict(kwargs or {})
        if target is None and (args or kwargs):
            raise ValueError("LooperThread: 'args' and 'kwargs' argument require that you "
                             "also pass 'target'")
        self._coord.register_thread(self)

    @staticmethod
    def loop(coord, timer_interval_secs, target, args=None, kwargs=None):
        """Starts a LooperThread calling target; returns it."""
        looper = LooperThread(coord, timer_interval_secs, target=target, args=args,
                              kwargs=kwargs)
        looper.start()
        return looper

    def run(self):
        with self._coord.stop_on_exception():
            self.start_loop()
            if self._timer_interval_secs is None:
                while not self._coord.should_stop():
                    self.run_loop()
            else:
                next_time = time.time()
                while not self._coord.wait_for_stop(next_time - time.time()):
                    next_time += self._timer_interval_secs
                    self.run_loop()
            self.stop_loop()

    def start_loop(self):
        """Called once before the first run_loop (for subclasses)."""

    def stop_loop(self):
        """Called once after the last run_loop (for subclasses)."""

    def run_loop(self):
        if self._target is not None:
            self._target(*self._args, **self._kwargs)
