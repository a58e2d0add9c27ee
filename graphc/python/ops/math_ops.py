"""tensorflow.python.ops.math_ops: tf's element-wise math, reductions and matmul."""
from graphc.ops.math_ops import *  # noqa: F401,F403
from graphc.ops.matmul_ops import *  # noqa: F401,F403
from graphc.ops.reduction_ops import *  # noqa: F401,F403
