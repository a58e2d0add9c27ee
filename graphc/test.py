"""tf.test: TestCase with TF1's assertions and sessions, and main().

As TF1's TensorFlowTestCase, each test starts with a fresh default graph and fixed random
seeds; test_session()/cached_session() hand out one Session per test (closed at the end),
session() a new one each time; the Session and its graph are the defaults inside `with`.
Tensors given to the assertions are evaluated first.
"""
import contextlib
import random
import re
import shutil
import tempfile
import unittest

import numpy as np

from graphc import errors
from graphc.framework.graph import Tensor, device, get_default_graph, reset_default_graph

_SEED = 87654321  # TF1's TensorFlowTestCase seed


def main(argv=None):
    """Runs the tests of the __main__ module (unittest's runner), exiting with its status."""
    unittest.main(module="__main__", argv=argv)


def is_built_with_cuda():
    return True  # graphc generates PTX itself; whether a GPU is present is is_gpu_available


def is_gpu_available(cuda_only=False, min_cuda_compute_capability=None):
    from graphc.session import _find_gpu
    return _find_gpu() is not None


def gpu_device_name():
    return "/device:GPU:0" if is_gpu_available() else ""


class TestCase(unittest.TestCase):
    """tf.test.TestCase: unittest.TestCase with TF1's helpers."""

    def __init__(self, methodName="runTest"):  # noqa: N803 - unittest's name
        super().__init__(methodName)
        self._cached_session = None
        self._temp_dir = None

    def setUp(self):
        super().setUp()
        random.seed(_SEED)
        np.random.seed(_SEED)
        reset_default_graph()
        from graphc.ops.random_ops import set_random_seed
        set_random_seed(_SEED)

    def tearDown(self):
        self._close_cached_session()
        super().tearDown()

    def _close_cached_session(self):
        if self._cached_session is not None:
            self._cached_session.close()
            self._cached_session = None

    def get_temp_dir(self):
        """A directory of this test's own, removed when the test ends."""
        if self._temp_dir is None:
            self._temp_dir = tempfile.mkdtemp(prefix=f"{self._testMethodName}_")
            self.addCleanup(shutil.rmtree, self._temp_dir, True)
        return self._temp_dir

    # --------------------------------------------------------------------- sessions
    @contextlib.contextmanager
    def _as_defaults(self, sess, force_gpu):
        with sess.graph.as_default(), sess.as_default():
            if force_gpu:
                with device("/device:GPU:0"):
                    yield sess
            else:
                yield sess

    def session(self, graph=None, config=None, use_gpu=False, force_gpu=False):
        """A new Session (default graph unless `graph`), the default inside `with`."""
        from graphc.session import Session
        sess = Session(graph=graph, config=config)
        return self._closing(sess, force_gpu)

    @contextlib.contextmanager
    def _closing(self, sess, force_gpu):
        try:
            with self._as_defaults(sess, force_gpu):
                yield sess
        finally:
            sess.close()

    def cached_session(self, graph=None, config=None, use_gpu=False, force_gpu=False):
        """This test's Session (made on first use over `graph` or the default graph)."""
        from graphc.session import Session
        graph = graph if graph is not None else get_default_graph()
        if self._cached_session is None or self._cached_session._closed:
            self._cached_session = Session(graph=graph, config=config)
        elif self._cached_session.graph is not graph:
            raise ValueError("The graph used to get the cached session is different than the "
                             "one that was used to create the session. Maybe create a new "
                             "session with self.session()")
        return self._as_defaults(self._cached_session, force_gpu)

    def test_session(self, graph=None, config=None, use_gpu=False, force_gpu=False):
        """TF1's older name of cached_session."""
        if self.id().endswith(".test_session"):
            # its name makes unittest collect it as a test; TF1 skips it the same way
            self.skipTest("Not a test.")
        return self.cached_session(graph, config, use_gpu, force_gpu)

    def evaluate(self, tensors):
        """The values of tensors (nested) in the default Session, or this test's."""
        from graphc.framework.default_session import get_default_session
        sess = get_default_session()
        if sess is not None:
            return sess.run(tensors)
        with self.cached_session() as sess:
            return sess.run(tensors)

    # -------------------------------------------------------------------- assertions
    def _value(self, a):
        """An ndarray of a value, evaluating tensors and their lists as TF1's do."""
        if isinstance(a, Tensor) or (isinstance(a, (list, tuple)) and a
                                     and all(isinstance(x, Tensor) for x in a)):
            a = self.evaluate(a)
        return np.asarray(a)

    def _check_shapes(self, a, b, msg):
        self.assertEqual(a.shape, b.shape,
                         f"Shape mismatch: expected {a.shape}, got {b.shape}. {msg or ''}")

    def assertAllClose(self, a, b, rtol=1e-6, atol=1e-6, msg=None):  # noqa: N802
        """Nested structures (dicts, lists, tuples) of values equal in structure and close
        elementwise: |a - b| <= atol + rtol * |b|, NaN matching NaN."""
        if isinstance(a, dict) or isinstance(b, dict):
            self.assertIsInstance(a, dict, msg)
            self.assertIsInstance(b, dict, msg)
            self.assertEqual(set(a), set(b), f"mismatched keys. {msg or ''}")
            for k in a:
                self.assertAllClose(a[k], b[k], rtol, atol, f"key {k!r}: {msg or ''}")
            return
        if _is_nested_list(a) and _is_nested_list(b) and len(a) == len(b) and \
                not (_is_numeric(a) and _is_numeric(b)):
            for i, (x, y) in enumerate(zip(a, b)):
                self.assertAllClose(x, y, rtol, atol, f"item {i}: {msg or ''}")
            return
        a, b = self._value(a), self._value(b)
        self._check_shapes(a, b, msg)
        if a.dtype == np.float16 or b.dtype == np.float16:
            a, b = a.astype(np.float32), b.astype(np.float32)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=msg or "")

    def assertAllCloseAccordingToType(self, a, b, rtol=1e-6, atol=1e-6,  # noqa: N802
                                      float_rtol=1e-6, float_atol=1e-6, half_rtol=1e-3,
                                      half_atol=1e-3, bfloat16_rtol=1e-2, bfloat16_atol=1e-2,
                                      msg=None):
        """assertAllClose with the tolerance widened to float_* for float32 values and
        half_* for float16 ones (the looser of the two where both are given)."""
        a, b = self._value(a), self._value(b)
        kinds = {a.dtype, b.dtype}
        if kinds & {np.dtype(np.float32), np.dtype(np.complex64)}:
            rtol, atol = max(rtol, float_rtol), max(atol, float_atol)
        if np.dtype(np.float16) in kinds:
            rtol, atol = max(rtol, half_rtol), max(atol, half_atol)
        self.assertAllClose(a, b, rtol=rtol, atol=atol, msg=msg)

    def assertAllEqual(self, a, b, msg=None):  # noqa: N802
        a, b = self._value(a), self._value(b)
        self._check_shapes(a, b, msg)
        same = a == b
        if a.dtype.kind in "fc":
            same = np.logical_or(same, np.logical_and(np.isnan(a), np.isnan(b)))
        if not np.all(same):
            diff = np.argwhere(~np.asarray(same))
            raise self.failureException(
                f"{msg or ''}\nnot equal where = {diff[:10].tolist()}\nnot equal lhs = "
                f"{a[tuple(diff[:10].T)] if a.ndim else a}\nnot equal rhs = "
                f"{b[tuple(diff[:10].T)] if b.ndim else b}")

    def assertNear(self, f1, f2, err, msg=None):  # noqa: N802
        self.assertTrue(abs(f1 - f2) <= err,
                        f"{f1} != {f2} +/- {err}{' (' + msg + ')' if msg else ''}")

    def assertArrayNear(self, farray1, farray2, err, msg=None):  # noqa: N802
        self.assertEqual(len(farray1), len(farray2), msg)
        for f1, f2 in zip(farray1, farray2):
            self.assertNear(float(f1), float(f2), err, msg)

    def assertAllInRange(self, target, lower_bound, upper_bound,  # noqa: N802
                         open_lower_bound=False, open_upper_bound=False):
        target = self._value(target)
        low = target > lower_bound if open_lower_bound else target >= lower_bound
        high = target < upper_bound if open_upper_bound else target <= upper_bound
        if not np.all(low & high):
            raise self.failureException(
                f"{np.count_nonzero(~(low & high))} of the {target.size} element(s) are "
                f"outside the range {lower_bound}..{upper_bound}")

    def assertAllGreater(self, a, comparison_target):  # noqa: N802
        self.assertGreater(np.min(self._value(a)), comparison_target)

    def assertAllLess(self, a, comparison_target):  # noqa: N802
        self.assertLess(np.max(self._value(a)), comparison_target)

    def assertAllGreaterEqual(self, a, comparison_target):  # noqa: N802
        self.assertGreaterEqual(np.min(self._value(a)), comparison_target)

    def assertAllLessEqual(self, a, comparison_target):  # noqa: N802
        self.assertLessEqual(np.max(self._value(a)), comparison_target)

    def assertShapeEqual(self, np_array, tf_tensor, msg=None):  # noqa: N802
        self.assertEqual(list(np.shape(np_array)), tf_tensor.get_shape().as_list(), msg)

    @contextlib.contextmanager
    def assertRaisesWithPredicateMatch(self, exception_type,  # noqa: N802
                                       expected_err_re_or_predicate):
        """Expects an exception_type whose message matches the regex (re.search) or for
        which the predicate is true."""
        if callable(expected_err_re_or_predicate):
            predicate = expected_err_re_or_predicate
        else:
            def predicate(e):
                return re.search(expected_err_re_or_predicate, str(e)) is not None
        try:
            yield
        except exception_type as e:
            if not predicate(e):
                raise self.failureException(
                    f"Exception of type {type(e).__name__} raised, but the message "
                    f"{str(e)!r} does not match {expected_err_re_or_predicate!r}") from e
        else:
            raise self.failureException(f"Exception of type {exception_type.__name__} not "
                                        "raised")

    def assertRaisesOpError(self, expected_err_re_or_predicate):  # noqa: N802
        return self.assertRaisesWithPredicateMatch(errors.OpError,
                                                   expected_err_re_or_predicate)


def _is_nested_list(x):
    return isinstance(x, (list, tuple)) and not hasattr(x, "dtype")


def _is_numeric(x):
    """A list that NumPy makes one numeric array of (compared as a whole, as TF1 does)."""
    try:
        return np.asarray(x).dtype.kind in "biufc"
    except ValueError:  # ragged
        return False


def get_temp_dir():
    """A temporary directory for this process's tests (tf.test.get_temp_dir)."""
    global _process_temp_dir
    if _process_temp_dir is None:
        _process_temp_dir = tempfile.mkdtemp(prefix="graphc_test_")
    return _process_temp_dir


_process_temp_dir = None
