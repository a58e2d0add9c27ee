"""Scatters into a buffer with no rows: every index is out of range, and the run fails
with InvalidArgumentError naming the first bad index, as TF1's does. The generated code
checks each index and clamps it into [0, rows) so that nothing is written out of bounds,
but no clamp lands inside a buffer of 0 rows: the stores must be skipped, or they write
past the buffer's end (heap corruption that crashed the process, or overwrote a
neighbouring variable, while the run itself still reported the error).

Each case runs in its own process: corruption shows as a crash there, not as a flaky
failure of whichever later test touches the damaged heap.
"""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.backends("compiled", "reference", "gpu_emulated")

ROWS_OF = 4096  # wide rows: a stray store reaches well past any allocator padding

SCATTER_INTO_EMPTY_VARIABLE = f"""
import numpy as np, graphc as gc
before = gc.Variable(np.full((3, {ROWS_OF}), 1.0, np.float32))
empty = gc.Variable(np.zeros((0, {ROWS_OF}), np.float32))
after = gc.Variable(np.full((3, {ROWS_OF}), 2.0, np.float32))
idx = gc.placeholder(gc.int32, [None])
upd = gc.placeholder(gc.float32, [None, {ROWS_OF}])
step = gc.scatter_{{op}}(empty, idx, upd)
with gc.Session() as sess:
    sess.run(gc.global_variables_initializer())
    for _ in range(3):
        try:
            sess.run(step, {{idx: [0, 0, 0, 0], upd: np.full((4, {ROWS_OF}), 7, np.float32)}})
            print("ran")
        except gc.errors.InvalidArgumentError as e:
            print("error:", str(e).splitlines()[0])
    b, a = sess.run([before, after])
    print("neighbours kept:", bool((b == 1).all() and (a == 2).all()))
"""

SEGMENT_SUM_INTO_NO_ROWS = f"""
import numpy as np, graphc as gc
params = gc.placeholder(gc.float32, [None, {ROWS_OF}])
idx = gc.placeholder(gc.int32, [None])
grad = gc.convert_to_tensor(gc.gradients(gc.reduce_sum(gc.gather(params, idx)), params)[0])
with gc.Session() as sess:
    for _ in range(3):
        try:
            sess.run(grad, {{params: np.zeros((0, {ROWS_OF}), np.float32), idx: [0] * 64}})
            print("ran")
        except gc.errors.InvalidArgumentError as e:
            print("error:", str(e).splitlines()[0])
    got = sess.run(grad, {{params: np.ones((2, {ROWS_OF}), np.float32), idx: [1, 1, 0]}})
    print("rows:", got.sum(1).tolist())
"""


def run_alone(script):
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", textwrap.dedent(script)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


@pytest.mark.parametrize("op", ["update", "add", "sub"])
def test_scatter_into_a_variable_of_no_rows_fails_cleanly(backend, op):
    lines = run_alone(SCATTER_INTO_EMPTY_VARIABLE.replace("{op}", op))
    assert lines == ["error: indices[0] = 0 is not in [0, 0)"] * 3 + ["neighbours kept: True"]


def test_gather_gradient_into_no_rows_fails_cleanly_and_the_next_run_is_right(backend):
    lines = run_alone(SEGMENT_SUM_INTO_NO_ROWS)
    assert lines == ["error: indices[0] = 0 is not in [0, 0)"] * 3 + \
        [f"rows: [{float(ROWS_OF)}, {float(2 * ROWS_OF)}]"]
