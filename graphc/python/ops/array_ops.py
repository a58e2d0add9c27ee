"""tensorflow.python.ops.array_ops: tf's array functions."""
from graphc.ops.array_ops import *  # noqa: F401,F403
from graphc.ops.constant_ops import placeholder, placeholder_with_default  # noqa: F401
from graphc.ops.mask_ops import *  # noqa: F401,F403
from graphc.ops.nd_index_ops import *  # noqa: F401,F403
